"""The step model: what a step is and which time it holds, answered once for every analysis and view.

**Which annotations are steps.** A host annotation (``user_annotation``) whose name is one of:

- ``ProfilerStep#N`` (torch.profiler's ``schedule``/``step()``, ``profuse run``): a plain step, number N.
- vLLM's scheduler steps, in both forms real engines write:
  ``execute_{tokens}_context_{n}(...)_generation_{m}(...)`` and
  ``execute_context_{n}({t})_generation_{m}({t})``: ``n`` prefill (context) requests and ``m`` decode
  (generation) requests; the phase is ``prefill`` (m = 0), ``decode`` (n = 0) or ``mixed``, the batch
  n + m; tokens are the leading ``{tokens}``, else the sum of the parenthesised counts where each is
  one integer (unknown otherwise).
- sglang's ``step[DECODE bs=B]`` / ``step[EXTEND bs=B toks=T]`` (EXTEND is prefill; ``MIXED`` is
  mixed): batch B, tokens T where the name carries it. ``IDLE`` has no phase.

Only the outermost step annotation of a thread is a step; one nested in it (a serving step inside
``ProfilerStep#N``, sglang's inside a vLLM-style name) describes it instead: known fields win over
unknown ones. Device-side copies of these names (``gpu_user_annotation``) are not steps.

**Which time a step holds.** A step runs from its start on the host to the later of its end and the
end of the last device activity it launched (ownership: :func:`busy.owners`). Where those intervals
overlap (the device lags the host, so a step's kernels run on into the next step's host time; steps
on several threads), the union is used: taken in start order, each step holds the part of its
interval that no earlier step holds, so it begins where the previous one's ended. Steps therefore
never overlap and never add up past the trace. The union rather than cutting each step where the
next begins, so that the device work a step launched stays in that step, and the last step is not
handed the tail of all the others. A CPU-only trace's steps are their annotations, under the same rule.

**The warm-up.** With two steps or more, the first is a warm-up (compilation, allocator growth), left
out of the steady steps the budget, the levers and the submissions per step describe, when its span is
over ``WARMUP_FACTOR`` x the median of the others' and the others are busy at all (:func:`span_busy`:
device time on a device trace, op time on a CPU-only one): a first step that alone holds the work is
the only step there is to read, never a warm-up to drop.

**The step table** (:func:`steps_busy`) reads each step's span: its device activities are every one
that runs in it (whoever launched it: the budget's busy time), clipped to it; its window runs from the
first of them to the last.

**Without steps** the whole run is one span: the active window of the model's work (the first start
to the last end of ops, runtime calls and device activity), not the profiler's envelope (its own
``PyTorch Profiler`` annotation and Python frames around the model, which made an idle share of
the window look like the model's).
"""
from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_module
from ..trace.schema import DEVICE_TIME_SQL
from ..trace.step_names import STEP_SQL, STEP_WHERE, StepName, merge, parse_step
from ._memo import once_per_trace
from .busy import (
    LAUNCH_GAP_MAX_US,
    Busy,
    CpuWork,
    StepBusy,
    activities,
    busy_of,
    cpu_work,
    intersect_runs,
    launch_bound,
    merge_runs,
    owners,
    pct_of,
    union_ns,
    unrecorded_in,
)

if TYPE_CHECKING:
    import numpy as np

    from ..trace import Trace
else:  # numpy loads on first use: the records here are read without it
    np = lazy_module("numpy", globals(), "np")

_NUMBER = re.compile(r"#(\d+)")
WARMUP_FACTOR = 3.0   # a first step this many times the median of the others' spans is a warm-up
# what counts as the model's work when a trace has no steps (its active window)
_WORK_KINDS_SQL = f"'cpu_op', 'runtime', 'sync', {DEVICE_TIME_SQL}"


@dataclass(frozen=True)
class Step:
    """One step: its annotation (id, name, host start and end in ns, thread, depth), its number
    (``ProfilerStep#N``'s N, else its position) and what its name says."""

    id: int
    name: str
    number: int
    ts: int
    end: int
    thread: int      # -2: unknown
    depth: int
    info: StepName


def find_steps(con: Any) -> list[Step]:
    """The steps of the trace whose tables ``con`` (a DuckDB connection) holds, in time order."""
    rows = con.execute(f"""
        SELECT id, name, ts, ts + greatest(dur, 0), coalesce(thread, -2), coalesce(depth, 0) FROM events
        WHERE {STEP_WHERE} ORDER BY 5, ts, dur DESC, id""").fetchall()
    out: list[Step] = []
    for id_, name, ts, end, thread, depth in rows:
        info = parse_step(name)
        if info is None:
            continue
        outer = out[-1] if out and out[-1].thread == thread and ts >= out[-1].ts and end <= out[-1].end else None
        if outer is not None:
            out[-1] = Step(outer.id, outer.name, outer.number, outer.ts, outer.end, outer.thread, outer.depth,
                           merge(outer.info, info))
            continue
        out.append(Step(int(id_), name, -1, int(ts), int(end), int(thread), int(depth), info))
    out.sort(key=lambda s: (s.ts, s.id))
    return [Step(s.id, s.name, _number(s.name, i), s.ts, s.end, s.thread, s.depth, s.info) for i, s in enumerate(out)]


def _number(name: str, position: int) -> int:
    m = _NUMBER.search(name) if name.startswith("ProfilerStep#") else None
    return int(m.group(1)) if m else position


def union_spans(starts: np.ndarray, ends: np.ndarray) -> list[tuple[int, int]]:
    """Each interval's part of the union not held by an earlier one (intervals in start order): the
    spans never overlap and their lengths add up to the union's."""
    out: list[tuple[int, int]] = []
    held = None
    for s, e in zip(starts.tolist(), ends.tolist()):
        lo = s if held is None else max(s, held)
        hi = max(e, lo)
        out.append((lo, hi))
        held = hi if held is None else max(held, hi)
    return out


@dataclass(frozen=True)
class StepModel:
    """The trace's steps and the time each holds (see the module docstring)."""

    steps: tuple[Step, ...]
    spans: tuple[tuple[int, int], ...]    # (start, end) ns per step, disjoint, in step order
    window: tuple[int, int]               # the steps' first start to last end, else the active window
    owner: np.ndarray | None              # per device activity (busy.activities order): its step, or -1

    @property
    def scope(self) -> str:
        """``steps`` when the trace marks steps, else ``trace`` (one span: the active window)."""
        return "steps" if self.steps else "trace"


@once_per_trace
def step_model(trace: Trace) -> StepModel:
    """The step model of a loaded trace, built once per trace (callers only read it)."""
    steps = find_steps(trace.con)
    ts = np.asarray([s.ts for s in steps], dtype=np.int64)
    end = np.asarray([s.end for s in steps], dtype=np.int64)
    owner = None
    if not trace.cpu_only:
        a = activities(trace)
        owner = owners(a, ts, end, np.asarray([s.thread for s in steps], dtype=np.int64))
        if steps and a.end.size:
            last = np.full(len(steps), np.iinfo(np.int64).min, dtype=np.int64)
            m = owner >= 0
            np.maximum.at(last, owner[m], a.end[m])
            end = np.maximum(end, last)
    if not steps:
        lo, hi = active_window(trace.con)
        return StepModel((), ((lo, hi),), (lo, hi), owner)
    spans = tuple(union_spans(ts, end))
    return StepModel(tuple(steps), spans, (spans[0][0], max(hi for _lo, hi in spans)), owner)


def active_window(con: Any) -> tuple[int, int]:
    """First start and last end of the model's work (ops, runtime calls, device activity); of any
    event where there is no such work."""
    (lo, hi), = con.execute(f"SELECT min(ts), max(ts + greatest(dur, 0)) FROM events "
                            f"WHERE kind IN ({_WORK_KINDS_SQL})").fetchall()
    if lo is None:
        (lo, hi), = con.execute("SELECT min(ts), max(ts + greatest(dur, 0)) FROM events").fetchall()
    return int(lo or 0), int(hi or 0)


@once_per_trace
def unrecorded_waits(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The trace's unrecorded waits (:func:`busy.unrecorded_in` over the step model's spans), as disjoint
    runs [start, end); none on a CPU-only trace. The one rule the time budget's ``unrecorded/wait`` leaf,
    the step table, device busy and the interruptions read."""
    if trace.cpu_only:
        z = np.zeros(0, dtype=np.int64)
        return z, z
    return unrecorded_in(activities(trace), step_model(trace).spans)


def device_busy(trace: Trace) -> Busy | None:
    """Device-wide busy time over the trace (its unrecorded waits apart: :func:`unrecorded_waits`); None on a
    CPU-only trace (no device to be idle)."""
    if trace.cpu_only:
        return None
    a = activities(trace)
    return busy_of(a.start, a.end, unrecorded_waits(trace))


def step_ids(trace: Trace) -> list[int]:
    """events.id of every step annotation (for queries that leave the steps' own rows out)."""
    return [s.id for s in step_model(trace).steps]


@dataclass(frozen=True)
class SpanRuns:
    """The device's busy time cut at the step model's spans: the runs of the union of every device activity
    (any stream, whoever launched it, launched or not) clipped to each span, in time order, with each one's
    span; and per span how many activities start in it (so each activity is counted once)."""

    start: np.ndarray
    end: np.ndarray
    span: np.ndarray
    starts: np.ndarray   # per span

    def busy(self) -> np.ndarray:
        """ns of device busy time per span."""
        out = np.zeros(self.starts.size, dtype=np.int64)
        np.add.at(out, self.span, self.end - self.start)
        return out


def runs_in_spans(start: np.ndarray, end: np.ndarray, spans: Sequence[tuple[int, int]]) -> SpanRuns:
    """Activities [start, end) cut at disjoint spans in time order (the step model's): :class:`SpanRuns`."""
    lo = np.asarray([x for x, _ in spans], dtype=np.int64)
    hi = np.asarray([x for _, x in spans], dtype=np.int64)
    start, end = np.asarray(start, dtype=np.int64), np.asarray(end, dtype=np.int64)
    rs, re_ = merge_runs(start, end)
    s, e, k = intersect_runs(rs, re_, lo, hi)
    i = np.searchsorted(lo, start, side="right") - 1
    inside = (i >= 0) & (start < hi[np.clip(i, 0, None)]) if lo.size else np.zeros(start.size, dtype=bool)
    return SpanRuns(s, e, k.astype(np.int64), np.bincount(i[inside], minlength=lo.size).astype(np.int64))


@once_per_trace
def span_runs(trace: Trace) -> SpanRuns:
    """The device's busy runs in the step model's spans (:class:`SpanRuns`), found once per trace."""
    a = activities(trace)
    return runs_in_spans(a.start, a.end, step_model(trace).spans)


@once_per_trace
def _cpu_ops(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Per span of a CPU-only trace: the time in ops and annotations (the work the CPU budget classes: gloo's
    ``gloo:all_reduce`` is an annotation; steps' own marks left out) on any thread that start in it, clipped to
    it, and how many of its ops are outermost."""
    ops = trace.con.execute(f"""SELECT ts, ts + greatest(dur, 0), kind = 'cpu_op' AND parent_op IS NULL FROM events
        WHERE kind IN ('cpu_op', 'annotation') AND NOT ({STEP_WHERE}) ORDER BY ts""").fetchnumpy()
    ts, end, top = (np.asarray(ops[k]) for k in ops)
    busy, tops = [], []
    for lo, hi in step_model(trace).spans:   # the ops come sorted by start: each span's are one slice
        i, j = np.searchsorted(ts, lo, side="left"), np.searchsorted(ts, hi, side="left")
        busy.append(union_ns(ts[i:j].astype(np.int64), np.minimum(end[i:j], hi).astype(np.int64)) if j > i else 0)
        tops.append(int(np.count_nonzero(top[i:j])))
    return np.asarray(busy, dtype=np.int64), np.asarray(tops, dtype=np.int64)


def span_busy(trace: Trace) -> np.ndarray:
    """ns busy per span of the step model: the union of the device activity in it (the budget's busy time),
    or on a CPU-only trace of the ops and annotations that start in it (the step table's busy time)."""
    return _cpu_ops(trace)[0] if trace.cpu_only else span_runs(trace).busy()


def warmup_index(spans: Sequence[int], busy: Sequence[int]) -> int | None:
    """0 when the first step is a warm-up: its span over WARMUP_FACTOR x the median of the others', and the
    others busy at all (``busy``: ns per span, :func:`span_busy`); else None. A first step that alone holds
    the work is the only step there is to read."""
    if len(spans) < 2 or not any(busy[1:]):
        return None
    return 0 if spans[0] > WARMUP_FACTOR * statistics.median(spans[1:]) else None


@once_per_trace
def warmup(trace: Trace) -> int | None:
    """The index of the step model's warm-up step (:func:`warmup_index`), or None: the one rule the budget, the
    levers and the submissions per step read to leave it out."""
    model = step_model(trace)
    if len(model.steps) < 2:
        return None
    return warmup_index([hi - lo for lo, hi in model.spans], span_busy(trace).tolist())


def steady_spans(trace: Trace) -> list[tuple[int, int]]:
    """The step model's spans without the warm-up step's (:func:`warmup`)."""
    warm = warmup(trace)
    return [sp for i, sp in enumerate(step_model(trace).spans) if i != warm]


def _cpu_steps(trace: Trace, model: StepModel) -> list[StepBusy]:
    """Per step of a CPU-only trace: its span's CPU time (window) and the time in ops and annotations that start
    in it (:func:`_cpu_ops`), clipped to it; activities counts its outermost ops."""
    busy, tops = (x.tolist() for x in _cpu_ops(trace))
    out = []
    for st, (lo, hi), b, k in zip(model.steps, model.spans, busy, tops):
        window = int(hi - lo)
        out.append(StepBusy(st.name, window / 1e3, b / 1e3, (window - b) / 1e3, pct_of(b, window), False, k))
    return out


def steps_busy(trace: Trace) -> list[StepBusy]:
    """The step table: one entry per step of the model, in time order: busy and idle device time in its span
    (CPU-only traces: :func:`_cpu_steps`)."""
    model = step_model(trace)
    if not model.steps:
        return []
    if trace.cpu_only or model.owner is None:
        return _cpu_steps(trace, model)
    return device_steps(model.steps, span_runs(trace), cpu_work(trace), unrecorded_waits(trace))


def device_steps(steps: tuple[Step, ...], runs: SpanRuns, work: CpuWork,
                 unrecorded: tuple[np.ndarray, np.ndarray] | None = None) -> list[StepBusy]:
    """:func:`busy.step_busy` of every step at once over the device's busy runs in its span (``runs``: one
    sweep, the runs in time order): window (its first run's start to its last run's end), busy (their
    length), and the idle gaps between them, with the launch work in those of at most ``LAUNCH_GAP_MAX_US``
    (:func:`busy.launch_wait_in`); ``unrecorded``: the unrecorded waits (:func:`unrecorded_waits`), whose time
    in a window is neither idle nor in busy %'s whole (no activity runs in it, so it lies in the gaps)."""
    n = len(steps)
    g, s, e = runs.span, runs.start, runs.end
    window = np.zeros(n, dtype=np.int64)
    busy = np.zeros(n, dtype=np.int64)
    idle = np.zeros(n, dtype=np.int64)
    covered = np.zeros(n, dtype=np.int64)
    waits = np.zeros(n, dtype=np.int64)
    if g.size:
        np.add.at(busy, g, e - s)
        first = np.concatenate([[True], g[1:] != g[:-1]])
        at = np.flatnonzero(first)
        last = np.append(at[1:], g.size) - 1
        lo_w, hi_w = s[at], e[last]
        window[g[at]] = hi_w - lo_w
        if unrecorded is not None and unrecorded[0].size:
            waits[g[at]] = CpuWork.of(*unrecorded).inside(lo_w, hi_w)
        nxt = np.flatnonzero(~first)             # a run after its span's first: the gap before it is idle
        lo, hi, gg = e[nxt - 1], s[nxt], g[nxt]
        np.add.at(idle, gg, hi - lo)
        short = (hi - lo) <= LAUNCH_GAP_MAX_US * 1000
        np.add.at(covered, gg[short], work.inside(lo[short], hi[short]))
    out = []
    for st, w, b, i, c, k, u in zip(steps, window.tolist(), busy.tolist(), idle.tolist(), covered.tolist(),
                                    runs.starts.tolist(), waits.tolist()):
        pct = pct_of(b, w - u)
        out.append(StepBusy(st.name, w / 1e3, b / 1e3, (w - b - u) / 1e3, pct, launch_bound(pct, i - u, c), k,
                            u / 1e3))
    return out


__all__ = [
    "STEP_SQL",
    "STEP_WHERE",
    "WARMUP_FACTOR",
    "SpanRuns",
    "Step",
    "StepModel",
    "StepName",
    "active_window",
    "device_busy",
    "find_steps",
    "merge",
    "parse_step",
    "runs_in_spans",
    "span_busy",
    "span_runs",
    "steady_spans",
    "step_ids",
    "step_model",
    "steps_busy",
    "union_spans",
    "unrecorded_waits",
    "warmup",
    "warmup_index",
]
