"""Device-wide busy time, per-step busy time and launch-bound claims on small hand-built traces."""
from __future__ import annotations

import json

import numpy as np
import oracle
import pytest

import profuse
from profuse.analysis.advice.interruptions import interruptions
from profuse.analysis.busy import CpuWork, union_ns
from profuse.analysis.steps import device_busy, steps_busy
from profuse.cli import main
from profuse.units import fmt_us


def _x(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _write(tmp_path, events, name="t.json"):
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def test_union_of_overlapping_intervals():
    s = np.array([0, 5, 20, 22, 30])
    e = np.array([10, 8, 25, 24, 31])
    assert union_ns(s, e) == 10 + 5 + 1
    assert union_ns(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == 0


def test_cpu_work_inside_intervals():
    w = CpuWork.of(np.array([0, 5, 20]), np.array([10, 12, 30]))
    assert w.inside(np.array([0, 11, 25]), np.array([100, 21, 26])).tolist() == [22, 2, 1]


def test_two_streams_overlapping_count_once(tmp_path):
    # GIVEN two streams whose kernels overlap: [0, 100) on one, [50, 150) and [300, 400) on the other
    events = [
        _x("cpu_op", "aten::mm", 0, 10), _x("cuda_runtime", "cudaLaunchKernel", 1, 2, correlation=1),
        _x("cuda_runtime", "cudaLaunchKernel", 4, 2, correlation=2),
        _x("cuda_runtime", "cudaLaunchKernel", 390, 2, correlation=3),   # k3 launched as it runs: no wait
        _x("kernel", "k1", 100, 100, pid=0, tid=7, correlation=1, stream=7, device=0),
        _x("kernel", "k2", 150, 100, pid=0, tid=8, correlation=2, stream=8, device=0),
        _x("kernel", "k3", 400, 100, pid=0, tid=8, correlation=3, stream=8, device=0),
    ]
    with profuse.load(_write(tmp_path, events)) as t:
        b = device_busy(t)
    # THEN busy is the union (250 µs), never the per-stream spans summed (100 + 350)
    assert b is not None
    assert (b.window_us, b.busy_us, b.busy_pct, b.unrecorded_us) == (400.0, 250.0, 62.5, 0.0)


def test_step_counts_kernels_launched_from_another_thread(tmp_path):
    # GIVEN a step on thread 1 whose backward kernels are launched from the autograd thread (tid 2)
    events = [
        _x("user_annotation", "ProfilerStep#3", 0, 1000),
        _x("cpu_op", "aten::mm", 10, 20), _x("cuda_runtime", "cudaLaunchKernel", 12, 5, correlation=1),
        _x("cpu_op", "MmBackward0", 40, 20, tid=2),
        _x("cuda_runtime", "cudaLaunchKernel", 45, 5, tid=2, correlation=2),
        _x("cuda_runtime", "cudaLaunchKernel", 1500, 5, tid=2, correlation=3),  # after the step
        _x("kernel", "fwd", 20, 400, pid=0, tid=7, correlation=1, stream=7, device=0),
        _x("kernel", "bwd", 420, 500, pid=0, tid=7, correlation=2, stream=7, device=0),
        _x("kernel", "later", 1600, 10, pid=0, tid=7, correlation=3, stream=7, device=0),
    ]
    with profuse.load(_write(tmp_path, events)) as t:
        (step,) = steps_busy(t)
    assert step.name == "ProfilerStep#3"
    assert step.activities == 2
    assert (step.window_us, step.busy_us, step.idle_us) == (900.0, 900.0, 0.0)
    assert step.busy_pct == 100.0 and not step.launch_bound


def _launch_bound_trace(python_gap: bool):
    """Ten 1 µs kernels 10 µs apart; between them the host is in an op (or in plain Python)."""
    events = [_x("user_annotation", "ProfilerStep#0", 0, 200)]
    for i in range(10):
        t0 = 10 * i
        if not python_gap:
            events.append(_x("cpu_op", "aten::add", t0, 9))
        events.append(_x("cuda_runtime", "cudaLaunchKernel", t0 + 7, 1, correlation=i + 1))
        events.append(_x("kernel", f"k{i}", t0 + 9, 1, pid=0, tid=7, correlation=i + 1, stream=7, device=0))
    return events


@pytest.mark.parametrize("python_gap", [False, True])
def test_launch_bound_needs_host_launch_work_in_the_gaps(tmp_path, python_gap):
    with profuse.load(_write(tmp_path, _launch_bound_trace(python_gap))) as t:
        (step,) = steps_busy(t)
    assert step.busy_pct == pytest.approx(100 * 10 / 91, abs=0.01)
    assert step.busy_us + step.idle_us == step.window_us
    # in ops: launch-bound; in plain Python (no op, only the 1 µs launch call): not claimed
    assert step.launch_bound is (not python_gap)


def test_a_blocking_copy_over_the_gap_is_not_launch_bound(tmp_path):
    # GIVEN a step whose device sits idle while the host blocks in a synchronous copy for 500 µs
    events = [
        _x("user_annotation", "ProfilerStep#0", 0, 1000),
        _x("cpu_op", "aten::add", 0, 5), _x("cuda_runtime", "cudaLaunchKernel", 1, 2, correlation=1),
        _x("kernel", "k0", 5, 10, pid=0, tid=7, correlation=1, stream=7, device=0),
        _x("cpu_op", "aten::copy_", 20, 520),
        _x("cuda_runtime", "cudaMemcpy", 22, 515, correlation=2),
        _x("gpu_memcpy", "Memcpy DtoH", 530, 5, pid=0, tid=7, correlation=2, stream=7, device=0),
        _x("cpu_op", "aten::mul", 545, 5), _x("cuda_runtime", "cudaLaunchKernel", 546, 2, correlation=3),
        _x("kernel", "k1", 550, 10, pid=0, tid=7, correlation=3, stream=7, device=0),
    ]
    with profuse.load(_write(tmp_path, events)) as t:
        (step,) = steps_busy(t)
    assert step.busy_pct is not None and step.busy_pct < 50
    assert not step.launch_bound, "waiting in a synchronous copy is not launch work"


def test_a_long_stall_inside_an_op_is_not_launch_bound(tmp_path):
    # GIVEN a conv op that autotunes on the host for 50 ms before its (async) launch
    events = [_x("user_annotation", "ProfilerStep#0", 0, 60000)]
    for i in range(3):
        t0 = 20000 * i
        events += [_x("cpu_op", "aten::cudnn_convolution", t0, 19990),
                   _x("cuda_runtime", "cudaLaunchKernel", t0 + 19980, 5, correlation=i + 1),
                   _x("kernel", f"conv{i}", t0 + 19990, 10, pid=0, tid=7, correlation=i + 1, stream=7, device=0)]
    with profuse.load(_write(tmp_path, events)) as t:
        (step,) = steps_busy(t)
    assert step.busy_pct is not None and step.busy_pct < 1
    assert not step.launch_bound, "a 20 ms host stall is not launch overhead"


def test_graph_replay_step_is_busy(tmp_path):
    # GIVEN a step whose one graph launch replays kernels that keep the device busy
    events = [_x("user_annotation", "ProfilerStep#1", 0, 100),
              _x("cuda_runtime", "cudaGraphLaunch", 5, 10, correlation=9)]
    events += [_x("kernel", f"g{i}", 20 + 10 * i, 10, pid=0, tid=7, correlation=9, stream=7, device=0)
               for i in range(40)]
    with profuse.load(_write(tmp_path, events)) as t:
        (step,) = steps_busy(t)
    assert step.activities == 40 and step.busy_pct == 100.0 and not step.launch_bound


def test_cpu_only_trace_makes_no_device_idle_claims(tmp_path, capsys):
    # GIVEN a CPU-only trace whose module calls a child module between two ops
    events = [
        _x("user_annotation", "ProfilerStep#0", 0, 100),
        _x("python_function", "nn.Module: Block_0", 1, 98),
        _x("cpu_op", "aten::add", 2, 8), _x("cpu_op", "aten::mul", 10, 5),
        _x("python_function", "nn.Module: Inner_0", 16, 70),
        _x("cpu_op", "aten::mm", 17, 60), _x("cpu_op", "aten::relu", 80, 5),
        _x("cpu_op", "aten::add", 88, 8),
    ]
    path = _write(tmp_path, events)
    with profuse.load(path) as t:
        assert t.cpu_only
        assert device_busy(t) is None
        # the step's CPU time, and its time in ops: 2-10, 10-15, 17-77, 80-85, 88-96 = 86 of 100 µs
        (step,) = steps_busy(t)
        assert (step.window_us, step.busy_us, step.idle_us, step.activities) == (100.0, 86.0, 14.0, 5)
        assert not step.launch_bound
        rows = {i.scope: i for i in interruptions(t)}
    block = rows["nn.Module: Block"]
    # the child module's 70 µs are work, never the parent's idle: gaps are 10->10, 15->16, 86->88
    assert block.idle_us == pytest.approx(1 + 2)
    assert not block.launch_bound
    assert main(["report", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["device_busy"] is None and [s["busy_us"] for s in doc["steps"]] == [86.0]


def _independent_busy(path):
    """Window and union of kernel/memcpy/memset intervals, in µs, from plain gzip + json (decimals
    parsed exactly: µs timestamps since the epoch with ns digits are beyond a float's precision)."""
    import gzip
    from decimal import Decimal

    doc = json.load(gzip.open(path), parse_float=Decimal)
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"
          and str(e.get("cat", "")).lower() in ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")]
    iv = sorted((Decimal(e["ts"]), Decimal(e["ts"]) + Decimal(e["dur"])) for e in ev)
    busy, cur_s, cur_e = Decimal(0), None, None
    for s, e in iv:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += (cur_e - cur_s) if cur_e is not None else 0
    return float(max(e for _, e in iv) - iv[0][0]), float(busy)


@pytest.mark.parametrize("name", ["h100_bert_small.json.gz", "a100_event_sync_multistream.json.gz",
                                  "mi300_sglang_decode_cudagraph.json.gz", "v100_ns_timestamps.json.gz"])
def test_device_busy_matches_an_independent_union(name, capsys):
    from conftest import trace_path

    path = trace_path(name)
    window, busy = _independent_busy(path)
    assert main(["report", str(path), "--format", "json", "--no-advice"]) == 0
    got = json.loads(capsys.readouterr().out)["device_busy"]
    assert got["window_us"] == pytest.approx(window, abs=0.01)
    assert got["busy_us"] == pytest.approx(busy, abs=0.01)
    # the unrecorded waits inside the window (the time budget's rule, from the raw JSON: oracle.queued_split_us)
    # are neither busy nor idle: busy % is of the window without them
    runs: list[tuple[float, float]] = []
    oracle.queued_split_us(path, oracle.step_spans(path), runs)
    lo = min(float(e["ts"]) for e in oracle.exact_events(str(path)) if oracle.is_device_time(e))
    waits = sum(max(0.0, min(e, lo + window) - max(s, lo)) for s, e in runs)
    # (the oracle's float µs at epoch-scale ns timestamps are good to a quarter µs: 1 µs a run, as test_diagnosis)
    assert got["unrecorded_us"] == pytest.approx(waits, abs=1.0 * max(len(runs), 1))
    assert got["busy_pct"] == pytest.approx(100 * busy / (window - waits), abs=0.01)
    assert (waits > 1000) == (name == "mi300_sglang_decode_cudagraph.json.gz")
    # AND the console names what its share is of (the oracle's window: first device activity to the last), not a
    # bare "window" a reader takes for the budget's step or active window
    assert main(["report", str(path), "--no-advice"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("Device busy"))
    assert f" of the {fmt_us(window)} from the first device activity to the last (" in line


def _overlapping_instances(first: str, second: str) -> list[dict]:
    """Two annotations that overlap in time on threads 1 and 2, sharing launches (numbers in µs):

    thread 1: `first`  [0, 100)    launches k1 at 10 and k2 at 60
    thread 2: `second` [50, 150)   launches k3 at 70 and k4 at 120
    thread 3: no annotation        launches k5 at 80 (inside both) and k6 at 200 (inside neither)
    kernels: k1 [200, 300) k2 [300, 350) k3 [340, 400) on stream 8, k4 [500, 520) k5 [600, 610) k6 [700, 710)
    """
    def launch(tid, ts, corr):
        return _x("cuda_runtime", "cudaLaunchKernel", ts, 2, tid=tid, correlation=corr)

    def kernel(name, ts, dur, corr, stream=7):
        return _x("kernel", name, ts, dur, pid=0, tid=stream, correlation=corr, stream=stream, device=0)

    return [
        _x("user_annotation", first, 0, 100, tid=1), _x("user_annotation", second, 50, 100, tid=2),
        launch(1, 10, 1), launch(1, 60, 2), launch(2, 70, 3), launch(2, 120, 4), launch(3, 80, 5), launch(3, 200, 6),
        kernel("k1", 200, 100, 1), kernel("k2", 300, 50, 2), kernel("k3", 340, 60, 3, stream=8),
        kernel("k4", 500, 20, 4), kernel("k5", 600, 10, 5), kernel("k6", 700, 10, 6),
    ]


def test_overlapping_instances_of_a_scope_count_each_kernel_once(tmp_path, capsys):
    # GIVEN one scope running on two threads at once; k2, k3 and k5 are launched inside both calls
    path = _write(tmp_path, _overlapping_instances("Stage::run", "Stage::run"))
    with profuse.load(path) as t:
        (row,) = [i for i in interruptions(t) if i.scope == "Stage::run"]
        whole = device_busy(t)
    # THEN each kernel belongs to one call: the first call (thread 1) owns k1, k2 (its own launches);
    # the second owns k3, k4 (its own) and k5 (thread 3 has no call: the enclosing call that began
    # last, the second, owns it); k6 is nobody's. Busy is the union of k1..k5:
    # [200, 400) + [500, 520) + [600, 610) = 230 µs; the window is the union of the calls' windows,
    # [200, 350) and [340, 610) = [200, 610) = 410 µs. Counting per call (the old way) gave busy
    # 210 + 130 = 340 µs, more than the whole device's 240 µs.
    assert (row.instances, row.kernels_per_instance) == (2, 2.5)
    assert (row.busy_us, row.idle_us) == (230.0, 180.0)
    assert row.busy_pct == round(100 * 230 / 410, 1)
    assert row.avg_kernel_us == 46.0
    assert whole is not None and whole.busy_us == 240.0 and row.busy_us <= whole.busy_us
    assert main(["report", str(path), "--format", "json"]) == 0
    (jrow,) = [i for i in json.loads(capsys.readouterr().out)["interruptions"] if i["scope"] == "Stage::run"]
    assert (jrow["busy_us"], jrow["idle_us"]) == (230.0, 180.0)


def test_overlapping_steps_on_two_threads_share_no_kernel(tmp_path):
    # GIVEN two profiler steps that overlap on two threads, with the launches above
    with profuse.load(_write(tmp_path, _overlapping_instances("ProfilerStep#1", "ProfilerStep#2"))) as t:
        one, two = steps_busy(t)
    # THEN step 1 owns k1, k2 and step 2 k3, k4, k5 (k6: no step), so their spans are [0, 350) and [350, 610);
    # each row reads its span, as the budget does: step 1 holds k1, k2 and k3's first 10 µs, window [200, 350)
    # all busy; step 2 the rest of k3, k4 and k5: window [350, 610), busy 50 + 20 + 10 = 80, and its gaps
    # [400, 500) and [520, 600) 180. Activities count by their start: k1, k2, k3 in step 1, k4, k5 in step 2,
    # five in all, none counted twice. In those gaps k4 and k5, launched at 120 and 80, wait to start while
    # nothing runs, each gap over half the busy time of step 2's span (80): the time budget's unrecorded
    # waits, so the step table calls them unrecorded, not idle
    assert (one.name, one.activities, one.window_us, one.busy_us, one.idle_us) == ("ProfilerStep#1", 3, 150.0, 150.0, 0.0)
    assert (two.name, two.activities, two.window_us, two.busy_us, two.idle_us + two.unrecorded_us) == (
        "ProfilerStep#2", 2, 260.0, 80.0, 180.0)
    assert (two.idle_us, two.unrecorded_us, one.unrecorded_us) == (0.0, 180.0, 0.0)


def test_a_scope_nested_in_itself_counts_its_kernels_once(tmp_path):
    # GIVEN an annotation nested in another of the same name on one thread (k2 is launched in both)
    events = [
        _x("user_annotation", "Stage::run", 0, 100), _x("user_annotation", "Stage::run", 40, 30),
        _x("cuda_runtime", "cudaLaunchKernel", 10, 2, correlation=1),
        _x("cuda_runtime", "cudaLaunchKernel", 50, 2, correlation=2),
        _x("kernel", "k1", 200, 100, pid=0, tid=7, correlation=1, stream=7, device=0),
        _x("kernel", "k2", 400, 100, pid=0, tid=7, correlation=2, stream=7, device=0),
    ]
    with profuse.load(_write(tmp_path, events)) as t:
        (row,) = interruptions(t)
    # THEN the inner call owns k2 and the outer one k1, each once: busy 200; each call's window spans
    # the kernels it owns ([200, 300) and [400, 500)), so the gap between them is in neither
    assert (row.instances, row.kernels_per_instance, row.busy_us, row.idle_us) == (2, 1.0, 200.0, 0.0)


def test_minus_runs_equals_a_nanosecond_walk():
    from profuse.analysis.busy import merge_runs, minus_runs

    rng = np.random.default_rng(7)
    for _ in range(200):
        a = merge_runs(*(lambda s: (s, s + rng.integers(1, 20, s.size)))(np.sort(rng.integers(0, 200, 8))))
        b = merge_runs(*(lambda s: (s, s + rng.integers(1, 20, s.size)))(np.sort(rng.integers(0, 200, 6))))
        s, e = minus_runs(*a, *b)
        got = {t for lo, hi in zip(s.tolist(), e.tolist()) for t in range(lo, hi)}
        inside = lambda runs, t: any(lo <= t < hi for lo, hi in zip(*runs))
        assert got == {t for t in range(250) if inside(a, t) and not inside(b, t)}
        assert bool((s[1:] >= e[:-1]).all()) and bool((e > s).all())
