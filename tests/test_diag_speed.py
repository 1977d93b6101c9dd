"""The diagnosis's reads made once (analysis/diagnosis/budget.py device_work, levers.py _sync_sites and
holding_top_ops) checked against the reads they replace, kept below verbatim as the oracles: the host intervals
against one query with a string per row, the activities' names and classes against the three-join query and
the per-row classification, the call sites and outermost ops over the shared host intervals against the
correlated subqueries and the query per call set. On every shared trace and on hand-built traces of nested and
overlapping ops and frames (equal starts and ends, zero-length ones, a frame around the whole step, several
threads, blocking calls and copies inside ops)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ALL_TRACES, trace_id
from test_sweeps import sync_sites_by_sql

import profuse
from profuse.analysis.diagnosis import budget, levers
from profuse.analysis.diagnosis.budget import BUSY_PRIORITY, TOP_OP, DeviceWork, device_work
from profuse.analysis.kernel_class import fp32_matrix, kernel_class
from profuse.analysis.steps import step_model
from profuse.trace import Trace
from profuse.trace.schema import DEVICE_TIME_SQL

# --- the previous reads, kept here as the oracles --------------------------------------------------------

# budget.device_work's activities before the names were codes: three joins, every name a string per row
OLD_DEVICE_SQL = f"""
    SELECT d.ts AS start, d.ts + d.dur AS stop, l.id IS NOT NULL AS launched, coalesce(l.id, -1) AS lid,
           coalesce(l.ts, -1) AS lts, coalesce(l.dur, 0) AS ldur, coalesce(l.thread, -1) AS lthread,
           d.kind AS kind, coalesce(d.name, '') AS name, coalesce(o.name, '') AS op_name,
           coalesce(l.name, '') AS launch_name, coalesce(s.input_types, '') AS input_types,
           coalesce(d.link = 'graph', false) AS graph, coalesce(d.stream, -1) AS stream,
           coalesce(r.direction, '') AS direction
    FROM events d LEFT JOIN events l ON l.id = d.launch LEFT JOIN events o ON o.id = d.op
    LEFT JOIN shapes s ON s.id = d.op LEFT JOIN directions r ON r.id = d.id
    WHERE d.kind IN ({DEVICE_TIME_SQL}) ORDER BY l.id IS NULL, l.ts, l.id, d.ts, d.id"""

# budget._host_intervals' rows: every op, frame and runtime call of the threads, a string per row
OLD_HOST_SQL = """
    SELECT id, ts, ts + greatest(dur, 1) AS stop, coalesce(depth, 0) AS depth, coalesce(name, '') AS name, thread,
           kind = 'cpu_op' AS is_op, kind = 'cpu_op' AND coalesce({top}, false) AS top, kind = 'runtime' AS runtime,
           kind = 'python' AS frame, dur IS NULL OR dur < 1 AS raw, name IS NULL AS no_name
    FROM events WHERE kind IN ('cpu_op', 'python', 'runtime') AND thread IN ({tl}) ORDER BY ts, id"""


def old_classes(kind: np.ndarray, name: np.ndarray, op_name: np.ndarray, launch_name: np.ndarray,
                input_types: np.ndarray, direction: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    prio = {c: i for i, c in enumerate(BUSY_PRIORITY)}
    keys = list(zip(kind.tolist(), name.tolist(), op_name.tolist(), launch_name.tolist(), input_types.tolist(),
                    direction.tolist()))
    codes = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    code = np.fromiter(map(codes.__getitem__, keys), dtype=np.int64, count=len(keys))
    per_cls, per_fp32, per_pageable = [], [], []
    for k, n, op, launch, types, way in codes:
        c = kernel_class(k, n, op or None, launch or None, way or None)
        per_cls.append(prio[c])
        per_fp32.append(c in ("gemm", "conv") and fp32_matrix(n, types or None))
        per_pageable.append(k == "memcpy" and "pageable" in n.lower())
    return (np.asarray(per_cls, dtype=np.int64)[code], np.asarray(per_fp32, dtype=bool)[code],
            np.asarray(per_pageable, dtype=bool)[code])


def old_holding_top_ops(trace: Trace, calls_sql: str) -> dict[int, int]:
    c = trace.con.execute(f"""SELECT id, thread, ts, ts + dur AS e FROM events
                              WHERE id IN ({calls_sql}) AND thread IS NOT NULL""").fetchnumpy()
    out: dict[int, int] = {}
    if not len(c["id"]):
        return out
    cthread = np.asarray(c["thread"], dtype=np.int64)
    threads = ", ".join(str(int(t)) for t in np.unique(cthread))
    o = trace.con.execute(f"""SELECT id, thread, ts, ts + dur AS e FROM events WHERE kind = 'cpu_op'
                              AND {TOP_OP.format(e="events")} AND thread IN ({threads})""").fetchnumpy()
    othread = np.asarray(o["thread"], dtype=np.int64)
    for t in np.unique(cthread):
        cm, om = cthread == t, othread == t
        top = levers.first_holding(np.asarray(o["id"], dtype=np.int64)[om], np.asarray(o["ts"], dtype=np.int64)[om],
                                   np.asarray(o["e"], dtype=np.int64)[om], np.asarray(c["ts"], dtype=np.int64)[cm],
                                   np.asarray(c["e"], dtype=np.int64)[cm])
        out.update((int(i), int(h)) for i, h in zip(np.asarray(c["id"])[cm].tolist(), top.tolist()) if h >= 0)
    return out


def old_cpu_fallbacks(trace: Trace) -> list[levers.Fallback]:
    from profuse.analysis.kernel_class import memcpy_class

    tops = old_holding_top_ops(trace, "SELECT launch FROM events WHERE kind = 'memcpy' AND launch IS NOT NULL")
    copies = [(name, ts, end, thread, tops.get(int(launch)), call, recorded)
              for name, ts, end, thread, launch, call, recorded in trace.con.execute("""
        SELECT d.name, d.ts, d.ts + d.dur, l.thread, l.id, l.name, r.direction
        FROM events d JOIN events l ON l.id = d.launch LEFT JOIN directions r ON r.id = d.id
        WHERE d.kind = 'memcpy' ORDER BY d.ts, d.id""").fetchall()]
    d2h: dict[int, tuple[str, int, int]] = {}
    h2d: dict[int, tuple[str, int, int]] = {}
    held: dict[int, int] = {}
    for name, ts, end, _thread, top, call, recorded in copies:
        if top is not None:
            way = memcpy_class(name, call, recorded)
            held[int(top)] = held.get(int(top), 0) + 1
            (d2h if way == "memcpy_d2h" else h2d if way == "memcpy_h2d" else {}).setdefault(int(top), (name, ts, end))
    if not d2h or not h2d:
        return []
    threads = ", ".join(str(int(t)) for t in sorted({c[3] for c in copies}))
    ops = trace.con.execute(f"""
        SELECT id, name, ts, dur, thread, coalesce(kernels_total, 0) FROM events
        WHERE kind = 'cpu_op' AND thread IN ({threads}) AND {TOP_OP.format(e="events")}
        ORDER BY thread, ts, id""").fetchall()
    return sorted(levers._fallbacks_between(ops, d2h, h2d) + levers._fallbacks_within(ops, d2h, h2d, held),
                  key=lambda f: f.ts)


# --- helpers ----------------------------------------------------------------------------------------------

def _work(tr: Trace) -> DeviceWork:
    """The device work as the diagnosis reads it (its steps' threads and spans)."""
    steps = list(step_model(tr).steps)
    return device_work(tr, {s.thread for s in steps}, np.asarray([s.ts for s in steps], dtype=np.int64),
                       np.asarray([s.end for s in steps], dtype=np.int64))


def _check_host(tr: Trace, w: DeviceWork) -> None:
    """The kept and enclosing host intervals are, together, the previous query's rows, in its order."""
    tl = ", ".join(str(t) for t in sorted(w.threads)) or "-1"
    old = tr.con.execute(OLD_HOST_SQL.format(top=TOP_OP.format(e="events"), tl=tl)).fetchnumpy()
    ts, stop = np.asarray(old["ts"], dtype=np.int64), np.asarray(old["stop"], dtype=np.int64)
    steps = list(step_model(tr).steps)
    around = budget._encloses_step(ts, stop, np.asarray([s.ts for s in steps], dtype=np.int64),
                                   np.asarray([s.end for s in steps], dtype=np.int64))
    keep = ~around
    names = np.asarray(w.host_names, dtype=object)
    assert np.asarray(old["id"])[keep].tolist() == w.host_id.tolist()
    assert ts[keep].tolist() == w.host_ts.tolist() and stop[keep].tolist() == w.host_end.tolist()
    assert np.asarray(old["depth"])[keep].tolist() == w.host_depth.tolist()
    assert np.asarray(old["thread"])[keep].tolist() == w.host_thread.tolist()
    assert np.asarray(old["name"], dtype=object)[keep].tolist() == names[w.host_code].tolist()
    for col, got in (("is_op", w.host_op), ("top", w.host_top), ("runtime", w.host_runtime)):
        assert np.asarray(old[col], dtype=bool)[keep].tolist() == got.tolist(), col
    bits = np.where(np.asarray(old["raw"], dtype=bool), budget.RAW_DUR, 0) | np.where(
        np.asarray(old["no_name"], dtype=bool), budget.NO_NAME, 0)
    assert bits[keep].tolist() == w.host_bits.tolist()
    a = w.around
    assert np.asarray(old["id"])[around].tolist() == (a["id"].tolist() if a else [])
    if a:
        kind = np.where(np.asarray(old["top"], dtype=bool), 3, np.where(np.asarray(old["is_op"], dtype=bool), 1,
                        np.where(np.asarray(old["runtime"], dtype=bool), 2, 0)))
        assert kind[around].tolist() == a["kind"].tolist()
        assert stop[around].tolist() == a["stop"].tolist() and bits[around].tolist() == a["bits"].tolist()
        assert np.asarray(old["name"], dtype=object)[around].tolist() == names[a["code"]].tolist()


def _check_device(tr: Trace, w: DeviceWork) -> None:
    """The activities, their names and classes are the three-join query's and the per-row classification's."""
    d = tr.con.execute(OLD_DEVICE_SQL).fetchnumpy()
    a = w.acts
    for col, got in (("start", a.start), ("stop", a.end), ("launched", a.launched), ("lid", a.launch_id),
                     ("lts", a.launch_ts), ("ldur", a.launch_dur), ("lthread", a.launch_thread),
                     ("graph", w.graph), ("stream", w.stream)):
        assert np.asarray(d[col]).tolist() == got.tolist(), col
    assert np.asarray(d["name"], dtype=object).tolist() == w.name.tolist()
    assert np.asarray(d["op_name"], dtype=object).tolist() == w.op_name.tolist()
    cls, fp32, pageable = old_classes(np.asarray(d["kind"], dtype=object), np.asarray(d["name"], dtype=object),
                                      np.asarray(d["op_name"], dtype=object), np.asarray(d["launch_name"], dtype=object),
                                      np.asarray(d["input_types"], dtype=object), np.asarray(d["direction"], dtype=object))
    assert cls.tolist() == w.cls.tolist() and fp32.tolist() == w.fp32.tolist()
    assert pageable.tolist() == w.pageable.tolist()


def _check_holders(tr: Trace, w: DeviceWork, seed: int) -> None:
    """Sites and outermost ops over the shared intervals are the subqueries' and the previous sweep's."""
    assert budget.shared_work(tr) is w
    tl = ", ".join(str(t) for t in sorted(w.threads)) or "-1"
    pool = [int(i) for (i,) in tr.con.execute(f"""SELECT id FROM events WHERE thread IN ({tl})
        AND kind IN ('runtime', 'sync', 'cpu_op', 'python') ORDER BY id""").fetchall()]
    rng = np.random.default_rng(seed)
    ids = sorted({*w.sync_id.tolist(), *(int(i) for i in rng.choice(pool, size=min(200, len(pool)), replace=False))}
                 if pool else set(w.sync_id.tolist()))
    if ids:
        threads = {int(t) for (t,) in tr.con.execute(
            "SELECT DISTINCT thread FROM events WHERE id IN (SELECT unnest(?::BIGINT[])) AND thread IS NOT NULL",
            [ids]).fetchall()}
        ends = np.asarray(w.sync_end, dtype=np.int64)   # the shared intervals answer
        assert levers._host_candidates(tr, threads, True, np.asarray(w.sync_ts, dtype=np.int64), ends) is not None
        assert levers._sync_sites(tr, ids) == sync_sites_by_sql(tr, ids)
    assert levers.cpu_fallbacks(tr) == old_cpu_fallbacks(tr)
    for calls in ("SELECT launch FROM events WHERE kind = 'memcpy' AND launch IS NOT NULL",
                  f"SELECT id FROM events WHERE kind IN ('runtime', 'sync', 'python') AND thread IN ({tl})"):
        assert levers.holding_top_ops(tr, calls) == old_holding_top_ops(tr, calls)


# --- on every shared trace ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_diagnosis_reads_are_the_previous_reads_on_every_trace(path: Path) -> None:
    # GIVEN a real trace with device activity, read as the diagnosis reads it
    with profuse.load(path, cache=False) as tr:
        if tr.cpu_only:
            pytest.skip("no device: the device budget does not run")
        w = _work(tr)
        # WHEN its host intervals, activities and call holders are compared with the previous reads
        # THEN each column, name, class and holder is the same, row for row
        _check_host(tr, w)
        _check_device(tr, w)
        _check_holders(tr, w, seed=44)


# --- on hand-built overlapping intervals ------------------------------------------------------------------------

def _x(cat: str, name: str | None, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {"ph": "X", "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}
    if name is not None:
        ev["name"] = name
    return ev


def _nested_trace(rng: np.random.Generator) -> list[dict[str, Any]]:
    """A step between a script frame and a DataLoader frame, and on two threads: nested and overlapping ops
    and frames (equal starts and ends, zero-length), blocking calls, copies and kernels launched inside them."""
    # an older trace records the step as an op (the ops under it are then the top-level ones)
    ev = [_x("python_function", "train.py(1): <module>", 0, 10_000),
          _x("cpu_op" if rng.random() < 0.5 else "user_annotation", "ProfilerStep#1", 100, 5000)]
    corr = 0
    for tid in (1, 2):
        t = 100
        while t < 5000:
            span = int(rng.integers(0, 300))
            frame = ["model.py(3): forward", "nn.Module: Linear_0", "util.py(9): helper", ""][int(rng.integers(0, 4))]
            ev.append(_x("python_function", frame or None, t, span, tid=tid))
            op = ["aten::linear", "aten::to", "aten::item", "aten::addmm"][int(rng.integers(0, 4))]
            lo = t + int(rng.integers(0, 3)) * (span // 4)
            ev.append(_x("cpu_op", op, lo, max(span - (lo - t), 0), tid=tid,
                         **({"Input type": ["float", "float"]} if op == "aten::addmm" else {})))
            if span > 20:
                ev.append(_x("cpu_op", "aten::copy_", lo + 2, span // 3, tid=tid))
            call = ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaDeviceSynchronize", "cudaStreamSynchronize"][
                int(rng.integers(0, 4))]
            c0 = lo + int(rng.integers(0, max(span // 2, 1)))
            ev.append(_x("cuda_runtime", call, c0, float(rng.choice([0, 0.001, 0.001, 5, 11])), tid=tid, correlation=corr))
            if rng.random() < 0.3:   # zero-length op and frame where the call starts: they hold a zero-length call
                ev += [_x("cpu_op", "aten::empty", c0, 0, tid=tid), _x("python_function", "zero.py(1): f", c0, 0, tid=tid)]
            if call == "cudaLaunchKernel":
                ev.append(_x("kernel", "ampere_sgemm_128x64_nn" if op == "aten::addmm" else "elementwise_kernel",
                             c0 + 5, 4, tid=7, correlation=corr, stream=7, device=0))
            elif call == "cudaMemcpyAsync":   # copies both ways: an op between two is a CPU fallback
                way = "Memcpy DtoH (Device -> Pageable)" if rng.random() < 0.5 else "Memcpy HtoD (Pageable -> Device)"
                ev.append(_x("gpu_memcpy", way, c0 + 5, 3, tid=7, correlation=corr, stream=7, device=0))
            corr += 1
            t += span if rng.random() < 0.7 else max(span // 2, 1)   # some overlap the one before
    return ev


@pytest.mark.parametrize("seed", range(6))
def test_diagnosis_reads_are_the_previous_reads_on_nested_intervals(tmp_path: Path, seed: int) -> None:
    # GIVEN a hand-built trace of nested and overlapping intervals around blocking calls and launches
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": _nested_trace(np.random.default_rng(seed)),
                             "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}))
    with profuse.load(p, cache=False) as tr:
        w = _work(tr)
        if step_model(tr).steps:   # the script frame encloses the step (a step recorded as an op is none)
            assert w.around and w.around["id"].size
        # WHEN its reads are compared with the previous reads THEN they are the same, row for row
        _check_host(tr, w)
        _check_device(tr, w)
        _check_holders(tr, w, seed=seed)


# --- the packed sorts and codes ------------------------------------------------------------------------------------

def test_by_start_is_the_lexsort() -> None:
    rng = np.random.default_rng(5)
    for trial in range(300):
        # GIVEN starts with ties (and spans too wide to pack, now and then) and unique ids in any order
        n = int(rng.integers(0, 50))
        wide = trial % 7 == 0
        ts = rng.integers(0, 2 ** 61 if wide else 40, n).astype(np.int64)
        ids = rng.permutation(3 * n + 1)[:n].astype(np.int64)
        # WHEN sorted by (ts, id) THEN the order is the lexsort's
        assert budget._by_start(ts, ids).tolist() == np.lexsort((ids, ts)).tolist(), trial


def test_holds_any_on_sorted_intervals_is_the_search_per_interval() -> None:
    rng = np.random.default_rng(11)
    for trial in range(200):
        # GIVEN many sorted intervals (ties, zero-length) and a few calls, in and out of order
        n, k = int(rng.integers(0, 3000)), int(rng.integers(1, 20))
        ts = np.sort(rng.integers(0, 500, n)).astype(np.int64)
        end = ts + rng.integers(0, 40, n)
        qts = rng.integers(-5, 520, k).astype(np.int64)
        qend = qts + rng.integers(0, 10, k)
        # WHEN the intervals holding some call are found THEN they are those of a comparison with every call
        want = [bool(((qts >= t) & (qend <= e)).any()) for t, e in zip(ts.tolist(), end.tolist())]
        assert levers._holds_any(ts, end, qts, qend).tolist() == want, trial
