"""The report's passes outside the diagnosis made near-linear (issue 44), each checked against the rule it
replaced, kept below as the oracle: on every shared trace, and on hand-built overlapping intervals.

- the call tree's Python time (``calltree._covered``): the union of a frame's children per frame, once a
  Python merge of every group with an overlap, one scan of the whole array per group;
- the call tree's frames (``calltree._frames``): once a join of every frame on its name;
- the step table (``steps.steps_busy``): its rule written out per step, every activity clipped to the
  step's span (the sweep once scanned each step's owned activities; the rule is now the span's, as the budget's);
- trace health's counts (``health._counts`` and ``_window``) and the device counts the summary, the op
  table's total and health share (``optable.device_counts``): once one query per count;
- interruptions' scope instances (``interruptions._members``): once a Python loop over every instance.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from conftest import ALL_TRACES, trace_id

import profuse
from profuse.analysis import calltree, health, steps, summarize
from profuse.analysis.advice import interruptions
from profuse.analysis.busy import CpuWork, activities, cpu_work, step_busy
from profuse.analysis.optable import total_device_us
from profuse.analysis.scopes import title_of
from profuse.trace.schema import DEVICE_TIME_SQL, HOST_KINDS
from profuse.trace.vocabulary import launch_call_sql

# --- the previous rules, kept here as the oracles -------------------------------------------------------

HOST = "(" + ", ".join(f"'{k}'" for k in HOST_KINDS) + ")"


def covered_before(group: np.ndarray, start: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                   n: int) -> np.ndarray:
    """calltree._covered as it was: the sum per group, then each group with an overlap merged in Python."""
    glo, ghi = lo[group], hi[group]
    s = np.minimum(np.maximum(start, glo), ghi)
    e = np.minimum(np.maximum(end, glo), ghi)
    order = np.lexsort((s, group))
    g, s, e = group[order], s[order], e[order]
    out = np.bincount(g, weights=(e - s).astype(np.float64), minlength=n)
    overlap = (g[1:] == g[:-1]) & (s[1:] < e[:-1])
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


def frames_before(trace: profuse.Trace) -> tuple[dict[str, np.ndarray], list[str], dict[str, np.ndarray]]:
    """calltree._frames as it was: the frames joined on their names; every host event's parent, start and end."""
    con = trace.con
    first = "SELECT name, min(id) AS first FROM events WHERE kind = 'python' GROUP BY name"
    named = con.execute(f"SELECT first, name FROM ({first}) ORDER BY name, first").fetchall()
    frames = con.execute(f"""
        SELECT e.id, coalesce(e.depth, 0) AS depth, n.first, e.thread
        FROM events e JOIN ({first}) n ON n.name = e.name WHERE e.kind = 'python'""").fetchnumpy()
    keys = np.asarray([k for k, _ in named], dtype=np.int64)
    order = np.argsort(keys)
    firsts = np.asarray(frames["first"], dtype=np.int64)
    frames["code"] = order[np.searchsorted(keys[order], firsts)] if len(keys) else firsts
    host = con.execute(f"SELECT id, coalesce(parent, -1) AS parent, ts, dur FROM events WHERE kind IN {HOST}").fetchnumpy()
    n = int(con.execute("SELECT count(*) FROM events").fetchall()[0][0])
    ids = np.asarray(host["id"], dtype=np.int64)
    by_id = {"parent": np.full(n, -1, dtype=np.int64), "ts": np.zeros(n, dtype=np.int64),
             "end": np.zeros(n, dtype=np.int64)}
    by_id["parent"][ids] = np.asarray(host["parent"], dtype=np.int64)
    by_id["ts"][ids] = np.asarray(host["ts"], dtype=np.int64)
    by_id["end"][ids] = by_id["ts"][ids] + np.asarray(host["dur"], dtype=np.int64)
    return {k: np.asarray(v) for k, v in frames.items()}, [str(x) for _, x in named], by_id


def clipped_busy(name: str, start: np.ndarray, end: np.ndarray, lo: int, hi: int, work: CpuWork) -> Any:
    """One step's row, the slow way: every activity clipped to the step's span [lo, hi) (pieces of no length
    dropped), busy.step_busy of those pieces, counting the activities that start in the span."""
    s, e = np.maximum(start, lo), np.minimum(end, hi)
    keep = e > s
    return replace(step_busy(name, s[keep], e[keep], work), activities=int(((start >= lo) & (start < hi)).sum()))


def steps_busy_slow(trace: profuse.Trace) -> list[Any]:
    """steps.steps_busy's device branch (without the unrecorded waits), a scan of every activity per step."""
    model = steps.step_model(trace)
    a, work = activities(trace), cpu_work(trace)
    return [clipped_busy(st.name, a.start, a.end, lo, hi, work) for st, (lo, hi) in zip(model.steps, model.spans)]


def _one(trace: profuse.Trace, sql: str) -> int:
    row = trace.con.execute(sql).fetchone()
    return int(row[0] or 0) if row else 0


def health_counts_before(trace: profuse.Trace) -> tuple[int, ...]:
    """health.trace_health's counts as they were, one query each, and _window's own host bounds."""
    before, after = trace.con.execute(f"""
        WITH host AS (SELECT min(ts) AS lo, max(ts + dur) AS hi FROM events
                      WHERE kind IN ('cpu_op', 'annotation', 'python', 'runtime', 'sync'))
        SELECT count(*) FILTER (WHERE d.ts < host.lo), count(*) FILTER (WHERE d.ts + d.dur > host.hi)
        FROM events d, host WHERE d.kind IN ({DEVICE_TIME_SQL}) AND host.lo IS NOT NULL""").fetchone() or (0, 0)
    return (_one(trace, f"SELECT count(*) FROM events WHERE kind = 'runtime' AND {launch_call_sql('name')}"),
            _one(trace, f"SELECT count(*) FROM events WHERE kind IN ({DEVICE_TIME_SQL})"),
            _one(trace, f"SELECT count(*) FROM events WHERE kind IN ({DEVICE_TIME_SQL}) AND launch IS NOT NULL"),
            _one(trace, "SELECT count(*) FROM events WHERE kind = 'python'"),
            _one(trace, "SELECT count(*) FROM events WHERE kind = 'cpu_op'"), int(before), int(after))


def members_before(trace: profuse.Trace) -> dict[str, list[tuple[int, int, int]]]:
    """interruptions._device_scopes' instances per scope as they were: a Python loop over every row."""
    members: dict[str, list[tuple[int, int, int]]] = {}
    for kind, name, ts, dur, thread in trace.con.execute(
            "SELECT kind, name, ts, dur, coalesce(thread, -2) FROM scopes WHERE kind IN ('module', 'annotation') "
            "ORDER BY id").fetchall():
        members.setdefault(title_of(kind, name), []).append((ts, ts + dur, thread))
    return members


# --- hand-built intervals -----------------------------------------------------------------------------


def _random_groups(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    """Members of n groups in no order: nested, overlapping, touching, zero-length, sticking out of the
    group's own [lo, hi) on either side; some groups empty."""
    lo = rng.integers(-100, 100, n)
    hi = lo + rng.integers(0, 60, n)
    m = int(rng.integers(0, 6 * n + 1))
    group = rng.integers(0, n, m)
    start = lo[group] + rng.integers(-10, 70, m)
    end = start + rng.integers(0, 40, m)
    return group.astype(np.int64), start.astype(np.int64), end.astype(np.int64), lo.astype(np.int64), hi.astype(np.int64)


def test_covered_is_the_python_merge_on_hand_built_intervals() -> None:
    rng = np.random.default_rng(44)
    for trial in range(400):
        # GIVEN groups of intervals, many overlapping, clipped to their group's own span
        n = int(rng.integers(1, 12))
        group, start, end, lo, hi = _random_groups(rng, n)
        # WHEN each group's covered length is found by the sweep
        got = calltree._covered(group, start, end, lo, hi, n)
        # THEN it is the previous rule's, and a plain walk of each group's own sorted intervals
        assert got.tolist() == covered_before(group, start, end, lo, hi, n).tolist(), trial
        for g in range(n):
            clipped = sorted((min(max(int(s), int(lo[g])), int(hi[g])), min(max(int(e), int(lo[g])), int(hi[g])))
                             for s, e in zip(start[group == g], end[group == g]))
            total, reach = 0, None
            for a, b in clipped:
                a = a if reach is None else max(a, reach)
                if b > a:
                    total += b - a
                reach = b if reach is None else max(reach, b)
            assert got[g] == total, (trial, g)


def test_covered_with_times_too_wide_for_one_sort_key() -> None:
    # GIVEN overlapping children of frames that span more than 63 bits hold with the group number
    rng = np.random.default_rng(5)
    n = 40
    group, start, end, lo, hi = _random_groups(rng, n)
    scale = np.int64(2**52)
    lo, hi = lo * scale, hi * scale
    start, end = start * scale, end * scale
    # WHEN the sweep falls back to sorting by two keys
    got = calltree._covered(group, start, end, lo, hi, n)
    # THEN it still is the previous rule's
    assert got.tolist() == covered_before(group, start, end, lo, hi, n).tolist()


def test_overlapping_members_by_one_key_are_those_by_two() -> None:
    rng = np.random.default_rng(9)
    for trial in range(200):
        # GIVEN members of 7 groups, offsets within their frame, some overlapping
        m = int(rng.integers(0, 60))
        group, start = rng.integers(0, 7, m), rng.integers(0, 30, m)
        end = start + rng.integers(0, 8, m)
        # WHEN the members of groups with an overlap are found by one sort key, and shifted past 63 bits by two
        one = calltree._overlapping(group, start, end, end - start, 7)
        two = calltree._overlapping(group, start + 2**61, end + 2**61, end - start, 7)
        # THEN both are the same (the two-key sort is the previous rule's), each group's members whole and
        # sorted by start; every group where two members share time is among them, and only groups where
        # a member starts inside another (an empty one may sit anywhere: either way the union is exact)
        assert one[0].tolist() == two[0].tolist() and one[1].tolist() == (two[1] - 2**61).tolist()
        assert one[2].tolist() == (two[2] - 2**61).tolist()
        same = [(i, j) for i in range(m) for j in range(m) if i != j and group[i] == group[j]]
        sharing = {int(group[i]) for i, j in same if min(end[i], end[j]) > max(start[i], start[j])}
        inside = {int(group[i]) for i, j in same if start[i] <= start[j] < end[i]}
        found = set(one[0].tolist())
        assert sharing <= found <= inside, trial
        for g in found:
            assert one[1][one[0] == g].tolist() == sorted(start[group == g].tolist())


def test_step_table_on_hand_built_activities() -> None:
    rng = np.random.default_rng(11)
    for trial in range(300):
        # GIVEN activities on several streams, overlapping, touching, some of no length, with short and long
        # (> 1 ms) gaps, some across a span's edge, some outside every span; steps whose intervals overlap, touch
        # or hold nothing (their spans the step model's union); and host launch work overlapping the gaps
        m, n = int(rng.integers(0, 40)), int(rng.integers(1, 6))
        start = rng.integers(0, 5_000_000, m).astype(np.int64)
        end = start + rng.integers(0, 400_000, m)
        ts = np.sort(rng.integers(0, 5_000_000, n)).astype(np.int64)
        spans = steps.union_spans(ts, ts + rng.integers(0, 2_000_000, n))
        ws = rng.integers(0, 5_000_000, 20).astype(np.int64)
        work = CpuWork.of(ws, ws + rng.integers(1, 300_000, 20))
        st = tuple(steps.Step(i, f"ProfilerStep#{i}", i, 0, 0, 0, 0, steps.parse_step("ProfilerStep#1"))
                   for i in range(n))
        # WHEN the step table is found in one sweep
        got = steps.device_steps(st, steps.runs_in_spans(start, end, spans), work)
        # THEN each step is busy.step_busy of every activity clipped to its span
        assert got == [clipped_busy(f"ProfilerStep#{i}", start, end, lo, hi, work)
                       for i, (lo, hi) in enumerate(spans)], trial


# --- the shared traces --------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=ALL_TRACES, ids=trace_id)
def trace(request: pytest.FixtureRequest) -> Any:
    with profuse.load(request.param, cache=False) as tr:
        yield tr


def test_frames_and_covered_are_the_previous_rules(trace: profuse.Trace) -> None:
    # GIVEN the frames and host events read the previous way
    old, old_names, by_id = frames_before(trace)
    # WHEN they are read the new way (names coded by hash, and by the join a hash clash falls back to)
    f = calltree._frames(trace)
    # THEN the frames, their names and codes, starts and ends are the same
    assert f.names == old_names
    assert f.id.tolist() == old["id"].astype(np.int64).tolist()
    assert f.code.tolist() == old["code"].astype(np.int64).tolist()
    assert f.thread.tolist() == old["thread"].tolist()
    assert f.ts.tolist() == by_id["ts"][f.id].tolist() and f.end.tolist() == by_id["end"][f.id].tolist()
    assert calltree.frame_codes(trace.con, f.names, f.id).tolist() == f.code.tolist()
    # and the events nested in a frame, with each frame's covered time, are the previous rule's
    parent = by_id["parent"]
    pos = np.full(len(parent), -1, dtype=np.int64)
    pos[f.id] = np.arange(len(f.id))
    hosted = np.flatnonzero(parent >= 0)
    hosted = hosted[pos[parent[hosted]] >= 0]
    want = covered_before(pos[parent[hosted]], by_id["ts"][hosted], by_id["end"][hosted], f.ts, f.end, len(f.id))
    nested = {k: np.concatenate([a, f.others[k]]) for k, a in (("id", f.id), ("parent", f.parent), ("ts", f.ts),
                                                                  ("stop", f.end))}
    held = pos[nested["parent"]]
    inside = held >= 0
    assert sorted(nested["id"][inside].tolist()) == hosted.tolist()
    got = calltree._covered(held[inside], nested["ts"][inside], nested["stop"][inside], f.ts, f.end, len(f.id))
    assert got.tolist() == want.tolist()


def test_step_table_is_the_rule_written_per_step(trace: profuse.Trace) -> None:
    model = steps.step_model(trace)
    if trace.cpu_only or model.owner is None or not model.steps:
        pytest.skip("no device steps")
    # the sweep without the unrecorded waits (the step table takes them apart after: test_diagnosis.py)
    assert steps.device_steps(model.steps, steps.span_runs(trace), cpu_work(trace)) == steps_busy_slow(trace)


def idle_launches_before(trace: profuse.Trace) -> list[tuple[str, int]]:
    """health.trace_health's launch calls without activity as they were: the launch test on every call."""
    return [(str(k), int(v)) for k, v in trace.con.execute(f"""
        SELECT l.name, count(*) FROM events l WHERE l.kind = 'runtime' AND {launch_call_sql('l.name')}
          AND NOT EXISTS (SELECT 1 FROM events d WHERE d.launch = l.id) GROUP BY 1 ORDER BY 2 DESC, 1""").fetchall()]


def test_health_counts_are_the_previous_queries(trace: profuse.Trace) -> None:
    c = health._counts(trace)
    launches, idle = health._launches(trace)
    got = (launches, c["devices"], c["linked"], c["python"], c["ops"], *health._window(trace, c["lo"], c["hi"]))
    assert got == health_counts_before(trace)
    assert list(idle.items()) == idle_launches_before(trace)   # the same names, counts and order


def test_device_counts_are_the_previous_queries(trace: profuse.Trace) -> None:
    # the summary's counts and the op table's total, each once its own query
    kernels, linked = trace.con.execute(
        f"SELECT count(*), count(op) FROM events WHERE kind IN ({DEVICE_TIME_SQL})").fetchall()[0]
    (ns,) = trace.con.execute(f"SELECT sum(dur) FROM events WHERE kind IN ({DEVICE_TIME_SQL})").fetchall()[0]
    s = summarize(trace)
    assert (s.kernels, s.kernels_linked) == (int(kernels), int(linked))
    if not trace.cpu_only:
        assert total_device_us(trace) == (ns or 0) / 1000.0


def test_scope_members_are_the_previous_loop(trace: profuse.Trace) -> None:
    got = {t: list(zip(*(c.tolist() for c in cols))) for t, cols in interruptions._members(trace).items()}
    want = members_before(trace)
    assert list(got) == list(want)   # the scopes in the order of their first instance
    assert got == want

