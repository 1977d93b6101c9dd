"""The time budget of a CPU-only trace: the CPU is the device, so each piece of a step goes to the
innermost thing running on the step's thread: ``cpu/<class>`` for an op or annotation (the kernel
classes of :mod:`.kernel_class`, from its name: ``gloo:all_reduce`` is communication),
``cpu/python`` for a Python frame, ``cpu/other`` for anything else; ``idle/wait`` for a frame that
waits rather than works (an event loop's ``epoll``/``select``, a ``sleep``, a lock's ``acquire``, a
queue's ``get``: :mod:`..waiting`); where the step's thread runs nothing but the step, what another
thread runs there (gloo's collective threads, a worker), and ``idle`` when no thread runs anything.
No device claim is made. Without steps, the span is the busiest thread's first to last event.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..._lazy import lazy_module
from ..._progress import timed
from ...errors import printable
from ...trace import Trace
from ...trace.meta import listed_device
from ..kernel_class import _op_kernel_class
from ..steps import STEP_WHERE, step_model, warmup
from ..waiting import waits

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use: the records here are read without it
    np = lazy_module("numpy", globals(), "np")

if TYPE_CHECKING:
    from .records import Diagnosis

CPU_CLASSES = ("gemm", "attention", "conv", "norm", "elementwise", "reduction", "communication", "other")
CPU_LEAVES = (*(f"cpu/{c}" for c in CPU_CLASSES), "cpu/python", "idle/wait", "idle")


def _leaf(kind: str, name: str) -> int:
    if kind in ("cpu_op", "annotation"):
        return CPU_LEAVES.index(f"cpu/{_op_kernel_class(name) or 'other'}")
    if kind == "python":
        return CPU_LEAVES.index("idle/wait" if waits(name) else "cpu/python")
    return CPU_LEAVES.index("cpu/other")


# the host events a span is painted with: every kind that runs on a thread, the step itself and steps left out
_SPAN_EVENTS = f"""FROM events WHERE ts < ? AND ts + dur > ? AND id <> ? AND kind IN ('cpu_op', 'python', 'runtime',
    'annotation', 'sync') AND NOT ({STEP_WHERE})"""


def span_ns(trace: Trace, thread: int, lo: int, hi: int, skip: int) -> np.ndarray:
    """ns per CPU leaf of [lo, hi) seen from ``thread`` (other threads fill its gaps), the event
    ``skip`` (the step) left out: each piece of the span goes to the last event covering it in the order
    other threads, then the step's; shallow first (so the innermost event wins). Each distinct
    (kind, name) is classified once; the pieces are painted by :func:`last_cover`."""
    args = [hi, lo, skip]
    pairs = trace.con.execute(f"SELECT DISTINCT kind, coalesce(name, '') {_SPAN_EVENTS}", args).fetchall()
    cols = trace.con.execute(f"""
        SELECT greatest(e.ts, ?) AS s, least(e.ts + e.dur, ?) AS e, l.leaf, e.kind = 'annotation' AS mark
        FROM (SELECT id, ts, dur, kind, coalesce(name, '') AS name, thread, depth {_SPAN_EVENTS}) e
        JOIN (SELECT unnest(?::VARCHAR[]) AS lk, unnest(?::VARCHAR[]) AS ln, unnest(?::INTEGER[]) AS leaf) l
          ON l.lk = e.kind AND l.ln = e.name
        ORDER BY e.thread = ?, e.depth, e.ts, e.id""",
        [lo, hi, *args, [k for k, _ in pairs], [n for _, n in pairs], [_leaf(k, n) for k, n in pairs],
         thread]).fetchnumpy()
    start, end = np.asarray(cols["s"], dtype=np.int64), np.asarray(cols["e"], dtype=np.int64)
    leaves, mark = np.asarray(cols["leaf"], dtype=np.int8), np.asarray(cols["mark"], dtype=bool)
    del cols
    # an annotation exactly as long as the span is the span's own mark, not work inside it
    keep = (end > start) & ~(mark & (start == lo) & (end == hi))
    start, end, leaves = start[keep], end[keep], leaves[keep]
    del keep, mark
    cuts = np.sort(np.concatenate([np.asarray([lo, hi], dtype=np.int64), start, end]))
    cuts = cuts[np.concatenate([[True], cuts[1:] != cuts[:-1]]) & (cuts >= lo) & (cuts <= hi)]
    first, last = np.searchsorted(cuts, start).astype(np.int32), np.searchsorted(cuts, end).astype(np.int32)
    del start, end
    winner = last_cover(first, last, cuts.size - 1)
    del first, last
    label = np.full(winner.size, CPU_LEAVES.index("idle"), dtype=np.int8)
    painted = winner >= 0
    label[painted] = leaves[winner[painted]]
    out = np.zeros(len(CPU_LEAVES), dtype=np.int64)
    np.add.at(out, label, np.diff(cuts))
    return out


def last_cover(first: np.ndarray, last: np.ndarray, n: int) -> np.ndarray:
    """For each of ``n`` pieces, the last interval (the highest index) whose pieces ``first[i]:last[i]``
    cover it, -1 for none: what painting the intervals in order leaves on each piece, in one pass.

    Each interval is cut into the O(log n) aligned blocks of a segment tree over the pieces (all
    intervals a level at a time), each block keeps the highest index cut into it, and a piece's
    answer is the highest over the blocks that hold it (pushed down the tree a level at a time)."""
    size = 1 << max(n - 1, 0).bit_length()
    kind = np.int32 if max(2 * size, first.size) < 2**31 else np.int64   # half the memory where it fits
    tree = np.full(2 * size, -1, dtype=kind)
    idx = np.arange(first.size, dtype=kind)
    lo, hi = first.astype(kind) + size, last.astype(kind) + size
    live = lo < hi
    idx, lo, hi = idx[live], lo[live], hi[live]
    while idx.size:
        odd = (lo & 1) == 1
        np.maximum.at(tree, lo[odd], idx[odd])
        lo = lo + odd
        odd = (hi & 1) == 1
        hi = hi - odd
        np.maximum.at(tree, hi[odd], idx[odd])
        lo, hi = lo >> 1, hi >> 1
        live = lo < hi
        idx, lo, hi = idx[live], lo[live], hi[live]
    level = 1
    while level < size:   # push each block's answer down to its two halves
        above = np.repeat(tree[level:2 * level], 2)
        np.maximum(tree[2 * level:4 * level], above, out=tree[2 * level:4 * level])
        level *= 2
    found: np.ndarray = tree[size:size + n]
    return found


def _busiest_thread(trace: Trace) -> tuple[int, int, int] | None:
    rows = trace.con.execute("""
        SELECT thread, min(ts), max(ts + dur) FROM events WHERE depth = 0 AND thread IS NOT NULL
        GROUP BY thread ORDER BY sum(dur) DESC, thread LIMIT 1""").fetchall()
    return (int(rows[0][0]), int(rows[0][1]), int(rows[0][2])) if rows else None


@timed("cpu budget")
def cpu_diagnosis(trace: Trace, candidates: list[Any]) -> Diagnosis:
    """The CPU budget of each step (or of the busiest thread) and the fusion levers; no device claim.
    A step's span is the step model's (:mod:`.steps`): its annotation, less what an earlier step holds."""
    from .levers import Context, rank_levers
    from .records import Diagnosis, Steady, StepBudget, leaves_of

    model = step_model(trace)
    steps = list(model.steps)
    spans = [(s.thread, lo, hi, s.id) for s, (lo, hi) in zip(steps, model.spans)]
    if not spans:
        busiest = _busiest_thread(trace)
        spans = [(busiest[0], busiest[1], busiest[2], -1)] if busiest else []
    warm = warmup(trace) if steps else None
    steady = Steady({k: 0 for k in CPU_LEAVES}, 0, [])
    out = []
    for i, (thread, lo, hi, sid) in enumerate(spans):
        ns = span_ns(trace, thread, lo, hi, sid)
        if steps:
            out.append(StepBudget.of(steps[i], lo, hi, leaves_of(CPU_LEAVES, ns, hi - lo), i == warm))
        if i != warm:
            steady.span_ns += hi - lo
            for k, v in zip(CPU_LEAVES, ns):
                steady.leaves[k] += int(v)
    ctx = Context(trace=trace, work=None, labels=None, steady=steady, candidates=candidates, peaks=None,
                  roofline_rows=[], target="steps" if steps else "active window", cpu=True)
    levers, small, combined, outside = rank_levers(ctx)
    budget = leaves_of(CPU_LEAVES, np.asarray([steady.leaves[k] for k in CPU_LEAVES]), steady.span_ns)
    return Diagnosis(device=False, scope="steps" if steps else "trace", span_us=round(steady.span_ns / 1e3, 3),
                     window_us=round(ctx.window_ns / 1e3, 3),
                     budget=budget, steps=tuple(out), levers=levers, small_items=small, combined_gain_us=combined,
                     notes=("CPU-only trace: the budget is the CPU time of the step's thread (other threads' "
                            "where it runs nothing); no device claim", *_listed_device(trace)),
                     combined_outside_us=outside)


def _listed_device(trace: Trace) -> tuple[str, ...]:
    """A note where torch listed a GPU in the trace (``deviceProperties``) that recorded no device work:
    the model ran on the CPU, or device activity was not asked for."""
    listed, name = listed_device(trace.meta.trace_meta)
    if not listed:
        return ()
    return (f"torch listed {printable(name or 'a GPU')} in this trace, which holds no device activity and no launch: read "
            f"as a CPU run; if the model ran on the GPU, record ProfilerActivity.CUDA too",)
