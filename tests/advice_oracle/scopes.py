"""Scope instances (nn.Module calls, annotations) and the units that ran directly inside each.

A unit is either a top-level op of the scope (not nested in another op of the same scope) or a call
of a child scope. Fusion patterns are sequences of units; device time rolls up the scope tree.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from profuse.analysis.opclass import Tensor, op_class, tensors
from profuse.trace import Trace

NORM_WORDS = ("Norm",)
ACT_WORDS = ("GELU", "Gelu", "SiLU", "ReLU", "Sigmoid", "Tanh", "Activation", "Mish", "Swish")


@dataclass
class Unit:
    id: int
    kind: str             # op | scope
    name: str             # op name, or the child scope's class / annotation name
    ts: int
    dur: int
    device_ns: int        # device time under it (CPU-only traces: its CPU time)
    kernels: int
    ins: list[Tensor] = field(default_factory=list)

    @property
    def cls(self) -> str:
        """Op class for ops; for child scopes: norm / activation / scope by the class name."""
        if self.kind == "op":
            return op_class(self.name)
        if any(w in self.name for w in NORM_WORDS):
            return "norm_module"
        if any(w in self.name for w in ACT_WORDS):
            return "activation_module"
        return "scope"


@dataclass
class ScopeInstance:
    id: int
    kind: str             # module | annotation | top (ops outside every scope, per thread)
    name: str
    label: str
    parent: int | None
    ts: int
    dur: int
    units: list[Unit] = field(default_factory=list)
    device_ns: int = 0
    kernels: int = 0

    @property
    def title(self) -> str:
        return f"nn.Module: {self.name}" if self.kind == "module" else self.name


_INSTANCES: weakref.WeakKeyDictionary[Trace, dict[int, ScopeInstance]] = weakref.WeakKeyDictionary()


def scope_instances(trace: Trace) -> dict[int, ScopeInstance]:
    """Every scope instance with its units in time order and inclusive device time and kernels.

    Computed once per loaded trace (its tables never change after loading; callers only read).
    """
    found = _INSTANCES.get(trace)
    if found is None:
        found = _INSTANCES[trace] = _scope_instances(trace)
    return found


def _scope_instances(trace: Trace) -> dict[int, ScopeInstance]:
    cpu = trace.cpu_only
    out: dict[int, ScopeInstance] = {}
    for sid, kind, name, label, parent, ts, dur in trace.con.execute(
            "SELECT id, kind, name, label, parent, ts, dur FROM scopes ORDER BY ts").fetchall():
        out[sid] = ScopeInstance(sid, kind, name, label, parent, ts, dur)
    rows = trace.con.execute("""
        SELECT e.id, coalesce(e.scope, -1 - e.thread), e.name, e.ts, e.dur, e.device_total, e.kernels_total,
               s.input_dims, s.input_types, e.thread
        FROM events e LEFT JOIN shapes s USING (id) LEFT JOIN events po ON po.id = e.parent_op
        WHERE e.kind = 'cpu_op' AND (e.parent_op IS NULL OR po.scope IS DISTINCT FROM e.scope)
        ORDER BY e.ts""").fetchall()
    for eid, sid, name, ts, dur, dev, kern, dims, types, thread in rows:
        inst = out.get(sid)
        if inst is None:  # ops outside every scope: one pseudo-scope per thread
            inst = out[sid] = ScopeInstance(sid, "top", f"top level (thread {thread})", "", None, ts, 0)
        inst.units.append(Unit(eid, "op", name, ts, dur, dur if cpu else dev, 1 if cpu else kern,
                               tensors(dims, types)))
    for inst in list(out.values()):
        if inst.parent is not None and inst.parent in out:
            out[inst.parent].units.append(Unit(inst.id, "scope", inst.name, inst.ts, inst.dur, 0, 0))
    for inst in out.values():
        inst.units.sort(key=lambda u: u.ts)
    _roll_up(out)
    return out


def _roll_up(out: dict[int, ScopeInstance]) -> None:
    """Inclusive device time and kernels per instance, children first; child units get them too."""
    done: dict[int, tuple[int, int]] = {}

    def total(sid: int) -> tuple[int, int]:
        if sid in done:
            return done[sid]
        inst = out[sid]
        dev = kern = 0
        for u in inst.units:
            if u.kind == "scope" and u.id in out:
                u.device_ns, u.kernels = total(u.id)
            dev += u.device_ns
            kern += u.kernels
        inst.device_ns, inst.kernels = dev, kern
        done[sid] = (dev, kern)
        return done[sid]

    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10000))
    try:
        for sid in out:
            total(sid)
    finally:
        sys.setrecursionlimit(limit)
