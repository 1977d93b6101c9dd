"""The timeline's lane model: every drawable event of a trace with its lane and row, and windows of it
with level of detail; plus what one event is linked to (launches, kernels, op and module chains).

The model is a function of the trace: :func:`timeline_model` builds its own tables from the trace's
in DuckDB, as temporary tables of a cursor of its own, so nothing is created on the trace's
connection (which users query read-only) and no event passes through Python.
"""
from __future__ import annotations

import math
from collections.abc import Callable
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
_OPS = "('cpu_op', 'sync', 'other')"  # the kinds drawn in a thread's ops lane


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
    con: duckdb.DuckDBPyConnection = field(repr=False)  # private cursor: its temp table ``tl`` is this model
    names: list[str | None] = field(default_factory=list, repr=False)  # an event's name and kind by its ``code``
    kinds: list[str] = field(default_factory=list, repr=False)

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
    bucket_ns: int  # the level of detail: events shorter than this were merged, per fixed bucket of time
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


def _op_levels(con: duckdb.DuckDBPyConnection) -> dict[str, np.ndarray]:
    """How many ops enclose each op (Python frames between do not count): its row. Columns ``id`` and
    ``level``, for the ops inside at least one op. An event's ``parent_op`` is always a ``cpu_op``, so
    the ops' own parents are all the chains need."""
    cols = con.execute(f"""SELECT id, parent_op FROM events
                           WHERE parent_op IS NOT NULL AND kind IN {_OPS}""").fetchnumpy()
    ids, parents = np.asarray(cols["id"], dtype=np.int64), np.asarray(cols["parent_op"], dtype=np.int64)
    n = int(max(ids.max(), parents.max())) + 1 if len(ids) else 0
    po = np.full(n, -1, dtype=np.int64)
    po[ids] = parents
    level = np.zeros(n, dtype=np.int32)
    cur = po.copy()
    while (live := cur >= 0).any():
        level[live] += 1
        cur[live] = po[cur[live]]
    inside = level > 0
    return {"id": np.flatnonzero(inside), "level": level[inside]}


# each drawn (name, kind) once, coded: its lane kind (lk: index into LANE_KINDS) and how its depth in
# the lane is found (dk): ops stack by the ops around them (0); device annotations get the row below
# kernels (1); runtime calls and kernels never nest (2); scopes by their depth (3)
# an event's lane kind code by its kind (NULL: not drawn)
_LANE_KIND = f"""CASE WHEN kind IN {_DEVICE_DRAWN} THEN 3 WHEN kind IN ('python', 'annotation') THEN 0
               WHEN kind IN {_OPS} THEN 1 WHEN kind = 'runtime' THEN 2 END"""
# the order lanes are numbered in (device streams last), over columns lk, a, b
_LANE_ORDER = "ORDER BY lk = 3, a, lk, b"
_NAMES = f"""
    CREATE TEMP TABLE tl_names AS
    SELECT * FROM (
        SELECT row_number() OVER () - 1 AS code, name, kind,
          {_LANE_KIND} AS lk,
          CASE WHEN kind IN {_OPS} THEN 0 WHEN kind = 'gpu_annotation' THEN 1
               WHEN kind IN {_DEVICE_DRAWN} OR kind = 'runtime' THEN 2 ELSE 3 END AS dk
        FROM (SELECT DISTINCT name, kind FROM events))
    WHERE lk IS NOT NULL"""
# each drawn event with its code, its lane key (lk; a, b: thread, or device and stream) and its depth
_KEYED = """
    CREATE TEMP TABLE tl_k AS
    SELECT e.id, c.code, e.ts - $1 AS ts, e.dur, c.lk,
      CASE c.dk WHEN 0 THEN coalesce(v.level, 0) WHEN 1 THEN 1 WHEN 2 THEN 0 ELSE coalesce(e.depth, 0) END AS depth,
      CASE WHEN c.lk = 3 THEN e.device ELSE e.thread END AS a, CASE WHEN c.lk = 3 THEN e.stream ELSE 0 END AS b
    FROM events e LEFT JOIN _tl_levels v ON v.id = e.id
    JOIN tl_names c ON c.name IS NOT DISTINCT FROM e.name AND c.kind = e.kind"""


def timeline_model(trace: Trace) -> TimelineModel:
    """Build the lane model of a trace: lanes per thread (scopes, ops, runtime) and per device stream.

    The model's tables are temporary tables of its own cursor on the trace's database: built there
    from the events in place (no copy through Python), seen by no other connection."""
    return timeline_model_later(trace)()


def timeline_model_later(trace: Trace) -> Callable[[], TimelineModel]:
    """:func:`timeline_model` in two steps: this call reads what it needs of ``trace``'s own connection;
    the function it returns builds the model on a cursor of its own, so it may run in another thread
    while that connection serves other queries."""
    device_label = trace.device_label
    threads = _threads(trace)
    con = trace.cursor()
    return lambda: _build(con, device_label, threads)


def _build(con: duckdb.DuckDBPyConnection, device_label: str,
           threads: dict[int, tuple[str, str | None]]) -> TimelineModel:
    try:
        con.register("_tl_levels", _op_levels(con))
        con.execute(_NAMES)
        origin = int(con.execute("SELECT coalesce(min(ts), 0) FROM events").fetchall()[0][0])
        con.execute(_KEYED, [origin])
        con.unregister("_tl_levels")
        # the lanes and, per lane, its distinct depths: the small tables the rows are numbered in
        con.execute("CREATE TEMP TABLE tl_depths AS SELECT lk, a, b, depth, count(*) AS n FROM tl_k GROUP BY ALL")
        con.execute(f"""
            CREATE TEMP TABLE tl_lane_ids AS
            SELECT row_number() OVER ({_LANE_ORDER}) - 1 AS lane, lk, a, b, n
            FROM (SELECT lk, a, b, sum(n) AS n FROM tl_depths GROUP BY ALL)""")
        con.execute("""
            CREATE TEMP TABLE tl_rows AS
            SELECT d.lk, d.a, d.b, d.depth, l.lane,
                   dense_rank() OVER (PARTITION BY l.lane ORDER BY d.depth) - 1 AS row
            FROM tl_depths d JOIN tl_lane_ids l USING (lk, a, b)""")
        con.execute("""
            CREATE TEMP TABLE tl AS
            SELECT k.id, k.code, k.ts, k.dur, r.lane, r.row FROM tl_k k JOIN tl_rows r USING (lk, a, b, depth)""")
        lanes = _lanes(con, device_label, threads)
        codes = con.execute("SELECT code, name, kind FROM tl_names ORDER BY code").fetchall()
        names, kinds = [r[1] for r in codes], [r[2] for r in codes]
        con.execute("DROP TABLE tl_k; DROP TABLE tl_depths; DROP TABLE tl_rows; DROP TABLE tl_names")
        (lo, hi), = con.execute("SELECT min(ts), max(ts + dur) FROM tl").fetchall()
    except BaseException:
        con.close()
        raise
    return TimelineModel(origin_ns=origin, lanes=lanes, span_us=((lo or 0) / 1e3, (hi or 0) / 1e3), con=con,
                         names=names, kinds=kinds)


def _lanes(con: duckdb.DuckDBPyConnection, device_label: str,
           threads: dict[int, tuple[str, str | None]]) -> list[Lane]:
    return [_lane(row, device_label, threads) for row in con.execute("""
            SELECT l.lane, l.lk, l.a, l.b, l.n, coalesce(max(r.row), 0) + 1 FROM tl_lane_ids l
            LEFT JOIN tl_rows r USING (lane) GROUP BY ALL ORDER BY l.lane""").fetchall()]


def _lane(row: tuple[Any, ...], device_label: str, threads: dict[int, tuple[str, str | None]]) -> Lane:
    """A lane from its number, lane kind code, key (thread, or device and stream), events and rows."""
    lane, lk, a, b, n, rows = row
    if lk == 3:
        label = f"{device_label} {a} · stream {b}"
    else:
        tid, tname = threads.get(a, ("?", None))
        label = f"{tname or 'thread ' + str(tid)} · {LANE_KINDS[lk]}"
    return Lane(lane=int(lane), kind=LANE_KINDS[lk], label=label, events=int(n), rows=int(rows))


def _threads(trace: Trace) -> dict[int, tuple[str, str | None]]:
    """Thread id -> (tid, thread name), the lanes' labels."""
    return {t: (tid, tname) for t, tid, tname in trace.con.execute(
        "SELECT thread, tid, thread_name FROM threads").fetchall()}


@dataclass(frozen=True)
class FirstView:
    """The timeline's first view: its lanes and the whole span at one level of detail.

    ``exact``: the model's own (:func:`timeline_window` of the whole span). Else coarse
    (:func:`coarse_view`), read from the trace's events without the model, drawn until the exact view
    comes: the model's lanes (numbers, kinds, labels, event counts) with one row each, and each lane's
    events merged per bucket of the level of detail into one block (its members' count, and its longest
    member's name and kind; ties: the first), long events included."""

    lanes: list[Lane]
    window: TimelineWindow
    exact: bool


def coarse_view(trace: Trace, width: int = 1600) -> FirstView:
    """The coarse first view of ``trace`` drawn ``width`` pixels wide (see :class:`FirstView`): one
    aggregation over the events and a look-up of the blocks' names, on a cursor of its own; no table
    is created. The span, level of detail and lanes are the model's; the blocks are per lane only."""
    con = trace.cursor()
    try:
        (origin, lo, hi), = con.execute(f"""
            SELECT coalesce(min(ts), 0), min(ts) FILTER ({_LANE_KIND} IS NOT NULL),
                   max(ts + dur) FILTER ({_LANE_KIND} IS NOT NULL) FROM events""").fetchall()
        span = (((lo or origin) - origin) / 1e3, ((hi or origin) - origin) / 1e3)
        bk = bucket_ns_for(*span, width)
        blocks = con.execute(_COARSE, [origin, bk]).fetchall()
        top = [r[7] for r in blocks]
        named = {i: (name, kind) for i, name, kind in con.execute(
            "SELECT id, name, kind FROM events WHERE id IN (SELECT unnest($1::BIGINT[]))", [top]).fetchall()}
    finally:
        con.close()
    threads = _threads(trace)
    lanes = {r[0]: _lane((*r[:5], 1), trace.device_label, threads) for r in blocks}
    names, kinds = Interner(), Interner()
    start = math.floor(span[0] * 1e3 / bk) * bk
    window = TimelineWindow(
        t0=round(start / 1e3, 3), t1=span[1] if span[1] > span[0] else span[0] + 1.0, span=span,
        bucket_us=bk / 1e3, bucket_ns=bk,
        lane=[r[0] for r in blocks], row=[0] * len(blocks), ts=[round(r[5] / 1e3, 3) for r in blocks],
        dur=[round(r[6] / 1e3, 3) for r in blocks], name=[names(named[i][0]) for i in top], id=[-1] * len(blocks),
        n=[r[8] for r in blocks], kind=[kinds(named[i][1]) for i in top], names=names.values, kinds=kinds.values)
    return FirstView(lanes=list(lanes.values()), window=window, exact=False)


# the coarse view's blocks: per lane and bucket (of events by their start, from the trace's first
# event), with the lane's number, kind code, key and events, as the model numbers and counts them
_COARSE = f"""
    WITH k AS (SELECT {_LANE_KIND} AS lk, CASE WHEN kind IN {_DEVICE_DRAWN} THEN device ELSE thread END AS a,
                      CASE WHEN kind IN {_DEVICE_DRAWN} THEN stream ELSE 0 END AS b, ts - $1 AS ts, dur, id
               FROM events),
    g AS (SELECT lk, a, b, min(ts) AS t, max(ts + dur) - min(ts) AS d,
                 arg_max(id, dur::HUGEINT * 4294967296 - id) AS top, count(*) AS n
          FROM k WHERE lk IS NOT NULL GROUP BY lk, a, b, ts // $2),
    l AS (SELECT row_number() OVER ({_LANE_ORDER}) - 1 AS lane, lk, a, b, sum(n) AS n FROM g GROUP BY lk, a, b)
    SELECT l.lane, l.lk, l.a, l.b, l.n, g.t, g.d, g.top, g.n FROM g JOIN l USING (lk, a, b) ORDER BY 1, 6, 7"""


MAX_BUCKETS = 64_000  # the most buckets one window may span (a window at a finer level than its width)


def bucket_ns_for(t0: float, t1: float, width: int) -> int:
    """The level of detail of a view of [t0, t1) µs drawn ``width`` pixels wide: the largest power of two
    of ns not above one pixel (at least 1 ns). The front end computes the same (timeline_model.js
    ``bucketNs``), with the same floating-point steps, so it knows which windows it can reuse."""
    px = (t1 - t0) * 1e3 / max(width, 1)
    b = 1
    while b * 2 <= px:
        b *= 2
    return b


def timeline_window(model: TimelineModel, t0: float | None = None, t1: float | None = None,
                    width: int = 1600, bucket_ns: int | None = None) -> TimelineWindow:
    """Events in [t0, t1] µs from the trace start, with level of detail: anything shorter than one
    bucket (``bucket_ns``, by default :func:`bucket_ns_for` the view and ``width``) is merged, per lane,
    row and bucket, into a block that carries its count and its longest member's name and kind.

    Buckets are fixed in time (bucket k holds the events starting in [k, k + 1) buckets from the trace
    start), and a block is always its whole bucket, so a window is complete from its ``t0`` (``t0``
    rounded down to a bucket) to ``t1``: any view inside it at the same level gets the same events and
    blocks from it as from a window of its own (those that end at or after the view's start and start
    at or before its end, as the front end draws them)."""
    lo, hi = model.span_us
    a = lo if t0 is None else max(float(t0), lo)
    b = hi if t1 is None else min(float(t1), hi)
    if b <= a:
        b = a + 1.0
    bk = bucket_ns_for(lo if t0 is None else float(t0), hi if t1 is None else float(t1), width) \
        if bucket_ns is None else int(bucket_ns)
    if bk < 1 or bk & (bk - 1) or (b - a) * 1e3 / bk > MAX_BUCKETS:
        raise ValueError(f"the bucket must be a power of two of ns, at most {MAX_BUCKETS:,} of them in the window")
    # complete from the bucket a falls in to b: every event over [start, b], every block whole (blocks
    # from the bucket before start, whose members end after it, to the one b falls in)
    start = math.floor(a * 1e3 / bk) * bk
    rows = model.con.execute("""
        SELECT lane, row, ts, dur, code, id, 1 AS n FROM tl
        WHERE dur >= $3 AND ts <= $2 AND ts + dur >= $1
        UNION ALL
        SELECT lane, row, min(ts), max(ts + dur) - min(ts), arg_max(code, dur::HUGEINT * 4294967296 - id), -1,
               count(*)  -- named as its longest member; ties: the first
        FROM tl WHERE dur < $3 AND ts >= $1 - $3 AND ts < $4
        GROUP BY lane, row, ts // $3
        ORDER BY 1, 2, 3, 4, 6""", [start, b * 1e3, bk, (math.floor(b * 1e3 / bk) + 1) * bk]).fetchall()
    names, kinds = Interner(), Interner()
    name_of, kind_of = model.names, model.kinds
    return TimelineWindow(
        t0=round(start / 1e3, 3), t1=b, span=(lo, hi), bucket_us=bk / 1e3, bucket_ns=bk,
        lane=[r[0] for r in rows], row=[r[1] for r in rows], ts=[round(r[2] / 1e3, 3) for r in rows],
        dur=[round(r[3] / 1e3, 3) for r in rows], name=[names(name_of[r[4]]) for r in rows], id=[r[5] for r in rows],
        n=[r[6] for r in rows], kind=[kinds(kind_of[r[4]]) for r in rows], names=names.values, kinds=kinds.values)


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
