"""The device activities (kernels, copies, memsets) of a loaded trace as columns, read in one scan once per
trace, for the passes that each asked the events table one question about them: the scopes' own device
time (analysis/scopes.py), the copies (advice/fusion.py ``copy_only_ops``) and trace health's counts."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._lazy import lazy_module
from .._progress import timed
from ..trace import Trace
from ..trace.schema import DEVICE_TIME_SQL
from ._memo import once_per_trace
from ._read import fetch_columns

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use
    np = lazy_module("numpy", globals(), "np")


@dataclass(frozen=True)
class DeviceEvents:
    """Every device activity (``kind`` in DEVICE_TIME_KINDS), in no particular order, as columns: ``id``,
    ``ts``, ``dur``, ``copy`` (not a kernel), ``scope``/``op``/``launch``/``device``/``stream`` with a
    ``has_*`` mask each (False: NULL), ``not_graph`` (a ``link`` other than ``graph``; NULL: False),
    ``unlinked`` (the reason as recorded, None for NULL), and the launch call's ``launch_ts``/``launch_dur``
    where ``launched`` (the launch event is in the trace)."""

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
    not_graph: np.ndarray
    unlinked: np.ndarray
    launched: np.ndarray
    launch_ts: np.ndarray
    launch_dur: np.ndarray


_NULLABLE = ("scope", "op", "launch", "device", "stream")
_QUERY = f"""SELECT id, ts, dur, kind <> 'kernel' AS copy, {", ".join(_NULLABLE)},
    coalesce(link <> 'graph', false) AS not_graph, unlinked FROM events WHERE kind IN ({DEVICE_TIME_SQL})"""


@once_per_trace
@timed("device events")
def device_events(trace: Trace) -> DeviceEvents:
    """The trace's :class:`DeviceEvents` (callers only read the arrays): one scan, each launch call's start and
    duration from :func:`busy.activities` (read once per trace, with the launch calls joined)."""
    raw = fetch_columns(trace.con, _QUERY)
    cols: dict[str, np.ndarray] = {k: np.asarray(raw[k]).astype(np.int64) for k in ("id", "ts", "dur")}
    for k in _NULLABLE:
        cols[k] = np.asarray(np.ma.filled(raw[k], 0) if np.ma.isMaskedArray(raw[k]) else raw[k]).astype(np.int64)
        cols[f"has_{k}"] = ~np.ma.getmaskarray(raw[k])
    unlinked = np.array(raw["unlinked"], dtype=object)
    unlinked[np.ma.getmaskarray(raw["unlinked"])] = None      # NULL
    launched, launch_ts, launch_dur = _launch_calls(trace, cols["launch"], cols["has_launch"])
    flags = {k: np.asarray(raw[k]).astype(bool) for k in ("copy", "not_graph")}
    return DeviceEvents(**cols, **flags, unlinked=unlinked, launched=launched, launch_ts=launch_ts,
                        launch_dur=launch_dur)


def _launch_calls(trace: Trace, launch: np.ndarray, has: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per activity: whether its launch call is in the trace, and that call's start and duration (0 where not),
    looked up among :func:`busy.activities`' launch calls (the same activities, each with its call joined)."""
    from .busy import activities

    a = activities(trace)
    ids, ts, dur = a.launch_id[a.launched], a.launch_ts[a.launched], a.launch_dur[a.launched]
    order = np.argsort(ids, kind="stable")
    ids, ts, dur = ids[order], ts[order], dur[order]
    if not ids.size:
        zero = np.zeros(launch.size, dtype=np.int64)
        return np.zeros(launch.size, dtype=bool), zero, zero
    at = np.minimum(np.searchsorted(ids, launch), ids.size - 1)
    found = has & (ids[at] == launch)
    return found, np.where(found, ts[at], 0), np.where(found, dur[at], 0)
