"""The cross-rank document (``profuse.ranks/1``, docs/ranks.md) as typed records: what
``profuse report DIR --format json``, its HTML page and the explorer's Ranks view read."""
from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Struct

RANKS_SCHEMA = "profuse.ranks/1"


class RankRow(Struct):
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
    idle_us: float | None
    overlap_us: float | None
    overlap_pct: float | None
    steps: int
    step_median_us: float | None
    collectives: int
    world_size: int | None
    backend: str | None
    clock_offset_us: float | None
    skipped_events: int


class ClockOffset(Struct):
    """A rank's clock offset from the reference rank and how many collective calls it rests on."""

    rank: int
    offset_us: float | None
    collectives: int


class Clock(Struct):
    """Clock alignment: the reference rank (the lowest) and every rank's offset."""

    reference_rank: int | None
    offsets: list[ClockOffset]


class Straggler(Struct):
    """A rank with the wait it caused others as the last arriver."""

    rank: int
    late_collectives: int
    wait_caused_us: float


class CollectiveCall(Struct):
    """One collective call matched on every rank: skew, last arriver, per-rank arrivals (µs)."""

    name: str
    seq: int
    bytes: int | None
    skew_us: float
    last_arriver: int | None
    end_spread_us: float
    arrivals_us: list[float] | None


class StepTimes(Struct):
    """The rank x step heat map: ``dur_us[rank index][step index]`` (None: the rank has no such step)."""

    steps: list[int]
    ranks: list[int]
    dur_us: list[list[float | None]]


class VaryingOp(Struct):
    """An op whose device time differs between ranks."""

    name: str
    ranks: int
    min_us: float | None
    max_us: float | None
    mean_us: float | None
    spread_us: float | None
    min_rank: int | None
    max_rank: int | None


class MergedCandidate(Struct):
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


class RanksDocument(Struct):
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


def ranks_payload(doc: dict[str, Any]) -> RanksDocument:
    """The reduce's document, checked against the record (a wrong type raises, naming the key)."""
    return msgspec.convert(doc, RanksDocument)
