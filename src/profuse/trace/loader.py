"""``profuse.load(path)``: a Kineto trace (or a profuse bundle) into DuckDB tables, cached."""
from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import numpy as np

from ..errors import TraceError
from . import _decode, framework_mapping
from ._build import FLOW_PHASES, THREAD_SHIFT, Columns, add_chunk, kinds_of, thread_key
from ._parallel import decode_parallel, worker_count
from ._privateuse1 import privateuse1_name
from .cache import CacheSlot, CacheWriter, bundle_cache, cache_slot, fingerprint
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
TRACE_NAMES = ("trace.json.gz", "trace.json")
INSERT_BATCH = 1 << 20

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


def resolve(path: str | os.PathLike[str]) -> Path:
    """A trace file, or the trace inside a bundle folder; only regular files are accepted."""
    p = Path(path)
    if p.is_dir():
        for name in TRACE_NAMES:
            if (p / name).exists() or (p / name).is_symlink():
                return _regular(p / name)
        found = _trace_files(p)
        if len(found) == 1:
            return _regular(found[0])
        if not found:
            raise TraceError(p, "is a folder with no trace in it (expected trace.json.gz or one *.json[.gz])")
        raise TraceError(p, f"holds {len(found)} traces; name one of them: {', '.join(q.name for q in found[:4])}")
    if not p.exists():
        raise TraceError(p, "no such file")
    return _regular(p)


def _trace_files(folder: Path) -> list[Path]:
    """Entries of ``folder`` named like a Kineto trace (``*.json``, ``*.json.gz``), mapping files aside."""
    return sorted(q for q in folder.iterdir() if q.name.endswith((".json", ".json.gz", ".pt.trace.json"))
                  and not q.match(framework_mapping.PATTERN))


def _holds_kineto_trace(folder: Path) -> bool:
    """Whether :func:`resolve` would find (or complain about) a Kineto trace in ``folder``."""
    return any((folder / n).exists() or (folder / n).is_symlink() for n in TRACE_NAMES) or bool(_trace_files(folder))


def _regular(p: Path) -> Path:
    """``p`` if it is a regular file (links followed); FIFOs and devices would block or never end."""
    try:
        mode = p.stat().st_mode
    except OSError as err:
        raise TraceError(p, f"cannot be read ({err.strerror})") from None
    if stat.S_ISDIR(mode):
        raise TraceError(p, "is a folder, not a trace file")
    if not stat.S_ISREG(mode):
        raise TraceError(p, f"is not a regular file (a {_file_kind(mode)}); give a .json or .json.gz file")
    return p


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
             (stat.S_ISSOCK, "socket"))
    return next((label for test, label in kinds if test(mode)), "special file")


def load(
    path: str | os.PathLike[str], *, lenient: bool = False, cache: bool = True,
    progress: Progress | None = None, cache_dir: str | os.PathLike[str] | None = None,
    cache_path: str | os.PathLike[str] | None = None,
) -> Trace:
    """Load a trace: from a verified cache when one matches the file's bytes, else decode it.

    The tables are built in memory and returned at once; the cache file is written behind, on
    another core, and :meth:`Trace.close` (or interpreter exit) waits for it. A cache that cannot be
    written costs only the next load's time: the tables in memory are complete either way. Caches go
    to ``cache_dir`` (default: the user cache folder, see :mod:`profuse.trace.cache`), or exactly to
    ``cache_path`` (a bundle writing its own). A damaged cache is discarded and rebuilt, with a note.
    A folder of neuron-explorer Parquet tables (and no Kineto trace) is built in memory, uncached.
    """
    folder = Path(path)
    if folder.is_dir() and not _holds_kineto_trace(folder):
        from ..neuron import explorer_parquet  # a neuron-explorer Parquet folder (imported late: it uses trace/)

        if explorer_parquet.is_explorer_folder(folder):
            return explorer_parquet.load_folder(folder)
    src = resolve(path)
    fp = fingerprint(src)
    notes: list[str] = []
    slot = None
    if cache and not lenient:
        slot = CacheSlot(Path(cache_path)) if cache_path is not None else cache_slot(fp, cache_dir)
        for candidate in (slot, bundle_cache(src) if cache_path is None else None):
            if candidate is None:
                continue
            cached, problem = candidate.open_if_valid(fp)
            if cached is not None:
                return _with_mapping(Trace(src, cached, from_cache=True, notes=notes))
            if problem is not None:
                notes.append(f"cache {candidate.path} was not used: {problem}; tables rebuilt from the trace")
    started = time.perf_counter()
    cols, top, skipped = decode(str(src), lenient=lenient, progress=progress)
    con = duckdb.connect()
    try:
        # compressed in memory: repeated kernel names and sparse columns would otherwise cost GBs
        con.execute("ATTACH ':memory:' AS trace (COMPRESS); USE trace")
        con.execute(DDL)
        _write_tables(con, str(src), cols, top, fp, skipped)
    except BaseException:
        con.close()
        raise
    del cols
    if cache_path is None and time.perf_counter() - started < _min_cache_seconds():
        slot = None  # built faster than a cache opens: not worth a file
    writer = CacheWriter(con, slot) if slot is not None else None
    return _with_mapping(Trace(src, con, from_cache=False, writer=writer, notes=notes))


def _min_cache_seconds() -> float:
    try:
        return float(os.environ.get("PROFUSE_CACHE_MIN_SECONDS", "0.05"))
    except ValueError:
        return 0.05


def _with_mapping(trace: Trace) -> Trace:
    """TorchNeuron's framework_mapping_*.json beside the trace, as the ``framework_mapping`` view."""
    try:
        trace.framework_mapping = framework_mapping.attach(trace.con, trace.path)
    except BaseException:
        trace.close()
        raise
    skipped = (trace.framework_mapping or {}).get("skipped")
    if skipped:
        trace.notes.append(f"{skipped:,} framework_mapping record(s) skipped: no integer runtime sequence id "
                           "or op sequence number")
    return trace


def decode(path: str, *, lenient: bool = False,
           progress: Progress | None = None) -> tuple[Columns, dict[str, Any], _decode.Skipped]:
    """Read and decode a trace into columns (all cores for big files), before any table is written."""
    data = _decode.read_bytes(path)
    doc = _decode.split_document(path, data)
    skipped = _decode.Skipped()
    total, done = len(doc.events), 0

    def on_chunk(nbytes: int) -> None:
        nonlocal done
        done += nbytes
        if progress:
            progress(done, total)

    workers = 1 if lenient else worker_count(total)
    cols = decode_parallel(path, doc, workers=workers, on_progress=on_chunk) if workers > 1 else None
    if cols is None:
        cols, done = Columns(), 0
        for base, events, span in _decode.iter_chunks(path, doc, lenient=lenient, skipped=skipped,
                                                      on_progress=on_chunk):
            add_chunk(cols, path, base, events, span, lenient=lenient, skipped=skipped)
    top = {k: _safe_json(v) for k, v in doc.top.items()}
    try:
        _base_time_ns(path, top.get("baseTimeNanoseconds"))
    except TraceError as err:
        if not lenient:
            raise TraceError(path, err.problem + " (use --lenient to ignore it)") from None
        skipped.add("baseTimeNanoseconds ignored", err.problem)  # times stay relative to the trace
        top.pop("baseTimeNanoseconds")
    return cols, top, skipped


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
                               has_host_ops=bool(np.any(host & is_op)), has_host=bool(host.any()))
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
    _lookup_table(con, "_names", name_list)
    _lookup_table(con, "_cats", cat_list)
    _lookup_table(con, "_kinds", np.array(KINDS, dtype=object))
    _lookup_table(con, "_how", np.array(LINK_HOW, dtype=object))
    _lookup_table(con, "_why", np.array(UNLINKED, dtype=object))
    frame: dict[str, np.ndarray] = {
        "id": np.arange(n, dtype=np.int64), "kind": kind.astype(np.int32), "cat": cat_id, "name": name_id,
        "ts": ts, "dur": dur, "thread": thread.astype(np.int32),
        "device": np.where(is_device_evt, device, -1), "stream": np.where(is_device_evt, stream, -1),
        "correlation": corr, "external_id": ext, "parent": parent, "depth": depth.astype(np.int64), "op": op,
        "module": module, "scope": scope, "parent_op": parent_op, "launch": links.launch, "link": links.how.astype(np.int32),
        "unlinked": links.unlinked.astype(np.int32), "self_cpu": attr.self_cpu, "self_device": attr.self_device,
        "device_total": attr.device_total, "kernels": attr.kernels, "kernels_total": attr.kernels_total,
        "seq": cols.column("seq"), "python_id": cols.column("python_id"),
        "python_parent_id": cols.column("python_parent_id"), "bytes": cols.column("nbytes"),
        "flops": cols.column("flops") if n else np.empty(0)}
    nul = "NULLIF(f.{0}, -1)".format
    insert = f"""
        INSERT INTO events SELECT f.id, k.v, c.v, nm.v, f.ts, f.dur, t.pid, t.tid, f.thread,
            {nul('device')}, {nul('stream')}, {nul('correlation')}, {nul('external_id')}, {nul('parent')},
            {nul('depth')}, {nul('op')}, {nul('module')}, {nul('scope')}, {nul('parent_op')}, {nul('launch')},
            h.v, w.v, f.self_cpu, f.self_device,
            f.device_total, f.kernels, f.kernels_total, {nul('seq')}, {nul('python_id')},
            {nul('python_parent_id')}, {nul('bytes')}, CASE WHEN isnan(f.flops) THEN NULL ELSE f.flops END
        FROM _frame f JOIN _kinds k ON k.i = f.kind JOIN _cats c ON c.i = f.cat JOIN _names nm ON nm.i = f.name
        JOIN threads t ON t.thread = f.thread JOIN _how h ON h.i = f.link JOIN _why w ON w.i = f.unlinked
        ORDER BY f.id"""
    # In batches, checkpointed (compressed) while more follow, so DuckDB's copy of a big trace never
    # sits uncompressed beside ours; a small trace goes in at once and is compressed by the cache write.
    for lo in range(0, max(n, 1), INSERT_BATCH):
        con.register("_frame", {k: v[lo:lo + INSERT_BATCH] for k, v in frame.items()})
        con.execute(insert)
        if lo + INSERT_BATCH < n:
            con.execute("CHECKPOINT trace")
    del frame
    for t in ("_frame", "_names", "_cats", "_kinds", "_how", "_why"):
        con.unregister(t)
    _write_side_tables(con, cols, kind, names, is_module, is_scope, scope_of_host, ts, dur, thread, flows)
    if len(inst_thread):
        con.register("_inst", {"name": cols.column("inst_name"), "cat": cols.column("inst_cat"),
                               "ts": cols.column("inst_ts") + base_ns, "thread": inst_thread.astype(np.int32)})
        _lookup_table(con, "_names", name_list)
        _lookup_table(con, "_cats", cat_list)
        con.execute("INSERT INTO instants SELECT n.v, c.v, i.ts, t.pid, t.tid FROM _inst i "
                    "JOIN _names n ON n.i = i.name JOIN _cats c ON c.i = i.cat JOIN threads t ON t.thread = i.thread")
        for t in ("_inst", "_names", "_cats"):
            con.unregister(t)
    meta = _meta(path, cols, kind, names, ts, dur, top, fp, skipped, links.unlinked, flows)
    meta["unnamed_events"] = unnamed
    _insert_rows(con, "meta", [(k, json.dumps(v)) for k, v in meta.items()], 2)


def _module_class(label: str) -> str:
    """'nn.Module: LlamaRMSNorm_0' -> 'LlamaRMSNorm'."""
    m = _MODULE.match(label)
    return m.group("cls") if m else label


def _lookup_table(con, name: str, values: np.ndarray) -> None:
    con.register(name, {"i": np.arange(len(values), dtype=np.int32), "v": values})


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
