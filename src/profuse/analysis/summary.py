"""Trace-level totals: device time, how many device events were linked to ops, and why not."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..trace.schema import DEVICE_TIME_KINDS
from .optable import total_device_us

if TYPE_CHECKING:
    from ..trace import Trace  # annotations only: importing analysis for --help costs no DuckDB

_DEVICE = ", ".join(f"'{k}'" for k in DEVICE_TIME_KINDS)


@dataclass(frozen=True)
class Summary:
    path: str
    device_kind: str
    device_name: str | None
    events: int
    span_us: float
    device_us: float
    kernels: int            # device events that take device time: kernels, memcpy, memset
    kernels_linked: int     # of those, linked to the op that launched them
    unlinked: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    unmatched_flows: int = 0
    from_cache: bool = False
    bundle_status: str | None = None   # a profuse bundle's status (complete / failed), else None
    bundle_error: str | None = None


def summarize(trace: Trace) -> Summary:
    m = trace.meta
    kernels, linked = trace.con.execute(
        f"SELECT count(*), count(op) FROM events WHERE kind IN ({_DEVICE})").fetchall()[0]
    return Summary(path=str(trace.path), device_kind=m["device_kind"], device_name=m.get("device_name"),
                   events=int(m["events"]), span_us=float(m["span_us"]), device_us=total_device_us(trace),
                   kernels=int(kernels), kernels_linked=int(linked), unlinked=dict(m.get("unlinked") or {}),
                   skipped=dict(m.get("skipped") or {}), unmatched_flows=int(m.get("unmatched_flows") or 0),
                   from_cache=trace.from_cache, **_bundle_status(trace))


def _bundle_status(trace: Trace) -> dict[str, str | None]:
    """A bundle's meta.json says whether the capture completed; plain traces have none."""
    try:
        meta = json.loads((trace.path.parent / "meta.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(meta, dict) or meta.get("schema") != "profuse.bundle/1":
        return {}
    run = meta.get("run") or {}
    return {"bundle_status": meta.get("status"), "bundle_error": meta.get("error") or run.get("error")}
