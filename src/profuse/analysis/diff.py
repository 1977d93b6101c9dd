"""Diff two runs: ops and modules matched by name (across devices too), kernels by name when the
device kind is the same; time deltas, kernels removed or added, and the overall speedup."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..trace import Trace
from .optable import op_table, total_device_us


@dataclass(frozen=True)
class DiffRow:
    """One op, module or kernel in two runs: calls and time in each."""

    name: str
    a_calls: int
    b_calls: int
    a_us: float
    b_us: float

    @property
    def delta_us(self) -> float:
        """Time in run B minus time in run A (negative: B is faster)."""
        return self.b_us - self.a_us


@dataclass
class Diff:
    """Two runs compared: device totals and per-op, per-module and per-kernel rows."""

    a_label: str
    b_label: str
    a_device_us: float
    b_device_us: float
    same_device: bool
    ops: list[DiffRow] = field(default_factory=list)
    modules: list[DiffRow] = field(default_factory=list)
    kernels: list[DiffRow] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        """A's device time over B's (0 when B has none)."""
        return self.a_device_us / self.b_device_us if self.b_device_us else 0.0

    @property
    def kernels_removed(self) -> list[DiffRow]:
        """Kernels run A launched and run B did not."""
        return [k for k in self.kernels if k.b_calls == 0]

    @property
    def kernels_added(self) -> list[DiffRow]:
        """Kernels run B launched and run A did not."""
        return [k for k in self.kernels if k.a_calls == 0]


_STEP = re.compile(r"^(ProfilerStep)#\d+$")


def _totals(t: Trace, group: str, attr: str) -> dict[str, tuple[int, float]]:
    """calls and time per name, with every ProfilerStep#N counted as one name."""
    out: dict[str, tuple[int, float]] = {}
    for r in op_table(t, group_by=group).rows:
        name = _STEP.sub(r"\1#*", r.name)
        c, us = out.get(name, (0, 0.0))
        out[name] = (c + r.calls, us + getattr(r, attr))
    return out


def _rows(a: Trace, b: Trace, group: str, attr: str) -> list[DiffRow]:
    ta, tb = _totals(a, group, attr), _totals(b, group, attr)
    out = []
    for name in ta.keys() | tb.keys():
        (ca, ua), (cb, ub) = ta.get(name, (0, 0.0)), tb.get(name, (0, 0.0))
        out.append(DiffRow(name, ca, cb, ua, ub))
    out.sort(key=lambda r: (-abs(r.delta_us), r.name))  # ties by name: the same order every run
    return out


def diff(a: Trace, b: Trace) -> Diff:
    """Compare two loaded traces op by op, module by module and kernel by kernel."""
    same = a.device_kind == b.device_kind
    d = Diff(a_label=str(a.path), b_label=str(b.path), a_device_us=total_device_us(a),
             b_device_us=total_device_us(b), same_device=same)
    d.ops = _rows(a, b, "op", "self_device_us")
    d.modules = _rows(a, b, "module", "device_total_us")
    if same and not a.cpu_only:
        d.kernels = _rows(a, b, "kernel", "self_device_us")
    return d
