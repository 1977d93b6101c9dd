"""The map step: one rank's trace in, its summary tables out as Parquet, a small record back.

The same function runs in a local process pool and as a Ray task. It loads the trace with
:func:`profuse.load`, reduces it to per-rank tables (totals, steps, op table, collectives, fusion
candidates) and writes them under ``<set folder>/rank=<N>/`` (Hive partitioning, so a reduce over
``rank=*/<table>.parquet`` gets a ``rank`` column). Nothing of the rank's events goes back to the
coordinator: only counts, timings and where it ran (:class:`MapResult`).

A task and its result are msgspec Structs defined here at module level, so they pickle by reference
for the process pool and for Ray.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import numpy as np

from ..analysis.busy import union_ns
from ..analysis.kernel_class import is_collective
from ..errors import UserError
from ..trace.schema import DEVICE_TIME_SQL
from ..trace.step_names import STEP_WHERE

TABLES_VERSION = 4  # bump when a per-rank table changes: older rank folders are rebuilt
DONE = "done.json"
# host annotations that are collectives when there is no device (gloo, MPI, UCC)
COMM_HOST = re.compile(r"^(gloo|nccl|mpi|ucc|xccl|rccl):")
_KERNEL_COLL = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)

# name -> (column, SQL type) of every per-rank table; the reduce reads these names
SCHEMAS: dict[str, list[tuple[str, str]]] = {
    "totals": [("path", "VARCHAR"), ("device_kind", "VARCHAR"), ("device_name", "VARCHAR"),
               ("events", "BIGINT"), ("span_us", "DOUBLE"), ("device_us", "DOUBLE"), ("busy_us", "DOUBLE"),
               ("compute_us", "DOUBLE"), ("comm_us", "DOUBLE"), ("memory_us", "DOUBLE"),
               ("overlap_us", "DOUBLE"), ("idle_us", "DOUBLE"), ("unrecorded_us", "DOUBLE"), ("steps", "BIGINT"),
               ("step_median_us", "DOUBLE"), ("world_size", "BIGINT"), ("backend", "VARCHAR"),
               ("collectives", "BIGINT"), ("skipped_events", "BIGINT")],
    "steps": [("step", "BIGINT"), ("ts_ns", "BIGINT"), ("dur_us", "DOUBLE")],
    "ops": [("name", "VARCHAR"), ("calls", "BIGINT"), ("self_cpu_us", "DOUBLE"), ("self_device_us", "DOUBLE"),
            ("device_total_us", "DOUBLE")],
    "collectives": [("name", "VARCHAR"), ("seq", "BIGINT"), ("kernel", "VARCHAR"), ("start_ns", "BIGINT"),
                    ("end_ns", "BIGINT"), ("bytes", "BIGINT")],
    "fusion": [("pattern", "VARCHAR"), ("scope", "VARCHAR"), ("instances", "BIGINT"), ("device_us", "DOUBLE"),
               ("predicted_saving_us", "DOUBLE"), ("recommendation", "VARCHAR"), ("confidence", "VARCHAR")],
}


class MapTask(msgspec.Struct, frozen=True):
    """One rank to map: its trace, the set folder its tables go under, and how to read it."""

    rank: int
    path: str                          # the rank's trace
    out: str                           # the set folder: tables go under <out>/rank=<rank>/
    lenient: bool = False              # skip bad events (--lenient)
    cache: bool = True                 # use the trace table cache
    fusion: bool = True                # find fusion candidates
    raw_size: int = 0                  # the trace's decompressed bytes: sizes the memory the task reserves
    decode_workers: int | None = None  # cores for decoding this one trace (None: as the load decides)


class RankSummary(msgspec.Struct):
    """What mapping a rank found, kept as the rank folder's ``done.json``: counts and the tables' version."""

    events: int
    device_kind: str
    collectives: int
    steps: int
    distributed_rank: int | None       # distributedInfo.rank, when the trace has it
    tables_version: int = TABLES_VERSION


class MapResult(msgspec.Struct):
    """What a map task returns: the rank, where and how long it ran, and its summary, or why it failed."""

    rank: int
    path: str
    node: str = ""                     # the Ray node id, else the host name ("" when the task never ran)
    pid: int | None = None
    seconds: float = 0.0
    cached: bool = False               # the rank's tables were there from an earlier run
    peak_rss: int | None = None        # the worker's peak resident memory in bytes (None: unknown, or cached)
    summary: RankSummary | None = None  # None when it failed
    error: str | None = None           # "<path>: <problem>" when it failed


def collective_name(name: str) -> str:
    """'ncclKernel_AllReduce_RING_LL_Sum_float(...)' -> 'AllReduce'; 'gloo:all_reduce' -> 'all_reduce'."""
    m = _KERNEL_COLL.search(name)
    if m:
        return m.group(1)
    if COMM_HOST.match(name):
        return name.split(":", 1)[1]
    return name.split("(", 1)[0]


def union_us(start: np.ndarray, end: np.ndarray) -> float:
    """Length of the union of intervals [start, end) in µs (inputs in ns)."""
    return union_ns(start, end) / 1000.0


def map_rank(task: MapTask) -> MapResult:
    """Summarise one rank into Parquet under ``<task.out>/rank=<rank>``; returns a small record.

    A rank whose tables of this :data:`TABLES_VERSION` are there already comes back ``cached``;
    a trace that cannot be read comes back with ``error`` ("<path>: <problem>") and no summary.
    """
    t0 = time.perf_counter()
    out = Path(task.out)
    final = out / f"rank={task.rank}"
    prev = _done(final / DONE)
    if prev is not None:
        return _result(task, t0, summary=prev, cached=True)
    if task.decode_workers:
        os.environ["PROFUSE_WORKERS"] = str(task.decode_workers)
    from ..trace import load

    work = out / f".rank={task.rank}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with load(task.path, lenient=task.lenient, cache=task.cache) as trace:
            work.mkdir(parents=True)
            summary = _write_rank(trace, work, fusion=task.fusion)
        (work / DONE).write_bytes(msgspec.json.encode(summary))
        if final.exists():
            shutil.rmtree(final)
        os.replace(work, final)
    except UserError as err:
        return _result(task, t0, error=str(err))
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return _result(task, t0, summary=summary, peak_rss=_peak_rss())


def _done(path: Path) -> RankSummary | None:
    """The summary a finished map of this :data:`TABLES_VERSION` left (None: none, older, or unreadable)."""
    if not path.is_file():
        return None
    try:
        prev = msgspec.json.decode(path.read_bytes(), type=RankSummary)
    except (OSError, msgspec.DecodeError):
        return None
    return prev if prev.tables_version == TABLES_VERSION else None


def _result(task: MapTask, t0: float, *, summary: RankSummary | None = None, error: str | None = None,
            cached: bool = False, peak_rss: int | None = None) -> MapResult:
    """The task's result, timed from ``t0``, with where it ran."""
    return MapResult(rank=task.rank, path=task.path, node=_node(), pid=os.getpid(),
                     seconds=time.perf_counter() - t0, cached=cached, peak_rss=peak_rss, summary=summary,
                     error=error)


def _peak_rss() -> int | None:
    """This worker process's peak resident memory so far, in bytes (None where unknown)."""
    try:
        import resource
    except ImportError:
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _node() -> str:
    """The Ray node this runs on when inside a Ray worker, else the host name."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return str(ray.get_runtime_context().get_node_id())
    return socket.gethostname()


def _steps_table(con: Any) -> dict[str, np.ndarray]:
    """Every step (the step model's, analysis/steps.py): its number, host start and length."""
    from ..analysis.steps import find_steps

    steps = find_steps(con)
    return {"step": np.array([s.number for s in steps], dtype=np.int64),
            "ts_ns": np.array([s.ts for s in steps], dtype=np.int64),
            "dur_us": np.array([(s.end - s.ts) / 1000 for s in steps], dtype=np.float64)}


def _collective_kernels(con: Any) -> list[str]:
    """The trace's kernel names that are collectives (analysis.kernel_class.is_collective: the one rule)."""
    return [n for (n,) in con.execute("SELECT DISTINCT name FROM events WHERE kind = 'kernel' AND name IS NOT NULL")
            .fetchall() if is_collective(n)]


def _collectives_table(con: Any, cpu_only: bool) -> dict[str, np.ndarray]:
    """Collective kernels (host annotations on a CPU-only trace), numbered per type in time order."""
    if cpu_only:
        rows = [r for r in con.execute("""
            SELECT id, name, ts, ts + dur, id FROM events WHERE kind = 'annotation' ORDER BY ts, id""").fetchall()
                if COMM_HOST.match(r[1] or "")]
    else:
        rows = con.execute("""
            SELECT id, name, ts, ts + dur, op FROM events
            WHERE kind = 'kernel' AND name IN (SELECT unnest(?::VARCHAR[])) ORDER BY ts, id""",
                           [_collective_kernels(con)]).fetchall()
    coll_bytes = _bytes_of(con, [r[4] for r in rows])
    seen: dict[str, int] = {}
    names, seqs = [], []
    for r in rows:
        c = collective_name(r[1])
        names.append(c)
        seqs.append(seen.get(c, 0))
        seen[c] = seen.get(c, 0) + 1
    return {"name": np.array(names, dtype=object), "seq": np.array(seqs, dtype=np.int64),
            "kernel": np.array([r[1] for r in rows], dtype=object),
            "start_ns": np.array([r[2] for r in rows], dtype=np.int64),
            "end_ns": np.array([r[3] for r in rows], dtype=np.int64),
            "bytes": np.array([coll_bytes.get(r[4]) for r in rows], dtype=object)}


Spans = tuple[np.ndarray, np.ndarray]


def _work_spans(con: Any, cpu_only: bool, coll: dict[str, np.ndarray]) -> tuple[Spans, Spans, Spans]:
    """(compute, communication, memory) as (starts, ends) in ns: device events by kind, or on a CPU-only
    trace the top-level CPU ops and annotations (work) and the collective annotations."""
    if cpu_only:
        top = con.execute(f"""
            SELECT ts, ts + dur AS e, name FROM events WHERE kind IN ('cpu_op', 'annotation') AND depth = 0
              AND NOT ({STEP_WHERE})""").fetchnumpy()
        work = np.array([not COMM_HOST.match(n or "") for n in top["name"]], dtype=bool)
        none = np.empty(0, dtype=np.int64)
        return (top["ts"][work], top["e"][work]), (coll["start_ns"], coll["end_ns"]), (none, none)
    dev = con.execute(f"""
        SELECT ts, ts + dur AS e, kind, kind = 'kernel' AND name IN (SELECT unnest(?::VARCHAR[])) AS comm
        FROM events WHERE kind IN ({DEVICE_TIME_SQL})""", [sorted(set(coll["kernel"].tolist()))]).fetchnumpy()
    s, e, kind, comm = dev["ts"], dev["e"], np.asarray(dev["kind"], dtype=object), np.asarray(dev["comm"], bool)
    mem = (kind == "memcpy") | (kind == "memset")
    return (s[~comm & ~mem], e[~comm & ~mem]), (s[comm], e[comm]), (s[mem], e[mem])


def _busy(trace: Any, comp: Spans, comm: Spans, mem: Spans) -> dict[str, float]:
    """Each part's union, compute/communication overlap, and busy, idle and unrecorded time: on a device trace
    the report's device busy (:func:`profuse.analysis.steps.device_busy`: its unrecorded waits are not idle),
    on a CPU-only one the union of the three over their window."""
    from ..analysis.busy import busy_of
    from ..analysis.steps import device_busy

    compute_us, comm_us = union_us(*comp), union_us(*comm)
    both_us = union_us(np.concatenate([comp[0], comm[0]]), np.concatenate([comp[1], comm[1]]))
    parts = {"compute_us": compute_us, "comm_us": comm_us, "memory_us": union_us(*mem),
             "overlap_us": compute_us + comm_us - both_us}
    busy = device_busy(trace) or busy_of(np.concatenate([comp[0], comm[0], mem[0]]).astype(np.int64),
                                         np.concatenate([comp[1], comm[1], mem[1]]).astype(np.int64))
    return {"busy_us": busy.busy_us, **parts, "unrecorded_us": busy.unrecorded_us, "idle_us": busy.idle_us}


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) else None


def _totals_table(trace: Any, busy: dict[str, float], durs: list[float], collectives: int) -> dict[str, np.ndarray]:
    """The rank's one-row totals."""
    from ..analysis.optable import total_device_us

    meta = trace.meta
    dist = meta.trace_meta.get("distributedInfo") or {}
    return {
        "path": np.array([str(trace.path)], dtype=object), "device_kind": np.array([trace.device_kind], dtype=object),
        "device_name": np.array([meta.device_name], dtype=object),
        "events": np.array([meta.events]), "span_us": np.array([meta.span_us]),
        "device_us": np.array([total_device_us(trace)]), **{k: np.array([v]) for k, v in busy.items()},
        "steps": np.array([len(durs)]), "step_median_us": np.array([statistics.median(durs) if durs else None],
                                                                   dtype=object),
        "world_size": np.array([_int_or_none(dist.get("world_size"))], dtype=object),
        "backend": np.array([dist.get("backend") if isinstance(dist.get("backend"), str) else None], dtype=object),
        "collectives": np.array([collectives]),
        "skipped_events": np.array([sum(meta.skipped.values())])}


def _ops_table(trace: Any) -> dict[str, np.ndarray]:
    """The op table grouped by op."""
    from ..analysis.optable import op_table

    rows = op_table(trace, group_by="op").rows
    return {"name": np.array([r.name for r in rows], dtype=object),
            "calls": np.array([r.calls for r in rows], dtype=np.int64),
            "self_cpu_us": np.array([r.self_cpu_us for r in rows], dtype=np.float64),
            "self_device_us": np.array([r.self_device_us for r in rows], dtype=np.float64),
            "device_total_us": np.array([r.device_total_us for r in rows], dtype=np.float64)}


def _fusion_table(trace: Any, fusion: bool) -> dict[str, np.ndarray]:
    """The rank's fusion candidates (none when ``fusion`` is off)."""
    cands = []
    if fusion:
        from ..analysis.advice.fusion import fusion_candidates

        cands = fusion_candidates(trace)
    return {"pattern": np.array([c.pattern for c in cands], dtype=object),
            "scope": np.array([c.scope for c in cands], dtype=object),
            "instances": np.array([c.instances for c in cands], dtype=np.int64),
            "device_us": np.array([c.device_us for c in cands], dtype=np.float64),
            "predicted_saving_us": np.array([c.predicted_saving_us for c in cands], dtype=np.float64),
            "recommendation": np.array([c.recommendation for c in cands], dtype=object),
            "confidence": np.array([c.confidence for c in cands], dtype=object)}


def _write_rank(trace: Any, folder: Path, *, fusion: bool) -> RankSummary:
    con = trace.con
    meta = trace.meta
    dist = meta.trace_meta.get("distributedInfo") or {}
    step_tab = _steps_table(con)
    coll_tab = _collectives_table(con, trace.cpu_only)
    durs = step_tab["dur_us"].tolist()
    totals = _totals_table(trace, _busy(trace, *_work_spans(con, trace.cpu_only, coll_tab)), durs, len(coll_tab["name"]))
    out = duckdb.connect()
    try:
        for name, cols in (("totals", totals), ("steps", step_tab), ("ops", _ops_table(trace)),
                           ("collectives", coll_tab), ("fusion", _fusion_table(trace, fusion))):
            write_parquet(out, folder / f"{name}.parquet", name, cols)
    finally:
        out.close()
    return RankSummary(events=meta.events, device_kind=trace.device_kind, collectives=len(coll_tab["name"]),
                       steps=len(durs), distributed_rank=_int_or_none(dist.get("rank")))


def _bytes_of(con: Any, ids: list[Any]) -> dict[Any, int]:
    """Bytes each collective moves: the recorded input tensors of its op, or of the nearest of the two
    ops enclosing it that recorded any (c10d::allreduce_ holds them when shapes were recorded)."""
    from ..analysis.opclass import tensors

    want = sorted({i for i in ids if i is not None})
    if not want:
        return {}
    rows = con.execute("""
        SELECT o.id, s0.input_dims, s0.input_types, s1.input_dims, s1.input_types, s2.input_dims, s2.input_types
        FROM events o LEFT JOIN shapes s0 ON s0.id = o.id
        LEFT JOIN events p ON p.id = o.parent_op LEFT JOIN shapes s1 ON s1.id = p.id
        LEFT JOIN events pp ON pp.id = p.parent_op LEFT JOIN shapes s2 ON s2.id = pp.id
        WHERE o.id IN (SELECT unnest(?))""", [want]).fetchall()
    out = {}
    for i, *shapes in rows:
        for dims, types in zip(shapes[::2], shapes[1::2]):
            ts = tensors(dims, types)
            if ts:
                out[i] = sum(t.nbytes for t in ts)
                break
    return out


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def write_parquet(con: duckdb.DuckDBPyConnection, path: Path, table: str, cols: dict[str, np.ndarray]) -> None:
    """Columns to a Parquet file, typed by :data:`SCHEMAS` (so empty tables keep their types)."""
    schema = SCHEMAS[table]
    n = len(next(iter(cols.values())))
    if n:
        con.register("_t", {k: cols[k] for k, _ in schema})
        select = ", ".join(f'CAST("{k}" AS {t}) AS "{k}"' for k, t in schema)
        con.execute(f"COPY (SELECT {select} FROM _t) TO {_sql_str(str(path))} (FORMAT parquet)")
        con.unregister("_t")
    else:
        select = ", ".join(f'CAST(NULL AS {t}) AS "{k}"' for k, t in schema)
        con.execute(f"COPY (SELECT {select} WHERE false) TO {_sql_str(str(path))} (FORMAT parquet)")
