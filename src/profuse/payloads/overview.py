"""What a trace is and where its device time went: the Overview, and the head of the JSON report."""
from __future__ import annotations

from typing import Any

from msgspec import Struct

from ..analysis.breakdown import Breakdown
from ..analysis.busy import Busy
from ..analysis.diagnosis.records import Leaf
from ..analysis.health import Health
from ..analysis.summary import Summary
from ..redact import redact, redact_text
from .advice import AdvicePayload


class TraceInfo(Struct):
    """The trace: its file, device and size."""

    path: str
    device_kind: str
    device_name: str | None
    events: int
    span_us: float


class Totals(Struct):
    """Device time (every activity's duration, summed, as key_averages() totals it) and how many device events
    were linked; ``kernels_linked + sum(unlinked) = kernels``. ``overlap_us``: how much of that sum is time
    counted twice where activities overlap (streams running at once): the sum less the device's busy time (their
    union), where that is over :data:`OVERLAP_SHOWN` of the sum, else 0, so the headers that print the sum say
    it is not the busy time."""

    device_us: float
    kernels: int
    kernels_linked: int
    unlinked: dict[str, int]
    overlap_us: float = 0.0


OVERLAP_SHOWN = 0.005   # the share of the summed device time from which its overlap is named


class Capture(Struct):
    """A profuse bundle's capture status and its error (secrets redacted unless kept)."""

    status: str
    error: str | None
    script_exit_code: int | None = None   # profuse run: the script's own exit code, apart from the status
    # profuse run: the fastest recorded step over the fastest steady call without the profiler (the capture's cost)
    overhead: float | None = None


class Overview(Struct):
    """The Overview view. ``categories`` (µs): with advice, the diagnosis's budget grouped (its span:
    compute, memory copy, communication, idle; on a CPU-only trace ops, Python, communication, idle), so
    the cards and the budget's bar tell one story (``categories_of`` "budget"); without advice, device
    time over the whole trace by compute, memory copy, communication and idle ("device time"; no idle
    on a CPU-only trace). ``advice`` is None when advice was not asked for."""

    trace: TraceInfo
    totals: Totals
    device_label: str
    device_busy: Busy | None
    categories: dict[str, float]
    capture: Capture | None
    metadata: dict[str, Any]
    advice: AdvicePayload | None
    categories_of: str = "device time"
    health: Health | None = None       # what the trace holds and lacks (docs/advisor.md, "Trace health")


def trace_info(summary: Summary) -> TraceInfo:
    """The trace's identity from its summary."""
    return TraceInfo(path=summary.path, device_kind=summary.device_kind, device_name=summary.device_name,
                     events=summary.events, span_us=round(summary.span_us, 3))


def totals(summary: Summary) -> Totals:
    """Device time and linking counts from the summary."""
    busy = summary.device_busy.busy_us if summary.device_busy is not None else summary.device_us
    overlap = summary.device_us - busy
    return Totals(device_us=round(summary.device_us, 3), kernels=summary.kernels,
                  kernels_linked=summary.kernels_linked, unlinked=dict(summary.unlinked),
                  overlap_us=round(overlap, 3) if overlap > OVERLAP_SHOWN * summary.device_us else 0.0)


def capture(summary: Summary, *, keep_metadata: bool = False) -> Capture | None:
    """A bundle's capture status and error (redacted unless ``keep_metadata``); None for a plain trace."""
    if summary.bundle_status is None:
        return None
    error = summary.bundle_error
    return Capture(status=summary.bundle_status,
                   error=error if keep_metadata or error is None else redact_text(error),
                   script_exit_code=summary.script_exit_code, overhead=summary.capture_overhead)


def categories(breakdown: Breakdown) -> dict[str, float]:
    """The breakdown as labelled categories, in display order; no idle where there is no device, and the
    unrecorded waits as :func:`budget_categories` names them ("not in the trace"), where there are some."""
    out = {"compute": breakdown.compute_us, "memory copy": breakdown.memory_copy_us,
           "communication": breakdown.communication_us}
    if breakdown.idle_us is not None:
        out["idle"] = breakdown.idle_us
    if breakdown.unrecorded_us:
        out["not in the trace"] = breakdown.unrecorded_us
    return {k: round(v, 3) for k, v in out.items()}


def budget_categories(budget: list[Leaf], *, device: bool) -> dict[str, float]:
    """A diagnosis's budget leaves grouped as the Overview's categories, in display order (they add up
    to its span): ``busy/communication`` (``cpu/communication``) is communication, ``busy/memcpy_*`` and
    ``busy/memset`` memory copy, ``cpu/python`` Python, every other ``busy/``/``cpu/`` leaf compute
    (ops on a CPU-only trace), ``idle/*`` and ``idle`` idle, ``unrecorded/wait`` not in the trace (a card only
    where there is some)."""
    names = ("compute", "memory copy", "communication", "idle") if device else ("ops", "python", "communication",
                                                                               "idle")
    out = dict.fromkeys(names, 0.0)
    for leaf in budget:
        group, _, cls = leaf.key.partition("/")
        if group == "idle":
            out["idle"] += leaf.us
        elif group == "unrecorded":
            out["not in the trace"] = out.get("not in the trace", 0.0) + leaf.us
        elif cls == "communication":
            out["communication"] += leaf.us
        elif cls.startswith("mem") and device:
            out["memory copy"] += leaf.us
        elif cls == "python" and not device:
            out["python"] += leaf.us
        else:
            out[names[0]] += leaf.us
    return {k: round(v, 3) for k, v in out.items()}


def overview_payload(summary: Summary, breakdown: Breakdown, advice: AdvicePayload | None, *,
                     device_label: str, metadata: dict[str, Any], keep_metadata: bool = False,
                     health: Health | None = None) -> Overview:
    """The Overview: trace, totals, categories (the budget's where advice has a diagnosis, else the
    breakdown's), capture status, metadata (redacted unless kept), advice."""
    diag = advice.diagnosis if advice is not None else None
    cats = budget_categories(diag.budget, device=not _cpu_budget(diag.budget)) if diag is not None \
        else categories(breakdown)
    return Overview(trace=trace_info(summary), totals=totals(summary), device_label=device_label,
                    device_busy=summary.device_busy, categories=cats,
                    capture=capture(summary, keep_metadata=keep_metadata),
                    metadata=metadata if keep_metadata else redact(metadata), advice=advice,
                    categories_of="budget" if diag is not None else "device time", health=health)


def _cpu_budget(budget: list[Leaf]) -> bool:
    """A CPU-only trace's budget (``cpu/<class>`` and ``idle`` leaves)."""
    return any(leaf.key.startswith("cpu/") or leaf.key in ("idle", "idle/wait") for leaf in budget)
