"""The interval sweeps that answer "which interval holds which" in near-linear time, each checked against
the rule it replaced: hand-built overlapping intervals against a comparison with every interval, and the
real traces against the previous SQL (one correlated subquery per item), down to whole report documents."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ALL_TRACES, trace_id

import profuse
from profuse.analysis.diagnosis import levers
from profuse.analysis.diagnosis.budget import TOP_OP

# --- the previous rules, kept here as the oracles -------------------------------------------------------

# the sites of blocking calls as analysis/diagnosis/levers.py defined them before its sweep: one correlated
# subquery per call for its outermost top-level op and its innermost Python frame
SITES_SQL = f"""
    SELECT c.id,
      (SELECT o.id FROM events o WHERE o.thread = c.thread AND o.kind = 'cpu_op' AND {TOP_OP.format(e="o")}
         AND o.ts <= c.ts AND o.ts + o.dur >= c.ts + c.dur ORDER BY o.ts, o.id LIMIT 1),
      (SELECT p.id FROM events p WHERE p.thread = c.thread AND p.kind = 'python' AND p.ts <= c.ts
         AND p.ts + p.dur >= c.ts + c.dur AND p.name NOT LIKE 'nn.Module:%' ORDER BY p.ts DESC, p.dur, p.id LIMIT 1)
    FROM events c WHERE c.id IN (SELECT unnest(?::BIGINT[]))"""


def sync_sites_by_sql(trace: profuse.Trace, ids: list[int]) -> dict[int, tuple[str, str, str, str]]:
    """:func:`levers._sync_sites` by the previous rule: :data:`SITES_SQL`, then the names."""
    if not ids:
        return {}
    con = trace.con
    held = {int(c): (-1 if o is None else int(o), -1 if f is None else int(f))
            for c, o, f in con.execute(SITES_SQL, [sorted(ids)]).fetchall()}
    rows = con.execute("""
        SELECT c.id, c.name, (SELECT s.name FROM scopes s WHERE s.id = c.module)
        FROM events c WHERE c.id IN (SELECT unnest(?::BIGINT[]))""", [sorted(ids)]).fetchall()
    names = dict(con.execute("SELECT id, name FROM events").fetchall())
    out = {}
    for cid, name, module in rows:
        op, frame = held.get(int(cid), (-1, -1))
        out[int(cid)] = (name or "", names.get(op) or "", module or "", names.get(frame) or "")
    return out


def _first_by_hand(ids: list[int], ts: list[int], end: list[int], qts: int, qend: int) -> int:
    held = [(t, i) for i, t, e in zip(ids, ts, end) if t <= qts and e >= qend]
    return min(held)[1] if held else -1


def _last_by_hand(ids: list[int], ts: list[int], end: list[int], qts: int, qend: int) -> int:
    held = [(-t, e - t, i) for i, t, e in zip(ids, ts, end) if t <= qts and e >= qend]
    return min(held)[2] if held else -1


# --- hand-built intervals -----------------------------------------------------------------------------


@pytest.mark.parametrize("width", [2, 3, 32])
def test_last_at_least_is_a_scan_back(width: int) -> None:
    rng = np.random.default_rng(width)
    for trial in range(300):
        # GIVEN values (repeats, negatives) and queries before, inside and past the end
        n = int(rng.integers(0, 200))
        v = rng.integers(-50, 50, n).astype(np.int64)
        k = rng.integers(-2, n + 3, int(rng.integers(0, 60))).astype(np.int64)
        x = rng.integers(-60, 60, k.size).astype(np.int64)
        # WHEN each query is answered by the block descent
        got = levers.last_at_least(v, k, x, width=width)
        # THEN it is the last index before k whose value reaches x, as a scan back from k finds it
        want = [next((j for j in range(min(int(q), n) - 1, -1, -1) if v[j] >= t), -1) for q, t in zip(k, x)]
        assert got.tolist() == want, trial


def test_holding_sweeps_on_overlapping_intervals() -> None:
    rng = np.random.default_rng(44)
    for trial in range(400):
        # GIVEN overlapping (not nested) intervals with shared starts, shared ends, empty ones, ids out of
        # order, and queries that some, none or all of them hold
        n = int(rng.integers(0, 60))
        ts = rng.integers(0, 100, n).astype(np.int64)
        end = ts + rng.integers(0, 60, n)
        ids = rng.permutation(10 * n + 1)[:n].astype(np.int64)
        qts = rng.integers(-5, 170, int(rng.integers(1, 40))).astype(np.int64)
        qend = qts + rng.integers(0, 30, qts.size)
        # WHEN each query's holders are found by the sweeps
        first = levers.first_holding(ids, ts, end, qts, qend)
        last = levers.last_holding(ids, ts, end, qts, qend)
        # THEN they are the ones a comparison with every interval picks: first by (ts, id); last start,
        # then the shortest, then the least id
        args = (ids.tolist(), ts.tolist(), end.tolist())
        assert first.tolist() == [_first_by_hand(*args, a, b) for a, b in zip(qts.tolist(), qend.tolist())], trial
        assert last.tolist() == [_last_by_hand(*args, a, b) for a, b in zip(qts.tolist(), qend.tolist())], trial


def test_holding_sweeps_on_a_deep_nest() -> None:
    # GIVEN 5,000 intervals nested one inside the next (each one µs shorter at both ends) and a query per
    # depth: the descent must climb several block levels to find a holder far back
    n = 5000
    ts = np.arange(n, dtype=np.int64)
    end = 3 * n - ts
    ids = np.arange(n, dtype=np.int64)[::-1].copy()
    qts = np.array([0, 10, 4999, 5000, 7000], dtype=np.int64)
    qend = np.array([3 * n, 3 * n - 11, 10_001, 9_000, 7_001], dtype=np.int64)
    # THEN the outermost and innermost holders are those of the definition
    args = (ids.tolist(), ts.tolist(), end.tolist())
    want_first = [_first_by_hand(*args, a, b) for a, b in zip(qts.tolist(), qend.tolist())]
    want_last = [_last_by_hand(*args, a, b) for a, b in zip(qts.tolist(), qend.tolist())]
    assert levers.first_holding(ids, ts, end, qts, qend).tolist() == want_first
    assert levers.last_holding(ids, ts, end, qts, qend).tolist() == want_last
    assert want_last[2] == ids[4999] and want_last[0] == ids[0] and want_first[3] == ids[0]


# --- the real traces ----------------------------------------------------------------------------------

ON_TRACES = [p for p in ALL_TRACES if "multirank" not in str(p) or p.name.endswith("0.json.gz")]


@pytest.mark.parametrize("path", ON_TRACES, ids=trace_id)
def test_sync_sites_are_the_subqueries_on_every_trace(path: Path) -> None:
    # GIVEN a real trace and host events of every kind on it (runtime and sync calls, ops, frames)
    with profuse.load(path, cache=False) as tr:
        rng = np.random.default_rng(7)
        pool = [int(i) for (i,) in tr.con.execute(
            "SELECT id FROM events WHERE kind IN ('runtime', 'sync', 'cpu_op', 'python') ORDER BY id").fetchall()]
        if not pool:
            pytest.skip("no host events")
        ids = sorted({int(i) for i in rng.choice(pool, size=min(300, len(pool)), replace=False)})
        # WHEN their sites are found by the sweep and by one SQL subquery per call
        got = levers._sync_sites(tr, ids)
        want = sync_sites_by_sql(tr, ids)
    # THEN every call has the same name, outermost op, module and innermost frame
    assert got == want


def _document(path: Path) -> dict[str, Any]:
    from profuse.payloads.report import analyse, report_view

    with profuse.load(path, cache=False) as tr:
        doc = report_view(analyse(tr)).document
    import msgspec

    out: dict[str, Any] = json.loads(msgspec.json.encode(doc))
    return out


# the traces whose report finds a site (an op or a frame) for at least one blocking call
SITE_NAMES = ("a100_alexnet", "a100_event_sync.", "h100_bert_small", "h100_vit_falconsai", "mi300_bert_small",
              "mi300_normalization_layers", "mi300_sglang_decode_cudagraph", "sampled_rank-0", "h200/bert_")
SYNC_TRACES = [p for p in ALL_TRACES if any(n in str(p) for n in SITE_NAMES)]


@pytest.mark.parametrize("path", SYNC_TRACES, ids=trace_id)
def test_report_is_the_same_with_the_previous_rules(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the report document of a real trace made with the sweeps
    now = _document(path)
    # WHEN it is made again with the previous rules in their place
    monkeypatch.setattr(levers, "_sync_sites", sync_sites_by_sql)
    before = _document(path)
    # THEN the two documents are the same, field for field
    assert now == before


def test_holders_of_calls_keep_only_intervals_that_hold_a_call() -> None:
    rng = np.random.default_rng(45)
    for trial in range(300):
        # GIVEN ops and frames on two threads (nested, overlapping, equal starts and ends, empty) and calls
        n = int(rng.integers(0, 60))
        ts = rng.integers(0, 100, n).astype(np.int64)
        end = ts + rng.integers(0, 60, n)
        thread = rng.integers(0, 2, n).astype(np.int64)
        is_op = rng.random(n) < 0.5
        ids = rng.permutation(10 * n + 1)[:n].astype(np.int64)
        k = int(rng.integers(1, 30))
        calls = [(1000 + i, "call", int(rng.integers(0, 2)), int(a), int(a + rng.integers(0, 20)))
                 for i, a in enumerate(rng.integers(-5, 170, k))]
        qts = np.asarray([c[3] for c in calls], dtype=np.int64)
        qend = np.asarray([c[4] for c in calls], dtype=np.int64)
        # WHEN the intervals holding some call are picked out, and each call's holders found
        held_any = levers._holds_any(ts, end, qts, qend)
        got = levers._holders_of_calls(calls, {"id": ids, "thread": thread, "ts": ts, "stop": end, "is_op": is_op})
        # THEN an interval is kept exactly when it holds a call, and the holders are those of the definition
        assert held_any.tolist() == [any(t <= a and e >= b for a, b in zip(qts.tolist(), qend.tolist()))
                                     for t, e in zip(ts.tolist(), end.tolist())], trial
        for cid, _name, th, a, b in calls:
            mine = (thread == th) & is_op
            ops = (ids[mine].tolist(), ts[mine].tolist(), end[mine].tolist())
            mine = (thread == th) & ~is_op
            frames = (ids[mine].tolist(), ts[mine].tolist(), end[mine].tolist())
            assert got[cid] == (_first_by_hand(*ops, a, b), _last_by_hand(*frames, a, b)), trial
