"""One step model (analysis/steps.py) read by every consumer: the diagnosis, the step table, diff's
samples, the per-step statistics and the explorer's run summary. Checked on every real trace and
fixture, and on hand-built traces with overlapping steps, both vLLM step-name forms and no steps;
expected figures come from tests/oracle.py (plain JSON, the rules written out again)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import oracle
import pytest
from conftest import ALL_TRACES, trace_id, trace_path

import profuse
from profuse.analysis.compare.diff import diff
from profuse.analysis.compare.step_samples import samples, step_count
from profuse.analysis.diagnosis import diagnose
from profuse.analysis.health import trace_health
from profuse.analysis.step_stats import step_stats
from profuse.analysis.steps import parse_step, step_model, steps_busy
from profuse.cli import main
from profuse.payloads.build import compare_of

TOL_US = 0.002
# an upper bound on collective kernels: any kernel whose name says it is one (broader than profuse's rule)
_COLLECTIVE = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|sendrecv",
                         re.IGNORECASE)


def _trace_window_us(path: Path) -> float:
    events = oracle.exact_events(str(path))
    return float(max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events))


# an upper bound on GEMM/conv kernels, FP32 or not: any kernel whose name says matrix work
_MATRIX = re.compile(r"gemm|conv|cutlass|cublas|cudnn|xmma|nvjet|cijk_|matmul|_mm_|mm_kernel|fprop|dgrad|wgrad|fc-",
                     re.IGNORECASE)


def _matrix_us(path: Path) -> float:
    return float(sum(e["dur"] for e in oracle.exact_events(str(path))
                     if oracle.is_device_time(e) and _MATRIX.search(str(e.get("name", "")))))


def _idle_us(path: Path) -> float:
    """The trace's window less the union of its device activity: more than any idle a lever can draw."""
    device = [(e["ts"], e["ts"] + e["dur"]) for e in oracle.exact_events(str(path)) if oracle.is_device_time(e)]
    return _trace_window_us(path) - float(oracle.union_us(device))


def _collectives_us(path: Path) -> float:
    return float(oracle.union_us([(e["ts"], e["ts"] + e["dur"]) for e in oracle.exact_events(str(path))
                                  if oracle.is_device_time(e) and _COLLECTIVE.search(str(e.get("name", "")))]))


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_every_consumer_reads_the_same_steps_and_none_spans_past_the_trace(path: Path) -> None:
    expected = [str(e["name"]) for e in oracle.step_annotations(path)]
    window = _trace_window_us(path)
    with profuse.load(path) as t:
        model = step_model(t)
        d = diagnose(t)
        table = steps_busy(t)
        n_diff = step_count(t)
        step_samples = samples(t, "step")
        stats = step_stats(t)
    names = [s.name for s in model.steps]
    # THEN the model's steps are the oracle's outermost step annotations, and every consumer lists them
    assert names == expected
    assert [s.name for s in table] == names
    assert n_diff == len(names) and stats.steps == max(len(names), 1)
    assert len(step_samples) == max(len(names), 1)
    if d.scope == "steps":
        assert [s.name for s in d.steps] == names
    # the spans never overlap, and neither they nor the diagnosis add up past the trace
    spans = list(model.spans)
    assert all(lo <= hi for lo, hi in spans)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert sum(hi - lo for lo, hi in spans) / 1e3 <= window + TOL_US
    assert d.span_us <= window + TOL_US
    assert sum(s.span_us for s in d.steps) <= window + TOL_US * max(len(d.steps), 1)
    assert sum(step_samples) <= window + TOL_US * len(step_samples)
    # every lever is bounded by the steady span, and a communication lever by the collectives the trace holds
    for lv in (*d.levers, *d.small_items):
        assert lv.gain_us <= d.span_us + TOL_US
        if lv.kind == "communication":
            assert lv.gain_us <= _collectives_us(path) + TOL_US, lv
        if lv.kind in ("precision", "gemm"):
            assert lv.gain_us <= _matrix_us(path) + TOL_US, lv
        if d.device and lv.draws and all(k.startswith("idle/") for k in lv.draws):
            assert lv.gain_us <= _idle_us(path) + TOL_US, lv


def _x(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args: object) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _write(tmp_path: Path, events: list[dict[str, object]], name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}))
    return p


def _launched_step(name: str, ts: float, host: float, kernel_at: float, kernel: float, corr: int) -> list[dict[str, object]]:
    """A step annotation of ``host`` µs holding one op that launches one kernel (stream 7)."""
    return [_x("user_annotation", name, ts, host), _x("cpu_op", "aten::mm", ts + 1, host - 2),
            _x("cuda_runtime", "cudaLaunchKernel", ts + 2, 4, correlation=corr),
            _x("kernel", "ampere_sgemm_128x64_nn", kernel_at, kernel, pid=0, tid=7, correlation=corr, stream=7,
               device=0)]


def test_steps_whose_device_work_lags_the_host_hold_the_union_once(tmp_path: Path) -> None:
    # GIVEN three 100 µs host steps, each launching a 400 µs kernel that runs after the previous one: the device
    # lags, so each step's own interval (start to its last kernel's end) overlaps the next ones
    ev: list[dict[str, object]] = []
    for i in range(3):
        ev += _launched_step(f"ProfilerStep#{i + 1}", i * 100, 100, 20 + i * 400, 400, i + 1)
    path = _write(tmp_path, ev)
    with profuse.load(path) as t:
        d = diagnose(t)
        model = step_model(t)
        table = steps_busy(t)
        step_samples = samples(t, "step")
    # THEN each step holds its part of the union (0-420, 420-820, 820-1220 µs): 1,220 µs in all, the trace's
    # span, where the per-step intervals summed to 2,160 µs
    assert [(lo / 1e3, hi / 1e3) for lo, hi in model.spans] == [(0, 420), (420, 820), (820, 1220)]
    expected = oracle.step_spans(path)
    assert [(n, lo, hi) for n, lo, hi, _b in expected] == [
        (s.name, lo / 1e3, hi / 1e3) for s, (lo, hi) in zip(model.steps, model.spans)]
    assert d.span_us == pytest.approx(sum(hi - lo for _n, lo, hi, _b in oracle.steady_spans(path)), abs=TOL_US)
    assert sum(s.span_us for s in d.steps) == pytest.approx(1220, abs=TOL_US)
    assert step_samples == pytest.approx([420, 400, 400], abs=TOL_US)
    # the step table still gives each step the busy time of the kernel it launched
    assert [round(s.busy_us) for s in table] == [400, 400, 400]


def test_both_vllm_step_name_forms_are_steps() -> None:
    s = parse_step("execute_context_1(888)_generation_0(0)")
    assert s is not None and (s.engine, s.phase, s.batch, s.tokens) == ("vllm", "prefill", 1, 888)
    s = parse_step("execute_context_0(0)_generation_4(4)")
    assert s is not None and (s.engine, s.phase, s.batch, s.tokens) == ("vllm", "decode", 4, 4)
    s = parse_step("execute_context_1(888_788544)_generation_0(0)")   # counts not one integer: tokens unknown
    assert s is not None and (s.phase, s.batch, s.tokens) == ("prefill", 1, None)
    s = parse_step("execute_300_context_1(sq200)_generation_100(sq1)")
    assert s is not None and (s.phase, s.batch, s.tokens) == ("mixed", 101, 300)


def test_vllm_steps_without_token_prefix_are_read_by_every_consumer(tmp_path: Path) -> None:
    # GIVEN a vLLM trace whose steps are named in the execute_context_N(...)_generation_M(...) form: a prefill
    # step, then two decode steps, and a device-side copy of one name (not a step)
    names = ["execute_context_1(888_788544)_generation_0(0)", "execute_context_0(0)_generation_4(4)",
             "execute_context_0(0)_generation_4(4)"]
    ev: list[dict[str, object]] = []
    for i, name in enumerate(names):
        ev += _launched_step(name, i * 1000, 300, i * 1000 + 10, 200, i + 1)
    ev.append(_x("gpu_user_annotation", names[1], 1000, 300, pid=0, tid=7))
    a = _write(tmp_path, ev, "a.json")
    with profuse.load(a) as t:
        d = diagnose(t)
        table = steps_busy(t)
        n = step_count(t)
    # THEN the diagnosis, the step table and diff's samples all find the three steps, with their phases
    assert d.scope == "steps" and [s.name for s in d.steps] == names
    assert [s.phase for s in d.steps] == ["prefill", "decode", "decode"]
    assert [s.batch for s in d.steps] == [1, 4, 4]
    assert [s.name for s in table] == names and n == 3
    # and the explorer's compare view (diff's run summary) counts the same steps on both sides
    with profuse.load(a) as ta, profuse.load(a) as tb:
        payload = compare_of(ta, tb)
        doc = diff(ta, tb)
    assert payload.sides["a"].steps == payload.sides["b"].steps == 3 and doc.a.steps == 3


def test_a_trace_without_steps_is_its_active_window_not_the_profiler_envelope(tmp_path: Path) -> None:
    # GIVEN a profiler envelope of 10 ms around 1 ms of work: an op launching a kernel, 4.0-5.0 ms in
    ev = [_x("Trace", "PyTorch Profiler (0)", 0, 10_000),
          _x("python_function", "<module>", 0, 10_000),
          _x("cpu_op", "aten::mm", 4000, 900), _x("cuda_runtime", "cudaLaunchKernel", 4100, 10, correlation=1),
          _x("kernel", "ampere_sgemm_128x64_nn", 4200, 800, pid=0, tid=7, correlation=1, stream=7, device=0)]
    path = _write(tmp_path, ev)
    with profuse.load(path) as t:
        d = diagnose(t)
        model = step_model(t)
    # THEN the one span is the model's work (4.0-5.0 ms), the oracle's active window, not the envelope's 10 ms
    (_n, lo, hi, busy), = oracle.step_spans(path)
    assert (lo, hi) == (4000, 5000)
    assert d.scope == "trace" and d.span_us == pytest.approx(hi - lo, abs=TOL_US)
    assert model.window == (4_000_000, 5_000_000)
    assert sum(lf.us for lf in d.budget if lf.key.startswith("busy/")) == pytest.approx(busy, abs=TOL_US)


def test_the_memory_tables_name_a_serving_step_by_the_same_rule(tmp_path: Path) -> None:
    # GIVEN a vLLM step holding an sglang-style step annotation (it describes the vLLM step, not a step of its
    # own) and an op that allocates inside both
    ev = [_x("user_annotation", "execute_context_0(0)_generation_4(4)", 0, 100),
          _x("user_annotation", "step[DECODE bs=4]", 5, 90), _x("cpu_op", "aten::empty", 10, 5),
          {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 12,
           "args": {"Device Type": 0, "Device Id": -1, "Addr": 4096, "Bytes": 64, "Total Allocated": 64,
                    "Total Reserved": 0}}]
    path = _write(tmp_path, ev)
    with profuse.load(path) as t:
        rows = t.con.execute("SELECT s.name FROM memory m JOIN events s ON s.id = m.step").fetchall()
        steps = [s.name for s in step_model(t).steps]
    # THEN the allocation's step is the outer vLLM step, the one step the step model finds
    assert rows == [("execute_context_0(0)_generation_4(4)",)] and steps == [rows[0][0]]


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_no_lever_whose_cause_is_outside_the_trace_ranks_above_one_it_shows(path: Path) -> None:
    with profuse.load(path) as t:
        d = diagnose(t)
    grades = [lv.grade for lv in d.levers]
    assert set(grades) <= {"measured", "inferred", "outside the trace"}
    outside = [i for i, g in enumerate(grades) if g == "outside the trace"]
    assert all(i > j for i in outside for j, g in enumerate(grades) if g != "outside the trace"), grades
    for lv in (*d.levers, *d.small_items):
        assert (lv.grade == "outside the trace") == (lv.kind in ("stream_wait", "unrecorded_wait")), lv.kind
        drained = lv.kind == "host_sync" and "still ran queued work" in lv.evidence   # a model of the cause
        inferred = lv.kind in ("precision", "gemm", "memory_bound") or lv.kind.startswith("fusion:") or drained
        assert (lv.grade == "inferred") == inferred


def test_speculative_decoding_steps_are_draft_and_verify_with_their_counts(tmp_path: Path) -> None:
    # GIVEN sglang's speculative decoding: draft (DRAFT_EXTEND) and verify (TARGET_VERIFY) steps alternating,
    # and a vLLM decode step whose statistics name its KV tokens (sk)
    assert parse_step("step[TARGET_VERIFY bs=8]").phase == "verify"
    s = parse_step("step[DRAFT_EXTEND bs=8 toks=32]")
    assert (s.phase, s.batch, s.tokens) == ("draft", 8, 32)
    v = parse_step("execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk32785sqsq32sqsk32785)")
    assert (v.phase, v.batch, v.tokens, v.kv_tokens) == ("decode", 32, 32, 0 + 32785)
    v = parse_step("execute_context_2(sq300sk300sqsq45000sqsk45000)_generation_6(sq6sk4096sqsq6sqsk4096)")
    assert (v.phase, v.batch, v.tokens, v.kv_tokens) == ("mixed", 8, 306, 300 + 4096)
    ev = []
    for i in range(4):
        t = 1000 * i
        name = "step[DRAFT_EXTEND bs=8 toks=32]" if i % 2 == 0 else "step[TARGET_VERIFY bs=8 toks=40]"
        ev += [{"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": t, "dur": 900, "args": {}},
               {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 10, "dur": 20, "args": {}},
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 15,
                "dur": 5, "args": {"correlation": i + 1}},
               {"ph": "X", "cat": "kernel", "name": "sm90_gemm_bf16", "pid": 0, "tid": 7, "ts": t + 25, "dur": 400,
                "args": {"correlation": i + 1, "stream": 7, "device": 0}}]
    p = tmp_path / "spec.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    with profuse.load(p, cache=False) as t:
        d = diagnose(t)
    # THEN the diagnosis groups them as draft x2 and verify x2, with batch and tokens per step
    from profuse.payloads.diagnosis import diagnosis_payload
    groups = {g.kind: g for g in diagnosis_payload(d).groups}
    assert {k: g.count for k, g in groups.items()} == oracle.serving_steps(p) == {"draft": 2, "verify": 2}
    assert (groups["draft"].batch, groups["draft"].tokens) == (8, 32)
    assert (groups["verify"].batch, groups["verify"].tokens, groups["verify"].kv_tokens) == (8, 40, None)


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_no_lever_gains_more_than_its_caps_allow(path: Path) -> None:
    # each lever takes from each leaf it draws at most its cap there (none named: the whole leaf)
    with profuse.load(path) as t:
        d = diagnose(t)
    have = {lf.key: lf.us for lf in d.budget}
    for lv in (*d.levers, *d.small_items):
        bound = sum(min(have.get(k, 0.0), lv.caps[i]) if i < len(lv.caps) else have.get(k, 0.0)
                    for i, k in enumerate(lv.draws))
        assert 0 <= lv.gain_us <= bound + 1e-3, (lv.kind, lv.target, lv.gain_us, bound)


def test_a_cpu_step_counts_the_collective_annotations_its_budget_counts():
    # GIVEN gloo's CPU-only trace: one step whose thread runs nothing while two gloo threads run
    # gloo:all_reduce annotations (no op of their own)
    from conftest import trace_path

    path = trace_path("cpu_only_gloo_rank34.json.gz")
    events = oracle.complete_events(path)
    [step] = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    lo, hi = step["ts"], step["ts"] + step["dur"]
    work = [(max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in events
            if oracle.category(e) in oracle.OP_CATS and e is not step and lo <= e["ts"] < hi]
    want_pct = 100.0 * oracle.union_us(work) / step["dur"]
    assert want_pct > 80
    with profuse.load(path) as t:
        [s] = steps_busy(t)
        d = diagnose(t)
    # THEN the step's "in ops" share is the raw JSON's union of that work, as the budget's cpu share says
    assert s.busy_pct == pytest.approx(want_pct, abs=0.01)
    cpu = sum(leaf.pct for leaf in d.budget if leaf.key.startswith("cpu/"))
    assert s.busy_pct == pytest.approx(cpu, abs=0.5)


def _busy_leaves_us(budget: tuple[object, ...]) -> float:
    return sum(lf.us for lf in budget if lf.key.startswith("busy/"))  # type: ignore[attr-defined]


def test_a_first_step_that_alone_holds_the_device_work_is_no_warm_up() -> None:
    # GIVEN a real ROCm training trace: ProfilerStep#1 (9.29 ms) holds all 16 device activities and every launch,
    # ProfilerStep#2 (49 µs) none; the first is over 3x the median of the others, but they hold no device work
    path = trace_path("mi250_rocm_toy_train.json.gz")
    spans = oracle.step_spans(path)
    (_a, lo1, hi1, busy1), (_b, lo2, hi2, busy2) = spans
    assert hi1 - lo1 > 3 * (hi2 - lo2) and busy1 > 0 and busy2 == 0
    steady = oracle.steady_spans(path)
    assert steady == spans   # the oracle keeps it: dropping it would leave no device work to read
    with profuse.load(path) as t:
        d = diagnose(t)
    # THEN no step is a warm-up: the budget is both steps', and holds the device work the trace recorded
    assert [s.warmup for s in d.steps] == [False, False]
    assert not any("warm-up" in n for n in d.notes)
    assert d.span_us == pytest.approx(sum(hi - lo for _n, lo, hi, _b in steady), abs=TOL_US)
    assert _busy_leaves_us(d.budget) == pytest.approx(busy1, abs=TOL_US)
    assert _busy_leaves_us(d.budget) > 0


@pytest.mark.parametrize("name", ["compare_base.json.gz", "compare_test.json.gz", "mi250_rocm_toy_train.json.gz"])
def test_the_step_table_reads_each_steps_span_as_the_budget_does(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN real traces whose steps hold device activity they did not launch (compare_*: 16 activities launched
    # before the capture; compare_test's ProfilerStep#1010 launched one that was not recorded) or none (mi250's #2)
    path = trace_path(name)
    want = oracle.step_device_windows(path)
    with profuse.load(path) as t:
        table = steps_busy(t)
        d = diagnose(t)
        health = trace_health(t)
    # THEN each step's row is every device activity in its span, clipped to it (the raw JSON's reading)
    assert [(s.name, s.activities) for s in table] == [(n, k) for n, _w, _b, _u, k in want]
    for s, (_n, window, busy, waits, _k) in zip(table, want):
        assert s.window_us == pytest.approx(window, abs=0.01)
        assert s.busy_us == pytest.approx(busy, abs=0.01)
        assert s.unrecorded_us == pytest.approx(waits, abs=0.01)
        assert s.idle_us == pytest.approx(window - busy - waits, abs=0.01)
        if window - waits > 0:
            assert s.busy_pct == pytest.approx(100 * busy / (window - waits), abs=0.01)
        else:
            assert s.busy_pct is None
    # and its busy time is the budget's for the same step: the device is busy whoever launched the work
    assert [s.name for s in d.steps] == [s.name for s in table]
    for row, step in zip(table, d.steps):
        assert row.busy_us == pytest.approx(_busy_leaves_us(step.budget), abs=TOL_US)
    # and the console's line counts every step trace health counts, with the table's shares
    assert main(["report", str(path), "--no-advice"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "profiler step(s)" in ln)
    pcts = sorted(s.busy_pct for s in table if s.busy_pct is not None)
    assert health.steps == len(want)
    assert line.startswith(f"{health.steps} profiler step(s): device busy {pcts[0]:.1f}% to {pcts[-1]:.1f}%"), line
    none = sum(s.busy_pct is None for s in table)
    assert (f"{none} with none in its span" in line) == bool(none)


@pytest.mark.parametrize("launches", [False, True], ids=["cpu-only", "launches-no-device-activity"])
def test_every_budget_gives_a_step_what_its_name_says(tmp_path: Path, launches: bool) -> None:
    # GIVEN vLLM decode steps whose names give batch, tokens and KV tokens (sk: 0 in the context part, 32785 in
    # the generation part), in a CPU-only trace, and in one whose launches recorded no device activity
    name = "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk32785sqsq32sqsk32785)"
    ev: list[dict] = []
    for i in range(3):
        t = 1000 * i
        ev += [{"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": t, "dur": 900, "args": {}},
               {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 10, "dur": 20, "args": {}}]
        if launches:
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": t + 15, "dur": 5, "args": {"correlation": i + 1}})
    doc: dict = {"traceEvents": ev, **({"deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]} if launches else {})}
    p = tmp_path / "steps.json"
    p.write_text(json.dumps(doc))
    with profuse.load(p, cache=False) as t:
        d = diagnose(t)
        first = d.budget[0].key
    # THEN the CPU budget and the nothing-recorded budget give each step the same figures as the device budget
    # does (StepBudget.of): before, both left the KV tokens out
    assert first == ("idle/not_recorded" if launches else "cpu/gemm")
    assert [(s.phase, s.batch, s.tokens, s.kv_tokens) for s in d.steps] == [("decode", 32, 32, 0 + 32785)] * 3
