"""The timeline's lane model: every drawable event of a trace with its lane and row, and windows of it
with level of detail; plus what one event is linked to (launches, kernels, op and module chains).

The model is a function of the trace: :func:`timeline_model` reads the trace's tables once and keeps
its own columns in a private in-memory DuckDB connection, so nothing is created on the trace's
connection (which users query read-only).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np

from ..trace.schema import DEVICE_TIME_KINDS

if TYPE_CHECKING:
    from ..trace import Trace

LANE_KINDS = ("scopes", "ops", "runtime", "stream")  # index = the lane kind code in the model
_DEVICE_DRAWN = "('kernel', 'memcpy', 'memset', 'gpu_annotation', 'device_other')"
_HOST_LINKS = ("cpu_op", "annotation", "python", "runtime")


@dataclass(frozen=True)
class Lane:
    """One horizontal lane: a CPU thread's scopes, ops or runtime calls, or one device stream."""

    lane: int
    kind: str       # scopes | ops | runtime | stream
    label: str      # the whole label (thread name or device and stream, then the kind)
    events: int
    rows: int


@dataclass
class TimelineModel:
    """The drawable events of one trace (times in ns from the trace's first event) and their lanes."""

    origin_ns: int
    lanes: list[Lane]
    span_us: tuple[float, float]
    con: duckdb.DuckDBPyConnection = field(repr=False)  # private: holds table ``tl`` of this model only

    def close(self) -> None:
        """Free the model's private tables."""
        self.con.close()


@dataclass(frozen=True)
class TimelineWindow:
    """Events in [t0, t1) µs with level of detail, as columns; names and kinds interned."""

    t0: float
    t1: float
    span: tuple[float, float]
    bucket_us: float
    names: list[str]
    kinds: list[str]
    lane: list[int]
    row: list[int]
    ts: list[float]
    dur: list[float]
    name: list[int]
    id: list[int]
    n: list[int]
    kind: list[int]


class Interner:
    """Strings to dense ids, in first-seen order."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.values: list[str] = []

    def __call__(self, s: str | None) -> int:
        """The index of ``s`` in ``values`` (added on first sight; None counts as "")."""
        s = "" if s is None else str(s)
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.values)
            self.values.append(s)
        return i


def _op_levels(trace: Trace) -> np.ndarray:
    """How many ops enclose each event (Python frames between do not count): an op's row."""
    parent_op = trace.con.execute("SELECT coalesce(parent_op, -1) FROM events ORDER BY id").fetchnumpy()
    po = next(iter(parent_op.values())).astype(np.int64)
    level = np.zeros(len(po), dtype=np.int64)
    cur = po.copy()
    while (live := cur >= 0).any():
        level[live] += 1
        cur[live] = po[cur[live]]
    return level


def timeline_model(trace: Trace) -> TimelineModel:
    """Build the lane model of a trace: lanes per thread (scopes, ops, runtime) and per device stream."""
    cols = trace.con.execute("""SELECT id, name, kind, ts, dur, thread, device, stream, depth FROM events
                                ORDER BY id""").fetchnumpy()
    cols["level"] = _op_levels(trace)
    con = duckdb.connect(":memory:")
    con.register("_events", cols)
    # each drawable event once, with its lane key (lk: index into LANE_KINDS; a, b: thread or device
    # and stream) and its depth within the lane: ops stack by the ops around them; runtime calls and
    # kernels never nest (device annotations get the row below)
    con.execute(f"""
        CREATE TEMP TABLE tl_e AS
        WITH e AS (
            SELECT id, name, kind, ts, dur, thread, device, stream,
              CASE WHEN kind IN ('cpu_op', 'sync', 'other') THEN level
                   WHEN kind = 'gpu_annotation' THEN 1 WHEN kind IN {_DEVICE_DRAWN} OR kind = 'runtime' THEN 0
                   ELSE coalesce(depth, 0) END AS depth,
              CASE WHEN kind IN {_DEVICE_DRAWN} THEN 3
                   WHEN kind IN ('python', 'annotation') THEN 0
                   WHEN kind IN ('cpu_op', 'sync', 'other') THEN 1
                   WHEN kind = 'runtime' THEN 2 END AS lk
            FROM _events)
        SELECT id, name, kind, ts, dur, depth, lk,
               CASE WHEN lk = 3 THEN device ELSE thread END AS a, CASE WHEN lk = 3 THEN stream ELSE 0 END AS b
        FROM e WHERE lk IS NOT NULL""")
    con.execute("""
        CREATE TEMP TABLE tl_lane_ids AS
        SELECT row_number() OVER (ORDER BY lk = 3, a, lk, b) - 1 AS lane, lk, a, b, n
        FROM (SELECT lk, a, b, count(*) AS n FROM tl_e GROUP BY ALL)""")
    origin = int(con.execute("SELECT coalesce(min(ts), 0) FROM _events").fetchall()[0][0])
    con.execute("""
        CREATE TEMP TABLE tl AS
        SELECT e.id, e.name, e.kind, e.ts - $1 AS ts, e.dur, l.lane,
               dense_rank() OVER (PARTITION BY l.lane ORDER BY e.depth) - 1 AS row
        FROM tl_e e JOIN tl_lane_ids l USING (lk, a, b)
        ORDER BY e.ts""", [origin])
    lanes = _lanes(trace, con)
    con.execute("DROP TABLE tl_e")
    con.unregister("_events")
    (lo, hi), = con.execute("SELECT min(ts), max(ts + dur) FROM tl").fetchall()
    return TimelineModel(origin_ns=origin, lanes=lanes, span_us=((lo or 0) / 1e3, (hi or 0) / 1e3), con=con)


def _lanes(trace: Trace, con: duckdb.DuckDBPyConnection) -> list[Lane]:
    threads = {t: (tid, tname) for t, tid, tname in trace.con.execute(
        "SELECT thread, tid, thread_name FROM threads").fetchall()}
    out = []
    for lane, lk, a, b, n, rows in con.execute("""
            SELECT l.lane, l.lk, l.a, l.b, l.n, coalesce(max(t.row), 0) + 1 FROM tl_lane_ids l
            LEFT JOIN tl t USING (lane) GROUP BY ALL ORDER BY l.lane""").fetchall():
        if lk == 3:
            label = f"{trace.device_label} {a} · stream {b}"
        else:
            tid, tname = threads.get(a, ("?", None))
            label = f"{tname or 'thread ' + str(tid)} · {LANE_KINDS[lk]}"
        out.append(Lane(lane=int(lane), kind=LANE_KINDS[lk], label=label, events=int(n), rows=int(rows)))
    return out


def timeline_window(model: TimelineModel, t0: float | None = None, t1: float | None = None,
                    width: int = 1600) -> TimelineWindow:
    """Events in [t0, t1) µs from the trace start, with level of detail: anything shorter than one
    pixel is merged, per lane and row, into blocks that carry a count and their longest member."""
    lo, hi = model.span_us
    a = lo if t0 is None else max(float(t0), lo)
    b = hi if t1 is None else min(float(t1), hi)
    if b <= a:
        b = a + 1.0
    bucket_ns = max((b - a) * 1e3 / max(width, 1), 1.0)
    rows = model.con.execute("""
        SELECT lane, row, ts, dur, name, id, 1 AS n, kind FROM tl
        WHERE ts < $2 AND ts + dur > $1 AND dur >= $3
        UNION ALL
        SELECT lane, row, min(ts), max(ts + dur) - min(ts), arg_max(name, dur), -1, count(*), arg_max(kind, dur)
        FROM tl WHERE ts < $2 AND ts + dur > $1 AND dur < $3
        GROUP BY lane, row, floor((ts - $1) / $3)
        ORDER BY 1, 2, 3""", [a * 1e3, b * 1e3, bucket_ns]).fetchall()
    names, kinds = Interner(), Interner()
    return TimelineWindow(
        t0=a, t1=b, span=(lo, hi), bucket_us=bucket_ns / 1e3,
        lane=[r[0] for r in rows], row=[r[1] for r in rows], ts=[round(r[2] / 1e3, 3) for r in rows],
        dur=[round(r[3] / 1e3, 3) for r in rows], name=[names(r[4]) for r in rows], id=[r[5] for r in rows],
        n=[r[6] for r in rows], kind=[kinds(r[7]) for r in rows], names=names.values, kinds=kinds.values)


@dataclass(frozen=True)
class EventRef:
    """An event in brief; ``ts`` in µs from the trace start."""

    id: int
    name: str
    kind: str
    ts: float
    dur: float


@dataclass(frozen=True)
class KernelRef:
    """A device event launched by the selected event."""

    id: int
    name: str
    ts: float
    dur: float
    launch: int
    graph: bool     # replayed by a CUDA/HIP graph launch


@dataclass(frozen=True)
class LaunchRef:
    """A launch call under the selected op."""

    id: int
    name: str
    ts: float
    dur: float


@dataclass
class Replay:
    """One graph replay: drawn as one flow from its graph launch to its first kernel."""

    launch: int
    first: int
    kernels: int
    ts: float
    end: float


@dataclass(frozen=True)
class ChainOp:
    """One op of the chain from an event out to the outermost op."""

    id: int
    name: str
    kind: str
    dur: float


@dataclass(frozen=True)
class ModuleRef:
    """One nn.Module scope of the chain from an event out to the outermost module."""

    id: int
    name: str


@dataclass
class EventLinks:
    """One event and what it is linked to: an op's launches and kernels, a kernel's launch, op chain
    and modules. ``launches`` is None for anything but host ops; ``kernels`` and ``replays`` are
    None for device events."""

    id: int
    kind: str
    name: str
    ts: float
    dur: float
    self_device_us: float | None
    device_total_us: float | None
    link: str | None
    unlinked: str | None
    launch: EventRef | None = None
    ops: list[ChainOp] = field(default_factory=list)
    modules: list[ModuleRef] = field(default_factory=list)
    launches: list[LaunchRef] | None = None
    kernels: list[KernelRef] | None = None
    replays: list[Replay] | None = None


def event_links(trace: Trace, model: TimelineModel, eid: int) -> EventLinks | None:
    """What event ``eid`` is linked to; None when the trace has no such drawable event."""
    con = trace.con
    if not model.con.execute("SELECT count(*) FROM tl WHERE id = ?", [eid]).fetchall()[0][0]:
        return None
    origin = model.origin_ns
    (i, kind, name, ts, dur, launch, op, module, link, unlinked, sdev, tdev, parent), = con.execute("""
        SELECT id, kind, name, (ts - ?) / 1e3, dur / 1e3, launch, op, module, link, unlinked, self_device / 1e3,
               device_total / 1e3, parent FROM events WHERE id = ?""", [origin, eid]).fetchall()
    out = EventLinks(id=i, kind=kind, name=name, ts=ts, dur=dur, self_device_us=sdev, device_total_us=tdev,
                     link=link, unlinked=unlinked)
    if kind in _HOST_LINKS:
        _launched(trace, out, origin)
    chain_start = op if kind in DEVICE_TIME_KINDS else parent
    out.launch = _brief(trace, origin, launch)
    out.ops = _chain(trace, chain_start, ("cpu_op", "annotation"))
    out.modules = _modules(trace, module)
    return out


def _launched(trace: Trace, out: EventLinks, origin: int) -> None:
    """An op's launch calls and their device events; a launch call's own device events (a graph
    launch: every kernel of the replay)."""
    runtime = out.kind == "runtime"
    within = "l.id = $1" if runtime else (
        "l.kind = 'runtime' AND l.thread = me.thread AND l.ts >= me.ts AND l.ts < me.ts + me.dur")
    rel = trace.con.execute(f"""
        WITH me AS (SELECT ts, dur, thread FROM events WHERE id = $1)
        SELECT l.id, l.name, (l.ts - $2) / 1e3, l.dur / 1e3, k.id, k.name, (k.ts - $2) / 1e3, k.dur / 1e3, k.link
        FROM events l, me JOIN events k ON k.launch = l.id
        WHERE {within} ORDER BY k.ts LIMIT 2000""", [out.id, origin]).fetchall()
    if not runtime:
        out.launches = [LaunchRef(id=r[0], name=r[1], ts=r[2], dur=r[3]) for r in {r[0]: r for r in rel}.values()]
    out.kernels = [KernelRef(id=r[4], name=r[5], ts=r[6], dur=r[7], launch=r[0], graph=r[8] == "graph")
                   for r in rel]
    out.replays = _replays(rel)
    if trace.cpu_only:
        out.kernels, out.replays = [], []


def _replays(rel: list[tuple[Any, ...]]) -> list[Replay]:
    """One entry per graph launch among the rows: the replay drawn as one flow to its first kernel."""
    out: dict[int, Replay] = {}
    for lid, _lname, _lts, _ldur, kid, _kname, kts, kdur, link in rel:  # rows come in kernel start order
        if link != "graph":
            continue
        r = out.setdefault(lid, Replay(launch=lid, first=kid, kernels=0, ts=kts, end=kts + kdur))
        r.kernels += 1
        r.end = max(r.end, kts + kdur)
    return list(out.values())


def _brief(trace: Trace, origin: int, eid: int | None) -> EventRef | None:
    if eid is None:
        return None
    r = trace.con.execute("SELECT id, name, kind, (ts - ?) / 1e3, dur / 1e3 FROM events WHERE id = ?",
                          [origin, eid]).fetchall()
    return EventRef(id=r[0][0], name=r[0][1], kind=r[0][2], ts=r[0][3], dur=r[0][4]) if r else None


def _chain(trace: Trace, eid: int | None, kinds: tuple[str, ...]) -> list[ChainOp]:
    out = []
    seen = 0
    while eid is not None and seen < 200:
        r = trace.con.execute("SELECT id, name, kind, parent, dur / 1e3 FROM events WHERE id = ?", [eid]).fetchall()
        if not r:
            break
        i, name, kind, parent, dur = r[0]
        if kind in kinds:
            out.append(ChainOp(id=i, name=name, kind=kind, dur=dur))
        eid, seen = parent, seen + 1
    return out


def _modules(trace: Trace, sid: int | None) -> list[ModuleRef]:
    out: list[ModuleRef] = []
    while sid is not None and len(out) < 100:
        r = trace.con.execute("SELECT id, name, parent, kind FROM scopes WHERE id = ?", [sid]).fetchall()
        if not r:
            break
        if r[0][3] == "module":
            out.append(ModuleRef(id=r[0][0], name=r[0][1]))
        sid = r[0][2]
    return out
