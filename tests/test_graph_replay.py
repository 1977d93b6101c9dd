"""CUDA/HIP graph replays are linked to their graph launch and, through it, to the op around it.

Kineto gives every kernel a replayed graph runs the correlation id of the `cudaGraphLaunch` /
`hipGraphLaunch` call; those kernels count as device time of the op (or annotation) that holds the
launch, of its module and of every enclosing op.
"""
from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest
from conftest import trace_path

import profuse
from profuse.cli import main

GRAPH_LAUNCHES = ("cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch")


def _x(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _small_trace(tmp_path):
    """A decode step: a module runs one eager kernel, then replays a graph of three kernels."""
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 100),
        _x("python_function", "nn.Module: Decoder_0", 1, 98),
        _x("cpu_op", "aten::add", 2, 5),
        _x("cuda_runtime", "cudaLaunchKernel", 3, 2, correlation=10),
        _x("cpu_op", "model::replay", 10, 20),
        _x("cuda_runtime", "cudaGraphLaunch", 11, 15, correlation=11),
        _x("kernel", "add_kernel", 6, 4, pid=0, tid=7, correlation=10, stream=7, device=0),
        _x("kernel", "gemm_a", 30, 10, pid=0, tid=7, correlation=11, stream=7, device=0),
        _x("kernel", "gemm_b", 40, 20, pid=0, tid=7, correlation=11, stream=7, device=0),
        _x("kernel", "norm_c", 60, 5, pid=0, tid=8, correlation=11, stream=8, device=0),
    ]
    p = tmp_path / "graph.json"
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def test_replayed_kernels_link_to_the_op_around_the_launch(tmp_path):
    path = _small_trace(tmp_path)
    with profuse.load(path) as t:
        rows = t.sql_rows("SELECT d.name, d.link, o.name, d.unlinked, m.name FROM events d "
                     "LEFT JOIN events o ON o.id = d.op LEFT JOIN scopes m ON m.id = d.module "
                     "WHERE d.kind = 'kernel' ORDER BY d.ts")[1]
        ops = dict(t.sql_rows("SELECT name, self_device FROM events WHERE kind IN ('cpu_op', 'annotation')")[1])
        totals = dict(t.sql_rows("SELECT name, device_total FROM events WHERE kind IN ('cpu_op', 'annotation')")[1])
    assert rows == [("add_kernel", "correlation", "aten::add", None, "Decoder"),
                    ("gemm_a", "graph", "model::replay", None, "Decoder"),
                    ("gemm_b", "graph", "model::replay", None, "Decoder"),
                    ("norm_c", "graph", "model::replay", None, "Decoder")]
    assert ops["model::replay"] == (10 + 20 + 5) * 1000
    assert totals["ProfilerStep#1"] == (4 + 10 + 20 + 5) * 1000


def test_replay_counts_in_report_totals(tmp_path, capsys):
    path = _small_trace(tmp_path)
    assert main(["report", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["kernels"] == 4
    assert doc["totals"]["kernels_linked"] == 4
    assert doc["totals"]["unlinked"] == {}
    by_name = {o["name"]: o for o in doc["ops"]}
    assert by_name["model::replay"]["self_device_us"] == pytest.approx(35.0)
    assert by_name["model::replay"]["kernels"] == 3


def _independent_owners(path):
    """(graph kernels, all kernels) per innermost cpu_op/user_annotation holding their launch: plain json."""
    ev = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X"]
    launches = {e["args"]["correlation"]: e for e in ev
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    holders = [e for e in ev if e.get("cat") in ("cpu_op", "user_annotation")]
    graph: dict[str, list[float]] = defaultdict(list)
    every: dict[str, list[float]] = defaultdict(list)
    for k in ev:
        if k.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        launch = launches.get(k.get("args", {}).get("correlation"))
        if launch is None:
            continue
        around = [o for o in holders if (o["pid"], o["tid"]) == (launch["pid"], launch["tid"])
                  and o["ts"] <= launch["ts"] < o["ts"] + o["dur"]]
        if not around:
            continue
        owner = max(around, key=lambda o: (o["ts"], -o["dur"]))
        every[owner["name"]].append(k["dur"])
        if launch["name"] in GRAPH_LAUNCHES:
            graph[owner["name"]].append(k["dur"])
    return graph, every


def test_sglang_decode_graph_kernels_sit_under_the_launching_annotation(capsys):
    path = trace_path("mi300_sglang_decode_cudagraph.json.gz")
    graph, every = _independent_owners(path)
    assert len(graph) == 1, "one graph launch in this trace"
    (owner, durs), = graph.items()
    assert len(durs) > 400
    assert main(["report", str(path), "--format", "json", "--group-by", "op"]) == 0
    doc = json.loads(capsys.readouterr().out)
    ops = {o["name"]: o for o in doc["ops"]}
    assert ops[owner]["self_device_us"] == pytest.approx(sum(every[owner]), rel=1e-6)
    assert ops[owner]["kernels"] == len(every[owner])
    assert "graph_replay" not in doc["totals"]["unlinked"]
    assert doc["totals"]["kernels_linked"] + sum(doc["totals"]["unlinked"].values()) == doc["totals"]["kernels"]
    with profuse.load(path) as t:
        (n_graph,) = t.sql_rows("SELECT count(*) FROM events WHERE link = 'graph'")[1][0]
    assert n_graph == len(durs)


def test_sglang_table_shows_the_owner(capsys):
    path = trace_path("mi300_sglang_decode_cudagraph.json.gz")
    (owner, _durs), = _independent_owners(path)[0].items()
    assert main(["report", str(path), "--top", "5", "--no-advice"]) == 0
    out = capsys.readouterr().out
    first_rows = out[:out.find("\n", out.find(owner[:20]))]
    assert owner[:20] in first_rows


def test_graph_replayed_by_a_compiled_region_counts_in_compiled(tmp_path):
    # GIVEN a compiled region (cudagraph trees) that replays a graph of two kernels directly
    events = [
        _x("cpu_op", "Torch-Compiled Region: 0/0", 0, 50),
        _x("cuda_runtime", "cudaGraphLaunch", 5, 10, correlation=3),
        _x("kernel", "triton_poi_fused_add_0", 20, 7, pid=0, tid=7, correlation=3, stream=7, device=0),
        _x("kernel", "triton_red_fused_sum_1", 27, 9, pid=0, tid=7, correlation=3, stream=7, device=0),
    ]
    p = tmp_path / "compiled_graph.json"
    p.write_text(json.dumps({"traceEvents": events}))
    from profuse.analysis.compiled import compiled_regions

    with profuse.load(p) as t:
        (region,) = compiled_regions(t).regions
    assert region.device_us == pytest.approx(16.0)


def test_sglang_replayed_kernels_carry_their_launchs_module_and_annotation():
    from oracle import category, complete_events, innermost_around, is_module, launch_of, launches, module_class

    path = trace_path("mi300_sglang_decode_cudagraph.json.gz")
    events = complete_events(path)
    by_corr = {**launches(events), **{e["args"]["correlation"]: e for e in events
                                      if category(e) == "hip_runtime" and "correlation" in (e.get("args") or {})}}
    want = {}
    for d in events:
        launch = launch_of(d, by_corr) if category(d) == "kernel" else None
        if launch is not None and launch["name"] in GRAPH_LAUNCHES:
            scope = innermost_around(events, launch, lambda o: category(o) == "user_annotation" or is_module(o))
            module = innermost_around(events, launch, is_module)
            want[d["order"]] = (scope["name"] if scope else None, module_class(module["name"]) if module else None)
    assert len(want) > 400 and {s for s, _ in want.values()} == {"step[DECODE bs=32]"}
    with profuse.load(path) as t:
        got = dict((i, (s, m)) for i, s, m in t.sql_rows(
            "SELECT d.id, s.label, m.name FROM events d LEFT JOIN scopes s ON s.id = d.scope "
            "LEFT JOIN scopes m ON m.id = d.module WHERE d.link = 'graph'")[1])
    assert got == want


def test_replay_inside_a_module_under_the_launching_op_takes_that_module(tmp_path, capsys):
    # vLLM piecewise: the graph launch sits in a GraphModule scope, itself inside the annotation that is
    # the innermost op around the launch; the replayed kernels belong to the module, not to no module
    events = [
        _x("user_annotation", "execute_model", 0, 100),
        _x("python_function", "nn.Module: GraphModule_0", 2, 90),
        _x("hip_runtime", "hipGraphLaunch", 10, 5, correlation=4),
        _x("kernel", "fused_a", 20, 30, pid=0, tid=7, correlation=4, stream=7, device=0),
        _x("kernel", "fused_b", 50, 10, pid=0, tid=7, correlation=4, stream=7, device=0),
        _x("cpu_op", "aten::argmax", 95, 4),
        _x("hip_runtime", "hipLaunchKernel", 96, 2, correlation=5),
        _x("kernel", "argmax_k", 100, 2, pid=0, tid=7, correlation=5, stream=7, device=0),
    ]
    p = tmp_path / "piecewise.json"
    p.write_text(json.dumps({"traceEvents": events}))
    with profuse.load(p) as t:
        rows = t.sql_rows("SELECT d.name, o.name, m.name, s.name FROM events d LEFT JOIN events o ON o.id = d.op "
                     "LEFT JOIN scopes m ON m.id = d.module LEFT JOIN scopes s ON s.id = d.scope "
                     "WHERE d.kind = 'kernel' ORDER BY d.ts")[1]
    assert rows == [("fused_a", "execute_model", "GraphModule", "GraphModule"),
                    ("fused_b", "execute_model", "GraphModule", "GraphModule"),
                    ("argmax_k", "aten::argmax", None, "execute_model")]
    assert main(["report", str(p), "--format", "json", "--group-by", "module"]) == 0
    mods = {o["name"]: o for o in json.loads(capsys.readouterr().out)["ops"]}
    assert mods["GraphModule"]["device_total_us"] == pytest.approx(40.0) and mods["GraphModule"]["kernels"] == 2


def test_a_graph_launch_over_1_ms_is_launch_work_not_the_hosts_other_work():
    # GIVEN sglang's decode step on an MI300X: one hipGraphLaunch submits 544 kernels in 1.57 ms (ROCm
    # submits each node), past the 1 ms a plain launch may take before it is a blocked call
    import oracle

    from profuse.analysis.advice.interruptions import interruptions
    from profuse.analysis.diagnosis import diagnose

    path = trace_path("mi300_sglang_decode_cudagraph.json.gz")
    with profuse.load(path) as t:
        d, rows = diagnose(t), interruptions(t)
    # THEN the device's idle inside the call is the graph_launch lever, as the raw JSON shows it
    levers = {lv.kind: lv for lv in (*d.levers, *d.small_items)}
    assert levers["graph_launch"].gain_us == pytest.approx(oracle.graph_launch_idle_us(path), abs=1.0)
    assert levers["graph_launch"].gain_us > 200
    # AND no CPU-work evidence names the graph launch as the host's other work
    assert "hipGraphLaunch" not in (levers["cpu_work"].evidence if "cpu_work" in levers else "")
    # AND the scope's Launch CPU counts the call, as the raw JSON's launch calls inside the scope sum
    name, lo, hi, _busy = oracle.steady_spans(path)[0]
    row = next(r for r in rows if r.scope == name)
    assert row.launch_us == pytest.approx(oracle.launch_cpu_us(path, lo, hi), abs=1.0)
    assert row.launch_us > 1572


@pytest.mark.parametrize(("trace", "scope"), [
    ("mi300_sglang_decode_cudagraph.json.gz",
     "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk32785sqsq32sqsk32785)"),
    ("mi300_normalization_layers.json.gz", "BatchNorm affine=False"),
])
def test_queue_delay_runs_from_the_launch_calls_end(trace, scope):
    # GIVEN a graph replay (kernels queue behind one another after a 1.57 ms hipGraphLaunch) and a scope whose
    # first launch blocked 331.6 ms loading its module (the kernel started right after the call returned)
    import oracle

    from profuse.analysis.advice.interruptions import interruptions

    path = trace_path(trace)
    with profuse.load(path) as t:
        row = next(r for r in interruptions(t, top=100) if r.scope == scope)
    # THEN the queue delay is the raw JSON's, counted from each call's end as the budget's queued time is
    assert row.queue_delay_us == pytest.approx(oracle.queue_delay_us(path, scope), abs=0.01)
    if "BatchNorm" in scope:
        assert row.queue_delay_us < 100   # not the blocked call's 331 ms
