"""Device memory from the ``memory`` table: the peak per device, when it happened and what is live at it.

Pure functions over a loaded trace (see docs/memory.md for the rules). The peak of a device is the
largest ``Total Allocated`` any of its memory events reports (the first event reaching it); what is
live at it is every allocation made at or before that event and not freed by then, grouped by the op
and module that allocated it; what the totals hold beyond those is memory allocated before the trace
(weights, caches, anything the capture window did not see allocated).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from .._lazy import lazy_module
from .._progress import timed
from ._memo import once_per_trace

if TYPE_CHECKING:
    import duckdb

    from ..trace import Trace
else:  # DuckDB loads on first use: the records here are read without it
    duckdb = lazy_module("duckdb", globals(), "duckdb")

BEFORE_TRACE = "(allocated before the trace)"
# the trace's start: its first event, or (a memory snapshot has no events) its first memory entry
_T0 = "SELECT coalesce((SELECT min(ts) FROM events), (SELECT min(ts) FROM memory), 0)"
# a snapshot entry's allocation site as text: 'name (file:line)'
_SITE = "fr.name || ' (' || fr.filename || ':' || fr.line || ')'"


class LiveGroup(msgspec.Struct, frozen=True):
    """Bytes live at a peak that one op (in one module) allocated; ``op`` is BEFORE_TRACE for the rest."""

    op: str
    module: str | None
    bytes: int
    allocations: int


class PeakAt(msgspec.Struct, frozen=True):
    """Where a peak happened: the memory event's time (ns since the trace's first event), step, op, module."""

    ts_ns: int
    step: str | None
    op: str | None
    module: str | None
    frame: str | None = None  # a memory snapshot's allocation site (its frames; traces have none)


class DevicePeak(msgspec.Struct, frozen=True):
    """One device's memory: its peak allocated and reserved bytes, when, and what is live at the peak."""

    device: str                     # 'CUDA 0', 'ROCm 0', 'CPU', ...
    events: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    reserved_at_peak_bytes: int     # Total Reserved at the peak allocation
    gap_bytes: int | None           # reserved - allocated at the peak: cached by the allocator, not in use
                                    # (None where nothing is reported reserved: CPU memory)
    peak_at: PeakAt
    peak_id: int                    # the memory event (memory.id) that first reached the peak
    live_at_peak: list[LiveGroup]


class MemorySection(msgspec.Struct, frozen=True):
    """Every device with memory events, its peak and what is live at it (the CPU last); the JSON report's
    ``memory`` (payloads.memory.MemoryPayload is this record)."""

    devices: list[DevicePeak]


@timed("memory")
def memory_section(trace: Trace, live_rows: int = 20) -> MemorySection | None:
    """The memory section of a loaded trace, or None for a trace without memory events."""
    peaks = memory_peaks(trace, live_rows)
    return MemorySection(devices=peaks) if peaks else None


def has_memory(trace: Trace) -> bool:
    """Whether the trace has memory events (``profile_memory=True``)."""
    return _has_memory(trace)


@once_per_trace
def _has_memory(trace: Trace) -> bool:
    try:
        (n,) = trace.con.execute("SELECT count(*) FROM memory").fetchone() or (0,)
    except duckdb.CatalogException:  # tables built without a memory table (neuron-explorer Parquet)
        return False
    return bool(n)


def device_label(device_type: str, device: int | None) -> str:
    """'CUDA 0' for a device, 'CPU' for host memory."""
    return device_type if device is None else f"{device_type} {device}"


def memory_peaks(trace: Trace, live_rows: int = 20) -> list[DevicePeak]:
    """The peak of every device with memory events, devices first (in order), the CPU last."""
    if not has_memory(trace):
        return []
    return _peaks(trace, live_rows)


@once_per_trace
def _peaks(trace: Trace, live_rows: int) -> list[DevicePeak]:
    con = trace.con
    (t0,) = con.execute(_T0).fetchone() or (0,)
    devices = con.execute("""
        SELECT device_type, device, count(*), max(total_allocated), max(total_reserved),
               min(id) FILTER (WHERE total_allocated = m)
        FROM (SELECT *, max(total_allocated) OVER (PARTITION BY device_type, device) AS m FROM memory)
        GROUP BY device_type, device ORDER BY device_type = 'CPU', device_type, device""").fetchall()
    out = []
    for dtype, dev, n, peak, peak_res, at in devices:
        (ts, reserved, step, op, module, frame) = con.execute(f"""
            SELECT m.ts, m.total_reserved, s.name, o.name, sc.name, {_SITE} FROM memory m
            LEFT JOIN events s ON s.id = m.step LEFT JOIN events o ON o.id = m.op
            LEFT JOIN scopes sc ON sc.id = m.module LEFT JOIN memory_frames fr ON fr.id = m.id AND fr.site
            WHERE m.id = ?""", [at]).fetchone() or (0, 0, None, None, None, None)
        shown = _shown(_live(con, dtype, dev, int(at)), int(peak), live_rows)
        out.append(DevicePeak(device=device_label(dtype, dev), events=int(n), peak_allocated_bytes=int(peak),
                              peak_reserved_bytes=int(peak_res), reserved_at_peak_bytes=int(reserved),
                              gap_bytes=_gap(int(reserved), int(peak)) if peak_res else None,
                              peak_at=PeakAt(ts_ns=int(ts) - int(t0), step=step, op=op, module=module, frame=frame),
                              peak_id=int(at),
                              live_at_peak=shown))
    return out


def _shown(groups: list[LiveGroup], allocated: int, live_rows: int) -> list[LiveGroup]:
    """The first ``live_rows`` groups, one "(N more)" row for the rest, then what the total holds beyond
    them (allocated before the trace). Where the events' own total is below what they show live (a
    malformed trace: its ``Total Allocated`` disagrees with its ``Bytes``) there is no such row: never
    a negative one."""
    shown = groups[:live_rows]
    if len(groups) > live_rows:
        rest = groups[live_rows:]
        shown.append(LiveGroup(op=f"({len(rest)} more)", module=None, bytes=sum(g.bytes for g in rest),
                               allocations=sum(g.allocations for g in rest)))
    before = allocated - sum(g.bytes for g in groups)
    if before > 0:
        shown.append(LiveGroup(op=BEFORE_TRACE, module=None, bytes=before, allocations=0))
    return shown


def _gap(reserved: int, allocated: int) -> int | None:
    """Reserved minus allocated; None where the reserved figure is below the allocated one (a malformed
    trace: the caching allocator never holds less than it hands out), never a negative gap."""
    return reserved - allocated if reserved >= allocated else None


def _live(con: duckdb.DuckDBPyConnection, dtype: str, dev: int | None, at: int) -> list[LiveGroup]:
    """Allocations on the device made at or before memory event ``at`` and not freed by then, grouped by
    the op (or a snapshot's frame) and module that made them, most bytes first."""
    groups = con.execute(f"""
        SELECT coalesce(o.name, {_SITE}, '(no op)'), sc.name, sum(a.bytes), count(*) FROM memory a
        LEFT JOIN memory f ON f.id = a.free LEFT JOIN events o ON o.id = a.op
        LEFT JOIN scopes sc ON sc.id = a.module LEFT JOIN memory_frames fr ON fr.id = a.id AND fr.site
        WHERE a.device_type = ? AND a.device IS NOT DISTINCT FROM ? AND a.bytes > 0 AND a.id <= ?
          AND (f.id IS NULL OR f.id > ?)
        GROUP BY ALL ORDER BY 3 DESC, 1, 2""", [dtype, dev, at, at]).fetchall()
    return [LiveGroup(op=g[0], module=g[1], bytes=int(g[2]), allocations=int(g[3])) for g in groups]


class LiveAt(msgspec.Struct, frozen=True):
    """What is live on a device just after one memory event: its totals and the groups, "before the trace" last."""

    device: str
    id: int
    ts_ns: int
    allocated_bytes: int
    reserved_bytes: int
    live: list[LiveGroup]


def live_at(trace: Trace, device: str, at: int, live_rows: int = 20) -> LiveAt | None:
    """What is live on ``device`` ('CUDA 0', 'CPU') just after memory event ``at``, or None if there is no
    such event on that device."""
    if not has_memory(trace):
        return None
    con = trace.con
    (t0,) = con.execute(_T0).fetchone() or (0,)
    row = con.execute("""SELECT device_type, device, ts, total_allocated, total_reserved FROM memory
                         WHERE id = ? AND device_type || coalesce(' ' || device, '') = ?""", [at, device]).fetchone()
    if row is None:
        return None
    dtype, dev, ts, allocated, reserved = row
    shown = _shown(_live(con, dtype, dev, at), int(allocated), live_rows)
    return LiveAt(device=device, id=at, ts_ns=int(ts) - int(t0), allocated_bytes=int(allocated),
                  reserved_bytes=int(reserved), live=shown)


class MemoryPoint(msgspec.Struct, frozen=True, array_like=True):
    """One point of a device's memory lane: [ns since the trace's start, allocated, reserved, memory id]."""

    ts_ns: int
    allocated: int
    reserved: int
    id: int


def memory_series(trace: Trace, device: str, max_points: int = 4000) -> list[MemoryPoint]:
    """A device's allocated/reserved totals over time, every event while there are at most
    ``max_points``, else the highest point of each of ``max_points`` equal time buckets (so the peak is kept)."""
    if not has_memory(trace):
        return []
    (t0,) = trace.con.execute(_T0).fetchone() or (0,)
    rows = trace.con.execute("""
        WITH d AS (SELECT * FROM memory WHERE device_type || coalesce(' ' || device, '') = ?),
        b AS (SELECT *, CASE WHEN (SELECT count(*) FROM d) <= ? THEN id
                     ELSE floor((ts - (SELECT min(ts) FROM d)) * ? / greatest((SELECT max(ts) - min(ts) FROM d), 1))
                     END AS bucket FROM d)
        SELECT arg_max(ts, total_allocated), max(total_allocated), arg_max(total_reserved, total_allocated),
               arg_max(id, total_allocated) FROM b GROUP BY bucket ORDER BY 1""",
                              [device, max_points, max_points]).fetchall()
    return [MemoryPoint(ts_ns=int(r[0]) - int(t0), allocated=int(r[1]), reserved=int(r[2]), id=int(r[3]))
            for r in rows]
