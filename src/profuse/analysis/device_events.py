"""The device activities (kernels, copies, memsets) of a loaded trace as columns, each with its launch call
joined, read in one query once per trace, for the passes that each asked the events table one question about
them: the scopes' own device time (analysis/scopes.py), the copies (advice/fusion.py ``copy_only_ops``), trace
health's counts, and busy.py's activities in launch order and launch calls (each of those was a query of its
own: at 3 GB the three took 1.1-1.4 CPU-s, the one 0.6-0.8)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._lazy import lazy_module
from .._progress import timed
from ..trace import Trace
from ..trace.schema import DEVICE_TIME_SQL
from ..trace.vocabulary import graph_launch_sql, launch_call_sql
from ._memo import once_per_trace
from ._read import fetch_columns

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use
    np = lazy_module("numpy", globals(), "np")


@dataclass(frozen=True)
class DeviceEvents:
    """Every device activity (``kind`` in DEVICE_TIME_KINDS), by id, as columns: ``id``,
    ``ts``, ``dur``, ``copy`` (not a kernel), ``scope``/``op``/``launch``/``device``/``stream``/``module`` with a
    ``has_*`` mask each (False: NULL), ``not_graph`` (a ``link`` other than ``graph``; NULL: False),
    ``unlinked`` (the reason as recorded, None for NULL), and where ``launched`` (the launch event is in the
    trace) the launch call's ``launch_ts``/``launch_dur``/``launch_thread`` (0, 0, -1 where not; a NULL
    duration 0, a NULL thread -1), whether it replays a graph (``graph_launch``) or is a launch call by its
    name (``launch_call``: trace/vocabulary.py), its name where it is one (``launch_name``, else None) and
    the start of the op that made it (``launch_op_ts``, where ``has_launch_op``)."""

    id: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    copy: np.ndarray
    scope: np.ndarray
    has_scope: np.ndarray
    op: np.ndarray
    has_op: np.ndarray
    launch: np.ndarray
    has_launch: np.ndarray
    device: np.ndarray
    has_device: np.ndarray
    stream: np.ndarray
    has_stream: np.ndarray
    module: np.ndarray
    has_module: np.ndarray
    not_graph: np.ndarray
    unlinked: np.ndarray
    launched: np.ndarray
    launch_ts: np.ndarray
    launch_dur: np.ndarray
    launch_thread: np.ndarray
    graph_launch: np.ndarray
    launch_call: np.ndarray
    launch_name: np.ndarray
    launch_op_ts: np.ndarray
    has_launch_op: np.ndarray


_NULLABLE = ("scope", "op", "launch", "device", "stream", "module")
def _query() -> str:
    """The one query (built per load: the launch-call and graph-launch rules read the vocabulary as it is then)."""
    return f"""SELECT d.id, d.ts, d.dur, d.kind <> 'kernel' AS copy, {", ".join(f"d.{c}" for c in _NULLABLE)},
        coalesce(d.link <> 'graph', false) AS not_graph, d.unlinked, l.id IS NOT NULL AS launched,
        coalesce(l.ts, 0) AS launch_ts, coalesce(l.dur, 0) AS launch_dur, coalesce(l.thread, -1) AS launch_thread,
        coalesce({graph_launch_sql("l.name")}, false) AS graph_launch,
        coalesce({launch_call_sql("l.name")}, false) AS launch_call,
        CASE WHEN {launch_call_sql("l.name")} THEN l.name END AS launch_name, o.ts AS launch_op_ts
        FROM events d LEFT JOIN events l ON l.id = d.launch LEFT JOIN events o ON o.id = l.parent_op
        WHERE d.kind IN ({DEVICE_TIME_SQL})"""


@once_per_trace
@timed("device events")
def device_events(trace: Trace) -> DeviceEvents:
    """The trace's :class:`DeviceEvents` (callers only read the arrays), in one query."""
    raw = fetch_columns(trace.con, _query())
    order = np.argsort(np.asarray(raw["id"]), kind="stable")
    cols: dict[str, np.ndarray] = {k: np.asarray(raw[k])[order].astype(np.int64)
                                   for k in ("id", "ts", "dur", "launch_ts", "launch_dur", "launch_thread")}
    for k in (*_NULLABLE, "launch_op_ts"):
        column = raw[k][order]
        cols[k] = np.asarray(np.ma.filled(column, 0) if np.ma.isMaskedArray(column) else column).astype(np.int64)
        cols["has_launch_op" if k == "launch_op_ts" else f"has_{k}"] = ~np.ma.getmaskarray(column)
    for k in ("unlinked", "launch_name"):
        text = np.array(raw[k], dtype=object)
        text[np.ma.getmaskarray(raw[k])] = None      # NULL
        cols[k] = text[order]
    flags = {k: np.asarray(raw[k])[order].astype(bool)
             for k in ("copy", "not_graph", "launched", "graph_launch", "launch_call")}
    return DeviceEvents(**cols, **flags)
