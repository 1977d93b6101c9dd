"""The time budget of a CPU-only trace: the CPU is the device, so each piece of a step goes to the
innermost thing running on the step's thread: ``cpu/<class>`` for an op or annotation (the kernel
classes of :mod:`.kernel_class`, from its name: ``gloo:all_reduce`` is communication),
``cpu/python`` for a Python frame, ``cpu/other`` for anything else; ``idle/wait`` for a frame that
waits rather than works (an event loop's ``epoll``/``select``, a ``sleep``, a lock's ``acquire``, a
queue's ``get``: :data:`WAITING`); where the step's thread runs nothing but the step, what another
thread runs there (gloo's collective threads, a worker), and ``idle`` when no thread runs anything.
No device claim is made. Without steps, the span is the busiest thread's first to last event.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..._lazy import lazy_module
from ..._progress import timed
from ...errors import printable
from ...trace import Trace
from ...trace.meta import listed_device
from ..kernel_class import _op_kernel_class
from ..steps import STEP_WHERE, step_model

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use: the records here are read without it
    np = lazy_module("numpy", globals(), "np")

if TYPE_CHECKING:
    from .records import Diagnosis

CPU_CLASSES = ("gemm", "attention", "conv", "norm", "elementwise", "reduction", "communication", "other")
CPU_LEAVES = (*(f"cpu/{c}" for c in CPU_CLASSES), "cpu/python", "idle/wait", "idle")
# Python frames that block waiting (the thread sleeps in the kernel), as torch's Python tracer names them
WAITING = re.compile(r"epoll|select\.(?:poll|select)|selectors\.py\(\d+\): select|time\.sleep|function sleep>|"
                     r"'acquire' of '_thread|threading\.py\(\d+\): wait|queue\.py\(\d+\): get|"
                     r"method 'recv|'accept' of", re.I)


def _leaf(kind: str, name: str) -> int:
    if kind in ("cpu_op", "annotation"):
        return CPU_LEAVES.index(f"cpu/{_op_kernel_class(name) or 'other'}")
    if kind == "python":
        return CPU_LEAVES.index("idle/wait" if WAITING.search(name) else "cpu/python")
    return CPU_LEAVES.index("cpu/other")


def span_ns(trace: Trace, thread: int, lo: int, hi: int, skip: int) -> np.ndarray:
    """ns per CPU leaf of [lo, hi) seen from ``thread`` (other threads fill its gaps), the event
    ``skip`` (the step) left out: each piece of the span goes to the last event covering it in the order
    other threads, then the step's; shallow first (so the innermost event wins)."""
    cols = trace.con.execute(f"""
        SELECT greatest(ts, ?) AS s, least(ts + dur, ?) AS e, kind, coalesce(name, '') AS name FROM events
        WHERE ts < ? AND ts + dur > ? AND id <> ? AND kind IN ('cpu_op', 'python', 'runtime',
              'annotation', 'sync') AND NOT ({STEP_WHERE})
        ORDER BY thread = ?, depth, ts, id""", [lo, hi, hi, lo, skip, thread]).fetchnumpy()
    start, end = np.asarray(cols["s"], dtype=np.int64), np.asarray(cols["e"], dtype=np.int64)
    kinds, names = np.asarray(cols["kind"], dtype=object), np.asarray(cols["name"], dtype=object)
    # an annotation exactly as long as the span is the span's own mark, not work inside it
    keep = (end > start) & ~((kinds == "annotation") & (start == lo) & (end == hi))
    start, end, kinds, names = start[keep], end[keep], kinds[keep], names[keep]
    out = np.zeros(len(CPU_LEAVES), dtype=np.int64)
    cuts = np.unique(np.concatenate([np.asarray([lo, hi], dtype=np.int64), start, end]))
    cuts = cuts[(cuts >= lo) & (cuts <= hi)]
    label = np.full(cuts.size - 1, CPU_LEAVES.index("idle"), dtype=np.int64)
    memo: dict[tuple[str, str], int] = {}   # one classification per distinct (kind, name)
    leaves = []
    for key in zip(kinds.tolist(), names.tolist()):
        if key not in memo:
            memo[key] = _leaf(*key)
        leaves.append(memo[key])
    first, last = np.searchsorted(cuts, start).tolist(), np.searchsorted(cuts, end).tolist()
    for i, j, leaf in zip(first, last, leaves):   # in the query's order: the innermost last
        label[i:j] = leaf
    np.add.at(out, label, np.diff(cuts))
    return out


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
    from .records import Diagnosis, Steady, StepBudget, leaves_of, warmup_index

    model = step_model(trace)
    steps = list(model.steps)
    spans = [(s.thread, lo, hi, s.id) for s, (lo, hi) in zip(steps, model.spans)]
    if not spans:
        busiest = _busiest_thread(trace)
        spans = [(busiest[0], busiest[1], busiest[2], -1)] if busiest else []
    warm = warmup_index([hi - lo for _t, lo, hi, _i in spans]) if steps else None
    steady = Steady({k: 0 for k in CPU_LEAVES}, 0, [])
    out = []
    for i, (thread, lo, hi, sid) in enumerate(spans):
        ns = span_ns(trace, thread, lo, hi, sid)
        if steps:
            st = steps[i]
            out.append(StepBudget(st.name, st.info.phase, st.info.batch, st.info.tokens, round((hi - lo) / 1e3, 3),
                                  leaves_of(CPU_LEAVES, ns, hi - lo), i == warm))
        if i != warm:
            steady.span_ns += hi - lo
            for k, v in zip(CPU_LEAVES, ns):
                steady.leaves[k] += int(v)
    ctx = Context(trace=trace, work=None, labels=None, steady=steady, candidates=candidates, peaks=None,
                  roofline_rows=[], target="steps" if steps else "whole trace", cpu=True)
    levers, small, combined = rank_levers(ctx)
    budget = leaves_of(CPU_LEAVES, np.asarray([steady.leaves[k] for k in CPU_LEAVES]), steady.span_ns)
    return Diagnosis(device=False, scope="steps" if steps else "trace", span_us=round(steady.span_ns / 1e3, 3),
                     budget=budget, steps=tuple(out), levers=levers, small_items=small, combined_gain_us=combined,
                     notes=("CPU-only trace: the budget is the CPU time of the step's thread (other threads' "
                            "where it runs nothing); no device claim", *_listed_device(trace)))


def _listed_device(trace: Trace) -> tuple[str, ...]:
    """A note where torch listed a GPU in the trace (``deviceProperties``) that recorded no device work:
    the model ran on the CPU, or device activity was not asked for."""
    listed, name = listed_device(trace.meta.trace_meta)
    if not listed:
        return ()
    return (f"torch listed {printable(name or 'a GPU')} in this trace, which holds no device activity and no launch: read "
            f"as a CPU run; if the model ran on the GPU, record ProfilerActivity.CUDA too",)
