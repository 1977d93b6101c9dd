"""Where each microsecond of a step went: the time budget's leaves, from a loaded trace's tables.

A step's span runs from its start on the CPU to the later of its end and the end of the last device
activity it launched (ownership as in :func:`busy.owners`). The span is cut at every start and end
of every device activity and every host interval below, and each piece gets exactly one leaf, so
the leaves partition the span to the nanosecond:

- **busy/<class>** when any device activity runs (any step's: the device is busy whoever launched
  it), the class of the highest-priority activity running (:data:`BUSY_PRIORITY`: compute first,
  then communication, then copies and memsets, so communication and copies count only where no
  compute hides them: their *exposed* time);
- otherwise **idle/<cause>**, by what the launching threads (those that launched any device
  activity, and the step's own thread) were doing, first that applies:
  ``host_sync`` inside a synchronising call (``*Synchronize*``, ``synchronize*``, a synchronous
  ``cudaMemcpy``/``hipMemcpy``/``hipMemcpyWithStream``, or an async copy call whose copy is to or
  from pageable memory, which the driver runs synchronously); ``launch_overhead`` dispatching an op
  that launched device work asynchronously, from the op's start to its launch call's end (spans
  over 1 ms are a host stall, not launch overhead); ``cpu_other`` inside any other op, Python frame
  (not one enclosing a whole step) or runtime call; ``no_work`` nothing at all.
- A trace with launch calls but no device activity has one leaf, ``idle/not_recorded``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._lazy import lazy_module
from ..trace import Trace
from ..trace.schema import DEVICE_TIME_SQL
from .busy import LAUNCH_GAP_MAX_US, Activities, merge_runs
from .kernel_class import fp32_matrix, kernel_class

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use: the records here are read without it
    np = lazy_module("numpy", globals(), "np")

# where streams overlap, the time goes to the first class here that is running
BUSY_PRIORITY = ("gemm", "attention", "conv", "norm", "elementwise", "reduction", "other", "communication",
                 "memcpy_h2d", "memcpy_d2h", "memcpy_d2d", "memset")
IDLE_CAUSES = ("host_sync", "launch_overhead", "cpu_other", "no_work")
LEAVES = tuple(f"busy/{c}" for c in BUSY_PRIORITY) + tuple(f"idle/{c}" for c in IDLE_CAUSES)
NOT_RECORDED = "idle/not_recorded"
_HOST_SYNC = len(BUSY_PRIORITY)
_BEFORE = -(2 ** 62)

SYNC_CALL_SQL = ("(c.name ILIKE '%synchroniz%' OR c.name IN ('cudaMemcpy', 'hipMemcpy', 'cudaMemcpy2D', "
                 "'hipMemcpyWithStream', 'cuMemcpyDtoH', 'cuMemcpyHtoD', 'hipMemcpyDtoH', 'hipMemcpyHtoD') "
                 "OR c.id IN (SELECT launch FROM events WHERE kind = 'memcpy' AND name ILIKE '%pageable%'))")
_LAUNCH_CALL = ("(l.name ILIKE '%launch%' OR l.name ILIKE '%async%' OR l.name ILIKE 'runFunction%' "
                "OR l.name ILIKE 'enqueue%')")


@dataclass(frozen=True)
class DeviceWork:
    """Every device activity with its class (launch order, as :class:`busy.Activities`), and the
    host intervals that name idle causes."""

    acts: Activities
    cls: np.ndarray            # index into BUSY_PRIORITY
    name: np.ndarray           # object: kernel names
    op_name: np.ndarray        # object: launching op names ('' when none)
    pageable: np.ndarray       # bool: a copy to or from pageable memory
    fp32: np.ndarray           # bool: an FP32 gemm/conv kernel
    graph: np.ndarray          # bool: replayed by a graph launch
    sync_ts: np.ndarray
    sync_end: np.ndarray
    sync_id: np.ndarray
    launch_runs: tuple[np.ndarray, np.ndarray]
    host_ts: np.ndarray        # cpu_other intervals (ops, frames, runtime calls)
    host_end: np.ndarray
    host_depth: np.ndarray
    host_name: np.ndarray      # object
    host_op: np.ndarray        # bool: the interval is an op (cpu_op)
    host_top: np.ndarray       # bool: an op inside no other op (what the code called)
    host_runtime: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # bool: a runtime call
    threads: frozenset[int] = field(default_factory=frozenset)


def _i64(v: object) -> np.ndarray:
    return np.asarray(v, dtype=np.int64)


def device_work(trace: Trace, step_threads: set[int], step_ts: np.ndarray, step_end: np.ndarray) -> DeviceWork:
    """Read the activities, their classes and the host's intervals once."""
    con = trace.con
    r = con.execute(f"""
        SELECT d.ts, d.ts + d.dur, l.id IS NOT NULL, coalesce(l.id, -1), coalesce(l.ts, -1), coalesce(l.dur, 0),
               coalesce(l.thread, -1), d.kind, d.name, coalesce(o.name, ''), coalesce(l.name, ''),
               s.input_types, d.link = 'graph'
        FROM events d LEFT JOIN events l ON l.id = d.launch LEFT JOIN events o ON o.id = d.op
        LEFT JOIN shapes s ON s.id = d.op
        WHERE d.kind IN ({DEVICE_TIME_SQL}) ORDER BY l.id IS NULL, l.ts, l.id, d.ts, d.id""").fetchall()
    col = [_i64([x[k] for x in r]) for k in range(7)]
    acts = Activities(start=col[0], end=col[1], launched=np.asarray([x[2] for x in r], dtype=bool),
                      launch_id=col[3], launch_ts=col[4], launch_dur=col[5], launch_thread=col[6])
    prio = {c: i for i, c in enumerate(BUSY_PRIORITY)}
    classes = [kernel_class(x[7], x[8] or "", x[9] or None, x[10] or None) for x in r]
    cls = np.asarray([prio[c] for c in classes], dtype=np.int64)
    fp32 = np.asarray([c in ("gemm", "conv") and fp32_matrix(x[8] or "", x[11]) for c, x in zip(classes, r)],
                      dtype=bool)
    pageable = np.asarray([x[7] == "memcpy" and "pageable" in (x[8] or "").lower() for x in r], dtype=bool)
    threads = {int(t) for t in acts.launch_thread[acts.launched]} | step_threads
    tl = ", ".join(str(t) for t in sorted(threads)) or "-1"
    sync = con.execute(f"""
        SELECT c.ts, c.ts + c.dur, c.id FROM events c
        WHERE c.kind IN ('runtime', 'sync') AND c.thread IN ({tl}) AND c.dur > 0 AND {SYNC_CALL_SQL}
        ORDER BY c.ts, c.id""").fetchall()
    launch = con.execute(f"""
        SELECT DISTINCT l.id, coalesce(least(o.ts, l.ts), l.ts), l.ts + greatest(l.dur, 1)
        FROM events d JOIN events l ON l.id = d.launch LEFT JOIN events o ON o.id = l.parent_op
        WHERE d.kind IN ({DEVICE_TIME_SQL}) AND {_LAUNCH_CALL}""").fetchall()
    ls, le = _i64([x[1] for x in launch]), _i64([x[2] for x in launch])
    short = (le - ls) <= LAUNCH_GAP_MAX_US * 1000
    host = con.execute(f"""
        SELECT ts, ts + greatest(dur, 1), depth, name, kind = 'cpu_op', kind = 'cpu_op' AND parent_op IS NULL,
               kind = 'runtime'
        FROM events
        WHERE kind IN ('cpu_op', 'python', 'runtime') AND thread IN ({tl}) ORDER BY ts, id""").fetchall()
    hts, hend = _i64([x[0] for x in host]), _i64([x[1] for x in host])
    keep = ~_encloses_step(hts, hend, step_ts, step_end)
    return DeviceWork(
        acts=acts, cls=cls, name=np.asarray([x[8] or "" for x in r], dtype=object),
        op_name=np.asarray([x[9] for x in r], dtype=object), pageable=pageable, fp32=fp32,
        graph=np.asarray([bool(x[12]) for x in r], dtype=bool),
        sync_ts=_i64([x[0] for x in sync]), sync_end=_i64([x[1] for x in sync]), sync_id=_i64([x[2] for x in sync]),
        launch_runs=merge_runs(ls[short], le[short]), host_ts=hts[keep], host_end=hend[keep],
        host_depth=_i64([x[2] or 0 for x in host])[keep],
        host_name=np.asarray([x[3] or "" for x in host], dtype=object)[keep],
        host_op=np.asarray([bool(x[4]) for x in host], dtype=bool)[keep],
        host_top=np.asarray([bool(x[5]) for x in host], dtype=bool)[keep],
        host_runtime=np.asarray([bool(x[6]) for x in host], dtype=bool)[keep], threads=frozenset(threads))


def _encloses_step(ts: np.ndarray, end: np.ndarray, step_ts: np.ndarray, step_end: np.ndarray) -> np.ndarray:
    """Host intervals that contain a whole step (the script's frames around the loop): not work
    of the step."""
    if step_ts.size == 0 or ts.size == 0:
        return np.zeros(ts.size, dtype=bool)
    order = np.argsort(step_ts, kind="stable")
    sts, sen = step_ts[order], step_end[order]
    i = np.searchsorted(sts, ts, side="left")
    inside = i < sts.size
    ic = np.clip(i, 0, sts.size - 1)
    out: np.ndarray = inside & (sen[ic] <= end) & (sts[ic] >= ts)
    return out


def covered(runs: tuple[np.ndarray, np.ndarray], t: np.ndarray) -> np.ndarray:
    """Whether each time t lies inside one of the disjoint runs [start, end)."""
    rs, re_ = runs
    if rs.size == 0:
        return np.zeros(t.shape, dtype=bool)
    i = np.searchsorted(rs, t, side="right") - 1
    ok: np.ndarray = (i >= 0) & (t < re_[np.clip(i, 0, None)])
    return ok


@dataclass(frozen=True)
class Labels:
    """The label of every piece of the trace's time: the pieces start at ``cuts``; ``label`` is an
    index into :data:`LEAVES`."""

    cuts: np.ndarray
    label: np.ndarray
    pageable: np.ndarray    # the piece's busy copy is a pageable host-to-device copy
    fp32: np.ndarray        # the piece's gemm/conv time is an FP32 kernel's
    graph: np.ndarray       # the piece's busy class runs a graph-replayed kernel

    def at(self, t: np.ndarray) -> np.ndarray:
        """The piece each time t falls in (index into cuts)."""
        out: np.ndarray = np.clip(np.searchsorted(self.cuts, t, side="right") - 1, 0, None)
        return out


def labels(w: DeviceWork) -> Labels:
    """Cut the time at every boundary and label every piece (see the module docstring)."""
    a = w.acts
    # the first cut lies before any time a span can start, so every time has a piece
    cuts = np.sort(np.concatenate([[_BEFORE], a.start, a.end, w.sync_ts, w.sync_end, *w.launch_runs,
                                   w.host_ts, w.host_end]).astype(np.int64))
    cuts = cuts[np.concatenate([[True], cuts[1:] != cuts[:-1]])]   # unique (sorted: no hashing)
    label = np.full(cuts.size, -1, dtype=np.int64)
    pageable = np.zeros(cuts.size, dtype=bool)
    fp32 = np.zeros(cuts.size, dtype=bool)
    graph = np.zeros(cuts.size, dtype=bool)
    for i in range(len(BUSY_PRIORITY)):
        m = w.cls == i
        if not m.any():
            continue
        here = covered(merge_runs(a.start[m], a.end[m]), cuts) & (label < 0)
        label[here] = i
        for flag, arr in ((w.pageable, pageable), (w.fp32, fp32), (w.graph, graph)):
            sel = m & flag
            if sel.any():
                arr |= here & covered(merge_runs(a.start[sel], a.end[sel]), cuts)
    idle = label < 0
    for j, runs in enumerate((merge_runs(w.sync_ts, w.sync_end), w.launch_runs,
                              merge_runs(w.host_ts, w.host_end))):
        here = idle & (label < 0) & covered(runs, cuts)
        label[here] = _HOST_SYNC + j
    label[label < 0] = _HOST_SYNC + 3
    return Labels(cuts, label, pageable, fp32, graph)


@dataclass(frozen=True)
class Pieces:
    """A span cut into labelled pieces: piece i starts at ``start[i]`` and lasts ``ns[i]``."""

    start: np.ndarray
    ns: np.ndarray
    idx: np.ndarray   # index of each piece's label in Labels


def pieces(lab: Labels, lo: int, hi: int) -> Pieces:
    """The span [lo, hi) as pieces of the trace's labelled time; ``ns`` sums to hi - lo exactly."""
    c = lab.cuts
    inner = c[(c > lo) & (c < hi)]
    start = np.concatenate([[lo], inner]).astype(np.int64)
    ns = np.diff(np.append(start, hi)).astype(np.int64)
    return Pieces(start, ns, lab.at(start))


def leaf_ns(lab: Labels, p: Pieces) -> np.ndarray:
    """ns per leaf (index into LEAVES) of a span's pieces."""
    out = np.zeros(len(LEAVES), dtype=np.int64)
    np.add.at(out, lab.label[p.idx], p.ns)
    return out
