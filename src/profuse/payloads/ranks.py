"""The cross-rank document (``profuse.ranks/1``, docs/ranks.md) as typed records: what
``profuse report DIR --format json``, its HTML page and the explorer's Ranks view read."""
from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Struct

from ..analysis.compare.ranks import CollectiveCall, MergedCandidate, RankRow, StepTimes, Straggler, VaryingOp

RANKS_SCHEMA = "profuse.ranks/1"
# the rows are the analysis records themselves (analysis/compare/ranks.py), as OpsRow is OpRow: one record family
__all__ = ["RANKS_SCHEMA", "Clock", "ClockOffset", "CollectiveCall", "MergedCandidate", "RankRow", "RanksDocument",
           "StepTimes", "Straggler", "VaryingOp", "ranks_payload"]


class ClockOffset(Struct):
    """A rank's clock offset from the reference rank and how many collective calls it rests on."""

    rank: int
    offset_us: float | None
    collectives: int


class Clock(Struct):
    """Clock alignment: the reference rank (the lowest) and every rank's offset."""

    reference_rank: int | None
    offsets: list[ClockOffset]


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
