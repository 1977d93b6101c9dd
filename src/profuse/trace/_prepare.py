"""Decoded columns -> :class:`DecodedEvents`: names resolved, kinds classified, threads numbered, times checked.

The step between the decoder (``_build.Columns``, still interned and per chunk) and correlation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import TraceError
from ._columns import THREAD_SHIFT, Columns, factorize, flow_cat_values, flow_id_texts, kinds_of, thread_key
from .correlate import LINK_HOW, UNLINKED
from .event_columns import DecodedEvents, EventStrings, Flows, narrowed
from .schema import KINDS

_TIME_LIMIT = 2**62  # every time, and the sum of all durations, stays below this many ns: no sum overflows


@dataclass(frozen=True)
class Threads:
    """Every (pid, tid) of the trace, numbered in (pid, tid) order: numbers before names."""

    keys: list[tuple[str, str]]   # thread number -> (pid, tid) as text
    events: np.ndarray            # thread number (int32) of each complete event
    flows: np.ndarray             # ... of each flow event
    instants: np.ndarray          # ... of each instant event


@dataclass(frozen=True)
class Prepared:
    """What correlation and the table writers need of a decoded trace."""

    events: DecodedEvents
    strings: EventStrings
    threads: Threads
    flow_cat: np.ndarray             # code of each flow's category into ``flow_cat_text``
    flow_cat_text: list[str | None]
    instants: dict[str, np.ndarray]  # name, cat (codes into strings), ts, thread of instant events
    unnamed: int                     # complete events with "name": null (kept, named "")


def prepare(path: str, cols: Columns, base_ns: int) -> Prepared:
    """Resolve the decoder's interned columns into per-event arrays (``cols`` is consumed)."""
    n = cols.n
    names, cats = _lookup_list(cols.names), _lookup_list(cols.cats)
    name_id, cat_id = cols.take("name"), cols.take("cat")
    unnamed = int(np.count_nonzero(name_id == cols.names[None])) if None in cols.names else 0
    if None in cols.names:  # "name": null: kept, named "" (every analysis groups and matches by name)
        names[cols.names[None]] = ""
    kind = kinds_of(cols, names, name_id, cat_id) if n else np.empty(0, dtype=np.int8)
    threads = number_threads(cols)
    ts, dur, flow_ts = cols.take("ts"), cols.take("dur"), cols.take("flow_ts")
    inst_ts = cols.take("inst_ts")
    check_times(path, base_ns, ts, dur, flow_ts, inst_ts)
    flow_ids, flow_text, flow_cat, flow_cat_text = _flow_codes(cols)
    flows = Flows(ids=flow_ids, id_text=flow_text,
                  ph=cols.take("flow_ph").astype(np.int8),
                  ts=_shifted(flow_ts, base_ns), thread=threads.flows)
    pids = [k[0] for k in threads.keys] or [""]
    tids = [k[1] for k in threads.keys] or [""]
    events = DecodedEvents(
        kind=kind, name=name_id, names=names, cat=cat_id, ts=_shifted(ts, base_ns), dur=dur, thread=threads.events,
        pid_of_thread=np.array([_int_or(p) for p in pids], dtype=np.int64),
        tid_of_thread=np.array([_int_or(t) for t in tids], dtype=np.int64),
        device=narrowed(_device_index(cols)), stream=narrowed(cols.take("stream")),
        correlation=narrowed(cols.take("correlation")), external_id=narrowed(cols.take("external_id")),
        seq=narrowed(cols.take("seq")), python_id=narrowed(cols.take("python_id")),
        python_parent_id=narrowed(cols.take("python_parent_id")), nbytes=narrowed(cols.take("nbytes")),
        flops=cols.take("flops") if n else np.empty(0), flows=flows)
    instants = {}
    if len(threads.instants):
        instants = {"name": cols.take("inst_name"), "cat": cols.take("inst_cat"), "ts": _shifted(inst_ts, base_ns),
                    "thread": threads.instants}
    strings = EventStrings(kinds=list(KINDS), cats=cats.tolist(), names=names.tolist(), pids=pids, tids=tids,
                           how=list(LINK_HOW), why=list(UNLINKED))
    return Prepared(events=events, strings=strings, threads=threads, flow_cat=flow_cat,
                    flow_cat_text=flow_cat_text, instants=instants, unnamed=unnamed)


def _shifted(ts: np.ndarray, base_ns: int) -> np.ndarray:
    """``ts + base_ns``; ``ts`` itself (not a copy) where there is no base time, as in most traces."""
    return ts + base_ns if base_ns else ts


_POW10 = np.array([10**k for k in range(1, 19)], dtype=np.int64)


def _flow_codes(cols: Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Any]]:
    """Each flow's id code and the distinct ids (:func:`flow_codes`), its category code and the distinct
    categories (:func:`factorize`), from the scanner's forms where it gave them: integer ids as numbers
    (what flow_codes makes of their text), categories from their table, each distinct one once."""
    coded = cols.flow_cat_coded
    if coded is not None and not cols.flow_cats and coded.first_seen():
        cat_codes, cat_text = factorize(coded.table)
        cat_codes = cat_codes[coded.codes]
    else:
        cat_codes, cat_text = factorize(flow_cat_values(cols) if coded is not None else cols.flow_cats)
    if "flow_id_int" in cols.parts and not cols.flow_ids:
        distinct, codes = np.unique(cols.take("flow_id_int"), return_inverse=True)
        return codes.reshape(-1).astype(np.int32), distinct, cat_codes, cat_text
    ids = flow_id_texts(cols) if "flow_id_int" in cols.parts else cols.flow_ids
    return (*flow_codes(ids), cat_codes, cat_text)


def flow_codes(ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """A code per flow event (int32, one per distinct id) and the distinct ids: as int64 when every id
    is a decimal number written plainly (what the trace's integer ids become), so they are sorted and
    written as numbers, not a million strings; else as strings (object), in order of first appearance.
    """
    if ids:
        try:
            values = np.fromiter(map(int, ids), dtype=np.int64, count=len(ids))
        except (ValueError, OverflowError):
            values = None
        # int() also reads " 1", "+1", "01", "1_0" and other scripts' digits: a plain number is ASCII
        # and exactly as long as its digits (negative ids keep the strings)
        if values is not None and int(values.min()) >= 0 and "".join(ids).isascii():
            digits = np.searchsorted(_POW10, values, side="right") + 1
            if np.array_equal(np.fromiter(map(len, ids), dtype=np.int64, count=len(ids)), digits):
                distinct, codes = np.unique(values, return_inverse=True)
                return codes.reshape(-1).astype(np.int32), distinct
    codes, text = factorize(ids)
    return codes, np.array(text, dtype=object)


def number_threads(cols: Columns) -> Threads:
    """Number every (pid, tid) seen on complete events, flows and instants densely, in (pid, tid) order."""
    parts = [cols.take(k) for k in ("thread_key", "flow_thread_key", "inst_thread_key")]
    uniq, inverses = _distinct(parts, len(cols.pids), len(cols.tids))
    pid_list, tid_list = _lookup_list(cols.pids), _lookup_list(cols.tids)
    found = [thread_key(pid_list[k // THREAD_SHIFT], tid_list[k % THREAD_SHIFT]) for k in uniq.tolist()]
    order = sorted(range(len(found)), key=lambda i: tuple(_natural(v) for v in found[i]))
    rank = np.empty(len(order), dtype=np.int32)  # thread numbers: int32, as the tables hold them
    rank[order] = np.arange(len(order))
    events, flows, instants = (rank[inverse] if len(order) else inverse.astype(np.int32) for inverse in inverses)
    return Threads(keys=[found[i] for i in order], events=events, flows=flows, instants=instants)


_SHIFT_BITS = THREAD_SHIFT.bit_length() - 1
assert 1 << _SHIFT_BITS == THREAD_SHIFT


def _distinct(parts: list[np.ndarray], pids: int, tids: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """``np.unique(keys, return_inverse=True)`` for the thread keys (pid code * THREAD_SHIFT + tid code)
    of all ``parts`` together, the inverse given per part (int64): without a sort, and without joining
    the parts, when the pid x tid grid is small (a table over it marks the keys present)."""
    if not sum(len(p) for p in parts) or pids * tids > 1 << 22:
        joined = np.concatenate(parts).astype(np.int64, copy=False)
        uniq, inverse = np.unique(joined, return_inverse=True)
        inverse = inverse.reshape(-1).astype(np.int64, copy=False)
        bounds = np.cumsum([len(p) for p in parts])[:-1]
        return uniq, np.split(inverse, bounds)
    cells = []
    present = np.zeros(pids * tids, dtype=bool)
    for keys in parts:  # keys are >= 0: // and % by bits, in place where it can be
        cell = keys >> _SHIFT_BITS
        cell *= tids
        cell += keys & (THREAD_SHIFT - 1)
        present[cell] = True
        cells.append(cell)
    used = np.flatnonzero(present)
    number = np.zeros(pids * tids, dtype=np.int64)
    number[used] = np.arange(len(used))
    return (used // tids) * THREAD_SHIFT + used % tids, [number[cell] for cell in cells]


def _lookup_list(table: dict[Any, int]) -> np.ndarray:
    """An interning table (value -> code) as an object array indexed by code."""
    out = np.empty(len(table), dtype=object)
    for v, i in table.items():
        out[i] = v
    return out


def _natural(s: str) -> tuple[int, int, str]:
    """Sort key of a pid or tid: numbers first, in numeric order, then names."""
    v = _int_or(s)
    return (0, v, "") if v >= 0 or s.lstrip("-").isdigit() else (1, 0, s)


def _int_or(s: str) -> int:
    """``s`` as an int when it is one that fits in 64 bits (pids and tids can be any JSON value), else -1."""
    try:
        v = int(s)
    except ValueError:
        return -1
    return v if -(2**63) <= v < 2**63 else -1


def base_time_ns(path: str, value: Any) -> int:
    """``baseTimeNanoseconds``: added to every ts, so it must keep them within 64 bits."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(path, f"baseTimeNanoseconds is {_short(value)}, not a whole number of ns")
    if not -(2**62) < value < 2**62:
        raise TraceError(path, f"baseTimeNanoseconds {value} is out of range (must be below 2^62 ns)")
    return value


def check_times(path: str, base_ns: int, ts: np.ndarray, dur: np.ndarray, *other_ts: np.ndarray) -> None:
    """With ``baseTimeNanoseconds`` added, every time and every sum of durations must fit in 64 bits.

    Each ts and dur is already below 2^62 ns (the decoder refuses others), so these sums cannot wrap.
    """
    parts = [a for a in (ts, *other_ts) if len(a)]
    if not parts:
        return
    lo = min(int(a.min()) for a in parts) + base_ns
    hi = max([int(a.max()) for a in other_ts if len(a)] + ([int((ts + dur).max())] if len(ts) else [])) + base_ns
    if not -_TIME_LIMIT < lo <= hi < _TIME_LIMIT:
        raise TraceError(path, f"times out of range: with baseTimeNanoseconds {base_ns} the events run from "
                               f"{lo} to {hi} ns, beyond ±2^62 ns")
    if float(dur.sum(dtype=np.float64)) >= _TIME_LIMIT:
        raise TraceError(path, "event durations add up to more than 2^62 ns (146 years): the times are not real")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _device_index(cols: Columns) -> np.ndarray:
    """The ``device`` column; a number beyond the table's 32 bits is no device index: read as absent and
    counted in ``meta.ignored_args``, as a device of another type is."""
    device = cols.take("device")
    wide = (device < -(2**31)) | (device > 2**31 - 1)
    if wide.any():
        cols.ignored_args["device"] = cols.ignored_args.get("device", 0) + int(wide.sum())
        device = np.where(wide, -1, device)
    return device
