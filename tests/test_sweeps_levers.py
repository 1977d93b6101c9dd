"""The diagnosis's sweeps (the host intervals as name codes, the labels, the steady spans' pieces, the idle CPU
time's holders) checked against the rules they replaced, kept below verbatim as the oracles: on every shared
trace, and on hand-built overlapping intervals (nested, equal starts, equal ends, zero-length, several threads),
times in and out of order. The compiled sweeps (trace/_accel.c holders, started, covering) are checked against
their numpy twins and a comparison with every interval."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ALL_TRACES, trace_id

import profuse
from profuse.analysis.busy import LAUNCH_GAP_MAX_US, UNRECORDED_SHARE, Activities, queued_runs
from profuse.analysis.diagnosis import budget, levers
from profuse.analysis.diagnosis.budget import (
    BUSY_PRIORITY,
    CPU_OTHER,
    HOST_SYNC,
    INPUT,
    LAUNCH_OVERHEAD,
    LEAVES,
    NO_WORK,
    QUEUED,
    TOP_OP,
    UNRECORDED,
    DeviceWork,
    Labels,
    covered,
)
from profuse.analysis.diagnosis.records import Steady
from profuse.analysis.steps import steady_spans
from profuse.trace import compiled
from profuse.trace.vocabulary import is_graph_launch, is_launch

# --- the previous rules, kept here as the oracles -------------------------------------------------------

# analysis/diagnosis/budget.py device_work's host intervals before the names were coded: one string per row
OLD_HOST_SQL = """
    SELECT ts, ts + greatest(dur, 1) AS stop, coalesce(depth, 0) AS depth, coalesce(name, '') AS name, thread,
           kind = 'cpu_op' AS is_op, kind = 'cpu_op' AND {top} AS top, kind = 'runtime' AS runtime
    FROM events
    WHERE kind IN ('cpu_op', 'python', 'runtime') AND thread IN ({tl}) ORDER BY ts, id"""


def old_merge_runs(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if start.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z
    order = np.argsort(start, kind="stable")
    s, e = start[order].astype(np.int64), end[order].astype(np.int64)
    reach = np.maximum.accumulate(e)
    new_run = np.ones(s.size, dtype=bool)
    new_run[1:] = s[1:] > reach[:-1]
    last_of_run = np.append(new_run[1:], True)
    return s[new_run], reach[last_of_run]


def old_working_runs(w: DeviceWork) -> tuple[np.ndarray, np.ndarray]:
    """The union over the threads of each thread's host intervals less the moments whose deepest open interval
    on that thread is a Python frame that waits (analysis/waiting.py's names), found by cutting every waiting
    frame at the boundaries of the intervals of its thread that overlap it: the slow way, piece by piece."""
    from profuse.analysis.waiting import waits

    names = np.asarray(w.host_names, dtype=object)[w.host_code] if w.host_names else np.zeros(0, dtype=object)
    frame = ~(w.host_op | w.host_runtime)
    waiting = frame & np.asarray([waits(str(n)) for n in names], dtype=bool) if names.size else frame & False
    blocked: dict[int, list[tuple[int, int]]] = {}
    for i in np.flatnonzero(waiting).tolist():
        lo, hi, th = int(w.host_ts[i]), int(w.host_end[i]), int(w.host_thread[i])
        near = np.flatnonzero((w.host_thread == th) & (w.host_ts < hi) & (w.host_end > lo))
        cuts = sorted({lo, hi, *(int(t) for t in w.host_ts[near] if lo < t < hi),
                       *(int(t) for t in w.host_end[near] if lo < t < hi)})
        for a, b in zip(cuts[:-1], cuts[1:]):
            open_ = [j for j in near.tolist() if w.host_ts[j] <= a and b <= w.host_end[j]]
            deepest = max(open_, key=lambda j: (int(w.host_depth[j]), int(w.host_ts[j]), -int(w.host_end[j])))
            if waiting[deepest]:
                blocked.setdefault(th, []).append((a, b))
    starts, ends = [], []
    for th in np.unique(w.host_thread).tolist():
        mine = w.host_thread == th
        for a, b in zip(*(r.tolist() for r in old_merge_runs(w.host_ts[mine], w.host_end[mine]))):
            cur = a   # each run less the blocked pieces inside it
            for x, y in sorted(blocked.get(th, [])):
                if y <= cur or x >= b:
                    continue
                if x > cur:
                    starts.append(cur)
                    ends.append(x)
                cur = max(cur, y)
            if cur < b:
                starts.append(cur)
                ends.append(b)
    return old_merge_runs(np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))


def old_labels(w: DeviceWork) -> Labels:
    a = w.acts
    waits = queued_runs(a)
    cuts = np.sort(np.concatenate([[budget._BEFORE], a.start, a.end, *waits, w.sync_ts, w.sync_end, *w.launch_runs,
                                   *w.input_runs, w.host_ts, w.host_end]).astype(np.int64))
    cuts = cuts[np.concatenate([[True], cuts[1:] != cuts[:-1]])]
    label = np.full(cuts.size, -1, dtype=np.int64)
    pageable = np.zeros(cuts.size, dtype=bool)
    fp32 = np.zeros(cuts.size, dtype=bool)
    graph = np.zeros(cuts.size, dtype=bool)
    for i in range(len(BUSY_PRIORITY)):
        m = w.cls == i
        if not m.any():
            continue
        here = covered(old_merge_runs(a.start[m], a.end[m]), cuts) & (label < 0)
        label[here] = i
        for flag, arr in ((w.pageable, pageable), (w.fp32, fp32), (w.graph, graph)):
            sel = m & flag
            if sel.any():
                arr |= here & covered(old_merge_runs(a.start[sel], a.end[sel]), cuts)
    for cause, runs in ((QUEUED, waits), (HOST_SYNC, old_merge_runs(w.sync_ts, w.sync_end)),
                        (LAUNCH_OVERHEAD, w.launch_runs), (INPUT, w.input_runs),
                        (CPU_OTHER, old_working_runs(w))):
        here = (label < 0) & covered(runs, cuts)
        label[here] = cause
    label[label < 0] = NO_WORK
    return Labels(cuts, label, pageable, fp32, graph)


def old_encloses_step(ts: np.ndarray, end: np.ndarray, step_ts: np.ndarray, step_end: np.ndarray) -> np.ndarray:
    if step_ts.size == 0 or ts.size == 0:
        return np.zeros(ts.size, dtype=bool)
    order = np.argsort(step_ts, kind="stable")
    sts, sen = step_ts[order], step_end[order]
    i = np.searchsorted(sts, ts, side="left")
    inside = i < sts.size
    ic = np.clip(i, 0, sts.size - 1)
    out: np.ndarray = inside & (sen[ic] <= end) & (sts[ic] >= ts)
    return out


def old_unrecorded_waits(label: np.ndarray, start: np.ndarray, ns: np.ndarray) -> np.ndarray:
    q = label == QUEUED
    if not q.any():
        return label
    busy = label < len(BUSY_PRIORITY)
    first = int(start[busy][0]) if busy.any() else 2 ** 62
    busy_ns = int(ns[busy].sum())
    edge = np.flatnonzero(np.diff(np.concatenate([[0], q.astype(np.int8), [0]])))
    begin, stop = edge[::2], edge[1::2]
    total = np.concatenate([[0], np.cumsum(ns)])
    run_ns = total[stop] - total[begin]
    ends = start[stop - 1] + ns[stop - 1]
    outside = (ends <= first) | (run_ns >= UNRECORDED_SHARE * busy_ns)
    if not outside.any():
        return label
    mark = np.zeros(label.size + 1, dtype=np.int64)
    np.add.at(mark, begin[outside], 1)
    np.add.at(mark, stop[outside], -1)
    out: np.ndarray = np.where(np.cumsum(mark)[:-1] > 0, UNRECORDED, label)
    return out


def old_pieces(lab: Labels, lo: int, hi: int, runs: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(start, ns, idx, label) of one span, as budget.pieces cut it, and its leaves summed by np.add.at; its
    queued pieces relabelled unrecorded by the previous rule on the span alone, or, given ``runs``, those
    starting inside one of them."""
    c = lab.cuts
    inner = c[np.searchsorted(c, lo, side="right"):np.searchsorted(c, hi, side="left")]
    start = np.concatenate([[lo], inner]).astype(np.int64)
    ns = np.diff(np.append(start, hi)).astype(np.int64)
    idx = np.clip(np.searchsorted(c, start, side="right") - 1, 0, None)
    label = lab.label[idx].astype(np.int64)
    if runs is None:
        return start, ns, idx, old_unrecorded_waits(label, start, ns)
    inside = np.asarray([any(s <= t < e for s, e in zip(*runs)) for t in start.tolist()], dtype=bool)
    return start, ns, idx, np.where((label == QUEUED) & inside, UNRECORDED, label)


def queued_stretches(cuts: np.ndarray, label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The maximal stretches of consecutive queued pieces of labelled cuts, as [start, end) (the last one
    open-ended where it runs to the last cut)."""
    q = np.concatenate([[0], (label == QUEUED).astype(np.int8), [0]])
    edge = np.flatnonzero(np.diff(q))
    ends = np.append(cuts, 10 ** 9)[edge[1::2]]
    return cuts[edge[::2]], ends


def old_leaf_ns(label: np.ndarray, ns: np.ndarray) -> np.ndarray:
    out = np.zeros(len(LEAVES), dtype=np.int64)
    np.add.at(out, label, ns)
    return out


@dataclass
class OldWork:
    """The fields of DeviceWork that the previous levers read, with the names as strings (object array)."""

    acts: Activities
    host_ts: np.ndarray
    host_end: np.ndarray
    host_depth: np.ndarray
    host_name: np.ndarray
    host_op: np.ndarray
    host_top: np.ndarray
    host_runtime: np.ndarray
    host_thread: np.ndarray


def old_work(w: DeviceWork) -> OldWork:
    return OldWork(w.acts, w.host_ts, w.host_end, w.host_depth, np.asarray(w.host_names, dtype=object)[w.host_code]
                   if w.host_names else np.zeros(w.host_code.size, dtype=object), w.host_op, w.host_top,
                   w.host_runtime, w.host_thread)


def old_prefix_argmax(end: np.ndarray) -> np.ndarray:
    run = np.maximum.accumulate(end)
    idx: np.ndarray = np.maximum.accumulate(np.where(end == run, np.arange(end.size), 0))
    return idx


def old_covering(ts: np.ndarray, end: np.ndarray, t: np.ndarray) -> np.ndarray:
    if ts.size == 0:
        return np.full(t.size, -1, dtype=np.int64)
    j = np.searchsorted(ts, t, side="right") - 1
    best = old_prefix_argmax(end)[np.clip(j, 0, None)]
    out: np.ndarray = np.where((j >= 0) & (end[best] > t), best, -1)
    return out


def old_holders_walk(ts: np.ndarray, end: np.ndarray, depth: np.ndarray, is_op: np.ndarray, t: np.ndarray,
                     last: np.ndarray, back: int) -> np.ndarray:
    """The walk the compiled holders and its numpy twin made before: every one of the ``back`` latest starts."""
    best = np.full(t.size, -1, dtype=np.int64)
    if ts.size == 0:
        return best
    best_score = np.full(t.size, -(2 ** 40), dtype=np.int64)
    for k in range(back):
        j = last - k
        ok = j >= 0
        jc = np.clip(j, 0, None)
        score = np.where(is_op[jc], 2 ** 30 - depth[jc], depth[jc])
        hold = ok & (ts[jc] <= t) & (t < end[jc]) & (score > best_score)
        best = np.where(hold, jc, best)
        best_score = np.where(hold, score, best_score)
    return best


def old_holders(ts: np.ndarray, end: np.ndarray, depth: np.ndarray, is_op: np.ndarray, t: np.ndarray,
                back: int = 64) -> np.ndarray:
    if ts.size == 0 or t.size == 0:
        return np.full(t.size, -1, dtype=np.int64)
    return old_holders_walk(ts, end, depth, is_op, t, np.searchsorted(ts, t, side="right") - 1, back)


def old_ns_by_name(name: np.ndarray, idx: np.ndarray, ns: np.ndarray) -> Counter[str]:
    held = idx >= 0
    names = name[idx[held]].tolist()
    index = {n: i for i, n in enumerate(dict.fromkeys(names))}
    totals = np.zeros(len(index), dtype=np.int64)
    np.add.at(totals, np.fromiter(map(index.__getitem__, names), dtype=np.int64, count=len(names)),
              np.asarray(ns[held], dtype=np.int64))
    out: Counter[str] = Counter()
    for n, v in zip(index, totals.tolist()):
        out[str(n)] += v
    return out


def old_per_name(names: np.ndarray, flag: Callable[[str], bool]) -> np.ndarray:
    listed = names.tolist()
    once = {n: flag(n) for n in dict.fromkeys(listed)}
    out: np.ndarray = np.fromiter(map(once.__getitem__, listed), dtype=bool, count=len(listed))
    return out


def old_launch_calls_in(w: OldWork) -> np.ndarray:
    a = w.acts
    _ids, first = np.unique(a.launch_id[a.launched], return_index=True)
    lts, lthr = a.launch_ts[a.launched][first], a.launch_thread[a.launched][first]
    out = np.zeros(w.host_ts.size, dtype=np.int64)
    for thread in np.unique(w.host_thread):
        mine = w.host_thread == thread
        ts = np.sort(lts[lthr == thread])
        out[mine] = np.searchsorted(ts, w.host_end[mine], side="left") - np.searchsorted(ts, w.host_ts[mine], side="left")
    return out


def old_holding(w: OldWork, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    top = w.host_top
    held = old_covering(w.host_ts[top], w.host_end[top], t)
    free = held < 0
    holder = np.full(t.size, -1, dtype=np.int64)
    holder[free] = old_holders(w.host_ts, w.host_end, w.host_depth, w.host_op, t[free])
    return held, holder


def old_held_names(w: OldWork, held: np.ndarray, holder: np.ndarray,
                   v_ns: np.ndarray) -> tuple[Counter[str], Counter[str]]:
    ops = old_ns_by_name(w.host_name[w.host_top], held, v_ns)
    free = held < 0
    names = ops + old_ns_by_name(w.host_name, holder[free], v_ns[free])
    return names, ops


def old_runtime_holders(w: OldWork, t: np.ndarray, ns: np.ndarray) -> tuple[levers.InCalls, np.ndarray]:
    """The ns per CUDA/HIP runtime call holding each time, by kind of call, read call by call: a launch call (the
    device vocabulary's) over 1 ms but a graph launch blocked, a shorter one is left out, any other call neither
    launches nor synchronises; and how many distinct launch calls of the two kinds held any."""
    held_by = np.zeros(t.size, dtype=bool)
    rt = w.host_runtime
    if rt.size == 0 or not rt.any() or t.size == 0:
        return levers.InCalls(Counter(), Counter(), Counter(), 0, 0), held_by
    names = w.host_name[rt]
    cuda = old_per_name(names, lambda n: str(n).startswith(("cuda", "hip", "cu")))
    ts, end, names = w.host_ts[rt][cuda], w.host_end[rt][cuda], names[cuda]
    held = old_covering(ts, end, t)
    gap = LAUNCH_GAP_MAX_US * 1000
    kind = [levers.OTHER_CALL if not is_launch(str(n)) else
            levers.LEFT_OUT_LAUNCH if e - s <= gap or is_graph_launch(str(n)) else levers.BLOCKED_LAUNCH
            for n, s, e in zip(names.tolist(), ts.tolist(), end.tolist())]
    of = np.asarray([*kind, levers.OTHER_CALL], dtype=np.int64)[held]
    parts = [old_ns_by_name(names, np.where(of == k, held, -1), ns)
             for k in (levers.OTHER_CALL, levers.BLOCKED_LAUNCH, levers.LEFT_OUT_LAUNCH)]
    calls = [len({int(i) for i, k in zip(held.tolist(), of.tolist()) if i >= 0 and k == want})
             for want in (levers.BLOCKED_LAUNCH, levers.LEFT_OUT_LAUNCH)]
    return levers.InCalls(*parts, *calls), held >= 0


def old_model_intervals(w: OldWork) -> tuple[np.ndarray, np.ndarray]:
    frame = old_per_name(w.host_name, lambda n: levers._in_model(n)
                         and not n.startswith(("aten::", *levers._COMPILED_FRAMES)))
    launched = np.sort(w.acts.launch_ts[w.acts.launched])
    top = w.host_top
    launches = (np.searchsorted(launched, w.host_end, side="left")
                - np.searchsorted(launched, w.host_ts, side="left")) > 0
    keep = frame | (top & launches)
    return w.host_ts[keep], w.host_end[keep]


def old_cpu_other(v: int, w: OldWork, start: np.ndarray, ns: np.ndarray, label: np.ndarray) -> levers.CpuOther:
    """levers._cpu_other as it was (``v``: the leaf's ns, ctx.leaf("idle/cpu_other"))."""
    if not v:
        return levers.CpuOther(0, 0, Counter(), Counter(), levers.InCalls(Counter(), Counter(), Counter(), 0, 0), 0,
                               Counter(), Counter(), Counter())
    m = label == CPU_OTHER
    t, v_ns = start[m], ns[m]
    held, holder = old_holding(w, t)
    names, ops = old_held_names(w, held, holder, v_ns)
    calls, in_runtime = old_runtime_holders(w, t, v_ns)
    gap = LAUNCH_GAP_MAX_US * 1000
    long_ = w.host_end - w.host_ts
    top = w.host_top & (long_ > gap) & (old_launch_calls_in(w) * gap < long_)
    stalled = old_covering(w.host_ts[top], w.host_end[top], t) >= 0
    inside = (old_covering(*old_model_intervals(w), t) >= 0) & ~in_runtime & ~stalled
    rest_names, rest_ops = old_held_names(w, held[~inside], holder[~inside], v_ns[~inside])
    model_ops = old_ns_by_name(w.host_name[w.host_top], held[inside], v_ns[inside])
    pieces_ns = int(v_ns.sum())
    model_ns = round(v * int(v_ns[inside].sum()) / max(pieces_ns, 1))
    return levers.CpuOther(v, pieces_ns, names, ops, calls, model_ns, rest_names, rest_ops, model_ops)


# --- helpers -----------------------------------------------------------------------------------------------


def _same_cpu_other(got: levers.CpuOther, want: levers.CpuOther) -> None:
    """Every figure, and every Counter with its order (most_common breaks ties by it)."""
    for f in ("total_ns", "pieces_ns", "model_ns"):
        assert getattr(got, f) == getattr(want, f), f
    for f in ("names", "ops", "rest_names", "rest_ops", "model_ops"):
        assert list(getattr(got, f).items()) == list(getattr(want, f).items()), f
    for f in ("runtime", "blocked", "left_out"):
        assert list(getattr(got.calls, f).items()) == list(getattr(want.calls, f).items()), f
    assert (got.calls.blocked_calls, got.calls.left_out_calls) == (want.calls.blocked_calls, want.calls.left_out_calls)


def _context(w: DeviceWork, v: int) -> levers.Context:
    steady = Steady({k: (v if k == "idle/cpu_other" else 0) for k in LEAVES}, v, [])
    return levers.Context(trace=None, work=w, labels=None, steady=steady, candidates=[],  # type: ignore[arg-type]
                          peaks=None, roofline_rows=[], target="", cpu=False)


def _capture(path: Path) -> tuple[profuse.Trace, levers.Context | None, Any]:
    """A real trace's device diagnosis context (as diagnose builds it; None where it has none) and its step
    model, the trace left open."""
    from profuse.analysis.diagnosis import diagnose
    from profuse.analysis.steps import step_model

    tr = profuse.load(path, cache=False)
    got: dict[str, levers.Context] = {}
    rank = levers.rank_levers

    def keep(ctx: levers.Context) -> Any:
        got["ctx"] = ctx
        return rank(ctx)

    levers.rank_levers = keep  # type: ignore[assignment]
    try:
        diagnose(tr, candidates=[], peaks=None, roofline_rows=[])
    finally:
        levers.rank_levers = rank  # type: ignore[assignment]
    ctx = got.get("ctx")
    return tr, ctx if ctx is not None and ctx.work is not None else None, step_model(tr)


def _work(rng: np.random.Generator, n_threads: int) -> DeviceWork:
    """Hand-built host intervals on several threads: nested stacks, equal starts, equal ends, zero-length
    ones, overlapping (not nested) ones; ops (some top-level, some long), frames of the model and around
    it, runtime calls; and launches on those threads."""
    names = ("aten::add_", "aten::mul_", "aten::linear", "cudaLaunchKernel", "cudaMalloc", "cuMemcpy", "hipFree",
             "nn.Module: Block", "model.py(10): forward", "loader.py(5): __next__", "Torch-Compiled Region: 0/0",
             "torch/nn/modules/module.py(1): _call_impl", "mtia_exec")
    ts, end, depth, code, op, top, thread = [], [], [], [], [], [], []
    for th in range(n_threads):
        t0 = 0
        for _ in range(int(rng.integers(5, 25))):
            t0 += int(rng.integers(0, 40))
            stack_end = t0 + int(rng.integers(0, 3_000_000 if rng.random() < 0.2 else 400))
            s, e = t0, stack_end
            for d in range(int(rng.integers(1, 5))):   # nested: each inside the one before
                c = int(rng.integers(0, len(names)))
                ts.append(s), end.append(e), depth.append(d), code.append(c), thread.append(th)
                is_op = names[c].startswith("aten::")
                op.append(is_op), top.append(is_op and d == 0)
                s = s if rng.random() < 0.3 else int(rng.integers(s, e + 1))   # an equal start, or later
                e = e if rng.random() < 0.3 else int(rng.integers(s, e + 1))   # an equal end, or earlier
            if rng.random() < 0.3:  # overlapping the stack (not nested in it), and a zero-length one
                ts.append(t0 + 5), end.append(stack_end + 7), depth.append(0), code.append(int(rng.integers(0, 13)))
                op.append(False), top.append(False), thread.append(th)
                ts.append(t0 + 3), end.append(t0 + 3), depth.append(1), code.append(3)
                op.append(False), top.append(False), thread.append(th)
    o = np.lexsort((np.arange(len(ts)), np.asarray(ts)))

    def col(v: list[Any], dt: Any) -> np.ndarray:
        out: np.ndarray = np.asarray(v, dtype=dt)[o]
        return out

    launch_ts = np.sort(rng.integers(0, 2_000, int(rng.integers(0, 40)))).astype(np.int64)
    k = launch_ts.size
    acts = Activities(start=launch_ts + 5, end=launch_ts + 9, launched=rng.random(k) < 0.9,
                      launch_id=rng.integers(0, max(k // 2, 1), k).astype(np.int64), launch_ts=launch_ts,
                      launch_dur=np.full(k, 2, dtype=np.int64), launch_thread=rng.integers(0, n_threads, k).astype(np.int64))
    z = np.zeros(0, dtype=np.int64)
    code_a = col(code, np.int64)
    return DeviceWork(acts=acts, cls=np.zeros(k, dtype=np.int64), name=np.zeros(k, dtype=object),
                      op_name=np.zeros(k, dtype=object), pageable=np.zeros(k, dtype=bool), fp32=np.zeros(k, dtype=bool),
                      graph=np.zeros(k, dtype=bool), sync_ts=z, sync_end=z, sync_id=z, launch_runs=(z, z),
                      host_ts=col(ts, np.int64), host_end=col(end, np.int64), host_depth=col(depth, np.int64),
                      host_code=code_a, host_names=names, host_op=col(op, bool), host_top=col(top, bool),
                      host_runtime=np.asarray([names[c].startswith(("cu", "hip", "mtia")) for c in code_a], dtype=bool),
                      host_thread=col(thread, np.int64))


# --- hand-built intervals ----------------------------------------------------------------------------------


@pytest.mark.parametrize("twins", [False, True], ids=["compiled", "numpy"])
@pytest.mark.parametrize("in_order", [True, False])
def test_cpu_other_is_the_previous_rule_on_hand_built_intervals(in_order: bool, twins: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    if twins:   # the numpy twins of the compiled sweeps (a pure-Python install, PROFUSE_SCANNER=0)
        monkeypatch.setenv("PROFUSE_SCANNER", "0")
    rng = np.random.default_rng(44 if in_order else 45)
    seen: Counter[str] = Counter()
    for trial in range(150):
        # GIVEN hand-built overlapping host intervals on one to three threads, and idle pieces at times
        # before, inside and after them (in time order, as the steady spans give them, or not)
        w = _work(rng, int(rng.integers(1, 4)))
        t = rng.integers(-5, 3_100_000 if rng.random() < 0.3 else 1_200, int(rng.integers(0, 300))).astype(np.int64)
        t = np.sort(t) if in_order else t
        ns = rng.integers(0, 50, t.size).astype(np.int64)
        label = np.where(rng.random(t.size) < 0.8, CPU_OTHER, QUEUED).astype(np.int8)
        v = int(ns[label == CPU_OTHER].sum()) + int(rng.integers(0, 2))
        # WHEN the idle CPU time's holders are found by the sweeps (the pieces at once, or a few at a time:
        # CPU_OTHER_CHUNK, as on a big trace) and by the previous rule
        got = levers._cpu_other(_context(w, v), t, ns, label)
        want = old_cpu_other(v, old_work(w), t, ns, label)
        with monkeypatch.context() as m:
            m.setattr(levers, "CPU_OTHER_CHUNK", int(rng.integers(1, 40)))
            chunked = levers._cpu_other(_context(w, v), t, ns, label)
        # THEN every count, and the order each count names its holders in, is the same
        _same_cpu_other(got, want)
        _same_cpu_other(chunked, want)
        assert got.total_ns == v, trial
        seen.update(f for f in ("names", "rest_names", "model_ops") if getattr(got, f))
        seen.update(f for f in ("runtime", "blocked", "left_out") if getattr(got.calls, f))
        seen.update(["model_ns"] if 0 < got.model_ns < got.total_ns else [])
    # (and the trials held every kind of answer: names, runtime calls of each kind (launch calls over 1 ms and
    # shorter, other calls), the model's share and the rest's)
    assert set(seen) == {"names", "runtime", "blocked", "left_out", "rest_names", "model_ops", "model_ns"}, seen
    assert min(seen.values()) > 10, seen


@pytest.mark.parametrize("in_order", [True, False])
def test_compiled_sweeps_are_their_twins_and_the_walk_by_hand(in_order: bool) -> None:
    if not compiled.enabled():
        pytest.skip("the compiled extension is not built")
    rng = np.random.default_rng(7 if in_order else 8)
    for trial in range(200):
        # GIVEN hand-built intervals (sorted by start; nested, equal starts and ends, zero-length) and times
        w = _work(rng, int(rng.integers(1, 4)))
        ts, end, depth, is_op = w.host_ts, w.host_end, w.host_depth, w.host_op
        t = rng.integers(-5, 1_500, int(rng.integers(0, 200))).astype(np.int64)
        t = np.sort(t) if in_order else t
        keep = rng.random(ts.size) < 0.5
        # WHEN the starts before each time are counted, and the holders found, in C and in numpy
        after = levers._started(ts, t)
        assert after.tolist() == np.searchsorted(ts, t, side="right").tolist(), trial
        got = levers._covering_after(end, keep, after, t)
        twin = levers._covering_numpy(end, keep, after, t)
        # THEN each is what a comparison with every interval finds: among the kept ones started by t, the
        # latest end (the later one on a tie), if it holds t
        hand = []
        for x, a in zip(t.tolist(), after.tolist()):
            cand = [(int(end[j]), j) for j in range(a) if keep[j]]
            best = max(cand)[1] if cand else -1
            hand.append(best if best >= 0 and end[best] > x else -1)
        assert got.tolist() == twin.tolist() == hand, trial
        # and asked a chunk of the times at a time, the walk going on from the chunk before, the same
        cover, cuts = levers._Cover(keep), np.sort(rng.integers(0, t.size + 1, int(rng.integers(0, 4))))
        chunks = [cover.covering(end, after[lo:hi], t[lo:hi]) for lo, hi in zip([0, *cuts.tolist()],
                                                                                  [*cuts.tolist(), t.size])]
        assert np.concatenate([np.empty(0, dtype=np.int64), *chunks]).tolist() == hand, trial
        # and the holders' walk, carrying its set from one time to the next, is the walk over the window
        for back in (0, 1, 3, 64):
            walk = old_holders_walk(ts, end, depth, is_op, t, after - 1, back)
            assert levers._holders(ts, end, depth, is_op, t, after - 1, back).tolist() == walk.tolist(), trial
            assert levers._holders_numpy(ts, end, depth, is_op, t, after - 1, back).tolist() == walk.tolist()


def test_tally_is_its_twin_and_a_loop() -> None:
    if not compiled.enabled():
        pytest.skip("the compiled extension is not built")
    rng = np.random.default_rng(11)
    for trial in range(200):
        # GIVEN name codes (-1: none), ns and a selection of the pieces
        k = int(rng.integers(1, 12))
        code = rng.integers(-1, k, int(rng.integers(0, 300))).astype(np.int32)
        ns = rng.integers(0, 1000, code.size).astype(np.int64)
        sel = rng.random(code.size) < 0.7
        # WHEN each code's total and first selected piece are tallied in C and in numpy
        got = (np.empty(k, dtype=np.int64), np.empty(k, dtype=np.int64))
        twin = (np.empty(k, dtype=np.int64), np.empty(k, dtype=np.int64))
        compiled.accel.tally(code, ns, sel, *got)
        levers._tally_numpy(code, ns, sel, *twin)
        # THEN both are what a loop over the pieces finds
        totals, first = [0] * k, [-1] * k
        for i, (c, v, s) in enumerate(zip(code.tolist(), ns.tolist(), sel.tolist())):
            if c >= 0 and s:
                totals[c] += v
                first[c] = i if first[c] < 0 else first[c]
        assert [a.tolist() for a in got] == [a.tolist() for a in twin] == [totals, first], trial
    with pytest.raises(ValueError, match="out of range"):
        compiled.accel.tally(np.array([3], dtype=np.int32), np.ones(1, dtype=np.int64), np.ones(1, dtype=bool),
                             np.empty(2, dtype=np.int64), np.empty(2, dtype=np.int64))
    with pytest.raises(ValueError, match="out of range"):
        levers._tally_numpy(np.array([3], dtype=np.int32), np.ones(1, dtype=np.int64), np.ones(1, dtype=bool),
                            np.empty(2, dtype=np.int64), np.empty(2, dtype=np.int64))


def test_holders_walk_goes_back_afresh_when_a_time_or_window_goes_back() -> None:
    if not compiled.enabled():
        pytest.skip("the compiled extension is not built")
    # GIVEN nested intervals and times that go forward, back to the start, and a window from no search
    ts = np.array([0, 0, 2, 4, 4, 10], dtype=np.int64)
    end = np.array([20, 8, 6, 5, 12, 11], dtype=np.int64)
    depth = np.array([0, 1, 2, 3, 1, 0], dtype=np.int64)
    is_op = np.array([False, True, False, False, True, False])
    t = np.array([1, 3, 4, 7, 9, 10, 2, 2, 11, 5], dtype=np.int64)
    last = np.searchsorted(ts, t, side="right") - 1
    last[-1] = 5   # an interval started after its time (not a search's answer): the walk says so too
    # THEN the carried set answers as the walk over every window does
    want = old_holders_walk(ts, end, depth, is_op, t, last, 64)
    got = np.empty(t.size, dtype=np.int64)
    compiled.accel.holders(ts, end, depth, t, last, is_op, 64, got)
    assert got.tolist() == want.tolist()
    # (at 4 the two ops of depth 1 tie: the later start wins; back at 2 the op started at 0 holds it again)
    assert got.tolist()[:3] == [1, 1, 4] and got[6] == 1


def test_covering_and_started_refuse_bad_input() -> None:
    if not compiled.enabled():
        pytest.skip("the compiled extension is not built")
    one = np.zeros(1, dtype=np.int64)
    with pytest.raises(ValueError, match="out of range"):
        compiled.accel.covering(one, np.ones(1, dtype=bool), one + 2, one, np.empty(1, dtype=np.int64))
    with pytest.raises(ValueError, match="length"):
        compiled.accel.covering(one, np.ones(2, dtype=bool), one, one, np.empty(1, dtype=np.int64))
    with pytest.raises(ValueError, match="length"):
        compiled.accel.started(one, np.zeros(2, dtype=np.int64), np.empty(1, dtype=np.int64))
    # a walk that is no state of a walk over these intervals: past them, an answer not among its first k,
    # or not 3 int64
    for walk in ([2, -1, 0], [1, 1, 0], [0, 0, 0], [-1, -1, 0]):
        with pytest.raises(ValueError, match="walk"):
            compiled.accel.covering(one, np.ones(1, dtype=bool), one, one, np.empty(1, dtype=np.int64),
                                    np.array(walk, dtype=np.int64))
    with pytest.raises(ValueError, match="walk"):
        compiled.accel.covering(one, np.ones(1, dtype=bool), one, one, np.empty(1, dtype=np.int64),
                                np.zeros(2, dtype=np.int64))


def test_spans_pieces_are_each_span_cut_alone() -> None:
    rng = np.random.default_rng(3)
    relabelled = 0
    for trial in range(300):
        # GIVEN labelled cuts (queued runs among busy and idle pieces) and spans: overlapping, nested, equal,
        # zero-length, ending before they start, in and out of order, before the first cut and past the last
        n = int(rng.integers(1, 60))
        cuts = np.concatenate([[budget._BEFORE], np.unique(rng.integers(0, 400, n))]).astype(np.int64)
        label = rng.choice([0, 3, QUEUED, QUEUED, QUEUED, CPU_OTHER, NO_WORK], cuts.size).astype(np.int8)
        z = np.zeros(cuts.size, dtype=bool)
        # the unrecorded waits (steps.unrecorded_waits gives the budget its own): some of the queued stretches
        qs, qe = queued_stretches(cuts, label)
        pick = rng.random(qs.size) < 0.6
        runs = (qs[pick], qe[pick])
        lab = Labels(cuts, label, z, z, z, runs)
        k = int(rng.integers(0, 8))
        lo = rng.integers(-20, 420, k).astype(np.int64)
        hi = lo + rng.integers(-3, 200, k)
        if k and rng.random() < 0.3:
            hi[0] = lo[0]
        # WHEN they are cut together
        p, offsets, table = budget.spans_pieces(lab, lo, hi)
        # THEN span by span, the pieces, their labels (the given unrecorded waits too) and leaves are each span's alone
        assert offsets[0] == 0 and offsets[-1] == p.start.size and offsets.size == k + 1
        for i in range(k):
            s, e = int(offsets[i]), int(offsets[i + 1])
            start, ns, idx, lab_i = old_pieces(lab, int(lo[i]), int(hi[i]), runs)
            assert p.start[s:e].tolist() == start.tolist(), trial
            assert p.ns[s:e].tolist() == ns.tolist(), trial
            assert p.idx[s:e].tolist() == idx.tolist(), trial
            assert p.label[s:e].tolist() == lab_i.tolist(), trial
            assert table[i].tolist() == old_leaf_ns(lab_i, ns).tolist(), trial
            relabelled += int((lab_i == UNRECORDED).sum())
        if k:   # one span alone is the same cut
            assert budget.pieces(lab, int(lo[0]), int(hi[0])).start.tolist() == p.start[:offsets[1]].tolist()
    assert relabelled > 100   # (the spans held waits the trace cannot show, relabelled)


# --- the real traces --------------------------------------------------------------------------------------

DEVICE_TRACES = [p for p in ALL_TRACES if "cpu_only" not in p.name and not p.name.endswith("rank-1.json.gz")]


@pytest.mark.parametrize("twins", [False, True], ids=["compiled", "numpy"])
@pytest.mark.parametrize("path", DEVICE_TRACES, ids=trace_id)
def test_sweeps_are_the_previous_rules_on_every_trace(path: Path, twins: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if twins:   # the numpy twins of the compiled sweeps (a pure-Python install, PROFUSE_SCANNER=0)
        monkeypatch.setenv("PROFUSE_SCANNER", "0")
    # GIVEN a real trace's diagnosis context: its host intervals, labels and steady pieces
    tr, ctx, model = _capture(path)
    with tr:
        if ctx is None:
            pytest.skip("no device diagnosis (no device activity, or a CPU trace)")
        w = ctx.work
        assert w is not None and ctx.labels is not None
        # THEN the host intervals, read with their names coded, are the previous query's, name by name
        tl = ", ".join(str(t) for t in sorted(w.threads)) or "-1"
        old = tr.con.execute(OLD_HOST_SQL.format(top=TOP_OP.format(e="events"), tl=tl)).fetchnumpy()
        keep = ~old_encloses_step(np.asarray(old["ts"], dtype=np.int64), np.asarray(old["stop"], dtype=np.int64),
                                      np.asarray([s.ts for s in model.steps], dtype=np.int64),
                                      np.asarray([s.end for s in model.steps], dtype=np.int64))
        names = np.asarray(w.host_names, dtype=object)[w.host_code] if w.host_names else np.zeros(0, dtype=object)
        assert names.tolist() == np.asarray(old["name"], dtype=object)[keep].tolist()
        for new, col in ((w.host_ts, "ts"), (w.host_end, "stop"), (w.host_depth, "depth"), (w.host_thread, "thread")):
            assert new.tolist() == np.asarray(old[col], dtype=np.int64)[keep].tolist(), col
        for new, col in ((w.host_op, "is_op"), (w.host_top, "top"), (w.host_runtime, "runtime")):
            assert new.tolist() == np.asarray(old[col], dtype=bool)[keep].tolist(), col
        # and the labels are the previous rule's, cut for cut
        want = old_labels(w)
        assert ctx.labels.cuts.tolist() == want.cuts.tolist()
        assert ctx.labels.label.tolist() == want.label.tolist()
        for f in ("pageable", "fp32", "graph"):
            assert getattr(ctx.labels, f).tolist() == getattr(want, f).tolist(), f
        # and the steady pieces are each steady span's pieces, one after another
        start, ns, idx, label = levers._pieces(ctx)
        old_parts = [old_pieces(ctx.labels, lo, hi) for lo, hi in steady_spans(tr)]
        for got, k in ((start, 0), (ns, 1), (idx, 2), (label, 3)):
            assert got.tolist() == (np.concatenate([p[k] for p in old_parts]).tolist() if old_parts else []), k
        # and the idle CPU time's holders are the previous rule's
        v = ctx.leaf("idle/cpu_other")
        want_cpu = old_cpu_other(v, old_work(w), start, ns, label)
        # found right there (no other thread), and handed in found beforehand (as a report's other thread does)
        assert ctx.cpu_other_holders is None
        _same_cpu_other(levers._cpu_other(ctx, start, ns, label), want_cpu)
        asked: list[int] = []
        held = levers.cpu_other_holders(w)
        handed = replace(ctx, cpu_other_holders=lambda: (asked.append(1), held)[1])
        with monkeypatch.context() as m:
            m.setattr(levers, "cpu_other_holders", lambda w: pytest.fail("found again though handed in"))
            _same_cpu_other(levers._cpu_other(handed, start, ns, label), want_cpu)
        assert asked == ([1] if v else [])   # read where the leaf has time
        # (also a chunk of pieces at a time, as on a big trace: CPU_OTHER_CHUNK)
        for chunk in (997, 65_536):
            monkeypatch.setattr(levers, "CPU_OTHER_CHUNK", chunk)
            _same_cpu_other(levers._cpu_other(ctx, start, ns, label), want_cpu)


def _document(path: Path) -> dict[str, Any]:
    import json

    import msgspec

    from profuse.payloads.report import analyse, report_view

    with profuse.load(path, cache=False) as tr:
        doc = report_view(analyse(tr)).document
    out: dict[str, Any] = json.loads(msgspec.json.encode(doc))
    return out


# traces whose diagnosis has idle CPU time with holders, a warm-up, or unrecorded waits
DOC_TRACES = [p for p in ALL_TRACES if any(n in str(p) for n in (
    "h100_bert_small", "a100_event_sync.", "mi300_sglang_decode_cudagraph", "h200/bert_graph", "mi250_rocm_toy_train"))]


@pytest.mark.parametrize("path", DOC_TRACES, ids=trace_id)
def test_report_is_the_same_with_the_previous_cpu_other(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the report document of a real trace made with the sweeps
    now = _document(path)
    # WHEN it is made again with the previous rule for the idle CPU time's holders in their place
    monkeypatch.setattr(levers, "_cpu_other", lambda ctx, start, ns, label: old_cpu_other(
        ctx.leaf("idle/cpu_other"), old_work(ctx.work), start, ns, label))
    before = _document(path)
    # THEN the two documents are the same, field for field
    assert now == before
