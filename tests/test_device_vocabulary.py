"""The device vocabulary (trace/vocabulary.py): one entry per device family, read by the loader and every
analysis. A device it does not know is added as one entry, and its trace then loads and reads as any
other's: its calls are runtime calls, its kernels link to their launch and op, its launch work is in the
budget, and the report names it."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import profuse
from profuse.analysis.busy import launch_calls
from profuse.analysis.diagnosis import diagnose
from profuse.trace import vocabulary
from profuse.trace.vocabulary import Device


def _x(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args: object) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _xyz_trace(tmp_path: Path) -> Path:
    """A step of 20 ops on an unknown accelerator: each op's runtime call (category xyz_runtime, named
    submitWork: no word of any known family's launches) puts a 2 µs kernel on the device."""
    ev = [_x("user_annotation", "ProfilerStep#1", 0, 1000)]
    for i in range(20):
        t = 10 + 40 * i
        ev += [_x("cpu_op", "aten::add", t, 30), _x("xyz_runtime", "submitWork", t + 20, 8, correlation=i + 1),
               _x("kernel", "xyz_add_kernel", t + 32, 2, pid=0, tid=3, correlation=i + 1, stream=3, device=0)]
    p = tmp_path / "xyz.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


@pytest.fixture
def own_vocabulary() -> Iterator[None]:
    """The vocabulary as shipped, restored in place after the test (a registered entry stays in this test)."""
    shipped = list(vocabulary.DEVICES)
    yield
    vocabulary.DEVICES[:] = shipped
    vocabulary._rules.cache_clear()


def test_a_device_is_one_vocabulary_entry(tmp_path: Path, own_vocabulary: None) -> None:
    path = _xyz_trace(tmp_path)
    # GIVEN the vocabulary as shipped: the calls are not runtime calls, so nothing links or launches
    with profuse.load(path, cache=False) as t:
        kinds = dict(t.con.execute("SELECT name, kind FROM events WHERE name = 'submitWork' LIMIT 1").fetchall())
        linked = t.con.execute("SELECT count(op) FROM events WHERE kind = 'kernel'").fetchall()[0][0]
    assert kinds == {"submitWork": "other"} and linked == 0
    # WHEN the family is added as one entry
    vocabulary.register(Device("XYZ", runtime_categories=("xyz_runtime",), launch_parts=("submitwork",),
                               marker_categories=("xyz_runtime",)))
    # THEN its calls are runtime calls, each kernel links to its launch and op, the report names the device,
    # and the launch work is the budget's launch overhead and the cuda_graphs lever's evidence
    with profuse.load(path, cache=False) as t:
        rows = t.con.execute("""SELECT l.name, o.name FROM events k JOIN events l ON l.id = k.launch
                                JOIN events o ON o.id = k.op WHERE k.kind = 'kernel'""").fetchall()
        starts, _ends = launch_calls(t)
        label = t.device_label
        d = diagnose(t)
    assert rows == [("submitWork", "aten::add")] * 20
    assert label == "XYZ" and starts.size == 20
    leaves = {lf.key: lf.us for lf in d.budget}
    assert leaves["idle/launch_overhead"] > 0 and leaves["busy/elementwise"] == pytest.approx(40.0)
    assert d.levers and d.levers[0].kind == "cuda_graphs"


def test_the_rules_are_the_union_of_the_entries() -> None:
    # every family's calls, as the loader and the analyses test them
    assert vocabulary.is_launch("cudaLaunchKernel") and vocabulary.is_launch("hipMemcpyAsync")
    assert vocabulary.is_launch("runFunction") and vocabulary.is_launch("nrt_execute")
    assert not vocabulary.is_launch("cudaStreamSynchronize") and not vocabulary.is_launch("cudaMemcpy")
    assert vocabulary.moves_work("cudaMemcpy") and not vocabulary.moves_work("cudaGetDevice")
    assert vocabulary.is_graph_launch("cudaGraphLaunch_v10000") and vocabulary.is_graph_launch("hipGraphLaunch")
    assert {"cuda_runtime", "hip_runtime", "mtia_runtime", "privateuse1_driver"} <= vocabulary.runtime_categories()
    assert vocabulary.device_of_calls(["nrt_execute"]) == "Neuron" and vocabulary.device_of_calls(["x"]) is None
