"""The Python call tree: a trace's ``python_function`` events (nn.Module scopes included) merged by call
path, as pyinstrument shows a profile, with each path's calls, total time and self time.

A frame's *call path* is the names of the Python frames around it, outermost first, then its own name
(``file(line): function`` as Kineto writes it). The frames around an event are its ancestors in the
``events`` table's nesting (``parent``: the innermost enclosing host event on its thread), so an op or a
``record_function`` between two frames does not break the path. Per path:

- ``total``: the frames' durations (frames of one path never nest: a nested call has a longer path);
- ``self``: total less the child frames' totals (pyinstrument's self time: the time this function was
  the innermost Python frame, its ops and runtime calls included);
- ``python``: the part of ``self`` in no other host event (no op, annotation or runtime call; their
  union, each cut to the frame): the interpreter itself, what the CPU budget's ``cpu/python`` counts.

Self times of all paths add up to the roots' totals. The tree is cut to a bounded size: paths under a
share of all Python time (or beyond the node budget) are folded, per parent, into one ``other`` node
that carries their whole time as its self time and counts them, so the shown selfs still add up.
One vectorised pass per nesting level; nothing per event in Python.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_module
from ..trace.schema import HOST_KINDS
from .figures import pct, us

if TYPE_CHECKING:
    import numpy as np

    from ..trace import Trace
else:  # numpy loads on first use: the records here are read without it
    np = lazy_module("numpy", globals(), "np")

HOST = "(" + ", ".join(f"'{k}'" for k in HOST_KINDS) + ")"
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
    python_us: float     # of self: in no op, annotation or runtime call
    folded: int = 0      # a folded node: how many call paths it holds


@dataclass(frozen=True)
class CallTree:
    """The call tree in depth-first order, the children of each node (and the roots) by total time,
    largest first; "other" nodes last among their siblings."""

    total_us: float      # the roots' totals: all recorded Python time, every thread's
    python_us: float     # of it, in no op, annotation or runtime call
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


def _frames(trace: Trace) -> tuple[dict[str, Any], list[str], dict[str, np.ndarray]]:
    """The Python frames (id, depth, name code, thread), their distinct names, and every host event's
    parent, start and end by id (-1 / 0 where none)."""
    con = trace.con
    # each distinct name keyed by its first frame's id (the same in both queries), coded densely here
    first = "SELECT name, min(id) AS first FROM events WHERE kind = 'python' GROUP BY name"
    named = con.execute(f"SELECT first, name FROM ({first}) ORDER BY name, first").fetchall()
    frames = con.execute(f"""
        SELECT e.id, coalesce(e.depth, 0) AS depth, n.first, e.thread
        FROM events e JOIN ({first}) n ON n.name = e.name WHERE e.kind = 'python'""").fetchnumpy()
    keys = np.asarray([k for k, _ in named], dtype=np.int64)
    order = np.argsort(keys)
    firsts = np.asarray(frames["first"], dtype=np.int64)
    frames["code"] = order[np.searchsorted(keys[order], firsts)] if len(keys) else firsts
    names = [str(n) for _, n in named]
    host = con.execute(f"SELECT id, coalesce(parent, -1) AS parent, ts, dur FROM events WHERE kind IN {HOST}").fetchnumpy()
    n = int(con.execute("SELECT count(*) FROM events").fetchall()[0][0])
    ids = np.asarray(host["id"], dtype=np.int64)
    by_id = {"parent": np.full(n, -1, dtype=np.int64), "ts": np.zeros(n, dtype=np.int64),
             "end": np.zeros(n, dtype=np.int64)}
    by_id["parent"][ids] = np.asarray(host["parent"], dtype=np.int64)
    by_id["ts"][ids] = np.asarray(host["ts"], dtype=np.int64)
    by_id["end"][ids] = by_id["ts"][ids] + np.asarray(host["dur"], dtype=np.int64)
    return {k: np.asarray(v) for k, v in frames.items()}, names, by_id


def _covered(group: np.ndarray, start: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray,
             n: int) -> np.ndarray:
    """Per group (0..n-1): the length of the union of its members' intervals, each clipped to the
    group's [lo, hi). Members that overlap an earlier one of their group (a ``record_function`` that
    outlives the frame it started in) are rare: only their groups are merged one interval at a time."""
    glo, ghi = lo[group], hi[group]
    s = np.minimum(np.maximum(start, glo), ghi)
    e = np.minimum(np.maximum(end, glo), ghi)
    order = np.lexsort((s, group))
    g, s, e = group[order], s[order], e[order]
    out = np.bincount(g, weights=(e - s).astype(np.float64), minlength=n)
    overlap = (g[1:] == g[:-1]) & (s[1:] < e[:-1])  # an overlap in a group shows between neighbours
    for grp in np.unique(g[1:][overlap]).tolist():
        at = np.flatnonzero(g == grp)
        total, reach = 0, None
        for a, b in zip(s[at].tolist(), e[at].tolist()):
            if reach is None or a >= reach:
                total, reach = total + (b - a), b
            elif b > reach:
                total, reach = total + (b - reach), b
        out[grp] = total
    return out


def _levels(py_parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Each frame's Python depth (frames around it), by host depth: a frame's Python parent is always
    shallower in the host nesting, so one vectorised step per host depth."""
    level = np.zeros(len(py_parent), dtype=np.int64)
    order = np.argsort(depth, kind="stable")
    bounds = np.flatnonzero(np.diff(depth[order])) + 1
    for group in np.split(order, bounds):
        p = py_parent[group]
        has = p >= 0
        level[group[has]] = level[p[has]] + 1
    return level


def _paths(py_parent: np.ndarray, level: np.ndarray, code: np.ndarray, n_names: int) -> tuple[np.ndarray, np.ndarray]:
    """Each frame's call path id, and each path's parent path (-1: root), one level at a time."""
    path = np.full(len(code), -1, dtype=np.int64)
    parents: list[np.ndarray] = []
    next_id = 0
    order = np.argsort(level, kind="stable")
    bounds = np.flatnonzero(np.diff(level[order])) + 1
    for group in np.split(order, bounds) if len(order) else []:
        p = py_parent[group]
        up = np.where(p >= 0, path[np.maximum(p, 0)], -1)
        keys, inverse = np.unique((up + 1) * n_names + code[group], return_inverse=True)
        path[group] = next_id + inverse.reshape(-1)
        parents.append(keys // n_names - 1)
        next_id += len(keys)
    return path, np.concatenate(parents) if parents else np.zeros(0, dtype=np.int64)


def _measure(trace: Trace) -> tuple[_Paths, list[str], int, int]:
    """Every call path with its figures; the frame names; frames and threads counted."""
    from ..trace.correlate import nearest_ancestor

    frames, names, by_id = _frames(trace)
    ids = frames["id"].astype(np.int64)
    parent, lo, hi = by_id["parent"], by_id["ts"], by_id["end"]
    is_py = np.zeros(len(parent), dtype=bool)
    is_py[ids] = True
    # index frames by position: the Python parent of each frame as a frame position
    pos = np.full(len(parent), -1, dtype=np.int64)
    pos[ids] = np.arange(len(ids))
    anc = nearest_ancestor(parent, is_py, include_self=False)[ids]
    py_parent = np.where(anc >= 0, pos[np.maximum(anc, 0)], -1)
    level = _levels(py_parent, frames["depth"].astype(np.int64))
    code = frames["code"].astype(np.int64)
    path, path_parent = _paths(py_parent, level, code, max(len(names), 1))
    dur = (hi[ids] - lo[ids]).astype(np.float64)
    has = py_parent >= 0
    # what a frame's self time leaves out: its child frames' whole durations (pyinstrument's self, so each
    # node's total is its self plus its children's totals, even where a child ends a µs after it: rounding)
    in_frames = np.bincount(py_parent[has], weights=dur[has], minlength=len(ids))
    hosted = np.flatnonzero(parent >= 0)
    hosted = hosted[is_py[parent[hosted]]]  # host events right in a frame: what its Python time leaves out
    in_host = _covered(pos[parent[hosted]], lo[hosted], hi[hosted], lo[ids], hi[ids], len(ids))
    k = len(path_parent)
    first = np.full(k, -1, dtype=np.int64)
    first[path[::-1]] = np.arange(len(ids))[::-1]  # a frame of each path: its name and level
    paths = _Paths(parent=path_parent, name=code[first], level=level[first],
                   calls=np.bincount(path, minlength=k), total=np.bincount(path, weights=dur, minlength=k),
                   self_=np.bincount(path, weights=dur - in_frames, minlength=k),
                   python=np.bincount(path, weights=np.minimum(dur - in_host, dur - in_frames), minlength=k))
    return paths, names, len(ids), int(np.unique(frames["thread"]).size)


def _subtree_sums(p: _Paths) -> tuple[np.ndarray, np.ndarray]:
    """Per path: its subtree's python ns and its subtree's path count (itself included)."""
    python, count = p.python.copy(), np.ones(len(p.parent), dtype=np.int64)
    for lv in range(int(p.level.max()) if len(p.level) else 0, 0, -1):
        at = np.flatnonzero(p.level == lv)
        np.add.at(python, p.parent[at], python[at])
        np.add.at(count, p.parent[at], count[at])
    return python, count


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
    sub_python, sub_count = _subtree_sums(p)
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
                              self_us=us(float(p.self_[path]) / 1e3), python_us=us(float(p.python[path]) / 1e3)))
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
                                  folded=int(sub_count[rest].sum())))

    walk(-1, -1, 0)
    return CallTree(total_us=us(total_ns / 1e3), python_us=us(float(p.python.sum()) / 1e3), frames=frames,
                    paths=len(p.parent), threads=threads, folded_paths=sum(n.folded for n in nodes),
                    min_share_pct=pct(min_share_pct), nodes=nodes)
