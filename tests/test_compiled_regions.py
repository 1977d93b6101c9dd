"""Compiled regions own what they launch at any depth and what their graph launches replay.

torch 2.x nests ``Torch-Compiled Region`` > ``CompiledFunction`` > ``## Call CompiledFxGraph ... ##``
> kernels, and runs a compiled backward as ``CompiledFunctionBackward``. Expected numbers come from
tests/oracle.py over the raw JSON (a device event belongs to the outermost region call holding its
launch call's start), never from profuse.
"""
from __future__ import annotations

import json

import pytest
from oracle import compiled_region_device, compiled_region_inductor_ops, complete_events

import profuse
from profuse.analysis.compiled import compiled_regions
from profuse.cli import main


def _x(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _k(name, ts, dur, corr, stream=7):
    return _x("kernel", name, ts, dur, pid=0, tid=stream, correlation=corr, stream=stream, device=0)


def _write(tmp_path, name, events):
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}))
    return p


def _cuda_style(tmp_path):
    """Forward: Region > CompiledFunction > CompiledFxGraph > triton op > launch, an extern aten::mm,
    and a module scope; backward on the autograd thread: CompiledFunctionBackward > CompiledFxGraph."""
    ev = [
        _x("python_function", "nn.Module: Block_0", 0, 200),
        _x("cpu_op", "Torch-Compiled Region: 0/0", 2, 190),
        _x("cpu_op", "CompiledFunction", 10, 170),
        _x("user_annotation", "## Call CompiledFxGraph abc ##", 12, 160),
        _x("cpu_op", "triton_poi_fused_add_mul_0", 20, 20),
        _x("cuda_runtime", "cuLaunchKernel", 22, 10, correlation=1),
        _x("cpu_op", "aten::mm", 50, 30),
        _x("cuda_runtime", "cudaLaunchKernel", 55, 10, correlation=2),
        _x("cpu_op", "triton_red_fused_sum_1", 90, 20),
        _x("cuda_runtime", "cuLaunchKernel", 92, 10, correlation=3),
        _x("cpu_op", "triton_poi_fused_add_mul_0", 120, 20),
        _x("cuda_runtime", "cuLaunchKernel", 122, 10, correlation=4),
        # an eager op after the region: not the region's
        _x("cpu_op", "aten::add", 195, 4),
        _x("cuda_runtime", "cudaLaunchKernel", 196, 2, correlation=5),
        # backward, another thread
        _x("cpu_op", "autograd::engine::evaluate_function: CompiledFunctionBackward", 300, 100, tid=2),
        _x("cpu_op", "CompiledFunctionBackward", 301, 98, tid=2),
        _x("user_annotation", "## Call CompiledFxGraph def ##", 305, 90, tid=2),
        _x("cpu_op", "triton_poi_fused_mul_silu_backward_0", 310, 20, tid=2),
        _x("cuda_runtime", "cuLaunchKernel", 312, 10, tid=2, correlation=6),
        _k("triton_poi_fused_add_mul_0", 40, 11, 1),
        _k("ampere_sgemm_128x64_nn", 70, 23, 2),
        _k("triton_red_fused_sum_1", 100, 7, 3),
        _k("triton_poi_fused_add_mul_0", 140, 13, 4),
        _k("vectorized_elementwise_kernel", 200, 3, 5),
        _k("triton_poi_fused_mul_silu_backward_0", 330, 17, 6),
    ]
    return _write(tmp_path, "cuda_compiled.json", ev)


def _graph_tree(tmp_path):
    """cudagraph trees: the region's compiled graph is replayed by one graph launch deep inside it."""
    ev = [
        _x("user_annotation", "decode", 0, 100),
        _x("python_function", "nn.Module: GraphModule_0", 1, 98),
        _x("cpu_op", "Torch-Compiled Region: 1/0", 2, 90),
        _x("cpu_op", "CompiledFunction", 4, 80),
        _x("user_annotation", "## Call CompiledFxGraph xyz ##", 5, 70),
        _x("cuda_runtime", "cudaGraphLaunch", 10, 8, correlation=9),
        _k("triton_poi_fused_add_0", 30, 5, 9),
        _k("triton_red_fused_mean_1", 35, 9, 9),
        _k("triton_poi_fused_add_0", 44, 6, 9),
        _k("nvjet_gemm", 50, 20, 9, stream=8),
    ]
    return _write(tmp_path, "graph_tree.json", ev)


def _region_rows(path):
    with profuse.load(path) as t:
        return {r.name: r for r in compiled_regions(t).regions}


def _op_table(path, capsys):
    assert main(["report", str(path), "--format", "json", "--group-by", "op"]) == 0
    return {o["name"]: o for o in json.loads(capsys.readouterr().out)["ops"]}


def test_cuda_style_region_owns_its_kernels_at_any_depth(tmp_path, capsys):
    path = _cuda_style(tmp_path)
    regions, want = _region_rows(path), compiled_region_device(path)
    assert set(regions) == set(want) == {"Torch-Compiled Region: 0/0", "CompiledFunctionBackward"}
    for name, (n, us) in want.items():
        assert regions[name].device_events == n
        assert regions[name].device_us == pytest.approx(us)
    fwd = regions["Torch-Compiled Region: 0/0"]
    assert fwd.device_events == 4 and fwd.device_us == pytest.approx(11 + 23 + 7 + 13)
    # every kernel it ran is listed, the extern GEMM too (no fused ops), and they make up its device time
    kernels = {k.name: (k.calls, k.device_us) for k in fwd.kernels}
    assert kernels == {"triton_poi_fused_add_mul_0": (2, pytest.approx(24.0)), "triton_red_fused_sum_1": (1, 7.0),
                       "ampere_sgemm_128x64_nn": (1, 23.0)}
    assert sum(k.device_us for k in fwd.kernels) == pytest.approx(fwd.device_us)
    assert [k.fused_ops for k in fwd.kernels if k.name == "ampere_sgemm_128x64_nn"] == [[]]
    assert fwd.eager_ops_inside == ["aten::mm"]
    # the op table says the same of the region call
    ops = _op_table(path, capsys)
    assert ops["Torch-Compiled Region: 0/0"]["device_total_us"] == pytest.approx(fwd.device_us)
    assert ops["CompiledFunctionBackward"]["device_total_us"] == pytest.approx(17.0)


def test_graph_tree_replay_inside_a_region(tmp_path, capsys):
    path = _graph_tree(tmp_path)
    (region,) = _region_rows(path).values()
    ((name, (n, us)),) = compiled_region_device(path).items()
    assert region.name == name == "Torch-Compiled Region: 1/0"
    assert (region.device_events, region.replayed) == (n, n) == (4, 4)
    assert region.device_us == pytest.approx(us) == pytest.approx(5 + 9 + 6 + 20)
    assert {k.name: k.calls for k in region.kernels} == {"triton_poi_fused_add_0": 2, "triton_red_fused_mean_1": 1,
                                                         "nvjet_gemm": 1}
    assert sum(k.device_us for k in region.kernels) == pytest.approx(region.device_us)
    assert _op_table(path, capsys)[name]["device_total_us"] == pytest.approx(us)
    # the replayed kernels inherit the graph launch's module and annotation
    with profuse.load(path) as t:
        rows = t.sql_rows("SELECT m.name, s.name, d.link FROM events d LEFT JOIN scopes m ON m.id = d.module "
                     "LEFT JOIN scopes s ON s.id = d.scope WHERE d.kind = 'kernel'")[1]
    assert rows and set(rows) == {("GraphModule", "## Call CompiledFxGraph xyz ##", "graph")}


def test_console_report_shows_region_device_time(tmp_path, capsys):
    path = _graph_tree(tmp_path)
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "Torch-Compiled Region: 1/0:" in ln)
    assert "40.0 µs" in line and "4 device event(s)" in line and "4 replayed" in line


def _nesting_names(events, inner):
    """Names of the events on inner's thread that hold inner's start, outermost first (plain json)."""
    around = [e for e in events if e is not inner and (e["pid"], e["tid"]) == (inner["pid"], inner["tid"])
              and e["ts"] <= inner["ts"] < e["ts"] + e["dur"] and e.get("cat") in ("cpu_op", "user_annotation")]
    return [e["name"] for e in sorted(around, key=lambda e: (e["ts"], -e["dur"]))]


def test_real_cpu_inductor_trace(tmp_path):
    torch = pytest.importorskip("torch")
    import torch._inductor.config as inductor_config
    from torch.profiler import ProfilerActivity, profile

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)

        def forward(self, x):
            return torch.nn.functional.silu(self.lin(x)) * 2 + 1

    torch._dynamo.reset()
    x = torch.randn(8, 16, requires_grad=True)
    with inductor_config.patch({"cpp.enable_kernel_profile": True}):
        f = torch.compile(Block())
        f(x).sum().backward()  # compile outside the capture
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(2):
                f(x).sum().backward()
    path = tmp_path / "cpu_compile.json"
    prof.export_chrome_trace(str(path))
    events = complete_events(path)
    # torch 2.13's nesting, read from the raw JSON
    fused = [e for e in events if "cpp_fused" in e["name"] and e.get("cat") == "cpu_op"]
    assert fused, "inductor's kernel profiling records its C++ kernels"
    chains = {tuple(n for n in _nesting_names(events, e) if not n.startswith("autograd::engine"))[:3]
              for e in fused}
    assert any(c[:2] == ("Torch-Compiled Region: 0/0", "CompiledFunction") and c[2].startswith("## Call CompiledFxGraph")
               for c in chains), chains
    assert any(c[0] == "CompiledFunctionBackward" and c[1].startswith("## Call CompiledFxGraph") for c in chains), chains
    regions, want = _region_rows(path), compiled_region_inductor_ops(path)
    assert set(regions) == set(want) == {"Torch-Compiled Region: 0/0", "CompiledFunctionBackward"}
    for name, kernels in want.items():
        got = {k.name: (k.calls, k.device_us) for k in regions[name].kernels}
        assert got == {k: (n, pytest.approx(us)) for k, (n, us) in kernels.items()}
        assert all(k.fused_ops for k in regions[name].kernels)
        # on a CPU-only trace the CPU is the device: the region's time is its calls' CPU time
        calls = [e for e in events if e["name"] == name and e.get("cat") == "cpu_op"]
        assert regions[name].calls == len(calls) == 2
        assert regions[name].device_us == pytest.approx(sum(e["dur"] for e in calls))
    assert "aten::addmm" in regions["Torch-Compiled Region: 0/0"].eager_ops_inside


def test_a_compiled_backward_is_no_graph_break(tmp_path):
    path = _cuda_style(tmp_path)
    with profuse.load(path) as t:
        s = compiled_regions(t)
    assert {r.name for r in s.regions} == {"Torch-Compiled Region: 0/0", "CompiledFunctionBackward"}
    assert s.graph_breaks == 0 and s.eager_between == []
