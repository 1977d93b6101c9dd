"""Memory before and after a change (``profuse diff``): each device's peak and each op's memory, A against B."""
from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ..memory import DevicePeak, has_memory, memory_peaks
from ..optable import op_table

if TYPE_CHECKING:
    from ...trace import Trace


class PeakDelta(msgspec.Struct, frozen=True):
    """One device's peak in both runs (devices paired in order, the CPU with the CPU); ``delta = b - a``."""

    a_device: str | None
    b_device: str | None
    a_peak_allocated_bytes: int
    b_peak_allocated_bytes: int
    delta_allocated_bytes: int
    a_peak_reserved_bytes: int
    b_peak_reserved_bytes: int
    delta_reserved_bytes: int


class OpMemoryDelta(msgspec.Struct, frozen=True):
    """One op name's memory (torch's key_averages columns, summed over its calls) in both runs."""

    name: str
    a_device_mem_bytes: int
    b_device_mem_bytes: int
    delta_device_mem_bytes: int
    a_cpu_mem_bytes: int
    b_cpu_mem_bytes: int
    delta_cpu_mem_bytes: int


class MemoryDiff(msgspec.Struct, frozen=True):
    """The diff's ``memory``: peaks per device, then ops, largest change first."""

    peaks: list[PeakDelta]
    ops: list[OpMemoryDelta]


def _pairs(a: list[DevicePeak], b: list[DevicePeak]) -> list[tuple[DevicePeak | None, DevicePeak | None]]:
    """Devices in order with devices (a CUDA run and a ROCm run compare), the CPU with the CPU."""
    out: list[tuple[DevicePeak | None, DevicePeak | None]] = []
    for cpu in (False, True):
        xs = [p for p in a if (p.device == "CPU") == cpu]
        ys = [p for p in b if (p.device == "CPU") == cpu]
        out += [(xs[i] if i < len(xs) else None, ys[i] if i < len(ys) else None) for i in range(max(len(xs), len(ys)))]
    return out


def memory_diff(a: Trace, b: Trace) -> MemoryDiff | None:
    """The memory diff, or None when neither run recorded memory."""
    if not has_memory(a) and not has_memory(b):
        return None
    peaks = []
    for x, y in _pairs(memory_peaks(a), memory_peaks(b)):
        xa, ya = (x.peak_allocated_bytes if x else 0), (y.peak_allocated_bytes if y else 0)
        xr, yr = (x.peak_reserved_bytes if x else 0), (y.peak_reserved_bytes if y else 0)
        peaks.append(PeakDelta(a_device=x.device if x else None, b_device=y.device if y else None,
                               a_peak_allocated_bytes=xa, b_peak_allocated_bytes=ya, delta_allocated_bytes=ya - xa,
                               a_peak_reserved_bytes=xr, b_peak_reserved_bytes=yr, delta_reserved_bytes=yr - xr))
    rows: dict[str, list[int]] = {}
    for side, t in enumerate((a, b)):
        for r in op_table(t, group_by="op").rows:
            v = rows.setdefault(r.name, [0, 0, 0, 0])
            v[side] += r.device_mem_bytes or 0
            v[2 + side] += r.cpu_mem_bytes or 0
    ops = [OpMemoryDelta(name=n, a_device_mem_bytes=v[0], b_device_mem_bytes=v[1], delta_device_mem_bytes=v[1] - v[0],
                         a_cpu_mem_bytes=v[2], b_cpu_mem_bytes=v[3], delta_cpu_mem_bytes=v[3] - v[2])
           for n, v in rows.items() if any(v)]
    ops.sort(key=lambda o: (-abs(o.delta_device_mem_bytes) - abs(o.delta_cpu_mem_bytes), o.name))
    return MemoryDiff(peaks=peaks, ops=ops)
