"""The memory section as sent: each device's peak, when it happened and what is live at it (docs/memory.md)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct

from ..analysis.memory import DevicePeak, MemoryPoint, MemorySection, memory_peaks, memory_section, memory_series

if TYPE_CHECKING:
    from ..trace import Trace

# ``memory``: one entry per device with memory events (``profile_memory=True``), the CPU last; the
# analysis record as it is (as OpRow is for ops), so the console can print it without this package
MemoryPayload = MemorySection


class MemoryLane(Struct):
    """A device's allocated and reserved bytes over time (points thinned to keep every bucket's highest),
    with the id of its peak's memory event."""

    device: str
    peak_id: int
    points: list[MemoryPoint]


def memory_of(trace: Trace, live_rows: int = 20) -> MemoryPayload | None:
    """The memory section of a loaded trace, or None for a trace without memory events (the key is left out)."""
    return memory_section(trace, live_rows)


class MemoryTimeline(Struct):
    """The timeline's memory counter lanes, one per device (empty without memory events), and each
    device's peak with what is live at it (what a report can show without a server)."""

    lanes: list[MemoryLane]
    devices: list[DevicePeak]


def memory_timeline_of(trace: Trace, max_points: int = 4000) -> MemoryTimeline:
    """One counter lane per device with memory events, for the timeline."""
    peaks = memory_peaks(trace)
    return MemoryTimeline(lanes=[MemoryLane(device=p.device, peak_id=p.peak_id,
                                            points=memory_series(trace, p.device, max_points)) for p in peaks],
                          devices=peaks)
