"""One figure per profiler step for a metric: the samples a diff's noise test compares.

Metrics: ``step`` (each step's wall time: ``ProfilerStep#N``, else a serving engine's scheduler
step such as sglang's ``step[DECODE bs=32]``), ``device_busy`` (the device's busy time
over the activities each step launched; on a CPU-only trace the CPU's own op time inside the
step), an op class (``matmul``, ``attention``, ... from ``opclass.op_class``) or an op name (the
self device time of those ops, per step). A trace with no step is one sample: the whole trace.
"""
from __future__ import annotations

import bisect

import numpy as np

from ..errors import UserError
from ..trace import Trace
from ..trace.schema import DEVICE_TIME_SQL, TABLE_KINDS_SQL
from .busy import activities, device_busy, owners, union_ns
from .opclass import op_class
from .optable import op_table, total_device_us

CLASSES = ("pointwise", "reduction", "norm", "softmax", "copy", "matmul", "attention", "view", "compiled", "other")
BUILTIN = ("step", "device_busy")


# A step is a ``ProfilerStep#N`` (torch.profiler's schedule, ``profuse run``); a trace with none
# may mark a serving engine's scheduler steps instead (sglang: ``step[DECODE bs=32]``).
_STEP_WHERE = ("kind = 'annotation' AND name LIKE 'ProfilerStep#%'",
               "kind = 'annotation' AND name LIKE 'step[%]'")


def _step_rows(trace: Trace) -> list[tuple[int, int, int]]:
    """(start, end, thread) in ns of every step, in time order: profiler steps, else serving steps."""
    for where in _STEP_WHERE:
        rows = trace.con.execute(f"SELECT ts, ts + dur, coalesce(thread, -2) FROM events WHERE {where} "
                                 "ORDER BY ts, id").fetchall()
        if rows:
            return [(int(s), int(e), int(t)) for s, e, t in rows]
    return []


def _steps(trace: Trace) -> list[tuple[int, int]]:
    """(start, end) in ns of every step, in time order."""
    return [(s, e) for s, e, _t in _step_rows(trace)]


def step_count(trace: Trace) -> int:
    """How many steps the trace marks (0: none, so the whole trace is one sample)."""
    return len(_step_rows(trace))


def step_times_us(trace: Trace) -> list[float]:
    """Wall time of each profiler step in µs; the trace's span when it marks no step."""
    steps = _steps(trace)
    if steps:
        return [(e - s) / 1e3 for s, e in steps]
    return [float(trace.meta.get("span_us") or 0.0)]


def _op_names(trace: Trace) -> list[str]:
    """Every op-table name but the steps' own (a step's self time is not an op's work)."""
    return [r.name for r in op_table(trace).rows if not r.name.startswith("ProfilerStep#")]


def _names_of(trace: Trace, metric: str) -> list[str]:
    """The op names a class or op-name metric covers in this trace."""
    names = _op_names(trace)
    if metric in CLASSES:
        return [n for n in names if op_class(n) == metric]
    return [n for n in names if n == metric]


def _op_time_per_step(trace: Trace, names: list[str]) -> list[float]:
    """Self device time (CPU: self CPU time) of ops with these names, per step (launch inside it)."""
    steps = _steps(trace) or [(-(2**62), 2**62)]
    if not names:
        return [0.0] * len(steps)
    if trace.cpu_only:
        q = f"""SELECT e.ts, e.self_cpu FROM events e WHERE e.kind IN ({TABLE_KINDS_SQL}) AND e.depth IS NOT NULL
                AND e.name IN (SELECT unnest(?::VARCHAR[]))"""
    else:
        q = f"""SELECT l.ts, d.dur FROM events d JOIN events o ON o.id = d.op JOIN events l ON l.id = d.launch
                WHERE d.kind IN ({DEVICE_TIME_SQL}) AND o.name IN (SELECT unnest(?::VARCHAR[]))"""
    out = [0.0] * len(steps)
    starts = [s for s, _ in steps]
    for ts, ns in trace.con.execute(q, [names]).fetchall():
        i = bisect.bisect_right(starts, ts) - 1   # the latest step starting at or before the launch
        if i >= 0 and ts < steps[i][1]:
            out[i] += (ns or 0) / 1e3
    return out


def _busy_per_step(trace: Trace) -> list[float]:
    if trace.cpu_only:
        return _op_time_per_step(trace, _op_names(trace)) if _steps(trace) else [total_device_us(trace)]
    rows = _step_rows(trace)
    if not rows:
        busy = device_busy(trace)
        return [busy.busy_us if busy is not None else 0.0]
    # each activity belongs to the one step whose window holds its launch (as the report's steps)
    a = activities(trace)
    ts, end, thread = (np.array([r[k] for r in rows], dtype=np.int64) for k in range(3))
    owner = owners(a, ts, end, thread)
    return [union_ns(a.start[owner == i], a.end[owner == i]) / 1e3 for i in range(len(rows))]


def known(trace: Trace, metric: str) -> bool:
    """Whether the metric names something in this trace (built-ins and classes always do)."""
    return metric in BUILTIN or metric in CLASSES or bool(_names_of(trace, metric))


def samples(trace: Trace, metric: str) -> list[float]:
    """One value in µs per profiler step for ``metric`` (see the module docstring)."""
    if metric == "step":
        return step_times_us(trace)
    if metric == "device_busy":
        return _busy_per_step(trace)
    return _op_time_per_step(trace, _names_of(trace, metric))


def check_metric(metric: str, traces: list[Trace]) -> None:
    """A user error when the metric names no op or class in any of the traces."""
    if not any(known(t, metric) for t in traces):
        raise UserError(f"--metric {metric!r}: not step, device_busy, an op class ({', '.join(CLASSES)}) "
                        "or an op name found in either run")
