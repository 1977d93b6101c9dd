"""On a CPU profile recorded here with torch.profiler, the op table equals torch's key_averages() (no op of this
model runs inside one of its own name, where the op table counts the inner call's time once: test_op_nesting)."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from profuse.cli import main


def test_op_table_matches_key_averages(tmp_path, capsys):
    # GIVEN a small MLP profiled for a few steps on the CPU, exported as a Kineto trace
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128),
                                torch.nn.Linear(128, 16))
    x = torch.randn(32, 64)
    with torch.no_grad():
        model(x)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(3):
                with torch.profiler.record_function("step"):
                    model(x).softmax(-1)
    trace = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(trace))
    ka = {e.key: e for e in prof.key_averages()}
    # WHEN profuse reads the same trace
    assert main(["report", str(trace), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    ops = {o["name"]: o for o in doc["ops"]}
    # THEN every op torch lists is there with the same calls and times (within 1%)
    assert doc["trace"]["device_kind"] == "CPU"
    for key, e in ka.items():
        assert key in ops, key
        o = ops[key]
        assert o["calls"] == e.count, key
        assert o["cpu_total_us"] == pytest.approx(e.cpu_time_total, rel=0.01, abs=0.5), key
        assert o["self_cpu_us"] == pytest.approx(e.self_cpu_time_total, rel=0.01, abs=0.5), key
        # the CPU is the device: device time is self CPU time
        assert o["self_device_us"] == pytest.approx(o["self_cpu_us"])
    total_self = sum(e.self_cpu_time_total for e in ka.values())
    assert sum(o["self_cpu_us"] for o in ops.values() if o["name"] in ka) == pytest.approx(total_self, rel=0.01)
