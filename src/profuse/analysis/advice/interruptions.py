"""Interruptions: per scope, how busy the device was between each call's first and last kernel.

A scope instance's device activities are those whose launch call starts inside its CPU interval
(graph replays included). Instances of one scope may overlap (the same scope on several threads at
once, or nested in itself); each activity then belongs to one instance only (analysis/busy.py
``owners``: the launching thread's innermost instance, else another thread's). A scope's busy is
the union of its activities' intervals over every stream and its window the union of its
instances' windows (first activity start to last end), so busy <= window, busy + idle + unrecorded =
window, and neither exceeds the trace's device-wide figures. ``unrecorded`` is the part of the window the
diagnosis's time budget labels ``unrecorded/wait`` (launched work waiting before any device activity the
trace recorded in its step, or as long as the step's recorded device work: the device may have run work
the trace does not hold): it is not called idle here either, and busy % is of the window without it.

The gaps are the "breaks between hardware executions" that fusion removes: a scope that launches
many short kernels with idle time between them is launch-bound. On a CPU-only trace the ops are
the device work and the gaps between them are the Python and dispatch time around them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from ..._lazy import lazy_module
from ..._progress import timed
from ...trace import Trace
from ..busy import (
    LAUNCH_BOUND_BUSY_PCT,
    Activities,
    CpuWork,
    activities,
    cpu_work,
    gaps_inside_ns,
    launch_bound,
    launch_wait_in,
    launch_work,
    merge_runs,
    owners,
    union_ns,
    union_per_group,
)
from ..scopes import title_of, unit_table
from ..steps import unrecorded_waits

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use: the records here are read without it
    np = lazy_module("numpy", globals(), "np")

LAUNCH_BOUND_MIN_KERNELS = 3


@dataclass(frozen=True)
class Interruption:
    """A scope whose kernels leave the device idle between them: busy and idle time per instance."""

    scope: str
    instances: int
    kernels_per_instance: float
    busy_us: float          # union of the scope's device activity (each activity counted once)
    idle_us: float          # window minus busy and unrecorded (window: union of the instances' windows)
    busy_pct: float
    launch_us: float        # CPU time in launch calls (runtime API), summed
    queue_delay_us: float   # mean of kernel start - launch start, over activities not clock-skewed
    avg_kernel_us: float
    launch_bound: bool
    skewed_launches: int = 0  # activities that start before their launch call: clock skew, not a delay
    unrecorded_us: float = 0.0  # the window's unrecorded/wait time (the time budget's): not shown to be idle


@dataclass(frozen=True)
class _Scope:
    """One scope's figures before they become a row."""
    instances: int          # instances with at least one activity (CPU: with two ops)
    kernels: int            # activities (CPU: ops), each counted once
    busy_ns: int
    window_ns: int
    launch_us: float
    queue_delay_us: float   # mean over instances of their mean queue delay (skewed activities left out)
    waiting: Callable[[], int]  # launch work (ns) in the idle gaps, computed only when needed
    skewed: int = 0         # activities starting before their launch call (the device clock is off)
    unrecorded_ns: int = 0  # the window's unrecorded/wait time


def skewed_launches(trace: Trace) -> int:
    """Device activities that start before the runtime call that launched them: the device's clock is
    off from the host's (a queue delay cannot be negative)."""
    a = activities(trace)
    return int(np.count_nonzero(a.launched & (a.start < a.launch_ts)))


@timed("interruptions")
def interruptions(trace: Trace, *, top: int = 15) -> list[Interruption]:
    """Scopes with two or more kernels, most device idle time first (the ``top`` of them); the trace's
    unrecorded waits (:func:`steps.unrecorded_waits`) are left out of each scope's idle time."""
    scopes = _cpu_scopes(trace) if trace.cpu_only else _device_scopes(trace)
    out = []
    for title, g in scopes.items():
        if g.kernels < 2:
            continue
        window_ns = g.window_ns - g.unrecorded_ns   # the scope's device window
        idle_ns = window_ns - g.busy_ns
        pct = 100.0 * g.busy_ns / window_ns if window_ns else 100.0
        # launch-bound: mostly idle, and the idle time is the device waiting for the CPU's launches
        # (the launch work in the gaps is measured only where the rest of the rule can hold)
        bound = (not trace.cpu_only and g.kernels / g.instances >= LAUNCH_BOUND_MIN_KERNELS
                 and launch_bound(pct, idle_ns, 0 if pct >= LAUNCH_BOUND_BUSY_PCT else g.waiting()))
        out.append(Interruption(
            scope=title, instances=g.instances, kernels_per_instance=round(g.kernels / g.instances, 2),
            busy_us=g.busy_ns / 1e3, idle_us=idle_ns / 1e3, busy_pct=round(pct, 1),
            launch_us=round(g.launch_us, 3), queue_delay_us=round(g.queue_delay_us, 3),
            avg_kernel_us=round(g.busy_ns / 1e3 / g.kernels, 3), launch_bound=bool(bound), skewed_launches=g.skewed,
            unrecorded_us=g.unrecorded_ns / 1e3))
    out.sort(key=lambda r: -r.idle_us)
    return out[:top]


def _device_scopes(trace: Trace) -> dict[str, _Scope]:
    """Per scope: the device activities launched inside its instances, each owned by one instance."""
    members = _members(trace)
    if not members:
        return {}
    a = activities(trace)
    # a graph launch starts many activities: its CPU time counts once
    first_of_launch = np.ones(a.launch_id.size, dtype=bool)
    first_of_launch[1:] = a.launch_id[1:] != a.launch_id[:-1]
    # a call that is no launch work (busy.launch_work: a plain call over 1 ms blocked) is left out of Launch CPU,
    # as the time budget leaves it out of launch_overhead
    launch_ns = np.where(a.launched & first_of_launch & launch_work(a.launch_dur, a.graph_launch), a.launch_dur, 0)
    waits = CpuWork.of(*unrecorded_waits(trace))   # the unrecorded time before any moment, in two searches
    out = {}
    for title, (ts, end, thread) in members.items():
        scope = _device_scope(a, owners(a, ts, end, thread), launch_ns, trace, waits)
        if scope is not None:
            out[title] = scope
    return out


def _members(trace: Trace) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each scope's instances (start, end, thread; -2: unknown), in id order, the scopes in the order of
    their first instance. One title per distinct (kind, name), worked out once each."""
    pairs = trace.con.execute("SELECT DISTINCT kind, name FROM scopes WHERE kind IN ('module', 'annotation')").fetchall()
    if not pairs:
        return {}
    rows = trace.con.execute("""
        SELECT s.ts, s.ts + s.dur AS stop, coalesce(s.thread, -2) AS thread, p.code FROM scopes s
        JOIN (SELECT unnest(?::VARCHAR[]) AS kind, unnest(?::VARCHAR[]) AS name, unnest(range(?)) AS code) p
          ON p.kind = s.kind AND p.name IS NOT DISTINCT FROM s.name
        ORDER BY s.id""", [[k for k, _ in pairs], [n for _, n in pairs], len(pairs)]).fetchnumpy()
    titles: dict[str, int] = {}
    title_of_pair = np.asarray([titles.setdefault(title_of(k, n), len(titles)) for k, n in pairs], dtype=np.int64)
    which = title_of_pair[np.asarray(rows["code"], dtype=np.int64)]
    order = np.argsort(which, kind="stable")   # each title's instances, in id order
    cuts = np.searchsorted(which[order], np.arange(len(titles) + 1))
    firsts = np.full(len(titles), which.size, dtype=np.int64)
    np.minimum.at(firsts, which, np.arange(which.size))
    cols = [np.asarray(rows[k], dtype=np.int64) for k in ("ts", "stop", "thread")]
    names = list(titles)
    out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for t in np.argsort(firsts, kind="stable").tolist():
        at = order[cuts[t]:cuts[t + 1]]
        out[names[t]] = (cols[0][at], cols[1][at], cols[2][at])
    return out


def _device_scope(a: Activities, owner: np.ndarray, launch_ns: np.ndarray, trace: Trace,
                  waits: CpuWork) -> _Scope | None:
    """One scope's figures from the owner of each activity (-1: not the scope's); ``waits``: the unrecorded
    time, as runs (never busy: the budget labels it where no activity runs)."""
    idx = np.flatnonzero(owner >= 0)
    if idx.size == 0:
        return None
    idx = idx[np.argsort(owner[idx], kind="stable")]   # grouped by instance
    s, e = a.start[idx], a.end[idx]
    _, first = np.unique(owner[idx], return_index=True)
    ws, we = np.minimum.reduceat(s, first), np.maximum.reduceat(e, first)   # each instance's window
    # A device activity that starts before its launch call does (clock skew between host and device)
    # has no queue delay to report: it is counted, and left out of the mean, never a negative delay. The
    # delay runs from the call's end, as the budget's queued time does: an activity that starts while its
    # call still runs waited in no queue (0), and a call that blocked (a module's first load) is not queueing.
    fine = s >= a.launch_ts[idx]
    d = np.maximum(s - (a.launch_ts[idx] + a.launch_dur[idx]), 0)
    n_fine = np.add.reduceat(fine.astype(np.int64), first)
    # summed as doubles: delays from clocks or units that disagree (10^18 ns) overflow 64-bit sums negative
    sums = np.add.reduceat(np.where(fine, d, 0).astype(np.float64), first)
    has = n_fine > 0
    delay_us = float((sums[has] / n_fine[has]).mean()) / 1e3 if has.any() else 0.0
    rs, re_ = merge_runs(ws, we)
    return _Scope(instances=int(first.size), kernels=int(idx.size), busy_ns=union_ns(s, e),
                  window_ns=int((re_ - rs).sum()), launch_us=float(launch_ns[idx].sum()) / 1e3,
                  queue_delay_us=delay_us, waiting=partial(_waiting, s, e, ws, we, trace),
                  skewed=int(np.count_nonzero(~fine)), unrecorded_ns=int(waits.inside(rs, re_).sum()))


def _waiting(start: np.ndarray, end: np.ndarray, win_start: np.ndarray, win_end: np.ndarray, trace: Trace) -> int:
    """Launch work (ns) in the idle gaps inside the windows; the host's launch work is read only
    for the scopes whose busy share leaves launch-bound possible."""
    return launch_wait_in(*gaps_inside_ns(start, end, win_start, win_end), cpu_work(trace))[1]


def _no_waiting() -> int:
    return 0


def _cpu_scopes(trace: Trace) -> dict[str, _Scope]:
    """On the CPU the ops are the work; a child scope's time is work too, never the parent's idle.
    Each instance's figures come from its own thread's units (ops and child scopes): busy is the union of
    their intervals, the window their first start to their last end; an instance of a module or
    annotation counts with two or more op units, and a scope sums its instances."""
    t = unit_table(trace)
    n_ops = np.bincount(t.unit_inst[~t.is_scope], minlength=t.sid.size)
    named = np.fromiter((k in ("module", "annotation") for k in t.kind), dtype=bool, count=len(t.kind))
    rows = np.flatnonzero((named & (n_ops >= 2))[t.unit_inst])
    if not rows.size:
        return {}
    inst, start = t.unit_inst[rows], t.unit_ts[rows]
    busy, window, at = union_per_group(inst, start, start + t.unit_dur[rows])
    per: dict[str, list[tuple[int, int, int]]] = {}
    titles: dict[tuple[str, str], str] = {}
    for i, b, w in zip(inst[at].tolist(), busy.tolist(), window.tolist()):
        title = titles.get((t.kind[i], t.name[i]))
        if title is None:
            title = titles[(t.kind[i], t.name[i])] = title_of(t.kind[i], t.name[i])
        per.setdefault(title, []).append((int(n_ops[i]), b, w))
    return {title: _Scope(instances=len(rows), kernels=sum(r[0] for r in rows), busy_ns=sum(r[1] for r in rows),
                          window_ns=sum(r[2] for r in rows), launch_us=0.0, queue_delay_us=0.0, waiting=_no_waiting)
            for title, rows in per.items()}
