"""Interruptions: per scope instance, how busy the device was between its first and last kernel.

The gaps are the "breaks between hardware executions" that fusion removes: a scope that launches
many short kernels with idle time between them is launch-bound. On a CPU-only trace the ops are
the device work and the gaps between them are the Python and dispatch time around them.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..trace import Trace
from .fusion import scope_title
from .scopes import scope_instances

LAUNCH_BOUND_BUSY_PCT = 50.0
LAUNCH_BOUND_MIN_KERNELS = 3
SHORT_KERNEL_US = 10.0


@dataclass(frozen=True)
class Interruption:
    scope: str
    instances: int
    kernels_per_instance: float
    busy_us: float          # device busy between first and last kernel, summed over instances
    idle_us: float          # gaps between those kernels, summed
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
        busy, span = sum(v[1] for v in vals), sum(v[2] for v in vals)
        idle = max(span - busy, 0.0)
        pct = 100.0 * busy / span if span else 100.0
        avg = busy / kernels
        out.append(Interruption(
            scope=title, instances=n, kernels_per_instance=round(kernels / n, 2), busy_us=round(busy, 3),
            idle_us=round(idle, 3), busy_pct=round(pct, 1), launch_us=round(sum(v[3] for v in vals), 3),
            queue_delay_us=round(sum(v[4] for v in vals) / n, 3), avg_kernel_us=round(avg, 3),
            launch_bound=kernels / n >= LAUNCH_BOUND_MIN_KERNELS and pct < LAUNCH_BOUND_BUSY_PCT
            and avg < SHORT_KERNEL_US))
    out.sort(key=lambda r: -r.idle_us)
    return out[:top]


def _device_rows(trace: Trace) -> list[tuple]:
    titles = {i.id: scope_title(i) for i in scope_instances(trace).values() if i.kind in ("module", "annotation")}
    rows = trace.con.execute("""
        WITH RECURSIVE up(scope, anc) AS (
            SELECT id, id FROM scopes UNION ALL
            SELECT up.scope, s.parent FROM up JOIN scopes s ON s.id = up.anc WHERE s.parent IS NOT NULL),
        k AS (SELECT u.anc AS scope, d.ts, d.dur, l.ts AS lts, l.dur AS ldur
              FROM events d JOIN up u ON u.scope = d.scope LEFT JOIN events l ON l.id = d.launch
              WHERE d.kind IN ('kernel', 'memcpy', 'memset'))
        SELECT scope, count(*), sum(dur), max(ts + dur) - min(ts), sum(coalesce(ldur, 0)),
               avg(ts - lts) FROM k GROUP BY scope""").fetchall()
    return [(titles[s], c, b / 1e3, sp / 1e3, ld / 1e3, (q or 0) / 1e3) for s, c, b, sp, ld, q in rows if s in titles]


def _cpu_rows(trace: Trace) -> list[tuple]:
    out = []
    for inst in scope_instances(trace).values():
        ops = [u for u in inst.units if u.kind == "op"]
        if inst.kind not in ("module", "annotation") or len(ops) < 2:
            continue
        busy = sum(u.dur for u in ops) / 1e3
        span = (max(u.ts + u.dur for u in ops) - min(u.ts for u in ops)) / 1e3
        out.append((scope_title(inst), len(ops), busy, span, 0.0, 0.0))
    return out
