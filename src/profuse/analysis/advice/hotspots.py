"""Hotspots: ops, nn.Module classes and kernels ranked by device time, with their share."""
from __future__ import annotations

from dataclasses import dataclass

from ..._progress import timed
from ...trace import Trace
from ..optable import op_table


@dataclass(frozen=True)
class Hotspot:
    """An op, module or kernel with the largest share of device time."""

    kind: str           # op | module | kernel
    name: str
    calls: int
    device_us: float    # self device time for ops and kernels; inclusive for modules
    share_pct: float


@timed("hotspots")
def hotspots(trace: Trace, *, top: int = 10) -> list[Hotspot]:
    """The ``top`` ops, modules and kernels by device time (self time for ops and kernels)."""
    out: list[Hotspot] = []
    for kind, group, attr in (("op", "op", "self_device_us"), ("module", "module", "device_total_us"),
                              ("kernel", "kernel", "self_device_us")):
        if kind == "kernel" and trace.cpu_only:
            continue
        table = op_table(trace, group_by=group, sort="self_device" if attr == "self_device_us" else "device_total")
        total = table.device_us or 1.0
        for r in table.rows[:top]:
            t = getattr(r, attr)
            if t <= 0:
                break
            out.append(Hotspot(kind, r.name, r.calls, round(t, 3), round(100.0 * t / total, 2)))
    return out
