"""Every claim the report makes is bounded by what the trace holds, on every shared trace.

The bounds are arithmetic facts, so they hold whatever the trace: busy time never exceeds its window
and busy + idle = window, every percentage is in [0, 100], a predicted saving never exceeds the device
time of the kernels it comes from, no roofline exceeds 100% of peak, every device event is linked or
counted under a reason, and ops' self device time never adds up to more than the device time.
"""
from __future__ import annotations

import json

import pytest
from conftest import ALL_TRACES

from profuse.cli import main

EPS = 1e-3  # µs: values are rounded to ns in the JSON


def _pct_ok(v) -> bool:
    return v is None or 0.0 <= v <= 100.0




@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name)
def test_report_claims_are_bounded(path, capsys):
    assert main(["report", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    totals = doc["totals"]
    assert totals["kernels_linked"] + sum(totals["unlinked"].values()) == totals["kernels"]
    if not doc["cpu_only"]:
        assert sum(o["self_device_us"] for o in doc["ops"]) <= totals["device_us"] + EPS
    busy = doc["device_busy"]
    if doc["cpu_only"]:
        assert busy is None and doc["steps"] == [], "a CPU-only trace claims nothing about device idle"
    else:
        assert busy is not None
        assert 0 <= busy["busy_us"] <= busy["window_us"] + EPS
        assert busy["busy_us"] <= totals["device_us"] + EPS, "a union is never longer than its parts"
        assert _pct_ok(busy["busy_pct"])
    for s in doc["steps"]:
        assert 0 <= s["busy_us"] <= s["window_us"] + EPS
        assert s["busy_us"] + s["idle_us"] == pytest.approx(s["window_us"], abs=EPS)
        assert _pct_ok(s["busy_pct"])
        assert not (s["launch_bound"] and (s["busy_pct"] or 0) >= 50)
    for i in doc["interruptions"]:
        assert i["busy_us"] >= 0 and i["idle_us"] >= 0
        assert _pct_ok(i["busy_pct"])
        assert not (i["launch_bound"] and i["busy_pct"] >= 50)
        assert not (doc["cpu_only"] and i["launch_bound"])
    for h in doc["hotspots"]:
        assert _pct_ok(h["share_pct"]), h
    for c in doc["fusion_candidates"]:
        assert 0 <= c["predicted_saving_us"] <= c["device_us"] + EPS, c
        if c["bytes_now"] and c["bytes_fused"] >= c["bytes_now"] and c["kernels_per_instance"] <= 1:
            assert c["predicted_saving_us"] == 0, f"fusing moves no fewer bytes and launches no fewer kernels: {c}"
    for r in doc["roofline"]:
        assert _pct_ok(r["pct_of_roofline"]), r
