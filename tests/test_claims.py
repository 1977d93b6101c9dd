"""Every claim the report makes is bounded by what the trace holds, on every shared trace.

The bounds are arithmetic facts, so they hold whatever the trace: busy time never exceeds its window
and busy + idle = window, every percentage is in [0, 100], a predicted saving never exceeds the device
time of the kernels it comes from, no roofline exceeds 100% of peak, every device event is linked or
counted under a reason, and ops' self device time never adds up to more than the device time. A
scope's or a step's busy time counts each device activity once, so it never exceeds the device's.
"""
from __future__ import annotations

import bisect
import json
import re

import pytest
from conftest import ALL_TRACES

import profuse
from profuse.cli import main

EPS = 1e-3  # µs: values are rounded to ns in the JSON
TOL = 1.0   # µs, for sums of rounded figures


def _pct_ok(v) -> bool:
    return v is None or 0.0 <= v <= 100.0


def _report(path, capsys) -> dict:
    assert main(["report", str(path), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name)
def test_report_claims_are_bounded(path, capsys):
    doc = _report(path, capsys)
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
        window = i["busy_us"] + i["idle_us"]
        if window > 0:
            assert i["busy_pct"] == pytest.approx(100 * i["busy_us"] / window, abs=0.05 + EPS), i
        if not doc["cpu_only"]:
            # a scope's activities are some of the device's, each counted once: never busier than
            # the device, and its window (the union of its calls' windows) lies inside the device's
            assert i["busy_us"] <= busy["busy_us"] + TOL, i
            assert window <= busy["window_us"] + TOL, i
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


def _title(kind: str, name: str) -> str:
    """A scope instance's row title, as docs/advisor.md names interruption rows."""
    return f"nn.Module: {name}" if kind == "module" else re.sub(r"#\d+$", "#*", name)


def _union_us(intervals: list[tuple[int, int]]) -> float:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return (total + (0 if cur_e is None else cur_e - cur_s)) / 1e3


def _inside(merged: list[tuple[int, int]], t: int) -> bool:
    """Whether t lies in one of the disjoint, sorted intervals [s, e)."""
    i = bisect.bisect_right(merged, (t, float("inf"))) - 1
    return i >= 0 and t < merged[i][1]


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name)
def test_scopes_and_steps_count_each_activity_once(path, capsys):
    """Per interruption row, recomputed from the loaded tables in plain Python: the scope's device
    activities are those launched inside any of its calls, each once, so their number is
    instances x kernels per instance and busy is their union; each step's activities are disjoint."""
    doc = _report(path, capsys)
    if doc["cpu_only"]:
        return
    with profuse.load(path) as t:
        scopes = t.con.execute("SELECT kind, name, ts, ts + dur FROM scopes").fetchall()
        acts = t.con.execute("""
            SELECT d.ts, d.ts + d.dur, l.ts FROM events d JOIN events l ON l.id = d.launch
            WHERE d.kind IN ('kernel', 'memcpy', 'memset')""").fetchall()
        steps = t.con.execute("""SELECT ts, ts + dur FROM events
            WHERE kind = 'annotation' AND name LIKE 'ProfilerStep#%'""").fetchall()
    calls: dict[str, list[tuple[int, int]]] = {}
    for kind, name, lo, hi in scopes:
        calls.setdefault(_title(kind, name), []).append((lo, hi))
    for row in doc["interruptions"]:
        merged = _merged(calls[row["scope"]])
        mine = [(s, e) for s, e, launch in acts if _inside(merged, launch)]
        assert row["instances"] * row["kernels_per_instance"] == pytest.approx(len(mine), abs=0.005 * row["instances"]), row
        assert row["busy_us"] == pytest.approx(_union_us(mine), abs=EPS), row
    in_steps = [a for a in acts if _inside(_merged(steps), a[2])]
    assert sum(s["activities"] for s in doc["steps"]) == len(in_steps), "an activity counted in two steps"
