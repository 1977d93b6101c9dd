"""The compiled scanner's path: a trace's events array straight to :class:`Columns`.

``_scan`` (trace/_scan.c) is an accelerator for the msgspec reference path in ``_decode`` and
``_build``: it answers None for anything it cannot prove the reference would accept and turn into
the same columns, and the caller then runs the reference path, so what is accepted, rejected or
recovered (and every error message) is the reference's by construction. A pure-Python install
(no compiler) has no ``_scan`` and always takes the reference path; so does ``PROFUSE_SCANNER=0``.

Big arrays are scanned by two threads (the scan releases the GIL): the second starts at an event
boundary found after the middle, and its half is kept only if the first thread's scan arrives at
exactly that byte between two events; otherwise the first thread simply scans on to the end.
"""
from __future__ import annotations

import os
import threading
from itertools import count
from typing import Any

import numpy as np

from . import _decode
from ._columns import FLOW_PHASES, THREAD_SHIFT, Coded, Columns, RowTexts, ShapeColumns, thread_key
from .cache import hasher
from .compiled import load_extension

_scan = load_extension("_scan", "PROFUSE_SCAN_LIB")  # the reference decoder does all without it

SPLIT_MIN_BYTES = 8 << 20
_ARG_COLUMNS = ("correlation", "seq", "fwd_tid", "python_id", "python_parent_id", "nbytes", "external_id",
                "device", "stream")
# the [memory] instants' figures as the scanner hands them over (trace/memory.py's _ARGS, in order)
MEMORY_FIGURES = ("mem_bytes", "mem_addr", "mem_total_allocated", "mem_total_reserved", "mem_device_type",
                  "mem_device")
assert FLOW_PHASES == ("s", "f", "t")  # the scanner codes flow phases in this order


def available() -> bool:
    """Whether the compiled scanner is built into this install."""
    return _scan is not None


def enabled() -> bool:
    """Whether loads try the scanner first (``PROFUSE_SCANNER=0`` forces the reference decoder)."""
    return _scan is not None and os.environ.get("PROFUSE_SCANNER", "1") != "0"


def nest_ids(ids: np.ndarray, thread: np.ndarray, ts: np.ndarray, dur: np.ndarray, parent: np.ndarray,
             depth: np.ndarray, overhang: int) -> bool:
    """Parent and depth of host events by the extension's stack pass (correlate.nesting_in_order's rule) over
    the events' own columns, ``ids`` the events to nest in (thread, start, longer first, id) order:
    ``parent[id]`` (an event id, -1 for none) and ``depth[id]`` written in place for each (``parent`` int32 or
    int64, ``depth`` int32, one row per event); False (nothing written) where the scanner is off or not built."""
    if not enabled() or not hasattr(_scan, "nest_ids"):
        return False
    if parent.dtype not in _INDEX or depth.dtype != np.int32 or not (parent.flags.c_contiguous and depth.flags.c_contiguous):
        raise ValueError("nest_ids writes int32 or int64 parents and int32 depths in place")

    def index(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=a.dtype if a.dtype in _INDEX else np.int64)
    _scan.nest_ids(index(ids), index(thread), np.ascontiguousarray(ts, dtype=np.int64),
                   np.ascontiguousarray(dur, dtype=np.int64), parent, depth, overhang)
    return True


_INDEX = (np.dtype(np.int32), np.dtype(np.int64))


def _threads(size: int) -> int:
    """Two scanning threads for big inputs on a machine with more than one core."""
    return 2 if size >= SPLIT_MIN_BYTES and (os.cpu_count() or 1) > 1 and os.environ.get("PROFUSE_WORKERS") != "1" else 1


def scan_columns(doc: _decode.Document, *, threads: int | None = None) -> Columns | None:
    """Columns of every event in ``doc``, or None when the reference decoder must handle this trace."""
    if _scan is None:
        return None
    events = doc.events
    size = len(events)
    if threads is None:
        threads = _threads(size)
    split = -1
    if threads > 1:
        gap = _decode._EVENT_GAP.search(events, size // 2)
        split = gap.end() - 1 if gap else -1
    if split < 0:
        return _columns(_scan.scan(events, 0, size, -1))
    tail: list[Any] = [None]

    def run_tail() -> None:
        tail[0] = _scan.scan(events, split, size, -1)

    worker = threading.Thread(target=run_tail, name="profuse-scan", daemon=True)
    worker.start()
    head = _scan.scan(events, 0, size, split)
    worker.join()
    if head is None:
        return None
    if not head["met"]:  # the split was not an event boundary: the head scan read everything
        return _columns(head)
    if tail[0] is None or _mixed_times(head, tail[0]):
        return None
    first, second = _columns(head), _columns(tail[0])
    if first is None or second is None:
        return None
    from ._parallel import merge

    merge(first, second)
    return first if _consistent(first) else None


RawScan = tuple[Any, Any, bool]  # the scanner's answers for the head and the tail, and whether it split


def raw_scan_document(data: _decode.TraceBytes, *, threads: int | None = None) -> RawScan:
    """The scanner's own answers for a whole document (the GIL released throughout the scan): what
    :func:`scan_document` turns into columns. Requires the scanner (``available()``)."""
    assert _scan is not None
    size = len(data)
    if threads is None:
        threads = _threads(size)
    release = _releasable(data)  # a mapping's pages let go behind each scan: its input stays a few MB resident
    gap = _decode._EVENT_GAP.search(data, size // 2) if threads > 1 else None
    if gap is None:
        return _scan.scan(data, 0, size, -1, 1, release), None, False
    split = gap.end() - 1
    tail: list[Any] = [None]

    def run_tail() -> None:
        tail[0] = _scan.scan(data, split, size, -1, 2, release)

    worker = threading.Thread(target=run_tail, name="profuse-scan", daemon=True)
    worker.start()
    head = _scan.scan(data, 0, size, split, 1, release)
    worker.join()
    return head, tail[0], True


HASH_WINDOW = 16 << 20


def _releasable(data: _decode.TraceBytes) -> bool:
    """Whether ``data`` is a file's mapping (:func:`_decode.is_mapped`) whose pages the scanner can let go
    (``_scan.release``: madvise MADV_DONTNEED, which would zero read bytes: never asked for them)."""
    return _decode.is_mapped(data) and hasattr(_scan, "release")


def digest_releasing(data: _decode.TraceBytes) -> tuple[str, int] | None:
    """The :func:`cache.hasher` digest and size of a mapped trace, hashed HASH_WINDOW bytes at a time, each
    window's pages let go once hashed (as the scan lets its own go), so the hash never holds the file
    resident; None where ``data`` is not such a mapping (the caller hashes it whole)."""
    if not _releasable(data):
        return None
    h, view, size = hasher(), memoryview(data), len(data)
    for lo in range(0, size, HASH_WINDOW):
        h.update(view[lo:lo + HASH_WINDOW])
        _scan.release(data, lo, min(lo + HASH_WINDOW, size))
    view.release()
    return str(h.hexdigest()), size


def scan_document(data: _decode.TraceBytes, *, threads: int | None = None,
                  raw: RawScan | None = None) -> tuple[Columns, dict[str, Any] | None] | None:
    """Columns and the other top-level members (as msgspec Raw) of a whole trace document, in one pass
    (or from ``raw``, :func:`raw_scan_document`'s answers for these very bytes).

    None when the reference path must handle it (from ``_decode.split_document`` on), which then
    gives the document's error or result exactly as without the scanner.
    """
    if _scan is None:
        return None
    head, tail, split = raw if raw is not None else raw_scan_document(data, threads=threads)
    if not split:
        cols = _columns(head)
        return None if head is None or cols is None else (cols, _top(data, head["members"]))
    if head is None:
        return None
    if not head["met"]:  # the split was not between two events: the head scan read everything
        cols = _columns(head)
        return None if cols is None else (cols, _top(data, head["members"]))
    if tail is None or _mixed_times(head, tail):
        return None
    rest = _scan.document_rest(data, tail["end"])
    if rest is None:
        return None
    joined = _join_events(head, tail)
    first, second = _columns(head), _columns(tail, events=not joined)
    if first is None or second is None:
        return None
    from ._parallel import merge

    merge(first, second)
    return (first, _top(data, head["members"] + rest)) if _consistent(first) else None


_EVENT_I64 = ("ts", "dur", *_ARG_COLUMNS, "flops")
_EVENT_CODES = (("name", "names"), ("cat", "cats"), ("pid", "pids"), ("tid", "tids"))


def _join_events(head: dict[str, Any], tail: dict[str, Any]) -> bool:
    """The tail's per-event columns appended to the head's, in place (``_scan.join``: the head's arrays
    grow, no third array; the concatenation of the two halves was a load's biggest batch of fresh pages,
    ~4.7 k page faults of bert50's ~40 k), its codes renumbered into the head's tables, which grow by the
    tail's new values exactly as :func:`._parallel.merge` numbers them. True when done (the tail's event
    columns are then not to be added again); False where it is not done: a half without events, tables
    that are not plain (two values one dict key, as 1 and 1.0), or a column already in use."""
    if head.get("joined"):  # these answers were read before (``raw`` given twice)
        return True
    if not head["n"] or not tail["n"]:
        return False
    from ._parallel import _remap

    grown, remaps = [], []
    for _, t in _EVENT_CODES:
        table, local = _table(head[t]), _table(tail[t])
        if len(table) != len(head[t]) or len(local) != len(tail[t]):
            return False
        remaps.append(_remap(table, local).astype(np.int32))  # merge's numbering: new values after the head's
        grown.append(list(table))
    pairs: list[tuple[Any, Any, np.ndarray | None]] = [(head[k], tail[k], None) for k in _EVENT_I64]
    pairs += [(head[k], tail[k], remap) for (k, _), remap in zip(_EVENT_CODES, remaps)]
    try:
        _scan.join(pairs)
    except ValueError:
        return False
    for (_, t), values in zip(_EVENT_CODES, grown):
        head[t] = values
    head["joined"] = True
    return True


def _top(data: _decode.TraceBytes, members: list[tuple[str, int, int]]) -> dict[str, Any] | None:
    """The top-level members other than traceEvents, as the reference's split gives them."""
    import msgspec

    view = memoryview(data)
    top = {key: msgspec.Raw(view[start:end]) for key, start, end in members}
    return top if len(top) == len(members) else None  # a repeated key: the reference decides


def _i64(r: dict[str, Any], key: str) -> np.ndarray:
    return np.frombuffer(r[key], dtype=np.int64)


def _table(values: list[Any]) -> dict[Any, int]:
    return dict(zip(values, count()))


def _mixed_times(*results: dict[str, Any]) -> bool:
    """A ts with float noise below 2^33 µs and a ts of 2^33 µs or more in one trace: the reference
    reads a chunk holding both from the text (truncating past the ns), the noisy one otherwise from
    its double, so which chunk it falls in decides: left to the reference (see _scan.c, time_ns)."""
    return any(r["small_noisy"] for r in results) and any(r["big"] for r in results)


def _columns(r: dict[str, Any] | None, *, events: bool = True) -> Columns | None:
    """The scanner's answer as :class:`Columns`; without ``events``, leaving out the per-event columns
    (they were joined to the other half's: :func:`_join_events`)."""
    if r is None or _mixed_times(r):
        return None
    cols = Columns(names=_table(r["names"]), cats=_table(r["cats"]), pids=_table(r["pids"]), tids=_table(r["tids"]))
    if not _consistent(cols):
        return None
    n = r["n"]
    if n and events:
        cols.add("ts", _i64(r, "ts"))
        cols.add("dur", _i64(r, "dur"))
        cols.add("name", np.frombuffer(r["name"], dtype=np.int32))
        cols.add("cat", np.frombuffer(r["cat"], dtype=np.int32))
        cols.add("thread_key", _keys(r["pid"], r["tid"]))
        for key in _ARG_COLUMNS:
            cols.add(key, _i64(r, key))
        cols.add("flops", np.frombuffer(r["flops"], dtype=np.float64))
    if r["inst_ts"]:
        cols.add("inst_name", np.frombuffer(r["inst_name"], dtype=np.int32))
        cols.add("inst_cat", np.frombuffer(r["inst_cat"], dtype=np.int32))
        cols.add("inst_ts", _i64(r, "inst_ts"))
        cols.add("inst_thread_key", _keys(r["inst_pid"], r["inst_tid"]))
    cols.flow_cat_coded = Coded(codes=np.frombuffer(r["flow_cat_codes"], dtype=np.int32), table=r["flow_cat_table"])
    if len(r["flow_cat_codes"]):
        if r["flow_id_ints"] is not None:
            cols.add("flow_id_int", _i64(r, "flow_id_ints"))
        cols.flow_ids = r["flow_ids"]
        cols.add("flow_ph", np.frombuffer(r["flow_ph"], dtype=np.int8))
        cols.add("flow_ts", _i64(r, "flow_ts"))
        cols.add("flow_thread_key", _keys(r["flow_pid"], r["flow_tid"]))
    if r["mem_ts"]:
        cols.add("mem_ts", _i64(r, "mem_ts"))
        cols.add("mem_thread_key", _keys(r["mem_pid"], r["mem_tid"]))
        for key in MEMORY_FIGURES:
            cols.add(key, _i64(r, key))
    cols.memory_scanned, cols.memory_skipped = not r["mem_defer"], r["mem_skipped"]
    cols.shape_columns = ShapeColumns(rows=np.frombuffer(r["shape_rows"], dtype=np.int64),
                                      codes=np.frombuffer(r["shape_codes"], dtype=np.int32).reshape(-1, 5),
                                      texts=r["shape_texts"])
    if len(r["dir_rows"]):
        cols.directions = [RowTexts(rows=np.frombuffer(r["dir_rows"], dtype=np.int64),
                                    codes=np.frombuffer(r["dir_codes"], dtype=np.int32), texts=r["dir_texts"])]
    for pid, tid, name, arg_name, labels in r["metas"]:  # the reference's rule, in file order
        where = thread_key(pid, tid if name and name.startswith("thread") else "")
        value = arg_name if arg_name is not None else labels
        if isinstance(value, (str, int, float)) and name:
            cols.thread_meta.setdefault(where, {})[name] = str(value)
    cols.phase_counts = r["phase_counts"]
    cols.ignored_args = dict(r["ignored_args"])
    cols.n = n
    return cols


def _keys(pid: bytes, tid: bytes) -> np.ndarray:
    return np.frombuffer(pid, dtype=np.int32).astype(np.int64) * THREAD_SHIFT + np.frombuffer(tid, dtype=np.int32)


def _consistent(cols: Columns) -> bool:
    """False where an int pid/tid and a string one print the same: thread order then hangs on interning order."""
    for table in (cols.pids, cols.tids):
        if any(isinstance(v, str) for v in table) and any(isinstance(v, int) for v in table):
            strs = {v for v in table if isinstance(v, str)}
            if any(str(v) in strs for v in table if isinstance(v, int)):
                return False
    return True
