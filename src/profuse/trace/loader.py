"""``profuse.load(path)``: a Kineto trace (or a profuse bundle) into DuckDB tables, cached."""
from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import numpy as np

from ..errors import TraceError
from . import _decode, _native
from ._build import FLOW_PHASES, THREAD_SHIFT, Columns, add_chunk, kinds_of, thread_key
from ._open import TRACE_NAMES, load, resolve  # noqa: F401 - re-exported
from ._parallel import decode_parallel, worker_count
from ._privateuse1 import privateuse1_name
from .cache import CacheSlot, CacheWriter
from .correlate import (
    LINK_HOW,
    UNLINKED,
    Flows,
    attribute,
    link_device_events,
    nearest_ancestor,
    nesting,
    unmatched_flows,
)
from .schema import DDL, DEVICE_KINDS, GRAPH_LAUNCHES, KINDS, SCHEMA_VERSION, K, codes
from .trace import Trace

_MODULE = re.compile(r"^nn\.Module: (?P<cls>.+?)(?:_\d+)?$")
INSERT_BATCH = 1 << 20
COMPRESS_MIN_EVENTS = 1_000_000

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


def build(src: Path, fp: dict[str, Any], *, slot: CacheSlot | None, notes: list[str], lenient: bool = False,
          progress: Progress | None = None) -> Trace:
    """Decode ``src`` into in-memory tables and start writing them to ``slot`` behind (see
    :func:`profuse.trace.load`, which tries the cache first)."""
    started = time.perf_counter()
    # With the scanner, DuckDB starts up on another thread while the trace is decoded; the forked
    # msgspec workers are then not used (forking after DuckDB has started threads is unsafe).
    connection = _connect_behind() if _native.enabled() and not lenient else None
    try:
        cols, top, skipped = decode(str(src), lenient=lenient, progress=progress, fork=connection is None)
    except BaseException:
        if connection is not None:
            connection().close()
        raise
    con = connection() if connection is not None else duckdb.connect()
    try:
        # big traces compressed in memory (repeated kernel names and sparse columns would otherwise cost
        # GBs); below COMPRESS_MIN_EVENTS compressing costs more time than the memory is worth
        compress = " (COMPRESS)" if cols.n >= COMPRESS_MIN_EVENTS else ""
        con.execute(f"ATTACH ':memory:' AS trace{compress}; USE trace")
        con.execute(DDL)
        _write_tables(con, str(src), cols, top, fp, skipped)
    except BaseException:
        con.close()
        raise
    del cols
    if time.perf_counter() - started < _min_cache_seconds():
        slot = None  # built faster than a cache opens: not worth a file
    writer = CacheWriter(con, slot) if slot is not None else None
    return Trace(src, con, from_cache=False, writer=writer, notes=notes)


def _min_cache_seconds() -> float:
    try:
        return float(os.environ.get("PROFUSE_CACHE_MIN_SECONDS", "0.05"))
    except ValueError:
        return 0.05


def _connect_behind() -> Callable[[], duckdb.DuckDBPyConnection]:
    """Open an in-memory DuckDB on another thread; the returned call waits for it."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["con"] = duckdb.connect()
        except BaseException as err:  # handed to the caller
            box["err"] = err

    thread = threading.Thread(target=work, name="profuse-connect", daemon=True)
    thread.start()

    def result() -> duckdb.DuckDBPyConnection:
        thread.join()
        if "err" in box:
            raise box["err"]
        return box["con"]

    return result


def decode(path: str, *, lenient: bool = False, progress: Progress | None = None,
           fork: bool = True) -> tuple[Columns, dict[str, Any], _decode.Skipped]:
    """Read and decode a trace into columns (all cores for big files), before any table is written.

    ``fork=False``: the msgspec path stays in this process (no forked workers).
    """
    data = _decode.read_bytes(path)
    skipped = _decode.Skipped()
    # the compiled scanner first, the whole document in one pass; anything it does not accept goes
    # down the reference path below (which then accepts, recovers or raises exactly as before)
    fast = _native.scan_document(data) if not lenient and _native.enabled() else None
    if fast is not None and fast[1] is not None:
        if progress:
            progress(len(data), len(data))
        cols, top = fast[0], {k: _safe_json(v) for k, v in fast[1].items()}
    else:
        cols, top = _decode_reference(path, data, lenient=lenient, skipped=skipped, progress=progress, fork=fork)
    try:
        _base_time_ns(path, top.get("baseTimeNanoseconds"))
    except TraceError as err:
        if not lenient:
            raise TraceError(path, err.problem + " (use --lenient to ignore it)") from None
        skipped.add("baseTimeNanoseconds ignored", err.problem)  # times stay relative to the trace
        top.pop("baseTimeNanoseconds")
    return cols, top, skipped


def _decode_reference(path: str, data: bytes | bytearray, *, lenient: bool, skipped: _decode.Skipped,
                      progress: Progress | None, fork: bool) -> tuple[Columns, dict[str, Any]]:
    """The msgspec decoder: chunks on every core (forked workers) or in this process."""
    doc = _decode.split_document(path, data)
    total, done = len(doc.events), 0

    def on_chunk(nbytes: int) -> None:
        nonlocal done
        done += nbytes
        if progress:
            progress(done, total)

    workers = 1 if lenient or not fork else worker_count(total)
    cols = decode_parallel(path, doc, workers=workers, on_progress=on_chunk) if workers > 1 else None
    if cols is None:
        cols, done = Columns(), 0
        for base, events, span in _decode.iter_chunks(path, doc, lenient=lenient, skipped=skipped,
                                                      on_progress=on_chunk):
            add_chunk(cols, path, base, events, span, lenient=lenient, skipped=skipped)
    return cols, {k: _safe_json(v) for k, v in doc.top.items()}


def _safe_json(raw: msgspec.Raw) -> Any:
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None


def _lookup_list(table: dict[Any, int]) -> np.ndarray:
    out = np.empty(len(table), dtype=object)
    for v, i in table.items():
        out[i] = v
    return out


def _write_tables(con, path, cols: Columns, top: dict[str, Any], fp: dict[str, Any], skipped) -> None:
    n = cols.n
    name_list, cat_list = _lookup_list(cols.names), _lookup_list(cols.cats)
    name_id, cat_id = cols.column("name"), cols.column("cat")
    unnamed = int(np.count_nonzero(name_id == cols.names[None])) if None in cols.names else 0
    if None in cols.names:  # "name": null: kept, named "" (every analysis groups and matches by name)
        name_list[cols.names[None]] = ""
    names = name_list[name_id] if n else np.empty(0, dtype=object)
    kind = kinds_of(cols, name_list, name_id, cat_id) if n else np.empty(0, dtype=np.int8)
    base_ns = _base_time_ns(path, top.get("baseTimeNanoseconds"))
    # threads: every (pid, tid) seen on complete events and flows, numbered densely
    keys, flow_keys, inst_keys = (cols.column(k) for k in ("thread_key", "flow_thread_key", "inst_thread_key"))
    uniq, inverse = np.unique(np.concatenate([keys, flow_keys, inst_keys]), return_inverse=True)
    pid_list, tid_list = _lookup_list(cols.pids), _lookup_list(cols.tids)
    thread_keys = [thread_key(pid_list[k // THREAD_SHIFT], tid_list[k % THREAD_SHIFT]) for k in uniq.tolist()]
    # number threads in (pid, tid) order, numbers before names, whatever order they were met in
    order = sorted(range(len(thread_keys)), key=lambda i: tuple(_natural(v) for v in thread_keys[i]))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    thread_keys = [thread_keys[i] for i in order]
    inverse = rank[inverse] if len(order) else inverse
    thread = inverse[:n].astype(np.int64)
    flow_thread = inverse[n:n + len(flow_keys)].astype(np.int64)
    inst_thread = inverse[n + len(flow_keys):].astype(np.int64)
    ts, dur, flow_ts = cols.column("ts"), cols.column("dur"), cols.column("flow_ts")
    _check_times(path, base_ns, ts, dur, flow_ts, *cols.parts.get("inst_ts", []))
    ts, flow_ts = ts + base_ns, flow_ts + base_ns
    flows = Flows(ids=np.array(cols.flow_ids, dtype=object), ph=cols.column("flow_ph").astype(np.int8),
                  ts=flow_ts, thread=flow_thread)
    is_device_evt = np.isin(kind, codes(*DEVICE_KINDS))
    device_threads = np.zeros(len(thread_keys), dtype=bool)
    device_threads[np.unique(thread[is_device_evt])] = True
    host = ~is_device_evt & ~device_threads[thread] if n else np.zeros(0, dtype=bool)
    parent, depth = nesting(thread, ts, dur, host)
    is_op = np.isin(kind, codes("cpu_op", "annotation"))
    op_of_host = nearest_ancestor(parent, is_op, include_self=True)
    corr, ext = cols.column("correlation"), cols.column("external_id")
    graph_launch = _flag_names(name_list, lambda s: s in GRAPH_LAUNCHES)[name_id] if n else np.zeros(0, bool)
    links = link_device_events(kind=kind, graph_launch=graph_launch, thread=thread, ts=ts, correlation=corr,
                               external_id=ext, op_of_host=op_of_host, flows=flows,
                               has_host=bool(host.any()))
    op = np.where(host, op_of_host, links.op)
    module_name = _flag_names(name_list, lambda s: s.startswith("nn.Module: "))
    is_module = (kind == K["python"]) & (module_name[name_id] if n else np.zeros(0, bool))
    module_of_host = nearest_ancestor(parent, is_module, include_self=False)
    is_scope = is_module | (kind == K["annotation"])
    scope_of_host = nearest_ancestor(parent, is_scope, include_self=False)
    parent_op = nearest_ancestor(parent, kind == K["cpu_op"], include_self=False)
    scope = np.where(host, scope_of_host, np.where(links.op >= 0, scope_of_host[np.clip(links.op, 0, None)], -1))
    module = np.where(host, module_of_host, np.where(links.op >= 0, module_of_host[np.clip(links.op, 0, None)], -1))
    attr = attribute(kind=kind, dur=dur, parent=parent, device_op=links.op)
    pid_int = np.array([_int_or(k[0]) for k in thread_keys] or [-1], dtype=np.int64)
    tid_int = np.array([_int_or(k[1]) for k in thread_keys] or [-1], dtype=np.int64)
    device, stream = cols.column("device"), cols.column("stream")
    if n:
        device = np.where(is_device_evt & (device < 0), pid_int[thread], device)
        stream = np.where(is_device_evt & (stream < 0), tid_int[thread], stream)
    _write_threads(con, cols, thread_keys, device_threads)
    # String columns go in as small codes and are looked up by DuckDB in the lists bound as
    # parameters: no join, no sort, and each distinct string crosses from Python once.
    thread_pid = np.array([k[0] for k in thread_keys] or [""], dtype=object)
    thread_tid = np.array([k[1] for k in thread_keys] or [""], dtype=object)
    frame: dict[str, np.ndarray] = {
        "id": np.arange(n, dtype=np.int64), "kind": kind.astype(np.int32), "cat": cat_id, "name": name_id,
        "ts": ts, "dur": dur, "thread": thread.astype(np.int32),
        "device": np.where(is_device_evt, device, -1), "stream": np.where(is_device_evt, stream, -1),
        "correlation": corr, "external_id": ext, "parent": parent, "depth": depth.astype(np.int64), "op": op,
        "module": module, "scope": scope, "parent_op": parent_op, "launch": links.launch,
        "link": links.how.astype(np.int32), "unlinked": links.unlinked.astype(np.int32),
        "self_cpu": attr.self_cpu, "self_device": attr.self_device,
        "device_total": attr.device_total, "kernels": attr.kernels, "kernels_total": attr.kernels_total,
        "seq": cols.column("seq"), "python_id": cols.column("python_id"),
        "python_parent_id": cols.column("python_parent_id"), "bytes": cols.column("nbytes"),
        "flops": cols.column("flops") if n else np.empty(0)}
    nul = "NULLIF(f.{0}, -1)".format
    look = "list_extract(${0}::VARCHAR[], f.{1} + 1)".format
    insert = f"""
        INSERT INTO events SELECT f.id, {look('kinds', 'kind')}, {look('cats', 'cat')}, {look('names', 'name')},
            f.ts, f.dur, {look('pids', 'thread')}, {look('tids', 'thread')}, f.thread,
            {nul('device')}, {nul('stream')}, {nul('correlation')}, {nul('external_id')}, {nul('parent')},
            {nul('depth')}, {nul('op')}, {nul('module')}, {nul('scope')}, {nul('parent_op')}, {nul('launch')},
            {look('how', 'link')}, {look('why', 'unlinked')}, f.self_cpu, f.self_device,
            f.device_total, f.kernels, f.kernels_total, {nul('seq')}, {nul('python_id')},
            {nul('python_parent_id')}, {nul('bytes')}, CASE WHEN isnan(f.flops) THEN NULL ELSE f.flops END
        FROM _frame f"""
    lists = {"kinds": list(KINDS), "cats": cat_list.tolist(), "names": name_list.tolist(),
             "pids": thread_pid.tolist(), "tids": thread_tid.tolist(), "how": list(LINK_HOW), "why": list(UNLINKED)}
    # In batches, checkpointed (compressed) while more follow, so DuckDB's copy of a big trace never
    # sits uncompressed beside ours; a small trace goes in at once and is compressed by the cache write.
    for lo in range(0, max(n, 1), INSERT_BATCH):
        con.register("_frame", {k: v[lo:lo + INSERT_BATCH] for k, v in frame.items()})
        con.execute(insert, lists)
        if lo + INSERT_BATCH < n:
            con.execute("CHECKPOINT trace")
    del frame
    con.unregister("_frame")
    _write_side_tables(con, cols, kind, names, is_module, is_scope, scope_of_host, ts, dur, thread, flows)
    if len(inst_thread):
        con.register("_inst", {"name": name_list[cols.column("inst_name")], "cat": cat_list[cols.column("inst_cat")],
                               "ts": cols.column("inst_ts") + base_ns, "pid": thread_pid[inst_thread],
                               "tid": thread_tid[inst_thread]})
        con.execute("INSERT INTO instants SELECT name, cat, ts, pid, tid FROM _inst")
        con.unregister("_inst")
    meta = _meta(path, cols, kind, names, ts, dur, top, fp, skipped, links.unlinked, flows)
    meta["unnamed_events"] = unnamed
    _insert_rows(con, "meta", [(k, json.dumps(v)) for k, v in meta.items()], 2)


def _module_class(label: str) -> str:
    """'nn.Module: LlamaRMSNorm_0' -> 'LlamaRMSNorm'."""
    m = _MODULE.match(label)
    return m.group("cls") if m else label


def _flag_names(name_list: np.ndarray, test: Callable[[str], bool]) -> np.ndarray:
    """A boolean per distinct name, so per-event tests cost one index instead of a string op."""
    return np.array([isinstance(s, str) and test(s) for s in name_list] or [False], dtype=bool)


def _natural(s: str) -> tuple[int, int, str]:
    v = _int_or(s)
    return (0, v, "") if v >= 0 or s.lstrip("-").isdigit() else (1, 0, s)


def _int_or(s: str) -> int:
    """``s`` as an int when it is one that fits in 64 bits (pids and tids can be any JSON value), else -1."""
    try:
        v = int(s)
    except ValueError:
        return -1
    return v if -(2**63) <= v < 2**63 else -1


def _base_time_ns(path: str, value: Any) -> int:
    """``baseTimeNanoseconds``: added to every ts, so it must keep them within 64 bits."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(path, f"baseTimeNanoseconds is {_short(value)}, not a whole number of ns")
    if not -(2**62) < value < 2**62:
        raise TraceError(path, f"baseTimeNanoseconds {value} is out of range (must be below 2^62 ns)")
    return value


_TIME_LIMIT = 2**62  # every time, and the sum of all durations, stays below this many ns: no sum overflows


def _check_times(path: str, base_ns: int, ts: np.ndarray, dur: np.ndarray, *other_ts: np.ndarray) -> None:
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


def _write_threads(con, cols: Columns, thread_keys: list[tuple[str, str]], device_threads: np.ndarray) -> None:
    rows = []
    for i, (pid, tid) in enumerate(thread_keys):
        pm = cols.thread_meta.get((pid, ""), {})
        tm = cols.thread_meta.get((pid, tid), {})
        rows.append((i, pid, tid, pm.get("process_name"), tm.get("thread_name"), pm.get("process_labels"),
                     bool(device_threads[i])))
    _insert_rows(con, "threads", rows, 7)


def _write_side_tables(con, cols, kind, names, is_module, is_scope, scope_of_host, ts, dur, thread,
                       flows: Flows) -> None:
    _insert_rows(con, "shapes", cols.shapes, 5)
    scope_ids = np.flatnonzero(is_scope)
    if scope_ids.size:
        labels = names[scope_ids]
        scope_kind = np.where(is_module[scope_ids], "module", "annotation")
        clean = [(_module_class(s) if k == "module" else s) for s, k in zip(labels, scope_kind)]
        scope_parent = scope_of_host[scope_ids]  # a scope's parent is the scope enclosing it
        con.register("_scopes", {
            "id": scope_ids.astype(np.int64), "kind": scope_kind.astype(object), "name": np.array(clean, dtype=object),
            "label": labels, "parent": scope_parent, "ts": ts[scope_ids], "dur": dur[scope_ids],
            "thread": thread[scope_ids].astype(np.int32)})
        con.execute("INSERT INTO scopes SELECT id, kind, name, label, NULLIF(parent, -1), ts, dur, thread "
                    "FROM _scopes")
        con.unregister("_scopes")
    if flows.ids.size:
        con.register("_flows", {"id": flows.ids, "cat": np.array(cols.flow_cats, dtype=object),
                                "ph": np.array(FLOW_PHASES, dtype=object)[flows.ph], "ts": flows.ts,
                                "thread": flows.thread.astype(np.int32)})
        con.execute("INSERT INTO flows SELECT * FROM _flows")
        con.unregister("_flows")


def _insert_rows(con, table: str, rows: list[tuple[Any, ...]], width: int) -> None:
    """Insert Python rows column-wise (DuckDB's executemany is row-at-a-time and slow)."""
    if not rows:
        return
    columns = list(zip(*rows))
    frame = {f"c{i}": np.array(columns[i], dtype=object) for i in range(width)}
    con.register("_rows", frame)
    con.execute(f"INSERT INTO {table} SELECT * FROM _rows")
    con.unregister("_rows")


def detect_device(kind: np.ndarray, cats: set[str], names: np.ndarray, top: dict[str, Any],
                  process_names: Iterable[str] = ()) -> tuple[str, str | None]:
    """The device kind (CUDA, ROCm, MTIA, CPU, or the backend's name) and the device's name."""
    props = top.get("deviceProperties") or []
    props = props if isinstance(props, list) else []  # any other shape says nothing usable
    dev_name = props[0].get("name") if props and isinstance(props[0], dict) else None
    dev_name = dev_name if isinstance(dev_name, str) else None
    has_device = bool(np.isin(kind, codes("kernel", "memcpy", "memset", "device_other")).any())
    lower = {c.lower() for c in cats if c}
    if "mtia_runtime" in lower or "mtia_ccp_events" in lower:
        return "MTIA", dev_name
    if any(k in top for k in ("roctracer_version", "hip_runtime_version")) or any(
        isinstance(s, str) and s.startswith("hip") for s in names[kind == K["runtime"]][:2000]
    ):
        return "ROCm", dev_name
    if any(c.startswith("privateuse1") for c in lower):
        return privateuse1_name(names[kind == K["runtime"]][:2000], process_names), dev_name
    if has_device or props or any(c in lower for c in ("cuda_runtime", "cuda_driver", "runtime", "kernel")):
        return "CUDA", dev_name
    return "CPU", None


def _meta(path, cols, kind, names, ts, dur, top, fp, skipped, unlinked, flows) -> dict[str, Any]:
    procs = [m["process_name"] for m in cols.thread_meta.values() if "process_name" in m]
    device_kind, device_name = detect_device(kind, {c for c in cols.cats if c}, names, top, procs)
    span = int((ts + dur).max() - ts.min()) if len(ts) else 0
    codes_u, counts_u = np.unique(unlinked[unlinked > 0], return_counts=True)
    reasons = {UNLINKED[c]: int(k) for c, k in zip(codes_u, counts_u)}
    codes_, counts = np.unique(kind, return_counts=True)
    kinds = [KINDS[c] for c in codes_.tolist()]
    return {
        "schema_version": SCHEMA_VERSION,
        "source": fp,
        "path": path,
        "device_kind": device_kind,
        "device_name": device_name,
        "events": len(ts),
        "span_us": span / 1000,
        "kinds": {str(k): int(c) for k, c in zip(kinds, counts)},
        "other_phases": cols.phase_counts,
        "unlinked": reasons,
        "unmatched_flows": unmatched_flows(flows),
        "skipped": skipped.counts,
        "skipped_examples": skipped.examples,
        "imprecise_ts_events": cols.imprecise_ts,
        "ignored_args": cols.ignored_args,
        "base_time_ns": top.get("baseTimeNanoseconds"),
        "trace_meta": {k: v for k, v in top.items() if k in ("schemaVersion", "distributedInfo", "deviceProperties",
                                                            "traceName", "displayTimeUnit", "record_shapes",
                                                            "with_stack", "with_modules", "with_flops",
                                                            "profile_memory", "cuda_runtime_version",
                                                            "hip_runtime_version")},
    }
