"""Device submissions per step: the launch-bound evidence on every device, and the Neuron Runtime's counters.

A submission is a runtime call that puts work on a device (the device vocabulary's launch calls,
trace/vocabulary.py: kernel launches, async copies, graph launches, MTIA's ``runFunction``/``enqueue``,
Neuron's ``nrt_execute``/``nrt_model_submit``), counted per steady step (the step model's spans but its
warm-up's, as the budget and the levers read them; the active window where the trace marks no steps). An
eager model submits once per op; a compiled or captured one a few times per step: public TorchNeuron
material reads 1,050 against 1 ``nrt_model_submit`` per forward.

On Neuron traces the runtime's own counters are summarised per step too (:data:`RUNTIME_COUNTERS`):
model submits, DMA copy-ins into device buffers (``dmem_buf_copyin``: 13,785 against 14 per forward in
the same material) and model switches, by the call names the runtime's public API and that material use.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._lazy import lazy_module
from ..trace import Trace
from ..trace.vocabulary import launch_call_sql
from ._memo import once_per_trace
from .steps import steady_spans, step_model

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use
    np = lazy_module("numpy", globals(), "np")

# device kind -> (counter, call-name parts matched in any case); what the device vocabulary may take over
RUNTIME_COUNTERS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "Neuron": (("submits", ("nrt_model_submit", "nrt_execute")),
               ("DMA copy-ins", ("dmem_buf_copyin",)),
               ("model switches", ("model_switch", "nrt_load", "nrt_unload"))),
}
_TEXT = "lower(name) LIKE '%{}%'"


@dataclass(frozen=True)
class Submissions:
    """Submissions per steady step (mean over their spans), the calls that made them (per step, most first),
    and the device's runtime counters per step where the vocabulary above lists them."""

    steps: int                              # spans counted (steady steps, or 1: the active window)
    per_step: float
    calls: tuple[tuple[str, float], ...]    # (call name, per step)
    counters: tuple[tuple[str, float], ...]  # (counter, per step): RUNTIME_COUNTERS of the device
    marked: bool = True                     # the spans are step marks (False: the trace's active window)


def _inside(ts: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """Which times fall in one of the step model's spans (disjoint, so one search per time)."""
    if not spans:
        return np.zeros(ts.size, dtype=bool)
    spans = sorted(spans)
    lo = np.asarray([a for a, _ in spans], dtype=np.int64)
    hi = np.asarray([b for _, b in spans], dtype=np.int64)
    i = np.searchsorted(lo, ts, side="right") - 1
    return (i >= 0) & (ts < hi[np.maximum(i, 0)])


@once_per_trace   # read by the diagnosis's notes and the cuda_graphs lever's evidence: counted once
def submissions(trace: Trace) -> Submissions:
    """Count every submission (and the device's runtime counters) inside the steady steps' spans."""
    model = step_model(trace)
    spans = [(int(lo), int(hi)) for lo, hi in steady_spans(trace)]
    n = max(len(spans), 1)
    got = trace.con.execute(f"""SELECT name, ts FROM events WHERE kind = 'runtime'
                                AND {launch_call_sql('name')}""").fetchnumpy()
    names = np.asarray(got["name"], dtype=object)[_inside(np.asarray(got["ts"], dtype=np.int64), spans)]
    counted = Counter(names.tolist())
    rows = sorted(counted.items(), key=lambda kv: (-kv[1], kv[0]))
    calls = tuple((str(name), round(c / n, 2)) for name, c in rows)
    counters = []
    for label, parts in RUNTIME_COUNTERS.get(trace.meta.device_kind, ()):
        match = " OR ".join(_TEXT.format(p.lower().replace("'", "''")) for p in parts)
        ts = trace.con.execute(f"""SELECT ts FROM events WHERE kind IN ('runtime', 'cpu_op', 'other')
                                   AND ({match})""").fetchnumpy()["ts"]
        counters.append((label, round(int(_inside(np.asarray(ts, dtype=np.int64), spans).sum()) / n, 2)))
    return Submissions(steps=len(spans), per_step=round(sum(c for _, c in rows) / n, 2), calls=calls,
                       counters=tuple(counters), marked=bool(model.steps))


def submission_text(s: Submissions) -> str:
    """One line: submissions per step, by call, and the runtime counters (what the launch-bound levers and
    the diagnosis's notes say)."""
    per = "in the trace" if not s.marked else "per step" if s.steps > 1 else "in the step"
    text = f"{s.per_step:,.6g} device submission(s) {per}"
    if s.calls:
        text += " (" + ", ".join(f"{name} {c:,.6g}" for name, c in s.calls[:3]) + ")"
    if s.counters:
        text += "; runtime counters " + per + ": " + ", ".join(f"{label} {c:,.6g}" for label, c in s.counters)
    return text


def submission_notes(trace: Trace) -> list[str]:
    """The diagnosis's note on a device trace other than CUDA: its submissions per step (empty for CUDA,
    whose launch-bound evidence is the launch gaps, and for traces without device work)."""
    if trace.cpu_only or trace.meta.device_kind == "CUDA":
        return []
    s = submissions(trace)
    return [submission_text(s)] if s.per_step or any(c for _, c in s.counters) else []
