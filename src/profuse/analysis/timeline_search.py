"""Search the timeline by name: the drawn events whose name holds a text (case-insensitive), in time
order, as the timeline's search box asks for them. It reads the lane model (:mod:`.timeline`), so what
it finds is exactly what the timeline can draw and select."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .timeline import TimelineModel

MAX_MATCHES = 500  # matches sent at most (the first in time); ``total`` counts them all


@dataclass(frozen=True)
class Match:
    """One drawn event whose name matched; ``ts`` and ``dur`` in µs from the trace start, as drawn."""

    id: int
    name: str
    kind: str
    ts: float
    dur: float
    lane: int


@dataclass
class TimelineMatches:
    """The matches of ``query`` in time order: the first ``len(matches)`` of ``total``."""

    query: str
    total: int
    matches: list[Match] = field(default_factory=list)


def search_timeline(model: TimelineModel, query: str, limit: int = MAX_MATCHES) -> TimelineMatches:
    """The drawn events whose name contains ``query`` (ignoring case), the first ``limit`` by start."""
    needle = query.casefold()
    out = TimelineMatches(query=query, total=0)
    if not needle:
        return out
    codes = [i for i, name in enumerate(model.names) if name is not None and needle in name.casefold()]
    if not codes:
        return out
    model.con.execute("CREATE OR REPLACE TEMP TABLE tl_found AS SELECT unnest($1::BIGINT[]) AS code", [codes])
    try:
        out.total = int(model.con.execute(
            "SELECT count(*) FROM tl WHERE code IN (SELECT code FROM tl_found)").fetchall()[0][0])
        rows = model.con.execute("""
            SELECT id, code, ts, dur, lane FROM tl WHERE code IN (SELECT code FROM tl_found)
            ORDER BY ts, id LIMIT $1""", [limit]).fetchall()
    finally:
        model.con.execute("DROP TABLE IF EXISTS tl_found")
    out.matches = [Match(id=int(i), name=model.names[c] or "", kind=model.kinds[c], ts=round(ts / 1e3, 3),
                         dur=round(dur / 1e3, 3), lane=int(lane)) for i, c, ts, dur, lane in rows]
    return out
