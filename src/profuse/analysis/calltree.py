"""The Python call tree: a trace's ``python_function`` events (nn.Module scopes included) merged by call
path, as pyinstrument shows a profile, with each path's calls, total time and self time.

A frame's *call path* is the names of the Python frames around it, outermost first, then its own name
(``file(line): function`` as Kineto writes it). A frame's Python parent is the innermost frame that holds
it on its thread: the load's nesting rule (``trace.correlate.nesting``) over the frames alone, so an op or
a ``record_function`` between two frames does not break the path, even one that starts inside a frame and
outlives it (the profiler's ``ProfilerStep#N``, begun in ``step()``): the events table's ``parent`` of a
frame begun inside that ``record_function`` is the ``record_function``, whose own parent skips the frame it
began in. Per path:

- ``total``: the frames' durations (frames of one path never nest: a nested call has a longer path);
- ``self``: total less the child frames' totals (pyinstrument's self time: the time this function was
  the innermost Python frame, its ops and runtime calls included);
- ``python``: the part of ``self`` in no other host event (no op, annotation or runtime call; their
  union, each cut to the frame): the interpreter itself, what the CPU budget's ``cpu/python`` counts;
- ``waiting``: that part instead, where the frame waits rather than works (a lock's ``acquire``, a
  ``wait``, a ``sleep``, a ``select``: :mod:`.waiting`, the CPU budget's ``idle/wait``), so a helper
  thread blocked for the whole trace (tqdm's monitor) is not Python time.

Self times of all paths add up to the roots' totals. The tree is cut to a bounded size: paths under a
share of all Python time (or beyond the node budget) are folded, per parent, into one ``other`` node
that carries their whole time as its self time and counts them, so the shown selfs still add up.
Two scans of the events table (the frames, then the other host events with a parent),
then one vectorised pass per host depth; nothing per event in Python.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_module
from ..trace.arrays import distinct
from ._codes import hash_codes, positions
from ._read import dense_columns
from .figures import pct, us
from .waiting import waits

if TYPE_CHECKING:
    import numpy as np

    from ..trace import Trace
else:  # numpy loads on first use: the records here are read without it
    np = lazy_module("numpy", globals(), "np")

MIN_SHARE_PCT = 0.5   # a path under this share of all Python time is folded into its parent's "other"
MAX_NODES = 200       # the most nodes a tree keeps (the largest paths; "other" nodes not counted)
_WHERE = re.compile(r"(?P<file>.+)\((?P<line>\d+)\): (?P<fn>.+)")


@dataclass(frozen=True)
class CallNode:
    """One call path (or, ``folded > 0``, the paths folded under one parent). ``parent`` is the index of
    the parent node in :attr:`CallTree.nodes` (-1: a root)."""

    id: int
    parent: int
    depth: int
    name: str            # as recorded; "other" for a folded node
    function: str        # the function's name ("_bootstrap" of "threading.py(1032): _bootstrap")
    location: str        # "threading.py:1032", or "" where the name carries none
    calls: int
    total_us: float
    self_us: float       # total less the child frames
    python_us: float     # of self: in no op, annotation or runtime call (none where the frame waits)
    waiting_us: float    # of self: in no op, annotation or runtime call, where the frame waits (.waiting)
    folded: int = 0      # a folded node: how many call paths it holds


@dataclass(frozen=True)
class CallTree:
    """The call tree in depth-first order, the children of each node (and the roots) by total time,
    largest first; "other" nodes last among their siblings."""

    total_us: float      # the roots' totals: all recorded Python time, every thread's
    python_us: float     # of it, in no op, annotation or runtime call, in a frame that does not wait
    waiting_us: float    # of it, in no op, annotation or runtime call, in a frame that waits (.waiting)
    frames: int          # python_function events
    paths: int           # distinct call paths
    threads: int         # threads with Python frames
    folded_paths: int    # call paths folded into "other" nodes
    min_share_pct: float
    nodes: list[CallNode]


def split_name(name: str) -> tuple[str, str]:
    """(function, location) of a frame name: ``torch/nn/modules/linear.py(125): forward`` ->
    (``forward``, ``torch/nn/modules/linear.py:125``); a name without a location is its own function."""
    m = _WHERE.fullmatch(name)
    return (m.group("fn"), f"{m.group('file')}:{m.group('line')}") if m else (name, "")


@dataclass
class _Paths:
    """Per call path: parent path (-1: root), name code, level, calls and ns figures."""

    parent: np.ndarray
    name: np.ndarray
    level: np.ndarray
    calls: np.ndarray
    total: np.ndarray
    self_: np.ndarray
    python: np.ndarray
    waiting: np.ndarray


@dataclass
class _Frames:
    """The Python frames (those with a name: id, parent or -1, thread, name code, start, end), their
    distinct names in name order, and the other host events with a parent (id, parent, start, end)."""

    id: np.ndarray
    parent: np.ndarray
    thread: np.ndarray
    code: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    names: list[str]
    others: dict[str, np.ndarray]
    events: int          # rows of the events table (ids run below it)


_PY = "kind = 'python' AND name IS NOT NULL"
# two scans: the frames with what only they need (thread, the name's hash), then every other event
# with a parent (only host events have one), which only holds frames or sits between them. A host event
# with neither is a root that is no frame: nothing's time and no frame's ancestor needs its row.
_FRAME_ROWS = f"""
    SELECT id, coalesce(parent, -1) AS parent, ts, ts + dur AS stop, coalesce(thread, -1) AS thread,
           hash(name) AS h
    FROM events WHERE {_PY}"""
# the other events with a parent: of every kind but python (a test of the kind alone: a test of the name
# would read every name), then the python events without a name, which traces hardly ever hold
_OTHER_ROWS = [f"SELECT id, parent, ts, ts + dur AS stop FROM events WHERE parent IS NOT NULL AND {where}"
               for where in ("kind IS DISTINCT FROM 'python'", "kind = 'python' AND name IS NULL")]


def _frames(trace: Trace) -> _Frames:
    """The frames' distinct names, then the frames and the other events with a parent, each in one scan."""
    con = trace.con
    named = con.execute(f"SELECT name, hash(name) FROM (SELECT DISTINCT name FROM events WHERE {_PY}) ORDER BY name"
                        ).fetchall()
    names = [str(n) for n, _ in named]
    n = int(con.execute("SELECT count(*) FROM events").fetchall()[0][0])
    f = dense_columns(con, _FRAME_ROWS)
    code = hash_codes(np.asarray([h for _, h in named], dtype=np.uint64), f["h"])
    if code is None:   # two names with one hash: code them by name instead
        code = frame_codes(con, names, f["id"])
    others, unnamed = (dense_columns(con, q) for q in _OTHER_ROWS)
    if len(unnamed["id"]):
        others = {k: np.concatenate([v, unnamed[k]]) for k, v in others.items()}
    return _Frames(id=f["id"], parent=f["parent"], thread=f["thread"], code=code, ts=f["ts"],
                   end=f["stop"], names=names, others=others, events=n)


def frame_codes(con: Any, names: list[str], ids: np.ndarray) -> np.ndarray:
    """Each frame's (``ids``, in that order) name code by a join on the names themselves."""
    rows = con.execute("""
        SELECT e.id, nm.code FROM events e
        JOIN (SELECT unnest(?::VARCHAR[]) AS name, unnest(range(?)) AS code) nm ON nm.name = e.name
        WHERE e.kind = 'python'""", [names, len(names)]).fetchnumpy()
    code = np.zeros(len(ids), dtype=np.int64)
    at = positions(ids, np.asarray(rows["id"], dtype=np.int64))   # each row is a frame's (both kind 'python')
    code[at[at >= 0]] = np.asarray(rows["code"], dtype=np.int64)[at >= 0]
    return code


def _covered(group: np.ndarray, start: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray,
             n: int, *, overwrite: bool = False) -> np.ndarray:
    """Per group (0..n-1): the length of the union of its members' intervals, each clipped to the
    group's [lo, hi). Where no two members of a group overlap, the sum of their lengths; members that
    overlap an earlier one of their group (a ``record_function`` that outlives the frame it started in)
    are rare, so only their groups are merged, by one sweep over them all (:func:`union_per_group`).
    Times are offsets into the group's span (a union's length does not depend on where it lies), worked
    out in copies of ``start`` and ``end``, or with ``overwrite`` in the caller's arrays themselves, each
    temporary freed before the next is made: the arrays here are as long as the trace has host events."""
    from .busy import union_per_group

    if not overwrite:
        start, end = start.copy(), end.copy()
    at = lo[group]
    start -= at
    end -= at
    del at
    np.maximum(start, 0, out=start)
    np.maximum(end, 0, out=end)
    span = (hi - lo)[group]
    np.minimum(start, span, out=start)
    np.minimum(end, span, out=end)
    del span
    length = end - start
    out = np.bincount(group, weights=length, minlength=n)
    g, s, e = _overlapping(group, start, end, length, n)
    if g.size:
        out[distinct(g)] = union_per_group(g, s, e)[0]
    return out


def _overlapping(group: np.ndarray, start: np.ndarray, end: np.ndarray, length: np.ndarray,
                 n: int) -> tuple[np.ndarray, ...]:
    """(group, start, end) of the members of every group where two overlap, by group, then start. An
    overlap in a group shows between neighbours in start order. Where group and times fit in 63 bits
    together, one sort of one key: ``group * width + time``, so that a member's end key falls short of
    every later group's keys and neighbours overlap exactly where the next start key is under the end key."""
    if group.size == 0:
        return group, start, end
    width = max(int(start.max()), int(end.max())) + 1
    if min(int(start.min()), int(end.min())) < 0 or n * width >= 2**62:
        order = np.lexsort((start, group))
        g, s, e = group[order], start[order], end[order]
        bad = np.zeros(n, dtype=bool)
        bad[g[1:][(g[1:] == g[:-1]) & (s[1:] < e[:-1])]] = True
        at = np.flatnonzero(bad[g])
        return g[at], s[at], e[at]
    key = group * width
    key += start
    order = np.argsort(key, kind="stable")
    ks = key[order]
    del key
    ke = length[order]
    del order
    ke += ks
    bad = distinct(ks[1:][ks[1:] < ke[:-1]] // width)
    # each bad group's members are one run of the sorted keys
    first = np.searchsorted(ks, bad * width)
    count = np.searchsorted(ks, (bad + 1) * width) - first
    at = np.arange(int(count.sum())) + np.repeat(first - (np.cumsum(count) - count), count)
    g = np.repeat(bad, count)
    return g, ks[at] - g * width, ke[at] - g * width


def _small(values: np.ndarray) -> np.ndarray:
    """Non-negative integers in the smallest type that holds them (a stable sort of 16-bit keys is a radix sort)."""
    top = int(values.max()) if values.size else 0
    return values.astype(np.int16 if top < 2**15 else np.int32 if top < 2**31 else np.int64)


_DIRECT_MAX = 1 << 24   # the most keys a direct table of seen keys covers (else a sort finds the distinct ones)


def _distinct(keys: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys ascending, each key's position among them) of non-negative keys under ``top``: a
    table of the seen keys where the range is small, else a sort."""
    if top > max(_DIRECT_MAX, 4 * keys.size):
        uniq, inverse = np.unique(keys, return_inverse=True)
        return uniq, inverse.reshape(-1)
    seen = np.zeros(top, dtype=bool)
    seen[keys] = True
    uniq = np.flatnonzero(seen)
    rank = np.empty(top, dtype=np.int64)
    rank[uniq] = np.arange(uniq.size)
    return uniq, rank[keys]


def _paths(py_parent: np.ndarray, depth: np.ndarray, code: np.ndarray,
           n_names: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each frame's call path id, each path's parent path (-1: root) and level (frames around it).

    A path is known by its key, (parent path + 1) * n_names + name. By ``depth`` (among the frames): a
    frame's Python parent is one level up, so one vectorised step per depth (over the frames sorted by it,
    each step a slice) finds each frame's key from its parent's path; the keys met are kept. Ids are then
    renumbered level by level, by key: the order of the paths does not depend on the order of the frames."""
    from ..trace.event_columns import row_type

    nf = len(code)
    order = np.argsort(_small(depth), kind="stable")
    place = row_type(nf + 1)                    # positions among the frames (and the slot after): int32 where they fit
    at = np.empty(nf + 1, dtype=place)          # each frame's place in that order; no parent: the slot after
    at[order] = np.arange(nf, dtype=place)
    at[nf] = nf
    up = at[py_parent[order]]
    name = code[order]
    base = np.zeros(nf + 1, dtype=np.int64)     # per frame in order: (its path + 1) * n_names; the slot after: 0
    in_order = np.empty(nf, dtype=place)        # per frame in order: its path
    known = np.zeros(0, dtype=np.int64)         # the keys met, ascending, and the path id of each
    met = np.zeros(0, dtype=np.int64)
    counts = np.bincount(depth) if nf else np.zeros(0, dtype=np.int64)   # the frames of each depth: a slice each
    cuts = [0, *np.cumsum(counts[counts > 0]).tolist()]
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        keys, inverse = _distinct(base[up[lo:hi]] + name[lo:hi], (len(known) + 1) * n_names)
        seen = np.minimum(np.searchsorted(known, keys), max(len(known) - 1, 0))
        new = keys[known[seen] != keys] if len(known) else keys
        merged = np.argsort(np.concatenate([known, new]), kind="stable")
        known = np.concatenate([known, new])[merged]
        met = np.concatenate([met, np.arange(len(met), len(met) + len(new))])[merged]
        ids = met[np.searchsorted(known, keys)]
        in_order[lo:hi] = ids[inverse]
        base[lo:hi] = ((ids + 1) * n_names)[inverse]
    path = np.empty(nf, dtype=place)
    path[order] = in_order
    key = np.empty(len(known), dtype=np.int64)  # each path's key, by path id
    key[met] = known
    number, parent, level = _renumbered(key, n_names)
    return number[path], parent, level


def _renumbered(key: np.ndarray, n_names: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Paths (by their keys, a parent's id below its children's) numbered by level, then parent path's
    number, then name: each one's number, and by number the parent path (-1: root) and level."""
    k = len(key)
    up = key // n_names - 1
    level = np.zeros(k, dtype=np.int64)
    has = np.flatnonzero(up >= 0)
    while has.size:   # one step per level: a path's level is its parent's plus one
        step = level[up[has]] + 1
        if np.array_equal(step, level[has]):
            break
        level[has] = step
    number = np.full(k, -1, dtype=np.int64)
    done = 0
    for lv in range(int(level.max()) + 1 if k else 0):
        at = np.flatnonzero(level == lv)
        parent = np.where(up[at] >= 0, number[np.maximum(up[at], 0)], -1)
        at = at[np.argsort((parent + 1) * n_names + key[at] % n_names, kind="stable")]
        number[at] = np.arange(done, done + len(at))
        done += len(at)
    parent, lv_of = np.full(k, -1, dtype=np.int64), np.zeros(k, dtype=np.int64)
    parent[number] = np.where(up >= 0, number[np.maximum(up, 0)], -1)
    lv_of[number] = level
    return number, parent, lv_of


def _measure(trace: Trace) -> tuple[_Paths, list[str], int, int]:
    """Every call path with its figures; the frame names; frames and threads counted."""
    f = _frames(trace)
    py_parent, py_depth, held = _python_parents(f)
    path, path_parent, path_level = _paths(py_parent, py_depth, f.code, max(len(f.names), 1))
    # events right in a frame (frames, then the others): what its Python time leaves out; worked out first,
    # each input let go as soon as it is read (the arrays here are as long as the trace has host events)
    in_host = _in_host(f, held)
    dur = (f.end - f.ts).astype(np.float64)
    has = py_parent >= 0
    # what a frame's self time leaves out: its child frames' whole durations (pyinstrument's self, so each
    # node's total is its self plus its children's totals, even where a child ends a µs after it: rounding)
    in_frames = np.bincount(py_parent[has], weights=dur[has], minlength=len(f.id))
    k = len(path_parent)
    first = np.full(k, -1, dtype=np.int64)
    first[path[::-1]] = np.arange(len(f.id))[::-1]  # a frame of each path: its name
    paths = split_waiting(f.names, parent=path_parent, name=f.code[first], level=path_level,
                          calls=np.bincount(path, minlength=k), total=np.bincount(path, weights=dur, minlength=k),
                          self_=np.bincount(path, weights=dur - in_frames, minlength=k),
                          python=np.bincount(path, weights=np.minimum(dur - in_host, dur - in_frames), minlength=k))
    return paths, f.names, len(f.id), int(np.count_nonzero(np.bincount(f.thread + 1))) if len(f.id) else 0


def split_waiting(names: list[str], **columns: np.ndarray) -> _Paths:
    """:class:`_Paths` from its columns, ``python`` holding all the time in no other host event: a path whose
    frame waits (:mod:`.waiting`, each distinct name asked once) has that time as its ``waiting`` instead."""
    python = columns.pop("python")
    waiting = np.where(np.asarray([waits(n) for n in names], dtype=bool)[columns["name"]], python, 0.0)
    return _Paths(**columns, python=python - waiting, waiting=waiting)


def _in_host(f: _Frames, held: list[np.ndarray]) -> np.ndarray:
    """Per frame: the length of the union of the events right in it (frames, then the other events:
    :func:`_covered`), each clipped to the frame. ``held`` (the frame each frame and each other event sits
    right in) is emptied and the other events let go (``f.others`` emptied) once read: the caller's last
    use of both."""
    o = f.others
    in_frame, in_other = held
    held.clear()
    in_f, in_o = np.flatnonzero(in_frame >= 0), np.flatnonzero(in_other >= 0)
    group = np.concatenate([in_frame[in_f], in_other[in_o]])
    del in_frame, in_other
    start = np.concatenate([f.ts[in_f], o["ts"][in_o]])
    end = np.concatenate([f.end[in_f], o["stop"][in_o]])
    o.clear()
    del in_f, in_o
    return _covered(group, start, end, f.ts, f.end, len(f.id), overwrite=True)


def _python_parents(f: _Frames) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Each frame's Python parent (the innermost frame that holds it on its thread: the load's nesting over
    the frames alone) as a position among the frames (-1: none) and its depth among them, and the position
    of the frame each frame and each other event sits right in (-1: its parent is no frame)."""
    from ..trace.correlate import nesting_in_order
    from ..trace.event_columns import row_type

    # positions among the frames: int32 where they fit (each array here is as long as the trace has frames)
    py_parent, py_depth, _ = nesting_in_order(f.thread, f.ts, f.end - f.ts, np.ones(len(f.id), dtype=bool),
                                              index=row_type(len(f.id)))
    # one slot more, -1, where index -1 (no parent) lands. Events not read are roots and no frames.
    pos = np.full(f.events + 1, -1, dtype=np.int64)
    pos[f.id] = np.arange(len(f.id))
    return py_parent, py_depth, [pos[f.parent], pos[f.others["parent"]]]


def _subtree_sums(p: _Paths) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per path: its subtree's python ns, waiting ns and path count (itself included)."""
    python, waiting, count = p.python.copy(), p.waiting.copy(), np.ones(len(p.parent), dtype=np.int64)
    for lv in range(int(p.level.max()) if len(p.level) else 0, 0, -1):
        at = np.flatnonzero(p.level == lv)
        np.add.at(python, p.parent[at], python[at])
        np.add.at(waiting, p.parent[at], waiting[at])
        np.add.at(count, p.parent[at], count[at])
    return python, waiting, count


def _kept(p: _Paths, floor_ns: float, max_nodes: int) -> np.ndarray:
    """Which paths the tree shows: at or above ``floor_ns``, under a shown parent, the largest
    ``max_nodes`` of them (a parent before its children on ties)."""
    keep = np.zeros(len(p.parent), dtype=bool)
    shown = 0
    for i in np.lexsort((p.level, -p.total)).tolist():
        if shown >= max_nodes or p.total[i] < floor_ns:
            break
        if p.parent[i] < 0 or keep[p.parent[i]]:
            keep[i] = True
            shown += 1
    return keep


def call_tree(trace: Trace, *, min_share_pct: float = MIN_SHARE_PCT, max_nodes: int = MAX_NODES) -> CallTree:
    """The trace's Python call tree (see the module docstring); no nodes where it has no Python frames."""
    p, names, frames, threads = _measure(trace)
    total_ns = float(p.total[p.parent < 0].sum()) if len(p.parent) else 0.0
    keep = _kept(p, total_ns * min_share_pct / 100, max_nodes)
    sub_python, sub_waiting, sub_count = _subtree_sums(p)
    children: dict[int, list[int]] = {}
    for i in np.flatnonzero(keep).tolist():
        children.setdefault(int(p.parent[i]), []).append(i)
    folded_under: dict[int, list[int]] = {}
    for i in np.flatnonzero(~keep & ((p.parent < 0) | keep[np.maximum(p.parent, 0)])).tolist():
        folded_under.setdefault(int(p.parent[i]), []).append(i)
    nodes: list[CallNode] = []

    def emit(path: int, parent: int, depth: int) -> None:
        name = names[int(p.name[path])]
        function, location = split_name(name)
        me = len(nodes)
        nodes.append(CallNode(id=me, parent=parent, depth=depth, name=name, function=function, location=location,
                              calls=int(p.calls[path]), total_us=us(float(p.total[path]) / 1e3),
                              self_us=us(float(p.self_[path]) / 1e3), python_us=us(float(p.python[path]) / 1e3),
                              waiting_us=us(float(p.waiting[path]) / 1e3)))
        walk(path, me, depth + 1)

    def walk(path: int, parent: int, depth: int) -> None:
        for c in sorted(children.get(path, []), key=lambda i: (-p.total[i], names[int(p.name[i])])):
            emit(c, parent, depth)
        rest = folded_under.get(path, [])
        if rest:
            t = float(p.total[rest].sum())
            nodes.append(CallNode(id=len(nodes), parent=parent, depth=depth, name="other", function="other",
                                  location="", calls=int(p.calls[rest].sum()), total_us=us(t / 1e3),
                                  self_us=us(t / 1e3), python_us=us(float(sub_python[rest].sum()) / 1e3),
                                  waiting_us=us(float(sub_waiting[rest].sum()) / 1e3),
                                  folded=int(sub_count[rest].sum())))

    walk(-1, -1, 0)
    return CallTree(total_us=us(total_ns / 1e3), python_us=us(float(p.python.sum()) / 1e3),
                    waiting_us=us(float(p.waiting.sum()) / 1e3), frames=frames,
                    paths=len(p.parent), threads=threads, folded_paths=sum(n.folded for n in nodes),
                    min_share_pct=pct(min_share_pct), nodes=nodes)
