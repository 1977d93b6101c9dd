"""One figure per profiler step for a metric: the samples a diff's noise test compares.

The steps are the step model's (:mod:`.steps`: ``ProfilerStep#N``, vLLM and sglang scheduler steps).
Metrics: ``step`` (the time each step holds in the model: its host interval to its last device
activity, never overlapping the others), ``device_busy`` (the busy time in each step's span, as the step
table and the time budget count it: the device's, whoever launched the work; on a CPU-only trace the time in
ops and annotations), an op class (``matmul``, ``attention``, ... from ``opclass.op_class``) or an op name (the
self device time of those ops, per step). A trace with no step is one sample: the whole trace.
"""
from __future__ import annotations

import bisect

from ...errors import UserError
from ...trace import Trace
from ...trace.schema import DEVICE_TIME_SQL, TABLE_KINDS_SQL
from ..opclass import op_class
from ..optable import op_table
from ..steps import span_busy, step_model

CLASSES = ("pointwise", "reduction", "norm", "softmax", "copy", "matmul", "attention", "view", "compiled", "other")
BUILTIN = ("step", "device_busy")


def _steps(trace: Trace) -> list[tuple[int, int]]:
    """(start, end) in ns of every step's host interval, in time order (what its launches fall in)."""
    return [(st.ts, st.end) for st in step_model(trace).steps]


def step_count(trace: Trace) -> int:
    """How many steps the trace marks (0: none, so the whole trace is one sample)."""
    return len(step_model(trace).steps)


def step_times_us(trace: Trace) -> list[float]:
    """The time each step holds in µs (the step model's spans); the active window without steps."""
    model = step_model(trace)
    return [(hi - lo) / 1e3 for lo, hi in model.spans]


def _op_names(trace: Trace) -> list[str]:
    """Every op-table name but the steps' own (a step's self time is not an op's work)."""
    steps = {st.name for st in step_model(trace).steps}
    return [r.name for r in op_table(trace).rows if r.name not in steps]


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
    """The busy time in each step's span, as the step table and the time budget count it (``steps.span_busy``,
    the one rule): the device's busy time (every activity, whoever launched it), on a CPU-only trace the time in
    ops and annotations; with no step, the active window's."""
    return [ns / 1e3 for ns in span_busy(trace).tolist()]


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
