"""The ``memory`` and ``op_memory`` tables: torch.profiler's ``[memory]`` instant events (``profile_memory=True``).

Read only when the trace has such events (the decoder has already interned the name ``[memory]``), so a
trace without them loads exactly as before. Each event is one allocation (``Bytes`` > 0) or free (< 0)
of the caching allocator (or the CPU allocator) with the totals after it; see docs/memory.md.

- ``memory``: one row per event in time order, the innermost host event holding it on its thread (its op,
  module, profiler step), and each free matched to its allocation by address on the same device (a
  free with no allocation in the trace is memory *allocated before the trace*).
- ``op_memory``: torch's ``key_averages()`` memory per op-table event: the bytes of every memory event
  with ``ts <= t <= ts + dur`` (any thread, as torch counts them), CPU and device apart, and the self
  figures: that minus the op's direct children in the op table.
"""
from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb
import msgspec
import numpy as np

from . import compiled
from ._columns import _PRECISE_ABOVE_US, THREAD_SHIFT, Columns, _ns, factorize, packed_order, thread_key
from ._native import MEMORY_FIGURES
from ._write import ArrowTable, encode_dictionary
from .correlate import Reusable, nearest_ancestor
from .event_columns import NONE, EventColumns, kind_mask, row_type
from .numbers import int64
from .schema import HOST_KINDS, TABLE_KINDS
from .step_names import is_step_name

MEMORY_EVENT = "[memory]"
_RAW_NAME = b'"[memory]"'
# c10::DeviceType -> the label profuse uses; torch counts CPU, MKLDNN and IDEEP as CPU memory and CUDA,
# HIP, XPU and PrivateUse1 as device memory (torch/autograd/profiler.py, _parse_kineto_results).
DEVICE_TYPES = {0: "CPU", 1: "CUDA", 2: "CPU", 5: "CPU", 6: "ROCm", 12: "XPU", 13: "MPS", 19: "MTIA",
                20: "PrivateUse1"}
CPU_TYPES = frozenset({0, 2, 5})
DEVICE_MEM_TYPES = frozenset({1, 6, 12, 20})
_ARGS = ("Bytes", "Addr", "Total Allocated", "Total Reserved", "Device Type", "Device Id")


class _Ev(msgspec.Struct):
    """One trace event, nothing decoded but what tells a memory event apart."""

    name: msgspec.Raw = msgspec.Raw(b"null")
    ph: msgspec.Raw = msgspec.Raw(b"null")
    ts: msgspec.Raw = msgspec.Raw(b"null")
    pid: msgspec.Raw = msgspec.Raw(b"null")
    tid: msgspec.Raw = msgspec.Raw(b"null")
    args: msgspec.Raw = msgspec.Raw(b"null")


@dataclass(frozen=True)
class MemoryEvents:
    """The memory events of a trace as read, in file order (ns times before baseTimeNanoseconds)."""

    ts: np.ndarray          # int64 ns (exact from the text)
    thread: np.ndarray      # int32 code of each event's (pid, tid) into ``threads``
    threads: list[tuple[str, str]]  # the distinct (pid, tid) as text, as thread_key writes them
    bytes: np.ndarray       # int64, > 0 allocation, < 0 free
    addr: np.ndarray        # int64
    total_allocated: np.ndarray
    total_reserved: np.ndarray
    device_type: np.ndarray  # int64 c10::DeviceType
    device: np.ndarray       # int64 Device Id (-1 for the CPU)
    skipped: int             # memory events left out: a field missing or not an integer

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def pid_tid(self) -> list[tuple[str, str]]:
        """Each event's (pid, tid) as text."""
        return [self.threads[c] for c in self.thread.tolist()]

    def usable(self) -> MemoryEvents:
        """The events a memory table can hold: a Device Id and Device Type within 32 bits (the table's
        columns), totals that are not negative (no figure profuse shows may be); the rest left out and
        counted in ``skipped``."""
        limit = 2**31
        ok = ((np.abs(self.device) < limit) & (self.device_type >= 0) & (self.device_type < limit)
              & (self.total_allocated >= 0) & (self.total_reserved >= 0))
        if ok.all():
            return self
        return MemoryEvents(ts=self.ts[ok], thread=self.thread[ok], threads=self.threads, bytes=self.bytes[ok],
                            addr=self.addr[ok], total_allocated=self.total_allocated[ok],
                            total_reserved=self.total_reserved[ok], device_type=self.device_type[ok],
                            device=self.device[ok], skipped=self.skipped + int((~ok).sum()))


_accel = compiled.accel  # tests turn it off here


def _events(ts: np.ndarray, pid_tid: list[tuple[str, str]], **cols: Any) -> MemoryEvents:
    thread, threads = factorize(pid_tid)
    return MemoryEvents(ts=ts, thread=thread, threads=threads, **cols)


def has_memory_events(names: dict[Any, int]) -> bool:
    """Whether the decoder met the name ``[memory]`` (its interning table): one dict lookup."""
    return MEMORY_EVENT in names


class _MemEv(msgspec.Struct):
    """A memory event with what the table needs; ``ts`` kept as written (exact ns from the text)."""

    name: Any = None
    ph: Any = None
    ts: msgspec.Raw = msgspec.Raw(b"null")
    pid: Any = None
    tid: Any = None
    args: Any = None


class _Args(msgspec.Struct):
    """A memory event's args as torch writes them: every figure an integer."""

    nbytes: int = msgspec.field(name="Bytes")
    addr: int = msgspec.field(name="Addr")
    total_allocated: int = msgspec.field(name="Total Allocated")
    total_reserved: int = msgspec.field(name="Total Reserved")
    device_type: int = msgspec.field(name="Device Type")
    device: int = msgspec.field(name="Device Id")


class _TypedEv(msgspec.Struct):
    """A memory event whose args are all there and all integers (the common case: read in one pass)."""

    ts: msgspec.Raw
    args: _Args
    name: Any = None
    ph: Any = None
    pid: Any = None
    tid: Any = None


# An event object holding at most one nested object (args) and no braces in its strings: what torch writes
# for a memory event. Found from each "[memory]" name; anything else sends the whole array down the slow path.
_FLAT_EVENT = re.compile(rb"\{[^{}]*(?:\{[^{}]*\}[^{}]*)?\}")
_EVENT_START = re.compile(rb"[\[,]\s*\{")


def read_memory_events(events: memoryview | bytes | bytearray,
                       array: Callable[[], memoryview | bytes | bytearray] | None = None) -> MemoryEvents:
    """The ``[memory]`` instant events of a trace's raw bytes.

    ``events`` is the ``traceEvents`` array, or the whole document when ``array`` gives the array
    (called only where the events cannot be cut out around their names, so the common load never
    splits or copies the document: a copy of a 1 GB trace was a third of the load's memory).
    """
    data = events if isinstance(events, (bytes, bytearray)) else bytes(events)
    compiled = _compiled(data)
    if compiled is not None:
        return compiled
    pieces = _cut(data)
    typed = _typed(pieces) if pieces else None
    if typed is not None:
        return typed
    found = _decode_pieces(pieces) if pieces is not None else None
    if found is None:
        found = _slow(array() if array is not None else events)
    rows: list[tuple[int, str, str, int, int, int, int, int, int]] = []
    skipped = 0
    for e in found:
        if e.name != MEMORY_EVENT or e.ph not in ("i", "I"):
            continue
        row = _row(e)
        if row is None:
            skipped += 1
        else:
            rows.append(row)
    cols = list(zip(*rows)) if rows else [()] * 9
    ints = [np.array(c, dtype=np.int64) for c in cols]
    return _events(ints[0], list(zip(cols[1], cols[2])), bytes=ints[3], addr=ints[4],
                   total_allocated=ints[5], total_reserved=ints[6], device_type=ints[7], device=ints[8],
                   skipped=skipped)


def _compiled(data: bytes | bytearray) -> MemoryEvents | None:
    """What :func:`_typed` reads from ``_cut``'s pieces, read by trace/_accel.c in one pass; None where
    it declines (anything unusual: see the top of _accel.c), none is found, or it is not built or
    turned off (``PROFUSE_SCANNER=0`` turns off both compiled readers)."""
    if _accel is None or not compiled.enabled():
        return None
    r = _accel.memory_events(data)
    if r is None or not r["ts_us"]:
        return None
    us, exact = np.frombuffer(r["ts_us"], dtype=np.float64), np.frombuffer(r["ts_ns"], dtype=np.int64)
    # _ns_column's rule: the doubles where they hold whole ns, else every time from the text
    precise = bool(np.any((np.abs(us) >= _PRECISE_ABOVE_US) & (us % 1 != 0)))
    ts = exact.copy() if precise else _ns(us)
    ints = {k: np.frombuffer(r[k], dtype=np.int64).copy() for k in ("bytes", "addr", "total_allocated",
                                                                    "total_reserved", "device_type", "device")}
    return MemoryEvents(ts=ts, thread=np.frombuffer(r["thread"], dtype=np.int32).copy(), threads=r["threads"],
                        skipped=0, **ints)


def scanned_memory_events(cols: Columns) -> MemoryEvents | None:
    """The memory events the compiled scanner read with the other events (the ``mem_*`` columns, taken
    out of ``cols``), or None where it did not (the reference decoder, or an event it left to
    :func:`read_memory_events`: a figure given twice, a float, a time with float noise)."""
    parts = {k: cols.take(k) for k in ("mem_ts", "mem_thread_key", *MEMORY_FIGURES)}
    if not cols.memory_scanned:
        return None
    pids, tids = list(cols.pids), list(cols.tids)
    keys, code = np.unique(parts["mem_thread_key"].astype(np.int64, copy=False), return_inverse=True)
    threads = [thread_key(pids[k // THREAD_SHIFT], tids[k % THREAD_SHIFT]) for k in keys.tolist()]
    figures = [parts[k].astype(np.int64, copy=False) for k in MEMORY_FIGURES]
    return MemoryEvents(ts=parts["mem_ts"].astype(np.int64, copy=False), thread=code.astype(np.int32).reshape(-1),
                        threads=threads, bytes=figures[0], addr=figures[1], total_allocated=figures[2],
                        total_reserved=figures[3], device_type=figures[4], device=figures[5],
                        skipped=cols.memory_skipped)


def _fast(data: bytes) -> list[_MemEv] | None:
    """Each memory event cut out around its name and all decoded at once, or None where any cut is not
    one whole event naming ``[memory]`` (then the whole array is decoded)."""
    pieces = _cut(data)
    return None if pieces is None else _decode_pieces(pieces)


def _typed(pieces: list[bytes]) -> MemoryEvents | None:
    """The cut events read straight into columns when every one has all its figures as integers and a
    plain time; None otherwise (then each is looked at on its own)."""
    try:
        evs = msgspec.json.decode(b"[" + b",".join(pieces) + b"]", type=list[_TypedEv])
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    if len(evs) != len(pieces) or any(e.name != MEMORY_EVENT or e.ph not in ("i", "I") for e in evs):
        return None
    ts = _ns_column([e.ts for e in evs])
    if ts is None:
        return None
    try:
        cols = [np.array([getattr(e.args, f) for e in evs], dtype=np.int64) for f in _Args.__struct_fields__]
    except OverflowError:
        return None
    return _events(ts, [thread_key(e.pid, e.tid) for e in evs],
                   bytes=cols[0], addr=cols[1], total_allocated=cols[2], total_reserved=cols[3],
                   device_type=cols[4], device=cols[5], skipped=0)


def _ns_column(raws: list[msgspec.Raw]) -> np.ndarray | None:
    """Times as written (µs) -> exact integer ns: as floats where a double holds whole ns, else from the text
    (as the decoder reads event times); None if one is not a number."""
    try:
        us = np.array(msgspec.json.decode(b"[" + b",".join(bytes(r) for r in raws) + b"]", type=list[float]),
                      dtype=np.float64)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if not np.isfinite(us).all():
        return None
    if not np.any((np.abs(us) >= _PRECISE_ABOVE_US) & (us % 1 != 0)):
        return _ns(us)
    exact = [_ns_text(bytes(r)) for r in raws]
    if any(t is None for t in exact):
        return None
    return np.array(exact, dtype=np.int64)


def _cut(data: bytes | bytearray) -> list[bytes] | None:
    """Each memory event's text, cut out around its name, or None where a cut is not one whole event."""
    pieces = []
    pos = data.find(_RAW_NAME)
    while pos >= 0:
        start = data.rfind(b"{", 0, pos)
        if start < 0 or data.find(b"}", start, pos) >= 0 or not _EVENT_START.match(_before(data, start)):
            return None
        m = _FLAT_EVENT.match(data, start)
        if m is None or m.end() < pos:
            return None
        pieces.append(m.group())
        pos = data.find(_RAW_NAME, m.end())
    return pieces


def _decode_pieces(pieces: list[bytes]) -> list[_MemEv] | None:
    """The cut events decoded at once (any args), or None where they are not all memory events."""
    if not pieces:
        return []
    try:
        out = msgspec.json.decode(b"[" + b",".join(pieces) + b"]", type=list[_MemEv])
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    return out if len(out) == len(pieces) and all(e.name == MEMORY_EVENT for e in out) else None


def _before(data: bytes | bytearray, start: int) -> bytes | bytearray:
    """The array separator before an object at ``start`` and the object's brace: ``,{`` or ``[ {``."""
    i = start - 1
    while i >= 0 and data[i] in b" \t\r\n":
        i -= 1
    return bytes(data[max(i, 0):start + 1])


def _slow(events: memoryview | bytes | bytearray) -> list[_MemEv]:
    """Every event decoded (only names and phases looked at), the memory events kept."""
    try:
        evs = msgspec.json.decode(events, type=list[_Ev])
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        evs = _one_by_one(events)
    keep = [e for e in evs if bytes(e.name) == _RAW_NAME]
    if not keep:
        return []
    out = []
    for e in keep:
        try:
            out.append(_MemEv(name=MEMORY_EVENT, ph=msgspec.json.decode(e.ph), ts=e.ts,
                              pid=msgspec.json.decode(e.pid), tid=msgspec.json.decode(e.tid),
                              args=msgspec.json.decode(e.args)))
        except (msgspec.DecodeError, RecursionError):
            continue
    return out


def _one_by_one(events: memoryview | bytes | bytearray) -> list[_Ev]:
    """Element by element, for an array with elements that are not objects (a lenient load)."""
    out = []
    for raw in msgspec.json.decode(events, type=list[msgspec.Raw]):
        try:
            out.append(msgspec.json.decode(raw, type=_Ev))
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            continue
    return out


def _row(e: _MemEv) -> tuple[int, str, str, int, int, int, int, int, int] | None:
    ts = _ns_text(bytes(e.ts))
    args = e.args
    if ts is None or not isinstance(args, dict):
        return None
    vals: list[int] = []
    for k in _ARGS:
        v = _whole(args.get(k))
        if v is None:
            return None
        vals.append(v)
    p, t = thread_key(e.pid, e.tid)
    return (ts, p, t, vals[0], vals[1], vals[2], vals[3], vals[4], vals[5])


def _whole(v: Any) -> int | None:
    """A memory figure: an integer within 64 bits, or a float holding one (``35.0``, a trace re-serialised by
    another tool) as that integer; anything else (a fraction, text, absent) None: the event is left out."""
    return int64(v, floats=True)


def _ns_text(raw: bytes) -> int | None:
    """A µs time as written (``123.456``) -> exact integer ns; None when it is not a plain number."""
    text = raw.strip()
    neg = text.startswith(b"-")
    body = text[1:] if neg else text
    whole, _, frac = body.partition(b".")
    if not whole.isdigit() or (frac and not frac.isdigit()):
        if b"e" in body.lower():
            try:
                return round(float(text) * 1000)
            except ValueError:
                return None
        return None
    ns = int(whole) * 1000 + int(frac[:3].ljust(3, b"0") or b"0")
    return -ns if neg else ns


def write_memory_tables(con: duckdb.DuckDBPyConnection, mem: MemoryEvents, *, base_ns: int,
                        thread_keys: list[tuple[str, str]], events: EventColumns,
                        names: np.ndarray, reusable: Reusable | None = None) -> None:
    """Write ``memory`` and ``op_memory`` (see the module docstring); ``reusable``: what correlate worked out
    that these ask again (the host events' order, each event's op-table parent), where the caller has it.

    Each column is gathered into time order once, and the row numbers it holds (threads, events, memory
    rows) are int32 where the trace's events and the memory events both fit it: a big trace's memory events
    are millions, and their columns are built while the ``events`` table goes in."""
    if not len(mem):
        return
    ts = mem.ts + base_ns
    order = np.lexsort((np.arange(len(ts)), ts))  # time order, file order among equal times
    ts = ts[order]
    ids = row_type(len(events), len(ts))
    number = {k: i for i, k in enumerate(thread_keys)}
    per_code = np.array([number.get(k, NONE) for k in mem.threads] or [NONE], dtype=ids)
    thread = per_code[mem.thread[order]]
    nbytes, addr = mem.bytes[order], mem.addr[order]
    dtype, device = mem.device_type[order], mem.device[order]
    op, module = _held_op_and_module(events, ts, thread, None if reusable is None else reusable.host_order, ids)
    step = _steps(events, names, ts).astype(ids, copy=False)
    alloc, free = (a.astype(ids, copy=False) for a in match_frees(nbytes, addr, dtype, device))
    types, type_code = np.unique(dtype, return_inverse=True)  # a handful: looked up by DuckDB in a list
    labels = [DEVICE_TYPES.get(d, f"type {d}") for d in types.tolist()]
    type_code = type_code.reshape(-1).astype(np.int32)
    table_parent = None if reusable is None else reusable.table_parent
    columns = {"id": np.arange(len(ts), dtype=ids), "type_code": type_code, "device": device, "ts": ts,
               "bytes": nbytes, "addr": addr, "total_allocated": mem.total_allocated[order],
               "total_reserved": mem.total_reserved[order], "thread": thread, "op": op, "module": module,
               "step": step, "alloc": alloc, "free": free}
    del order, thread, addr, device, op, module, step, alloc, free, type_code
    if not _write_memory_arrow(con, columns, labels):
        con.register("_mem", columns)
        con.execute("""INSERT INTO memory SELECT id, device_type, CASE WHEN device_type = 'CPU' THEN NULL ELSE device END,
                       ts, bytes, addr, total_allocated, total_reserved, NULLIF(thread, -1), NULLIF(op, -1),
                       NULLIF(module, -1), NULLIF(step, -1), NULLIF(alloc, -1), NULLIF(free, -1),
                       bytes < 0 AND alloc = -1
                       FROM (SELECT *, list_extract($labels::VARCHAR[], type_code + 1) AS device_type FROM _mem)""",
                    {"labels": labels})
        con.unregister("_mem")
    columns.clear()  # only ts, the bytes and their types are asked again
    _write_op_memory(con, events, ts, nbytes, dtype, table_parent)


def _held_op_and_module(events: EventColumns, ts: np.ndarray, thread: np.ndarray, host_order: np.ndarray | None,
                        ids: type[np.signedinteger[Any]]) -> tuple[np.ndarray, np.ndarray]:
    """The op and the module of each memory event's holder (:func:`_holders`), -1 where it has none."""
    holder = _holders(events, ts, thread, host_order)
    has = np.flatnonzero(holder >= 0)
    held = holder[has]
    del holder
    op, module = np.full(len(ts), NONE, dtype=ids), np.full(len(ts), NONE, dtype=ids)
    op[has], module[has] = events.op[held], events.module[held]
    return op, module


def _write_memory_arrow(con: duckdb.DuckDBPyConnection, columns: dict[str, np.ndarray], labels: list[str]) -> bool:
    """The ``memory`` rows (``columns`` as :func:`write_memory_tables` gathers them) as an Arrow stream (see
    trace/_write.py's ArrowTable); False where they cannot go so."""
    type_code = columns["type_code"]
    table = ArrowTable(len(type_code)).number("id", columns["id"])
    table.text("device_type", type_code, encode_dictionary(labels))
    cpu = np.array([label == "CPU" for label in labels], dtype=bool)
    table.number("device", columns["device"], valid=~cpu[type_code]).number("ts", columns["ts"])
    for name in ("bytes", "addr", "total_allocated", "total_reserved"):
        table.number(name, columns[name])
    for name in ("thread", "op", "module", "step", "alloc", "free"):
        table.number(name, columns[name], null=NONE)
    return table.insert(con, "memory", "*, bytes < 0 AND alloc IS NULL")


def _holders(events: EventColumns, ts: np.ndarray, thread: np.ndarray,
             host_order: np.ndarray | None = None) -> np.ndarray:
    """The innermost host event on the memory event's thread with ev.ts <= t < ev.ts + dur (a
    zero-length event counts as 1 ns long), or -1.

    ``host_order``: the nested host events by thread, start, the longer first (correlate's
    :func:`~profuse.trace.correlate.nesting_in_order`), where the caller has it: a thread's host events are
    then a run of it, already in the order searched (on a thread, events of one start by depth); the threads
    it does not hold (a device thread's host-kind events are not nested) are found in one pass and sorted.
    """
    out = np.full(len(ts), NONE, dtype=np.int64)
    by_thread = np.argsort(thread, kind="stable")  # the memory events of each thread, in time order
    grouped = thread[by_thread]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]]) if len(ts) else np.zeros(0, dtype=np.int64)
    runs = {int(grouped[a]): by_thread[a:b] for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(ts)])}
    runs.pop(NONE, None)
    found = _host_runs(events, list(runs), host_order)
    for th, sel in runs.items():
        cand = found[th]
        if not cand.size:
            continue
        t = ts[sel]
        pos = np.searchsorted(events.ts[cand], t, side="right") - 1
        cur = np.where(pos >= 0, cand[np.maximum(pos, 0)], NONE)
        active = np.flatnonzero(cur >= 0)
        while active.size:  # walk out to the first enclosing event that still runs at t
            c = cur[active]
            ended = events.ts[c] + np.maximum(events.dur[c], 1) <= t[active]
            active, up = active[ended], events.parent[c[ended]]
            cur[active] = up
            active = active[up >= 0]
        out[sel] = cur
    return out


def _host_runs(events: EventColumns, threads: list[int], host_order: np.ndarray | None) -> dict[int, np.ndarray]:
    """Each thread's host-kind events by start, then depth, then id: a run of ``host_order`` where it holds
    the thread's events, else (all threads at once) from one pass over the events and one sort."""
    found: dict[int, np.ndarray] = {}
    if host_order is not None:
        thread_of = events.thread
        for th in threads:
            lo = bisect.bisect_left(host_order, th, key=lambda i: thread_of[i])
            hi = bisect.bisect_right(host_order, th, lo=lo, key=lambda i: thread_of[i])
            if hi > lo:  # a thread with nested host events: all its host-kind events
                found[th] = host_order[lo:hi]
    rest = [th for th in threads if th not in found]
    if rest:
        wanted = np.zeros(max(int(events.thread.max(initial=0)), *rest) + 1, dtype=bool)
        wanted[rest] = True
        cand = np.flatnonzero(kind_mask(events.kind, *HOST_KINDS) & wanted[events.thread])
        cand = cand[packed_order(events.thread[cand], events.ts[cand], events.depth[cand])]
        of = events.thread[cand]
        for th in rest:
            found[th] = cand[np.searchsorted(of, th, side="left"):np.searchsorted(of, th, side="right")]
    return found


def _steps(events: EventColumns, names: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """The step annotation (the step model's name rule, trace/step_names.py: ``ProfilerStep#N``, vLLM's and
    sglang's scheduler steps) running at each time (events.id), or -1; a step annotation inside another
    is not one of its own (it describes the outer step)."""
    out = np.full(len(ts), NONE, dtype=np.int64)
    ann = np.flatnonzero(kind_mask(events.kind, "annotation"))
    is_step = np.array([is_step_name(str(s)) for s in names] or [False])  # per distinct name
    steps = ann[is_step[events.name[ann]]].astype(np.int64)
    if not steps.size:
        return out
    steps = steps[np.lexsort((-events.dur[steps], events.ts[steps]))]   # by start, the longer first
    ends = events.ts[steps] + events.dur[steps]
    steps = steps[ends > np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(ends)[:-1]))]
    start, stop = events.ts[steps], events.ts[steps] + events.dur[steps]
    pos = np.searchsorted(start, ts, side="right") - 1
    ok = (pos >= 0) & (ts <= stop[np.maximum(pos, 0)])
    out[ok] = steps[pos[ok]]
    return out


def match_frees(nbytes: np.ndarray, addr: np.ndarray, dtype: np.ndarray,
                device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each free the row of the allocation it frees, for each allocation the row of its free (-1: none),
    by address per device, in time order."""
    n = len(nbytes)
    alloc, free = np.full(n, NONE, dtype=np.int64), np.full(n, NONE, dtype=np.int64)
    # Walking the events in time order with the open allocation of each (type, device, address): an
    # allocation opens it (one still open there is left unfreed), a free closes the open one. So a free
    # frees exactly the event before it at its address, when that is an allocation: found per address
    # after a stable sort, at once (events of 0 bytes neither open nor close).
    rows = np.flatnonzero(nbytes != 0)
    rows = rows[_address_order(addr[rows], device[rows], dtype[rows])]
    same = ((dtype[rows[1:]] == dtype[rows[:-1]]) & (device[rows[1:]] == device[rows[:-1]])
            & (addr[rows[1:]] == addr[rows[:-1]]))
    pair = same & (nbytes[rows[1:]] < 0) & (nbytes[rows[:-1]] > 0)
    frees, allocs = rows[1:][pair], rows[:-1][pair]
    alloc[frees], free[allocs] = allocs, frees
    return alloc, free


def _address_order(addr: np.ndarray, device: np.ndarray, dtype: np.ndarray) -> np.ndarray:
    """``np.lexsort((position, addr, device, dtype))``: by device type, device, address, then position;
    type and device as one key for :func:`packed_order` (one stable argsort where that key and the
    address fit 63 bits: 1 GB trace's 2.2 M memory events, 160 -> 40 ms), else the lexsort."""
    if addr.size:
        dev_lo, dev_span = int(device.min()), int(device.max()) - int(device.min()) + 1
        type_lo, type_span = int(dtype.min()), int(dtype.max()) - int(dtype.min()) + 1
        if dev_span * type_span < 1 << 62:  # the one key fits int64; packed_order sees to the rest
            major = (dtype.astype(np.int64) - type_lo) * dev_span + (device.astype(np.int64) - dev_lo)
            return packed_order(major, addr)
    return np.lexsort((np.arange(len(addr)), addr, device, dtype))


def _write_op_memory(con: duckdb.DuckDBPyConnection, events: EventColumns, ts: np.ndarray, nbytes: np.ndarray,
                     dtype: np.ndarray, table_parent: np.ndarray | None = None) -> None:
    """torch's per-event memory (see the module docstring), for the op-table events with any;
    ``table_parent``: each event's nearest op-table ancestor, where the caller has it (else found here)."""
    in_table = kind_mask(events.kind, *TABLE_KINDS)
    if not in_table.any():
        return
    cpu = np.where(np.isin(dtype, list(CPU_TYPES)), nbytes, 0).astype(np.int64)
    dev = np.where(np.isin(dtype, list(DEVICE_MEM_TYPES)), nbytes, 0).astype(np.int64)
    parent = nearest_ancestor(events.parent, in_table, include_self=False) if table_parent is None else table_parent
    if _accel is not None and compiled.enabled():
        figures = _op_memory_compiled(events, in_table, parent, ts, cpu, dev)
    else:
        figures = _op_memory_numpy(events, in_table, parent, ts, cpu, dev)
    if not figures[0].size:
        return
    table = ArrowTable(len(figures[0]))
    for name, values in zip(("id", "cpu_mem", "self_cpu_mem", "dev_mem", "self_dev_mem"), figures):
        table.number(name, values)
    if table.insert(con, "op_memory"):
        return
    con.register("_opm", dict(zip(("id", "cpu", "self_cpu", "dev", "self_dev"), figures)))
    con.execute("INSERT INTO op_memory SELECT id, cpu, self_cpu, dev, self_dev FROM _opm")
    con.unregister("_opm")


OpMemory = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # rows, cpu, self cpu, dev, self dev


def _op_memory_compiled(events: EventColumns, in_table: np.ndarray, parent: np.ndarray, ts: np.ndarray,
                        cpu: np.ndarray, dev: np.ndarray) -> OpMemory:
    """:func:`_op_memory_numpy` in one pass in C (trace/_accel.c op_memory): each event's window found
    from the previous one's. It is handed the op-table events alone (their parents renumbered among them:
    an event's table parent is one of them), so its answers are as long as the op table, not the trace."""
    rows = np.flatnonzero(in_table)
    local = np.full(len(in_table) + 1, NONE, dtype=np.int64)  # event -> its position among ``rows``; -1 -> -1
    local[rows] = np.arange(len(rows))
    ev_ts, ev_dur = (np.ascontiguousarray(a[rows], dtype=np.int64) for a in (events.ts, events.dur))
    parent = local[parent[rows]]
    del local
    ts, cpu, dev = (np.ascontiguousarray(a, dtype=np.int64) for a in (ts, cpu, dev))
    out = [np.empty(len(rows), dtype=np.int64) for _ in range(5)]
    count = _accel.op_memory(ev_ts, ev_dur, np.ones(len(rows), dtype=bool), parent, ts, cpu, dev, *out)
    kept, tc, sc, td, sd = (a[:count] for a in out)
    return rows[kept], tc, sc, td, sd


def _op_memory_numpy(events: EventColumns, in_table: np.ndarray, parent: np.ndarray, ts: np.ndarray,
                     cpu: np.ndarray, dev: np.ndarray) -> OpMemory:
    """The op-table events with any memory: for each, the bytes of the memory events (sorted ``ts``; ``cpu``
    and ``dev`` their bytes by kind, else 0) with ``ts <= t <= ts + dur``, and those less the figures of
    its op-table children (``parent``: each event's nearest op-table ancestor)."""
    rows = np.flatnonzero(in_table)
    start, stop = events.ts[rows], events.ts[rows] + events.dur[rows]
    lo = np.searchsorted(ts, start, side="left")
    hi = np.searchsorted(ts, stop, side="right")
    n = len(in_table)
    totals = []
    for nbytes in (cpu, dev):
        cum = np.concatenate([[0], np.cumsum(nbytes)])
        total = np.zeros(n, dtype=np.int64)
        total[rows] = cum[hi] - cum[lo]
        totals.append(total)
    child = np.flatnonzero(in_table & (parent >= 0))
    selfs = []
    for total in totals:
        children = np.zeros(n, dtype=np.int64)
        np.add.at(children, parent[child], total[child])
        selfs.append(total - children)
    keep = rows[(totals[0][rows] != 0) | (totals[1][rows] != 0) | (selfs[0][rows] != 0) | (selfs[1][rows] != 0)]
    return keep.astype(np.int64), totals[0][keep], selfs[0][keep], totals[1][keep], selfs[1][keep]
