"""Fusion's inputs, trace health and the interruptions' clock-skew count read from one scan of the device
activities (analysis/device_events.py) instead of one query each (issue 44), each checked against the query
it replaced, kept below as the oracle: on every shared trace and on hand-built random traces (nested ops,
annotations launching outside any op, module scopes, copies, graph replays, unlinked and skewed activities,
same-stream overlaps, activities outside the host window)."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import fusion_oracle as oracle
import numpy as np
import pytest
from conftest import ALL_TRACES, trace_id

import profuse
from profuse.analysis import health, scopes
from profuse.analysis.advice import fusion, interruptions
from profuse.trace import Trace
from profuse.trace.schema import DEVICE_TIME_SQL

# --- the previous rules, kept here as the oracles -------------------------------------------------------


def device_own_before(trace: Trace) -> dict[int, tuple[int, int]]:
    rows = trace.con.execute(f"""
        SELECT scope, coalesce(sum(dur), 0) AS ns, count(*) AS n FROM events
        WHERE kind IN ({DEVICE_TIME_SQL}) AND scope IS NOT NULL GROUP BY scope""").fetchall()
    return {int(s): (int(ns), int(n)) for s, ns, n in rows}


def skewed_before(trace: Trace) -> int:
    (n,) = trace.con.execute(f"""SELECT count(*) FROM events d JOIN events l ON l.id = d.launch
        WHERE d.kind IN ({DEVICE_TIME_SQL}) AND d.ts < l.ts""").fetchone() or (0,)
    return int(n)


_HOST_SQL = "'cpu_op', 'annotation', 'python', 'runtime', 'sync'"


def health_parts_before(trace: Trace) -> dict[str, Any]:
    """trace_health's counts as its queries read them (launch calls and steps apart, which did not change)."""
    con = trace.con
    python, ops, lo, hi = con.execute(f"""
        SELECT count(*) FILTER (WHERE kind = 'python'), count(*) FILTER (WHERE kind = 'cpu_op'),
               min(ts) FILTER (WHERE kind IN ({_HOST_SQL})), max(ts + dur) FILTER (WHERE kind IN ({_HOST_SQL}))
        FROM events""").fetchone()
    without = dict(con.execute(f"""
        SELECT coalesce(unlinked, 'no_launch'), count(*) FROM events
        WHERE kind IN ({DEVICE_TIME_SQL}) AND launch IS NULL GROUP BY 1 ORDER BY 2 DESC, 1""").fetchall())
    window = (0, 0) if lo is None else con.execute(f"""
        SELECT count(*) FILTER (WHERE ts < ?), count(*) FILTER (WHERE ts + dur > ?)
        FROM events WHERE kind IN ({DEVICE_TIME_SQL})""", [lo, hi]).fetchone()
    clock = con.execute(f"""
        SELECT min(d.ts - l.ts), min(d.ts - (l.ts + l.dur)) FROM events d JOIN events l ON l.id = d.launch
        WHERE d.kind IN ({DEVICE_TIME_SQL}) AND d.link <> 'graph'""").fetchone()
    (overlaps,) = con.execute(f"""
        SELECT count(*) FROM (
          SELECT ts, max(ts + dur) OVER (PARTITION BY coalesce(device, -1), stream ORDER BY ts, id
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
          FROM events WHERE kind IN ({DEVICE_TIME_SQL}) AND stream IS NOT NULL)
        WHERE ts < reach""").fetchone()
    return {"python": int(python or 0), "ops": int(ops or 0), "lo": lo, "hi": hi,
            "without": list(without.items()), "window": tuple(int(v) for v in window),
            "clock": None if clock is None or clock[0] is None else (int(clock[0]), int(clock[1])),
            "overlaps": int(overlaps)}


def health_parts_now(trace: Trace) -> dict[str, Any]:
    from profuse.analysis.device_events import device_events

    c = health._counts(trace)
    d = device_events(trace)
    m = d.launched & d.not_graph
    clock = None if not m.any() else (int((d.ts - d.launch_ts)[m].min()),
                                      int((d.ts - (d.launch_ts + d.launch_dur))[m].min()))
    return {"python": c["python"], "ops": c["ops"], "lo": c["lo"], "hi": c["hi"],
            "without": list(health._without(d).items()), "window": health._window(trace, c["lo"], c["hi"]),
            "clock": clock, "overlaps": health._overlaps(d)}


def scope_rows_before(trace: Trace) -> list[tuple[Any, ...]]:
    sc = trace.con.execute("SELECT id, kind, name, label, parent, ts, dur FROM scopes ORDER BY ts").fetchall()
    return sorted(sc, key=lambda r: (r[5], r[0]))


def scope_rows_now(trace: Trace) -> list[tuple[Any, ...]]:
    sc = scopes._scope_rows(trace.con)
    parent = scopes._ids(sc["parent"]).tolist()
    rows = zip(np.asarray(sc["id"]).tolist(), sc["kind"].tolist(), sc["name"].tolist(), sc["label"].tolist(),
               [None if p == scopes.NO_PARENT else p for p in parent], np.asarray(sc["ts"]).tolist(),
               np.asarray(sc["dur"]).tolist())
    return sorted(rows, key=lambda r: (r[5], r[0]))


def _matches(ms: list[fusion.Match]) -> list[tuple[Any, ...]]:
    return [(m.title, m.rows.tolist(), m.pattern, m.device_ns, m.kernels, m.saving_ns, m.confidence) for m in ms]


def _check(trace: Trace) -> None:
    """Every rewritten rule on ``trace`` against the previous one."""
    assert fusion.copy_only_ops(trace) == oracle.copy_only_ops(trace)
    own = scopes._device_own(trace)
    assert {int(s): (int(ns), int(n)) for s, ns, n in zip(*(x.tolist() for x in own))} == device_own_before(trace)
    assert interruptions.skewed_launches(trace) == skewed_before(trace)
    assert health_parts_now(trace) == health_parts_before(trace)
    assert scope_rows_now(trace) == scope_rows_before(trace)
    t = scopes.unit_table(trace)
    # the searched names from the unit table's names: the matches of the previous names (the events' op names)
    want = fusion.matches_in(t, trace.cpu_only, oracle.copy_only_ops(trace), oracle.candidate_ops(trace))
    assert _matches(fusion.find_matches(trace)) == _matches(want)
    ids, parent = scopes.op_parents(trace)
    rows = trace.con.execute("SELECT id, coalesce(parent_op, -1) FROM events WHERE kind = 'cpu_op'").fetchall()
    assert sorted(zip(ids.tolist(), parent.tolist())) == sorted(rows)


# --- the shared traces ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_the_rewritten_rules_on_every_shared_trace_are_the_previous_queries(path: Path) -> None:
    with profuse.load(path) as t:
        _check(t)


# --- hand-built traces ----------------------------------------------------------------------------------


def _x(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


class _Gen:
    """A random trace: steps of module scopes holding nested ops that launch kernels, copies and memsets (and
    graph replays) on a few streams, with launches in annotations outside any op, activities with no launch,
    launches with no activity, activities that start before their launch or outside the host window."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.ev, self.corr = rng, [], 0

    def launch(self, t: float, tid: int) -> None:
        r = self.rng
        self.corr += 1
        graph = r.random() < 0.15
        name = "cudaGraphLaunch" if graph else r.choice(["cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync"])
        self.ev.append(_x("cuda_runtime", name, t, 2, tid=tid, correlation=self.corr))
        if r.random() < 0.1:
            return                                       # a launch with no activity
        for _ in range(r.randint(2, 3) if graph else 1):
            cat = "kernel" if graph or name == "cudaLaunchKernel" else ("gpu_memcpy" if "Memcpy" in name else "gpu_memset")
            start = t + r.choice([-3, 1, 4, 8, 30])      # -3: before its launch (clock skew)
            stream = r.choice([7, 7, 8])
            self.ev.append(_x(cat, f"{cat}_{r.randint(0, 2)}", start, r.choice([1, 5, 20]), pid=0, tid=stream,
                              correlation=self.corr, stream=stream, device=0))

    def op(self, t: float, depth: int, tid: int) -> None:
        r = self.rng
        self.ev.append(_x("cpu_op", r.choice(["aten::add", "aten::mul", "aten::copy_", "aten::mm"]), t, 18 - 4 * depth,
                          tid=tid, **{"Input Dims": [[2, 3], [2, 3]], "Input type": ["float", "float"]}))
        if depth < 2 and r.random() < 0.5:
            self.op(t + 1, depth + 1, tid)
        elif r.random() < 0.8:
            self.launch(t + 1, tid)

    def trace(self) -> list[dict[str, Any]]:
        r = self.rng
        for step in range(r.randint(1, 3)):
            t0 = 200 * step
            self.ev.append(_x("user_annotation", f"ProfilerStep#{step}", t0, 190))
            for m in range(r.randint(1, 3)):
                t = t0 + 5 + 60 * m
                if r.random() < 0.7:
                    self.ev.append(_x("python_function", f"nn.Module: {r.choice(['Linear', 'LayerNorm'])}_{m}", t, 55))
                if r.random() < 0.3:                     # a record_function launching outside any op
                    self.ev.append(_x("user_annotation", "my_block", t + 1, 8))
                    self.launch(t + 2, 1)
                for k in range(2):
                    self.op(t + 12 + 20 * k, 0, r.choice([1, 1, 2]))
        for _ in range(r.randint(0, 2)):                 # no launch in the trace, or none recorded
            self.ev.append(_x("kernel", "orphan", r.choice([-50, 30, 900]), 5, pid=0, tid=7, stream=7, device=0,
                              **({"correlation": 10_000 + r.randint(0, 9)} if r.random() < 0.5 else {})))
        return self.ev


@pytest.mark.parametrize("seed", range(30))
def test_the_rewritten_rules_on_random_traces_are_the_previous_queries(tmp_path: Path, seed: int) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": _Gen(random.Random(seed)).trace()}))
    with profuse.load(p, cache=False) as t:
        _check(t)


def test_the_random_traces_hold_what_the_rules_read(tmp_path: Path) -> None:
    """The hand-built traces reach every case the rules tell apart (so the comparisons above are not empty)."""
    seen: dict[str, int] = {}
    for seed in range(30):
        p = tmp_path / f"t{seed}.json"
        p.write_text(json.dumps({"traceEvents": _Gen(random.Random(seed)).trace()}))
        with profuse.load(p, cache=False) as t:
            parts = health_parts_before(t)
            counts = {"copies": len(oracle.copy_only_ops(t)), "skewed": skewed_before(t), "overlaps": parts["overlaps"],
                      "without": sum(n for _, n in parts["without"]), "outside": sum(parts["window"]),
                      "own": len(device_own_before(t)),
                      "graph": t.con.execute("SELECT count(*) FROM events WHERE link = 'graph'").fetchone()[0],
                      "annotation_op": t.con.execute("""SELECT count(*) FROM events d JOIN events o ON o.id = d.op
                          WHERE d.kind = 'kernel' AND o.kind = 'annotation'""").fetchone()[0]}
        for k, v in counts.items():
            seen[k] = seen.get(k, 0) + int(v)
    assert all(v > 0 for v in seen.values()), seen
