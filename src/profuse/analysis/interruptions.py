"""Interruptions: per scope instance, how busy the device was between its first and last kernel.

A scope instance's device activities are those whose launch call, on any thread, starts inside its
CPU interval (graph replays included); busy is the union of their intervals over every stream, so
it never exceeds the window (see analysis/busy.py for the shared definitions).

The gaps are the "breaks between hardware executions" that fusion removes: a scope that launches
many short kernels with idle time between them is launch-bound. On a CPU-only trace the ops are
the device work and the gaps between them are the Python and dispatch time around them.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from ..trace import Trace
from .busy import LAUNCH_BOUND_BUSY_PCT, CpuWork, cpu_work, launch_bound, launch_wait_ns, union_ns
from .fusion import scope_title
from .scopes import scope_instances

LAUNCH_BOUND_MIN_KERNELS = 3
SHORT_KERNEL_US = 10.0


@dataclass(frozen=True)
class Interruption:
    scope: str
    instances: int
    kernels_per_instance: float
    busy_us: float          # union of device activity between first and last kernel, summed over instances
    idle_us: float          # window minus busy, summed (busy + idle = window)
    busy_pct: float
    launch_us: float        # CPU time in launch calls (runtime API), summed
    queue_delay_us: float   # mean of kernel start - launch start
    avg_kernel_us: float
    launch_bound: bool


def interruptions(trace: Trace, *, top: int = 15) -> list[Interruption]:
    rows = _cpu_rows(trace) if trace.cpu_only else _device_rows(trace)
    groups: dict[str, list[tuple[float, ...]]] = {}
    for title, *vals in rows:
        groups.setdefault(title, []).append(tuple(vals))
    out = []
    for title, vals in groups.items():
        n = len(vals)
        kernels = sum(v[0] for v in vals)
        if kernels < 2:
            continue
        busy_ns, span_ns = sum(int(v[1]) for v in vals), sum(int(v[2]) for v in vals)
        idle_ns = span_ns - busy_ns
        pct = 100.0 * busy_ns / span_ns if span_ns else 100.0
        avg = busy_ns / 1e3 / kernels
        # launch-bound: mostly idle, and the idle time is the device waiting for the CPU's launches
        # (the launch work in the gaps is measured only where the rest of the rule can hold)
        bound = (not trace.cpu_only and kernels / n >= LAUNCH_BOUND_MIN_KERNELS
                 and launch_bound(pct, idle_ns, 0 if pct >= LAUNCH_BOUND_BUSY_PCT else sum(v[5]() for v in vals)))
        out.append(Interruption(
            scope=title, instances=n, kernels_per_instance=round(kernels / n, 2), busy_us=busy_ns / 1e3,
            idle_us=idle_ns / 1e3, busy_pct=round(pct, 1), launch_us=round(sum(v[3] for v in vals), 3),
            queue_delay_us=round(sum(v[4] for v in vals) / n, 3), avg_kernel_us=round(avg, 3),
            launch_bound=bool(bound)))
    out.sort(key=lambda r: -r.idle_us)
    return out[:top]


def _device_rows(trace: Trace) -> list[tuple]:
    """Per scope instance: the device activities whose launch call (any thread) starts inside it."""
    titles = {i.id: scope_title(i) for i in scope_instances(trace).values() if i.kind in ("module", "annotation")}
    if not titles:
        return []
    rows = trace.con.execute("""
        SELECT d.ts, d.ts + d.dur, l.ts, l.id, l.dur FROM events d JOIN events l ON l.id = d.launch
        WHERE d.kind IN ('kernel', 'memcpy', 'memset') ORDER BY l.ts, l.id""").fetchnumpy()
    start, end, lts, lid, ldur = (np.asarray(rows[k], dtype=np.int64) for k in rows)
    # a graph launch starts many activities: its CPU time counts once
    first_of_launch = np.ones(lid.size, dtype=bool)
    first_of_launch[1:] = lid[1:] != lid[:-1]
    ldur = np.where(first_of_launch, ldur, 0)
    work = cpu_work(trace)
    out = []
    for sid, ts, dur in trace.con.execute("SELECT id, ts, dur FROM scopes ORDER BY id").fetchall():
        if sid not in titles:
            continue
        lo, hi = np.searchsorted(lts, [ts, ts + dur], side="left")
        if hi - lo < 1:
            continue
        s, e = start[lo:hi], end[lo:hi]
        busy = union_ns(s, e)
        out.append((titles[sid], int(hi - lo), busy, int(e.max() - s.min()), float(ldur[lo:hi].sum()) / 1e3,
                    float((s - lts[lo:hi]).mean()) / 1e3, partial(_waiting, s, e, work)))
    return out


def _waiting(start: np.ndarray, end: np.ndarray, work: CpuWork) -> int:
    return launch_wait_ns(start, end, work)[1]


def _no_waiting() -> int:
    return 0


def _cpu_rows(trace: Trace) -> list[tuple]:
    """On the CPU the ops are the work; a child scope's time is work too, never the parent's idle."""
    out = []
    for inst in scope_instances(trace).values():
        ops = [u for u in inst.units if u.kind == "op"]
        if inst.kind not in ("module", "annotation") or len(ops) < 2:
            continue
        s = np.array([u.ts for u in inst.units], dtype=np.int64)
        e = np.array([u.ts + u.dur for u in inst.units], dtype=np.int64)
        out.append((scope_title(inst), len(ops), union_ns(s, e), int(e.max() - s.min()), 0.0, 0.0, _no_waiting))
    return out
