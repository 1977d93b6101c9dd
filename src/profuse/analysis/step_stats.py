"""What ran per step (the step model's, :mod:`.steps`): ops, kernels and device time per call."""
from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from ..trace import Trace
from .steps import step_ids

# Ops that allocate, view or dispatch but do no arithmetic: not "kernels" on the CPU.
NO_WORK = ("aten::empty", "aten::empty_strided", "aten::empty_like", "aten::view", "aten::as_strided",
           "aten::result_type", "aten::reshape", "aten::expand", "aten::t", "aten::transpose",
           "aten::permute", "aten::unsqueeze", "aten::squeeze", "aten::slice", "aten::select",
           "aten::detach", "aten::alias", "aten::_unsafe_view", "aten::lift_fresh", "aten::resize_",
           "TorchDynamo Cache Lookup", "Pregraph bytecode", "AOTDispatcher Runtime Wrapper Prologue",
           "aten::to", "aten::type_as", "aten::_to_copy")


SELF_SHARE = 0.25  # an op whose own (self) time is under this share of its total is a wrapper


@dataclass(frozen=True)
class StepStats:
    """Per-step figures of a profiled loop: ops and kernels per call, median device time and its spread."""

    steps: int
    ops_per_call: float          # top-level ops in each step: what the code called
    kernels_per_call: float      # device events (GPU) or, on the CPU, the median count per step of ops
                                 # doing their own work, compiled graph calls included
    device_us_per_call: float    # median over steps
    spread_pct: float            # inter-quartile range of per-step time over its median
    op_names: tuple[str, ...]    # distinct top-level op names, in first-seen order
    leaf_names: tuple[str, ...]  # what actually computed (CPU) or kernel names (GPU)
    per_step_us: tuple[float, ...] = ()  # device time of each step, sorted


def _no_work_list() -> str:
    return ", ".join("'" + n.replace("'", "''") + "'" for n in NO_WORK)


def _per_step(pairs: Iterable[tuple[int, int]]) -> list[float]:
    """Summed µs per step, sorted."""
    per: dict[int, int] = {}
    for step, ns in pairs:
        per[step] = per.get(step, 0) + ns
    return sorted(v / 1000 for v in per.values())


def spread_pct(values: list[float]) -> float:
    """Inter-quartile range over the median, in %: how steady the steps were."""
    if len(values) < 4:
        return 0.0
    q = statistics.quantiles(values, n=4)
    med = statistics.median(values)
    return 100.0 * (q[2] - q[0]) / med if med else 0.0


def step_stats(trace: Trace) -> StepStats:
    """Per-step statistics over the steps of a trace (the whole trace as one step if none)."""
    con = trace.con
    ids = step_ids(trace)
    steps = len(ids) or 1
    # top-level ops of a step: their nearest enclosing op is the step (python frames may sit between)
    top = con.execute("""
        SELECT e.name, e.dur, e.id, p.op FROM events e JOIN events p ON p.id = e.parent
        JOIN events s ON s.id = p.op
        WHERE s.id IN (SELECT unnest(?::BIGINT[])) AND e.kind IN ('cpu_op', 'annotation')
        ORDER BY e.ts""", [ids]).fetchall()
    op_names = tuple(dict.fromkeys(r[0] for r in top))
    if trace.cpu_only:
        # A CPU "kernel" is an op that does its own work: not a view or allocation, not a wrapper
        # whose children take most of its time. A compiled graph's call counts as its kernels.
        leaves = con.execute(f"""
            WITH RECURSIVE inside(id, step) AS (
                SELECT e.id, p.id FROM events e JOIN events p ON p.id = e.parent
                WHERE p.id IN (SELECT unnest(?::BIGINT[]))
                UNION ALL SELECT c.id, i.step FROM events c JOIN inside i ON c.parent = i.id)
            SELECT e.name, inside.step FROM events e JOIN inside USING (id)
            WHERE (e.kind = 'cpu_op' AND e.name NOT IN ({_no_work_list()})
                   AND e.name NOT LIKE 'Torch-Compiled Region%' AND e.self_cpu >= {SELF_SHARE} * e.dur)
               OR (e.kind = 'annotation' AND e.name LIKE '## Call CompiledFxGraph%')
            ORDER BY e.ts""", [ids]).fetchall()
        leaf_names = [r[0] for r in leaves]
        per_step = Counter(r[1] for r in leaves)
        kernels = statistics.median(per_step.values()) if per_step else 0.0
        per_step_us = _per_step((r[3], r[1]) for r in top)
    else:
        rows = con.execute("""
            SELECT k.name, k.dur, s.id FROM events k JOIN events o ON o.id = k.op
            JOIN events s ON s.id IN (SELECT unnest(?::BIGINT[]))
                 AND s.thread = o.thread AND o.ts >= s.ts AND o.ts < s.ts + s.dur
            WHERE k.kind IN ('kernel', 'memcpy', 'memset') ORDER BY k.ts""", [ids]).fetchall()
        leaf_names = [r[0] for r in rows]
        kernels = len(leaf_names) / steps
        per_step_us = _per_step((r[2], r[1]) for r in rows)
    return StepStats(steps=int(steps), ops_per_call=len(top) / steps, kernels_per_call=float(kernels),
                     device_us_per_call=statistics.median(per_step_us) if per_step_us else 0.0,
                     spread_pct=spread_pct(per_step_us), op_names=op_names, per_step_us=tuple(per_step_us),
                     leaf_names=tuple(dict.fromkeys(leaf_names)))
