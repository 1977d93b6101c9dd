"""``profuse run`` step marks hold each forward call, and a CPU-only bundle reports per-step CPU time.

Checked on the raw JSON of a real capture (plain json, the nesting rule of tests/oracle.py): every
outermost forward's ops and module scope lie inside exactly one ``ProfilerStep#N``, no step mark
straddles a module scope, and the report's ``steps`` equal each mark's interval.
"""
from __future__ import annotations

import gzip
import json
import textwrap

import pytest

torch = pytest.importorskip("torch")

from profuse.cli import main

SCRIPT = textwrap.dedent("""
    import sys, torch
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 64)
        def forward(self, x):
            return torch.relu(self.lin(x)) * 2
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Block(), Block()
        def forward(self, x):
            return self.b(self.a(x)).sum()
    net = Net()
    with torch.no_grad():
        for i in range(6):
            x = torch.randn(16, 64)       # work between forwards: in no step
            y = net(x)
            z = (x * 3).mean()
    sys.exit(3)
""")


def _events(bundle):
    doc = json.loads(gzip.decompress((bundle / "trace.json.gz").read_bytes()))
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def _holds(outer, inner) -> bool:
    return outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    script = tmp / "model.py"
    script.write_text(SCRIPT)
    out = tmp / "bundle"
    code = main(["run", "--out", str(out), "--warmup", "2", "--steps", "3", "--", "python", str(script)])
    return code, out


def test_each_forward_lies_inside_exactly_one_step(run):
    code, out = run
    assert code == 3
    events = _events(out)
    steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    nets = [e for e in events if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: Net")]
    assert len(steps) == 3 and len(nets) == 3
    for net in nets:
        # the forward's own ops (started inside the Net scope) are inside exactly one step
        ops = [e for e in events if e.get("cat") == "cpu_op" and e["tid"] == net["tid"] and _holds(net, e)]
        assert ops
        holders = [s for s in steps if all(_holds(s, o) for o in ops)]
        assert len(holders) == 1, net
        # and no step mark straddles the module scope: a step is inside it, or apart from it
        for s in steps:
            apart = s["ts"] >= net["ts"] + net["dur"] or s["ts"] + s["dur"] <= net["ts"]
            assert apart or _holds(net, s), (s, net)
    # the work between forwards (randn, mul, mean) is in no step
    between = [e for e in events if e.get("cat") == "cpu_op" and e["name"] in ("aten::randn", "aten::mean")
               and not any(_holds(n, e) for n in nets)]
    assert between and not any(_holds(s, e) for s in steps for e in between)


def test_cpu_steps_report_per_step_cpu_time(run, capsys):
    _code, out = run
    assert main(["report", str(out), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cpu_only"] and doc["capture"]["status"] == "complete" and doc["capture"]["script_exit_code"] == 3
    marks = sorted((e for e in _events(out) if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    assert [s["name"] for s in doc["steps"]] == [m["name"] for m in marks]
    for s, m in zip(doc["steps"], marks):
        assert s["window_us"] == pytest.approx(m["dur"], abs=0.01)
        assert 0 < s["busy_us"] <= s["window_us"] and s["busy_us"] + s["idle_us"] == pytest.approx(s["window_us"])
        assert s["activities"] >= 1 and s["launch_bound"] is False
    # the op table's CPU time is within the span: no step double counted
    assert doc["totals"]["device_us"] <= doc["trace"]["span_us"] + 1
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "3 profiler step(s):" in text and "of CPU time each" in text
    assert "The profiled script exited with code 3; the capture is complete" in text


def test_profile_steps_hold_each_forward(tmp_path):
    import profuse

    net = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU())
    cfg = profuse.ProfileConfig(out=tmp_path / "p", warmup=1, steps=3)
    with torch.no_grad(), profuse.profile(cfg) as p:
        for _ in range(4):
            net(torch.randn(8, 32))
            p.step()
    events = _events(p.bundle)
    steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    fwd = [e for e in events if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: Sequential")]
    assert len(steps) == 3 and len(fwd) == 3
    for f in fwd:
        assert sum(_holds(s, f) for s in steps) == 1, f
