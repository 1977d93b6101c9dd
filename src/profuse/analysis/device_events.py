"""The device activities (kernels, copies, memsets) of a loaded trace as columns, each with its launch call,
read once per trace, for the passes that each asked the events table one question about them: the scopes' own
device time (analysis/scopes.py), the copies (advice/fusion.py ``copy_only_ops``), trace health's counts, the op
table's device totals, and busy.py's activities in launch order and launch calls (each of those was a join of
the events table of its own)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_module
from .._progress import timed
from ..trace import Trace
from ..trace.arrays import distinct
from ..trace.schema import DEVICE_TIME_SQL
from ..trace.vocabulary import graph_launch_sql, launch_call_sql
from ._codes import positions
from ._memo import once_per_trace
from ._read import fetch_columns, id_table

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
_QUERY = f"""SELECT id, ts, dur, kind <> 'kernel' AS copy, {", ".join(_NULLABLE)},
    coalesce(link <> 'graph', false) AS not_graph, unlinked FROM events WHERE kind IN ({DEVICE_TIME_SQL})"""


_OP_STARTS = "SELECT id, ts FROM events WHERE id IN (SELECT id FROM {})"


def _calls_query(ids: str) -> str:
    """The launch calls whose ids the table ``ids`` holds (built per load: the launch-call and graph-launch rules
    read the vocabulary as it is then)."""
    return f"""SELECT id, coalesce(ts, 0) AS ts, coalesce(dur, 0) AS dur, coalesce(thread, -1) AS thread, parent_op,
        coalesce({graph_launch_sql("name")}, false) AS graph_launch, coalesce({launch_call_sql("name")}, false) AS call,
        CASE WHEN {launch_call_sql("name")} THEN name END AS name
        FROM events WHERE id IN (SELECT id FROM {ids})"""


@once_per_trace
@timed("device events")
def device_events(trace: Trace) -> DeviceEvents:
    """The trace's :class:`DeviceEvents` (callers only read the arrays): one scan of the activities, then their
    launch calls and those calls' ops looked up by id (each a semi-join built on the few ids wanted: a join of
    the events table itself is built on whichever side DuckDB's estimates choose, and on a freshly built table
    they chose the whole table)."""
    raw = fetch_columns(trace.con, _QUERY)
    order = np.argsort(np.asarray(raw["id"]), kind="stable")
    cols: dict[str, np.ndarray] = {k: np.asarray(raw[k])[order].astype(np.int64) for k in ("id", "ts", "dur")}
    for k in _NULLABLE:
        cols[k], cols[f"has_{k}"] = _filled(raw[k][order])
    cols["unlinked"] = _text(raw["unlinked"])[order]
    flags = {k: np.asarray(raw[k])[order].astype(bool) for k in ("copy", "not_graph")}
    return DeviceEvents(**cols, **flags, **_launch_columns(trace, cols["launch"], cols["has_launch"]))


def _filled(column: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A fetched integer column as int64 (NULL: 0) and where it is not NULL."""
    values = np.ma.filled(column, 0) if np.ma.isMaskedArray(column) else column
    return np.asarray(values).astype(np.int64), ~np.ma.getmaskarray(column)


def _by_ids(trace: Trace, ids: np.ndarray, query: Callable[[str], str]) -> dict[str, Any]:
    """``query`` of a table of ``ids`` (:func:`id_table`): its columns."""
    with id_table(trace.con, ids) as name:
        return fetch_columns(trace.con, query(name))


def _launch_columns(trace: Trace, launch: np.ndarray, has: np.ndarray) -> dict[str, np.ndarray]:
    """:class:`DeviceEvents`' columns of each activity's launch call (``launch``, where ``has``)."""
    c = _by_ids(trace, distinct(launch[has]), _calls_query)
    at = np.where(has, positions(np.asarray(c["id"]).astype(np.int64), launch), -1)
    launched = at >= 0
    calls: dict[str, tuple[np.ndarray, Any]] = {
        "launch_ts": (np.asarray(c["ts"]).astype(np.int64), 0), "launch_dur": (np.asarray(c["dur"]).astype(np.int64), 0),
        "launch_thread": (np.asarray(c["thread"]).astype(np.int64), -1),
        "graph_launch": (np.asarray(c["graph_launch"]).astype(bool), False),
        "launch_call": (np.asarray(c["call"]).astype(bool), False), "launch_name": (_text(c["name"]), None)}
    # the start of the op that made each call (where the call has one and the trace holds it)
    parent, has_parent = _filled(c["parent_op"])
    o = _by_ids(trace, distinct(parent[has_parent]), _OP_STARTS.format)
    op_at = np.where(has_parent, positions(np.asarray(o["id"]).astype(np.int64), parent), -1)
    op_found = op_at >= 0
    op_ts, op_has = _filled(o["ts"])
    op_found[op_found] &= op_has[op_at[op_found]]
    calls["launch_op_ts"] = (np.where(op_found, op_ts[op_at] if op_ts.size else 0, 0), 0)
    calls["has_launch_op"] = (op_found, False)
    out = {"launched": launched}
    for key, (column, empty) in calls.items():
        picked = np.full(launch.size, empty, dtype=column.dtype)
        picked[launched] = column[at[launched]]
        out[key] = picked
    return out


def _text(column: np.ndarray) -> np.ndarray:
    """A fetched text column as an object array, None for NULL."""
    out = np.array(column, dtype=object)
    out[np.ma.getmaskarray(column)] = None
    return out
