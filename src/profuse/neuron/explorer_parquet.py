"""A ``neuron-explorer`` Parquet folder as profuse's tables, so report, advice, sql and explore work on it.

Built from the published schema (profile schema 7.4.0, ``profile-schema-reference.rst``) and NOT yet
checked on a real capture. Rows become ``events``:

* ``SystemProfileEvents``: ``framework`` rows are ops (``cpu_op``; ``runtime`` when their
  ``extra_attributes_json`` category is a PrivateUse1 runtime/driver one), ``neuron_rt`` rows are
  runtime calls, ``neuron_hw`` rows are ``device_other`` (shown, never counted as device time, which
  the instructions below already carry).
* ``Instruction``: one ``kernel`` row per executed instruction, named by its opcode, stream = engine.
* ``DmaPacket``: one ``memcpy`` row per packet, with its transfer bytes.

Links: a device row's launch is the shortest ``neuron_rt`` call whose interval holds its start
(``link = 'time_window'``); that call's op is the ``framework`` row sharing one of its ``flow_id``s,
else the op enclosing it on its thread. Everything not linked is counted with a reason.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from ..errors import TraceError, UserError
from ..trace.correlate import attribute, nearest_ancestor, nested_in_own_name_of, nesting
from ..trace.event_columns import kind_mask
from ..trace.schema import DDL, KIND_CODE, SCHEMA_VERSION, TABLE_KINDS
from ..trace.trace import Trace

SCHEMA_BUILT_FROM = "7.4.0"
# table -> columns the schema marks required (those profuse reads)
REQUIRED = {
    "SystemProfileEvents": ("id", "name", "start_ts", "duration_ns", "trace_event_source", "process_id", "thread_id"),
    "Instruction": ("id", "start_ts", "duration_ns", "engine", "opcode"),
    "DmaPacket": ("id", "start_ts", "duration_ns", "transfer_bytes"),
}
OPTIONAL = {
    "SystemProfileEvents": ("nc_idx", "flow_id", "extra_attributes_json"),
    "Instruction": ("pcore_idx", "hlo_name", "layer"),
    "DmaPacket": ("pcore_idx", "queue_name", "queue_idx"),
}
# columns read as integers (the rest are labels, read as strings)
INTEGER = {
    "SystemProfileEvents": ("start_ts", "duration_ns", "nc_idx"),
    "Instruction": ("start_ts", "duration_ns", "pcore_idx"),
    "DmaPacket": ("start_ts", "duration_ns", "transfer_bytes", "pcore_idx", "queue_idx"),
}
INTEGER_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                 "UBIGINT", "UHUGEINT"}
RUNTIME_CATEGORIES = ("privateuse1_runtime", "privateuse1_driver")
NOTE = "built from the published neuron-explorer schema 7.4.0; not yet checked on a real capture"
MAX_ROWS_ENV = "PROFUSE_MAX_PARQUET_ROWS"
MAX_ROWS = 2_000_000  # rows of the three tables together: each costs about 1 KB while the tables are built


def is_explorer_folder(folder: Path) -> bool:
    """A folder holding neuron-explorer's tables (and no Kineto trace, which would be read instead)."""
    return folder.is_dir() and any((folder / f"{t}.parquet").is_file() for t in REQUIRED)


def load_folder(folder: Path) -> Trace:
    """Build the tables in memory (no cache: DuckDB reads Parquet about as fast as a cache)."""
    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false; ATTACH ':memory:' AS trace; USE trace")
        con.execute(DDL)
        _build(con, folder)
    except BaseException:
        con.close()
        raise
    return Trace(folder, con, from_cache=False)


_GLOB = re.compile(r"([*?\[])")


def _source(con: duckdb.DuckDBPyConnection, path: Path) -> str:
    """``path`` as read_parquet's argument. DuckDB expands ``* ? [`` in it as a glob (a folder named
    ``gl*`` would also read ``glX``), so those are escaped as ``[*]`` and the escape is checked to name
    exactly this one file; where it does not, the path is refused."""
    plain = os.path.abspath(path)  # never a leading ~ (DuckDB expands it to the home folder)
    if not _GLOB.search(plain):
        return plain
    escaped = _GLOB.sub(r"[\1]", plain)
    try:
        hits = [r[0] for r in con.execute("SELECT file FROM glob(?)", [escaped]).fetchall()]
    except duckdb.Error:
        hits = []
    if hits != [plain]:
        raise TraceError(path, "has * ? or [ in its path, which DuckDB's Parquet reader would expand as a "
                               "pattern: rename the folder")
    return escaped


def _columns(con: duckdb.DuckDBPyConnection, path: Path) -> dict[str, str]:
    """``{column: DuckDB type}`` of a Parquet file."""
    try:
        return {r[0]: str(r[1]) for r in con.execute("DESCRIBE SELECT * FROM read_parquet(?)",
                                                     [_source(con, path)]).fetchall()}
    except duckdb.Error as err:
        raise TraceError(path, f"not a readable Parquet file ({str(err).strip().splitlines()[0]})") from None


def _read(con: duckdb.DuckDBPyConnection, folder: Path, table: str) -> dict[str, np.ndarray] | None:
    """The columns profuse uses from one table, NULL-filled for absent optional ones; None if no file."""
    path = folder / f"{table}.parquet"
    if not path.is_file():
        return None
    have = _columns(con, path)
    missing = [c for c in REQUIRED[table] if c not in have]
    if missing:
        raise TraceError(path, f"has no column {', '.join(map(repr, missing))}: schema {SCHEMA_BUILT_FROM} "
                               f"requires it in {table}")
    _integer_columns(con, path, table, have)
    _no_nulls(con, path, table)
    cols = [*REQUIRED[table], *OPTIONAL[table]]
    select = ", ".join(f'"{c}"' if c in have else f'NULL AS "{c}"' for c in cols)
    try:
        data = con.execute(f"SELECT {select} FROM read_parquet(?) ORDER BY start_ts, id",
                           [_source(con, path)]).fetchnumpy()
    except duckdb.Error as err:
        raise TraceError(path, f"cannot be read ({str(err).strip().splitlines()[0]})") from None
    return {k: np.asarray(v) for k, v in data.items()}


def _integer_columns(con: duckdb.DuckDBPyConnection, path: Path, table: str, have: dict[str, str]) -> None:
    """The columns read as integers must be integers (schema 7.4.0 has int64 or int32) that fit: a
    string, float or list column would otherwise be coerced into invented values, and a time past
    2^62 ns would overflow the sums the report makes. One line naming the column, else nothing."""
    cols = [c for c in INTEGER[table] if c in have]
    for c in cols:
        if have[c] not in INTEGER_TYPES:
            raise TraceError(path, f"column {c!r} is {have[c]}, not an integer: schema {SCHEMA_BUILT_FROM} "
                                   f"has it as an integer in {table}")
    limit = 1 << 62
    checks = [f'count(*) FILTER (WHERE abs(CAST("{c}" AS HUGEINT)) > {limit})' for c in cols]
    checks.append(f"count(*) FILTER (WHERE CAST(start_ts AS HUGEINT) + greatest(CAST(duration_ns AS HUGEINT), 0) "
                  f"> {limit})")
    try:
        counts = con.execute(f"SELECT {', '.join(checks)} FROM read_parquet(?)",
                             [_source(con, path)]).fetchall()[0]
    except duckdb.Error as err:
        raise TraceError(path, f"cannot be read ({str(err).strip().splitlines()[0]})") from None
    for c, k in zip([*cols, "start_ts + duration_ns"], counts):
        if k:
            raise TraceError(path, f"{k:,} row(s) have {c} beyond ±2^62 (about 146 years in ns): not a time or "
                                   "size profuse can add up")


def _no_nulls(con: duckdb.DuckDBPyConnection, path: Path, table: str) -> None:
    """A required column with NULLs is bad input: say which and how many, rather than invent values."""
    req = REQUIRED[table]
    nulls = ", ".join(f'count(*) - count("{c}")' for c in req)  # column names are ours, not the file's
    try:
        counts = con.execute(f"SELECT {nulls} FROM read_parquet(?)", [_source(con, path)]).fetchall()[0]
    except duckdb.Error as err:
        raise TraceError(path, f"cannot be read ({str(err).strip().splitlines()[0]})") from None
    bad = [(c, int(k)) for c, k in zip(req, counts) if k]
    if bad:
        c, k = bad[0]
        raise TraceError(path, f"{k:,} row(s) have no {c}, which schema {SCHEMA_BUILT_FROM} requires in {table}")


def _ints(a: np.ndarray, default: int = -1) -> np.ndarray:
    """Integers with NULLs as ``default``."""
    if np.ma.isMaskedArray(a):
        mask = np.ma.getmaskarray(a)
        if mask.all():
            return np.full(len(a), default, dtype=np.int64)
        if a.dtype.kind in "iu":
            return np.ma.filled(a, default).astype(np.int64)
        a = np.ma.filled(a.astype(object), None)
    if a.dtype.kind in "iu":
        return a.astype(np.int64)
    return np.array([int(v) if isinstance(v, (int, np.integer)) or (isinstance(v, float) and v == v) else default
                     for v in a.tolist()], dtype=np.int64)


def _labels(prefix: str, values: np.ndarray) -> np.ndarray:
    """``prefix + str(v)`` per row, formatted once per distinct value."""
    uniq, inverse = np.unique(values, return_inverse=True)
    return np.array([f"{prefix}{u}" for u in uniq.tolist()] or [""], dtype=object)[inverse.reshape(-1)]


def _strs(a: np.ndarray) -> np.ndarray:
    vals = np.ma.filled(a.astype(object), None).tolist()
    return np.array([None if v is None else str(v) for v in vals], dtype=object)


def _objects(a: np.ndarray) -> np.ndarray:
    return np.ma.filled(a.astype(object), None)


def _category(extra: Any) -> str | None:
    if not isinstance(extra, str):
        return None
    try:
        doc = json.loads(extra)
    except (ValueError, RecursionError):  # not JSON, or nested past Python's recursion limit
        return None
    cat = doc.get("cat", doc.get("category")) if isinstance(doc, dict) else None
    return cat if isinstance(cat, str) else None


class _Rows:
    """Column lists of the events table being built, one append per source table."""

    def __init__(self) -> None:
        self.cols: dict[str, list[np.ndarray]] = {k: [] for k in (
            "kind", "cat", "name", "ts", "dur", "pid", "tid", "device", "stream", "bytes", "flows")}

    def add(self, **cols: np.ndarray) -> None:
        n = len(cols["ts"])
        for k in self.cols:
            self.cols[k].append(cols.get(k, np.full(n, None if k in ("flows", "bytes") else -1, dtype=object)))

    def done(self) -> dict[str, np.ndarray]:
        return {k: (np.concatenate(v) if v else np.empty(0, dtype=object)) for k, v in self.cols.items()}


def max_rows() -> int:
    """The most rows a folder's tables may hold together: ``$PROFUSE_MAX_PARQUET_ROWS``, else MAX_ROWS."""
    raw = os.environ.get(MAX_ROWS_ENV, "").strip()
    try:
        value = int(raw) if raw else MAX_ROWS
    except ValueError:
        value = 0
    if value <= 0:
        raise UserError(f"{MAX_ROWS_ENV}={raw!r}: expected a positive whole number of rows")
    return value


def _check_rows(con: duckdb.DuckDBPyConnection, folder: Path) -> None:
    """Refuse a folder whose tables hold more than :func:`max_rows` rows together, from the files' own row
    counts (their metadata), before any row is read."""
    counts = {}
    for table in REQUIRED:
        path = folder / f"{table}.parquet"
        if path.is_file():
            try:
                row = con.execute("SELECT count(*) FROM read_parquet(?)", [_source(con, path)]).fetchone()
            except duckdb.Error as err:
                raise TraceError(path, f"not a readable Parquet file ({str(err).strip().splitlines()[0]})") from None
            counts[path] = int(row[0]) if row else 0
    limit = max_rows()
    if sum(counts.values()) > limit:
        biggest = max(counts, key=lambda k: counts[k])
        raise TraceError(biggest, f"{counts[biggest]:,} rows ({sum(counts.values()):,} in the folder's tables): "
                                  f"more than the {limit:,} profuse reads ({MAX_ROWS_ENV} raises it; about 1 KB "
                                  "of memory each)")


def _build(con: duckdb.DuckDBPyConnection, folder: Path) -> None:
    _check_rows(con, folder)
    spe, instr, dma = (_read(con, folder, t) for t in REQUIRED)
    rows = _Rows()
    if spe is not None:
        source = _strs(spe["trace_event_source"])
        cats = [_category(x) for x in _strs(spe["extra_attributes_json"])]
        kind = np.array([("runtime" if c in RUNTIME_CATEGORIES else "cpu_op") if s == "framework" else
                         "runtime" if s == "neuron_rt" else "device_other" for s, c in zip(source, cats)], dtype=object)
        hw = kind == "device_other"
        nc = _ints(spe["nc_idx"], 0)
        rows.add(kind=kind, cat=np.array([c or s for s, c in zip(source, cats)], dtype=object),
                 name=_strs(spe["name"]), ts=_ints(spe["start_ts"]), dur=_ints(spe["duration_ns"]),
                 pid=np.where(hw, _labels("nc", nc), _strs(spe["process_id"])),
                 tid=np.where(hw, "neuron_hw", _strs(spe["thread_id"])), device=np.where(hw, nc, -1),
                 stream=np.where(hw, 0, -1), flows=_objects(spe["flow_id"]))
    if instr is not None:
        engine = _strs(instr["engine"])  # required, so never NULL
        _, stream = np.unique(engine.astype(str), return_inverse=True)
        core = _ints(instr["pcore_idx"], 0)
        n = len(engine)
        rows.add(kind=np.full(n, "kernel", dtype=object), cat=np.full(n, "instruction", dtype=object),
                 name=_strs(instr["opcode"]), ts=_ints(instr["start_ts"]), dur=_ints(instr["duration_ns"]),
                 pid=_labels("nc", core), tid=engine, device=core, stream=stream.reshape(-1).astype(np.int64))
    if dma is not None:
        core = _ints(dma["pcore_idx"], 0)
        queue = _strs(dma["queue_name"])
        n = len(queue)
        rows.add(kind=np.full(n, "memcpy", dtype=object), cat=np.full(n, "dma", dtype=object),
                 name=np.array([q or "dma" for q in queue], dtype=object), ts=_ints(dma["start_ts"]),
                 dur=_ints(dma["duration_ns"]), pid=_labels("nc", core),
                 tid=np.array([f"dma {q or '?'}" for q in queue], dtype=object), device=core,
                 stream=1000 + _ints(dma["queue_idx"], 0), bytes=_ints(dma["transfer_bytes"]))
    _write(con, folder, rows.done())


def _write(con: duckdb.DuckDBPyConnection, folder: Path, r: dict[str, np.ndarray]) -> None:
    n = len(r["ts"])
    kind = np.array([KIND_CODE[k] for k in r["kind"]], dtype=np.int64) if n else np.empty(0, dtype=np.int64)
    ts, dur = r["ts"].astype(np.int64), np.maximum(r["dur"].astype(np.int64), 0)
    pid_s, tid_s = r["pid"].astype(str), r["tid"].astype(str)
    joined, thread = np.unique(np.char.add(np.char.add(pid_s, "\x1f"), tid_s), return_inverse=True)
    thread = thread.reshape(-1).astype(np.int64)
    uniq = [tuple(k.split("\x1f", 1)) for k in joined.tolist()]
    is_device = np.isin(kind, [KIND_CODE["kernel"], KIND_CODE["memcpy"], KIND_CODE["device_other"]])
    host = ~is_device
    parent, depth = nesting(thread, ts, dur, host)
    op_of_host = nearest_ancestor(parent, kind == KIND_CODE["cpu_op"], include_self=True)
    runtime = np.flatnonzero(kind == KIND_CODE["runtime"])
    rt_op = _runtime_ops(r["flows"], kind, runtime, op_of_host)
    launch, op, how, why = _link_device(con, kind, ts, dur, runtime, rt_op)
    op = np.where(host, op_of_host, op)
    attr = attribute(kind=kind, dur=dur, parent=parent, device_op=np.where(host, -1, op))
    device_threads = {int(t) for t in thread[is_device]}
    _insert(con, "threads", {"thread": np.arange(len(uniq), dtype=np.int32),
                             "pid": np.array([str(k[0]) for k in uniq], dtype=object),
                             "tid": np.array([str(k[1]) for k in uniq], dtype=object),
                             "process_name": np.array([None] * len(uniq), dtype=object),
                             "thread_name": np.array([None] * len(uniq), dtype=object),
                             "labels": np.array([None] * len(uniq), dtype=object),
                             "is_device": np.array([i in device_threads for i in range(len(uniq))], dtype=bool)})
    def nul(a: np.ndarray) -> np.ndarray:
        out = a.astype(object)
        out[a < 0] = None
        return out

    seq = np.array([None] * n, dtype=object)
    _insert(con, "events", {
        "id": np.arange(n, dtype=np.int64), "kind": r["kind"], "cat": r["cat"], "name": r["name"], "ts": ts,
        "dur": dur, "pid": np.array([str(p) for p in r["pid"]], dtype=object),
        "tid": np.array([str(t) for t in r["tid"]], dtype=object), "thread": thread.astype(np.int32),
        "device": nul(np.where(is_device, r["device"].astype(np.int64), -1)),
        "stream": nul(np.where(is_device, r["stream"].astype(np.int64), -1)), "correlation": seq, "external_id": seq,
        "parent": nul(parent), "depth": nul(depth.astype(np.int64)), "op": nul(op), "module": seq, "scope": seq,
        "parent_op": nul(nearest_ancestor(parent, kind == KIND_CODE["cpu_op"], include_self=False)),
        "launch": nul(launch), "link": how, "unlinked": why, "self_cpu": attr.self_cpu,
        "self_device": attr.self_device, "device_total": attr.device_total, "kernels": attr.kernels,
        "kernels_total": attr.kernels_total, "seq": seq, "python_id": seq, "python_parent_id": seq,
        "bytes": r["bytes"], "flops": seq})
    _nested_calls(con, kind, depth, r["name"], parent)
    why_list = [w for w in why.tolist() if w is not None]
    reasons = {w: why_list.count(w) for w in sorted(set(why_list))}
    kind_counts = dict(zip(*np.unique(r["kind"].astype(str), return_counts=True))) if n else {}
    meta = {"schema_version": SCHEMA_VERSION, "path": str(folder), "device_kind": "Neuron",
            "device_name": _instance_type(con, folder), "events": n,
            "span_us": float((ts + dur).max() - ts.min()) / 1000 if n else 0.0,
            "kinds": {str(k): int(c) for k, c in kind_counts.items()}, "other_phases": {}, "unlinked": reasons,
            "unmatched_flows": 0, "skipped": {}, "skipped_examples": {}, "imprecise_ts_events": 0,
            "base_time_ns": None, "source": {"format": "neuron-explorer parquet", "note": NOTE,
                                             "tables": sorted(p.name for p in folder.glob("*.parquet"))},
            "trace_meta": {}}
    _insert(con, "meta", {"key": np.array(list(meta), dtype=object),
                          "value": np.array([json.dumps(v) for v in meta.values()], dtype=object)})


def _nested_calls(con: duckdb.DuckDBPyConnection, kind: np.ndarray, depth: np.ndarray, names: np.ndarray,
                  parent: np.ndarray) -> None:
    """The ``nested_calls`` table: op-table calls inside one of their own name, by the load's rule
    (trace/correlate.py ``nested_in_own_name_of``), so the op table counts them once here too."""
    table_parent = nearest_ancestor(parent, kind_mask(kind, *TABLE_KINDS), include_self=False)
    ids, around = nested_in_own_name_of(kind, depth, names, table_parent)
    _insert(con, "nested_calls", {"id": ids, "around": around})


def _runtime_ops(flows: np.ndarray, kind: np.ndarray, runtime: np.ndarray, op_of_host: np.ndarray) -> np.ndarray:
    """Op of each runtime call: the framework op sharing a flow id with it, else the op around it."""
    framework_by_flow: dict[str, int] = {}
    for i in np.flatnonzero(kind == KIND_CODE["cpu_op"]).tolist():
        for f in _flow_ids(flows[i]):
            framework_by_flow.setdefault(f, i)
    out: np.ndarray = op_of_host.copy()
    for i in runtime.tolist():
        for f in _flow_ids(flows[i]):
            if f in framework_by_flow:
                out[i] = framework_by_flow[f]
                break
    return out


def _flow_ids(v: Any) -> list[str]:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return []
    return [str(x) for x in (v.tolist() if isinstance(v, np.ndarray) else v) if x is not None]


def _link_device(con: duckdb.DuckDBPyConnection, kind: np.ndarray, ts: np.ndarray, dur: np.ndarray,
                 runtime: np.ndarray, rt_op: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Launch (shortest neuron runtime call holding the start), op, how, and why not, per event."""
    n = len(kind)
    launch = np.full(n, -1, dtype=np.int64)
    timed = np.flatnonzero(np.isin(kind, [KIND_CODE["kernel"], KIND_CODE["memcpy"]]))
    if timed.size and runtime.size:
        con.register("_dev", {"id": timed, "ts": ts[timed]})
        con.register("_rt", {"id": runtime, "ts": ts[runtime], "dur": dur[runtime]})
        got = con.execute("SELECT d.id AS dev, arg_min(r.id, r.dur) AS rt FROM _dev d JOIN _rt r "
                          "ON d.ts >= r.ts AND d.ts < r.ts + greatest(r.dur, 1) GROUP BY d.id").fetchnumpy()
        con.unregister("_dev")
        con.unregister("_rt")
        launch[np.asarray(got["dev"], dtype=np.int64)] = np.asarray(got["rt"], dtype=np.int64)
    op = np.where(launch >= 0, rt_op[np.clip(launch, 0, None)] if n else launch, -1)
    how = np.array([None] * n, dtype=object)
    why = np.array([None] * n, dtype=object)
    how[timed[launch[timed] >= 0]] = "time_window"
    why[timed[launch[timed] < 0]] = "outside_runtime_calls"
    why[timed[(launch[timed] >= 0) & (op[timed] < 0)]] = "launch_outside_op"
    return launch, op, how, why


def _instance_type(con: duckdb.DuckDBPyConnection, folder: Path) -> str | None:
    path = folder / "Metadata.parquet"
    if not path.is_file() or "instance_type" not in _columns(con, path):
        return None
    rows = con.execute("SELECT instance_type FROM read_parquet(?) LIMIT 1", [_source(con, path)]).fetchall()
    return str(rows[0][0]) if rows and rows[0][0] is not None else None


def _insert(con: duckdb.DuckDBPyConnection, table: str, cols: dict[str, np.ndarray]) -> None:
    if not len(next(iter(cols.values()))):
        return
    con.register("_rows", cols)
    names = ", ".join(f'"{c}"' for c in cols)
    con.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM _rows")
    con.unregister("_rows")

