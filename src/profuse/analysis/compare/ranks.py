"""Cross-rank analyses: pure functions over the reduced per-rank tables of a distributed run.

Each function takes a DuckDB connection on which the per-rank tables are views with a ``rank``
column (``totals``, ``steps``, ``ops``, ``collectives``, ``fusion``; see ``profuse.ranks.maptask``)
and returns typed records (msgspec Structs); :class:`RanksDocument` holds them all, the cross-rank
document ``profuse.ranks/1`` (``payloads.ranks`` re-exports it for the renderers). Times are µs unless
a name says ns.

Collectives are matched across ranks by their type and order on each rank: the k-th AllReduce of
every rank is one call. A rank *arrives* at a call when its collective kernel starts (on a host
without a device, when its collective annotation starts). All ranks leave a call together, so the
median difference of its end times from the reference rank's (the lowest rank) estimates each
rank's clock offset; arrivals are compared after removing it. The last rank to arrive made every
other rank wait ``last arrival - its arrival``; the sum of those waits is the wait it caused.
"""
from __future__ import annotations

import statistics
from typing import Any

import duckdb
import msgspec

from .significance import Verdict

RANKS_SCHEMA = "profuse.ranks/1"
RANKS_DIFF_SCHEMA = "profuse.ranks-diff/1"
TOP = 20
# Per-rank arrivals of every call go into the document up to this many ranks; beyond, the document
# would grow with ranks x calls, so it keeps skew and last arriver and the Parquet keeps the arrivals.
ARRIVALS_MAX_RANKS = 256


class RankRow(msgspec.Struct):
    """One rank's totals (µs), overlap of compute and communication, and clock offset (None: unknown)."""

    rank: int
    path: str
    device_kind: str
    device_name: str | None
    events: int
    span_us: float | None
    device_us: float | None
    busy_us: float | None
    compute_us: float | None
    comm_us: float | None
    memory_us: float | None
    idle_us: float | None         # the device window less busy and unrecorded_us
    overlap_us: float | None
    overlap_pct: float | None
    steps: int
    step_median_us: float | None
    collectives: int
    world_size: int | None
    backend: str | None
    clock_offset_us: float | None
    skipped_events: int
    unrecorded_us: float | None = None   # the report's unrecorded waits (device_busy), not idle; None: an older document


class Straggler(msgspec.Struct):
    """A rank with the wait it caused others as the last arriver."""

    rank: int
    late_collectives: int
    wait_caused_us: float


class CollectiveCall(msgspec.Struct):
    """One collective call matched on every rank: skew, last arriver, per-rank arrivals (µs)."""

    name: str
    seq: int
    bytes: int | None
    skew_us: float
    last_arriver: int | None
    end_spread_us: float
    arrivals_us: list[float] | None


class StepTimes(msgspec.Struct):
    """The rank x step heat map: ``dur_us[rank index][step index]`` (None: the rank has no such step)."""

    steps: list[int]
    ranks: list[int]
    dur_us: list[list[float | None]]


class VaryingOp(msgspec.Struct):
    """An op whose device time differs between ranks."""

    name: str
    ranks: int
    min_us: float | None
    max_us: float | None
    mean_us: float | None
    spread_us: float | None
    min_rank: int | None
    max_rank: int | None


class MergedCandidate(msgspec.Struct):
    """A fusion candidate merged over the ranks that have it: ``instances`` and ``device_us`` summed over
    them; the saving per rank (the median over every rank, 0 where absent) and per profiled step (the
    smallest over the ranks, which run in parallel; None when a rank recorded no step), never a sum."""

    pattern: str
    scope: str
    ranks: int
    instances: int
    device_us: float | None
    saving_per_rank_us: float | None
    step_saving_us: float | None
    recommendation: str
    confidence: str


class ClockOffset(msgspec.Struct):
    """A rank's clock offset from the reference rank and how many collective calls it rests on."""

    rank: int
    offset_us: float | None
    collectives: int


class Clock(msgspec.Struct):
    """Clock alignment: the reference rank (the lowest) and every rank's offset."""

    reference_rank: int | None
    offsets: list[ClockOffset]


class CollectiveCalls(msgspec.Struct):
    """Every collective call matched on all ranks, and how many rank events were matched or not."""

    calls: list[CollectiveCall]
    matched_rank_events: int
    unmatched_rank_events: int


class RanksDocument(msgspec.Struct):
    """The cross-rank report of one distributed run."""

    schema: str
    source: str
    rank_source: str
    ranks_found: int
    clock: Clock
    ranks: list[RankRow]
    stragglers: list[Straggler]
    collectives: list[CollectiveCall]
    matched_rank_events: int
    unmatched_rank_events: int
    steps: StepTimes
    varying_ops: list[VaryingOp]
    fusion: list[MergedCandidate]


class RunSummary(msgspec.Struct):
    """One side of a ranks diff: the run's medians over its ranks (µs), total wait and top straggler."""

    source: str
    ranks: int
    step_median_us: float | None
    slowest_step_median_us: float | None
    device_us_median: float | None
    comm_us_median: float | None
    idle_us_median: float | None
    wait_us_total: float | None
    top_straggler: int | None


class RankDelta(msgspec.Struct):
    """One rank of a ranks diff (matched by rank number): A's and B's figures and B - A (None: unknown)."""

    rank: int
    a_step_median_us: float | None
    b_step_median_us: float | None
    delta_step_median_us: float | None
    a_device_us: float | None
    b_device_us: float | None
    delta_device_us: float | None
    a_comm_us: float | None
    b_comm_us: float | None
    delta_comm_us: float | None
    a_idle_us: float | None
    b_idle_us: float | None
    delta_idle_us: float | None
    a_wait_caused_us: float | None
    b_wait_caused_us: float | None


class RanksDiff(msgspec.Struct, omit_defaults=True):
    """Two cross-rank documents compared (``profuse.ranks-diff/1``): run level, then rank by rank.
    ``verdicts`` (two folders compared by ``profuse diff``: one figure per trace, the distributions
    tested) is left out when not set."""

    schema: str
    a: RunSummary
    b: RunSummary
    step_speedup: float | None
    ranks_only_in_a: list[int]
    ranks_only_in_b: list[int]
    per_rank: list[RankDelta]
    verdicts: list[Verdict] | None = None


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, params or [])
    cols = [d[0] for d in cur.description or []]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


MATCHED = """
    CREATE OR REPLACE TEMP TABLE matched AS
    SELECT c.rank, c.name, c.seq, c.start_ns, c.end_ns, c.bytes FROM collectives c JOIN (
        SELECT name, seq FROM collectives GROUP BY name, seq
        HAVING count(DISTINCT rank) = (SELECT count(*) FROM totals)) m USING (name, seq)"""


def clock_offsets(con: duckdb.DuckDBPyConnection) -> Clock:
    """Each rank's clock offset from the reference rank, from collective end times (None: unknown).

    The offsets are also left, exact in ns (0 where unknown), in the table ``offsets`` that
    :func:`collectives` aligns the arrivals with."""
    con.execute(MATCHED)
    ref = con.execute("SELECT min(rank) FROM totals").fetchall()[0][0]
    rows: list[tuple[int, int | None, int]] = con.execute("""
        SELECT t.rank, CAST(round(median(c.end_ns - r.end_ns)) AS BIGINT) AS offset_ns, count(c.seq) AS collectives
        FROM totals t LEFT JOIN matched c ON c.rank = t.rank
        LEFT JOIN matched r ON r.rank = ? AND r.name = c.name AND r.seq = c.seq
        GROUP BY t.rank ORDER BY t.rank""", [ref]).fetchall()
    con.execute("CREATE OR REPLACE TEMP TABLE offsets (rank BIGINT, offset_ns BIGINT)")
    if rows:
        con.executemany("INSERT INTO offsets VALUES (?, ?)", [(rank, ns or 0) for rank, ns, _ in rows])
    return Clock(reference_rank=ref,
                 offsets=[ClockOffset(rank=rank, offset_us=None if ns is None else ns / 1000, collectives=int(n))
                          for rank, ns, n in rows])


def _aligned(con: duckdb.DuckDBPyConnection) -> None:
    """View ``arrivals``: every matched call on every rank, on the reference rank's clock (the
    ``offsets`` :func:`clock_offsets` left)."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE arrivals AS
        SELECT m.name, m.seq, m.rank, m.bytes, m.start_ns - o.offset_ns AS arr, m.end_ns - o.offset_ns AS fin,
               max(m.start_ns - o.offset_ns) OVER w AS last, min(m.start_ns - o.offset_ns) OVER w AS first,
               row_number() OVER (PARTITION BY m.name, m.seq ORDER BY m.start_ns - o.offset_ns DESC, m.rank) AS pos
        FROM matched m JOIN offsets o USING (rank)
        WINDOW w AS (PARTITION BY m.name, m.seq)""")


def collectives(con: duckdb.DuckDBPyConnection, clock: Clock) -> CollectiveCalls:
    """Every matched collective call: per-rank arrival (µs after the first), skew, the last arriver
    (needs :func:`clock_offsets` first, which gave ``clock``)."""
    _aligned(con)
    with_arrivals = len(clock.offsets) <= ARRIVALS_MAX_RANKS
    arrivals = "list(arr - first ORDER BY rank)" if with_arrivals else "NULL"
    calls = _rows(con, f"""
        SELECT name, seq, max(bytes) AS bytes, min(first) AS first_ns, max(last) - min(first) AS skew_ns,
               CASE WHEN max(last) > min(first) THEN min(rank) FILTER (WHERE pos = 1) END AS last_arriver,
               {arrivals} AS arrivals_ns, max(fin) - min(fin) AS end_spread_ns
        FROM arrivals GROUP BY name, seq ORDER BY first_ns, name, seq""")
    total, matched = con.execute(
        "SELECT (SELECT count(*) FROM collectives), (SELECT count(*) FROM matched)").fetchall()[0]
    out = [CollectiveCall(name=c["name"], seq=c["seq"], bytes=c["bytes"], skew_us=c["skew_ns"] / 1000,
                          last_arriver=c["last_arriver"], end_spread_us=c["end_spread_ns"] / 1000,
                          arrivals_us=None if c["arrivals_ns"] is None else [a / 1000 for a in c["arrivals_ns"]])
           for c in calls]
    return CollectiveCalls(calls=out, matched_rank_events=int(matched), unmatched_rank_events=int(total - matched))


def stragglers(con: duckdb.DuckDBPyConnection) -> list[Straggler]:
    """Ranks by the wait they caused others as the last arriver (needs :func:`collectives` first)."""
    return [Straggler(rank=r["rank"], late_collectives=int(r["late"]), wait_caused_us=(r["wait"] or 0) / 1000)
            for r in _rows(con, """
        WITH per_call AS (
            SELECT name, seq, min(rank) FILTER (WHERE pos = 1) AS rank, sum(last - arr) AS wait,
                   max(last) - min(first) AS skew
            FROM arrivals GROUP BY name, seq)
        SELECT t.rank, count(p.seq) AS late, CAST(sum(p.wait) AS BIGINT) AS wait
        FROM totals t LEFT JOIN per_call p ON p.rank = t.rank AND p.skew > 0
        GROUP BY t.rank ORDER BY wait DESC NULLS LAST, t.rank""")]


def rank_table(con: duckdb.DuckDBPyConnection, clock: Clock) -> list[RankRow]:
    """One row per rank: its totals, compute/communication overlap and clock offset."""
    off = {o.rank: o.offset_us for o in clock.offsets}
    out = []
    for r in _rows(con, "SELECT * FROM totals ORDER BY rank"):
        comm = r["comm_us"] or 0.0
        out.append(RankRow(
            rank=r["rank"], path=r["path"], device_kind=r["device_kind"], device_name=r["device_name"],
            events=r["events"], span_us=_r(r["span_us"]), device_us=_r(r["device_us"]),
            busy_us=_r(r["busy_us"]), compute_us=_r(r["compute_us"]), comm_us=_r(comm),
            memory_us=_r(r["memory_us"]), idle_us=_r(r["idle_us"]),
            unrecorded_us=_r(r["unrecorded_us"]), overlap_us=_r(r["overlap_us"]),
            overlap_pct=_r(100.0 * r["overlap_us"] / comm, 1) if comm else None,
            steps=r["steps"], step_median_us=_r(r["step_median_us"]), collectives=r["collectives"],
            world_size=r["world_size"], backend=r["backend"], clock_offset_us=off.get(r["rank"]),
            skipped_events=r["skipped_events"]))
    return out


def step_times(con: duckdb.DuckDBPyConnection) -> StepTimes:
    """Rank x step: each profiler step's wall time, for the heat map."""
    steps = [r[0] for r in con.execute("SELECT DISTINCT step FROM steps ORDER BY step").fetchall()]
    ranks = [r[0] for r in con.execute("SELECT rank FROM totals ORDER BY rank").fetchall()]
    cell = {(r, s): d for r, s, d in con.execute("SELECT rank, step, dur_us FROM steps").fetchall()}
    return StepTimes(steps=steps, ranks=ranks, dur_us=[[_r(cell.get((r, s))) for s in steps] for r in ranks])


def varying_ops(con: duckdb.DuckDBPyConnection, top: int = TOP) -> list[VaryingOp]:
    """Ops whose device time differs most between ranks (max - min over the ranks that ran them)."""
    return [VaryingOp(name=r["name"], ranks=r["ranks"], min_us=_r(r["lo"]), max_us=_r(r["hi"]),
                      mean_us=_r(r["mean"]), spread_us=_r(r["hi"] - r["lo"]), min_rank=r["min_rank"],
                      max_rank=r["max_rank"])
            for r in _rows(con, """
        WITH s AS (SELECT name, count(*) AS ranks, min(self_device_us) AS lo, max(self_device_us) AS hi,
                          avg(self_device_us) AS mean FROM ops GROUP BY name HAVING count(*) > 1)
        SELECT s.*, min(o.rank) FILTER (WHERE o.self_device_us = s.lo) AS min_rank,
               min(o.rank) FILTER (WHERE o.self_device_us = s.hi) AS max_rank
        FROM s JOIN ops o USING (name) WHERE s.hi - s.lo > 0.0005
        GROUP BY s.name, s.ranks, s.lo, s.hi, s.mean ORDER BY s.hi - s.lo DESC, s.name LIMIT ?""", [top])]


def merged_fusion(con: duckdb.DuckDBPyConnection, top: int = TOP) -> list[MergedCandidate]:
    """Each rank's fusion candidates merged: the same (pattern, scope) on N ranks is one row with N.

    Ranks run in parallel, so a saving is never summed over them: ``saving_per_rank_us`` is the median,
    over every rank of the run (0 on a rank without the candidate), of what it saves over its trace;
    ``step_saving_us`` is what a profiled step saves: ranks meet at collectives every step, so a step
    ends when the slowest rank does and shrinks by what every rank saves in it, the smallest
    ``saving / steps`` over the ranks (None when a rank recorded no step)."""
    steps = dict(con.execute("SELECT rank, steps FROM totals").fetchall())
    per_rank = _rows(con, """
        SELECT pattern, scope, rank, sum(instances) AS instances, sum(device_us) AS device_us,
               sum(predicted_saving_us) AS saving, min(recommendation) AS recommendation,
               min(confidence) AS confidence
        FROM fusion GROUP BY pattern, scope, rank""")
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in per_rank:
        groups.setdefault((r["pattern"], r["scope"]), []).append(r)
    out = [_merged(pattern, scope, rows, steps) for (pattern, scope), rows in groups.items()]
    out.sort(key=lambda m: (-(m.saving_per_rank_us or 0.0), m.pattern, m.scope))
    return out[:top]


def _merged(pattern: str, scope: str, rows: list[dict[str, Any]], steps: dict[int, int]) -> MergedCandidate:
    """One candidate over the ranks of the run (see :func:`merged_fusion`)."""
    saving = {r["rank"]: float(r["saving"] or 0.0) for r in rows}
    every = [saving.get(rank, 0.0) for rank in steps]
    per_step = [saving.get(rank, 0.0) / n for rank, n in steps.items() if n] if all(steps.values()) else []
    return MergedCandidate(pattern=pattern, scope=scope, ranks=len(rows), instances=sum(r["instances"] for r in rows),
                           device_us=_r(sum(r["device_us"] or 0.0 for r in rows)),
                           saving_per_rank_us=_r(statistics.median(every)) if every else None,
                           step_saving_us=_r(min(per_step)) if per_step else None,
                           recommendation=min(r["recommendation"] for r in rows),
                           confidence=min(r["confidence"] for r in rows))


def _median(vals: list[float | None]) -> float | None:
    xs = [v for v in vals if v is not None]
    return statistics.median(xs) if xs else None


def _run_summary(doc: RanksDocument) -> RunSummary:
    """A run's side of a ranks diff."""
    ranks = doc.ranks
    return RunSummary(
        source=doc.source, ranks=len(ranks),
        step_median_us=_r(_median([r.step_median_us for r in ranks])),
        slowest_step_median_us=_r(max((r.step_median_us for r in ranks if r.step_median_us is not None),
                                      default=None)),
        device_us_median=_r(_median([r.device_us for r in ranks])),
        comm_us_median=_r(_median([r.comm_us for r in ranks])),
        idle_us_median=_r(_median([r.idle_us for r in ranks])),
        wait_us_total=_r(sum(s.wait_caused_us for s in doc.stragglers)),
        top_straggler=next((s.rank for s in doc.stragglers if s.late_collectives), None))


Figures = tuple[float | None, float | None, float | None, float | None]


def _figures(r: RankRow | None) -> Figures:
    """What a ranks diff compares of a rank: step median, device, communication and idle time (None: no such rank)."""
    return (None, None, None, None) if r is None else (r.step_median_us, r.device_us, r.comm_us, r.idle_us)


def _rank_delta(rank: int, a: Figures, b: Figures, waits: tuple[float | None, float | None]) -> RankDelta:
    """One rank's row of a ranks diff: A's and B's figures and their change."""
    d = [_r(vb - va) if va is not None and vb is not None else None for va, vb in zip(a, b)]
    return RankDelta(rank=rank, a_step_median_us=a[0], b_step_median_us=b[0], delta_step_median_us=d[0],
                     a_device_us=a[1], b_device_us=b[1], delta_device_us=d[1],
                     a_comm_us=a[2], b_comm_us=b[2], delta_comm_us=d[2],
                     a_idle_us=a[3], b_idle_us=b[3], delta_idle_us=d[3],
                     a_wait_caused_us=waits[0], b_wait_caused_us=waits[1])


def diff_docs(a: RanksDocument, b: RanksDocument) -> RanksDiff:
    """Two cross-rank documents compared: run-level medians, then rank by rank (matched by rank number)."""
    ra, rb = _run_summary(a), _run_summary(b)
    sa, sb = ra.step_median_us, rb.step_median_us
    by_a = {r.rank: r for r in a.ranks}
    by_b = {r.rank: r for r in b.ranks}
    wait_a = {s.rank: s.wait_caused_us for s in a.stragglers}
    wait_b = {s.rank: s.wait_caused_us for s in b.stragglers}
    rows = [_rank_delta(rank, _figures(by_a.get(rank)), _figures(by_b.get(rank)), (wait_a.get(rank), wait_b.get(rank)))
            for rank in sorted(set(by_a) | set(by_b))]
    return RanksDiff(schema=RANKS_DIFF_SCHEMA, a=ra, b=rb, step_speedup=_r(sa / sb, 3) if sa and sb else None,
                     ranks_only_in_a=sorted(set(by_a) - set(by_b)), ranks_only_in_b=sorted(set(by_b) - set(by_a)),
                     per_rank=rows)
