"""The cross-rank document (``profuse.ranks/1``, docs/ranks.md) as typed records: what
``profuse report DIR --format json``, its HTML page and the explorer's Ranks view read."""
from __future__ import annotations

import msgspec

# the records are the analysis records themselves (analysis/compare/ranks.py), as OpsRow is OpRow: one record
# family; the reduce (profuse.ranks.reduce) returns the RanksDocument every renderer reads
from ..analysis.compare.ranks import (
    RANKS_DIFF_SCHEMA,
    RANKS_SCHEMA,
    Clock,
    ClockOffset,
    CollectiveCall,
    MergedCandidate,
    RankDelta,
    RankRow,
    RanksDiff,
    RanksDocument,
    RunSummary,
    StepTimes,
    Straggler,
    VaryingOp,
)

__all__ = ["RANKS_DIFF_SCHEMA", "RANKS_SCHEMA", "Clock", "ClockOffset", "CollectiveCall", "MergedCandidate",
           "RankDelta", "RankRow", "RanksDiff", "RanksDocument", "RunSummary", "StepTimes", "Straggler", "VaryingOp",
           "ranks_payload"]


def ranks_payload(data: object) -> RanksDocument:
    """A cross-rank document: a :class:`RanksDocument` as it is, or JSON-shaped values (a saved
    ``--format json`` read back) checked against the record (a wrong type raises, naming the key)."""
    if isinstance(data, RanksDocument):
        return data
    return msgspec.convert(data, RanksDocument)
