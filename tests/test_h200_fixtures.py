"""Bundles recorded on an H200 (tests/fixtures/h200/README.md): one small BERT serving step run four ways
(eager, a torch.cuda.CUDAGraph replay, torch.compile, torch.compile mode="reduce-overhead"), the RMSNorm
study on the GPU, and a model run on the CPU of that GPU machine. Expected numbers come from the raw JSON
(step durations, graph-launch calls, kernel times), not from profuse."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import FIXTURES

import profuse
from profuse.analysis.diagnosis import Diagnosis, diagnose

H200 = FIXTURES / "h200"


def _raw(name: str) -> list[dict]:
    with gzip.open(H200 / name / "trace.json.gz") as f:
        return json.load(f)["traceEvents"]


def _steps_us(name: str) -> float:
    """The recorded steps' CPU time, summed: each step ends with a copy of its output to the host, so
    its device work ends inside it."""
    return sum(e["dur"] for e in _raw(name) if e.get("cat") == "user_annotation"
               and e.get("name", "").startswith("ProfilerStep#"))


def _diag(name: str) -> Diagnosis:
    with profuse.load(H200 / name) as t:
        return diagnose(t)


def _lever(d: Diagnosis, kind: str):
    return next((lv for lv in (*d.levers, *d.small_items) if lv.kind == kind), None)


def test_eager_launch_bound_step_leads_with_cuda_graphs_and_the_graph_run_bears_it_out():
    # GIVEN the eager step (device busy ~10%) and the same step replayed from a CUDA graph
    eager, graph = _diag("bert_eager"), _diag("bert_graph")
    # THEN the first lever is a graph capture, with high confidence
    assert eager.levers[0].kind == "cuda_graphs" and eager.levers[0].confidence == "high"
    # AND the saving it predicts is within 10% of what the capture saved (step times from the raw JSON)
    measured = _steps_us("bert_eager") - _steps_us("bert_graph")
    assert measured > 0.7 * _steps_us("bert_eager")
    assert eager.levers[0].gain_us == pytest.approx(measured, rel=0.10)
    assert graph.span_us < eager.span_us


def _idle_in_graph_launches(name: str, d: Diagnosis) -> float:
    """µs of the steady steps' cudaGraphLaunch calls during which no device activity ran (raw JSON)."""
    raw = _raw(name)
    steady = {s.name for s in d.steps if not s.warmup}
    steps = [e for e in raw if e.get("cat") == "user_annotation" and e.get("name") in steady]
    dev = sorted((e["ts"], e["ts"] + e["dur"]) for e in raw if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    idle = 0.0
    for c in raw:
        if c.get("name") != "cudaGraphLaunch" or not any(s["ts"] <= c["ts"] < s["ts"] + s["dur"] for s in steps):
            continue
        lo, hi = c["ts"], c["ts"] + c["dur"]
        covered, cur = 0.0, lo
        for a, b in dev:
            a, b = max(a, cur), min(b, hi)
            if b > a:
                covered += b - a
                cur = b
        idle += (hi - lo) - covered
    return idle


@pytest.mark.parametrize("name", ["bert_graph", "bert_reduce_overhead"])
def test_a_graph_replayed_step_is_not_told_to_capture_a_graph(name):
    # GIVEN a step replayed from CUDA graphs (a torch.cuda.CUDAGraph; inductor's cudagraph trees)
    d = _diag(name)
    # THEN a graph capture is not advised: the graphs lever is the host work left outside them, low
    graphs = _lever(d, "cuda_graphs")
    assert graphs is not None and graphs.confidence == "low" and "already replay" in graphs.evidence
    assert "capture the step in a graph" not in graphs.how
    # AND the device's idle inside the graph launches is its own lever, equal to what the raw JSON shows
    gl = _lever(d, "graph_launch")
    assert gl is not None and "profiler" in gl.evidence and gl.confidence == "low"
    assert gl.gain_us == pytest.approx(_idle_in_graph_launches(name, d), abs=1.0)
    assert "3 graph launch(es)" in gl.evidence
    # AND pulling every lever counts both, each from its own part of the launch time
    assert d.combined_gain_us >= graphs.gain_us + gl.gain_us - 1e-3


def test_the_cuda_graph_step_leads_with_precision():
    # the model runs in float32 and its GEMMs are a third of the graph-replayed step
    assert _diag("bert_graph").levers[0].kind == "precision"


def test_a_compiled_step_without_graphs_leads_with_cuda_graphs_and_reduce_overhead_saves_within_it():
    # GIVEN the torch.compile step (inductor's wrapper launches each kernel) and the reduce-overhead one
    d = _diag("bert_compile")
    # THEN the wrapper's launching is dispatch a graph removes, not CPU work to overlap
    assert d.levers[0].kind == "cuda_graphs" and d.levers[0].confidence == "high"
    cpu = _lever(d, "cpu_work")
    assert cpu is None or cpu.gain_us < 0.1 * d.span_us
    # AND reduce-overhead saved time, no more than the lever's bound
    measured = _steps_us("bert_compile") - _steps_us("bert_reduce_overhead")
    assert 0 < measured <= d.levers[0].gain_us


def test_reduce_overhead_step_names_the_compiled_wrapper_outside_the_graphs():
    graphs = _lever(_diag("bert_reduce_overhead"), "cuda_graphs")
    assert graphs is not None and "TorchDynamo Cache Lookup" in graphs.evidence
    assert "Torch-Compiled Region" in graphs.evidence


def test_cpu_work_names_the_profilers_own_marks_as_such():
    d = _diag("bert_eager")
    cpu = _lever(d, "cpu_work")
    assert cpu is not None
    assert "_record_function_enter" not in cpu.evidence and "object at 0x" not in cpu.evidence
    assert "the profiler's own step marks" in cpu.evidence


def test_a_model_run_on_the_cpu_of_a_gpu_machine_is_a_cpu_trace(capsys):
    # GIVEN a trace whose JSON lists the H200 (deviceProperties) and a few CUDA runtime queries, but no
    # kernel, copy or launch: the model ran on the CPU
    raw_doc = json.loads(gzip.decompress((H200 / "cpu_model_on_gpu_host" / "trace.json.gz").read_bytes()))
    assert raw_doc["deviceProperties"][0]["name"] == "NVIDIA H200"
    cats = {e.get("cat") for e in raw_doc["traceEvents"]}
    assert "cuda_runtime" in cats and not cats & {"kernel", "gpu_memcpy", "gpu_memset"}
    # THEN profuse reads it as a CPU trace: no device claim, no "device activity was not recorded"
    with profuse.load(H200 / "cpu_model_on_gpu_host") as t:
        assert t.device_kind == "CPU" and t.cpu_only
        d = diagnose(t)
    assert not d.device and all(lv.kind != "no_device_data" for lv in d.levers)
    assert any("torch listed NVIDIA H200" in n for n in d.notes)


@pytest.mark.parametrize("study", ["rmsnorm_fp32", "rmsnorm_bf16"])
def test_rmsnorm_study_on_the_gpu_matches_its_bundles(study):
    # GIVEN the study's result and the three bundles it recorded on the H200
    doc = json.loads((H200 / study / "study.json").read_text())
    assert doc["device_kind"] == "CUDA" and doc["device_name"] == "NVIDIA H200"
    per_call = {}
    for v in doc["variants"]:
        raw = _raw(f"{study}/{v['name']}")
        calls = sum(1 for e in raw if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#"))
        kernels = [e for e in raw if e.get("cat") == "kernel"]
        # THEN each variant's device time per call (a median over every round's calls; the bundle is the
        # last round) is within 5% of its bundle's kernel time over its calls
        assert v["device_us_per_call"] == pytest.approx(sum(e["dur"] for e in kernels) / calls, rel=0.05)
        assert v["kernels_per_call"] == len(kernels) / calls
        per_call[v["name"]] = v["device_us_per_call"]
    # AND op by op is six kernels; the fused op and the compiled one are one each and several times faster
    assert {v["name"]: v["kernels_per_call"] for v in doc["variants"]} == {
        "op_by_op": 6.0, "torch.rms_norm": 1.0, "torch.compile": 1.0}
    assert per_call["op_by_op"] > 4 * per_call["torch.rms_norm"] and per_call["op_by_op"] > 4 * per_call["torch.compile"]


def test_fixture_bundles_say_where_they_were_recorded():
    for meta in sorted(H200.glob("bert_*/meta.json")):
        m = json.loads(meta.read_text())
        assert m["status"] == "complete" and m["device"]["cuda"]["name"] == "NVIDIA H200", meta
        assert Path(m["run"]["argv"][0]).name == "bert_infer.py"


@pytest.mark.parametrize("name", ["bert_compile", "bert_reduce_overhead"])
def test_compiled_bundles_name_the_kernels_inductor_wrote(name):
    import re

    from profuse.analysis.compiled import compiled_regions
    # GIVEN a compiled step's bundle with the code inductor generated for it (artifacts/inductor)
    written = set()
    for f in (H200 / name / "artifacts" / "inductor").glob("*.py"):
        written |= set(re.findall(r"^def (triton_\w+)\(", f.read_text(), flags=re.M))
    ran = {e["name"] for e in _raw(name) if e.get("cat") == "kernel" and e["name"].startswith("triton_")}
    assert written and ran
    # WHEN its compiled regions are read
    with profuse.load(H200 / name) as t:
        summary = compiled_regions(t)
    # THEN the generated kernels are exactly the Triton kernels defined in those files, and every one
    # the step ran is among them
    assert set(summary.generated_kernels) == written
    assert ran <= written
