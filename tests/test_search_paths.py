"""Searches the analyses make in numpy rather than one comparison (or one SQL subquery) per item,
checked against the definitions they replace: the time budget's cuts (analysis/diagnosis/budget.py) and the
sites of blocking calls (analysis/diagnosis/levers.py)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import trace_path

import profuse
from profuse.analysis.busy import merge_runs
from profuse.analysis.diagnosis.budget import covered, device_work, labels, pieces


def _covered_by_hand(starts: list[int], ends: list[int], t: list[int]) -> list[bool]:
    return [any(s <= x < e for s, e in zip(starts, ends)) for x in t]


def _covered_by_search(runs: tuple[np.ndarray, np.ndarray], t: np.ndarray) -> list[bool]:
    """The per-time search it replaced: the last run starting at or before t, and whether t is before its end."""
    rs, re_ = runs
    if rs.size == 0:
        return [False] * t.size
    i = np.searchsorted(rs, t, side="right") - 1
    return ((i >= 0) & (t < re_[np.clip(i, 0, None)])).tolist()


def test_covered_is_the_per_time_search() -> None:
    rng = np.random.default_rng(23)
    for trial in range(2000):
        # GIVEN intervals (some empty, some ending before they start, as a hostile trace may write them)
        # merged into runs, and sorted times with repeats, before, between and after the runs
        n = int(rng.integers(0, 30))
        start = rng.integers(0, 200, n).astype(np.int64)
        end = start + rng.integers(-5, 40, n)
        t = np.sort(rng.integers(-10, 260, int(rng.integers(0, 80)))).astype(np.int64)
        runs = merge_runs(start, end)
        # WHEN each time is looked up by the slices and by the per-time search
        got = covered(runs, t)
        # THEN both say what the intervals of the runs hold, time by time
        assert got.dtype == bool and got.shape == t.shape
        assert got.tolist() == _covered_by_search(runs, t), trial
        assert got.tolist() == _covered_by_hand(runs[0].tolist(), runs[1].tolist(), t.tolist()), trial


def test_pieces_are_the_cuts_inside_the_span() -> None:
    # GIVEN a real trace's labelled time (device work, sync calls, launches, host intervals)
    with profuse.load(trace_path("h100_bert_small.json.gz"), cache=False) as tr:
        steps = np.zeros(0, dtype=np.int64)
        lab = labels(device_work(tr, set(), steps, steps))
    cuts = lab.cuts
    assert cuts.size > 1000 and (np.diff(cuts) > 0).all()
    rng = np.random.default_rng(5)
    lo_t, hi_t = int(cuts[1]), int(cuts[-1])
    spans = [(int(a), int(b)) for a, b in zip(cuts[1:40], cuts[2:41])]  # spans that start and end on cuts
    for _ in range(200):
        a, b = sorted(int(x) for x in rng.integers(lo_t - 1000, hi_t + 1000, 2))
        spans.append((a, b + 1))
    for lo, hi in spans:
        # WHEN the span is cut into pieces
        p = pieces(lab, lo, hi)
        # THEN the pieces start at lo and at every cut strictly inside (as a comparison with every cut
        # finds them), they add up to the span, and each carries the label of the piece it starts in
        inner = [int(c) for c in cuts.tolist() if lo < c < hi]
        assert p.start.tolist() == [lo, *inner]
        assert int(p.ns.sum()) == hi - lo and (p.ns > 0).all()
        assert p.idx.tolist() == [max(int(np.searchsorted(cuts, s, side="right")) - 1, 0) for s in p.start.tolist()]


_SITES_SQL = """
    SELECT c.id, c.name,
      (SELECT o.name FROM events o WHERE o.thread = c.thread AND o.kind = 'cpu_op' AND o.parent_op IS NULL
         AND o.ts <= c.ts AND o.ts + o.dur >= c.ts + c.dur ORDER BY o.ts, o.id LIMIT 1),
      (SELECT s.name FROM scopes s WHERE s.id = c.module),
      (SELECT p.name FROM events p WHERE p.thread = c.thread AND p.kind = 'python' AND p.ts <= c.ts
         AND p.ts + p.dur >= c.ts + c.dur AND p.name NOT LIKE 'nn.Module:%' ORDER BY p.ts DESC, p.dur, p.id LIMIT 1)
    FROM events c WHERE c.id IN ({ids})"""


@pytest.mark.parametrize("name", ["h100_bert_small", "mi300_sglang_decode_cudagraph", "a100_event_sync",
                                  "v100_rank1_of2_216k_events"])
def test_sync_sites_are_the_subqueries_they_replace(name: str) -> None:
    from profuse.analysis.diagnosis import levers
    # GIVEN a real trace and calls of every host kind on it (runtime calls, ops, frames), some with none
    # of an op or a frame around them
    with profuse.load(trace_path(f"{name}.json.gz"), cache=False) as tr:
        rng = np.random.default_rng(3)
        pool = [int(i) for (i,) in tr.con.execute(
            "SELECT id FROM events WHERE kind IN ('runtime', 'sync', 'cpu_op', 'python') AND dur > 0").fetchall()]
        ids = sorted({int(i) for i in rng.choice(pool, size=min(400, len(pool)), replace=False)})
        # WHEN their sites are found by the search and by one SQL subquery per call, as written here
        got = levers._sync_sites(tr, ids)
        rows = tr.con.execute(_SITES_SQL.format(ids=", ".join(map(str, ids)))).fetchall()
    want = {int(r[0]): (r[1] or "", r[2] or "", r[3] or "", r[4] or "") for r in rows}
    # THEN every call has the same name, outermost op, module and innermost frame
    assert got == want
    assert any(site[1] for site in want.values()) or any(site[3] for site in want.values())
