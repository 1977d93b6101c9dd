"""Device submissions per step: the launch-bound evidence on every device, and the Neuron Runtime's counters.

A submission is a runtime call that puts work on a device (the device vocabulary's launch calls,
trace/vocabulary.py: kernel launches, async copies, graph launches, MTIA's ``runFunction``/``enqueue``,
Neuron's ``nrt_execute``/``nrt_model_submit``), counted per step (the step model's spans; the active
window where the trace marks no steps). An eager model submits once per op; a compiled or captured one
a few times per step: public TorchNeuron material reads 1,050 against 1 ``nrt_model_submit`` per forward.

On Neuron traces the runtime's own counters are summarised per step too (:data:`RUNTIME_COUNTERS`):
model submits, DMA copy-ins into device buffers (``dmem_buf_copyin``: 13,785 against 14 per forward in
the same material) and model switches, by the call names the runtime's public API and that material use.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..trace import Trace
from ..trace.vocabulary import launch_call_sql
from .steps import step_model

# device kind -> (counter, call-name parts matched in any case); what the device vocabulary may take over
RUNTIME_COUNTERS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "Neuron": (("submits", ("nrt_model_submit", "nrt_execute")),
               ("DMA copy-ins", ("dmem_buf_copyin",)),
               ("model switches", ("model_switch", "nrt_load", "nrt_unload"))),
}
_TEXT = "lower(name) LIKE '%{}%'"


@dataclass(frozen=True)
class Submissions:
    """Submissions per step (mean over the spans), the calls that made them (per step, most first), and
    the device's runtime counters per step where the vocabulary above lists them."""

    steps: int                              # spans counted (steps, or 1: the active window)
    per_step: float
    calls: tuple[tuple[str, float], ...]    # (call name, per step)
    counters: tuple[tuple[str, float], ...]  # (counter, per step): RUNTIME_COUNTERS of the device


def submissions(trace: Trace) -> Submissions:
    """Count every submission (and the device's runtime counters) inside the step model's spans."""
    spans = list(step_model(trace).spans)
    n = max(len(spans), 1)
    within = " OR ".join(f"(ts >= {int(lo)} AND ts < {int(hi)})" for lo, hi in spans) or "false"
    rows = trace.con.execute(f"""
        SELECT name, count(*) FROM events WHERE kind = 'runtime' AND {launch_call_sql('name')} AND ({within})
        GROUP BY name ORDER BY count(*) DESC, name""").fetchall()
    calls = tuple((str(name), round(c / n, 2)) for name, c in rows)
    counters = []
    for label, parts in RUNTIME_COUNTERS.get(trace.meta.device_kind, ()):
        match = " OR ".join(_TEXT.format(p.lower().replace("'", "''")) for p in parts)
        (c,), = trace.con.execute(f"""SELECT count(*) FROM events WHERE kind IN ('runtime', 'cpu_op', 'other')
                                      AND ({match}) AND ({within})""").fetchall()
        counters.append((label, round(c / n, 2)))
    return Submissions(steps=len(spans), per_step=round(sum(c for _, c in rows) / n, 2), calls=calls,
                       counters=tuple(counters))


def submission_text(s: Submissions) -> str:
    """One line: submissions per step, by call, and the runtime counters (what the launch-bound levers and
    the diagnosis's notes say)."""
    per = "per step" if s.steps > 1 else "in the step" if s.steps == 1 else "in the trace"
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
