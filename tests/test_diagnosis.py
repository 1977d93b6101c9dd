"""The diagnosis (docs/advisor.md "Diagnosis"): budgets that partition every step of every shared
trace, levers within their bounds, and one small hand-built trace per lever kind and idle cause
whose top lever is known. Expected spans and busy times come from tests/oracle.py (plain JSON)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import oracle
import pytest
from conftest import FIXTURES, H200_TRACES, SHARED, trace_path

import profuse
from profuse.analysis import summarize
from profuse.analysis.advice.findings import trace_findings
from profuse.analysis.breakdown import device_breakdown
from profuse.analysis.diagnosis import Diagnosis, diagnose
from profuse.analysis.health import trace_health
from profuse.analysis.steps import parse_step, steps_busy

TRACES = sorted(str(p.relative_to(SHARED / "traces")) for p in (SHARED / "traces").rglob("*.json.gz")) + [
    str(p.parent.relative_to(FIXTURES)) for p in H200_TRACES]


def _path(name: str) -> Path:
    """A shared trace's path, or a recorded fixture's (tests/fixtures/h200/...)."""
    return FIXTURES / name / "trace.json.gz" if name.startswith("h200/") else SHARED / "traces" / name
TOL_US = 1.0
# traces where launched work waits over 100 µs of idle device time in all (tests/oracle.py's queued_idle_us)
QUEUED_TRACES = {"a100_nccl_rank0_of2.json.gz", "compare_base.json.gz", "compare_test.json.gz",
                 "mi300_sglang_decode_cudagraph.json.gz", "mtia_inference.json.gz", "multirank/sampled_rank-0.json.gz",
                 "multirank/sampled_rank-1.json.gz", "v100_ns_timestamps.json.gz", "v100_rank1_of2_216k_events.json.gz"}


def diag(path: Path | str) -> Diagnosis:
    with profuse.load(path) as t:
        return diagnose(t)


def leaves(budget) -> dict[str, float]:
    return {lf.key: lf.us for lf in budget}


@pytest.mark.parametrize("name", TRACES)
def test_budget_partitions_every_step_and_levers_stay_in_bounds(name):
    path = _path(name)
    d = diag(path)
    expected = oracle.step_spans(path)
    steady = oracle.steady_spans(path)
    # THEN each step's leaves sum to its span, and span and busy time are the oracle's
    if d.scope == "steps":
        assert [s.name for s in d.steps] == [n for n, *_ in expected]
        for s, (_n, lo, hi, busy) in zip(d.steps, expected):
            assert abs(sum(lf.us for lf in s.budget) - s.span_us) <= TOL_US
            assert abs(s.span_us - (hi - lo)) <= TOL_US
            if d.device:
                got_busy = sum(v for k, v in leaves(s.budget).items() if k.startswith("busy/"))
                assert abs(got_busy - busy) <= TOL_US, s.name
        if d.device:   # the step table's busy time is the budget's: every activity in the span, whoever launched it
            with profuse.load(path) as t:
                table = steps_busy(t)
            assert [(r.name, r.busy_us) for r in table] == [(n, pytest.approx(b, abs=TOL_US)) for n, _lo, _hi, b in expected]
    assert abs(d.span_us - sum(hi - lo for _n, lo, hi, _b in steady)) <= TOL_US * len(steady)
    assert abs(sum(lf.us for lf in d.budget) - d.span_us) <= TOL_US * len(steady)
    if d.device:
        busy = sum(v for k, v in leaves(d.budget).items() if k.startswith("busy/"))
        assert abs(busy - sum(b for *_r, b in steady)) <= TOL_US * len(steady)
        # the time launched work waits to start is the oracle's (waits by correlation id), split into the
        # idle waits the trace shows and the unrecorded ones (before the step's first recorded device
        # work, or as long as half of it): those ranked after every lever the trace shows
        queued, unrecorded = leaves(d.budget).get("idle/queued", 0.0), leaves(d.budget).get("unrecorded/wait", 0.0)
        want_queued, want_unrecorded = oracle.queued_split_us(path, steady)
        assert abs(queued - want_queued) <= TOL_US * len(steady)
        assert abs(unrecorded - want_unrecorded) <= TOL_US * len(steady)
        assert (queued + unrecorded > 100) == (name in QUEUED_TRACES)
        outside = [i for i, lv in enumerate(d.levers) if lv.grade == "outside the trace"]
        assert all(i >= len(d.levers) - len(outside) for i in outside), [lv.kind for lv in d.levers]
    assert all(0 <= lf.pct <= 100 for lf in d.budget)
    # every lever within the leaves it draws from; all of them together within the span
    have = leaves(d.budget)
    for lv in (*d.levers, *d.small_items):
        assert 0 <= lv.gain_us <= sum(have.get(k, 0.0) for k in lv.draws) + 1e-3, lv
    assert 0 <= d.combined_gain_us <= d.span_us + 1e-3
    assert d.combined_gain_us <= sum(lv.gain_us for lv in (*d.levers, *d.small_items)) + 1e-3
    # the part of it that levers graded outside the trace take: within their gains and the combined gain
    outside_gain = sum(lv.gain_us for lv in (*d.levers, *d.small_items) if lv.grade == "outside the trace")
    assert 0 <= d.combined_outside_us <= min(outside_gain, d.combined_gain_us) + 1e-3
    # the device window is the span less the unrecorded wait; a lever's share is of it (of the span where it draws
    # that wait), so the 1% fold and the shown shares agree: a ranked lever is at least 1%, a small item under 1%
    # of the window or under 10 µs
    window = d.span_us - have.get("unrecorded/wait", 0.0)
    assert d.window_us == pytest.approx(window, abs=TOL_US * len(steady))
    for lv in (*d.levers, *d.small_items):
        base = d.span_us if "unrecorded/wait" in lv.draws else d.window_us
        assert lv.share_pct == pytest.approx(100 * lv.gain_us / base if base else 0.0, abs=0.01)
    assert all(lv.share_pct >= 1.0 - 0.01 for lv in d.levers if lv.kind != "no_device_data"
               and "unrecorded/wait" not in lv.draws)
    assert all(lv.share_pct < 1.0 + 0.01 or lv.gain_us < 10 for lv in d.small_items)
    # no fusion lever over an op that only ever copies
    copies = oracle.copy_only_op_names(path)
    for lv in (*d.levers, *d.small_items):
        if lv.kind.startswith("fusion:"):
            assert not set(lv.ops) & copies, lv


def test_sglang_cuda_graph_decode_is_a_decode_step_of_32_led_by_the_replayed_gemms():
    path = SHARED / "traces" / "mi300_sglang_decode_cudagraph.json.gz"
    d = diag(path)
    # GIVEN the replayed kernels by the oracle: the largest by time are hipBLASLt/Tensile GEMMs (Cijk_*)
    replayed = oracle.graph_replayed_kernel_time(path)
    top = max(replayed, key=lambda k: replayed[k])
    assert top.startswith("Cijk_")
    (step,) = d.steps
    assert (step.phase, step.batch) == ("decode", 32)
    busy = {k: v for k, v in leaves(step.budget).items() if k.startswith("busy/")}
    assert max(busy, key=lambda k: busy[k]) == "busy/gemm"
    # the GEMMs are bf16 (Tensile BBS): no lower-precision lever
    assert not [lv for lv in (*d.levers, *d.small_items) if lv.kind == "precision"]
    # a decode of 32 tokens (the raw step name) streams its weights: 32 FLOP per byte against MI300X's datasheet
    # 1,307 TFLOP/s over 5,300 GB/s (247 FLOP per byte), so the GEMMs' lever is memory_bound, not GEMM tuning
    names = {e["name"] for e in oracle.complete_events(path) if e["name"].startswith("step[")}
    assert names == {"step[DECODE bs=32]"} and 32 < 1307.0e3 / 5300.0
    assert not [lv for lv in (*d.levers, *d.small_items) if lv.kind == "gemm"]
    first = d.levers[0]
    assert (first.kind, first.confidence, first.grade) == ("memory_bound", "low", "inferred")
    assert "at most 32 tokens" in first.evidence and "ridge point of 247 FLOP per byte" in first.evidence


def test_sglang_decode_idles_waiting_on_its_stream_not_in_the_copy():
    # GIVEN the sglang decode step: the host sits 463 ms in hipMemcpyWithStream (.item()/.tolist()), but
    # the raw JSON shows why: kernels launched before the copy, right after a hipStreamWaitEvent, start
    # only when it ends (the stream waited on an event the trace does not show)
    path = SHARED / "traces" / "mi300_sglang_decode_cudagraph.json.gz"
    raw = oracle.complete_events(path)
    copy = next(e for e in raw if e["name"] == "hipMemcpyWithStream")
    corr = {e["args"]["correlation"]: e for e in raw if e.get("cat") == "cuda_runtime" and "correlation" in e["args"]}
    held = [k for k in raw if k.get("cat") == "kernel" and corr[k["args"]["correlation"]]["ts"] < copy["ts"]
            and k["ts"] > copy["ts"] + copy["dur"] - 1000]
    assert len(held) == 4
    first = min(held, key=lambda k: corr[k["args"]["correlation"]]["ts"])
    wait = max((e for e in raw if e["name"] == "hipStreamWaitEvent" and e["ts"] < corr[first["args"]["correlation"]]["ts"]),
               key=lambda e: e["ts"])
    d = diag(path)
    wait_lever = next(lv for lv in d.levers if lv.kind == "unrecorded_wait")
    # THEN that wait came before any device work the trace recorded in the step: it is not idle time but
    # unrecorded/wait, its lever (low confidence, graded outside the trace: its cause is not in it) ranks
    # after every lever the trace shows, and it names the stream, the waiting kernels and the wait call
    assert d.levers[-1] is wait_lever and d.levers[0].grade != "outside the trace"
    assert wait_lever.confidence == "low" and wait_lever.target == f"stream {first['args']['stream']}"
    assert wait_lever.grade == "outside the trace" and "or a clock offset" in wait_lever.evidence
    assert "not idle time" in wait_lever.evidence
    assert "Its thread called hipStreamWaitEvent" in wait_lever.evidence
    assert "4 launched activities waited" in wait_lever.evidence
    assert f"{corr[first['args']['correlation']]['ts'] - wait['ts']:.1f} µs before" in wait_lever.evidence
    # its gain is the wait of 463 ms, all of the leaf; what is left as idle/queued is the replay's short gaps
    have = leaves(d.budget)
    assert 0.97 * copy["dur"] < wait_lever.gain_us == have["unrecorded/wait"]
    # AND pulling every lever says that part apart: the wait lever takes all of it (no other lever draws
    # unrecorded/wait), so the combined gain outside the trace is that wait
    assert d.combined_outside_us == pytest.approx(wait_lever.gain_us, abs=1e-3)
    assert have.get("idle/queued", 0.0) < 1000
    assert not [lv for lv in d.levers if lv.kind in ("host_sync", "stream_wait")]
    assert wait_lever.kernels == (first["name"],)
    # the device window (the span less the wait) is what the GEMM gate reads: GEMMs are most of it (a decode
    # of 32 tokens: the memory-bound kind of the GEMM lever)
    busy = sum(v for k, v in have.items() if k.startswith("busy/"))
    window = d.span_us - have["unrecorded/wait"]
    assert busy >= 0.5 * window and d.levers[0].kind == "memory_bound"
    with profuse.load(path) as t:  # kernels started microseconds after their launch too: no clock finding
        assert not [f for f in trace_health(t).findings if f.key in ("all_late", "clock_offset")]


def test_serving_step_names():
    s = parse_step("execute_32_context_0(sq0sk0)_generation_32(sq32sk32785)")
    assert (s.engine, s.phase, s.batch, s.tokens) == ("vllm", "decode", 32, 32)
    s = parse_step("execute_8192_context_4(sq2048)_generation_0()")
    assert (s.phase, s.batch, s.tokens) == ("prefill", 4, 8192)
    s = parse_step("execute_300_context_1(sq200)_generation_100(sq1)")
    assert (s.phase, s.batch, s.tokens) == ("mixed", 101, 300)
    s = parse_step("step[EXTEND bs=3 toks=1200]")
    assert (s.engine, s.phase, s.batch, s.tokens) == ("sglang", "prefill", 3, 1200)
    s = parse_step("step[DECODE bs=32]")
    assert (s.phase, s.batch, s.tokens) == ("decode", 32, None)
    assert parse_step("ProfilerStep#4").phase is None and parse_step("my_step") is None


# --- small hand-built traces: one per lever kind and idle cause --------------------------------------

def _x(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _kernel(name, ts, dur, corr, cat="kernel", stream=7):
    return _x(cat, name, ts, dur, pid=0, tid=stream, correlation=corr, stream=stream, device=0)


def _launch(ts, corr, dur=4, name="cudaLaunchKernel", tid=1):
    return _x("cuda_runtime", name, ts, dur, tid=tid, correlation=corr)


def _write(tmp_path, events, name="t.json", device="NVIDIA H100 80GB HBM3"):
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": device}]}))
    return p


def _step(ts, dur, n=1):
    return _x("user_annotation", f"ProfilerStep#{n}", ts, dur)


def test_launch_bound_step_gives_cuda_graphs(tmp_path):
    # GIVEN 100 ops of 20 µs each, each launching a 2 µs kernel at its end: the device waits on dispatch
    ev = [_step(0, 2000)]
    for i in range(100):
        t = i * 20
        ev += [_x("cpu_op", "aten::add", t, 20), _launch(t + 15, i), _kernel("vectorized_elementwise_kernel", t + 19, 2, i)]
    d = diag(_write(tmp_path, ev))
    b = leaves(d.budget)
    assert d.levers[0].kind == "cuda_graphs"
    assert b["idle/launch_overhead"] > 0.8 * d.span_us
    assert d.levers[0].gain_us == b["idle/launch_overhead"]


def test_eager_dispatch_inside_the_model_is_the_graphs_lever_and_the_rest_stays_cpu_work(tmp_path):
    # GIVEN a step: 300 µs of tokenising outside the model, then a forward (an nn.Module frame) of 50 ops, each
    # 10 µs of Python in the forward before a 20 µs op that launches a 2 µs kernel at its end
    ev = [_step(0, 2000), _x("python_function", "tokenizers.py(12): encode", 0, 300),
          _x("python_function", "nn.Module: Bert_0", 300, 1600)]
    for i in range(50):
        t = 300 + i * 30
        ev += [_x("python_function", "modeling_bert.py(181): forward", t, 10),
               _x("cpu_op", "aten::add", t + 10, 20), _launch(t + 25, i),
               _kernel("vectorized_elementwise_kernel", t + 29, 2, i)]
    d = diag(_write(tmp_path, ev))
    b = leaves(d.budget)
    graphs = d.levers[0]
    cpu = next(lv for lv in d.levers + d.small_items if lv.kind == "cpu_work")
    # THEN one cuda_graphs lever draws the launch gaps and the Python between the model's ops, with high
    # confidence (most of the span, no synchronise), and cpu_work keeps only the tokenising
    assert graphs.kind == "cuda_graphs" and graphs.confidence == "high"
    assert set(graphs.draws) == {"idle/launch_overhead", "idle/cpu_other"}
    assert cpu.gain_us == pytest.approx(300, abs=0.01) and "tokenizers.py(12): encode" in cpu.evidence
    assert graphs.gain_us == pytest.approx(b["idle/launch_overhead"] + b["idle/cpu_other"] - 300, abs=0.01)
    assert graphs.gain_us + cpu.gain_us <= b["idle/launch_overhead"] + b["idle/cpu_other"] + 0.01


def test_compiled_region_guards_stay_cpu_work_and_its_wrapper_is_the_graphs_lever(tmp_path):
    # GIVEN a compiled step: 200 µs of guards (TorchDynamo Cache Lookup, launching nothing), then the region,
    # whose wrapper runs 10 µs of Python before each of 20 ops that launch a 2 µs kernel at their end
    ev = [_step(0, 1200), _x("cpu_op", "TorchDynamo Cache Lookup", 0, 200),
          _x("cpu_op", "Torch-Compiled Region: 0/0", 200, 900)]
    for i in range(20):
        t = 200 + i * 40
        ev += [_x("cpu_op", "triton_poi_fused_add_0", t + 10, 20), _launch(t + 25, i),
               _kernel("triton_poi_fused_add_0", t + 29, 2, i)]
    d = diag(_write(tmp_path, ev))
    b = leaves(d.budget)
    graphs = next(lv for lv in d.levers + d.small_items if lv.kind == "cuda_graphs")
    cpu = next(lv for lv in d.levers + d.small_items if lv.kind == "cpu_work")
    # THEN the guards (which still run before a graph replays) are cpu_work, and the wrapper's Python
    # between the region's launches (which a replay removes) is cuda_graphs'
    assert cpu.gain_us >= 200 and "TorchDynamo Cache Lookup" in cpu.evidence
    assert graphs.gain_us + cpu.gain_us == pytest.approx(b["idle/launch_overhead"] + b["idle/cpu_other"], abs=0.01)
    assert graphs.gain_us > b["idle/launch_overhead"]


def test_a_long_op_is_a_stall_though_another_thread_launches_during_it(tmp_path):
    # GIVEN a 5 ms first-call op on the step's thread that launches once at its end (autotuning), while
    # a side thread launches 10 short kernels during it
    ev = [_step(0, 5100), _x("cpu_op", "aten::conv2d", 0, 5000), _launch(4990, 100),
          _kernel("implicit_convolve_sgemm", 4995, 50, 100)]
    for i in range(10):
        t = 100 + i * 300
        ev += [_x("cpu_op", "aten::add", t, 10, tid=2), _launch(t + 5, i, tid=2),
               _kernel("vectorized_elementwise_kernel", t + 9, 2, i)]
    d = diag(_write(tmp_path, ev))
    cpu = next(lv for lv in d.levers + d.small_items if lv.kind == "cpu_work")
    graphs = next((lv for lv in d.levers + d.small_items if lv.kind == "cuda_graphs"), None)
    # THEN the op's own idle time is CPU work (its thread launched once in 5 ms), not dispatch a graph removes
    assert cpu.gain_us > 4000 and "aten::conv2d" in cpu.evidence
    assert graphs is None or graphs.gain_us < 100


def test_synchronous_copy_gives_host_sync_with_its_call_site(tmp_path):
    # GIVEN a 100 µs kernel, then .item(): a D2H copy into pageable memory that blocks for 5000 µs
    ev = [_step(0, 6000), _x("cpu_op", "aten::mm", 10, 20), _launch(15, 1), _kernel("sm90_gemm_bf16", 30, 100, 1),
          _x("cpu_op", "aten::item", 200, 5200), _x("cpu_op", "aten::_local_scalar_dense", 205, 5190),
          _launch(210, 2, dur=5100, name="cudaMemcpyAsync"),
          _kernel("Memcpy DtoH (Device -> Pageable)", 5300, 2, 2, cat="gpu_memcpy")]
    d = diag(_write(tmp_path, ev))
    top = d.levers[0]
    assert top.kind == "host_sync" and "aten::item" in top.target and "cudaMemcpyAsync" in top.target
    # the call blocks [210, 5310) and the device is idle there but for the 2 µs copy at its end
    assert top.gain_us == pytest.approx(5100 - 2 - 0, abs=0.01)
    assert leaves(d.budget)["idle/host_sync"] == top.gain_us


@pytest.mark.parametrize("sync", [True, False])
def test_launched_work_held_by_its_stream_is_queued_and_gives_stream_wait(tmp_path, sync):
    # GIVEN a 12 ms GEMM, then a kernel launched at 15-19 µs, after a cudaStreamWaitEvent, that starts 17 ms
    # later (5 ms after the GEMM ends: a wait inside the device window, under half the step's device work),
    # while the host (with sync) blocks in cudaStreamSynchronize waiting for it
    ev = [_step(0, 18000), _x("cpu_op", "aten::mm", 1, 8), _launch(2, 80, dur=3), _kernel("sm90_gemm_bf16", 10, 12010, 80),
          _x("cpu_op", "aten::add", 10, 20), _launch(12, 90, dur=2, name="cudaStreamWaitEvent"),
          _launch(15, 1), _kernel("vectorized_elementwise_kernel", 17019, 100, 1)]
    if sync:
        ev += [_x("cpu_op", "aten::item", 100, 17100), _launch(105, 91, dur=17010, name="cudaStreamSynchronize")]
    d = diag(_write(tmp_path, ev))
    b = leaves(d.budget)
    # THEN the 5 ms from the GEMM's end to the kernel's start is queued, whatever the host did
    assert b["idle/queued"] == pytest.approx(17019 - 12020, abs=0.01)
    assert "idle/host_sync" not in b and "unrecorded/wait" not in b
    # the wait's lever, graded outside the trace (its cause is not in it), ranks after those the trace shows
    top = next(lv for lv in d.levers if lv.kind == "stream_wait")
    assert top.grade == "outside the trace" and d.levers[-1] is top
    assert top.target == "stream 7" and top.gain_us == b["idle/queued"]
    assert "Its thread called cudaStreamWaitEvent 3.0 µs before that launch" in top.evidence
    assert "1 launched activity waited" in top.evidence
    assert "started 17.00 ms after its launch call ended" in top.evidence
    assert top.kernels == ("vectorized_elementwise_kernel",)
    assert not [lv for lv in (*d.levers, *d.small_items) if lv.kind == "host_sync"]


@pytest.mark.parametrize(("shape", "gemm_us", "start_us"), [
    ("before any recorded device work", 1000, 5019),   # the waiting kernel is the step's first activity
    ("as long as the step's device work", 3000, 9000),  # after a 3 ms GEMM, a 5.98 ms wait
])
def test_a_wait_the_trace_cannot_show_is_unrecorded_not_idle(tmp_path, shape, gemm_us, start_us):
    # GIVEN an add kernel launched at 15-19 µs that starts at start_us, and a GEMM launched after it
    # (first case: it runs after the add; second: from 10 µs, before the add's launch ends)
    first = 10 if start_us > 5019 else start_us + 100
    ev = [_step(0, start_us + 200 + gemm_us), _x("cpu_op", "aten::add", 10, 20), _launch(15, 1),
          _kernel("vectorized_elementwise_kernel", start_us, 100, 1),
          _x("cpu_op", "aten::mm", 40, 10), _launch(42, 2, dur=3), _kernel("sm90_gemm_bf16", first, gemm_us, 2)]
    path = _write(tmp_path, ev)
    d = diag(path)
    b = leaves(d.budget)
    wait = start_us - (first + gemm_us if first < start_us else 19)
    # the raw JSON's own count agrees (tests/oracle.py: waits by correlation id, split by the same rule)
    assert oracle.queued_split_us(path, oracle.steady_spans(path)) == pytest.approx((0.0, wait), abs=0.01)
    # THEN the wait is unrecorded/wait (not idle): its lever says so and ranks after the levers the trace shows
    assert "idle/queued" not in b and b["unrecorded/wait"] == pytest.approx(wait, abs=0.01), shape
    lever = next(lv for lv in d.levers + d.small_items if lv.kind == "unrecorded_wait")
    assert lever.grade == "outside the trace" and lever.draws == ("unrecorded/wait",)
    assert "not idle time the trace shows" in lever.evidence and "or a clock offset" in lever.evidence
    ranked = [lv.grade for lv in d.levers]
    assert ranked == sorted(ranked, key=lambda g: g == "outside the trace")
    # the console and the JSON name the leaf apart from idle
    from profuse.report.console_diagnosis import budget_line
    assert "unrecorded" in budget_line("step", d.budget, True).plain


@pytest.mark.parametrize(("gemm_us", "start_us"), [(1000, 5019), (3000, 9000)])
def test_interruptions_leave_the_unrecorded_wait_out_of_idle(tmp_path, gemm_us, start_us):
    # GIVEN the two waits above: before the step's first recorded activity (outside the step scope's window,
    # which starts at that activity), and one between the GEMM and the add (inside the window)
    first = 10 if start_us > 5019 else start_us + 100
    ev = [_step(0, start_us + 200 + gemm_us), _x("cpu_op", "aten::add", 10, 20), _launch(15, 1),
          _kernel("vectorized_elementwise_kernel", start_us, 100, 1),
          _x("cpu_op", "aten::mm", 40, 10), _launch(42, 2, dur=3), _kernel("sm90_gemm_bf16", first, gemm_us, 2)]
    path = _write(tmp_path, ev)
    with profuse.load(path) as t:
        (row,) = [i for i in trace_findings(t).interruptions if i.scope == "ProfilerStep#*"]
        summary = summarize(t)
        breakdown = device_breakdown(t, summary.device_busy)
    spans = [(start_us, start_us + 100), (first, first + gemm_us)]
    window = max(e for _s, e in spans) - min(s for s, _e in spans)
    busy = sum(e - s for s, e in spans)   # the two do not overlap
    _queued, wait = oracle.queued_split_us(path, oracle.steady_spans(path))
    inside = wait if first < start_us else 0.0   # the second wait lies between the window's two activities
    # THEN the window's unrecorded wait is not idle: busy + idle + unrecorded is the window, busy % is of the
    # window without the wait (the step scope's device window), and what is left idle is the rest
    assert row.unrecorded_us == pytest.approx(inside, abs=0.01)
    assert row.busy_us == pytest.approx(busy, abs=0.01)
    assert row.busy_us + row.idle_us + row.unrecorded_us == pytest.approx(window, abs=0.01)
    assert row.busy_pct == pytest.approx(round(100 * busy / (window - inside), 1))
    # and the step table, the device's busy time and the Overview's categories say the same of the same time
    (step,) = summary.steps
    for got in (step, summary.device_busy):
        assert got.window_us == pytest.approx(window, abs=0.01) and got.busy_us == pytest.approx(busy, abs=0.01)
        assert got.unrecorded_us == pytest.approx(inside, abs=0.01)
        assert got.busy_pct == pytest.approx(round(100 * busy / (window - inside), 2))
    assert step.idle_us == pytest.approx(window - busy - inside, abs=0.01)
    assert breakdown.idle_us == pytest.approx(window - busy - inside, abs=0.01)
    assert breakdown.unrecorded_us == pytest.approx(inside, abs=0.01)


def test_sglang_model_scope_is_busy_in_its_device_window_not_idle_through_the_wait():
    # GIVEN the sglang decode step, whose 463 ms stream wait the budget calls unrecorded (the test above)
    path = SHARED / "traces" / "mi300_sglang_decode_cudagraph.json.gz"
    with profuse.load(path) as t:
        f = trace_findings(t)
    _queued, wait = oracle.queued_split_us(path, oracle.steady_spans(path))
    (model,) = [i for i in f.interruptions if i.scope.startswith("execute_")]
    # THEN the model's scope holds the whole wait as unrecorded, not as idle time, and the budget agrees
    assert model.unrecorded_us == pytest.approx(wait, abs=TOL_US)
    assert model.unrecorded_us == pytest.approx(leaves(f.diagnosis.budget)["unrecorded/wait"], abs=TOL_US)
    assert model.idle_us < 0.01 * model.unrecorded_us and model.busy_pct > 90
    # and the rows together hold the whole wait as unrecorded (none of it left in their idle time)
    assert sum(i.unrecorded_us for i in f.interruptions) >= 0.99 * wait
    # the step table and the device's busy time hold the same wait apart from idle
    with profuse.load(path) as t:
        summary = summarize(t)
    (step,) = summary.steps
    for got in (step, summary.device_busy):
        assert got.unrecorded_us == pytest.approx(wait, abs=TOL_US) and got.busy_pct > 90
    assert step.idle_us == pytest.approx(model.idle_us, abs=TOL_US)


@pytest.mark.parametrize(("wait_us", "queued"), [(99.0, False), (101.0, True)])
def test_a_wait_is_queued_only_past_100_us_and_never_a_lever_under_1_ms(tmp_path, wait_us, queued):
    # GIVEN 5 kernels that each start wait_us after their launch call ends (launch calls end at t + 9)
    ev = [_step(0, 2000)]
    for i in range(5):
        t = i * 400
        ev += [_x("cpu_op", "aten::add", t, 20), _launch(t + 5, i),
               _kernel("vectorized_elementwise_kernel", t + 9 + wait_us, 100, i)]
    path = _write(tmp_path, ev)
    d = diag(path)
    # THEN each whole wait is queued past 100 µs (none of it before), but the first, before any device work
    # the step recorded, which is unrecorded/wait; and no lever draws on them
    b = leaves(d.budget)
    assert b.get("idle/queued", 0.0) == pytest.approx(4 * wait_us if queued else 0.0, abs=0.01)
    assert b.get("unrecorded/wait", 0.0) == pytest.approx(wait_us if queued else 0.0, abs=0.01)
    assert not [lv for lv in (*d.levers, *d.small_items) if {"idle/queued", "unrecorded/wait"} & set(lv.draws)]
    # and, as every launch waited, the trace's health says a device clock ahead of the host's would look the same
    with profuse.load(path) as t:
        late = [f for f in trace_health(t).findings if f.key == "all_late"]
    assert [f.text for f in late] == ([f"every launched activity started over 100 µs after its launch call (the least "
                                       f"{wait_us:.1f} µs)"] if queued else [])
    assert all("a device clock ahead of the host's would look the same" in f.effect for f in late)


@pytest.mark.parametrize(("wait_us", "lever"), [(990.0, False), (1010.0, True)])
def test_stream_wait_needs_a_wait_of_1_ms(tmp_path, wait_us, lever):
    # a 2.5 ms GEMM first, so the wait lies inside the device window and is under half its device work
    ev = [_step(0, 4000), _x("cpu_op", "aten::mm", 1, 8), _launch(2, 80, dur=3), _kernel("sm90_gemm_bf16", 6, 2500, 80),
          _x("cpu_op", "aten::add", 10, 20), _launch(15, 1),
          _kernel("vectorized_elementwise_kernel", 2506 + wait_us, 100, 1)]
    d = diag(_write(tmp_path, ev))
    assert leaves(d.budget)["idle/queued"] == pytest.approx(wait_us, abs=0.01)
    waits = [lv for lv in (*d.levers, *d.small_items) if lv.kind == "stream_wait"]
    assert bool(waits) == lever and all(lv.gain_us == pytest.approx(wait_us, abs=0.01) for lv in waits)


def test_stream_wait_names_the_work_the_wait_released_and_only_a_wait_call_made_for_it(tmp_path):
    # GIVEN a kernel on stream 9 launched at 10 (after a cudaStreamWaitEvent at 5) that starts at 5000, and
    # a kernel on stream 7 launched at 40 (after another launch at 30: the wait call at 5 is not its own)
    # that starts at 3000, ending a 3 ms wait; then a 6.9 ms GEMM, so the waits are under half the step's
    # device work and inside its device window (idle waits, not unrecorded ones)
    ev = [_step(0, 13000), _x("cpu_op", "aten::add", 0, 60), _launch(5, 90, dur=2, name="cudaStreamWaitEvent"),
          _launch(10, 1), _kernel("vectorized_elementwise_kernel", 5000, 100, 1, stream=9),
          _launch(30, 2), _kernel("elementwise_kernel_a", 35, 2, 2),
          _launch(40, 3), _kernel("elementwise_kernel_b", 3000, 100, 3),
          _x("cpu_op", "aten::mm", 5085, 10), _launch(5090, 4), _kernel("sm90_gemm_bf16", 5100, 6900, 4)]
    d = diag(_write(tmp_path, ev))
    top = next(lv for lv in d.levers if lv.kind == "stream_wait")
    # THEN the longest wait [37, 3000) (both kernels waiting) is named by the one it released (stream 7), with
    # no wait call of its own; the second wait [3100, 5000) counts too (the first, [14, 35), is under 1 ms)
    assert top.kind == "stream_wait" and top.target == "stream 7" and top.kernels == ("elementwise_kernel_b",)
    assert "in 2 waits" in top.evidence and "StreamWaitEvent" not in top.evidence
    assert "2 launched activities waited" in top.evidence
    assert top.gain_us == pytest.approx((3000 - 37) + (5000 - 3100), abs=0.01)


def test_cpu_preprocessing_gives_cpu_work_naming_the_op(tmp_path):
    # GIVEN 4 ms of CPU work (no launches) before the step's one kernel
    ev = [_step(0, 5000), _x("cpu_op", "aten::to_tensor_preprocess", 10, 4000),
          _x("cpu_op", "aten::mm", 4100, 20), _launch(4105, 1), _kernel("sm90_gemm_bf16", 4120, 800, 1)]
    d = diag(_write(tmp_path, ev))
    top = d.levers[0]
    assert top.kind == "cpu_work" and "aten::to_tensor_preprocess" in top.evidence
    # the idle CPU time is the preprocessing and aten::mm's time after its launch returned (4109) until the
    # kernel starts; the preprocessing launches nothing, so it stays cpu_work (a graph would not remove it)
    b = leaves(d.budget)
    assert b["idle/cpu_other"] == pytest.approx(4000 + (4120 - 4109), abs=0.01)
    assert top.gain_us == pytest.approx(4000, abs=0.01)
    assert "DataLoader" in top.how
    # while aten::mm's own dispatch after its launch is the model's, which a graph replay removes
    graphs = next(lv for lv in d.levers + d.small_items if lv.kind == "cuda_graphs")
    assert graphs.gain_us == pytest.approx(b["idle/launch_overhead"] + (4120 - 4109), abs=0.01)


def test_nothing_running_is_no_work_and_no_lever_claims_it(tmp_path):
    # GIVEN a step whose host sleeps 3 ms (no event at all) between two kernels
    ev = [_step(0, 4000), _x("cpu_op", "aten::mm", 0, 20), _launch(5, 1), _kernel("sm90_gemm_bf16", 20, 300, 1),
          _x("cpu_op", "aten::mm", 3400, 20), _launch(3405, 2), _kernel("sm90_gemm_bf16", 3420, 300, 2)]
    d = diag(_write(tmp_path, ev))
    b = leaves(d.budget)
    assert b["idle/no_work"] == pytest.approx(4000 - 600 - 20 - 20 + 5 + 5 - 5 - 5, abs=30)
    assert max(b, key=lambda k: b[k]) == "idle/no_work"
    assert not [lv for lv in (*d.levers, *d.small_items) if "idle/no_work" in lv.draws]


def _blocked_loop(other_work: bool) -> list[dict]:
    """A 4 ms step whose launching thread, between two kernels ([30, 330) and [3520, 3820)), sits in a
    scheduler loop's recv frame [400, 3400) that waits on a queue: queue.get [410, 3390) -> threading's wait ->
    a lock's acquire, all open, none working; with ``other_work``, a second launching thread runs a 1.5 ms op
    [1000, 2500) meanwhile, whose kernel runs [2500, 2600) (numbers in µs)."""
    def py(name, ts, dur, tid=1):
        return _x("python_function", name, ts, dur, tid=tid)

    ev = [_step(0, 4000), py("scheduler.py(100): event_loop", 0, 4000),
          _x("cpu_op", "aten::mm", 10, 20), _launch(15, 1), _kernel("sm90_gemm_bf16", 30, 300, 1),
          py("scheduler.py(120): recv_requests", 400, 3000), py("queue.py(171): get", 410, 2980),
          py("threading.py(355): wait", 420, 2960),
          py("<built-in method acquire of _thread.lock object at 0x7f0123456789>", 430, 2940),
          _x("cpu_op", "aten::mm", 3500, 20), _launch(3505, 2), _kernel("sm90_gemm_bf16", 3520, 300, 2)]
    if other_work:
        ev += [_x("cpu_op", "aten::to_tensor_preprocess", 1000, 1500, tid=2), _launch(2490, 3, tid=2),
               _kernel("sm90_gemm_bf16", 2500, 100, 3)]
    return ev


@pytest.mark.parametrize("other_work", [False, True])
def test_a_thread_blocked_in_a_wait_is_no_work_not_cpu_work(tmp_path, other_work):
    # GIVEN the launching thread blocked in a queue's get for 2,980 µs (inside the loop's frames, which enclose
    # the whole step, and its recv frame)
    d = diag(_write(tmp_path, _blocked_loop(other_work)))
    b = leaves(d.budget)
    # THEN the wait is no work, as the gaps where nothing runs ([0, 10), [330, 400), [3400, 3500), [3820, 4000));
    # cpu_other is the recv frame's own 10 µs on either side of the wait, and each aten::mm's 11 µs after its
    # launch call returned (19 to 30, 3509 to 3520)
    nothing, waiting = 10 + 70 + 100 + 180, 3390 - 410
    if not other_work:
        assert b["idle/no_work"] == pytest.approx(nothing + waiting, abs=0.01)
        assert b["idle/cpu_other"] == pytest.approx(10 + 10 + 11 + 11, abs=0.01)
        assert not [lv for lv in (*d.levers, *d.small_items) if lv.kind == "cpu_work" and lv.gain_us > 20]
    else:
        # AND where another launching thread works meanwhile (its op, then its kernel: 1,600 µs of the wait),
        # that time is not the wait's; the op's time is CPU work that names it
        assert b["idle/no_work"] == pytest.approx(nothing + waiting - 1600, abs=0.01)
        top = next(lv for lv in (*d.levers, *d.small_items) if lv.kind == "cpu_work")
        assert "aten::to_tensor_preprocess" in top.evidence and top.gain_us > 1000


def test_pageable_input_copy_gives_pinned_memory_not_fusion(tmp_path):
    # GIVEN aten::to -> copy_ moving 3 ms of pageable host memory to the device, then a short kernel
    ev = [_step(0, 4000), _x("cpu_op", "aten::to", 10, 40), _x("cpu_op", "aten::copy_", 12, 30),
          _launch(15, 1, name="cudaMemcpyAsync", dur=20),
          _kernel("Memcpy HtoD (Pageable -> Device)", 30, 3000, 1, cat="gpu_memcpy"),
          _x("cpu_op", "aten::add", 3100, 20), _launch(3105, 2), _kernel("vectorized_elementwise_kernel", 3130, 50, 2)]
    d = diag(_write(tmp_path, ev))
    top = d.levers[0]
    assert top.kind == "pinned_memory" and top.ops == ("aten::to",)
    assert top.gain_us == pytest.approx(3000, abs=0.01) == leaves(d.budget)["busy/memcpy_h2d"]
    assert not [lv for lv in (*d.levers, *d.small_items) if lv.kind.startswith("fusion:")]


def test_fp32_gemm_on_a_tensor_core_device_gives_precision(tmp_path):
    # GIVEN a V100 (FP32 15.7 TFLOP/s, FP16 125) spending 5 ms in an FP32 SGEMM
    ev = [_step(0, 5200), _x("cpu_op", "aten::mm", 10, 20, **{"Input Dims": [[4096, 4096], [4096, 4096]],
                                                              "Input type": ["float", "float"]}),
          _launch(15, 1), _kernel("volta_sgemm_128x64_nn", 40, 5000, 1)]
    d = diag(_write(tmp_path, ev, device="Tesla V100-SXM2-16GB"))
    top = d.levers[0]
    assert top.kind == "precision"
    assert top.gain_us == pytest.approx(5000 * (1 - 15.7 / 125), abs=0.01)


def test_dominant_bf16_gemm_gives_the_gemm_lever(tmp_path):
    # GIVEN a device-bound step: 900 of 1000 µs in a BF16 GEMM, no shapes recorded (no roofline)
    ev = [_step(0, 1000), _x("cpu_op", "aten::mm", 0, 20), _launch(5, 1),
          _kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 30, 900, 1)]
    d = diag(_write(tmp_path, ev))
    top = d.levers[0]
    assert top.kind == "gemm" and top.confidence == "low"
    assert top.gain_us == pytest.approx(0.3 * 900, abs=0.01)


def test_exposed_collective_gives_communication(tmp_path):
    # GIVEN an all-reduce of 3 ms that no compute overlaps, after 500 µs of GEMM
    ev = [_step(0, 4000), _x("cpu_op", "aten::mm", 0, 20), _launch(5, 1), _kernel("sm90_gemm_bf16", 20, 500, 1),
          _x("cpu_op", "c10d::allreduce_", 30, 20), _launch(35, 2),
          _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 520, 3000, 2, stream=9)]
    d = diag(_write(tmp_path, ev))
    top = d.levers[0]
    assert top.kind == "communication" and top.gain_us == pytest.approx(3000, abs=0.01)


def _op(name, ts, corr, dims, types, kdur, kname):
    return [_x("cpu_op", name, ts, 8, **{"Input Dims": dims, "Input type": types}), _launch(ts + 2, corr, dur=3),
            _kernel(kname, ts + 10, kdur, corr)]


def test_eager_attention_gives_attention_kernel(tmp_path):
    # GIVEN bmm -> softmax -> bmm inside one module, the softmax taking 2 ms
    s = [[8, 16, 1024, 1024]]
    ev = [_step(0, 7000), _x("python_function", "nn.Module: Attn_0", 0, 7000)]
    ev += _op("aten::bmm", 10, 1, [[128, 1024, 64], [128, 64, 1024]], ["float", "float"], 500, "sgemm_bmm")
    ev += _op("aten::_softmax", 600, 2, [*s, [], []], ["float", "Scalar", "Scalar"], 2000, "softmax_warp_forward")
    ev += _op("aten::bmm", 2700, 3, [[128, 1024, 1024], [128, 1024, 64]], ["float", "float"], 500, "sgemm_bmm")
    d = diag(_write(tmp_path, ev, device="unknown accelerator"))
    top = next(lv for lv in d.levers if lv.kind != "cpu_work")
    assert top.kind == "attention_kernel" and top.ops[0] == "aten::bmm"
    assert top.gain_us == pytest.approx(2000, abs=0.01)


def test_eager_rmsnorm_gives_fusion_rmsnorm(tmp_path):
    # GIVEN an eager RMSNorm (pow, mean, add, rsqrt, mul, mul), each kernel 300 µs, on [4, 2048, 4096] bf16
    x, r = [4, 2048, 4096], [4, 2048, 1]
    ev = [_step(0, 2200), _x("python_function", "nn.Module: LlamaRMSNorm_0", 0, 2200)]
    chain = [("aten::pow", [x, []], ["c10::BFloat16", "Scalar"]),
             ("aten::mean", [x, [], [], []], ["c10::BFloat16", "ScalarList", "Scalar", ""]),
             ("aten::add", [r, [], []], ["c10::BFloat16", "Scalar", "Scalar"]),
             ("aten::rsqrt", [r], ["c10::BFloat16"]), ("aten::mul", [x, r], ["c10::BFloat16", "c10::BFloat16"]),
             ("aten::mul", [[4096], x], ["c10::BFloat16", "c10::BFloat16"])]
    for i, (name, dims, types) in enumerate(chain):
        ev += _op(name, 10 + 350 * i, i, dims, types, 300, "vectorized_elementwise_kernel")
    d = diag(_write(tmp_path, ev))
    top = d.levers[0]
    assert top.kind == "fusion:rmsnorm"
    assert 0 < top.gain_us <= 6 * 300


def test_cpu_rmsnorm_fusion_is_an_upper_bound_with_low_confidence(tmp_path):
    # GIVEN the same eager RMSNorm chain on a CPU-only trace: each op 300 µs of CPU, no device at all
    x, r = [4, 2048, 4096], [4, 2048, 1]
    ev = [_step(0, 2200), _x("python_function", "nn.Module: LlamaRMSNorm_0", 0, 2200)]
    chain = [("aten::pow", [x, []], ["float", "Scalar"]),
             ("aten::mean", [x, [], [], []], ["float", "ScalarList", "Scalar", ""]),
             ("aten::add", [r, [], []], ["float", "Scalar", "Scalar"]), ("aten::rsqrt", [r], ["float"]),
             ("aten::mul", [x, r], ["float", "float"]), ("aten::mul", [[4096], x], ["float", "float"])]
    for i, (name, dims, types) in enumerate(chain):
        ev.append(_x("cpu_op", name, 10 + 350 * i, 300, **{"Input Dims": dims, "Input type": types}))
    p = tmp_path / "cpu.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    d = diag(p)
    # THEN the fusion lever is there, bounded by its ops' time, but claimed with low confidence and said to
    # be an upper bound (a CPU's chain is seldom memory-bound, so the byte model overstates it)
    lever = next(lv for lv in d.levers + d.small_items if lv.kind == "fusion:rmsnorm")
    assert 0 < lever.gain_us <= 6 * 300
    assert lever.confidence == "low" and "upper bound on a CPU" in lever.evidence


def test_launches_without_device_events_give_no_device_data(tmp_path):
    # GIVEN launches whose kernels were not recorded
    ev = [_step(0, 1000), _x("cpu_op", "aten::mm", 10, 20), _launch(15, 1), _x("cpu_op", "aten::mm", 50, 20),
          _launch(55, 2)]
    d = diag(_write(tmp_path, ev))
    assert not d.device and leaves(d.budget) == {"idle/not_recorded": 1000.0}
    assert [lv.kind for lv in d.levers] == ["no_device_data"] and d.levers[0].gain_us == 0
    assert "ProfilerActivity.CUDA" in d.levers[0].how


def test_a_counter_capture_is_told_apart_from_activity_not_recorded():
    # GIVEN the A100 trace captured with CUPTI's range profiler (profiler_metrics): launches, no kernel events,
    # and one cuda_profiler_range event of counters per profiled kernel
    from profuse.analysis.health import trace_health

    path = trace_path("a100_cupti_counters.json.gz")
    ranges = sum(1 for e in oracle.complete_events(path) if e.get("cat") == "cuda_profiler_range")
    assert ranges > 50
    with profuse.load(path) as t:
        d, h = diagnose(t), trace_health(t)
    # THEN the lever and the health finding name the counter capture (with the raw JSON's count) and advise
    # capturing again without the metrics for timing, not checking who holds CUPTI
    [lv] = d.levers
    assert lv.kind == "no_device_data" and f"{ranges} cuda_profiler_range event(s)" in lv.evidence
    assert "range profiler" in lv.evidence and "without profiler_metrics" in lv.how and "holds CUPTI" not in lv.how
    [f] = [f for f in h.findings if f.key == "no_device_activity"]
    assert f"{ranges} cuda_profiler_range" in f.text and "without profiler_metrics" in f.fix


def test_warmup_first_step_is_reported_apart(tmp_path):
    # GIVEN a first step of 10 ms (compilation) and three of 1 ms
    ev = []
    for i, dur in enumerate((10000, 1000, 1000, 1000)):
        t = i * 20000
        ev += [_step(t, dur, n=i + 1), _x("cpu_op", "aten::mm", t, 20), _launch(t + 5, i),
               _kernel("sm90_gemm_bf16", t + 20, dur - 100, i)]
    d = diag(_write(tmp_path, ev))
    assert [s.warmup for s in d.steps] == [True, False, False, False]
    assert d.span_us == pytest.approx(3000, abs=0.01)


def test_cpu_only_trace_gets_a_cpu_budget_and_no_device_claim():
    path = SHARED / "traces" / "cpu_only_gloo_rank34.json.gz"
    d = diag(path)
    assert not d.device
    keys = set(leaves(d.budget))
    assert keys <= {f"cpu/{c}" for c in ("gemm", "attention", "conv", "norm", "elementwise", "reduction",
                                         "communication", "other", "python")} | {"idle"}
    assert not any(k.startswith(("busy/", "idle/")) for k in keys)
    assert not [lv for lv in d.levers if any(k.startswith(("busy/", "idle/")) for k in lv.draws)]
    # the step thread waits on gloo's all-reduce threads: communication, by the oracle's own reading
    events = oracle.exact_events(str(path))
    (step,) = oracle.step_annotations(path)
    lo, hi = step["ts"], step["ts"] + step["dur"]
    gloo = oracle.union_us([(max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in events
                            if "all_reduce" in e["name"] and e["ts"] < hi and e["ts"] + e["dur"] > lo])
    assert leaves(d.budget)["cpu/communication"] == pytest.approx(float(gloo), abs=TOL_US)


# --- shared traces with an injected blocking call -----------------------------------------------------

def _inject(src: Path, out: Path, make) -> Path:
    """A copy of a shared trace with events from ``make(doc)`` added (the original is never edited)."""
    with gzip.open(src) as fh:
        doc = json.load(fh)
    doc["traceEvents"] += make(doc)
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("call", ["cudaStreamSynchronize", "cudaMemcpy"])
def test_injected_blocking_call_shows_as_host_sync_with_its_time_and_site(tmp_path, call):
    # GIVEN h100_bert_small with the host blocked 20 ms in `call` (under aten::item) before the step
    # ends, the device idle meanwhile: the step is extended by 20 ms from its last activity
    src = SHARED / "traces" / "h100_bert_small.json.gz"
    blocked = 20000.0

    def make(doc):
        ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        step = next(e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#"))
        dev_end = max(e["ts"] + e["dur"] for e in ev if oracle.is_device_time(e))
        t0 = max(step["ts"] + step["dur"], dev_end) + 10
        step["dur"] = t0 + blocked + 20 - step["ts"]
        pid, tid = step["pid"], step["tid"]
        return [{"ph": "X", "cat": "cpu_op", "name": "aten::item", "pid": pid, "tid": tid, "ts": t0,
                 "dur": blocked + 10, "args": {}},
                {"ph": "X", "cat": "cuda_runtime", "name": call, "pid": pid, "tid": tid, "ts": t0 + 5,
                 "dur": blocked, "args": {"correlation": 99999991}}]

    d = diag(_inject(src, tmp_path / "sync.json", make))
    site = [lv for lv in d.levers if lv.kind == "host_sync" and call in lv.target]
    assert site and "aten::item" in site[0].target
    assert site[0].gain_us == pytest.approx(blocked, abs=TOL_US)
    assert d.levers[0] is site[0]


def test_diff_compares_the_two_budgets(capsys):
    from profuse.cli import main

    a, b = (SHARED / "traces" / f"compare_{n}.json.gz" for n in ("base", "test"))
    assert main(["diff", str(a), str(b), "--format", "json"]) == 0
    bd = json.loads(capsys.readouterr().out)["budget"]
    # THEN each side's span is the oracle's steady span, and each row is B's leaf minus A's
    for side, path in (("a", a), ("b", b)):
        assert bd[f"{side}_span_us"] == pytest.approx(sum(hi - lo for _n, lo, hi, _b in oracle.steady_spans(path)),
                                                      abs=TOL_US)
    da, db = leaves(diag(a).budget), leaves(diag(b).budget)
    assert {r["key"] for r in bd["rows"]} == set(da) | set(db)
    for r in bd["rows"]:
        assert r["delta_us"] == pytest.approx(db.get(r["key"], 0) - da.get(r["key"], 0), abs=1e-3)
    assert main(["diff", str(a), str(b)]) == 0
    assert "Budget (steps" in capsys.readouterr().out


def test_every_class_cause_and_lever_kind_is_documented():
    from conftest import REPO

    from profuse.analysis.diagnosis.budget import BUSY_PRIORITY, IDLE_CAUSES
    from profuse.analysis.diagnosis.cpu_budget import CPU_LEAVES
    from profuse.analysis.diagnosis.levers import HOW, SLUG

    doc = (REPO / "docs" / "advisor.md").read_text().split("## Diagnosis", 1)[1].split("\n## ", 1)[0]
    kinds = {"cuda_graphs", "graph_launch", "stream_wait", "unrecorded_wait", "host_sync", "cpu_work", "pinned_memory",
             "input_pipeline", "cpu_fallback",
             "precision", "gemm", "memory_bound", "communication", "attention_kernel", "no_device_data"} | {
                 "fusion:<pattern>"} | set(SLUG.values())
    # host_sync's, cpu_work's and cuda_graphs' texts
    variants = {"sync_copy", "sync_wait", "cpu_work_model", "cpu_work_runtime", "cpu_work_blocked", "graphs_outside",
                "elementwise_loop"}
    assert set(HOW) - variants <= kinds
    for word in (*BUSY_PRIORITY, *IDLE_CAUSES, "not_recorded", "unrecorded/wait", *kinds, *CPU_LEAVES):
        assert f"`{word}`" in doc, word
    assert ", ".join(BUSY_PRIORITY) in doc.replace("\n", " ").replace("`", "")


def test_cpu_work_inside_runtime_calls_says_warm_up_and_names_the_calls(capsys):
    # GIVEN a100_alexnet: no steps, and a host that sat in runtime calls before its first kernels (the raw
    # JSON's longest runtime call is CUDA's context set-up, cudaDeviceGetStreamPriorityRange)
    raw = json.load(gzip.open(trace_path("a100_alexnet.json.gz")))["traceEvents"]
    longest = max((e for e in raw if e.get("cat") == "cuda_runtime"), key=lambda e: e.get("dur", 0))
    assert longest["name"] == "cudaDeviceGetStreamPriorityRange"
    # WHEN it is diagnosed THEN the top lever is cpu_work naming that call, with warm-up advice, not DataLoader
    from profuse.cli import main

    assert main(["report", str(trace_path("a100_alexnet.json.gz")), "--format", "json"]) == 0
    top = json.loads(capsys.readouterr().out)["diagnosis"]["levers"][0]
    assert top["kind"] == "cpu_work"
    assert "inside runtime calls that neither launch nor synchronise: cudaDeviceGetStreamPriorityRange" in top["evidence"]
    assert "warm-up" in top["how"] and "DataLoader" not in top["how"]


@pytest.mark.parametrize(("name", "first_advice"), [("legacy_capitalized_categories.json.gz", "blocked"),
                                                    ("mi300_normalization_layers.json.gz", "blocked"),
                                                    ("a100_alexnet.json.gz", "runtime")])
def test_cpu_work_in_a_blocked_launch_says_so_and_advises_a_warm_up(name, first_advice):
    # GIVEN traces whose host sat in kernel launch calls over 1 ms while the device idled (the raw JSON: a first
    # 1.41 ms cudaLaunchKernel; 10 hipLaunchKernel/hipExtModuleLaunchKernel calls up to 331.6 ms; a 3.06 s
    # cudaLaunchKernel beside 39 s of CUDA context set-up and allocation): no launch work by the 1 ms rule
    calls, idle_us = oracle.blocked_launches(trace_path(name))
    assert calls and idle_us > 1000
    from profuse.units import fmt_us

    d = diag(trace_path(name))
    work = next(lv for lv in (*d.levers, *d.small_items) if lv.kind == "cpu_work")
    # THEN cpu_work says that time sits in that many launch calls over 1 ms, blocked ones, as long as the raw JSON
    # has it, and never calls them runtime calls that neither launch nor synchronise
    plural = "" if calls == 1 else "s"
    assert (f"{fmt_us(idle_us)} of it in {calls} launch call{plural} over 1 ms (" in work.evidence
            and "a blocked launch, such as a module's first load or a full launch queue" in work.evidence), work.evidence
    assert "outside launches" not in work.evidence
    named = work.evidence.partition("neither launch nor synchronise: ")[2]
    assert "LaunchKernel" not in named
    # AND its advice for them is a warm-up (each kernel once) or eager module loading, after the advice for
    # the calls that neither launch nor synchronise where those hold more of the time (alexnet's context set-up)
    blocked = work.how.index("CUDA_MODULE_LOADING=EAGER")
    assert "run each kernel once first" in work.how and "full launch queue" in work.how
    runtime = work.how.find("neither launch nor synchronise")
    assert (runtime == -1 or blocked < runtime) if first_advice == "blocked" else 0 <= runtime < blocked


def test_a_step_waiting_on_its_dataloader_gives_input_pipeline(tmp_path):
    # GIVEN a step that waits 8 ms in the DataLoader's __next__ (the main thread blocked on the workers'
    # queue: a Python frame inside it), then copies the batch and runs a 1 ms GEMM
    ev = [_step(0, 10000), _x("user_annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 10, 8000),
          _x("python_function", "torch/utils/data/dataloader.py(1285): _get_data", 20, 7980),
          _x("cpu_op", "aten::mm", 8100, 20), _launch(8105, 1), _kernel("sm90_gemm_bf16", 8120, 1000, 1)]
    path = _write(tmp_path, ev)
    d = diag(path)
    b = leaves(d.budget)
    # THEN the wait is idle/input (not cpu_other, not "nothing ran"), and its lever leads with the DataLoader advice
    assert b["idle/input"] == pytest.approx(oracle.input_wait_us(path), abs=0.01) == pytest.approx(8000, abs=0.01)
    assert b["idle/no_work"] == pytest.approx(10 + 90 + 880, abs=0.01)  # before, between and after: nothing held
    top = d.levers[0]
    assert top.kind == "input_pipeline" and top.grade == "measured" and top.confidence == "high"
    assert top.gain_us == pytest.approx(8000, abs=0.01) and top.draws == ("idle/input",)
    assert "num_workers" in top.how and "next batch" in top.evidence
    assert not [lv for lv in (*d.levers, *d.small_items) if lv.kind == "cpu_work" and lv.gain_us > 100]


@pytest.mark.parametrize("launches", [True, False])
def test_an_optimizer_loop_of_in_place_ops_is_told_foreach_or_fused(tmp_path, launches):
    # GIVEN an optimizer step: 150 in-place elementwise ops (mul_, add_, addcmul_) of 30 µs host time each,
    # each launching a 2 µs kernel (launches) or computing on the host between a first and last kernel
    ev = [_step(0, 6000), _x("user_annotation", "Optimizer.step#AdamW.step", 5, 5000),
          _x("cpu_op", "aten::mm", 1, 3), _launch(2, 999, dur=1), _kernel("sm90_gemm_bf16", 4, 2, 999)]
    for i in range(150):
        t = 10 + 32 * i
        ev.append(_x("cpu_op", ("aten::mul_", "aten::add_", "aten::addcmul_")[i % 3], t, 30))
        if launches:
            ev += [_launch(t + 25, i + 1), _kernel("vectorized_elementwise_kernel", t + 30, 2, i + 1)]
    if not launches:
        ev += [_x("cpu_op", "aten::add", 5000, 5), _launch(5001, 1000), _kernel("vectorized_elementwise_kernel",
                                                                                   5010, 2, 1000)]
    d = diag(_write(tmp_path, ev))
    # THEN the lever that takes the host time (cuda_graphs where the ops launch, else cpu_work) advises a
    # foreach/fused optimizer, torch.compile or a graph, and not DataLoader workers
    lever = d.levers[0]
    assert lever.kind == ("cuda_graphs" if launches else "cpu_work"), [lv.kind for lv in d.levers]
    assert lever.grade == "measured" and lever.gain_us <= sum(lf.us for lf in d.budget if lf.key in lever.draws)
    assert "fused=True" in lever.how and "foreach" in lever.how and "torch.compile" in lever.how
    assert not lever.how.startswith("overlap the CPU work")


def test_an_event_loop_waiting_in_epoll_is_idle_not_python(tmp_path):
    # GIVEN a CPU-only step: an asyncio loop that sits 23.85 ms in epoll, then 1 ms of ops
    ev = [_step(0, 25000), _x("python_function", "asyncio/base_events.py(603): run_forever", 10, 24900),
          _x("python_function", "selectors.py(469): select", 50, 23860),
          _x("python_function", "<built-in method poll of select.epoll object at 0x7f00>", 55, 23850),
          _x("cpu_op", "aten::mm", 24000, 1000)]
    path = _write(tmp_path, ev)
    d = diag(path)
    b = leaves(d.budget)
    # THEN the wait is idle/wait, apart from the Python that worked and the op
    assert not d.device and b["idle/wait"] == pytest.approx(oracle.waiting_frame_us(path), abs=0.01)
    assert b["idle/wait"] == pytest.approx(23860, abs=0.01)
    assert b["cpu/gemm"] == pytest.approx(1000, abs=0.01)
    assert b["cpu/python"] == pytest.approx(40 + 90, abs=0.01)  # [10, 50) and [23910, 24000)


def test_a_call_site_is_inside_the_step_never_the_step_op(tmp_path):
    # GIVEN an older trace where the step is recorded as an op (cpu_op ProfilerStep#5) around .item()'s
    # blocking copy
    ev = [_x("cpu_op", "ProfilerStep#5", 0, 6000), _x("cpu_op", "aten::mm", 10, 20), _launch(15, 1),
          _kernel("sm90_gemm_bf16", 30, 100, 1),
          _x("cpu_op", "aten::item", 200, 5200), _x("cpu_op", "aten::_local_scalar_dense", 205, 5190),
          _launch(210, 2, dur=5100, name="cudaMemcpyAsync"),
          _kernel("Memcpy DtoH (Device -> Pageable)", 5300, 2, 2, cat="gpu_memcpy")]
    d = diag(_write(tmp_path, ev))
    sync = next(lv for lv in d.levers if lv.kind == "host_sync")
    # THEN the site is the op the code called inside the step, not the step
    assert "in aten::item" in sync.target and "ProfilerStep" not in sync.target
    assert sync.ops == ("aten::item",)


def test_a_blocking_copy_through_a_busy_device_is_named_by_the_refill_after_it(tmp_path):
    # GIVEN a 10 ms GEMM queued at 5, then .item(): a pageable DtoH copy whose call blocks 9.95 ms while the
    # GEMM runs (its copy at 10010-10012), then 8 small ops launching kernels one by one (launch-bound refill)
    ev = [_step(0, 11000), _x("cpu_op", "aten::mm", 1, 8), _launch(4, 1, dur=2), _kernel("sm90_gemm_bf16", 10, 10000, 1),
          _x("cpu_op", "aten::item", 100, 9960), _launch(105, 2, dur=9950, name="cudaMemcpyAsync"),
          _kernel("Memcpy DtoH (Device -> Pageable)", 10010, 2, 2, cat="gpu_memcpy")]
    for i in range(8):
        t = 10060 + 30 * i
        ev += [_x("cpu_op", "aten::add", t, 20), _launch(t + 12, 10 + i, dur=6),
               _kernel("vectorized_elementwise_kernel", t + 20, 3, 10 + i)]
    d = diag(_write(tmp_path, ev))
    b = leaves(d.budget)
    # THEN the call is not host_sync idle (the device ran through it, idle only its last 43 µs), and a host_sync
    # lever graded inferred names it by the launch overhead of the refill that followed, its advice the copy's
    drained = [lv for lv in (*d.levers, *d.small_items) if lv.kind == "host_sync" and lv.grade == "inferred"]
    assert len(drained) == 1 and "cudaMemcpyAsync in aten::item" in drained[0].target
    lv = drained[0]
    assert lv.draws == ("idle/launch_overhead",) and 0 < lv.gain_us <= b["idle/launch_overhead"]
    assert "still ran queued work" in lv.evidence and "9.95 ms" in lv.evidence and "non_blocking" in lv.how
    # the first refill launch: from aten::add's start (10060) to its launch call's end (10078), all idle, as the
    # raw JSON counts it
    assert lv.gain_us == pytest.approx(oracle.refill_launch_us(tmp_path / "t.json", "cudaMemcpyAsync"), abs=0.01)
    assert lv.gain_us == pytest.approx(10078 - 10060, abs=0.01)
    # and the interruptions' Launch CPU leaves the 9.95 ms block out (it counts the launch calls up to 1 ms)
    from profuse.analysis.advice.interruptions import interruptions
    with profuse.load(tmp_path / "t.json") as t:
        step = next(r for r in interruptions(t) if r.scope.startswith("ProfilerStep"))
    assert step.launch_us == pytest.approx(2 + 8 * 6, abs=0.01)


@pytest.mark.parametrize("name", ["mi300_sglang_decode_cudagraph.json.gz", "h100_bert_small.json.gz"])
def test_each_levers_share_says_what_it_is_of(name, capsys):
    # GIVEN sglang's step, 98% of it a wait the trace cannot show (its device window 10.58 ms of a 473.83 ms
    # span), and BERT's steps, with none
    with profuse.load(trace_path(name)) as t:
        d = diagnose(t)
    # THEN where the window and the span differ, every lever says which its % is of, and the % is of that
    for lv in (*d.levers, *d.small_items):
        if d.window_us < d.span_us:
            assert lv.share_of == ("the span" if "unrecorded/wait" in lv.draws else "the device window")
        else:
            assert lv.share_of == ""
        base = d.span_us if lv.share_of == "the span" else d.window_us
        assert lv.share_pct == pytest.approx(100 * lv.gain_us / base, abs=0.01)
    # AND the console says it beside the %
    from profuse.cli import main

    assert main(["report", str(trace_path(name)), "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert ("% of the span)" in out and "% of the device window)" in out) == (d.window_us < d.span_us)
