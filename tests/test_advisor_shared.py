"""The advisor on real traces from other machines: it finds what is there and invents nothing."""
from __future__ import annotations

import json

import pytest
from conftest import trace_path
from oracle import calls_by_name as oracle_calls
from oracle import compiled_region_kernel_names, compiled_region_names, module_calls, multi_kernel_norm_ops
from oracle import op_runs as oracle_runs

import profuse
from profuse.analysis.advice.fusion import fusion_candidates
from profuse.analysis.advice.roofline import device_peaks, roofline
from profuse.analysis.compiled import compiled_regions, source_ops
from profuse.cli import main

NORM_TRACE = "mi300_normalization_layers.json.gz"
NORM_OR_ACT = {"RMSNorm", "LayerNorm", "softmax", "GELU (tanh)", "GELU (erf)", "multi-kernel norm",
               "attention (matmul-softmax-matmul)", "SiLU x mul (SwiGLU)", "bias + activation",
               "QuickGELU (x * sigmoid(1.702 x))", "SiLU (x * sigmoid(x))"}


def cands(name):
    with profuse.load(trace_path(name)) as t:
        return fusion_candidates(t)


def test_multi_kernel_norm_modules_of_mi300():
    found: dict[str, list] = {}
    for c in cands(NORM_TRACE):
        found.setdefault(c.scope, []).append(c)
    for module in ("BatchNorm2d", "GroupNorm", "InstanceNorm2d"):
        groups = found[f"nn.Module: {module}"]  # one candidate per input shape
        assert all(c.pattern == "multi-kernel norm" and c.kernels_per_instance >= 2 for c in groups)
        # one per call of a norm op that launches 2+ kernels directly in the module (plain json)
        assert sum(c.instances for c in groups) == multi_kernel_norm_ops(trace_path(NORM_TRACE), module) > 0
    # LayerNorm and RMSNorm run as one kernel each there (plain json finds no multi-kernel norm op): nothing to fuse
    assert multi_kernel_norm_ops(trace_path(NORM_TRACE), "LayerNorm") == 0
    assert multi_kernel_norm_ops(trace_path(NORM_TRACE), "RMSNorm") == 0
    assert "nn.Module: LayerNorm" not in found and "nn.Module: RMSNorm" not in found


@pytest.mark.parametrize("name", ["h100_bert_small.json.gz", "mi300_bert_small.json.gz",
                                  "h100_vit_falconsai.json.gz", "mi300_torch_compile_triton.json.gz"])
def test_no_norm_or_activation_candidate_where_modules_are_one_kernel(name):
    for c in cands(name):
        assert c.pattern not in NORM_OR_ACT, (c.pattern, c.scope)
        assert not any(m in c.scope for m in ("LayerNorm", "GELU", "Attention")), c.scope


@pytest.mark.parametrize("name", ["v100_ns_timestamps.json.gz", "a100_nccl_rank0_of2.json.gz"])
def test_a_candidate_without_shapes_names_the_kernel_count_rule_it_fell_back_to(name):
    # GIVEN DDP ResNet traces whose ops recorded no input shapes: in the raw JSON each forward runs
    # batch_norm -> add_ -> relu_ (3 kernels) at every block, and no op of those runs has Input Dims
    runs = oracle_runs(trace_path(name), "DistributedDataParallel.forward",
                       ("aten::batch_norm", "aten::add_", "aten::relu_"))
    assert runs and not any(shaped for _k, _us, shaped in runs)
    kernel_us = sum(us for _k, us, _s in runs)
    rule_us = sum(us * 0.5 * (1 - 1 / k) for k, us, _s in runs)   # half the time of all but one kernel
    assert {k for k, _us, _s in runs} == {3} and rule_us == pytest.approx(kernel_us / 3)
    from profuse.analysis.diagnosis import diagnose
    from profuse.units import fmt_us

    with profuse.load(trace_path(name)) as t:
        found = fusion_candidates(t)
        d = diagnose(t, candidates=list(found))
    # THEN the candidate is those runs, its bytes unknown, and its saving says the kernel-count rule made it
    [c] = [c for c in found if c.pattern == "norm + residual add + activation"]
    assert (c.instances, c.kernels_per_instance, c.bytes_now, c.shape) == (len(runs), 3, 0, "[]")
    assert c.device_us == pytest.approx(kernel_us, abs=0.01)
    assert c.predicted_saving_us == pytest.approx(rule_us, abs=0.01)
    assert (c.saving_model, c.confidence) == ("kernel count", "low")
    # AND its lever names that rule and its assumption, never a memory-traffic model, graded a low-confidence model
    [lever] = [lv for lv in (*d.levers, *d.small_items) if lv.kind == "fusion:norm_residual_activation"]
    assert f"a kernel-count rule, not a memory-traffic model, predicts {fmt_us(rule_us)} saved" in lever.evidence
    assert "no input shapes were recorded" in lever.evidence and "half the time of all but one" in lever.evidence
    assert "the memory-traffic model" not in lever.evidence
    assert (lever.grade, lever.confidence) == ("inferred", "low")


def test_compiled_region_kernels_and_their_source_ops():
    path = trace_path("mi300_torch_compile_triton.json.gz")
    with profuse.load(path) as t:
        s = compiled_regions(t)
    assert [r.name for r in s.regions] == compiled_region_names(path) == ["Torch-Compiled Region: 0/0"]
    kernels = {k.name: k for k in s.regions[0].kernels}
    # the inductor kernels whose innermost enclosing cpu_op is the region, read with plain json, are the ones
    # it lists with the ops they fuse; the rest it lists are extern (hipBLASLt GEMMs, attention), fusing none
    want = compiled_region_kernel_names(path, "Torch-Compiled Region: 0/0")
    assert {k for k, v in kernels.items() if v.fused_ops} == want and len(want) > 0
    assert {k for k, v in kernels.items() if not v.fused_ops} and not any(k.startswith("triton_") for k, v in
                                                                          kernels.items() if not v.fused_ops)
    assert kernels["triton_red_fused_add_mean_mul_pow_rsqrt_0"].fused_ops == ["add", "mean", "mul", "pow", "rsqrt"]
    assert "aten::mm" in s.regions[0].eager_ops_inside
    frames = {name.split(": ", 1)[1].split("/")[0] for name in compiled_region_names(path)}  # '0/0' -> frame 0
    assert s.graph_breaks == len(frames) - 1
    assert source_ops("triton_poi_fused__unsafe_view_mul_silu_2") == ["_unsafe_view", "mul", "silu"]


def test_roofline_uses_datasheet_peaks_and_shapes():
    with profuse.load(trace_path("h100_bert_small.json.gz")) as t:
        peaks = device_peaks(t)
        rows = {r.name: r for r in roofline(t, peaks)}
    assert peaks is not None and peaks.source == "datasheet: H100"
    addmm = rows["aten::addmm"]
    assert addmm.gflop > 0 and addmm.mbytes > 0 and 0 < addmm.pct_of_roofline <= 100


def test_report_json_carries_the_advisor_sections(capsys):
    assert main(["report", str(trace_path("mi300_normalization_layers.json.gz")), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("hotspots", "interruptions", "fusion_candidates"):
        assert key in doc and isinstance(doc[key], list)
    keys = {"pattern", "scope", "instances", "kernels_per_instance", "device_us", "bytes_now", "bytes_fused",
            "predicted_saving_us", "recommendation", "confidence"}
    assert doc["fusion_candidates"] and all(keys <= c.keys() for c in doc["fusion_candidates"])
    assert {h["kind"] for h in doc["hotspots"]} == {"op", "module", "kernel"}
    assert all(0 <= h["share_pct"] <= 100 for h in doc["hotspots"])
    for i in doc["interruptions"]:
        assert i["busy_us"] >= 0 and i["idle_us"] >= 0 and 0 <= i["busy_pct"] <= 100


def test_report_table_shows_advice(capsys):
    assert main(["report", str(trace_path("mi300_normalization_layers.json.gz"))]) == 0
    out = capsys.readouterr().out
    assert "Fusion candidates" in out and "multi-kernel norm" in out and "Hotspots" in out


def test_diff_same_device(capsys):
    assert main(["diff", str(trace_path("compare_base.json.gz")), str(trace_path("compare_test.json.gz")),
                 "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema"] == "profuse.diff/2" and d["same_device"] is True
    assert d["speedup"] > 0
    # ops are matched by (name, shapes, module instance): one name may have several rows
    rows = [o for o in d["ops"] if o["name"] == "All2All_Pooled_Req"]
    base, test = trace_path("compare_base.json.gz"), trace_path("compare_test.json.gz")
    a_calls, b_calls = (oracle_calls(p, "All2All_Pooled_Req") for p in (base, test))
    assert a_calls == 0 < b_calls, "the op runs in the second trace only (plain json)"
    assert sum(o["a_calls"] for o in rows) == a_calls and sum(o["b_calls"] for o in rows) == b_calls
    assert all(not o["matched"] for o in rows) and d["only_in"]["b"]["ops"] >= len(rows)
    assert any(k["a_calls"] != k["b_calls"] for k in d["kernels"])


def test_diff_across_devices_matches_ops_and_modules(capsys):
    assert main(["diff", str(trace_path("h100_bert_small.json.gz")), str(trace_path("mi300_bert_small.json.gz")),
                 "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["same_device"] is False and d["kernels"] == []
    mods = {m["name"]: m for m in d["modules"]}
    a_calls, b_calls = (module_calls(trace_path(n), "BertSelfOutput") for n in ("h100_bert_small.json.gz",
                                                                                "mi300_bert_small.json.gz"))
    assert a_calls > 0 and b_calls > 0, "plain json: the module runs in both traces"
    assert (mods["BertSelfOutput"]["a_calls"], mods["BertSelfOutput"]["b_calls"]) == (a_calls, b_calls)
    assert mods["BertSelfOutput"]["a_us"] > 0 and mods["BertSelfOutput"]["b_us"] > 0
