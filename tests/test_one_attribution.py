"""One attribution of device time to modules: the Modules view (explorer and HTML report), the op
table's ``--group-by module`` and the hotspots give each nn.Module class the same device time, graph
replays and compiled regions' kernels included, and that time is tests/oracle.py's (raw JSON: each
activity's launch call, the module frames around it)."""
from __future__ import annotations

from pathlib import Path

import oracle
import pytest
from conftest import ALL_TRACES, trace_id

import profuse
from profuse.analysis.advice.hotspots import hotspots
from profuse.analysis.optable import op_table
from profuse.payloads.build import modules_of


def _per_class(nodes: list[tuple[str, str, float]]) -> dict[str, float]:
    """Modules-view rows (path, class, µs) per class, each class's outermost nodes only."""
    out: dict[str, float] = {}
    for path, name, us in nodes:
        if name not in path.split("/")[:-1]:
            out[name] = out.get(name, 0.0) + us
    return out


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_every_view_gives_a_module_the_same_device_time(path: Path) -> None:
    with profuse.load(path) as t:
        if t.cpu_only:
            pytest.skip("CPU-only: module time is CPU time, not device attribution")
        table = {r.name: r.device_total_us for r in op_table(t, group_by="module").rows}
        view = _per_class([(n.path, n.name, n.device_us) for n in modules_of(t).nodes])
        spots = {h.name: h.device_us for h in hotspots(t) if h.kind == "module"}
    expected = oracle.device_us_by_module_class(path)
    assert set(table) == set(view)
    for cls, us in table.items():
        assert view[cls] == pytest.approx(us, abs=0.01), cls
        assert us == pytest.approx(expected.get(cls, 0.0), abs=0.01), cls
    for cls, us in spots.items():
        assert us == pytest.approx(table[cls], abs=0.001), cls


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_a_compiled_regions_listed_kernels_make_up_its_device_time(path: Path) -> None:
    from profuse.analysis.compiled import compiled_regions

    with profuse.load(path) as t:
        if t.cpu_only:
            pytest.skip("CPU-only: a region's time is its calls' CPU time, its kernels C++ functions")
        regions = compiled_regions(t).regions
    expected = oracle.compiled_region_device(path)
    assert {r.name for r in regions if r.device_events} == set(expected)
    for r in regions:
        n, us = expected.get(r.name, (0, 0.0))
        # THEN the listed kernels (inductor's and extern ones) sum to the region's device time: the oracle's
        assert sum(k.calls for k in r.kernels) == r.device_events == n
        assert sum(k.device_us for k in r.kernels) == pytest.approx(r.device_us, abs=0.01) == pytest.approx(us, abs=0.01)


def test_the_overview_categories_and_the_budget_class_a_kernel_alike(tmp_path: Path) -> None:
    # GIVEN a step with a GEMM, vLLM's custom all-reduce kernel (no nccl in its name) and a copy, one after another
    import json

    from profuse.analysis.breakdown import device_breakdown
    from profuse.analysis.diagnosis import diagnose
    from profuse.analysis.steps import device_busy

    def x(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args: object) -> dict[str, object]:
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}

    ev = [x("user_annotation", "ProfilerStep#1", 0, 100), x("cpu_op", "aten::mm", 1, 5),
          x("cpu_op", "vllm::all_reduce", 10, 5), x("cpu_op", "aten::copy_", 20, 5)]
    for i, (name, cat, ts, dur) in enumerate([("ampere_sgemm_128x64_nn", "kernel", 30, 10),
                                              ("void cross_device_reduce_1stage<float, 8>(...)", "kernel", 40, 5),
                                              ("Memcpy DtoD (Device -> Device)", "gpu_memcpy", 45, 3)]):
        ev += [x("cuda_runtime", "cudaLaunchKernel", 2 + 10 * i, 2, correlation=i + 1),
               x(cat, name, ts, dur, pid=0, tid=7, correlation=i + 1, stream=7, device=0)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}))
    with profuse.load(path) as t:
        b = device_breakdown(t, device_busy(t))
        leaves = {lf.key: lf.us for lf in diagnose(t).budget}
    # THEN both call the all-reduce communication, the GEMM compute and the copy a copy
    assert (b.compute_us, b.communication_us, b.memory_copy_us) == (10, 5, 3)
    assert (leaves["busy/gemm"], leaves["busy/communication"], leaves["busy/memcpy_d2d"]) == (10, 5, 3)


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_the_overview_cards_are_the_budget_grouped(path: Path) -> None:
    from profuse.payloads.build import overview_of

    with profuse.load(path) as t:
        o = overview_of(t)
    assert o.advice is not None and o.advice.diagnosis is not None
    d = o.advice.diagnosis
    leaves = {lf.key: lf.us for lf in d.budget}
    # THEN the cards add up to the budget's span, idle is its idle leaves and communication its own leaf
    assert o.categories_of == "budget"
    assert sum(o.categories.values()) == pytest.approx(d.span_us, abs=0.001 * max(len(d.budget), 1))
    assert o.categories["idle"] == pytest.approx(sum(v for k, v in leaves.items() if k.split("/")[0] == "idle"),
                                                 abs=0.01)
    comm = leaves.get("busy/communication", leaves.get("cpu/communication", 0.0))
    assert o.categories["communication"] == pytest.approx(comm, abs=0.001)
    if any(k.startswith("cpu/") for k in leaves):   # a CPU-only trace: its ops and Python are the budget's CPU time
        cpu = sum(v for k, v in leaves.items() if k.startswith("cpu/"))
        assert o.categories["ops"] + o.categories["python"] + o.categories["communication"] == pytest.approx(cpu, abs=0.01)


@pytest.mark.parametrize("name", ["cpu_only_gloo_rank34.json.gz", "h200/cpu_model_on_gpu_host"])
def test_a_cpu_only_op_table_has_one_column_set_and_no_step_rows(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from conftest import FIXTURES, TRACES

    from profuse.cli import main

    path = FIXTURES / name / "trace.json.gz" if name.startswith("h200/") else TRACES / name
    steps = [str(e["name"]) for e in oracle.step_annotations(path)]
    assert main(["report", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["report", str(path), "--top", "0"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("Name") and "Calls" in line)
    cols = [c.strip() for c in header.split("┃")]
    # THEN each column once, no kernels on the CPU, the steps in the step table and not among the ops,
    # and the op rows add up to the table's total
    assert len(cols) == len(set(cols)) and "Kernels" not in cols, cols
    assert [s["name"] for s in doc["steps"]] == steps and steps
    assert not set(steps) & {o["name"] for o in doc["ops"]}
    assert sum(o["self_device_us"] for o in doc["ops"]) == pytest.approx(doc["totals"]["device_us"], abs=0.01)


@pytest.mark.parametrize(("base", "new"), [("compare_base", "compare_test"),
                                           ("v100_ns_timestamps", "v100_rank1_of2_216k_events")])
def test_diff_device_busy_per_step_is_the_step_tables(base: str, new: str, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN two traces whose steps hold device work they did not launch themselves (compare_*: each step
    # launched one 4 µs kernel, while 1.47 ms of copies run in its span)
    import json
    import statistics

    from conftest import trace_path

    from profuse.cli import main

    a, b = trace_path(f"{base}.json.gz"), trace_path(f"{new}.json.gz")
    assert main(["diff", str(a), str(b), "--format", "json"]) == 0
    (v,) = [v for v in json.loads(capsys.readouterr().out)["verdicts"] if v["metric"] == "device_busy"]
    # THEN the diff's device_busy samples are each step's busy time as the step table counts it: the union of
    # every device activity in the step's span (raw JSON), whoever launched it
    for side, path in (("a", a), ("b", b)):
        busy = [w for _n, _lo, _hi, w in oracle.step_spans(path)]
        assert v[f"{side}_steps"] == len(busy)
        assert v[f"{side}_median_us"] == pytest.approx(statistics.median(busy), abs=0.01)
