"""The call tree's and the op table's faster rules (analysis/calltree.py, analysis/optable.py) against the
previous implementations, kept below as the oracles: every call path's figures, the tree built from them
and every op table grouping are equal, on every shared trace and on traces built here for the rare shapes
(a record_function outliving its frame, one call path met at two host depths, recursion, several threads,
zero-length frames, names that share nothing)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ALL_TRACES, trace_id

import profuse
from profuse.analysis import calltree, optable
from profuse.analysis._codes import hash_codes
from profuse.analysis.memory import has_memory
from profuse.trace.schema import DEVICE_TIME_SQL, TABLE_KINDS_SQL

# ---- the previous call tree measure: two fetchnumpy scans, levels then paths by sorting ------------------

_PY = "kind = 'python' AND name IS NOT NULL"


@dataclass
class _OldFrames:
    """The frames as the previous measure read them: id, host depth, thread, name code, start, end, names,
    and every event with a parent (id, parent, start, stop)."""

    id: np.ndarray
    depth: np.ndarray
    thread: np.ndarray
    code: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    names: list[str]
    nested: dict[str, np.ndarray]
    events: int


def _old_frames(trace: Any) -> _OldFrames:
    con = trace.con
    named = con.execute(f"SELECT name, hash(name) FROM (SELECT DISTINCT name FROM events WHERE {_PY}) ORDER BY name"
                        ).fetchall()
    names = [str(n) for n, _ in named]
    f = con.execute(f"SELECT id, coalesce(depth, 0) AS depth, thread, ts, dur, hash(name) AS h FROM events WHERE {_PY}"
                    ).fetchnumpy()
    code = hash_codes(np.asarray([h for _, h in named], dtype=np.uint64), np.asarray(f["h"], dtype=np.uint64))
    ids = np.asarray(f["id"], dtype=np.int64)
    if code is None:
        code = calltree.frame_codes(con, names, ids)
    nested = con.execute("SELECT id, parent, ts, ts + dur AS stop FROM events WHERE parent IS NOT NULL").fetchnumpy()
    n = int(con.execute("SELECT count(*) FROM events").fetchall()[0][0])
    ts = np.asarray(f["ts"], dtype=np.int64)
    return _OldFrames(id=ids, depth=np.asarray(f["depth"], dtype=np.int64), thread=np.asarray(f["thread"]),
                      code=code, ts=ts, end=ts + np.asarray(f["dur"], dtype=np.int64), names=names,
                      nested={k: np.asarray(v, dtype=np.int64) for k, v in nested.items()}, events=n)


OVERHANG_NS = 1000  # docs/correlation.md: a call may end up to 1 µs after its holder (µs rounding) and stay in it


def frame_parents(thread: np.ndarray, ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each frame's Python parent as the call tree reads it now: the innermost frame that holds it on its
    thread, by a plain stack walk over the frames alone (by start, the longer first, then position; a
    zero-length frame 1 ns long; one ending up to OVERHANG_NS after a frame still in it). Positions among
    the frames (-1: none) and each frame's depth among them. The previous rules below took the nearest
    frame up the events table's ``parent`` chain, which skips the frame that a record_function outliving
    it began in; every other part of them is as it was."""
    th, s, e = thread.tolist(), ts.tolist(), end.tolist()
    e1 = [a + max(b - a, 1) for a, b in zip(s, e)]
    parent, depth = np.full(len(s), -1, dtype=np.int64), np.zeros(len(s), dtype=np.int64)
    open_: dict[int, list[int]] = {}
    for i in sorted(range(len(s)), key=lambda i: (th[i], s[i], -e1[i], i)):
        stack = open_.setdefault(th[i], [])
        stack[:] = [o for o in stack if e1[o] > s[i]]
        p = next((o for o in reversed(stack) if e1[i] <= e1[o] + OVERHANG_NS), -1)
        parent[i], depth[i] = p, depth[p] + 1 if p >= 0 else 0
        stack.append(i)
    return parent, depth


def _old_levels(py_parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    level = np.zeros(len(py_parent), dtype=np.int64)
    order = np.argsort(depth, kind="stable")
    for group in np.split(order, np.flatnonzero(np.diff(depth[order])) + 1):
        p = py_parent[group]
        has = p >= 0
        level[group[has]] = level[p[has]] + 1
    return level


def _old_paths(py_parent: np.ndarray, level: np.ndarray, code: np.ndarray, n_names: int) -> tuple[np.ndarray, np.ndarray]:
    path = np.full(len(code), -1, dtype=np.int64)
    parents: list[np.ndarray] = []
    next_id = 0
    order = np.argsort(level, kind="stable")
    for group in np.split(order, np.flatnonzero(np.diff(level[order])) + 1) if len(order) else []:
        p = py_parent[group]
        up = np.where(p >= 0, path[np.maximum(p, 0)], -1)
        keys, inverse = np.unique((up + 1) * n_names + code[group], return_inverse=True)
        path[group] = next_id + inverse.reshape(-1)
        parents.append(keys // n_names - 1)
        next_id += len(keys)
    return path, np.concatenate(parents) if parents else np.zeros(0, dtype=np.int64)


def old_measure(trace: Any) -> tuple[calltree._Paths, list[str], int, int]:
    """The previous ``calltree._measure``, as it was (Python parents: :func:`frame_parents`)."""
    f = _old_frames(trace)
    nested = f.nested
    pos = np.full(f.events, -1, dtype=np.int64)
    pos[f.id] = np.arange(len(f.id))
    py_parent, frame_depth = frame_parents(f.thread, f.ts, f.end)
    level = _old_levels(py_parent, frame_depth)
    path, path_parent = _old_paths(py_parent, level, f.code, max(len(f.names), 1))
    dur = (f.end - f.ts).astype(np.float64)
    has = py_parent >= 0
    in_frames = np.bincount(py_parent[has], weights=dur[has], minlength=len(f.id))
    held = pos[nested["parent"]]
    inside = held >= 0
    in_host = calltree._covered(held[inside], nested["ts"][inside], nested["stop"][inside], f.ts, f.end, len(f.id))
    k = len(path_parent)
    first = np.full(k, -1, dtype=np.int64)
    first[path[::-1]] = np.arange(len(f.id))[::-1]
    paths = calltree.split_waiting(f.names, parent=path_parent, name=f.code[first], level=level[first],
                                   calls=np.bincount(path, minlength=k), total=np.bincount(path, weights=dur, minlength=k),
                                   self_=np.bincount(path, weights=dur - in_frames, minlength=k),
                                   python=np.bincount(path, weights=np.minimum(dur - in_host, dur - in_frames), minlength=k))
    return paths, f.names, len(f.id), int(np.unique(f.thread).size)


# ---- the previous op table by module: one SQL query, a recursive walk up the scopes -----------------------

def old_module_rows(trace: Any) -> list[optable.OpRow]:
    """The previous ``optable._by_module``, as it was (its self CPU NULL: a module class has none)."""
    dev = "self_cpu" if trace.cpu_only else "dur"
    kinds = TABLE_KINDS_SQL if trace.cpu_only else DEVICE_TIME_SQL
    return optable._rows(trace, f"""
        WITH RECURSIVE up(scope, anc) AS (
            SELECT id, id FROM scopes WHERE kind = 'module'
            UNION ALL
            SELECT up.scope, s.parent FROM up JOIN scopes s ON s.id = up.anc WHERE s.parent IS NOT NULL
        ),
        timed AS (SELECT module, {dev} AS t FROM events WHERE kind IN ({kinds}) AND module IS NOT NULL),
        self_t AS (SELECT module AS scope, sum(t) AS t, count(*) AS k FROM timed GROUP BY 1),
        total_t AS (SELECT u.anc AS scope, sum(st.t) AS t FROM up u JOIN self_t st ON st.scope = u.scope
                    JOIN scopes a ON a.id = u.anc AND a.kind = 'module' GROUP BY 1),
        inner_same AS (SELECT DISTINCT u.scope FROM up u JOIN scopes a ON a.id = u.anc JOIN scopes s ON s.id = u.scope
                       WHERE u.anc <> u.scope AND a.kind = 'module' AND a.name = s.name)
        SELECT s.name, count(*), NULL, sum(CASE WHEN i.scope IS NULL THEN s.dur ELSE 0 END), sum(coalesce(st.t, 0)),
               sum(CASE WHEN i.scope IS NULL THEN coalesce(tt.t, 0) ELSE 0 END), sum(coalesce(st.k, 0))
        FROM scopes s LEFT JOIN self_t st ON st.scope = s.id LEFT JOIN total_t tt ON tt.scope = s.id
        LEFT JOIN inner_same i ON i.scope = s.id
        WHERE s.kind = 'module' GROUP BY s.name""")


def less_nested_again(trace: Any, found: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Op rows (name, calls, self CPU, CPU total, self device, device total, kernels, ...) less, per name, the
    time and device total (the time on a CPU-only trace) of the calls with an op-table ancestor of the same
    name at any depth, found here by walking each call's parents in SQL one step at a time until one is (a
    recursive query), the slow way: the rule docs/correlation.md states, not profuse's nested_calls table."""
    dt = "e.dur" if trace.cpu_only else "coalesce(e.device_total, 0)"
    table = f"kind IN ({TABLE_KINDS_SQL}) AND depth IS NOT NULL"
    nested = {name: (int(ns), int(dns)) for name, ns, dns in trace.con.execute(f"""
        WITH RECURSIVE up(id, name, dur, dt, anc) AS (
            SELECT e.id, e.name, e.dur, {dt}, e.parent FROM events e WHERE e.{table.replace(" AND ", " AND e.")}
            UNION ALL
            SELECT u.id, u.name, u.dur, u.dt, p.parent FROM up u JOIN events p ON p.id = u.anc
            WHERE NOT (p.{table.replace(" AND ", " AND p.")} AND p.name = u.name))
        SELECT u.name, sum(u.dur), sum(u.dt) FROM up u JOIN events a ON a.id = u.anc
        WHERE a.{table.replace(" AND ", " AND a.")} AND a.name = u.name GROUP BY u.name""").fetchall()}
    out = []
    for r in found:
        ns, dns = nested.get(r[0], (0, 0))
        out.append((*r[:3], (r[3] or 0) - ns, r[4], (r[5] or 0) - dns, *r[6:]))
    return out


def old_op_rows(trace: Any) -> list[optable.OpRow]:
    """The previous ``optable._by_op``, as it was, less the calls inside one of their own name (that rule's
    own walk: :func:`less_nested_again`)."""
    sd, dt = ("self_cpu", "dur") if trace.cpu_only else ("self_device", "device_total")
    mem = has_memory(trace)
    sums = ", sum(m.cpu_mem), sum(m.self_cpu_mem), sum(m.device_mem), sum(m.self_device_mem)" if mem else ""
    found = trace.con.execute(f"""
        SELECT name, count(*), sum(self_cpu), sum(dur), sum({sd}), sum({dt}), sum(kernels){sums}
        FROM events{" LEFT JOIN op_memory m USING (id)" if mem else ""}
        WHERE kind IN ({TABLE_KINDS_SQL}) AND depth IS NOT NULL{optable._not_step(trace)}
        GROUP BY name""").fetchall()
    return optable._records(less_nested_again(trace, found), with_memory=mem)


def old_kernel_rows(trace: Any) -> list[optable.OpRow]:
    """The previous ``optable._by_kernel``, as it was (its CPU columns NULL: a kernel has no CPU time)."""
    if trace.cpu_only:
        return old_op_rows(trace)
    return optable._rows(trace, f"""
        SELECT name, count(*), NULL, NULL, sum(dur), sum(dur), count(*)
        FROM events WHERE kind IN ({DEVICE_TIME_SQL}) GROUP BY name""")


# ---- traces built here: the rare shapes, and random nestings ------------------------------------------

def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def _write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _shapes() -> list[dict[str, Any]]:
    f, g, h = "m.py(1): f", "m.py(2): g", "n.py(30): h"
    return [
        _x("python_function", f, 0, 100),
        _x("python_function", g, 5, 10),                  # f > g directly (host depth 1)
        _x("cpu_op", "aten::mm", 18, 17),
        _x("python_function", g, 22, 10),                 # f > g again, under an op (host depth 2): one path
        _x("python_function", h, 24, 2),
        _x("python_function", g, 40, 20),                 # a third g: record_function outliving it below
        _x("user_annotation", "region", 45, 30),          # starts in g, ends 15 µs after it: g's sibling, overlapping
        _x("cuda_runtime", "cudaLaunchKernel", 50, 3),
        _x("python_function", f, 80, 10),                 # recursion: f > f > f
        _x("python_function", f, 81, 5),
        _x("python_function", g, 82, 0),                 # zero-length frame
        _x("python_function", h, 200, 10, tid=2),         # another thread: a root there
        _x("cpu_op", "aten::add", 212, 5, tid=2),         # an op with no frame around it
        _x("python_function", f, 213, 1, tid=2),          # a root frame under an op
    ]


def _random_events(seed: int, n: int = 3000) -> list[dict[str, Any]]:
    """Random nestings on three threads: frames (from a few names), ops, annotations (some outliving their
    holder), runtime calls, zero-length events, and siblings that touch."""
    rng = np.random.default_rng(seed)
    names = [f"mod{i % 7}.py({i}): fn{i % 5}" for i in range(12)]
    kinds = ["python_function"] * 6 + ["cpu_op"] * 3 + ["user_annotation", "cuda_runtime"]
    out: list[dict[str, Any]] = []

    def fill(tid: int, lo: int, hi: int, depth: int) -> None:
        t = lo
        while len(out) < n and t < hi and depth < 12:
            dur = int(rng.integers(0, max(hi - t, 1) + 1)) if rng.random() < 0.9 else 0
            cat = kinds[int(rng.integers(len(kinds)))]
            name = names[int(rng.integers(len(names)))] if cat == "python_function" else f"{cat}_{int(rng.integers(4))}"
            over = int(rng.integers(2000, 9000)) if cat == "user_annotation" and rng.random() < 0.2 else 0
            out.append(_x(cat, name, t / 1000, (dur + over) / 1000, tid))
            if dur > 2:
                fill(tid, t + 1, t + dur - 1, depth + 1)
            t += dur + int(rng.integers(0, 3)) * 500

    for tid in (1, 2, 3):
        fill(tid, 10_000 * tid, 10_000 * tid + 2_000_000, 0)
    return out


def _modules() -> list[dict[str, Any]]:
    """nn.Module scopes: a class nested in itself (twice), one wrapped in an annotation, kernels launched
    at every level, a module with no kernel, a kernel launched outside every module."""
    out: list[dict[str, Any]] = []
    corr = iter(range(1, 1000))

    def launch(ts: float) -> None:
        c = next(corr)
        out.append({**_x("cuda_runtime", "cudaLaunchKernel", ts, 1), "args": {"correlation": c}})
        out.append({**_x("kernel", f"k{c % 3}", ts + 2, 3 + c % 4, tid=7), "pid": 0,
                    "args": {"correlation": c, "device": 0, "stream": 7}})

    for rep in range(2):
        b = rep * 1000
        out += [_x("python_function", f"nn.Module: {name}", b + ts, dur)
                for name, ts, dur in (("Block_0", 0, 500), ("Block_1", 10, 400), ("Block_2", 20, 100),
                                      ("Linear_0", 30, 50), ("Linear_1", 210, 50), ("Idle_0", 300, 20))]
        out.append(_x("user_annotation", "wrap", b + 200, 100))
        for ts in (b + 5, b + 15, b + 25, b + 35, b + 215):
            launch(ts)
    launch(5000)
    return out


HAND = {"shapes": _shapes, "modules": _modules, **{f"random{s}": (lambda s=s: _random_events(s)) for s in range(4)}}


@pytest.fixture(params=sorted(HAND), scope="module")
def hand_trace(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("hand") / f"{request.param}.json", HAND[request.param]())


# ---- the call tree ---------------------------------------------------------------------------------------

def _same_measure(trace: Any, monkeypatch: pytest.MonkeyPatch) -> calltree._Paths:
    old = old_measure(trace)
    new = calltree._measure(trace)
    assert new[1:] == old[1:]
    for name in ("parent", "name", "level", "calls", "total", "self_", "python", "waiting"):
        np.testing.assert_array_equal(getattr(new[0], name), getattr(old[0], name), err_msg=name)
    tree = calltree.call_tree(trace)
    monkeypatch.setattr(calltree, "_measure", old_measure)
    assert tree == calltree.call_tree(trace)
    return new[0]


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_call_paths_equal_the_previous_rule_on_every_shared_trace(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with profuse.load(path) as trace:
        _same_measure(trace, monkeypatch)


def test_call_paths_equal_the_previous_rule_on_built_traces(hand_trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with profuse.load(hand_trace) as trace:
        paths = _same_measure(trace, monkeypatch)
        whole = calltree.call_tree(trace, min_share_pct=0, max_nodes=10**6)
        monkeypatch.setattr(calltree, "_measure", old_measure)
        assert whole == calltree.call_tree(trace, min_share_pct=0, max_nodes=10**6)
    assert len(paths.parent) > 3 and int(paths.level.max()) >= 2


def _path_of(tree: calltree.CallTree, node: calltree.CallNode) -> list[str]:
    out = [node.name]
    while node.parent >= 0:
        node = tree.nodes[node.parent]
        out.insert(0, node.name)
    return out


def test_the_built_shapes_reach_the_rare_branches(tmp_path: Path) -> None:
    """The shapes trace holds what the rules treat apart: one path met at two host depths, a record_function
    that outlives its frame (so it overlaps it as its sibling), recursion, a root frame under an op."""
    with profuse.load(_write(tmp_path / "s.json", _shapes())) as trace:
        depths = trace.con.execute("SELECT count(DISTINCT depth) FROM events WHERE name = 'm.py(2): g'").fetchall()
        assert depths[0][0] >= 2
        overlapping = trace.con.execute("""
            SELECT count(*) FROM events a JOIN events b ON a.parent = b.parent AND a.id <> b.id
            WHERE a.ts > b.ts AND a.ts < b.ts + b.dur""").fetchall()[0][0]
        assert overlapping == 1
        tree = calltree.call_tree(trace, min_share_pct=0, max_nodes=10**6)
    by = {tuple(_path_of(tree, n)): n for n in tree.nodes}
    assert by[("m.py(1): f", "m.py(2): g")].calls == 3   # one of them under aten::mm
    assert by[("m.py(1): f", "m.py(2): g")].python_us == pytest.approx(10 + (10 - 2) + 20)
    assert by[("m.py(1): f", "m.py(1): f", "m.py(1): f")].calls == 1
    # f on thread 1: 100 µs less the union of what it holds (g 5..15, mm 18..35, g 40..60 and the
    # annotation 45..75 that overlaps it, f 80..90: 72 µs), plus the root f under thread 2's op (1 µs)
    assert by[("m.py(1): f",)].calls == 2
    assert by[("m.py(1): f",)].python_us == pytest.approx(100 - 72 + 1)


# ---- the op table ----------------------------------------------------------------------------------------

def _by_name(rows: list[optable.OpRow]) -> dict[str, optable.OpRow]:
    out = {r.name: r for r in rows}
    assert len(out) == len(rows)
    return out


def _same_tables(trace: Any) -> None:
    assert _by_name(optable._by_module(trace)) == _by_name(old_module_rows(trace))
    assert _by_name(optable._by_op(trace)) == _by_name(old_op_rows(trace))
    assert _by_name(optable._by_kernel(trace)) == _by_name(old_kernel_rows(trace))
    for group in ("op", "module", "kernel"):   # the table as the report asks for it: sorted, with its total
        table = optable.op_table(trace, group_by=group, sort="self_device")
        old = {"op": old_op_rows, "module": old_module_rows, "kernel": old_kernel_rows}[group](trace)
        assert table.rows == sorted(old, key=lambda r: (-r.self_device_us, r.name))


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_op_tables_equal_the_previous_queries_on_every_shared_trace(path: Path) -> None:
    with profuse.load(path) as trace:
        _same_tables(trace)


def test_op_tables_equal_the_previous_queries_on_built_traces(hand_trace: Path) -> None:
    with profuse.load(hand_trace) as trace:
        _same_tables(trace)


def test_the_built_modules_count_outer_instances_once(tmp_path: Path) -> None:
    """Block nests in Block twice: its total is the outer instance's alone; self time counts every instance."""
    with profuse.load(_write(tmp_path / "m.json", _modules())) as trace:
        rows = _by_name(optable._by_module(trace))
        kernel_ns = dict(trace.con.execute("SELECT correlation, dur FROM events WHERE kind = 'kernel'").fetchall())
    k = [kernel_ns[c] / 1000 for c in range(1, 12)]   # kernels by launch order: 5 per rep, then one outside
    block, linear = rows["Block"], rows["Linear"]
    assert block.calls == 6 and linear.calls == 4 and rows["Idle"].calls == 2
    assert block.cpu_total_us == pytest.approx(500 * 2)
    assert block.device_total_us == pytest.approx(sum(k[:10]))                       # everything but the last
    assert block.self_device_us == pytest.approx(sum(k[:3]) + sum(k[5:8]))          # launched right in a Block
    assert linear.self_device_us == linear.device_total_us == pytest.approx(k[3] + k[4] + k[8] + k[9])
    assert rows["Idle"].device_total_us == 0 and rows["Idle"].kernels == 0
