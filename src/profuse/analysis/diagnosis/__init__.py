"""Diagnosis: every nanosecond of each step given to one cause, and the changes that buy most back.

``diagnose(trace)`` returns the time budget of each step (the step model, :mod:`.steps`: which
annotations are steps and the disjoint time each holds), of the steady steps together (the step model's
warm-up, a first step several times slower than the others while they hold work too, is reported apart),
or of the active window when the trace has no steps; and the
levers, ranked by gain, each bounded by the budget leaves it draws from, with the gain of pulling
them all counted once (:mod:`.levers`). The leaves are defined in :mod:`.budget` (device traces) and
:mod:`.cpu_budget` (CPU-only traces: op classes, Python, idle; no device claim). docs/advisor.md
states every rule.
"""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from ..._lazy import lazy_module
from ..._progress import timed
from ...trace import Trace
from ...units import fmt_us
from ..beside import Submit, now
from ..steps import WARMUP_FACTOR, Step, step_model, warmup
from .budget import (
    BUSY_PRIORITY,
    LEAVES,
    NOT_RECORDED,
    Labels,
    Pieces,
    device_work,
    labels,
    spans_pieces,
)

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use: the records here are read without it
    np = lazy_module("numpy", globals(), "np")

from .records import Diagnosis, Leaf, Lever, Steady, StepBudget, leaves_of, step_kind


@timed("diagnosis")
def diagnose(trace: Trace, *, candidates: list[object] | None = None, peaks: object = None,
             roofline_rows: list[object] | None = None, submit: Submit = now) -> Diagnosis:
    """The diagnosis of a loaded trace; ``candidates``, ``peaks`` and ``roofline_rows`` are the
    advisor's fusion candidates, peaks and roofline when already computed (else computed here); ``submit``
    runs some of its levers meanwhile (another thread: :func:`profuse.analysis.beside.beside`)."""
    from ..advice.fusion import fusion_candidates
    from ..advice.roofline import ALL_ROWS, device_peaks, roofline

    if candidates is None:
        candidates = list(fusion_candidates(trace))
    if peaks is None:
        peaks = device_peaks(trace)
    if roofline_rows is None:
        roofline_rows = list(roofline(trace, peaks, top=ALL_ROWS)) if peaks is not None else []  # type: ignore[arg-type]
    if trace.cpu_only:
        from .cpu_budget import cpu_diagnosis
        return cpu_diagnosis(trace, candidates)
    return _device_diagnosis(trace, candidates, peaks, roofline_rows, submit)


def _step_kinds(kinds: list[str]) -> str:
    """The steps the levers are for, by kind (``StepBudget.kind`` of each step but the warm-up)."""
    count: dict[str, int] = defaultdict(int)
    for k in kinds:
        count[k] += 1
    return ", ".join(f"{k} x{n}" for k, n in count.items()) or "active window"


def _step_budgets(steps: list[Step], spans: list[tuple[int, int]], per_span: np.ndarray,
                  warm: int | None) -> list[StepBudget]:
    """Each step's budget: its span's leaves (``per_span``: ns per leaf, a row per span)."""
    rows = per_span.tolist()   # plain integers: one conversion, not one per leaf
    return [StepBudget.of(st, lo, hi, leaves_of(LEAVES, rows[i], hi - lo), i == warm)
            for i, (st, (lo, hi)) in enumerate(zip(steps, spans))]


def _device_diagnosis(trace: Trace, candidates: list[object], peaks: object,
                      roofline_rows: list[object], submit: Submit) -> Diagnosis:
    from ..submissions import submission_notes
    from .levers import Context, cpu_other_holders, rank_levers

    model = step_model(trace)
    steps = list(model.steps)
    sts = np.asarray([s.ts for s in steps], dtype=np.int64)
    send = np.asarray([s.end for s in steps], dtype=np.int64)
    w = device_work(trace, {s.thread for s in steps}, sts, send)
    if w.acts.start.size == 0:
        return _not_recorded(trace, steps, list(model.spans))
    # what the levers read of the work alone, found over there while the time is labelled here (with no other
    # thread, by the levers where they ask: a trace without idle CPU time never needs it); handed first, before
    # the report's sections queued there, which only its end reads
    holders = None if submit is now else submit(lambda: cpu_other_holders(w), first=True)
    lab = labels(w)
    spans = list(model.spans)
    warm = warmup(trace)
    every, offsets, per_span = spans_pieces(lab, np.asarray([lo for lo, _ in spans], dtype=np.int64),
                                            np.asarray([hi for _, hi in spans], dtype=np.int64))
    out_steps = submit(lambda: _step_budgets(steps, spans, per_span, warm), first=True)
    steady = _steady(spans, warm, every, offsets, per_span)
    notes = []
    if warm is not None:
        notes.append(f"{steps[warm].name} is a warm-up outlier ({fmt_us((spans[warm][1] - spans[warm][0]) / 1e3)}, "
                     f"over {WARMUP_FACTOR:g}x the median of the other steps): reported apart, levers from the others")
    notes.extend(submission_notes(trace))   # submissions per step: launch-bound evidence beyond CUDA
    target = _step_kinds([step_kind(s.info.phase) for i, s in enumerate(steps) if i != warm])
    ctx = Context(trace=trace, work=w, labels=lab, steady=steady, candidates=candidates, peaks=peaks,
                  roofline_rows=roofline_rows, target=target, cpu=False, submit=submit, cpu_other_holders=holders)
    levers, small, combined, outside = rank_levers(ctx)
    budget = leaves_of(LEAVES, np.asarray([steady.leaves[k] for k in LEAVES]), steady.span_ns)
    return Diagnosis(device=True, scope="steps" if steps else "trace", span_us=round(steady.span_ns / 1e3, 3),
                     window_us=round(ctx.window_ns / 1e3, 3),
                     budget=budget, steps=tuple(out_steps()), levers=levers, small_items=small,
                     combined_gain_us=combined, notes=tuple(notes), combined_outside_us=outside)


def _steady(spans: list[tuple[int, int]], warm: int | None, every: Pieces, offsets: np.ndarray,
            per_span: np.ndarray) -> Steady:
    """The spans but the warm-up together: their leaves, span and pieces (one run of them)."""
    keep = np.ones(len(spans), dtype=bool)
    if warm is not None:
        keep[warm] = False
    leaves = per_span[keep].sum(axis=0) if keep.any() else np.zeros(len(LEAVES), dtype=np.int64)
    steady = Steady({k: int(v) for k, v in zip(LEAVES, leaves)}, sum(hi - lo for (lo, hi), k in zip(spans, keep) if k),
                    [])
    if keep.all() and spans:
        steady.pieces.append(every)
    elif keep.any():   # the warm-up's pieces left out: a slice where it is the first span (steps.warmup's)
        sel: slice | np.ndarray = slice(int(offsets[1]), None) if warm == 0 else np.repeat(keep, np.diff(offsets))
        steady.pieces.append(Pieces(every.start[sel], every.ns[sel], every.idx[sel], every.label[sel]))
    return steady


def _not_recorded(trace: Trace, steps: list[Step], spans: list[tuple[int, int]]) -> Diagnosis:
    """Launches but no device activity: the whole span is ``idle/not_recorded``; no device claim."""
    from .levers import no_device_data

    total = sum(hi - lo for lo, hi in spans)
    one = (NOT_RECORDED,)
    out = tuple(StepBudget.of(s, lo, hi, leaves_of(one, np.asarray([hi - lo]), hi - lo), False)
                for s, (lo, hi) in zip(steps, spans))
    lever = no_device_data(trace)
    return Diagnosis(device=False, scope="steps" if steps else "trace", span_us=round(total / 1e3, 3),
                     window_us=round(total / 1e3, 3),
                     budget=leaves_of(one, np.asarray([total]), total), steps=out,
                     levers=(lever,) if lever else (), small_items=(), combined_gain_us=0.0,
                     notes=("the trace has device launches but no device activity: nothing is claimed about "
                            "the device",))


__all__ = ["BUSY_PRIORITY", "Diagnosis", "Labels", "Leaf", "Lever", "StepBudget", "diagnose"]
