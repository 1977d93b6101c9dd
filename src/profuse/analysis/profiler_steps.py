"""The one reader of profiler steps: every ``ProfilerStep#N`` annotation of a trace, in time order.

A step is the host annotation torch.profiler's ``schedule`` writes around each ``step()``; its number
is the ``N`` of its name (its position among the steps where the name has none). Its length is the
annotation's own duration (wall time on the host thread that recorded it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

STEP_SQL = "kind = 'annotation' AND name LIKE 'ProfilerStep#%'"
_NUMBER = re.compile(r"#(\d+)")


@dataclass(frozen=True)
class ProfilerStep:
    """One profiler step: its number, start (ns), duration (ns) and host thread (None: unknown)."""

    number: int
    name: str
    ts_ns: int
    dur_ns: int
    thread: int | None


def profiler_steps(con: Any) -> list[ProfilerStep]:
    """The steps of the trace whose tables ``con`` (a DuckDB connection) holds, in time order."""
    rows = con.execute(f"SELECT name, ts, dur, thread FROM events WHERE {STEP_SQL} ORDER BY ts, id").fetchall()
    out = []
    for i, (name, ts, dur, thread) in enumerate(rows):
        m = _NUMBER.search(name)
        out.append(ProfilerStep(number=int(m.group(1)) if m else i, name=name, ts_ns=int(ts), dur_ns=int(dur),
                                thread=thread))
    return out
