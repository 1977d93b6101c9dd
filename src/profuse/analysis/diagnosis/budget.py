"""Where each microsecond of a step went: the time budget's leaves, from a loaded trace's tables.

A step's span runs from its start on the CPU to the later of its end and the end of the last device
activity it launched (ownership as in :func:`busy.owners`). The span is cut at every start and end
of every device activity and every host interval below, and each piece gets exactly one leaf, so
the leaves partition the span to the nanosecond:

- **busy/<class>** when any device activity runs (any step's: the device is busy whoever launched
  it), the class of the highest-priority activity running (:data:`BUSY_PRIORITY`: compute first,
  then communication, then copies and memsets, so communication and copies count only where no
  compute hides them: their *exposed* time);
- otherwise **idle/<cause>**, first that applies: ``queued`` while launched work waits to start (an
  activity whose launch call ended over :data:`QUEUED_MIN_US` before it started: the device had work
  and did not run it, so the host is not what held it: a stream waiting on an event, or on work the
  trace does not show; between the kernels of a deep queue, the device's own gaps); else by what the
  launching threads (those that launched any device activity, and the step's own thread) were doing:
  ``host_sync`` inside a synchronising call (``*Synchronize*``, ``synchronize*``, a synchronous
  ``cudaMemcpy``/``hipMemcpy``/``hipMemcpyWithStream``, or an async copy call whose copy is to or
  from pageable memory, which the driver runs synchronously); ``launch_overhead`` dispatching an op
  that launched device work asynchronously, from the op's start to its launch call's end (a graph
  launch: the call alone; spans over 1 ms are a host stall, not launch overhead); ``input`` inside the
  input pipeline's hand-over of the next batch (a DataLoader iterator's ``__next__`` annotation: the
  loop waiting on data); ``cpu_other``
  inside any other op, Python frame (not one enclosing a whole step) or runtime call, but not where a
  thread's innermost one is a frame that waits (a lock, a wait, a sleep, a select: :mod:`..waiting`,
  :func:`working_runs`); ``no_work`` nothing at all, or only such a wait.
- **unrecorded/wait**: a ``queued`` wait that the trace cannot show to be idle device time: one
  before any device activity the trace recorded in the step (launched work waited from the step's
  start, and the first recorded activity ended the wait), or one at least :data:`UNRECORDED_SHARE` of
  the step's recorded device time long. The device may have been busy with work the trace does not
  hold (a previous batch's, another process's) or the host and device clocks disagree; it is not
  called idle, and what the device did is asked of the device window (the span less this leaf).
- A trace with launch calls but no device activity has one leaf, ``idle/not_recorded``.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..._lazy import lazy_module
from ...trace import Trace, compiled
from ...trace.arrays import distinct, distinct_rows
from ...trace.schema import DEVICE_TIME_KINDS, DEVICE_TIME_SQL
from ...trace.vocabulary import sync_call_sql
from .._codes import hash_codes, position_lookup, positions
from .._read import fetch_columns, id_table
from ..busy import (  # the queued-wait rule's parts are busy.py's (the step table and views read them too)
    Activities,
    activities,
    launch_calls,
    merge_runs,
    minus_runs,
    queued_runs,
)
from ..kernel_class import fp32_matrix, kernel_class
from ..steps import unrecorded_waits
from ..waiting import waits

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use: the records here are read without it
    np = lazy_module("numpy", globals(), "np")

# where streams overlap, the time goes to the first class here that is running
BUSY_PRIORITY = ("gemm", "attention", "conv", "norm", "elementwise", "reduction", "other", "communication",
                 "memcpy_h2d", "memcpy_d2h", "memcpy_d2d", "memcpy_unknown", "memset")
IDLE_CAUSES = ("queued", "host_sync", "launch_overhead", "input", "cpu_other", "no_work")
UNRECORDED_LEAF = "unrecorded/wait"
LEAVES = tuple(f"busy/{c}" for c in BUSY_PRIORITY) + tuple(f"idle/{c}" for c in IDLE_CAUSES) + (UNRECORDED_LEAF,)
NOT_RECORDED = "idle/not_recorded"
# each idle cause's index into LEAVES (a piece's label)
QUEUED, HOST_SYNC, LAUNCH_OVERHEAD, INPUT, CPU_OTHER, NO_WORK = (LEAVES.index(f"idle/{c}") for c in IDLE_CAUSES)
# What the code called: an op inside no other op but a step's own (older traces record ProfilerStep#N as an
# op: what runs inside the step is the code's, never the step itself). ``{e}``: the events table's alias.
# The one rule for the budget's host intervals and the levers' call sites.
TOP_OP = ("NOT ({e}.name LIKE 'ProfilerStep#%') AND ({e}.parent_op IS NULL OR {e}.parent_op IN "
          "(SELECT s.id FROM events s WHERE s.kind = 'cpu_op' AND s.name LIKE 'ProfilerStep#%'))")
# the input pipeline's annotations: torch's DataLoader iterator marks each batch it hands out
# (``enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__``)
INPUT_SQL = "(name ILIKE '%DataLoader%' AND name LIKE '%\\_\\_next\\_\\_%' ESCAPE '\\')"
UNRECORDED = LEAVES.index(UNRECORDED_LEAF)
_BEFORE = -(2 ** 62)
# host interval bits: its duration is under 1 ns or unknown (its ``stop`` is then ts + 1, not ts + dur), and
# its name is NULL (its code is then the empty name's)
RAW_DUR, NO_NAME = 4, 8
# the host intervals' rows (_host_intervals): kind 0 a frame, 1 an op, 2 a runtime call, 3 an op in no other (a
# top-level op, TOP_OP, once its name is known not to be a step's: _top_ops), plus the bits; ``code``: the column
# that codes the name (its hash, or its code joined in), ``join``: the join that code needs
_HOST_SQL = f"""
    SELECT e.id, e.ts, greatest(e.dur, 1) AS dur, coalesce(e.depth, 0)::INTEGER AS depth, e.thread,
           ((CASE e.kind WHEN 'cpu_op' THEN (CASE WHEN e.parent_op IS NULL AND e.name IS NOT NULL THEN 3 ELSE 1 END)
                         WHEN 'runtime' THEN 2 ELSE 0 END)
            + (CASE WHEN e.dur IS NULL OR e.dur < 1 THEN {RAW_DUR} ELSE 0 END)
            + (CASE WHEN e.name IS NULL THEN {NO_NAME} ELSE 0 END))::UTINYINT AS kind, {{code}}
    FROM (SELECT * FROM events WHERE {{where}}) e{{join}}"""
_WORK: weakref.WeakKeyDictionary[Trace, weakref.ReferenceType[DeviceWork]] = weakref.WeakKeyDictionary()

def sync_calls_sql() -> str:
    """SQL true for a call ``c`` that blocks the host: the device vocabulary's synchronising and blocking
    copy calls (trace/vocabulary.py), or the launch of a copy to or from pageable memory."""
    return (f"({sync_call_sql('c.name')} "
            "OR c.id IN (SELECT launch FROM events WHERE kind = 'memcpy' AND name ILIKE '%pageable%'))")


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
    host_code: np.ndarray      # int32: each interval's name, as an index into host_names
    host_names: tuple[str, ...]  # the intervals' distinct names (sorted): each string fetched once
    host_op: np.ndarray        # bool: the interval is an op (cpu_op)
    host_top: np.ndarray       # bool: an op inside no other op (what the code called)
    host_runtime: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # bool: a runtime call
    threads: frozenset[int] = field(default_factory=frozenset)
    host_thread: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))  # each interval's thread
    input_runs: tuple[np.ndarray, np.ndarray] = field(  # the input pipeline's __next__ annotations, merged
        default_factory=lambda: (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)))
    stream: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # each activity's (-1: none)
    host_id: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # each interval's event id
    host_bits: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint8))  # RAW_DUR, NO_NAME
    # the step model's unrecorded waits (steps.unrecorded_waits: the one rule), as runs [start, end)
    unrecorded: tuple[np.ndarray, np.ndarray] = field(
        default_factory=lambda: (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)))
    # the intervals left out as enclosing a whole step, as columns (id, ts, stop, thread, code, bits, kind: 0 a
    # frame, 1 an op, 2 a runtime call, 3 a top-level op): every interval of ``threads`` is one of the two sets
    around: dict[str, np.ndarray] = field(default_factory=dict)


def _i64(v: object) -> np.ndarray:
    return np.asarray(v, dtype=np.int64)


def device_work(trace: Trace, step_threads: set[int], step_ts: np.ndarray, step_end: np.ndarray) -> DeviceWork:
    """Read the activities, their classes and the host intervals once (as columns: a class is
    worked out once per distinct kind, kernel name, launching op, launch call and input types; the names of
    the launching ops and calls are those of the host intervals, by code, so no string is read per row)."""
    con = trace.con
    acts = activities(trace)   # read once per trace (the step model's)
    threads = set(distinct(acts.launch_thread[acts.launched]).tolist()) | step_threads
    tl = ", ".join(str(t) for t in sorted(threads)) or "-1"
    sync = con.execute(f"""
        SELECT c.ts AS ts, c.ts + c.dur AS stop, c.id AS id FROM events c
        WHERE c.kind IN ('runtime', 'sync') AND c.thread IN ({tl}) AND c.dur > 0 AND {sync_calls_sql()}
        ORDER BY c.ts, c.id""").fetchnumpy()
    ls, le = launch_calls(trace)  # the launch calls cpu_work reads: one query for both
    host, host_names, around = _host_intervals(trace, tl, step_ts, step_end)
    d = _device_columns(trace, acts, host, host_names, around)
    cls, fp32, pageable = _classes(trace, acts, d)
    inp = con.execute(f"""SELECT ts, ts + greatest(dur, 0) AS stop FROM events
        WHERE kind IN ('annotation', 'python') AND thread IN ({tl}) AND {INPUT_SQL} ORDER BY ts, id""").fetchnumpy()
    strings = np.asarray(d["strings"], dtype=object)
    work = DeviceWork(
        acts=acts, cls=cls, name=strings[d["name"]], op_name=strings[d["op"]], pageable=pageable, fp32=fp32,
        graph=d["graph"],
        sync_ts=_i64(sync["ts"]), sync_end=_i64(sync["stop"]), sync_id=_i64(sync["id"]),
        launch_runs=merge_runs(ls, le), host_ts=host["ts"], host_end=host["stop"],
        host_depth=host["depth"], host_code=host["code"], host_names=host_names, host_op=host["is_op"],
        host_top=host["top"], host_runtime=host["runtime"], threads=frozenset(threads), host_thread=host["thread"],
        stream=d["stream"], input_runs=merge_runs(_i64(inp["ts"]), _i64(inp["stop"])), host_id=host["id"],
        host_bits=host["bits"], around=around, unrecorded=unrecorded_waits(trace))
    _WORK[trace] = weakref.ref(work)
    return work


def shared_work(trace: Trace) -> DeviceWork | None:
    """The device work the diagnosis of ``trace`` read last, while it is still held (its host intervals answer
    the levers' questions about what holds a call without reading them again), else None."""
    ref = _WORK.get(trace)
    return ref() if ref is not None else None


def _device_columns(trace: Trace, acts: Activities, host: dict[str, np.ndarray], host_names: tuple[str, ...],
                    around: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per activity (``acts`` order): its kind, graph flag and stream, its recorded copy direction (the
    ``directions`` table's) as a code into ``directions`` (0: none), and its kernel name, launching op's name
    and launch call's name as codes into ``strings`` (every name met, listed once). The activities are read
    grouped by (kind, name, graph, stream, direction), so each name is read once; the ops' and calls' names
    are those of the host intervals with their ids (an id not among them is read by itself: few)."""
    n = acts.start.size
    groups = trace.con.execute(f"""
        SELECT e.kind, coalesce(e.name, '') AS name, coalesce(e.link = 'graph', false) AS graph,
               coalesce(e.stream, -1) AS stream, coalesce(r.direction, '') AS direction, list(e.id) AS ids
        FROM events e LEFT JOIN directions r ON r.id = e.id
        WHERE e.kind IN ({DEVICE_TIME_SQL}) GROUP BY ALL""").fetchall()
    strings: dict[str, int] = {nm: i for i, nm in enumerate(host_names)}
    directions: dict[str, int] = {"": 0}
    out: dict[str, Any] = {"kind": np.zeros(n, dtype=np.int8), "name": np.zeros(n, dtype=np.int64),
                           "graph": np.zeros(n, dtype=bool), "stream": np.full(n, -1, dtype=np.int64),
                           "direction": np.zeros(n, dtype=np.int64)}
    row_of = position_lookup(acts.id)   # every id listed is an activity's (the same kinds)
    for kind, name, graph, stream, direction, ids in groups:
        rows = row_of(np.asarray(ids, dtype=np.int64))
        out["kind"][rows] = DEVICE_TIME_KINDS.index(kind)
        out["name"][rows] = strings.setdefault(name, len(strings))
        out["graph"][rows] = bool(graph)
        out["stream"][rows] = stream
        out["direction"][rows] = directions.setdefault(direction, len(directions))
    parts = [host, around] if around else [host]
    codes = np.concatenate([p["code"] for p in parts]) if around else host["code"]
    # an event id -> its host row (int32: rows and ids of a trace fit it, and this table is as long as the trace)
    top = max((int(p["id"].max()) for p in parts if p["id"].size), default=-1)
    at = np.full(top + 1, -1, dtype=np.int32 if codes.size < 2**31 else np.int64)
    done = 0
    for p in parts:
        at[p["id"]] = np.arange(done, done + p["id"].size, dtype=at.dtype)
        done += p["id"].size
    out["op"] = _names_by_id(trace, at, codes, acts.op, strings)
    out["launch"] = _names_by_id(trace, at, codes, np.where(acts.launched, acts.launch_id, -1), strings)
    out["strings"], out["directions"] = list(strings), list(directions)
    return out


def _names_by_id(trace: Trace, at: np.ndarray, codes: np.ndarray, want: np.ndarray,
                 strings: dict[str, int]) -> np.ndarray:
    """The code in ``strings`` of the name of each event id in ``want`` ('' for -1 or a NULL name), from the
    host intervals' name ``codes`` (indices into the first names of ``strings``) and ``at`` (an event id ->
    its host interval, -1 for none); an id not among them is read from the events (its name added to
    ``strings``)."""
    out = np.full(want.size, strings.setdefault("", len(strings)), dtype=np.int64)
    row = np.full(want.size, -1, dtype=np.int64)
    inside = (want >= 0) & (want < at.size)
    row[inside] = at[want[inside]]
    found = row >= 0
    out[found] = codes[row[found]]
    missing = np.flatnonzero(~found & (want >= 0))
    if missing.size:
        named = dict(trace.con.execute("SELECT id, coalesce(name, '') FROM events WHERE id IN (SELECT unnest(?::BIGINT[]))",
                                       [distinct(want[missing]).tolist()]).fetchall())
        out[missing] = [strings.setdefault(named.get(int(i), ""), len(strings)) for i in want[missing].tolist()]
    return out


def _host_intervals(trace: Trace, threads: str, step_ts: np.ndarray,
                    step_end: np.ndarray) -> tuple[dict[str, np.ndarray], tuple[str, ...], dict[str, np.ndarray]]:
    """The ops, Python frames and runtime calls of ``threads`` (an SQL list) but those enclosing a whole
    step, sorted by (start, id), as columns: id, ts, stop (at least 1 ns after ts), depth, thread, is_op, top,
    runtime, bits (:data:`RAW_DUR`, :data:`NO_NAME`), and each one's name as a code (``code``: an index into
    the distinct names, returned sorted); and ``around``, the intervals enclosing a step (the same columns
    and ``kind``: 0 a frame, 1 an op, 2 a runtime call, 3 a top-level op, sorted by (start, id)). The names
    are coded from DuckDB's hash of each (joined to their codes in DuckDB where two names share a hash), so no
    string is made per interval (millions on a big trace) and no string is joined per row."""
    where = f"kind IN ('cpu_op', 'python', 'runtime') AND thread IN ({threads})"
    listed = trace.con.execute(f"""SELECT n, hash(n) FROM (SELECT DISTINCT coalesce(name, '') AS n FROM events
                                   WHERE {where}) ORDER BY n""").fetchall()
    names = tuple(str(n) for n, _h in listed)
    cols = fetch_columns(trace.con, _HOST_SQL.format(where=where, code="hash(coalesce(e.name, '')) AS h", join=""))
    code = hash_codes(np.asarray([h for _n, h in listed], dtype=np.uint64), np.asarray(cols.pop("h")))
    if code is None:   # two names share a hash: the names joined to their codes in DuckDB instead
        cols = fetch_columns(trace.con, _HOST_SQL.format(where=where, code="codes.code", join=f"""
            JOIN (SELECT n, (row_number() OVER (ORDER BY n) - 1)::INTEGER AS code FROM (SELECT DISTINCT
                  coalesce(name, '') AS n FROM events WHERE {where})) codes ON codes.n = coalesce(e.name, '')"""))
        code = np.asarray(cols["code"])
    cols["code"] = code.astype(np.int32)
    _top_ops(trace, threads, cols, names)
    # which enclose a step, in the rows' own order; then the rest ORDER BY ts, id (the events come nearly sorted:
    # cheap here), each column gathered once in that order and let go (at 1 GB the read is 0.12 GB, and what
    # was held twice here took the diagnosis's peak 0.1 GB over it)
    ts, stop = _i64(cols["ts"]), _i64(cols.pop("dur")) + _i64(cols["ts"])
    order = _by_start(ts, _i64(cols["id"]))
    enclosing = _encloses_step(ts, stop, step_ts, step_end)[order]
    around = order[enclosing]
    if around.size:
        order = order[~enclosing]
    del enclosing
    around_cols = _around(cols, around, stop)
    out = {"ts": ts[order], "stop": stop[order]}
    del ts, stop, cols["ts"]
    out["id"] = _i64(cols.pop("id"))[order]
    kind = np.asarray(cols["kind"])[order]
    out.update(is_op=(kind & 1) == 1, top=(kind & 3) == 3, runtime=(kind & 3) == 2, bits=kind & (RAW_DUR | NO_NAME))
    del kind
    out["depth"] = np.asarray(cols.pop("depth"))[order].astype(np.int64)   # the holders' walk reads int64
    out["thread"] = np.asarray(cols.pop("thread"))[order]   # int32, as DuckDB keeps it
    out["code"] = np.asarray(cols.pop("code"))[order].astype(np.int32, copy=False)
    return out, names, around_cols


def _top_ops(trace: Trace, threads: str, cols: dict[str, np.ndarray], names: tuple[str, ...]) -> None:
    """:data:`TOP_OP` on the fetched host intervals ``cols`` (of ``threads``, an SQL list), in place: a named
    op whose parent is no op stays kind 3 unless its name is a step's (``ProfilerStep#``, ``LIKE``'s
    prefix); an op whose parent is a step's op (older traces record steps as ops: an op holds its children on
    its own thread, so those step ops are among these intervals) becomes kind 3, read for those steps alone."""
    step = np.fromiter((n.startswith("ProfilerStep#") for n in names), dtype=bool, count=len(names))
    if not step.any():
        return
    bits = np.asarray(cols["kind"])
    code = np.asarray(cols["code"])
    op, named = (bits & 1) == 1, (bits & NO_NAME) == 0
    steps = np.flatnonzero(op & named & step[code])
    if not steps.size:
        return
    bits[steps] &= ~np.uint8(2)   # a step's op is never a top-level op
    below = {int(i) for (i,) in trace.con.execute(f"""
        SELECT id FROM events WHERE kind = 'cpu_op' AND thread IN ({threads}) AND parent_op IN
            (SELECT unnest(?::BIGINT[]))""", [_i64(cols["id"])[steps].tolist()]).fetchall()}
    if below:
        rows = np.flatnonzero(np.isin(_i64(cols["id"]), np.fromiter(below, dtype=np.int64, count=len(below))))
        rows = rows[named[rows] & ~step[code[rows]]]
        bits[rows] |= np.uint8(2)


def _around(cols: dict[str, np.ndarray], rows: np.ndarray, stop: np.ndarray) -> dict[str, np.ndarray]:
    """The fetched host intervals ``rows`` (those enclosing a step) as columns: id, ts, stop, thread, code,
    bits, kind (``stop``: each fetched row's end)."""
    bits = np.asarray(cols["kind"])[rows]
    ts = _i64(cols["ts"])[rows]
    return {"id": _i64(cols["id"])[rows], "ts": ts, "stop": stop[rows],
            "thread": np.asarray(cols["thread"])[rows], "code": np.asarray(cols["code"])[rows].astype(np.int32),
            "bits": bits & (RAW_DUR | NO_NAME), "kind": bits & 3}


def _by_start(ts: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The order (ts, id) of the rows: one stable sort of ts and id packed in one integer where they fit (the
    rows come nearly sorted, which a stable sort runs through), else a sort on both."""
    if not ts.size:
        return np.zeros(0, dtype=np.int64)
    lo, span, top = int(ts.min()), int(ts.max()) - int(ts.min()), int(ids.max())
    shift = max(int(top).bit_length(), 1)
    if int(ids.min()) >= 0 and span.bit_length() + shift <= 62:
        key = ts - lo
        key <<= shift
        key |= ids
        out: np.ndarray = np.argsort(key, kind="stable")
        return out
    return np.lexsort((ids, ts))


def _classes(trace: Trace, acts: Activities, d: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each activity's class (index into BUSY_PRIORITY), whether it is an FP32 gemm/conv and whether it is a
    copy to or from pageable memory (``d``: :func:`_device_columns`): worked out once per distinct kind, kernel
    name, launching op, launch call and recorded direction, and, for gemm and conv kernels, per distinct input
    types of their ops (read for those ops alone)."""
    prio = {c: i for i, c in enumerate(BUSY_PRIORITY)}
    strings, directions, kinds = d["strings"], d["directions"], len(DEVICE_TIME_KINDS)
    way_kind = d["kind"].astype(np.int64) + kinds * d["direction"]   # the few directions ride on the kind
    rows = np.column_stack([way_kind, d["name"], d["op"], d["launch"]])
    first, code = distinct_rows(rows)
    per_cls, per_pageable = [], []
    for k, n, op, launch in rows[first].tolist():
        kind, name = DEVICE_TIME_KINDS[k % kinds], strings[n]
        per_cls.append(prio[kernel_class(kind, name, strings[op] or None, strings[launch] or None,
                                         directions[k // kinds] or None)])
        per_pageable.append(kind == "memcpy" and "pageable" in name.lower())
    cls = np.asarray(per_cls, dtype=np.int64)[code]
    matrix = np.flatnonzero((cls == prio["gemm"]) | (cls == prio["conv"]))
    fp32 = np.zeros(cls.size, dtype=bool)
    if matrix.size:   # per distinct (kernel name, input types of its op)
        ops = acts.op[matrix]
        with id_table(trace.con, distinct(ops[ops >= 0])) as wanted:
            types = trace.con.execute(f"""SELECT coalesce(input_types, '') AS t, list(id) AS ids FROM shapes
                WHERE id IN (SELECT id FROM {wanted}) GROUP BY 1""").fetchall()
        listed = ["", *(t for t, _ids in types)]   # code 0: no shapes row
        with_types = np.asarray([i for _t, ids in types for i in ids], dtype=np.int64)
        type_code = np.repeat(np.arange(1, len(listed)), [len(ids) for _t, ids in types])
        tcode = np.zeros(ops.size, dtype=np.int64)
        at = positions(with_types, ops)
        tcode[at >= 0] = type_code[at[at >= 0]]
        pairs = np.column_stack([d["name"][matrix], tcode])
        first, back = distinct_rows(pairs)
        per = [fp32_matrix(strings[n], listed[t] or None) for n, t in pairs[first].tolist()]
        fp32[matrix] = np.asarray(per, dtype=bool)[back]
    return cls, fp32, np.asarray(per_pageable, dtype=bool)[code]


def _encloses_step(ts: np.ndarray, end: np.ndarray, step_ts: np.ndarray, step_end: np.ndarray) -> np.ndarray:
    """Host intervals that contain a whole step (the script's frames around the loop): not work
    of the step. Only intervals at least as long as the shortest step can, so only those are searched."""
    out = np.zeros(ts.size, dtype=bool)
    if step_ts.size == 0 or ts.size == 0:
        return out
    order = np.argsort(step_ts, kind="stable")
    sts, sen = step_ts[order], step_end[order]
    can = np.flatnonzero(end - ts >= int((step_end - step_ts).min()))
    i = np.searchsorted(sts, ts[can], side="left")
    inside = i < sts.size
    ic = np.clip(i, 0, sts.size - 1)
    out[can] = inside & (sen[ic] <= end[can]) & (sts[ic] >= ts[can])
    return out


def covered(runs: tuple[np.ndarray, np.ndarray], t: np.ndarray) -> np.ndarray:
    """Whether each of the sorted times ``t`` lies inside one of the disjoint runs [start, end) (in order,
    as :func:`merge_runs` gives them): each run is the slice of ``t`` between two searches, so the work is
    a search per run and one pass over ``t`` (a search per time was most of labelling a 1 GB trace: 7 M
    cuts, a dozen classes)."""
    rs, re_ = runs
    if rs.size == 0 or t.size == 0:
        return np.zeros(t.shape, dtype=bool)
    lo = search_sorted(t, rs, "left")   # the first time in each run (the runs in order: each search from the last)
    hi = search_sorted(t, re_, "left")  # the first time past it
    # the runs are disjoint and in order, so the slices are too: [0, lo0) out, [lo0, hi0) in, [hi0, lo1) out, ...
    edges = np.maximum.accumulate(np.stack([lo, hi], axis=1).reshape(-1))
    lengths = np.diff(edges, prepend=0, append=t.size)
    inside = np.zeros(lengths.size, dtype=bool)
    inside[1::2] = True
    out: np.ndarray = np.repeat(inside, lengths)
    return out


def search_sorted(a: np.ndarray, v: np.ndarray, side: Literal["left", "right"]) -> np.ndarray:
    """``np.searchsorted(a, v, side)`` (int64) for integer times ``a`` sorted and ``v`` in (nearly) ascending
    order: in C each search starts from the answer before it (trace/_accel.c, started: a few steps per value
    where numpy makes a full binary search of a big array each), else numpy's."""
    if compiled.enabled() and v.size and a.dtype.kind == "i" and v.dtype.kind == "i":
        q = np.ascontiguousarray(v, dtype=np.int64)
        if side == "left":   # the first a >= x is the first a > x - 1 for integers
            if int(q.min()) == np.iinfo(np.int64).min:
                return np.searchsorted(a, v, side=side).astype(np.int64, copy=False)
            q = q - 1
        out = np.empty(q.size, dtype=np.int64)
        compiled.accel.started(np.ascontiguousarray(a, dtype=np.int64), q, out)
        return out.reshape(np.shape(v))
    found: np.ndarray = np.searchsorted(a, v, side=side).astype(np.int64, copy=False)
    return found


@dataclass(frozen=True)
class Labels:
    """The label of every piece of the trace's time: the pieces start at ``cuts``; ``label`` is an
    index into :data:`LEAVES`."""

    cuts: np.ndarray
    label: np.ndarray
    pageable: np.ndarray    # the piece's busy copy is a pageable host-to-device copy
    fp32: np.ndarray        # the piece's gemm/conv time is an FP32 kernel's
    graph: np.ndarray       # the piece's busy class runs a graph-replayed kernel
    unrecorded: tuple[np.ndarray, np.ndarray] = field(  # DeviceWork.unrecorded: queued time relabelled so
        default_factory=lambda: (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)))

    def at(self, t: np.ndarray) -> np.ndarray:
        """The piece each time t falls in (index into cuts)."""
        out: np.ndarray = np.clip(np.searchsorted(self.cuts, t, side="right") - 1, 0, None)
        return out


def labels(w: DeviceWork) -> Labels:
    """Cut the time at every boundary and label every piece (see the module docstring)."""
    a = w.acts
    # the first cut lies before any time a span can start, so every time has a piece
    waits = queued_runs(a)
    cuts = np.concatenate([np.asarray([_BEFORE], dtype=np.int64), a.start, a.end, *waits, w.sync_ts, w.sync_end,
                           *w.launch_runs, *w.input_runs, w.host_ts, w.host_end]).astype(np.int64, copy=False)
    cuts.sort(kind="stable")   # sorted columns one after another: a merge of runs, cheaper than a full sort
    cuts = cuts[np.concatenate([[True], cuts[1:] != cuts[:-1]])]   # unique (sorted: no hashing)
    label = np.full(cuts.size, -1, dtype=np.int8)   # an index into LEAVES (a byte: they are few)
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
    for cause, runs in ((QUEUED, waits), (HOST_SYNC, merge_runs(w.sync_ts, w.sync_end)),
                        (LAUNCH_OVERHEAD, w.launch_runs), (INPUT, w.input_runs),
                        (CPU_OTHER, working_runs(w))):
        here = (label < 0) & covered(runs, cuts)
        label[here] = cause
    label[label < 0] = NO_WORK
    return Labels(cuts, label, pageable, fp32, graph, w.unrecorded)


def working_runs(w: DeviceWork) -> tuple[np.ndarray, np.ndarray]:
    """The time the launching threads spend inside their host intervals, merged, less the time a thread's
    innermost interval is a Python frame that waits (analysis/waiting.py: a lock, a wait, a sleep, a select):
    blocked there, the thread works at nothing, though the frames around the wait are open. An interval
    inside such a wait that does not wait (a callback's op) works again."""
    if not w.host_names:
        return merge_runs(w.host_ts, w.host_end)
    frame = ~(w.host_op | w.host_runtime)
    waiting = frame & np.fromiter((waits(n) for n in w.host_names), dtype=bool, count=len(w.host_names))[w.host_code]
    if not waiting.any():
        return merge_runs(w.host_ts, w.host_end)
    blocked = np.isin(w.host_thread, distinct(w.host_thread[waiting]))
    starts, ends = [w.host_ts[~blocked]], [w.host_end[~blocked]]   # threads that never wait: all their time
    for thread in distinct(w.host_thread[waiting]).tolist():
        mine = w.host_thread == thread
        ws, we = merge_runs(w.host_ts[mine & waiting], w.host_end[mine & waiting])
        s, e = minus_runs(*merge_runs(w.host_ts[mine], w.host_end[mine]), ws, we)
        # the intervals of this thread that do not wait and lie inside a wait, deeper than its outermost frame
        run = np.searchsorted(ws, w.host_ts, side="right") - 1
        inner = mine & ~waiting & (run >= 0)
        r = np.clip(run, 0, None)
        top = np.full(ws.size, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(top, np.searchsorted(ws, w.host_ts[mine & waiting], side="right") - 1,
                      w.host_depth[mine & waiting])
        inner &= (w.host_end <= we[r]) & (w.host_depth > top[r])
        starts += [s, w.host_ts[inner]]
        ends += [e, w.host_end[inner]]
    return merge_runs(np.concatenate(starts), np.concatenate(ends))


@dataclass(frozen=True)
class Pieces:
    """A span cut into labelled pieces: piece i starts at ``start[i]``, lasts ``ns[i]`` and has the leaf
    ``label[i]`` (index into LEAVES: the trace's label, with the span's unrecorded waits)."""

    start: np.ndarray
    ns: np.ndarray
    idx: np.ndarray   # index of each piece in Labels
    label: np.ndarray


def pieces(lab: Labels, lo: int, hi: int) -> Pieces:
    """The span [lo, hi) as pieces of the trace's labelled time; ``ns`` sums to hi - lo exactly."""
    return spans_pieces(lab, np.asarray([lo], dtype=np.int64), np.asarray([hi], dtype=np.int64))[0]


def spans_pieces(lab: Labels, lo: np.ndarray, hi: np.ndarray) -> tuple[Pieces, np.ndarray, np.ndarray]:
    """The spans [lo[k], hi[k]) as pieces (each as :func:`pieces` cuts it), one span after another; where
    each span's pieces begin (``offsets``: k + 1 of them, the last the number of pieces); and the ns per
    leaf of each span (one row per span, a column per leaf: index into LEAVES). A span's pieces start at lo
    and at each cut strictly inside it: a slice of the sorted, unique cuts, so their indices into the
    labels need no search (and every array here is made once: on a big trace each is tens of MB)."""
    c = lab.cuts
    i0 = np.searchsorted(c, lo, side="right")            # the first cut inside each span
    i1 = np.maximum(np.searchsorted(c, hi, side="left"), i0)
    counts = i1 - i0 + 1                                  # lo, then the cuts inside
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    first, last = offsets[:-1], offsets[1:] - 1
    # each span's indices run i0 - 1 (the piece lo starts in), i0, ..., i1 - 1: ones, each span's first
    # the jump from the one before, summed in place
    idx = np.ones(int(offsets[-1]), dtype=np.int32 if c.size < 2 ** 31 else np.int64)
    if idx.size:
        idx[first] = (i0 - 1) - np.concatenate([[0], i1[:-1] - 1])
        np.cumsum(idx, out=idx)
        idx[first] = np.maximum(i0 - 1, 0)
    start = c[idx]
    start[first] = lo
    ns = np.empty_like(start)
    np.subtract(start[1:], start[:-1], out=ns[:-1])
    ns[last] = hi - start[last]
    label = lab.label[idx]
    table = _leaf_table(label, ns, counts)
    _unrecorded_waits(label, start, ns, offsets, table, lab.unrecorded)
    return Pieces(start, ns, idx, label), offsets, table


def _leaf_table(label: np.ndarray, ns: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """ns per leaf of each span (``counts``: its pieces, one span after another): one row per span."""
    rows = np.arange(counts.size, dtype=np.int32 if counts.size * len(LEAVES) < 2 ** 31 else np.int64) * len(LEAVES)
    key = np.repeat(rows, counts)   # each piece's span's row, then its leaf
    key += label
    out = np.zeros(counts.size * len(LEAVES), dtype=np.int64)
    np.add.at(out, key, ns)
    return out.reshape(counts.size, len(LEAVES))


def _unrecorded_waits(label: np.ndarray, start: np.ndarray, ns: np.ndarray, offsets: np.ndarray,
                      table: np.ndarray, runs: tuple[np.ndarray, np.ndarray]) -> None:
    """Relabel ``unrecorded/wait``, in place, the queued pieces inside the unrecorded waits ``runs``
    (:func:`steps.unrecorded_waits`: the one rule, which the step table, device busy and the interruptions
    read too); the spans are those ``offsets`` delimits, and their leaf ``table`` moves the pieces' ns from
    queued to unrecorded. A run is a whole stretch of queued time of one span, so each queued piece lies
    all inside one or outside all."""
    rs, re_ = runs
    q = np.flatnonzero(label == QUEUED)
    if not q.size or not rs.size:
        return
    k = np.searchsorted(rs, start[q], side="right") - 1
    q = q[(k >= 0) & (start[q] < re_[np.maximum(k, 0)])]
    if not q.size:
        return
    label[q] = UNRECORDED
    span = np.searchsorted(offsets, q, side="right") - 1
    np.add.at(table[:, QUEUED], span, -ns[q])   # columns of the table: views, added to in place
    np.add.at(table[:, UNRECORDED], span, ns[q])


def leaf_ns(lab: Labels, p: Pieces) -> np.ndarray:
    """ns per leaf (index into LEAVES) of a span's pieces."""
    del lab  # the pieces carry their labels
    out = np.zeros(len(LEAVES), dtype=np.int64)
    np.add.at(out, p.label, p.ns)
    return out
