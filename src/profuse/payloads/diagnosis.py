"""The diagnosis as sent: the JSON report's ``diagnosis`` key, the Overview's, the HTML report's and
the console's (one record, so every renderer shows the same numbers)."""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from msgspec import Struct

# the budget's leaves, steps and levers are the analysis records themselves (no copies): light, no numpy
from ..analysis.diagnosis.records import Leaf, Lever, StepBudget

if TYPE_CHECKING:  # signatures only: decoding a stored report needs none of the analyses
    from ..analysis.diagnosis import Diagnosis


class StepGroup(Struct):
    """The steady steps of one kind (a serving phase, or ``step``) together: their summed budget."""

    kind: str
    count: int
    span_us: float
    budget: list[Leaf]
    batch: float | None = None       # per step, the mean where every step of the kind names it (serving steps)
    tokens: float | None = None
    kv_tokens: float | None = None


class SmallItems(Struct):
    """Levers under 1% of the device window (``window_us``) or 10 µs, folded into one line."""

    count: int
    gain_us: float
    kinds: list[str]


class DiagnosisPayload(Struct):
    """Where the steady steps' (or, without steps, the active window's) time went and what buys it back
    (docs/advisor.md); ``device`` false: no device claim (CPU-only, or device activity not recorded)."""

    device: bool
    scope: str
    span_us: float
    window_us: float   # the span less its unrecorded wait: each lever's % and the small items' 1% are of it
    budget: list[Leaf]
    groups: list[StepGroup]
    steps: list[StepBudget]
    levers: list[Lever]
    small_items: SmallItems
    combined_gain_us: float
    notes: list[str]
    combined_outside_us: float = 0.0   # of combined_gain_us, what the levers graded outside the trace take


def _groups(steps: tuple[StepBudget, ...]) -> list[StepGroup]:
    """Steady steps summed per kind, in order of first appearance; leaves keep the budget's order."""
    span: dict[str, int] = defaultdict(int)
    count: dict[str, int] = defaultdict(int)
    ns: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for s in steps:
        if s.warmup:
            continue
        count[s.kind] += 1
        span[s.kind] += round(s.span_us * 1e3)
        for lf in s.budget:
            ns[s.kind][lf.key] += round(lf.us * 1e3)
    return [StepGroup(kind=k, count=count[k], span_us=round(span[k] / 1e3, 3),
                      budget=[Leaf(key=key, us=round(v / 1e3, 3), pct=round(100.0 * v / span[k], 2) if span[k] else 0.0)
                              for key, v in ns[k].items()],
                      batch=_mean(steps, k, "batch"), tokens=_mean(steps, k, "tokens"),
                      kv_tokens=_mean(steps, k, "kv_tokens")) for k in count]


def _mean(steps: tuple[StepBudget, ...], kind: str, field: str) -> float | None:
    """The mean of a serving field over the steady steps of one kind (None unless every one names it)."""
    vals = [getattr(s, field) for s in steps if not s.warmup and s.kind == kind]
    return round(sum(vals) / len(vals), 1) if vals and all(v is not None for v in vals) else None


def diagnosis_payload(d: Diagnosis) -> DiagnosisPayload:
    """The record every renderer sends."""
    return DiagnosisPayload(
        device=d.device, scope=d.scope, span_us=d.span_us, window_us=d.window_us, budget=list(d.budget),
        groups=_groups(d.steps), steps=list(d.steps),
        levers=list(d.levers),
        small_items=SmallItems(count=len(d.small_items), gain_us=round(sum(lv.gain_us for lv in d.small_items), 3),
                               kinds=sorted({lv.kind for lv in d.small_items})),
        combined_gain_us=d.combined_gain_us, notes=list(d.notes), combined_outside_us=d.combined_outside_us)


class BudgetRow(Struct):
    """One budget leaf in two runs; ``delta_us = b_us - a_us``."""

    key: str
    a_us: float
    b_us: float
    delta_us: float
    a_pct: float
    b_pct: float


class BudgetDiff(Struct):
    """Two runs' budgets (the steady steps', or the active window's) side by side, largest change first."""

    a_span_us: float
    b_span_us: float
    a_scope: str
    b_scope: str
    rows: list[BudgetRow]


def budget_diff(a: Diagnosis, b: Diagnosis) -> BudgetDiff:
    """Leaf by leaf, every leaf either run has."""
    la, lb = {lf.key: lf for lf in a.budget}, {lf.key: lf for lf in b.budget}
    keys = list(dict.fromkeys([*la, *lb]))
    rows = [BudgetRow(key=k, a_us=la[k].us if k in la else 0.0, b_us=lb[k].us if k in lb else 0.0,
                      delta_us=round((lb[k].us if k in lb else 0.0) - (la[k].us if k in la else 0.0), 3),
                      a_pct=la[k].pct if k in la else 0.0, b_pct=lb[k].pct if k in lb else 0.0) for k in keys]
    rows.sort(key=lambda r: -abs(r.delta_us))
    return BudgetDiff(a_span_us=a.span_us, b_span_us=b.span_us, a_scope=a.scope, b_scope=b.scope, rows=rows)
