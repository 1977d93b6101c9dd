"""The call tree's two scans (the frames, then the other host events with a parent), its path numbering
without a division, and the op tables' memory sums (a join of the op_memory rows alone) and scope name
codes (by hash), against the rules they replace, kept below as the oracles: every call path's figures, the
tree, the rows by op, kernel and module are equal on every shared trace, on traces built here for the rare
shapes, and on a CPU run recorded here with ``profile_memory=True``."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ALL_TRACES, trace_id
from test_tree_speed import HAND, _write, _x, frame_parents, less_nested_again

import profuse
from profuse.analysis import _codes, calltree, optable
from profuse.analysis._codes import hash_codes
from profuse.analysis._read import dense_columns
from profuse.analysis.memory import has_memory
from profuse.trace.schema import DEVICE_TIME_KINDS, DEVICE_TIME_SQL, TABLE_KINDS_SQL

# ---- the previous call tree measure: one scan of every host event, paths by division -------------------

_PY = "kind = 'python' AND name IS NOT NULL"
_HOST = f"""
    SELECT id, coalesce(parent, -1) AS parent, ts, dur, coalesce(depth, 0) AS depth, coalesce(thread, -1) AS thread,
           coalesce({_PY}, false) AS frame, hash(name) AS h
    FROM events WHERE depth IS NOT NULL OR parent IS NOT NULL OR kind = 'python'"""


def prev_paths(py_parent: np.ndarray, depth: np.ndarray, code: np.ndarray,
               n_names: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The previous ``calltree._paths``, as it was."""
    nf = len(code)
    order = np.argsort(calltree._small(depth), kind="stable")
    at = np.empty(nf + 1, dtype=np.int64)
    at[order] = np.arange(nf)
    at[nf] = nf
    up = at[py_parent[order]]
    name = code[order]
    base = np.zeros(nf + 1, dtype=np.int64)
    known = np.zeros(0, dtype=np.int64)
    met = np.zeros(0, dtype=np.int64)
    cuts = [0, *(np.flatnonzero(np.diff(depth[order])) + 1).tolist(), nf] if nf else [0]
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        keys, inverse = calltree._distinct(base[up[lo:hi]] + name[lo:hi], (len(known) + 1) * n_names)
        seen = np.minimum(np.searchsorted(known, keys), max(len(known) - 1, 0))
        new = keys[known[seen] != keys] if len(known) else keys
        merged = np.argsort(np.concatenate([known, new]), kind="stable")
        known = np.concatenate([known, new])[merged]
        met = np.concatenate([met, np.arange(len(met), len(met) + len(new))])[merged]
        base[lo:hi] = ((met[np.searchsorted(known, keys)] + 1) * n_names)[inverse]
    path = np.empty(nf, dtype=np.int64)
    path[order] = base[:nf] // n_names - 1
    key = np.empty(len(known), dtype=np.int64)
    key[met] = known
    number, parent, level = calltree._renumbered(key, n_names)
    return number[path], parent, level


def prev_measure(trace: Any) -> tuple[calltree._Paths, list[str], int, int]:
    """The previous ``calltree._frames`` and ``_measure``, as they were (Python parents: test_tree_speed.frame_parents)."""
    con = trace.con
    named = con.execute(f"SELECT name, hash(name) FROM (SELECT DISTINCT name FROM events WHERE {_PY}) ORDER BY name"
                        ).fetchall()
    names = [str(n) for n, _ in named]
    n = int(con.execute("SELECT count(*) FROM events").fetchall()[0][0])
    c = dense_columns(con, _HOST)
    at = np.flatnonzero(c["frame"])
    ids = c["id"][at]
    code = hash_codes(np.asarray([h for _, h in named], dtype=np.uint64), c["h"][at])
    if code is None:
        code = calltree.frame_codes(con, names, ids)
    ts, end = c["ts"], c["ts"] + c["dur"]
    f_ts, f_end, f_thread = ts[at], end[at], c["thread"][at]
    pos = np.full(n + 1, -1, dtype=np.int64)
    pos[ids] = np.arange(len(ids))
    py_parent, frame_depth = frame_parents(f_thread, f_ts, f_end)
    path, path_parent, path_level = prev_paths(py_parent, frame_depth, code, max(len(names), 1))
    dur = (f_end - f_ts).astype(np.float64)
    has = py_parent >= 0
    in_frames = np.bincount(py_parent[has], weights=dur[has], minlength=len(ids))
    held = pos[c["parent"]]
    inside = held >= 0
    in_host = calltree._covered(held[inside], ts[inside], end[inside], f_ts, f_end, len(ids))
    k = len(path_parent)
    first = np.full(k, -1, dtype=np.int64)
    first[path[::-1]] = np.arange(len(ids))[::-1]
    paths = calltree.split_waiting(names, parent=path_parent, name=code[first], level=path_level,
                                   calls=np.bincount(path, minlength=k), total=np.bincount(path, weights=dur, minlength=k),
                                   self_=np.bincount(path, weights=dur - in_frames, minlength=k),
                                   python=np.bincount(path, weights=np.minimum(dur - in_host, dur - in_frames), minlength=k))
    return paths, names, len(ids), int(np.count_nonzero(np.bincount(f_thread + 1))) if len(ids) else 0


# ---- the previous op table reads: op_memory joined into the grouped scan; scope codes by dense_rank ------

_MEM_SUMS = ", sum(m.cpu_mem), sum(m.self_cpu_mem), sum(m.device_mem), sum(m.self_device_mem)"
_MEM_JOIN = " LEFT JOIN op_memory m USING (id)"


def prev_ops_and_kernels(trace: Any) -> tuple[list[optable.OpRow], list[optable.OpRow]]:
    """The previous ``optable._ops_and_kernels``, as it was (a kernel's CPU columns None: it has no CPU time)."""
    mem = has_memory(trace)
    found = trace.con.execute(f"""
        SELECT name, kind, count(*), sum(self_cpu), sum(dur), sum(self_device), sum(device_total),
               sum(kernels){_MEM_SUMS if mem else ""}
        FROM events{_MEM_JOIN if mem else ""}
        WHERE (kind IN ({TABLE_KINDS_SQL}) AND depth IS NOT NULL) OR kind IN ({DEVICE_TIME_SQL})
        GROUP BY name, kind""").fetchall()
    ops: dict[Any, list[Any]] = {}
    kernels: dict[Any, list[Any]] = {}
    for name, kind, *sums in found:
        side = kernels if kind in DEVICE_TIME_KINDS else ops
        had = side.get(name)
        side[name] = sums if had is None else [None if a is None and b is None else (a or 0) + (b or 0)
                                                for a, b in zip(had, sums)]
    return (optable._records(less_nested_again(trace, [(name, *v) for name, v in ops.items()]), with_memory=mem),
            optable._records([(name, v[0], None, None, v[2], v[2], v[0]) for name, v in kernels.items()]))


def prev_cpu_op_rows(trace: Any) -> list[optable.OpRow]:
    """The previous ``optable._by_op`` of a CPU-only trace, as it was."""
    mem = has_memory(trace)
    found = trace.con.execute(f"""
        SELECT name, count(*), sum(self_cpu), sum(dur), sum(self_cpu), sum(dur), sum(kernels){_MEM_SUMS if mem else ""}
        FROM events{_MEM_JOIN if mem else ""}
        WHERE kind IN ({TABLE_KINDS_SQL}) AND depth IS NOT NULL{optable._not_step(trace)} GROUP BY name""").fetchall()
    return optable._records(less_nested_again(trace, found), with_memory=mem)


def prev_scopes(con: Any) -> tuple[dict[str, np.ndarray], np.ndarray, list[str | None]]:
    """The previous ``optable._scopes``, as it was."""
    names = [r[0] for r in con.execute("SELECT DISTINCT name FROM scopes ORDER BY name NULLS LAST").fetchall()]
    s = dense_columns(con, "SELECT id, coalesce(parent, -1) AS parent, coalesce(kind = 'module', false) AS module, "
                           "coalesce(dur, 0) AS dur, dense_rank() OVER (ORDER BY name NULLS LAST) - 1 AS code FROM scopes")
    return s, s["code"].astype(np.int64), names


# ---- comparisons -------------------------------------------------------------------------------------

def _same_measure(trace: Any, monkeypatch: pytest.MonkeyPatch) -> calltree._Paths:
    old, new = prev_measure(trace), calltree._measure(trace)
    assert new[1:] == old[1:]
    for name in ("parent", "name", "level", "calls", "total", "self_", "python", "waiting"):
        np.testing.assert_array_equal(getattr(new[0], name), getattr(old[0], name), err_msg=name)
    tree = calltree.call_tree(trace)
    whole = calltree.call_tree(trace, min_share_pct=0, max_nodes=10**6)
    monkeypatch.setattr(calltree, "_measure", prev_measure)
    assert tree == calltree.call_tree(trace)
    assert whole == calltree.call_tree(trace, min_share_pct=0, max_nodes=10**6)
    monkeypatch.undo()
    return new[0]


def _by_name(rows: list[optable.OpRow]) -> dict[str, optable.OpRow]:
    out = {r.name: r for r in rows}
    assert len(out) == len(rows)
    return out


def _same_tables(trace: Any) -> None:
    if trace.cpu_only:
        assert _by_name(optable._by_op(trace)) == _by_name(prev_cpu_op_rows(trace))
    else:
        new_ops, new_kernels = optable._ops_and_kernels.__wrapped__(trace)
        old_ops, old_kernels = prev_ops_and_kernels(trace)
        assert _by_name(new_ops) == _by_name(old_ops) and _by_name(new_kernels) == _by_name(old_kernels)
    ms = optable.module_scopes(trace.con)
    old_s, old_code, old_names = prev_scopes(trace.con)
    assert ms.names == old_names   # the rows come in another order (the ranking's window sorts them): by id
    new_by, old_by = np.argsort(ms.ids), np.argsort(old_s["id"])
    assert ms.code[new_by].tolist() == old_code[old_by].tolist()
    # a scope's parent as its position among the scopes (-1: none, or a parent not among them)
    old_up = _codes.positions(old_s["id"], old_s["parent"])
    old_parent = np.where(old_up >= 0, old_s["id"][np.maximum(old_up, 0)], -1)
    new_parent = np.where(ms.up >= 0, ms.ids[np.maximum(ms.up, 0)], -1)
    assert new_parent[new_by].tolist() == old_parent[old_by].tolist()
    for new_col, k in ((ms.ids, "id"), (ms.module, "module"), (ms.dur, "dur")):
        assert new_col[new_by].tolist() == old_s[k][old_by].tolist(), k


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_call_tree_and_op_tables_equal_the_previous_rules_on_every_shared_trace(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with profuse.load(path) as trace:
        _same_measure(trace, monkeypatch)
        _same_tables(trace)


def _unnamed(tmp: Path) -> Path:
    """Frames with an empty name around others, a root op holding frames: JSON holds no NULL name (a NULL
    one is set in the table by the test below)."""
    return _write(tmp / "unnamed.json", [
        _x("python_function", "m.py(1): f", 0, 100), _x("python_function", "", 10, 50),
        _x("python_function", "m.py(2): g", 12, 30), _x("cpu_op", "aten::mm", 14, 20),
        _x("python_function", "m.py(3): h", 15, 5), _x("cpu_op", "aten::add", 200, 50),
        _x("python_function", "m.py(2): g", 205, 10), _x("user_annotation", "r", 206, 2)])


@pytest.mark.parametrize("built", sorted(HAND))
def test_call_tree_and_op_tables_equal_the_previous_rules_on_built_traces(
        built: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with profuse.load(_write(tmp_path / f"{built}.json", HAND[built]())) as trace:
        paths = _same_measure(trace, monkeypatch)
        _same_tables(trace)
    assert len(paths.parent) > 3


def test_a_python_event_without_a_name_sits_between_frames_as_before(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A python event whose name is NULL is no frame, yet frames under it keep their Python parent above it:
    it comes in with the second read of the other events, as it did in the one scan."""
    with profuse.load(_unnamed(tmp_path), cache=False) as trace:
        trace.con.execute("UPDATE events SET name = NULL WHERE kind = 'python' AND name = ''")
        (unnamed,) = trace.con.execute("SELECT count(*) FROM events WHERE kind = 'python' AND name IS NULL").fetchone()
        assert unnamed == 1 and len(dense_columns(trace.con, calltree._OTHER_ROWS[1])["id"]) == 1
        paths = _same_measure(trace, monkeypatch)
        tree = calltree.call_tree(trace, min_share_pct=0, max_nodes=10**6)
    by = {n.name: n for n in tree.nodes if n.depth == 1}
    assert "m.py(2): g" in by and by["m.py(2): g"].parent == 0   # g's Python parent is f, past the unnamed event
    assert int(paths.calls.sum()) == 4


def test_the_hash_clash_fallbacks_give_the_same_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where two names share a hash, frames are coded by a join on the names and scopes by ranking them."""
    path = next(p for p in ALL_TRACES if p.name == "h100_bert_small.json.gz")
    with profuse.load(path) as trace:
        want_paths, want = calltree._measure(trace), optable.module_scopes(trace.con)
        monkeypatch.setattr(calltree, "hash_codes", lambda *a: None)
        monkeypatch.setattr(optable, "hash_codes", lambda *a: None)
        got = calltree._measure(trace)
        got_s = optable.module_scopes(trace.con)
    assert got[1:] == want_paths[1:] and got[0].calls.sum() > 1000
    for name in ("parent", "name", "level", "calls", "total", "self_", "python", "waiting"):
        np.testing.assert_array_equal(getattr(got[0], name), getattr(want_paths[0], name), err_msg=name)
    got_by, want_by = np.argsort(got_s.ids), np.argsort(want.ids)
    assert got_s.names == want.names and len(set(got_s.code.tolist())) > 5
    assert got_s.code[got_by].tolist() == want.code[want_by].tolist()
    assert got_s.ids[got_by].tolist() == want.ids[want_by].tolist()


def test_paths_equal_the_previous_numbering_on_random_forests() -> None:
    """Random Python parents over random host depths (a parent always shallower), names from a few: each
    frame's path, each path's parent and level are the previous rule's; also with no frames at all."""
    rng = np.random.default_rng(7)
    for n, names in ((0, 1), (1, 3), (500, 4), (20_000, 40)):
        depth = np.sort(rng.integers(0, 12, n)) if n else np.zeros(0, dtype=np.int64)
        py_parent = np.full(n, -1, dtype=np.int64)
        for i in range(n):
            shallower = np.flatnonzero(depth[:i] < depth[i]) if i < 2000 else np.arange(max(0, i - 50), i)
            shallower = shallower[depth[shallower] < depth[i]]
            if shallower.size and rng.random() < 0.9:
                py_parent[i] = int(rng.choice(shallower))
        code = rng.integers(0, names, n)
        perm = rng.permutation(n)   # frames in no order
        inv = np.empty(n, dtype=np.int64)
        inv[perm] = np.arange(n)
        pp = np.where(py_parent[perm] >= 0, inv[np.maximum(py_parent[perm], 0)], -1)
        got, want = calltree._paths(pp, depth[perm], code[perm], names), prev_paths(pp, depth[perm], code[perm], names)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


def test_cpu_op_memory_sums_equal_the_previous_join_on_a_recorded_run(tmp_path: Path) -> None:
    """A CPU-only run recorded here with profile_memory=True and profiler steps: the op rows (memory columns
    included, the step annotations left out) are the previous join's, and the memory columns are not all 0."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    path = tmp_path / "cpu_memory.json"
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                 profile_memory=True) as prof:
        for _ in range(3):
            model(torch.randn(32, 64))
            prof.step()
    prof.export_chrome_trace(str(path))
    assert "[memory]" in path.read_text()
    with profuse.load(path) as trace:
        assert trace.cpu_only and has_memory(trace)
        rows = _by_name(optable._by_op(trace))
        assert rows == _by_name(prev_cpu_op_rows(trace))
        _same_tables(trace)
    assert any(r.cpu_mem_bytes for r in rows.values()) and not any(n.startswith("ProfilerStep#") for n in rows)


def test_module_rows_read_with_hashed_codes_match_a_json_count(tmp_path: Path) -> None:
    """The module table's classes and instance counts, from the scopes coded by hash, against the trace
    file's own nn.Module events counted here."""
    events = HAND["modules"]()
    with profuse.load(_write(tmp_path / "m.json", events)) as trace:
        rows = _by_name(optable._by_module(trace))
    want: dict[str, int] = {}
    for e in json.loads((tmp_path / "m.json").read_text())["traceEvents"]:
        if e["name"].startswith("nn.Module: "):
            cls = e["name"].removeprefix("nn.Module: ").rsplit("_", 1)[0]
            want[cls] = want.get(cls, 0) + 1
    assert {k: r.calls for k, r in rows.items()} == want
