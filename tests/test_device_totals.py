"""Per-op device time on real CUDA traces equals a plain, independent computation.

The independent way: stdlib json, kernel -> runtime call with the same correlation id -> the
innermost cpu_op/user_annotation on the same pid/tid whose interval [ts, ts + dur) holds the call's
start (brute force; a call that starts inside an op belongs to it even if rounding makes it end 1 µs late).
"""
from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest
from conftest import trace_path

from profuse.cli import main

CUDA_TRACES = ["a100_alexnet.json.gz", "a100_event_sync.json.gz", "a100_event_sync_multistream.json.gz",
               "a100_triton_kernel.json.gz", "h100_bert_small.json.gz", "h100_vit_falconsai.json.gz",
               "multirank/sampled_rank-0.json.gz", "mi300_bert_small.json.gz"]


def independent_device_time(path) -> dict[str, float]:
    ev = json.load(gzip.open(path))["traceEvents"]
    x = [e for e in ev if e.get("ph") == "X"]
    runtime = {e["args"]["correlation"]: e for e in x
               if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops = defaultdict(list)
    for i, e in enumerate(x):
        if e.get("cat") in ("cpu_op", "user_annotation"):
            ops[(e["pid"], e["tid"])].append(dict(e, order=i))
    out: dict[str, float] = defaultdict(float)
    for k in x:
        if k.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        launch = runtime.get(k.get("args", {}).get("correlation"))
        if launch is None:  # graph replays count under the op around their graph launch
            continue
        lo = launch["ts"]
        holders = [o for o in ops[(launch["pid"], launch["tid"])] if o["ts"] <= lo < o["ts"] + o["dur"]]
        if holders:
            # innermost: latest start, then shortest, then later in the file (parents are written first)
            inner = max(holders, key=lambda o: (o["ts"], -o["dur"], o["order"]))
            out[inner["name"]] += k["dur"]
    return out


@pytest.mark.parametrize("name", CUDA_TRACES)
def test_per_op_device_time_matches_independent(name, capsys):
    path = trace_path(name)
    expected = independent_device_time(path)
    assert expected, "the trace has linked kernels"
    assert main(["report", str(path), "--format", "json"]) == 0
    got = {o["name"]: o["self_device_us"] for o in json.loads(capsys.readouterr().out)["ops"] if o["self_device_us"]}
    assert set(got) == set(expected)
    for op, us in expected.items():
        assert got[op] == pytest.approx(us, rel=1e-6, abs=2e-3), op
