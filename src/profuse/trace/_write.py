"""The table writers: :class:`EventColumns` and the side tables into an in-memory DuckDB.

With the compiled extension the ``events`` table and the biggest side tables (``flows``, ``instants``,
``memory``: :class:`ArrowTable`) go in as Arrow C streams over the arrays (:class:`ArrowFrame`): string
columns as codes into dictionaries, NULLs as validity bitmaps, and DuckDB scans them without the GIL and
without a Python object per value (a 0.5 GB trace's load: 6% less CPU than with the side tables'
lookups below). Otherwise (and for the other side tables) string columns go in as small codes looked up
by DuckDB in lists bound as parameters: no join, no sort, and each distinct string crosses from Python once.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import duckdb
import numpy as np

from . import compiled
from ._columns import FLOW_PHASES, Columns
from ._prepare import Prepared
from .correlate import device_threads, module_scopes
from .event_columns import WRITE_RULES, EventColumns, EventStrings, insert_sql
from .schema import KIND_CODE, events_ddl, events_integer_columns

# Rows per insert. A checkpoint between inserts compresses the rows inserted since the one before, about
# 0.9 s CPU per million events (DuckDB 2.0.1), so a trace of up to about 1.5 GB goes in at once and is
# compressed by the cache write; beyond that the batches (insert_batches) keep DuckDB's uncompressed copy
# to 4 M rows (about 1 GB) beside ours.
INSERT_BATCH = 1 << 22
# Longer string lists go in as strings: DuckDB's lookup in a list bound as a parameter slows with the
# list's length (120k rows of kernel-like names: 29 ms through 100 names, 190 ms through 50,000; as
# strings 14-18 ms either way); through a handful of values (kinds, links) the lookup is the cheaper.
LOOKUP_MAX = 32
# Rows per batch of the Arrow stream (DuckDB's row group): batches are what DuckDB's threads share out.
# Not smaller, though a 156 k-row table then leaves one thread the whole first group: DuckDB's batch
# insert merges partial row groups by copying (bert50 load, 14 interleaved rounds: 79,872 rows a batch,
# median 261 -> 281 ms and 5 k more page faults; 61,440 rows, 294 ms); one batch for all, no change.
# Nor smaller row groups to match (ATTACH ... (ROW_GROUP_SIZE n), batches of n): bert50's events insert
# alone, 9 runs each, median 46-56 ms and 58-72 ms CPU by default; 79,872 rows 75-88 ms, 112 ms CPU.
ARROW_BATCH = 122_880
_ARROW_KIND = {np.dtype(np.int64): "l", np.dtype(np.int32): "i", np.dtype(np.float64): "g"}
_MODULE = re.compile(r"^nn\.Module: (?P<cls>.+?)(?:_\d+)?$")


def write_events(con: duckdb.DuckDBPyConnection, events: EventColumns, strings: EventStrings, *,
                 told: bool = False) -> None:
    """Insert the ``events`` table's rows (``told``: into the table made again with its integer columns'
    compression chosen here, :func:`integer_compression`), in the batches of :func:`insert_batches` (at most
    INSERT_BATCH rows);
    string columns as codes looked up by DuckDB in the (short) lists bound as parameters, or as strings
    (see LOOKUP_MAX).

    Between batches the database is checkpointed (compressed, when it was attached with COMPRESS),
    so DuckDB's copy of a big trace never sits uncompressed beside ours; a small trace goes in at
    once and is compressed by the cache write. Where ``trace`` is the cache file itself
    (build._file_tables), DuckDB compresses the rows into it as they go in.
    """
    arrays, n = events.arrays(), len(events)
    if told:
        con.execute("DROP TABLE events")
        con.execute(events_ddl(integer_compression(arrays)))
    if compiled.enabled() and _write_events_arrow(con, arrays, n, strings):
        return
    params = {k: v for k, v in strings.params().items() if len(v) <= LOOKUP_MAX}
    for f in fields(EventColumns):
        lookup = WRITE_RULES.get(f.name, {}).get("lookup")
        if lookup is not None and lookup not in params:
            arrays[f.name] = np.array(getattr(strings, lookup), dtype=object)[arrays[f.name]]
    insert = insert_sql("_frame", params)
    for lo, hi in insert_batches(n, INSERT_BATCH):
        con.register("_frame", {k: v[lo:hi] for k, v in arrays.items()})
        con.execute(insert, params)
        if hi < n:
            con.execute("CHECKPOINT trace")
    con.unregister("_frame")


# Each integer column's compression, told to DuckDB rather than chosen by it: at a checkpoint DuckDB tries both
# run-length and bit-packing on every value of a column and keeps the smaller, about an eighth of the events
# insert's CPU (1 GB trace: 2.9 -> 2.5 CPU-s, the same 96 MB). The same choice made here from a sample of the
# column (SAMPLE_WINDOWS runs of SAMPLE_ROWS rows, spread over it), by the sizes of the two encodings. Only where
# the load compresses the events (build.COMPRESS_MIN_EVENTS and more): a smaller trace's tables are compressed
# behind the load, as they are copied to the cache, where DuckDB's own choice costs the load nothing and the
# sample would (9 ms of a 123 k-event trace's 0.17 s load).
SAMPLE_WINDOWS = 32
SAMPLE_ROWS = 2048  # DuckDB's bit-packing group: one width per group


def integer_compression(arrays: dict[str, np.ndarray]) -> dict[str, str]:
    """``rle`` or ``bitpacking`` per integer column of the ``events`` table (:class:`EventColumns` arrays), whichever
    stores a sample of it in fewer bytes (:func:`compressed_bytes`; a tie, bit-packing)."""
    out = {}
    for name, size in events_integer_columns().items():
        null = WRITE_RULES.get(name, {}).get("null")
        rle, packed = compressed_bytes(arrays[name], size, null)
        out[name] = "rle" if rle < packed else "bitpacking"
    return out


def compressed_bytes(values: np.ndarray, size: int, null: int | None) -> tuple[int, int]:
    """Bytes of a sample of ``values`` (``size`` bytes each as stored; ``null``: the value standing for NULL)
    run-length encoded (a value and a 2-byte count per run; NULLs extend a run, as DuckDB's do) and bit-packed
    (per window of SAMPLE_ROWS, every row as wide as the bits of the range of its values, or, in a window without
    NULLs, of their steps' range where that is less: DuckDB's delta mode)."""
    n = values.size
    step = max(SAMPLE_ROWS, -(-n // SAMPLE_WINDOWS))
    rle = packed = 0
    for lo in range(0, n, step):
        window = values[lo:lo + SAMPLE_ROWS].astype(np.int64)
        rows = window.size   # bit-packed, a NULL takes a slot as wide as the rest
        if null is not None:
            window = window[window != null]
        if window.size == 0:
            rle += size + 2
            continue
        rle += (1 + int(np.count_nonzero(window[1:] != window[:-1]))) * (size + 2)
        width = (int(window.max()) - int(window.min())).bit_length()
        if window.size == rows > 1:   # steps between NULLs' slots are not the values' own: no delta mode there
            steps = np.diff(window)
            width = min(width, (int(steps.max()) - int(steps.min())).bit_length())
        packed += -(-rows * width // 8) + 16
    return rle, packed


def insert_batches(n: int, most: int) -> list[tuple[int, int]]:
    """The row ranges ``[lo, hi)`` of the events' inserts: all at once up to ``most`` rows; beyond, the last
    insert ``most`` rows, and the rows before it in as few inserts as fit in ``most``, of one size (to a row).

    Each checkpoint between inserts compresses what was inserted since the one before (none recompresses
    what is already compressed: DuckDB 2.0.1, a 3.1 M-event table in 1 M-row inserts, the same cost per
    insert the second time through), and the last insert stays uncompressed until the cache write. So the
    load compresses ``n - most`` rows: as few as DuckDB's uncompressed copy of at most ``most`` rows allows,
    in as many inserts as before."""
    if n <= most:
        return [(0, n)]
    head = n - most
    parts = -(-head // most)
    starts = [head * i // parts for i in range(parts + 1)]
    return list(zip(starts, [*starts[1:], n]))


def checkpoint_before_events(con: duckdb.DuckDBPyConnection, *, events: int) -> None:
    """Compress the tables written so far now, where the ``events`` table will go in checkpointed batches
    (more than INSERT_BATCH events): the first checkpoint between them would compress these too, and here
    (the writer thread, while the events are correlated) it is off the load's longest path."""
    if events > INSERT_BATCH:
        con.execute("CHECKPOINT trace")


class ArrowFrame:
    """Columns as an Arrow C stream (the Arrow PyCapsule interface) made by the compiled extension:
    ``columns`` as :func:`profuse.trace._accel.arrow_stream` takes them. Each call of
    ``__arrow_c_stream__`` gives a fresh stream over the same buffers."""

    def __init__(self, columns: list[tuple[Any, ...]], length: int) -> None:
        self._columns, self._length = columns, length

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return compiled.accel.arrow_stream(self._columns, self._length, ARROW_BATCH)


Dictionary = tuple[np.ndarray, bytes, np.ndarray]  # int32 offsets, the UTF-8 bytes, whether each entry is known


def encode_dictionary(entries: list[Any]) -> Dictionary | None:
    """``entries`` (str, or None for NULL) as an Arrow utf8 dictionary; None when an entry is neither,
    is not valid UTF-8, or the entries pass 2 GB (int32 offsets)."""
    try:
        encoded = [b"" if e is None else e.encode() for e in entries]
    except (AttributeError, UnicodeEncodeError):
        return None
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    if offsets[-1] >= 2**31:
        return None
    return offsets.astype(np.int32), b"".join(encoded), np.array([e is not None for e in entries], dtype=bool)


def decimal_dictionary(values: np.ndarray) -> Dictionary | None:
    """Non-negative int64 ``values`` as the utf8 dictionary of their decimal text (what DuckDB's
    ``CAST(... AS VARCHAR)`` writes), made without a Python object per value: by the compiled
    extension where it is on (64 k flow ids: 13 ms -> 1 ms), else by numpy. None past 2 GB of text."""
    if compiled.enabled():
        made = compiled.accel.decimal_text(np.ascontiguousarray(values, dtype=np.int64))
        if made is None:
            return None
        return np.frombuffer(made[0], dtype=np.int32), made[1], np.ones(len(values), dtype=bool)
    return decimal_dictionary_numpy(values)


def decimal_dictionary_numpy(values: np.ndarray) -> Dictionary | None:
    """:func:`decimal_dictionary` by numpy alone."""
    n = len(values)
    width = len(str(int(values.max()))) if n else 1
    grid = np.frombuffer(values.astype(f"S{width}").tobytes(), dtype=np.uint8).reshape(n, width)
    lengths = (grid != 0).sum(axis=1)  # the digits, left-aligned, NUL-padded; 0 is "0"
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:
        return None
    data = grid[np.arange(width) < lengths[:, None]].tobytes()
    return offsets.astype(np.int32), data, np.ones(n, dtype=bool)


class ArrowTable:
    """The columns of one insert as an Arrow stream (see :class:`ArrowFrame`), added in table order;
    :meth:`insert` writes them, or answers False (nothing written) where the compiled extension is off,
    a text column cannot go so, or this DuckDB cannot scan the stream: the caller then writes the rows
    its own way."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.columns: list[tuple[Any, ...]] | None = [] if compiled.enabled() else None

    def number(self, name: str, values: np.ndarray, *, null: int | None = None,
               valid: np.ndarray | None = None) -> ArrowTable:
        """An int64, int32 or float64 column as it is (other integers as int64); NULL where it holds
        ``null``, or where ``valid`` is false."""
        if self.columns is not None:
            values = np.ascontiguousarray(values)
            kind = _ARROW_KIND.get(values.dtype)
            if kind is None:
                values, kind = values.astype(np.int64), "l"
            if null is not None:
                valid = values != null if valid is None else valid & (values != null)
            self.columns.append((name, kind, values, _bitmap(valid), None, None))
        return self

    def text(self, name: str, codes: np.ndarray, dictionary: Dictionary | None) -> ArrowTable:
        """A string column: ``codes`` (each an entry of ``dictionary``), the rows whose entry is None NULL."""
        if self.columns is not None:
            column = dictionary_column(name, codes, dictionary)
            self.columns = None if column is None else [*self.columns, column]
        return self

    def insert(self, con: duckdb.DuckDBPyConnection, table: str, select: str = "*") -> bool:
        """``INSERT INTO table SELECT select FROM`` the stream; False where it cannot go so."""
        if self.columns is None:
            return False
        return insert_arrow(con, table, self.columns, self.length, select)


def dictionary_column(name: str, codes: np.ndarray, dictionary: Dictionary | None) -> tuple[Any, ...] | None:
    """An :func:`profuse.trace._accel.arrow_stream` column of kind 'd': ``codes`` (integers, each one an
    entry of the dictionary) into it, the rows whose entry is None NULL; None without a dictionary or
    integer codes."""
    if dictionary is None or codes.dtype.kind not in "iu":
        return None
    offsets, data, known = dictionary
    valid = None if known.all() else known[codes]
    return name, "d", np.ascontiguousarray(codes, dtype=np.int32), _bitmap(valid), offsets, data


def insert_arrow(con: duckdb.DuckDBPyConnection, table: str, columns: list[tuple[Any, ...]], length: int,
                 select: str = "*") -> bool:
    """``INSERT INTO table SELECT select FROM`` the columns as an Arrow stream; False (nothing written)
    where this DuckDB cannot scan the stream."""
    try:
        con.register("_arrow", ArrowFrame(columns, length))
    except duckdb.Error:  # a DuckDB that cannot scan the stream: the caller's other path
        return False
    try:
        con.execute(f"INSERT INTO {table} SELECT {select} FROM _arrow")
    finally:
        con.unregister("_arrow")
    return True


def arrow_columns(arrays: dict[str, np.ndarray], strings: EventStrings) -> list[tuple[Any, ...]] | None:
    """:class:`EventColumns` arrays as :func:`profuse.trace._accel.arrow_stream` columns: integer and
    float columns as they are, with a validity bitmap where WRITE_RULES has a null (a sentinel, or
    NaN); coded string columns as int32 codes into their list, UTF-8 encoded (a None entry: the rows
    coding it are NULL). None when a column cannot go so (an unexpected dtype, a string that is not
    valid UTF-8): the caller then writes the frame as numpy arrays."""
    lists = strings.params()
    out: list[tuple[Any, ...]] = []
    for f in fields(EventColumns):
        values, rule = np.ascontiguousarray(arrays[f.name]), WRITE_RULES.get(f.name, {})
        lookup = rule.get("lookup")
        if lookup is not None:
            column = dictionary_column(f.name, values, encode_dictionary(lists[lookup]))
            if column is None:
                return None
            out.append(column)
            continue
        kind = _ARROW_KIND.get(values.dtype)
        if kind is None:
            return None
        valid = None
        if "null" in rule:
            valid = values != rule["null"]
        elif rule.get("nan_null"):
            valid = ~np.isnan(values)
        out.append((f.name, kind, values, _bitmap(valid), None, None))
    return out


def _bitmap(valid: np.ndarray | None) -> np.ndarray | None:
    """An Arrow validity bitmap (bit i of byte i // 8 set: row i is not NULL), or None when all are."""
    if valid is None or valid.all():
        return None
    return np.packbits(valid, bitorder="little")


def _write_events_arrow(con: duckdb.DuckDBPyConnection, arrays: dict[str, np.ndarray], n: int,
                        strings: EventStrings) -> bool:
    """The ``events`` table from an Arrow stream (see :class:`ArrowFrame`), in the inserts of
    :func:`insert_batches` with a checkpoint between them as in :func:`write_events`; False (nothing written) when the
    columns cannot go so or this DuckDB cannot scan the stream."""
    for lo, hi in insert_batches(n, INSERT_BATCH):
        part = {k: v[lo:hi] for k, v in arrays.items()}
        columns = arrow_columns(part, strings)
        if columns is None:
            if lo:  # rows are in already: the numpy path would insert them again
                raise RuntimeError("the events' first Arrow batch was built but not a later one")
            return False
        if not insert_arrow(con, "events", columns, len(part["id"])):
            if lo:
                raise RuntimeError("DuckDB scanned the events' first Arrow stream but not a later one")
            return False
        if hi < n:
            con.execute("CHECKPOINT trace")
    return True


def write_shapes(con: duckdb.DuckDBPyConnection, *, cols: Columns) -> None:
    """The ``shapes`` table: it needs only the decoded columns (not even their preparation)."""
    _write_shapes(con, cols)


def write_directions(con: duckdb.DuckDBPyConnection, *, cols: Columns) -> None:
    """The ``directions`` table (each event's ``args.direction`` where it is a string): it needs only the
    decoded columns. Few events carry one (MTIA's DMA requests), most traces none."""
    if not cols.directions:
        return
    con.register("_directions", {"id": np.concatenate([d.rows for d in cols.directions]),
                                 "direction": np.concatenate([d.values() for d in cols.directions])})
    con.execute("INSERT INTO directions SELECT id, direction FROM _directions")
    con.unregister("_directions")


def write_flows(con: duckdb.DuckDBPyConnection, *, prepared: Prepared) -> None:
    """The ``flows`` table (from the prepared events)."""
    _write_flows(con, prepared)


def write_instants(con: duckdb.DuckDBPyConnection, *, prepared: Prepared) -> None:
    """The ``instants`` table (from the prepared events)."""
    if prepared.instants:
        _write_instants(con, prepared)


def write_correlated_tables(con: duckdb.DuckDBPyConnection, *, cols: Columns, prepared: Prepared,
                            events: EventColumns, nested: tuple[np.ndarray, np.ndarray]) -> None:
    """The side tables that need the correlated events: ``threads``, ``scopes`` and ``nested_calls`` (``nested``:
    correlate.nested_in_own_name's ids and the calls around them)."""
    _write_threads(con, cols, prepared, events)
    _write_scopes(con, prepared, events)
    if nested[0].size:
        con.register("_nested", {"id": nested[0], "around": nested[1]})
        con.execute("INSERT INTO nested_calls SELECT id, around FROM _nested")
        con.unregister("_nested")


def _write_shapes(con: duckdb.DuckDBPyConnection, cols: Columns) -> None:
    if cols.shape_columns is None or cols.shapes:
        rows = [*cols.shape_columns.tuples(), *cols.shapes] if cols.shape_columns is not None else cols.shapes
        insert_rows(con, "shapes", rows, 6)
        return
    shapes = cols.shape_columns
    if not len(shapes.rows):
        return
    table = ArrowTable(len(shapes.rows)).number("id", shapes.rows)
    texts = encode_dictionary([*shapes.texts, None])  # code -1 picks the None at the end: NULL
    for j, name in enumerate(("dims", "types", "grid", "block", "concrete")):
        table.text(name, np.where(shapes.codes[:, j] < 0, len(shapes.texts), shapes.codes[:, j]), texts)
    if table.insert(con, "shapes"):
        return
    frame = dict(zip(("id", "dims", "types", "grid", "block", "concrete"), [shapes.rows, *shapes.text_columns()]))
    con.register("_shapes", frame)
    con.execute("INSERT INTO shapes SELECT * FROM _shapes")
    con.unregister("_shapes")


def _write_threads(con: duckdb.DuckDBPyConnection, cols: Columns, prepared: Prepared, events: EventColumns) -> None:
    keys = prepared.threads.keys
    on_device = device_threads(events.kind, events.thread, len(keys), prepared.events.pid_of_thread)
    rows = []
    for i, (pid, tid) in enumerate(keys):
        pm = cols.thread_meta.get((pid, ""), {})
        tm = cols.thread_meta.get((pid, tid), {})
        rows.append((i, pid, tid, pm.get("process_name"), tm.get("thread_name"), pm.get("process_labels"),
                     bool(on_device[i])))
    insert_rows(con, "threads", rows, 7)


def _write_scopes(con: duckdb.DuckDBPyConnection, prepared: Prepared, events: EventColumns) -> None:
    """One row per nn.Module scope and user annotation; a scope's parent is the scope enclosing it."""
    is_module = module_scopes(prepared.events)
    scope_ids = np.flatnonzero(is_module | (events.kind == KIND_CODE["annotation"]))
    if not scope_ids.size:
        return
    name, module = events.name[scope_ids], is_module[scope_ids]
    # the names the scopes use, once each (thousands of scopes share a few dozen), and each one's module
    # class after them: a module scope's name is its label's class
    local, labels = used_values(name, prepared.events.names)
    named = labels + [module_class(s) if isinstance(s, str) else s for s in labels]
    name_code = np.where(module, local + len(labels), local)
    table = (ArrowTable(len(scope_ids)).number("id", scope_ids.astype(np.int64))
             .text("kind", module.astype(np.int64) ^ 1, encode_dictionary(["module", "annotation"]))
             .text("name", name_code, encode_dictionary(named))
             .text("label", local, encode_dictionary(labels))
             .number("parent", events.scope[scope_ids], null=-1).number("ts", events.ts[scope_ids])
             .number("dur", events.dur[scope_ids]).number("thread", events.thread[scope_ids].astype(np.int32)))
    if table.insert(con, "scopes"):
        return
    classes = np.array(named, dtype=object)
    con.register("_scopes", {
        "id": scope_ids.astype(np.int64), "module": module, "name": classes[name_code],
        "label": classes[local], "parent": events.scope[scope_ids], "ts": events.ts[scope_ids],
        "dur": events.dur[scope_ids], "thread": events.thread[scope_ids].astype(np.int32)})
    con.execute("INSERT INTO scopes SELECT id, CASE WHEN module THEN 'module' ELSE 'annotation' END, name, label, "
                "NULLIF(parent, -1), ts, dur, thread FROM _scopes")
    con.unregister("_scopes")


def _write_instants(con: duckdb.DuckDBPyConnection, prepared: Prepared) -> None:
    inst, strings = prepared.instants, prepared.strings
    if compiled.enabled():
        table = ArrowTable(len(inst["ts"]))
        for col, codes, values in (("name", inst["name"], strings.names), ("cat", inst["cat"], strings.cats),
                                   ("pid", inst["thread"], strings.pids), ("tid", inst["thread"], strings.tids)):
            local, used = used_values(codes, values)  # the handful of a long list the instants use
            table.text(col, local, encode_dictionary(used))
            if col == "cat":
                table.number("ts", inst["ts"])
        if table.insert(con, "instants"):
            return
    frame: dict[str, np.ndarray] = {"ts": inst["ts"]}
    params: dict[str, list[Any]] = {}
    exprs = []
    for col, codes, values in (("name", inst["name"], strings.names), ("cat", inst["cat"], strings.cats),
                               ("pid", inst["thread"], strings.pids), ("tid", inst["thread"], strings.tids)):
        if len(values) > LOOKUP_MAX:  # a long list, of which the instants may use a handful
            codes, values = used_values(codes, values)
        if len(values) <= LOOKUP_MAX:
            frame[col], params[col] = codes, values
            exprs.append(f"list_extract(${col}::VARCHAR[], {col} + 1)")
        else:
            frame[col] = np.array(values, dtype=object)[codes]
            exprs.append(col)
    con.register("_inst", frame)
    con.execute(f"INSERT INTO instants SELECT {exprs[0]}, {exprs[1]}, ts, {exprs[2]}, {exprs[3]} FROM _inst", params)
    con.unregister("_inst")


def used_values(codes: np.ndarray, values: Sequence[Any] | np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """Codes into ``values`` -> codes into the values they use, and those values (in code order): a
    table over the codes, not np.unique's sort (560 k instants at 1 GB: ~45 ms a column)."""
    if codes.size and int(codes.min()) < 0:  # not codes into values: as np.unique numbers them
        used, local = np.unique(codes, return_inverse=True)
        return local.reshape(-1), [values[i] for i in used.tolist()]
    used = np.flatnonzero(np.bincount(codes, minlength=len(values)))
    renumber = np.zeros(len(values), dtype=np.int64)
    renumber[used] = np.arange(len(used))
    return renumber[codes], [values[i] for i in used.tolist()]


def _write_flows(con: duckdb.DuckDBPyConnection, prepared: Prepared) -> None:
    """Flow events; category and phase go in as codes into short lists (ids are too many for a list:
    looking them up was measured 4x slower than handing DuckDB the strings)."""
    flows = prepared.events.flows
    if not flows.ids.size:
        return
    numeric = flows.id_text.dtype != object  # plain decimal ids (see _prepare.flow_codes): text made by DuckDB
    if compiled.enabled():
        ids = decimal_dictionary(flows.id_text) if numeric else encode_dictionary(flows.id_text.tolist())
        if (ArrowTable(len(flows.ts)).text("id", flows.ids, ids)
                .text("cat", prepared.flow_cat, encode_dictionary(prepared.flow_cat_text))
                .text("ph", flows.ph, encode_dictionary(list(FLOW_PHASES)))
                .number("ts", flows.ts).number("thread", flows.thread.astype(np.int32)).insert(con, "flows")):
            return
    con.register("_flows", {"id": flows.id_text[flows.ids], "cat": prepared.flow_cat, "ph": flows.ph,
                            "ts": flows.ts, "thread": flows.thread.astype(np.int32)})
    con.execute(f"INSERT INTO flows SELECT {'CAST(id AS VARCHAR)' if numeric else 'id'}, "
                "list_extract($cats::VARCHAR[], cat + 1), "
                "list_extract($phases::VARCHAR[], ph + 1), ts, thread FROM _flows",
                {"cats": prepared.flow_cat_text, "phases": list(FLOW_PHASES)})
    con.unregister("_flows")


def module_class(label: str) -> str:
    """'nn.Module: LlamaRMSNorm_0' -> 'LlamaRMSNorm'."""
    m = _MODULE.match(label)
    return m.group("cls") if m else label


def write_meta(con: duckdb.DuckDBPyConnection, meta: dict[str, Any]) -> None:
    """The ``meta`` table: one row per key, its value as JSON."""
    insert_rows(con, "meta", [(k, json.dumps(v)) for k, v in meta.items()], 2)


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: list[tuple[Any, ...]], width: int) -> None:
    """Insert Python rows column-wise (DuckDB's executemany is row-at-a-time and slow)."""
    if not rows:
        return
    columns = list(zip(*rows))
    frame = {f"c{i}": np.array(columns[i], dtype=object) for i in range(width)}
    con.register("_rows", frame)
    con.execute(f"INSERT INTO {table} SELECT * FROM _rows")
    con.unregister("_rows")
