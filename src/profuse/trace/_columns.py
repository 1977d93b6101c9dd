"""Turn decoded chunks into column arrays (numpy), interning repeated strings."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np

from ..errors import TraceError
from ._decode import Event, Skipped, args_of, concrete_text, int_column, raw_text
from .schema import KINDS, category_kind, mtia_device_kind

_TS_TEXT = re.compile(rb'"ts"\s*:\s*(-?\d+)(?:\.(\d+))?')
_PRECISE_ABOVE_US = float(2**33)  # above this many µs a double no longer holds whole ns
MAX_US = 2.0**62 / 1000  # |ts| and dur below 2^62 ns, so ts + dur + baseTimeNanoseconds fits in 64 bits

_get = {k: attrgetter(k) for k in ("ph", "name", "cat", "ts", "dur", "pid", "tid", "id")}
_ARG_INTS = ("correlation", "seq", "fwd_tid", "python_id", "python_parent_id", "nbytes")


def factorize(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """Codes of ``values`` (int32) and the distinct values in order of first appearance.

    At C speed (dict.fromkeys and map): several times faster than :func:`intern`'s loop.
    """
    distinct = list(dict.fromkeys(values))
    code = dict(zip(distinct, range(len(distinct)))).__getitem__
    return np.fromiter(map(code, values), dtype=np.int32, count=len(values)), distinct


def packed_order(major: np.ndarray, minor: np.ndarray, tie: np.ndarray | None = None) -> np.ndarray:
    """``np.lexsort(([tie,] minor, major))``: by major, then minor, then tie, then position. As one stable
    argsort of ``(major - min) << bits | (minor - min)`` where that fits in 63 bits (any real trace's
    threads, times and depths), then a lexsort of only the runs that share both keys (by tie): Timsort
    runs through nearly sorted times, a lexsort's passes do not (the host nesting's 4-key sort of
    1.1 M events: 101 -> 27 ms; the memory holders' 2-key sort of 765 k: 69 -> 12 ms)."""
    keys = (minor, major) if tie is None else (tie, minor, major)
    if not major.size:
        return np.zeros(0, dtype=np.int64)
    major_lo, minor_lo = int(major.min()), int(minor.min())
    bits = max(int(minor.max()) - minor_lo, 1).bit_length()
    if bits > 62 or int(major.max()) - major_lo >= 1 << (63 - bits):
        return np.lexsort(keys)
    key = major.astype(np.int64)   # a fresh array, keyed in place (each temporary as long as the events)
    key -= major_lo
    key <<= bits
    low = minor.astype(np.int64)
    low -= minor_lo
    key |= low
    del low
    order = _stable_argsort(key, major, major_lo)
    if tie is None:
        return order
    ordered = key[order]
    tied = np.zeros(len(order), dtype=bool)
    same = np.flatnonzero(ordered[1:] == ordered[:-1])
    tied[same] = tied[same + 1] = True
    at = np.flatnonzero(tied)
    if at.size:  # each run of one key in place, its events by tie, then position
        run = order[at]
        order[at] = run[np.lexsort((run, tie[run], ordered[at]))]
    return order


def _stable_argsort(key: np.ndarray, major: np.ndarray, major_lo: int) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` for a key whose high bits are ``major - major_lo``: where the
    majors are few (threads: numpy sorts int16 by radix), first by them, then Timsort of the keys in that
    order. A trace's events of one thread come nearly in time order, interleaved with other threads': by
    thread first, Timsort's runs are long (1 GB trace's 3 M host events: 63-113 -> 42-69 ms CPU)."""
    span = int(major.max()) - major_lo
    if not 0 < span < 1 << 15:
        return np.argsort(key, kind="stable")
    first = np.argsort((major - major_lo).astype(np.int16), kind="stable")
    by_major: np.ndarray = first[np.argsort(key[first], kind="stable")]
    return by_major


def intern(table: dict[Any, int], values: list[Any]) -> np.ndarray:
    """Codes of ``values`` in ``table`` (value -> code), adding the values not in it yet."""
    setdefault = table.setdefault
    return np.fromiter((setdefault(v, len(table)) for v in values), dtype=np.int32, count=len(values))


ShapeRow = tuple[int, str | None, str | None, str | None, str | None, str | None]


@dataclass
class ShapeColumns:
    """The ``shapes`` rows as columns (how the scanner hands them over): each row's event, and for each of
    its five texts (input dims, input types, grid, block, concrete inputs) a code into ``texts``, -1 for
    none. Shapes repeat (50,000 rows of a ViT trace hold 146 distinct texts): each text is one str."""

    rows: np.ndarray   # int64: the event's row
    codes: np.ndarray  # int32, (rows, 5)
    texts: list[str]

    def text_columns(self) -> list[np.ndarray]:
        """The five text columns, as object arrays (None where absent)."""
        table = np.array([*self.texts, None], dtype=object)  # code -1 picks the None at the end
        return [table[self.codes[:, j]] for j in range(5)]

    def appended(self, other: ShapeColumns, offset: int) -> ShapeColumns:
        """These rows, then ``other``'s (its events ``offset`` rows later), in one text table."""
        table = dict(zip(self.texts, range(len(self.texts))))
        remap = np.array([*(table.setdefault(t, len(table)) for t in other.texts), -1], dtype=np.int32)
        return ShapeColumns(rows=np.concatenate([self.rows, other.rows + offset]),
                            codes=np.concatenate([self.codes, remap[other.codes]]), texts=list(table))

    def tuples(self) -> list[ShapeRow]:
        """The rows as tuples (the reference decoder's form)."""
        return list(zip(self.rows.tolist(), *(c.tolist() for c in self.text_columns())))


@dataclass(frozen=True)
class RowTexts:
    """One text per event for some of a chunk's events (how the scanner hands over ``args.direction``):
    each event's row, and a code into ``texts`` (every distinct text once)."""

    rows: np.ndarray   # int64: the event's row
    codes: np.ndarray  # int32
    texts: list[str]

    @staticmethod
    def of(pairs: list[tuple[int, str]]) -> RowTexts:
        """(row, text) pairs as rows and codes."""
        codes, texts = factorize([t for _r, t in pairs])
        return RowTexts(rows=np.array([r for r, _t in pairs], dtype=np.int64), codes=codes, texts=texts)

    def shifted(self, offset: int) -> RowTexts:
        """The same texts for events ``offset`` rows later."""
        return RowTexts(rows=self.rows + offset, codes=self.codes, texts=self.texts)

    def values(self) -> np.ndarray:
        """Each row's text (object array)."""
        return np.array(self.texts, dtype=object)[self.codes] if self.texts else np.empty(0, dtype=object)


@dataclass
class Coded:
    """A list of values as codes into a table (the scanner's per-flow categories): value k is
    ``table[codes[k]]``. The scanner's tables hold each value once, in order of first use (:meth:`first_seen`
    checks it), so what is computed once per table entry holds for every value, in order."""

    codes: np.ndarray  # int32
    table: list[Any]

    def values(self) -> list[Any]:
        return [self.table[i] for i in self.codes.tolist()]

    def first_seen(self) -> bool:
        """Every table entry is used, and the entries are in order of their first use."""
        if not len(self.codes):
            return not self.table
        run = np.maximum.accumulate(self.codes)
        return int(self.codes[0]) == 0 and int(run[-1]) == len(self.table) - 1 and bool((np.diff(run) <= 1).all())

    def appended(self, other: Coded) -> Coded:
        """These values, then ``other``'s, in one table (in order of first use when both were)."""
        table, index = list(self.table), dict[Any, int]()
        for i, v in enumerate(table):
            index.setdefault(v, i)
        remap = []
        for v in other.table:
            if v not in index:
                index[v] = len(table)
                table.append(v)
            remap.append(index[v])
        codes = np.array([*remap, 0], dtype=np.int32)[other.codes]
        return Coded(codes=np.concatenate([self.codes, codes]), table=table)


def flow_id_texts(cols: Columns) -> list[str]:
    """Every flow's id as text, as the reference decoder lists them (``cols``'s integer ids are taken)."""
    ints = cols.take("flow_id_int")
    return [*map(str, ints.tolist()), *cols.flow_ids]


def flow_cat_values(cols: Columns) -> list[Any]:
    """Every flow's category, as the reference decoder lists them."""
    coded = cols.flow_cat_coded
    return [*(coded.values() if coded is not None else []), *cols.flow_cats]


@dataclass
class Columns:
    """Growing columns of the complete events, plus everything else the trace holds."""

    names: dict[str | None, int] = field(default_factory=dict)
    cats: dict[str | None, int] = field(default_factory=dict)
    pids: dict[Any, int] = field(default_factory=dict)
    tids: dict[Any, int] = field(default_factory=dict)
    parts: dict[str, list[np.ndarray]] = field(default_factory=dict)
    shapes: list[ShapeRow] = field(default_factory=list)
    shape_columns: ShapeColumns | None = None  # the scanner's shapes (then ``shapes`` is empty)
    directions: list[RowTexts] = field(default_factory=list)  # args.direction where a string, in row order
    thread_meta: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    flow_ids: list[str] = field(default_factory=list)
    flow_cats: list[str | None] = field(default_factory=list)
    flow_cat_coded: Coded | None = None  # the scanner's flow categories (then ``flow_cats`` is empty); the
    # scanner's flow ids, when all are integers, are the part "flow_id_int" (then ``flow_ids`` is empty)
    phase_counts: dict[str, int] = field(default_factory=dict)
    n: int = 0
    imprecise_ts: int = 0
    ignored_args: dict[str, int] = field(default_factory=dict)  # args values of a type profuse cannot use
    notes: list[str] = field(default_factory=list)  # what the load should tell the user (a repeated key)
    memory_scanned: bool = False  # the scanner read the [memory] instants (mem_* parts; trace/memory.py)
    memory_skipped: int = 0  # [memory] instants the scanner left out (a figure missing or not an integer)

    def add(self, key: str, arr: np.ndarray) -> None:
        """Append one chunk's values to column ``key``."""
        self.parts.setdefault(key, []).append(arr)

    def take(self, key: str) -> np.ndarray:
        """Remove column ``key`` and return it whole (empty if it never had a value).

        The chunks are released as they are joined, so each column can be taken only once: a
        second call answers an empty column.
        """
        parts = self.parts.pop(key, None) or [np.empty(0, dtype=np.int64)]
        out = parts[0] if len(parts) == 1 else np.concatenate(parts)  # one part: as it is, not copied
        parts.clear()
        return out


THREAD_SHIFT = 1 << 24  # thread key = pid id * THREAD_SHIFT + tid id


def _thread_keys(cols: Columns, events: list[Event]) -> np.ndarray:
    """Interned (pid, tid) pairs as one int64 key each; pids and tids may be ints or strings."""
    pid = intern(cols.pids, list(map(_get["pid"], events))).astype(np.int64)
    tid = intern(cols.tids, list(map(_get["tid"], events))).astype(np.int64)
    return pid * THREAD_SHIFT + tid


def thread_key(pid: Any, tid: Any) -> tuple[str, str]:
    """A thread's (pid, tid) as text, the form the threads table and metadata use (None -> "")."""
    return ("" if pid is None else str(pid), "" if tid is None else str(tid))


def _ns(us: np.ndarray) -> np.ndarray:
    """µs (float64) -> integer ns, exact for whole-µs values of any size."""
    whole = np.floor(us)
    ns: np.ndarray = whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)
    return ns


def _precise_ts(chunk: memoryview, events: list[Event]) -> np.ndarray | None:
    """Exact integer-ns start times read from the text, for traces whose µs floats exceed a double."""
    found = _TS_TEXT.findall(chunk)
    with_ts = [i for i, e in enumerate(events) if e.ts is not None]
    if len(found) != len(with_ts):
        return None
    out = np.full(len(events), np.iinfo(np.int64).min, dtype=np.int64)
    for i, (whole, frac) in zip(with_ts, found):
        ns = int(whole) * 1000 + (int(frac[:3].ljust(3, b"0")) if frac else 0) * (-1 if whole.startswith(b"-") else 1)
        if -(2**63) < ns < 2**63:  # beyond that the event is refused as out of range anyway
            out[i] = ns
    return out


def _floats(values: list[Any]) -> np.ndarray:
    """Times as doubles, None as nan; an integer too large for a double (a ts written with 400 digits) as
    an infinity of its sign, which the range check then refuses (never an OverflowError)."""
    try:
        return np.array(values, dtype=np.float64)
    except OverflowError:
        return np.array([v if not isinstance(v, int) or abs(v) < 2**1000 else (math.inf if v > 0 else -math.inf)
                         for v in values], dtype=np.float64)


def _needs_precise(events: list[Event]) -> tuple[bool, bool]:
    """Whether this chunk's times are read from the text (it holds a ts of 2^33 µs or more, where a
    double may not hold whole ns), and whether any ts has a fraction (else the doubles were exact).

    Reading the text does not hang on whether a double kept a fraction (4458676522709.0000001 is
    a whole double), so the compiled scanner can follow the same rule event by event."""
    ts = _floats(list(map(_get["ts"], events)))  # None -> nan
    ts = ts[~np.isnan(ts) & np.isfinite(ts)]
    return bool(np.any(np.abs(ts) >= _PRECISE_ABOVE_US)), bool(np.any(ts % 1 != 0))


def _ns_of(events: list[Event], idx: list[int], precise: np.ndarray | None) -> np.ndarray:
    """Start times in ns of events[idx] (absent ts: 0), exact from the text where the floats are not."""
    us = np.nan_to_num(np.array([events[i].ts for i in idx], dtype=np.float64))
    if precise is None:
        return _ns(us)
    exact = precise[np.asarray(idx, dtype=np.int64)]
    return np.where(exact == np.iinfo(np.int64).min, 0, exact)


_get_flops, _get_dims, _get_grid = attrgetter("flops"), attrgetter("input_dims"), attrgetter("grid")
_get_direction = attrgetter("direction")


def _float_column(values: list[Any], what: str, ignored: dict[str, int]) -> np.ndarray:
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError, RecursionError):
        pass
    ok = [isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 1e308 for v in values]
    bad = sum(1 for v, good in zip(values, ok) if v is not None and not good)
    if bad:
        ignored[what] = ignored.get(what, 0) + bad
    return np.array([v if good else np.nan for v, good in zip(values, ok)], dtype=np.float64)


def add_chunk(
    cols: Columns, path: str, base: int, events: list[Event], chunk: memoryview,
    *, lenient: bool, skipped: Skipped,
) -> None:
    """Append one decoded chunk's events to ``cols``: complete events as columns, the rest counted or kept.

    A bad complete event raises TraceError, or with ``lenient`` is skipped and counted in ``skipped``.
    """
    phases = list(map(_get["ph"], events))
    x_idx = [i for i, p in enumerate(phases) if p == "X"]
    # exact ns times of every event of the chunk, read from the text when the floats may not hold them
    needs_precise, fractional = _needs_precise(events)
    precise = _precise_ts(chunk, events) if needs_precise else None
    if needs_precise and fractional and precise is None:
        cols.imprecise_ts += len(x_idx)
    if len(x_idx) != len(events):
        _add_other_phases(cols, events, phases, precise, skipped)
    xs = [events[i] for i in x_idx]
    if not xs:
        return
    ts = _floats(list(map(_get["ts"], xs)))  # None -> nan
    dur = _floats(list(map(_get["dur"], xs)))
    with np.errstate(invalid="ignore"):
        bad = np.isnan(ts) | np.isnan(dur) | (dur < 0) | ~(np.abs(ts) < MAX_US) | ~(dur < MAX_US)
    keep = ~bad
    if bad.any():
        first = int(np.argmax(bad))
        if not lenient:
            e = xs[first]
            raise TraceError(path, f"event #{base + x_idx[first]} ({e.name!r}) {_why_bad(ts[first], dur[first])} "
                                   "(use --lenient to skip such events)")
        for j in np.flatnonzero(bad):
            skipped.add(_why_bad(ts[j], dur[j], short=True), f"event #{base + x_idx[j]} ({xs[j].name!r})")
        xs = [e for e, k in zip(xs, keep) if k]
        x_idx = [i for i, k in zip(x_idx, keep) if k]
        ts, dur = ts[keep], dur[keep]
    n = len(xs)
    ts_ns = _ns(ts) if precise is None else precise[np.asarray(x_idx, dtype=np.int64)]
    cols.add("ts", ts_ns)
    cols.add("dur", np.rint(dur * 1000).astype(np.int64))
    cols.add("name", intern(cols.names, list(map(_get["name"], xs))))
    cat_ids = intern(cols.cats, list(map(_get["cat"], xs)))
    cols.add("cat", cat_ids)
    cols.add("thread_key", _thread_keys(cols, xs))
    _add_args(cols, path, args_of(xs), skipped if lenient else None)
    cols.n += n


def _add_args(cols: Columns, path: str, args: list[Any], beyond: Skipped | None) -> None:
    """The ``args`` columns of a chunk's kept complete events (ids, device, stream, flops), their recorded
    directions and their shapes; numbers beyond 64 bits are read as absent and counted in ``beyond``, or refused (None)."""
    n = len(args)
    for key in _ARG_INTS:
        cols.add(key, int_column(map(attrgetter(key), args), n, key, path, cols.ignored_args, skipped=beyond))
    ext = [a.external_id if a.external_id is not None else a.external_id_lc for a in args]
    cols.add("external_id", int_column(ext, n, "External id", path, cols.ignored_args, skipped=beyond))
    cols.add("device", int_column(map(attrgetter("device"), args), n, "device", path, cols.ignored_args,
                                  skipped=beyond))
    stream = [a.stream if a.stream is not None else a.stream_id for a in args]
    cols.add("stream", int_column(stream, n, "stream", path, cols.ignored_args, skipped=beyond))
    cols.add("flops", _float_column(list(map(_get_flops, args)), "flops", cols.ignored_args))
    directions = list(map(_get_direction, args))
    if directions.count(None) < n:  # most traces record none: one count, not a test per event
        pairs = [(cols.n + k, d) for k, d in enumerate(directions) if isinstance(d, str)]
        if pairs:
            cols.directions.append(RowTexts.of(pairs))
    dims, grids = list(map(_get_dims, args)), list(map(_get_grid, args))
    for k in [k for k, (d, g) in enumerate(zip(dims, grids)) if d or g]:
        a = args[k]
        cols.shapes.append((cols.n + k, raw_text(a.input_dims), raw_text(a.input_type),
                            raw_text(a.grid), raw_text(a.block), concrete_text(a.concrete)))


def _why_bad(ts: float, dur: float, *, short: bool = False) -> str:
    """Why a complete event cannot be used; ``short`` is the reason it is counted under."""
    if np.isnan(ts):
        return "no ts" if short else "has no ts"
    if np.isnan(dur):
        return "no dur" if short else "has no dur"
    if dur < 0:
        return "negative dur" if short else f"has a negative dur ({dur:g})"
    if not abs(ts) < MAX_US:
        return "ts out of range" if short else f"has ts {ts:g} µs, out of range (|ts| must be below {MAX_US:.3g} µs)"
    return "dur out of range" if short else f"has dur {dur:g} µs, out of range (must be below {MAX_US:.3g} µs)"


def _add_other_phases(cols: Columns, events: list[Event], phases: list[str], precise: np.ndarray | None,
                      skipped: Skipped) -> None:
    others = [i for i, ph in enumerate(phases) if ph != "X"]
    for i in others:
        ph = phases[i]
        cols.phase_counts[ph] = cols.phase_counts.get(ph, 0) + 1
    for e in (events[i] for i in others if phases[i] == "M"):
        key = thread_key(e.pid, e.tid if e.name and e.name.startswith("thread") else "")
        value = e.args.name if e.args.name is not None else e.args.labels
        if isinstance(value, (str, int, float)) and e.name:
            cols.thread_meta.setdefault(key, {})[e.name] = str(value)
    inst_idx = _in_range(events, [i for i in others if phases[i] in ("i", "I")], skipped, "instant")
    inst = [events[i] for i in inst_idx]
    if inst:
        cols.add("inst_name", intern(cols.names, list(map(_get["name"], inst))))
        cols.add("inst_cat", intern(cols.cats, list(map(_get["cat"], inst))))
        cols.add("inst_ts", _ns_of(events, inst_idx, precise))
        cols.add("inst_thread_key", _thread_keys(cols, inst))
    flow_idx = _in_range(events, [i for i in others if phases[i] in ("s", "f", "t") and events[i].id is not None
                                  and events[i].ts is not None], skipped, "flow")
    flows = [events[i] for i in flow_idx]
    if flows:
        cols.flow_ids.extend(map(str, map(_get["id"], flows)))
        cols.flow_cats.extend(map(_get["cat"], flows))
        cols.add("flow_ph", np.array([FLOW_PHASES.index(e.ph) for e in flows], dtype=np.int8))
        cols.add("flow_ts", _ns_of(events, flow_idx, precise))
        cols.add("flow_thread_key", _thread_keys(cols, flows))


def _in_range(events: list[Event], idx: list[int], skipped: Skipped, what: str) -> list[int]:
    """The indices of events whose ts (if any) converts to 64-bit ns; the others are counted as skipped."""
    def fits(ts: float | None) -> bool:
        return ts is None or abs(ts) < MAX_US

    out = [i for i in idx if fits(events[i].ts)]
    if len(out) < len(idx):
        for i in idx:
            e = events[i]
            if not fits(e.ts):
                skipped.add(f"{what} ts out of range", f"{what} {e.name!r} at ts {e.ts!r}")
    return out


FLOW_PHASES = ("s", "f", "t")


def kinds_of(cols: Columns, name_list: np.ndarray, name_id: np.ndarray, cat_ids: np.ndarray) -> np.ndarray:
    """The kind code (index into schema.KINDS) of each event, from its category and, for MTIA, name."""
    cat_list: list[str | None] = [None] * len(cols.cats)
    for c, i in cols.cats.items():
        cat_list[i] = c
    cat_kind = np.array([KINDS.index(category_kind((c or "").lower())) for c in cat_list] or [0],
                        dtype=np.int8)
    kinds: np.ndarray = cat_kind[cat_ids]
    mtia_cat = np.array([(c or "").lower() == "mtia_ccp_events" for c in cat_list] or [False])
    if mtia_cat.any():
        by_name = np.array([KINDS.index(mtia_device_kind(str(nm))) for nm in name_list], dtype=np.int8)
        sel = mtia_cat[cat_ids]
        kinds[sel] = by_name[name_id[sel]]
    return kinds
