"""Trace health (docs/advisor.md, "Trace health"): what a trace holds and lacks, one record every renderer
shows. Counts are checked against tests/oracle.py's health_counts, computed from the raw JSON; each
finding against a hand-built trace that has that one fault."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import oracle
import pytest
from conftest import FIXTURES, SHARED

import profuse
from profuse.analysis.health import trace_health

TRACES = sorted([*(SHARED / "traces").glob("*.json.gz"), *(SHARED / "traces" / "multirank").glob("*.json.gz"),
                 *FIXTURES.glob("h200/*/trace.json.gz")])


@pytest.mark.parametrize("path", TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_health_counts_are_the_raw_traces(path: Path) -> None:
    with profuse.load(path) as t:
        h = trace_health(t)
    got = {"launch_calls": h.launch_calls, "device_activities": h.device_activities,
           "linked_by_correlation": h.linked, "launches_without_activity": h.launches_without_activity,
           "same_stream_overlaps": h.same_stream_overlaps, "before_window": h.before_window,
           "after_window": h.after_window, "python_events": h.python_events}
    assert got == oracle.health_counts(path)
    assert h.linked + sum(h.without_launch.values()) == h.device_activities
    assert sum(h.idle_launch_names.values()) == h.launches_without_activity


def _x(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _healthy() -> list[dict[str, Any]]:
    """Two steps of an op launching one kernel each, every kernel after its launch, inside the window."""
    ev = []
    for i in range(2):
        t = 100 * i
        ev += [_x("user_annotation", f"ProfilerStep#{i}", t, 90), _x("cpu_op", "aten::add", t + 1, 20),
               _x("cuda_runtime", "cudaLaunchKernel", t + 2, 4, correlation=i + 1),
               _x("kernel", "add_kernel", t + 10, 5, pid=0, tid=7, correlation=i + 1, stream=7, device=0)]
    return ev


def _kernel(ts: float, dur: float, corr: int | None, stream: int = 7) -> dict[str, Any]:
    args: dict[str, Any] = {"stream": stream, "device": 0}
    if corr is not None:
        args["correlation"] = corr
    return _x("kernel", "k", ts, dur, pid=0, tid=stream, **args)


FAULTS: dict[str, Any] = {
    "no_device_activity": lambda ev: [e for e in ev if e["cat"] != "kernel"],
    "without_launch": lambda ev: [*ev, _kernel(50, 5, 77)],                      # its launch is not in the trace
    "launches_without_activity": lambda ev: [*ev, _x("cuda_runtime", "cudaLaunchKernel", 60, 2, correlation=9)],
    "same_stream_overlaps": lambda ev: [*ev, _x("cuda_runtime", "cudaLaunchKernel", 3, 1, correlation=5),
                                             _kernel(12, 5, 5)],                  # inside the first add_kernel
    "outside_window": lambda ev: [*ev, _x("cuda_runtime", "cudaLaunchKernel", 180, 1, correlation=6),
                                       _kernel(185, 50, 6)],                      # runs on after the last host event
    "clock_offset": lambda ev: [*ev, _x("cuda_runtime", "cudaLaunchKernel", 70, 4, correlation=8),
                                     _kernel(60, 3, 8, stream=9)],                # starts 10 µs before its launch
    "no_steps": lambda ev: [e for e in ev if e["cat"] != "user_annotation"],
    "python_stacks": lambda ev: [*ev, *(_x("python_function", f"f{i}", 1 + i, 1) for i in range(5))],
}


@pytest.mark.parametrize("fault", [None, *FAULTS])
def test_each_finding_comes_from_its_fault_alone(tmp_path: Path, fault: str | None) -> None:
    ev = _healthy() if fault is None else FAULTS[fault](_healthy())
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    with profuse.load(p, cache=False) as t:
        h = trace_health(t)
    assert [f.key for f in h.findings] == ([] if fault is None else [fault])
    for f in h.findings:   # each says what, what it changes in the diagnosis, and how to capture better
        assert f.text and f.effect and f.fix
    if fault == "clock_offset":
        assert h.device_behind_us == pytest.approx(10.0)
    if fault == "launches_without_activity":
        assert h.idle_launch_names == {"cudaLaunchKernel": 1}


def test_every_launch_late_is_a_finding(tmp_path: Path) -> None:
    ev = [e if e["cat"] != "kernel" else dict(e, ts=e["ts"] + 150) for e in _healthy()]
    for e in ev:
        if e["cat"] == "user_annotation":
            e["dur"] = 250
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    with profuse.load(p, cache=False) as t:
        h = trace_health(t)
    # launches end at 6 and 106; kernels start at 160 and 260: the least wait is 154 µs
    assert "all_late" in [f.key for f in h.findings] and h.all_late_us == pytest.approx(154.0)


def test_every_renderer_carries_the_same_health(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from profuse.cli import main
    from profuse.payloads.build import overview_of

    path = SHARED / "traces" / "compare_test.json.gz"
    with profuse.load(path) as t:
        h = trace_health(t)
        overview = overview_of(t)
    assert main(["report", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)["health"]
    assert doc["device_activities"] == h.device_activities == 17 and doc["linked"] == h.linked == 1
    assert [f["key"] for f in doc["findings"]] == [f.key for f in h.findings]
    assert overview.health == h
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Trace health: 17 device activities (1 with their launch call)" in out
    assert all(f.text in out.replace("\n", " ") or f.text[:60] in out for f in h.findings)


@pytest.mark.parametrize("names, said", [
    (["execute_context_0(0)_generation_4(4)", "step[DECODE bs=4]"], "serving steps (sglang, vllm)"),
    (["execute_context_0(0)_generation_4(4)"], "serving steps (vllm)"),
    (["ProfilerStep#0", "step[DECODE bs=4]"], "serving steps (sglang)"),
    (["ProfilerStep#0"], "ProfilerStep marks"),
])
def test_steps_are_said_to_come_from_every_engine_whose_annotation_names_them(tmp_path: Path, names: list[str],
                                                                             said: str) -> None:
    # GIVEN one step marked by annotations nested one in the next (a vLLM-style name around sglang's, as the
    # shared MI300X sglang trace records its decode step)
    ev = [_x("user_annotation", n, i, 100 - 2 * i) for i, n in enumerate(names)] + [_x("cpu_op", "aten::add", 10, 5)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    with profuse.load(p, cache=False) as t:
        h = trace_health(t)
    # THEN the health names every engine there, and a ProfilerStep# around a serving step adds none
    assert (h.steps, h.steps_from) == (1, said)


def test_the_shared_sglang_trace_names_both_engines_of_its_step() -> None:
    import gzip
    import re

    path = SHARED / "traces" / "mi300_sglang_decode_cudagraph.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    names = [e["name"] for e in doc["traceEvents"] if e.get("cat") == "user_annotation"]
    formats = {"vllm": any(re.match(r"execute_(\d+_)?context_\d+", n) for n in names),
               "sglang": any(re.match(r"step\[[A-Z_]+", n) for n in names)}
    with profuse.load(path, cache=False) as t:
        h = trace_health(t)
    assert formats == {"vllm": True, "sglang": True}
    assert h.steps_from == "serving steps (sglang, vllm)"
