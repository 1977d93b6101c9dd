"""The diagnosis's records (budget leaves, steps, levers, the diagnosis) and the rule they are built with
(the leaves of a span): read by the device and CPU diagnoses and by the levers, so none of them imports
another to get them. Which step is a warm-up is the step model's (``steps.warmup``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..._lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np

    from ..steps import Step
    from .budget import Pieces
else:  # numpy loads on first use: the records here are read without it
    np = lazy_module("numpy", globals(), "np")

def step_kind(phase: str | None) -> str:
    """How steps are grouped for display: the phase of a serving step, else ``step``."""
    return phase or "step"


@dataclass(frozen=True)
class Leaf:
    """One leaf of a budget: its key (``busy/gemm``, ``idle/host_sync``, ``cpu/python``), µs and % of the span."""

    key: str
    us: float
    pct: float

    # its key is one of profuse's leaf names (budget.LEAVES, cpu_budget.CPU_LEAVES, NOT_RECORDED), never the
    # trace's text: the redaction walk passes leaves as they are (redact.redacted)
    __trace_text__: ClassVar[bool] = False


@dataclass(frozen=True)
class StepBudget:
    """One step: its name, what a serving engine's name says of it, its span and budget."""

    name: str
    phase: str | None
    batch: int | None
    tokens: int | None
    span_us: float
    budget: tuple[Leaf, ...]
    warmup: bool
    kv_tokens: int | None = None   # key/value tokens its attention reads, where the engine annotates it

    @property
    def kind(self) -> str:
        """How steps are grouped for display: :func:`step_kind`."""
        return step_kind(self.phase)

    @classmethod
    def of(cls, step: Step, lo: int, hi: int, budget: tuple[Leaf, ...], warmup: bool) -> StepBudget:
        """The row of ``step`` over its span [lo, hi) (ns) with its ``budget``: what its name says of it (phase,
        batch, tokens, KV tokens: trace/step_names.py) as every budget (device, CPU, nothing recorded) gives it."""
        i = step.info
        return cls(step.name, i.phase, i.batch, i.tokens, round((hi - lo) / 1e3, 3), budget, warmup, i.kv_tokens)


@dataclass(frozen=True)
class Lever:
    """A change ranked by what it buys back: ``gain_us <= sum of the leaves in draws``."""

    kind: str
    target: str
    gain_us: float
    confidence: str
    evidence: str
    how: str
    draws: tuple[str, ...]
    ops: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()
    caps: tuple[float, ...] = ()   # µs at most from each leaf in draws (same order); () or a missing one: no cap
    grade: str = "measured"        # what shows it: measured | inferred | outside the trace (GRADES)
    # gain_us as a % of the device window (the span less its unrecorded wait), or of the span for a lever drawing
    # that wait, which lies outside the window: set by levers.rank, read by every renderer
    share_pct: float = 0.0
    # what share_pct is of, where the device window and the span differ: "the device window" or "the span"
    # ("" where they are one: a trace with no unrecorded wait)
    share_of: str = ""


@dataclass(frozen=True)
class Diagnosis:
    """The budget of the steady steps (or, without steps, the active window), each step's, and the ranked levers."""

    device: bool                 # False: a CPU-only trace, or no device activity recorded
    scope: str                   # steps | trace
    span_us: float
    window_us: float             # the span less its unrecorded wait: what each lever's % and the 1% fold read
    budget: tuple[Leaf, ...]
    steps: tuple[StepBudget, ...]
    levers: tuple[Lever, ...]
    small_items: tuple[Lever, ...]
    combined_gain_us: float
    notes: tuple[str, ...]
    combined_outside_us: float = 0.0   # of combined_gain_us, what levers graded outside the trace take


# What in the trace shows each lever (docs/advisor.md, "Evidence grades"): "measured", the trace holds the
# cause (the idle time and what the host did in it, the collectives, the copies); "inferred", a model
# of it (what lower precision, GEMM tuning or a fused kernel would take); "outside the trace", the cause
# is not in it (a stream that waited on work the trace does not show, or a clock offset). A lever graded
# outside the trace is never ranked above one the trace shows.
# what each grade says of a lever's cause (docs/advisor.md), as the console's legend prints it
GRADE_MEANINGS = {"measured": "the trace holds the cause", "inferred": "a model of the cause (precision, tuning, fusion)",
                  "outside the trace": "the cause is not in the trace"}
GRADES = {"precision": "inferred", "gemm": "inferred", "memory_bound": "inferred", "fusion": "inferred",
          "stream_wait": "outside the trace", "unrecorded_wait": "outside the trace"}


def grade_of(kind: str) -> str:
    """A lever kind's evidence grade (``fusion:<pattern>`` is fusion's)."""
    return GRADES.get(kind.split(":", 1)[0], "measured")


def leaves_of(keys: tuple[str, ...], ns: np.ndarray | list[int], span_ns: int) -> tuple[Leaf, ...]:
    """The non-zero leaves, in key order, µs rounded to the ns."""
    values = ns.tolist() if hasattr(ns, "tolist") else ns
    return tuple(Leaf(k, round(int(v) / 1e3, 3), round(100.0 * int(v) / span_ns, 2) if span_ns else 0.0)
                 for k, v in zip(keys, values) if v)


@dataclass
class Steady:
    """What the steady spans hold beyond their leaves, for the levers."""

    leaves: dict[str, int]
    span_ns: int
    pieces: list[Pieces]
