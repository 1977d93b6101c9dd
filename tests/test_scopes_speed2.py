"""The fusion search's remaining per-match Python work made array operations (issue 44): the savings, the
grouping into candidates, the copies' climb up the op tree, the shapes' codes and the id lookups, each checked
against the rule it replaced (kept below as the oracle) on every shared trace and on hand-built cases."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from conftest import ALL_TRACES, trace_id

import profuse
from profuse.analysis import _codes, figures, scopes
from profuse.analysis._read import fetch_columns
from profuse.analysis.advice import fusion
from profuse.analysis.advice.fusion import MIN_BYTE_BOUND_GBPS, RECOMMEND, Facts, Match
from profuse.analysis.advice.records import Candidate

# --- the previous rules, kept here as the oracles -------------------------------------------------------


def saving_before(f: Facts, device_ns: int, kernels: tuple[int, int], inner_ns: int, cpu: bool) -> tuple[float, str]:
    pattern, now, fused = f.pattern, f.bytes_now, f.bytes_fused
    if pattern == "pointwise chain" and (not now or fused >= now):
        return 0.0, "low"
    if cpu and device_ns and (not now or now / device_ns < MIN_BYTE_BOUND_GBPS):
        return 0.0, "low"
    if pattern.startswith("attention"):
        saving, conf = float(inner_ns), "medium"
    elif pattern == "multi-kernel norm":
        k = max(kernels[1], 1)
        saving, conf = device_ns * max(0.0, 1 - 2 / (k + 1)), "low"
    elif now:
        saving = device_ns * max(0.0, 1 - fused / now)
        conf = "high" if pattern not in ("pointwise chain", "bias + activation", "residual add + norm") else "medium"
    else:
        saving, conf = device_ns * 0.5 * (1 - 1 / kernels[0]), "low"
    if pattern == "pointwise chain" or cpu:
        conf = "low"
    return saving, conf


def model_before(f: Facts) -> str:
    """The saving model the previous rule's branches take (saving_before): attention, a multi-kernel norm, bytes,
    else no shapes."""
    if f.pattern.startswith("attention"):
        return "kernels between the matmuls"
    if f.pattern == "multi-kernel norm":
        return "norm kernel count"
    return "memory traffic" if f.bytes_now else "kernel count"


def candidates_before(matches: list[Match]) -> list[Candidate]:
    import json

    groups: dict[tuple[str, str, int], list[Match]] = {}
    shape_ids: dict[Any, int] = {}
    for m in matches:
        m.saving_ns = min(max(m.saving_ns, 0.0), float(m.device_ns))
        shapes = shape_ids.setdefault(m.facts.shapes, len(shape_ids))
        groups.setdefault((m.pattern, m.title, shapes), []).append(m)
    out = []
    for (pattern, scope, _), ms in groups.items():
        saving_ns = sum(m.saving_ns for m in ms)
        if saving_ns <= 0:
            continue
        first = ms[0].facts
        inter: dict[str, int] = {}
        for name, b in first.intermediates:
            inter[name] = inter.get(name, 0) + b
        out.append(Candidate(
            pattern=pattern, scope=scope, instances=len(ms),
            kernels_per_instance=round(sum(m.kernels for m in ms) / len(ms), 2),
            device_us=figures.us(sum(m.device_ns for m in ms) / 1000),
            bytes_now=sum(m.facts.bytes_now for m in ms), bytes_fused=sum(m.facts.bytes_fused for m in ms),
            predicted_saving_us=figures.us(saving_ns / 1000), recommendation=RECOMMEND[pattern],
            confidence=ms[0].confidence, ops=list(first.ops),
            intermediate_bytes=sum(b for m in ms for _, b in m.facts.intermediates),
            intermediates=[{"op": k, "bytes_per_instance": v} for k, v in inter.items()],
            shape=json.dumps([list(d) for d in first.shapes[0]]) if first.shapes else "",
            saving_model=model_before(first)))
    out.sort(key=lambda c: -c.predicted_saving_us)
    return out


def climb_before(up: list[int], rows: list[int]) -> set[int]:
    out: set[int] = set()
    for r in rows:
        while r >= 0 and r not in out:
            out.add(r)
            r = up[r]
    return out


_PAIRS = "FROM shapes WHERE input_dims IS NOT NULL"


def shape_codes_before(con: Any, ids: np.ndarray) -> tuple[list[int], list[tuple[str, str | None]]] | None:
    sh = con.execute(f"SELECT id, hash(input_dims, input_types) AS h {_PAIRS}").fetchall()
    by_id: dict[int, int] = {}
    for i, h in sh:
        if i in by_id:
            return None
        by_id[i] = h
    texts: dict[int, tuple[str, str | None]] = {}
    for d, t, h in con.execute(f"SELECT DISTINCT input_dims, input_types, hash(input_dims, input_types) {_PAIRS}"
                               ).fetchall():
        if texts.setdefault(int(h), (d, t)) != (d, t):
            return None
    used = sorted({by_id[i] for i in ids.tolist() if i in by_id})
    if not all(h in texts for h in used):
        return None
    code = {h: k + 1 for k, h in enumerate(used)}
    return [code[by_id[i]] if i in by_id else 0 for i in ids.tolist()], [texts[h] for h in used]


def positions_before(sid: list[int], ids: list[int]) -> list[int]:
    first: dict[int, int] = {}
    for k, s in enumerate(sid):
        first.setdefault(s, k)
    return [first.get(i, -1) for i in ids]


# --- the shared traces ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_the_array_rules_on_every_shared_trace_are_the_previous_ones(path: Path) -> None:
    with profuse.load(path) as t:
        # the shapes' codes
        ids = np.asarray(fetch_columns(t.con, "SELECT id FROM events WHERE kind = 'cpu_op'")["id"], dtype=np.int64)
        got = scopes._shape_codes(t.con, ids)
        want = shape_codes_before(t.con, ids)
        assert (None if got is None else (got[0].tolist(), got[1])) == want
        # every match's saving, and the candidates grouped from the matches as the previous loop grouped them
        ms = fusion.find_matches(t)
        _same_savings(ms, t.cpu_only)
        assert fusion.fusion_candidates(t) == fusion.fusion_candidates(None, ms) == candidates_before(ms)  # type: ignore[arg-type]
        # the parent rows the unit table kept are the lookup's
        ops, parent = scopes.op_parents(t)
        assert scopes.op_parent_rows(t).tolist() == positions_before(ops.tolist(), parent.tolist())


def _same_savings(ms: list[Match], cpu: bool) -> None:
    """The savings of these matches as the array rule gives them and as the previous one gave each."""
    if not ms:
        return
    x = fusion._Matches.of(ms)
    first_kernels = np.asarray([_first_kernels(m) for m in ms], dtype=np.int64)
    inner = np.asarray([m.device_ns - m.rows.size for m in ms], dtype=np.int64)   # any figures will do
    saving, conf = fusion._savings(x.facts, x.fact, x.device_ns, (x.kernels, first_kernels), inner, cpu)
    want = [saving_before(m.facts, m.device_ns, (m.kernels, k), i, cpu)
            for m, k, i in zip(ms, first_kernels.tolist(), inner.tolist())]
    assert list(zip(saving.tolist(), [fusion.CONFIDENCE[c] for c in conf.tolist()])) == want


def _first_kernels(m: Match) -> int:
    return m.kernels % 4


# --- hand-built cases ------------------------------------------------------------------------------------

_PATTERNS = [*RECOMMEND]


def _facts(rng: random.Random) -> Facts:
    now = rng.choice([0, 0, 64, 4096, 10**9, rng.randint(1, 10**7)])
    fused = rng.choice([0, now, now // 3, now + 5, rng.randint(0, 10**7)])
    shapes = rng.choice([(), (((4, 64),),), (((4, 64), (64,)),), (((8,),),)])
    inter = [(rng.choice(["aten::mul", "aten::add"]), rng.choice([0, 256, 1024])) for _ in range(rng.randint(0, 3))]
    return Facts(rng.choice(_PATTERNS), now, fused, inter, ["aten::mul", "aten::add"][:rng.randint(1, 2)], shapes)


def _random_matches(rng: random.Random) -> list[Match]:
    facts = [_facts(rng) for _ in range(rng.randint(1, 6))]
    out = []
    for _ in range(rng.randint(0, 40)):
        device = rng.choice([0, 1, 7, 1000, 123_457, rng.randint(0, 10**9)])
        saving = rng.choice([0.0, -5.0, float(device), device * 1.5, device * rng.random(), rng.random() * 1e6])
        out.append(Match(rng.choice(["nn.Module: A", "nn.Module: B", "ProfilerStep#*"]),
                         np.arange(rng.randint(1, 5), dtype=np.int64), rng.choice(facts), device, rng.randint(1, 9),
                         saving, rng.choice(fusion.CONFIDENCE)))
    return out


def test_savings_are_the_previous_rule_on_hand_built_matches() -> None:
    rng = random.Random(5)
    for trial in range(300):
        # GIVEN matches of every pattern: no bytes, fused above or equal to now, no device time, one kernel
        ms = _random_matches(rng)
        # THEN the array rule gives each one's saving and confidence, on a CPU and on a device
        for cpu in (False, True):
            _same_savings(ms, cpu)


def test_candidates_are_the_previous_grouping_on_hand_built_matches() -> None:
    rng = random.Random(11)
    dropped = kept = 0
    for trial in range(400):
        # GIVEN matches sharing facts and titles, savings negative, zero, above their device time
        ms = _random_matches(rng)
        copies = [Match(m.title, m.rows, m.facts, m.device_ns, m.kernels, m.saving_ns, m.confidence) for m in ms]
        # WHEN grouped from columns; THEN the candidates are the previous loop's, field for field, in order
        got = fusion.fusion_candidates(None, ms)  # type: ignore[arg-type]
        want = candidates_before(copies)
        assert got == want, trial
        kept += len(got)
        dropped += len({(m.pattern, m.title, m.facts.shapes) for m in copies}) - len(got)
    assert kept and dropped   # groups of both kinds: kept, and dropped for saving nothing


def test_climb_marks_what_the_walk_up_marks() -> None:
    rng = np.random.default_rng(3)
    for trial in range(300):
        # GIVEN a forest (every row's enclosing row before it, or none), now and then one chain n deep, and rows
        # to start from (repeated, or none)
        n = int(rng.integers(0, 60))
        up = np.asarray([int(rng.integers(-1, k)) if k and rng.random() < 0.9 else -1 for k in range(n)], dtype=np.int64)
        if n and trial % 10 == 0:
            up = np.arange(-1, n - 1, dtype=np.int64)
        rows = rng.integers(0, n, int(rng.integers(0, 3 * n + 1))) if n else np.zeros(0, dtype=np.int64)
        # WHEN the climb marks them and every row enclosing one
        mark = np.zeros(n, dtype=bool)
        fusion._climb(mark, up, rows)
        # THEN it marks what walking up from each one marks
        assert set(np.flatnonzero(mark).tolist()) == climb_before(up.tolist(), rows.tolist()), trial


def test_positions_are_the_first_row_of_each_id() -> None:
    rng = np.random.default_rng(9)
    for trial in range(300):
        # GIVEN ids ascending, shuffled, or repeated, and ids asked that are there or not
        n = int(rng.integers(0, 40))
        sid = np.sort(rng.choice(200, n, replace=False)) if trial % 3 == 0 else rng.integers(0, 60, n)
        asked = rng.integers(-5, 210, int(rng.integers(0, 50)))
        # THEN each is found at its first row, -1 where it is not there
        got = _codes.position_lookup(sid.astype(np.int64))(asked.astype(np.int64))
        assert got.tolist() == positions_before(sid.tolist(), asked.tolist()), trial
        assert _codes.positions(sid.astype(np.int64), asked.astype(np.int64)).tolist() == got.tolist(), trial


def _shapes_table(rng: random.Random) -> tuple[Any, np.ndarray, str]:
    """A DuckDB shapes table: rows in id order or shuffled, ids without a row, rows of other events (no dims),
    pairs repeated, types NULL, and now and then a doubled row."""
    con = duckdb.connect()
    con.execute("CREATE TABLE shapes (id BIGINT, input_dims VARCHAR, input_types VARCHAR)")
    ids = sorted(rng.sample(range(1, 400), rng.randint(0, 60)))
    pairs = [("[[4, 64]]", "['float']"), ("[[4, 64], [64]]", "['float', 'float']"), ("[[]]", None), ("[[8]]", "['int']")]
    rows = [(i, *rng.choice(pairs)) for i in ids if rng.random() < 0.8]
    rows += [(i, None, None) for i in rng.sample(range(400, 500), 5)]             # a kernel's row: no dims
    case = "plain"
    if rows and rng.random() < 0.1:
        rows.append(rows[0])
        case = "doubled"
    if rng.random() < 0.5:
        rng.shuffle(rows)
        case += " shuffled"
    con.executemany("INSERT INTO shapes VALUES (?, ?, ?)", rows)
    return con, np.asarray(ids, dtype=np.int64), case


def test_shape_codes_are_the_previous_rule_on_hand_built_tables() -> None:
    rng = random.Random(17)
    seen = set()
    for trial in range(200):
        # GIVEN a shapes table and the ops asked
        con, ids, case = _shapes_table(rng)
        # WHEN each op's pair is coded; THEN the codes and pairs are the previous rule's (None: a doubled row)
        got = scopes._shape_codes(con, ids)
        assert (None if got is None else (got[0].tolist(), got[1])) == shape_codes_before(con, ids), (trial, case)
        seen.add(case)
        con.close()
    assert {"plain", "plain shuffled", "doubled", "doubled shuffled"} <= seen, seen
