"""Trace-level totals: device time, how many device events were linked to ops, and why not."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._progress import timed
from ..errors import printable
from .busy import Busy, StepBusy
from .optable import device_counts, total_device_us
from .steps import device_busy, steps_busy

if TYPE_CHECKING:
    from ..trace import Trace  # annotations only: importing analysis for --help costs no DuckDB



@dataclass(frozen=True)
class Summary:
    """Trace-level totals (see :func:`summarize`)."""
    path: str
    device_kind: str
    device_name: str | None
    events: int
    span_us: float
    device_us: float
    kernels: int            # device events that take device time: kernels, memcpy, memset
    kernels_linked: int     # of those, linked to the op that launched them
    unlinked: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    unmatched_flows: int = 0
    from_cache: bool = False
    bundle_status: str | None = None   # a profuse bundle's status (complete / failed), else None
    bundle_error: str | None = None
    script_exit_code: int | None = None  # ``profuse run``: the script's own exit code (apart from the capture's status)
    # ``profuse run``: the capture's own cost, the fastest recorded step / the fastest steady call without the profiler
    capture_overhead: float | None = None
    device_busy: Busy | None = None    # union of device activity over every stream; None on CPU-only traces
    steps: list[StepBusy] = field(default_factory=list)  # per step of the step model (analysis/steps.py)


@timed("summary")
def summarize(trace: Trace) -> Summary:
    """Totals of one trace: events, span, device time, linked kernels and what was skipped, and a
    bundle's capture status."""
    m = trace.meta
    counts = device_counts(trace)
    return Summary(path=printable(str(trace.path)), device_kind=m.device_kind, device_name=m.device_name,
                   events=m.events, span_us=m.span_us, device_us=total_device_us(trace),
                   kernels=counts.activities, kernels_linked=counts.with_op, unlinked=dict(m.unlinked),
                   skipped=dict(m.skipped), unmatched_flows=m.unmatched_flows,
                   from_cache=trace.from_cache, device_busy=device_busy(trace), steps=steps_busy(trace),
                   **_bundle_status(trace))


def _bundle_status(trace: Trace) -> dict[str, Any]:
    """A bundle's meta.json says whether the capture completed; plain traces have none."""
    meta = trace.bundle
    if meta is None:
        return {}
    run_error = meta.run.error if meta.run is not None else None
    out: dict[str, Any] = {"bundle_status": meta.status, "bundle_error": meta.error or run_error}
    if meta.run is not None:
        out["script_exit_code"] = meta.run.exit_code
        out["capture_overhead"] = meta.run.overhead
    return out
