"""Device submissions per step on non-CUDA devices (MTIA, a PrivateUse1 backend), and the Neuron Runtime's
counters per step, as the launch-bound evidence of the diagnosis.

The MTIA trace is real; the Neuron one is a real CUDA trace written as TorchNeuron writes it
(test_privateuse1.rewrite), its launches renamed ``nrt_model_submit`` and its memsets
``dmem_buf_copyin`` (no Neuron trace with runtime counters is public). Expected counts come from the
raw JSON: oracle.py's steady step spans, and the documented call names matched in each event's name.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import oracle
import pytest
from conftest import trace_path
from test_privateuse1 import rewrite

from profuse.analysis.diagnosis import diagnose
from profuse.analysis.submissions import submission_notes, submissions
from profuse.cli import main
from profuse.trace import load

# what submits work, per the device vocabulary's documented launch calls (docs/advisor.md)
SUBMIT_PARTS = ("launch", "async", "runfunction", "enqueue", "nrt_execute", "nrt_model_submit")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "runtime", "hip_runtime", "mtia_runtime", "privateuse1_runtime",
                "privateuse1_driver")


def _expected(path: Path, names: tuple[str, ...] | None = None) -> tuple[float, dict[str, float]]:
    """(submissions per steady step, per call name) from the raw JSON, or with ``names`` the count per step of
    events so named (runtime counters, any category)."""
    spans = [(lo, hi) for _, lo, hi, _ in oracle.steady_spans(path)]
    counts: dict[str, int] = {}
    for e in oracle.exact_events(str(path)):
        name, cat = e.get("name") or "", (e.get("cat") or "").lower()
        if not any(lo <= e["ts"] < hi for lo, hi in spans):
            continue
        if names is not None:
            if name in names:
                counts[name] = counts.get(name, 0) + 1
        elif cat in RUNTIME_CATS and any(p in name.lower() for p in SUBMIT_PARTS):
            counts[name] = counts.get(name, 0) + 1
    n = len(spans)
    return sum(counts.values()) / n, {k: v / n for k, v in counts.items()}


def test_mtia_submissions_per_step():
    path = trace_path("mtia_inference.json.gz")
    per_step, by_call = _expected(path)
    assert per_step > 0
    with load(path, cache=False) as t:
        s = submissions(t)
        notes = submission_notes(t)
    assert s.per_step == pytest.approx(per_step, abs=0.01)
    assert dict(s.calls) == pytest.approx(by_call, abs=0.01)
    assert s.counters == ()  # MTIA's runtime lists no counters
    assert notes and f"{s.per_step:,.6g} device submission(s)" in notes[0]


def _neuron_trace(tmp_path: Path) -> Path:
    dst = tmp_path / "neuron" / "trace.json.gz"
    rewrite(trace_path("h100_bert_small.json.gz"), dst, prefix="nrt_")
    doc = json.load(gzip.open(dst))
    for e in doc["traceEvents"]:
        if e.get("cat") == "privateuse1_runtime" and e.get("name", "").startswith("nrt_LaunchKernel"):
            e["name"] = "nrt_model_submit"
        elif e.get("cat") == "privateuse1_runtime" and e.get("name") == "nrt_MemsetAsync":
            e["name"] = "dmem_buf_copyin"
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


def test_neuron_runtime_counters_per_step_in_the_launch_bound_lever(tmp_path, capsys):
    path = _neuron_trace(tmp_path)
    per_step, by_call = _expected(path)
    _, counters = _expected(path, ("nrt_model_submit", "nrt_execute", "dmem_buf_copyin"))
    assert counters["nrt_model_submit"] > 10 and counters["dmem_buf_copyin"] > 10
    with load(path, cache=False) as t:
        assert t.meta.device_kind == "Neuron"
        s = submissions(t)
    assert s.per_step == pytest.approx(per_step, abs=0.01)
    assert dict(s.calls) == pytest.approx(by_call, abs=0.01)
    assert dict(s.counters) == pytest.approx({"submits": counters["nrt_model_submit"],
                                              "DMA copy-ins": counters["dmem_buf_copyin"], "model switches": 0})
    assert main(["report", str(path), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    lever = next(lv for lv in report["diagnosis"]["levers"] if lv["kind"] == "cuda_graphs")
    assert f"{s.per_step:,.6g} device submission(s) in the step" in lever["evidence"]
    assert f"submits {counters['nrt_model_submit']:,.6g}" in lever["evidence"]
    assert f"DMA copy-ins {counters['dmem_buf_copyin']:,.6g}" in lever["evidence"]


def test_cuda_levers_keep_their_launch_gap_evidence():
    with load(trace_path("h100_bert_small.json.gz"), cache=False) as t:
        assert submission_notes(t) == []


def test_submissions_per_step_are_counted_over_the_steps_the_budget_reads():
    # GIVEN a real ROCm trace whose long first step holds every launch and the short second none
    path = trace_path("mi250_rocm_toy_train.json.gz")
    per_step, by_call = _expected(path)
    steady = oracle.steady_spans(path)
    with load(path, cache=False) as t:
        s = submissions(t)
        d = diagnose(t)
    # THEN the submissions are counted over the steady steps, the ones the budget describes (both here: the
    # first is no warm-up, it alone holds the device work), per step: the raw JSON's launch calls in their spans
    assert s.steps == len(steady) == sum(not st.warmup for st in d.steps) == 2
    assert s.per_step == pytest.approx(per_step, abs=0.01) and per_step == 7
    assert dict(s.calls) == pytest.approx(by_call, abs=0.01)
    assert "7 device submission(s) per step (hipLaunchKernel 6, hipExtModuleLaunchKernel 1)" in d.notes
