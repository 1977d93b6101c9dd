"""Device-wide busy time: the union of device activity over every stream, per trace and per step.

The definitions (docs/advisor.md states them for users):

- A *device activity* is a kernel, memory copy or memory set (``DEVICE_TIME_KINDS``).
- The trace's window runs from the first activity's start to the last one's end; busy is the length
  of the union of all activity intervals, on every stream and device, so overlapping streams are
  never counted twice and busy can never exceed the window.
- A scope's activities are those whose launching runtime call, on any thread, starts inside one of its
  calls (so backward kernels launched from the autograd thread and kernels of a graph replay count). Its
  window runs from their first start to their last end. A profiler step owns its activities by the same
  rule, which sets how far its span reaches; its row in the step table reads the span
  (``steps.device_steps``: every activity in it, clipped to it, whoever launched it).
- Where intervals of the same step or scope overlap (steps on several threads, one scope running on
  several threads at once, a scope nested in itself), each activity belongs to exactly one of them
  (:func:`owners`), so no activity is counted twice.
- Time the trace cannot show to be idle (:func:`unrecorded_in`: the time budget's ``unrecorded/wait``)
  is neither busy nor idle: each window gives it as ``unrecorded_us``, and busy % is of the window
  without it.
- ``launch_bound`` is claimed only where the device is idle for most of the window *and* most of
  that idle time is covered by launch work: the dispatch of an op that launched device work
  asynchronously (from the op's start to the end of its launch call), on any thread, in gaps of at
  most 1 ms. Idle time spent in Python between ops, in synchronous copies or synchronize calls,
  data loading, sleeping, or any gap longer than 1 ms (a host stall) is not launch-bound.

A CPU-only trace has no device, so none of this is claimed for it, except per step: there the CPU
is the device, a step's window is its own interval and its busy time the union of the ops (any
thread) that start in it, clipped to it; activities counts its outermost ops, and no step is
launch-bound.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._lazy import lazy_module
from ..trace import Trace
from ._memo import once_per_trace
from .device_events import device_events

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use: the records here are read without it
    np = lazy_module("numpy", globals(), "np")

LAUNCH_BOUND_BUSY_PCT = 50.0   # the device must be idle for more than half the window ...
LAUNCH_BOUND_WAIT_PCT = 50.0   # ... and the host must dispatch or launch for over half that idle time
# A gap longer than this is a host stall (initialisation, autotuning, data loading, a blocking wait),
# never launch overhead, which costs microseconds per kernel; so is a launch call longer than this, but a
# graph launch's (launch_work: the one rule for a call).
LAUNCH_GAP_MAX_US = 1000.0
# A launch is picked up within tens of µs (the launch latency: launch_overhead's, a graph removes it);
# launched work that waits longer while the device idles is waiting on something else.
QUEUED_MIN_US = 100.0
# a wait at least this share of its step's recorded device time is not shown to be idle by the trace
UNRECORDED_SHARE = 0.5


@dataclass(frozen=True)
class Busy:
    """Device busy time over a window: the union of device activity, and its share of the window."""

    window_us: float
    busy_us: float
    busy_pct: float | None   # None when the window is empty: nothing to claim (of the window less unrecorded_us)
    unrecorded_us: float = 0.0   # the window's unrecorded/wait time (:func:`unrecorded_in`): not shown to be idle

    @property
    def idle_us(self) -> float:
        """The window's idle time: neither busy nor an unrecorded wait."""
        return self.window_us - self.busy_us - self.unrecorded_us


@dataclass(frozen=True)
class StepBusy:
    """Busy and idle device time within one profiler step (or scope), and whether host launches bound it."""

    name: str
    window_us: float
    busy_us: float
    idle_us: float
    busy_pct: float | None   # of the window less unrecorded_us (the step's device window)
    launch_bound: bool
    activities: int
    unrecorded_us: float = 0.0   # the window's unrecorded/wait time (:func:`unrecorded_in`): not idle_us


def merge_runs(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals [start, end) merged into disjoint runs, in start order."""
    if start.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z
    s, e = np.asarray(start, dtype=np.int64), np.asarray(end, dtype=np.int64)
    if s.size > 1 and not bool((s[1:] >= s[:-1]).all()):   # sorted already (host intervals, cuts): kept as is
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # an interval starts a new run when it begins after everything before it ended
    new_run = np.ones(s.size, dtype=bool)
    new_run[1:] = s[1:] > reach[:-1]
    last_of_run = np.append(new_run[1:], True)
    return s[new_run], reach[last_of_run]


def union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of intervals [start, end), in the intervals' unit."""
    rs, re_ = merge_runs(start, end)
    return int((re_ - rs).sum())


@dataclass(frozen=True)
class CpuWork:
    """Host launch work (see :func:`cpu_work`), merged into disjoint runs with a running total so
    the work inside any interval costs two searches."""
    start: np.ndarray
    end: np.ndarray
    before: np.ndarray   # work in all runs before run i

    @classmethod
    def of(cls, start: np.ndarray, end: np.ndarray) -> CpuWork:
        """The host work from intervals: merged into disjoint runs with the work before each run summed."""
        rs, re_ = merge_runs(start, end)
        before = np.concatenate([[0], np.cumsum(re_ - rs)[:-1]]).astype(np.int64) if rs.size else rs
        return cls(rs, re_, before)

    def upto(self, t: np.ndarray) -> np.ndarray:
        """Work done before each time t."""
        if self.start.size == 0:
            return np.zeros(t.shape, dtype=np.int64)
        i = np.searchsorted(self.start, t, side="right") - 1
        ok = i >= 0
        ic = np.clip(i, 0, None)
        inside = np.clip(t - self.start[ic], 0, self.end[ic] - self.start[ic])
        done: np.ndarray = np.where(ok, self.before[ic] + inside, 0)
        return done

    def inside(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Work done inside each interval [lo, hi)."""
        done: np.ndarray = self.upto(hi) - self.upto(lo)
        return done


def gaps_ns(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The idle gaps between activities (on every stream together) inside their window."""
    rs, re_ = merge_runs(start, end)
    return re_[:-1], rs[1:]


def launch_wait(a: Activities) -> np.ndarray:
    """ns from each activity's launch call end to its start (meaningful where ``a.launched``)."""
    out: np.ndarray = a.start - (a.launch_ts + a.launch_dur)
    return out


def late(a: Activities) -> np.ndarray:
    """The launched activities that waited over :data:`QUEUED_MIN_US` to start."""
    out: np.ndarray = a.launched & (launch_wait(a) > QUEUED_MIN_US * 1000)
    return out


def queued_runs(a: Activities) -> tuple[np.ndarray, np.ndarray]:
    """The times launched work waited to start, as disjoint runs: from each :func:`late` activity's launch
    call end to its start."""
    m = late(a)
    return merge_runs((a.launch_ts + a.launch_dur)[m], a.start[m])


def intersect_runs(a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray,
                   b_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-empty intersections of two sets of disjoint runs (each in start order), in start order, and
    the index of each one's run of ``b``."""
    i0 = np.searchsorted(b_end, a_start, side="right")   # per run of a: the first run of b ending after it starts
    i1 = np.searchsorted(b_start, a_end, side="left")    # and the first starting at or after its end
    counts = np.maximum(i1 - i0, 0)
    ia = np.repeat(np.arange(a_start.size), counts)
    ib = np.repeat(i0 - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
    s, e = np.maximum(a_start[ia], b_start[ib]), np.minimum(a_end[ia], b_end[ib])
    keep = e > s
    return s[keep], e[keep], ib[keep]


def unrecorded_in(a: Activities, spans: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """The time the trace cannot show to be idle (the time budget's ``unrecorded/wait``, docs/advisor.md),
    as disjoint runs [start, end) in time order: in each span (disjoint, in time order), each run of time in
    which launched work waits to start (:func:`queued_runs`) and no device activity runs, that ends by the
    span's first device activity or is at least :data:`UNRECORDED_SHARE` of the span's busy time long. The
    device may have run work the trace does not hold, or the host and device clocks disagree."""
    z = np.zeros(0, dtype=np.int64)
    ws, we = queued_runs(a)
    if not ws.size or not spans:
        return z, z
    bs, be = merge_runs(a.start, a.end)
    gaps_s = np.concatenate([[np.iinfo(np.int64).min], be])   # the time no activity runs
    gaps_e = np.concatenate([bs, [np.iinfo(np.int64).max]])
    qs, qe, _ = intersect_runs(ws, we, gaps_s, gaps_e)
    lo = np.asarray([s for s, _ in spans], dtype=np.int64)
    hi = np.asarray([e for _, e in spans], dtype=np.int64)
    rs, re_, span = intersect_runs(qs, qe, lo, hi)
    # per span: its busy time and the start of its first activity (never, where none runs in it)
    busy_ns = CpuWork.of(bs, be).inside(lo, hi)
    j = np.minimum(np.searchsorted(be, lo, side="right"), max(bs.size - 1, 0))
    first = np.where((j < bs.size) & (bs[j] < hi) & (be[j] > lo), np.maximum(bs[j], lo), np.iinfo(np.int64).max)
    out = (re_ <= first[span]) | ((re_ - rs) >= UNRECORDED_SHARE * busy_ns[span])
    return rs[out], re_[out]


def minus_runs(a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray,
               b_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint runs ``a`` less the disjoint runs ``b`` (each in start order): ``a`` intersected with the
    gaps around ``b``'s runs (:func:`intersect_runs`), in start order."""
    lo = np.concatenate([np.asarray([np.iinfo(np.int64).min], dtype=np.int64), b_end])
    hi = np.concatenate([b_start, np.asarray([np.iinfo(np.int64).max], dtype=np.int64)])
    keep = hi > lo
    s, e, _ = intersect_runs(a_start, a_end, lo[keep], hi[keep])
    return s, e


def gaps_inside_ns(start: np.ndarray, end: np.ndarray, win_start: np.ndarray,
                   win_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The idle gaps between activities that lie inside the union of the windows [win_start,
    win_end); each window must span some of the activities from its first start to its last end, so
    a gap is either inside one run of windows or exactly the space between two runs."""
    lo, hi = gaps_ns(start, end)
    ws, we = merge_runs(win_start, win_end)
    i = np.searchsorted(ws, lo, side="right") - 1
    inside = (i >= 0) & (hi <= we[np.clip(i, 0, None)]) if ws.size else np.zeros(lo.size, dtype=bool)
    return lo[inside], hi[inside]


def launch_wait_in(lo: np.ndarray, hi: np.ndarray, work: CpuWork) -> tuple[int, int]:
    """(idle ns in the gaps [lo, hi), of which the host was dispatching launches). Only gaps up to
    ``LAUNCH_GAP_MAX_US`` count: a longer one is a host stall, not launch overhead."""
    short = (hi - lo) <= LAUNCH_GAP_MAX_US * 1000
    return int((hi - lo).sum()), int(work.inside(lo[short], hi[short]).sum())


def launch_wait_ns(start: np.ndarray, end: np.ndarray, work: CpuWork) -> tuple[int, int]:
    """(idle ns in the activities' window, of which the host was dispatching launches)."""
    return launch_wait_in(*gaps_ns(start, end), work)


def busy_of(start: np.ndarray, end: np.ndarray, unrecorded: tuple[np.ndarray, np.ndarray] | None = None) -> Busy:
    """Window and union of a set of activity intervals (ns in, µs out); ``unrecorded``: the unrecorded waits
    (:func:`unrecorded_in`), whose time inside the window is not idle, and is left out of busy %'s whole."""
    if start.size == 0:
        return Busy(0.0, 0.0, None)
    lo, hi = int(start.min()), int(end.max())
    busy = union_ns(start, end)
    waits = 0 if unrecorded is None else int(CpuWork.of(*unrecorded).inside(
        np.asarray([lo], dtype=np.int64), np.asarray([hi], dtype=np.int64))[0])
    return Busy((hi - lo) / 1e3, busy / 1e3, pct_of(busy, hi - lo - waits), waits / 1e3)


def pct_of(part: int, whole: int) -> float | None:
    """part as % of whole, at most 100, rounded to 0.01; None for an empty whole (nothing to claim)."""
    if whole <= 0:
        return None
    return round(min(100.0, 100.0 * part / whole), 2)


def launch_bound(busy_pct: float | None, idle_ns: int, covered_ns: int) -> bool:
    """Mostly idle, and the idle time mostly spent by the host dispatching and launching."""
    return (busy_pct is not None and busy_pct < LAUNCH_BOUND_BUSY_PCT and idle_ns > 0
            and 100.0 * covered_ns / idle_ns > LAUNCH_BOUND_WAIT_PCT)


def step_busy(name: str, start: np.ndarray, end: np.ndarray, work: CpuWork) -> StepBusy:
    """Busy time of one step's activities, and whether its idle time is launch-bound."""
    window_ns = int(end.max() - start.min()) if start.size else 0
    busy_ns = union_ns(start, end)
    idle_ns, covered_ns = launch_wait_ns(start, end, work)
    pct = pct_of(busy_ns, window_ns)
    # idle is derived from the same two integers, so busy + idle = window exactly
    return StepBusy(name, window_ns / 1e3, busy_ns / 1e3, (window_ns - busy_ns) / 1e3, pct,
                    launch_bound(pct, idle_ns, covered_ns), int(start.size))


@dataclass(frozen=True)
class Activities:
    """Every device activity of a trace with its launching call (id, start, duration, thread), in
    launch order (by start, then id); activities with no launching call (``launched`` False) last."""
    start: np.ndarray
    end: np.ndarray
    launched: np.ndarray
    launch_id: np.ndarray
    launch_ts: np.ndarray
    launch_dur: np.ndarray
    launch_thread: np.ndarray
    id: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))   # each activity's event id
    op: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))   # the op that launched it (-1: none)
    graph_launch: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))   # its launch call replays a graph


@once_per_trace
def activities(trace: Trace) -> Activities:
    """The trace's device activities (see :class:`Activities`), from :func:`device_events` (read once per
    loaded trace; its tables never change after loading; callers only read the arrays)."""
    d = device_events(trace)
    launch_id = np.where(d.launched, d.launch, -1)
    launch_ts = np.where(d.launched, d.launch_ts, -1)
    # launch order: those launched first, by the call's start and id, then each activity's start and id
    order = np.lexsort((d.id, d.ts, launch_id, launch_ts, ~d.launched))
    return Activities(d.ts[order], (d.ts + d.dur)[order], d.launched[order], launch_id[order], launch_ts[order],
                      d.launch_dur[order], d.launch_thread[order], d.id[order], np.where(d.has_op, d.op, -1)[order],
                      d.graph_launch[order])


def owners(a: Activities, ts: np.ndarray, end: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """For each activity, the index of the one interval [ts, end) on ``thread`` that claims it, or -1.

    Intervals are instances of one step or scope (e.g. ``ProfilerStep#*`` or one nn.Module class),
    which may overlap (the same scope running on several threads, or nested in itself); each
    activity goes to at most one. An activity is claimed by an interval that contains the start of
    its launching call: one on the launching thread if any, else one on another thread (the autograd
    thread's backward kernels belong to the step of the thread that ran the forward). Among those,
    the innermost wins: the latest start, then the shortest, then the lowest index.
    """
    owner = np.full(a.start.size, -1, dtype=np.int64)
    n_launched = int(a.launched.sum())   # launched activities come first, sorted by launch start
    lts = a.launch_ts[:n_launched]
    disjoint = _disjoint_owner(lts, ts, end)
    if disjoint is not None:
        owner[:n_launched] = disjoint
        return owner
    lo = np.searchsorted(lts, ts, side="left")
    hi = np.searchsorted(lts, end, side="left")
    # paint from the least to the most preferred interval: the last painter of an activity wins
    order = np.lexsort((-np.arange(ts.size), -(end - ts), ts))
    for i in order:                                  # any thread
        owner[lo[i]:hi[i]] = i
    for i in order:                                  # the launching thread overrides any other
        seg = owner[lo[i]:hi[i]]
        seg[a.launch_thread[lo[i]:hi[i]] == thread[i]] = i
    return owner


def _disjoint_owner(lts: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """:func:`owners` for the common case where the intervals that can claim anything (those of
    positive length) do not overlap: each launch start then lies in at most one of them, whatever
    the thread, so one search finds it. None when some of them overlap."""
    live = np.flatnonzero(end > ts)
    live = live[np.argsort(ts[live], kind="stable")]
    s, e = ts[live], end[live]
    if s.size > 1 and bool((s[1:] < e[:-1]).any()):
        return None
    i = np.searchsorted(s, lts, side="right") - 1
    inside = (i >= 0) & (lts < e[np.clip(i, 0, None)]) if s.size else np.zeros(lts.size, dtype=bool)
    return np.where(inside, live[np.clip(i, 0, None)] if s.size else -1, -1)


def launch_work(ns: np.ndarray, graph: np.ndarray) -> np.ndarray:
    """Whether each launch call's time (``ns`` long; ``graph``: the call replays a graph) is launch work: at most
    ``LAUNCH_GAP_MAX_US``, or a graph launch of any length, which submits each of its graph's nodes
    (ROCm's hipGraphLaunch of 544 kernels: 1.57 ms). A longer plain launch blocked (a full launch queue, a
    module's first load, a pageable copy): a host stall, not launch overhead. The one rule the time budget,
    the step busy's launch-bound test, the interruptions' Launch CPU and the levers read."""
    out: np.ndarray = (ns <= LAUNCH_GAP_MAX_US * 1000) | graph
    return out


@once_per_trace
def launch_calls(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of each asynchronous launch call that launched a device activity and is launch work
    (:func:`launch_work`), in no set order: from the start of the op that made the call (or the call itself,
    outside any op) to the call's end (at least 1 ns); a graph launch from the call's own start (what runs
    before it in the op around it, a compiled region's guards and bookkeeping, launches nothing: it is the
    host's other work). Any thread. Read once per loaded trace (:func:`cpu_work` and the time budget)."""
    start, end, _name, _graph = _launch_runs(trace)
    return start, end


@once_per_trace
def _launch_runs(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each launch call that launched a device activity and is launch work, by id: (start, end, name, graph)."""
    d = device_events(trace)
    calls = np.flatnonzero(d.launched & d.launch_call)
    _ids, first = np.unique(d.launch[calls], return_index=True)   # a call once, whichever of its activities
    at = calls[first]
    lts, graph = d.launch_ts[at], d.graph_launch[at]
    start = np.where(graph | ~d.has_launch_op[at], lts, np.minimum(d.launch_op_ts[at], lts))
    stop = lts + np.maximum(d.launch_dur[at], 1)
    keep = launch_work(stop - start, graph)
    return start[keep], stop[keep], d.launch_name[at][keep], graph[keep]


@once_per_trace
def named_launch_calls(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`launch_calls` sorted by start, with their call names and whether each is a graph launch:
    (start, end, name, graph)."""
    start, stop, name, graph = _launch_runs(trace)
    order = np.argsort(start, kind="stable")
    return start[order], stop[order], name[order], graph[order]


@once_per_trace
def cpu_work(trace: Trace) -> CpuWork:
    """The host's launch work: the runs of :func:`launch_calls` (each launch call that is launch work, from the
    start of the op that made it), i.e. the dispatch the device had to wait for. Any thread. Read once per
    loaded trace."""
    return CpuWork.of(*launch_calls(trace))


def union_per_group(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group of intervals [start, end) (rows grouped, each group's by start): the length of their
    union, their window (last end - first start) and the group's first row, in one sweep. Each interval
    adds what it reaches past the furthest end before it in its group (:func:`reach_before`)."""
    at, before = reach_before(group, start, end)
    gain = np.maximum(end - np.maximum(start, before), 0)
    busy: np.ndarray = np.add.reduceat(gain, at)
    window: np.ndarray = np.maximum.reduceat(end, at) - np.minimum.reduceat(start, at)
    return busy, window, at


def reach_before(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows grouped (each group's by start): each group's first row, and per row the furthest end of
    the rows before it in its group (a group's first row: its own start). The running maximum restarts
    per group by ranking the ends and offsetting each group's ranks past the previous group's."""
    n = group.size
    at = np.flatnonzero(np.concatenate([[True], group[1:] != group[:-1]]))
    first = np.zeros(n, dtype=np.int64)
    first[at] = 1
    gi = np.cumsum(first) - 1
    ends = np.sort(end)
    ends = ends[np.concatenate([[True], ends[1:] != ends[:-1]])]
    m = ends.size
    key = gi * m + np.searchsorted(ends, end)
    reach = ends[np.maximum.accumulate(key) - gi * m]
    before = np.concatenate([[0], reach[:-1]])
    before[at] = start[at]   # a group's first interval has nothing before it
    return at, before
