"""Device time by category: compute, memory copy, communication, and idle (the device-wide window
minus the union of activity on every stream and minus the trace's unrecorded waits, which are not shown
to be idle: ``unrecorded_us``, steps.unrecorded_waits). Categories are unions of the diagnosis's kernel classes
(:func:`.kernel_class.kernel_class`, the one classifier): ``communication`` is communication,
memory copy is ``memcpy_*`` and ``memset``, compute every other class. On a CPU-only trace the CPU's top-level op time is
compute and there is no idle claim: the gaps are the host's own time, not a device's."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..trace.schema import DEVICE_TIME_SQL
from .kernel_class import kernel_class

if TYPE_CHECKING:
    from ..trace import Trace
    from .busy import Busy

@dataclass(frozen=True)
class Breakdown:
    """Device time (µs) per category; ``idle_us`` is None on a CPU-only trace (nothing to be idle)."""

    compute_us: float
    memory_copy_us: float
    communication_us: float
    idle_us: float | None
    unrecorded_us: float = 0.0   # the window's unrecorded waits (Busy.unrecorded_us): not in idle_us


def device_breakdown(trace: Trace, busy: Busy | None) -> Breakdown:
    """Sum the device time of kernels, copies and collectives; idle from ``busy`` (the summary's
    device-wide busy time, None on a CPU-only trace)."""
    if trace.cpu_only:
        (top,), = trace.con.execute(
            "SELECT sum(dur) FROM events WHERE kind IN ('cpu_op', 'annotation') "
            "AND parent_op IS NULL AND (SELECT p.kind FROM events p WHERE p.id = events.parent) IS DISTINCT FROM "
            "'annotation'").fetchall()
        return Breakdown(compute_us=(top or 0) / 1e3, memory_copy_us=0.0, communication_us=0.0, idle_us=None)
    sums = {"compute": 0.0, "copy": 0.0, "comm": 0.0}
    for kind, name, op, launch, direction, dur in trace.con.execute(f"""
            SELECT d.kind, coalesce(d.name, ''), o.name, l.name, r.direction, sum(d.dur) FROM events d
            LEFT JOIN events o ON o.id = d.op LEFT JOIN events l ON l.id = d.launch LEFT JOIN directions r ON r.id = d.id
            WHERE d.kind IN ({DEVICE_TIME_SQL}) GROUP BY 1, 2, 3, 4, 5""").fetchall():
        cls = kernel_class(kind, name, op, launch, direction)
        category = "comm" if cls == "communication" else "copy" if cls.startswith("mem") else "compute"
        sums[category] += (dur or 0) / 1e3
    return Breakdown(compute_us=sums["compute"], memory_copy_us=sums["copy"], communication_us=sums["comm"],
                     idle_us=busy.idle_us if busy is not None else 0.0,
                     unrecorded_us=busy.unrecorded_us if busy is not None else 0.0)
