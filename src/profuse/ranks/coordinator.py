"""One report over a whole distributed run: map each rank's trace to Parquet, reduce with DuckDB.

    result = run_ranks("traces/")                  # a folder (or glob) of rank traces
    result = run_ranks("run/*.json.gz", engine="ray", ray_address="head-node:6379")
    result.doc                                     # the profuse.ranks/1 document (a RanksDocument)

The map step (:func:`profuse.ranks.maptask.map_rank`) runs once per rank in a local process pool or
as Ray tasks and leaves only Parquet files under the set folder; the coordinator then queries those
files with DuckDB, so its memory does not grow with the number of ranks.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from ..analysis.compare import ranks as cross
from ..analysis.compare.ranks import RanksDocument
from ..errors import UserError
from ..trace.cache import fingerprint, user_cache_dir
from .discover import RankSet, candidates, discover
from .engine import ENGINES, Done, run_tasks
from .maptask import SCHEMAS, TABLES_VERSION, MapResult, MapTask

SCHEMA = cross.RANKS_SCHEMA
__all__ = ["ENGINES", "SCHEMA", "RanksResult", "candidates", "discover", "reduce", "run_ranks", "set_folder"]


@dataclass
class RanksResult:
    """What a rank run returns: the ranks document, the folder of per-rank Parquet, and how each map task went."""

    doc: RanksDocument                                   # the profuse.ranks/1 document
    folder: Path                                         # where the per-rank Parquet lies
    maps: list[MapResult] = field(default_factory=list)  # what each map task returned (node, seconds), by rank
    map_seconds: float = 0.0
    reduce_seconds: float = 0.0

    @property
    def nodes(self) -> list[str]:
        """The machines the map tasks ran on, sorted."""
        return sorted({m.node for m in self.maps})


def set_folder(rs: RankSet, *, work_dir: str | Path | None, lenient: bool, fusion: bool) -> Path:
    """The folder for one set of rank traces: named by what is in it, so a changed trace gets a new one."""
    h = hashlib.sha1()
    for t in rs.traces:
        h.update(json.dumps([t.rank, str(t.path), fingerprint(t.path)], sort_keys=True).encode())
    h.update(json.dumps([TABLES_VERSION, lenient, fusion]).encode())
    base = Path(work_dir) if work_dir else user_cache_dir() / "ranks"
    return base.resolve() / h.hexdigest()[:20]  # absolute: Ray workers do not share our working folder


def run_ranks(source: str, files: list[Path] | None = None, *, engine: str = "local",
              ray_address: str | None = None, workers: int | None = None, lenient: bool = False,
              cache: bool = True, fusion: bool = True, work_dir: str | Path | None = None,
              on_done: Done | None = None) -> RanksResult:
    """Discover the rank traces of ``source``, map each to Parquet, reduce across ranks."""
    if engine not in ENGINES:
        raise UserError(f"--engine must be one of {', '.join(ENGINES)} (got {engine!r})")
    rs = discover(source, files)
    folder = set_folder(rs, work_dir=work_dir, lenient=lenient, fusion=fusion)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"{folder}: cannot create the folder for per-rank tables: {err.strerror}") from None
    tasks = [MapTask(rank=t.rank, path=str(t.path), out=str(folder), lenient=lenient, cache=cache, fusion=fusion,
                     raw_size=t.raw_size) for t in rs.traces]
    t0 = time.perf_counter()
    maps = run_tasks(engine, tasks, ray_address_flag=ray_address, workers=workers, on_done=on_done)
    map_s = time.perf_counter() - t0
    failed = sorted((m for m in maps if m.error is not None), key=lambda m: m.rank)
    if failed:
        more = f" ({len(failed)} of {len(tasks)} rank traces failed)" if len(failed) > 1 else ""
        raise UserError(f"{failed[0].error}{more}")
    t1 = time.perf_counter()
    doc = reduce(folder, rs)
    return RanksResult(doc=doc, folder=folder, maps=sorted(maps, key=lambda m: m.rank), map_seconds=map_s,
                       reduce_seconds=time.perf_counter() - t1)


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


REDUCE_MEMORY = "512MB"  # DuckDB spills to the set folder beyond this: the coordinator stays bounded


def open_tables(folder: Path) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with one view per per-rank table over ``folder/rank=*/<table>.parquet``."""
    con = duckdb.connect(config={"memory_limit": REDUCE_MEMORY, "temp_directory": str(folder / ".spill")})
    for name in SCHEMAS:
        glob = _lit(str(folder / "rank=*" / f"{name}.parquet"))
        con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM read_parquet({glob}, hive_partitioning = true, '
                    "hive_types = {'rank': BIGINT})")
    return con


def reduce(folder: Path, rs: RankSet) -> RanksDocument:
    """The cross-rank document from the Parquet of every rank in ``rs`` (the analyses run in this order:
    each of clock offsets, collectives and stragglers reads the tables the one before it left)."""
    con = open_tables(folder)
    try:
        clock = cross.clock_offsets(con)
        coll = cross.collectives(con, clock)
        return RanksDocument(
            schema=SCHEMA, source=rs.source, rank_source=rs.rank_source, ranks_found=len(rs.traces), clock=clock,
            ranks=cross.rank_table(con, clock), stragglers=cross.stragglers(con), collectives=coll.calls,
            matched_rank_events=coll.matched_rank_events, unmatched_rank_events=coll.unmatched_rank_events,
            steps=cross.step_times(con), varying_ops=cross.varying_ops(con), fusion=cross.merged_fusion(con))
    finally:
        con.close()
