"""Scope instances (nn.Module calls, annotations) and the units that ran directly inside each.

A unit is either a top-level op of the scope (not nested in another op of the same scope) or a call
of a child scope. Fusion patterns are sequences of units. An instance's device time is the one
attribution every view uses (the op table's ``--group-by module``, hotspots, the Modules view): the
device activities whose ``scope`` (the scope holding their launch call, graph replays included) is
the instance or one below it, each counted once; ops outside every scope (one pseudo-scope per
thread) and CPU-only traces (where it is CPU time) sum their op units.
"""
from __future__ import annotations

import re
import weakref
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from .._progress import timed
from ..trace import Trace
from ..trace.schema import DEVICE_TIME_SQL
from .opclass import Tensor, op_class, tensors

NORM_WORDS = ("Norm",)
ACT_WORDS = ("GELU", "Gelu", "SiLU", "ReLU", "Sigmoid", "Tanh", "Activation", "Mish", "Swish")


@dataclass
class Unit:
    """One step inside a scope instance: an op or a child scope, with its device work."""

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
    """One run of a module or annotation scope (or the ops outside every scope) and its units."""

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
        """The name shown for the scope: ``nn.Module: X`` for a module, else its name."""
        return f"nn.Module: {self.name}" if self.kind == "module" else self.name


_STEP = re.compile(r"#\d+$")


def title_of(kind: str, name: str) -> str:
    """What advice calls a scope: ``nn.Module: <class>`` for modules; for annotations their name, with
    a trailing step number folded (``ProfilerStep#12`` -> ``ProfilerStep#*``)."""
    if kind == "module":
        return f"nn.Module: {name}"
    return _STEP.sub("#*", name)


def scope_title(inst: ScopeInstance) -> str:
    """:func:`title_of` an instance."""
    return title_of(inst.kind, inst.name)


_INSTANCES: weakref.WeakKeyDictionary[Trace, dict[int, ScopeInstance]] = weakref.WeakKeyDictionary()
_SOME_INSTANCES: weakref.WeakKeyDictionary[Trace, dict[frozenset[str], dict[int, ScopeInstance]]] = \
    weakref.WeakKeyDictionary()


def scope_instances(trace: Trace) -> dict[int, ScopeInstance]:
    """Every scope instance with its units in time order and inclusive device time and kernels.

    Computed once per loaded trace (its tables never change after loading; callers only read).
    """
    found = _INSTANCES.get(trace)
    if found is None:
        found = _INSTANCES[trace] = _scope_instances(trace)
    return found


def scope_instances_with(trace: Trace, ops: Collection[str]) -> dict[int, ScopeInstance]:
    """The instances among :func:`scope_instances` that ran at least one op (as a unit of their own)
    named in ``ops``, each exactly as there (units, their order, inclusive device time and kernels);
    in the same order. Advice that needs a certain kind of op reads only these: the units of the
    other instances are never built. Computed once per loaded trace and set of names."""
    key = frozenset(ops)
    per_trace = _SOME_INSTANCES.setdefault(trace, {})
    found = per_trace.get(key)
    if found is None:
        full = _INSTANCES.get(trace)
        if full is not None:
            found = {sid: inst for sid, inst in full.items() if any(u.kind == "op" and u.name in key for u in inst.units)}
        else:
            found = _scope_instances(trace, sorted(key))
        per_trace[key] = found
    return found


# The units of every scope instance: its top-level ops (not nested in another op of the same scope);
# ops outside every scope belong to one pseudo-scope per thread, numbered -1 - thread. (``parent_op``
# is always a cpu_op, so only those are joined.)
_SID = "coalesce(e.scope, -1 - e.thread)"
_UNIT_OF = """
        FROM events e LEFT JOIN (SELECT id, scope FROM events WHERE kind = 'cpu_op') po ON po.id = e.parent_op
        WHERE e.kind = 'cpu_op' AND (e.parent_op IS NULL OR po.scope IS DISTINCT FROM e.scope)"""
_UNITS = f"""
    WITH units AS (
        SELECT e.id, {_SID} AS sid, e.name, e.ts, e.dur, e.device_total, e.kernels_total, e.thread {_UNIT_OF})"""


@timed("scope instances")
def _scope_instances(trace: Trace, only: list[str] | None = None) -> dict[int, ScopeInstance]:
    """Every instance, or with ``only`` just those with an op unit of one of those names (their
    child-scope units still carry the child's inclusive totals, summed over all of its units)."""
    cpu = trace.cpu_only
    out: dict[int, ScopeInstance] = {}
    for sid, kind, name, label, parent, ts, dur in trace.con.execute(
            "SELECT id, kind, name, label, parent, ts, dur FROM scopes ORDER BY ts").fetchall():
        out[sid] = ScopeInstance(sid, kind, name, label, parent, ts, dur)
    if only is None:
        rows = trace.con.execute(_UNITS + """
            SELECT u.id, u.sid, u.name, u.ts, u.dur, u.device_total, u.kernels_total, s.input_dims, s.input_types,
                   u.thread
            FROM units u LEFT JOIN shapes s USING (id) ORDER BY u.ts""").fetchall()
        return _fill(out, rows, cpu, None if cpu else _device_own(trace))
    if not only:
        return {}
    # the instances with a wanted op among their units (the join runs over those ops only) ...
    wanted = {sid for (sid,) in trace.con.execute(
        f"SELECT DISTINCT {_SID} {_UNIT_OF} AND e.name IN (SELECT unnest(?::VARCHAR[]))", [only]).fetchall()}
    if not wanted:
        return {}
    # ... their units, and the own totals (op units summed) of them and every scope below them, so a
    # child scope's unit carries its inclusive figures without its units being read
    children: dict[int, list[int]] = {}
    for sid, inst in out.items():
        if inst.parent is not None:
            children.setdefault(inst.parent, []).append(sid)
    below, todo = set(wanted), list(wanted)
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in below:
                below.add(c)
                todo.append(c)
    dev, kern = ("e.dur", "count(*)") if cpu else ("e.device_total", "sum(e.kernels_total)")
    rows = trace.con.execute(f"""
        SELECT false AS total, e.id, {_SID} AS sid, e.name, e.ts, e.dur, e.device_total, e.kernels_total,
               s.input_dims, s.input_types, e.thread
        {_UNIT_OF.replace("FROM events e", "FROM events e LEFT JOIN shapes s USING (id)")}
              AND {_SID} IN (SELECT unnest(?::BIGINT[]))
        UNION ALL
        SELECT true, NULL, {_SID}, NULL, NULL, NULL, sum({dev}), {kern}, NULL, NULL, NULL {_UNIT_OF}
              AND {_SID} IN (SELECT unnest(?::BIGINT[])) GROUP BY {_SID}
        ORDER BY total, ts""", [sorted(wanted), sorted(below)]).fetchall()
    split = next((i for i, r in enumerate(rows) if r[0]), len(rows))
    own = {r[2]: (r[6] or 0, r[7] or 0) for r in rows[split:]}
    if not cpu:  # real scopes: their device activities; the pseudo-scopes (< 0) keep their op units
        own = {**{sid: v for sid, v in own.items() if sid < 0}, **_device_own(trace)}
    return _fill(out, [r[1:] for r in rows[:split]], cpu, own, only_with_units=True)


def _device_own(trace: Trace) -> dict[int, tuple[int, int]]:
    """ns and count of the device activities each scope holds itself (its ``scope``), graph replays included."""
    return {int(sid): (int(ns or 0), int(n)) for sid, ns, n in trace.con.execute(f"""
        SELECT scope, sum(dur), count(*) FROM events WHERE kind IN ({DEVICE_TIME_SQL}) AND scope IS NOT NULL
        GROUP BY scope""").fetchall()}


def _fill(out: dict[int, ScopeInstance], rows: list[tuple[Any, ...]], cpu: bool,
          own: dict[int, tuple[int, int]] | None, *, only_with_units: bool = False) -> dict[int, ScopeInstance]:
    """Units from ``rows`` into their instances; then child-scope units and the roll-up. ``own`` is each
    scope's own (device time, count) (None: its op units'); a pseudo-scope missing from it sums its op
    units. With ``only_with_units`` only instances that received rows are kept."""
    for eid, sid, name, ts, dur, dev, kern, dims, types, thread in rows:
        inst = out.get(sid)
        if inst is None:  # ops outside every scope: one pseudo-scope per thread
            inst = out[sid] = ScopeInstance(sid, "top", f"top level (thread {thread})", "", None, ts, 0)
        inst.units.append(Unit(eid, "op", name, ts, dur, dur if cpu else dev, 1 if cpu else kern,
                               tensors(dims, types)))
    if own is not None:
        own = dict(own)
        for sid, inst in out.items():
            if sid < 0 and sid not in own:
                own[sid] = (sum(u.device_ns for u in inst.units), sum(u.kernels for u in inst.units))
    kept = {sid for sid, inst in out.items() if inst.units} if only_with_units else set(out)
    for inst in list(out.values()):
        if inst.parent is not None and inst.parent in kept:
            out[inst.parent].units.append(Unit(inst.id, "scope", inst.name, inst.ts, inst.dur, 0, 0))
    for inst in out.values():
        inst.units.sort(key=lambda u: u.ts)
    _roll_up(out, own)
    return {sid: out[sid] for sid in out if sid in kept} if only_with_units else out


def _roll_up(out: dict[int, ScopeInstance], own: dict[int, tuple[int, int]] | None = None) -> None:
    """Inclusive device time and kernels per instance, children first; child units get them too.

    Without ``own`` an instance's total is the sum of its units (its child scopes' totals first).
    With ``own`` (each scope's own figures: its device activities, or on a CPU-only trace its summed op
    units, from SQL) totals come from the whole scope tree, so instances whose op units were not read
    still give their parents the right figures.
    """
    children: dict[int, list[int]] = {}
    for sid, inst in out.items():
        if inst.parent is not None and inst.parent in out:
            children.setdefault(inst.parent, []).append(sid)
    done: dict[int, tuple[int, int]] = {}
    # children before parents, without recursion (a scope tree can be thousands deep)
    for root in [sid for sid, inst in out.items() if inst.parent is None or inst.parent not in out]:
        stack = [(root, False)]
        while stack:
            sid, expanded = stack.pop()
            if sid in done:
                continue
            if not expanded:
                stack.append((sid, True))
                stack.extend((c, False) for c in children.get(sid, ()) if c not in done)
                continue
            inst = out[sid]
            if own is None:
                dev = kern = 0
                for u in inst.units:
                    if u.kind == "scope" and u.id in out:
                        u.device_ns, u.kernels = done[u.id]
                    dev += u.device_ns
                    kern += u.kernels
            else:
                dev, kern = own.get(sid, (0, 0))
                for c in children.get(sid, ()):
                    dev += done[c][0]
                    kern += done[c][1]
                for u in inst.units:
                    if u.kind == "scope" and u.id in out:
                        u.device_ns, u.kernels = done[u.id]
            inst.device_ns, inst.kernels = dev, kern
            done[sid] = (dev, kern)
