"""The bounds of the GEMM levers (docs/advisor.md, "Levers"): a GEMM lever reads every GEMM of the
steps, eager, replayed or compiled, each at the efficiency its evidence gives (a FLOP model, the same
kernel under a modelled op, else the stated fallback); GEMMs that are memory-bound near the bandwidth
roofline are named as such, not offered tuning. Expected figures are worked out here from the numbers
the hand-built traces are made of and the H100 datasheet (989 dense BF16 TFLOP/s, 3,350 GB/s)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import oracle
import pytest
from conftest import TRACES

import profuse
from profuse.analysis.diagnosis import diagnose

H100_BF16_TFLOPS, H100_GBPS = 989.0, 3350.0
# V100 SXM2 datasheet: single precision 15.7 TFLOPS, tensor 125 TFLOPS (Volta's tensor cores: FP16 only, no BF16/TF32)
V100_FP32, V100_FP16 = 15.7, 125.0
A100_FP32, A100_TF32, A100_BF16 = 19.5, 156.0, 312.0   # A100 datasheet, dense
FALLBACK_REACHABLE = 0.3  # levers.GEMM_UNKNOWN_SHARE: a GEMM without a model is taken as 30% above its best


def _x(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _kernel(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    return _x("kernel", name, ts, dur, pid=0, tid=7, correlation=corr, stream=7, device=0)


def _mm(ts: float, m: int, k: int, n: int) -> dict[str, Any]:
    return _x("cpu_op", "aten::mm", ts, 8, **{"Input Dims": [[m, k], [k, n]],
                                               "Input type": ["c10::BFloat16", "c10::BFloat16"]})


def _write(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}))
    return p


def _roofline_us(m: int, k: int, n: int) -> float:
    """The bf16 GEMM's least time on an H100: FLOPs at the dense peak, or its bytes at the bandwidth."""
    flops = 2.0 * m * k * n
    nbytes = 2.0 * (m * k + k * n + m * n)
    return max(flops / (H100_BF16_TFLOPS * 1e12), nbytes / (H100_GBPS * 1e9)) * 1e6


def test_a_gemm_lever_reads_replayed_gemms_by_their_evidence(tmp_path: Path) -> None:
    # GIVEN one eager 4096^3 bf16 GEMM under aten::mm (278 µs), then a graph replay of two kernels of the
    # same name (a replay of that op) and two other GEMM kernels no op models (200 µs each)
    eager, other = 278.0, 200.0
    ev = [_x("user_annotation", "ProfilerStep#1", 0, 1400), _mm(1, 4096, 4096, 4096),
          _x("cuda_runtime", "cudaLaunchKernel", 2, 3, correlation=1), _kernel("sm90_xmma_gemm_bf16", 10, eager, 1),
          _x("cpu_op", "model::replay", 20, 10), _x("cuda_runtime", "cudaGraphLaunch", 21, 5, correlation=2)]
    t = 10 + eager
    for name, dur in (("sm90_xmma_gemm_bf16", eager), ("sm90_xmma_gemm_bf16", eager), ("nvjet_hsh_256x128", other),
                      ("nvjet_hsh_256x128", other)):
        ev.append(_kernel(name, t, dur, 2))
        t += dur
    with profuse.load(_write(tmp_path, ev), cache=False) as tr:
        d = diagnose(tr)
    lever = next(lv for lv in d.levers if lv.kind == "gemm")
    # THEN the eager op's efficiency (its roofline over its time) holds for it and its two replays, the
    # fallback for the rest; the gain is that share of every GEMM in the step, not of the eager one alone
    total = 3 * eager + 2 * other
    # the raw JSON's own split: every GEMM kernel, those aten::mm launched, those of its kernel's name replayed
    assert oracle.gemm_kernel_split_us(_write(tmp_path, ev)) == (total, eager, 2 * eager)
    eff = _roofline_us(4096, 4096, 4096) / eager
    modelled = 3 * eager / total
    want = total * (modelled * (1 - eff) + (1 - modelled) * FALLBACK_REACHABLE)
    assert lever.gain_us == pytest.approx(want, abs=0.01)
    assert lever.gain_us > eager * (1 - eff) * 2   # the eager-only figure, which replays left out
    assert lever.grade == "inferred" and lever.gain_us <= total
    assert f"{100 * eff:.0f}% of their roofline" in lever.evidence
    assert "556.0 µs more (replayed or compiled) are the same kernels" in lever.evidence
    assert "the other 400.0 µs have no model" in lever.evidence


def test_memory_bound_gemms_are_named_not_tuned(tmp_path: Path) -> None:
    # GIVEN a decode step: 20 GEMVs of a [1, 4096] x [4096, 4096] bf16 weight, each 12 µs (the weight's
    # 33.5 MB at 3,350 GB/s is 10.0 µs: 84% of the bandwidth roofline), back to back
    ev = [_x("user_annotation", "ProfilerStep#1", 0, 260)]
    for i in range(20):
        ev += [_mm(1 + i * 0.5, 1, 4096, 4096), _x("cuda_runtime", "cudaLaunchKernel", 1.1 + i * 0.5, 0.2,
                                                       correlation=i + 1),
               _kernel("sm90_xmma_gemv_bf16", 10 + 12 * i, 12, i + 1)]
    with profuse.load(_write(tmp_path, ev), cache=False) as tr:
        d = diagnose(tr)
    # THEN the lever says the GEMMs are memory-bound near the bandwidth and names batching, quantisation and
    # speculative decoding, not GEMM tuning; its gain is only the time above the bandwidth roofline
    assert not [lv for lv in (*d.levers, *d.small_items) if lv.kind == "gemm"]
    lever = next(lv for lv in (*d.levers, *d.small_items) if lv.kind == "memory_bound")
    roof = _roofline_us(1, 4096, 4096)
    assert roof / 12 >= 0.6
    assert oracle.gemm_kernel_split_us(tmp_path / "t.json") == (20 * 12.0, 20 * 12.0, 0.0)   # all modelled
    assert lever.gain_us == pytest.approx(20 * (12 - roof), abs=0.01)
    assert "memory-bound" in lever.evidence and "no GEMM tuning beats" in lever.evidence
    assert f"stream at {100 * roof / 12:.0f}% of the device's memory bandwidth" in lever.evidence
    assert all(w in lever.how for w in ("batch more", "quantise", "speculative decoding"))
    assert lever.grade == "inferred"


def _replayed_gemm_step(tmp_path: Path, step: str) -> Path:
    """One step named ``step``: a graph replay of four 200 µs GEMM kernels (no op with shapes launched them, so
    no FLOP model), back to back from 10 µs in a 1,000 µs step."""
    ev = [_x("user_annotation", step, 0, 1000), _x("cpu_op", "model::replay", 1, 8),
          _x("cuda_runtime", "cudaGraphLaunch", 2, 5, correlation=1)]
    ev += [_kernel("nvjet_hsh_256x128", 10 + 200 * i, 200, 1) for i in range(4)]
    return _write(tmp_path, ev)


@pytest.mark.parametrize(("step", "tokens"), [("step[DECODE bs=16]", 16), ("step[DECODE bs=8 toks=24]", 24)])
def test_unmodelled_decode_gemms_under_the_ridge_are_memory_bound(tmp_path: Path, step: str, tokens: int) -> None:
    # GIVEN a decode step whose GEMMs no FLOP model covers (a graph replay), serving fewer tokens than the H100's
    # ridge point (989 TFLOP/s over 3,350 GB/s: 295 FLOP per byte; a 16-bit weight read once serves each token)
    ridge = H100_BF16_TFLOPS * 1e3 / H100_GBPS
    assert tokens < ridge
    with profuse.load(_replayed_gemm_step(tmp_path, step), cache=False) as tr:
        d = diagnose(tr)
    levers = (*d.levers, *d.small_items)
    # THEN the lever names the GEMMs memory-bound (fewer bytes per token), never GEMM tuning; low confidence, the
    # fallback share of the GEMM time, graded inferred
    assert not [lv for lv in levers if lv.kind == "gemm"]
    lever = next(lv for lv in levers if lv.kind == "memory_bound")
    assert oracle.gemm_kernel_split_us(tmp_path / "t.json") == (800.0, 0.0, 0.0)
    assert lever.gain_us == pytest.approx(800.0 * FALLBACK_REACHABLE, abs=0.01)
    assert (lever.confidence, lever.grade) == ("low", "inferred")
    assert f"at most {tokens} tokens" in lever.evidence and f"ridge point of {ridge:.0f} FLOP per byte" in lever.evidence
    assert f"{100 * FALLBACK_REACHABLE:.0f}% of this time is reachable" in lever.evidence
    assert all(w in lever.how for w in ("batch more", "quantise"))


@pytest.mark.parametrize("step", ["step[DECODE bs=512]", "step[EXTEND bs=4]", "ProfilerStep#1"])
def test_unmodelled_gemms_stay_a_tuning_lever_off_a_small_decode(tmp_path: Path, step: str) -> None:
    # GIVEN the same replayed GEMMs in a decode of more tokens than the ridge point (512 > 295), a prefill, and a
    # step that names no phase
    with profuse.load(_replayed_gemm_step(tmp_path, step), cache=False) as tr:
        d = diagnose(tr)
    levers = (*d.levers, *d.small_items)
    # THEN nothing proves them memory-bound: the GEMM lever at the stated fallback, low confidence
    assert not [lv for lv in levers if lv.kind == "memory_bound"]
    lever = next(lv for lv in levers if lv.kind == "gemm")
    assert lever.gain_us == pytest.approx(800.0 * FALLBACK_REACHABLE, abs=0.01) and lever.confidence == "low"
    assert "no FLOP model" in lever.evidence and "30% of this time is reachable" in lever.evidence


def test_gemms_of_ops_without_recorded_shapes_say_so(tmp_path: Path) -> None:
    # GIVEN a step whose bf16 GEMMs aten::mm launched eagerly, recorded without input shapes (record_shapes off)
    ev = [_x("user_annotation", "ProfilerStep#1", 0, 1000)]
    for i in range(4):
        ev += [_x("cpu_op", "aten::mm", 1 + i, 1), _x("cuda_runtime", "cudaLaunchKernel", 1.2 + i, 0.5, correlation=i + 1),
               _kernel("nvjet_hsh_256x128", 10 + 200 * i, 200, i + 1)]
    with profuse.load(_write(tmp_path, ev), cache=False) as tr:
        d = diagnose(tr)
    lever = next(lv for lv in (*d.levers, *d.small_items) if lv.kind == "gemm")
    # THEN the evidence names the missing shapes and the ops, not graph replays or compiled regions
    assert "(aten::mm) ran with no input shapes recorded" in lever.evidence
    assert "graph replays" not in lever.evidence
    assert lever.gain_us == pytest.approx(800.0 * FALLBACK_REACHABLE, abs=0.01)


def test_v100_gemms_name_the_missing_shapes() -> None:
    # GIVEN the V100 216k-event trace: every GEMM launched by an op (aten::mm, addmm, bmm), no op with Input Dims
    path = TRACES / "v100_rank1_of2_216k_events.json.gz"
    events = oracle.complete_events(path)
    assert not any("Input Dims" in (e.get("args") or {}) for e in events)
    with profuse.load(path) as tr:
        d = diagnose(tr)
    lever = next(lv for lv in (*d.levers, *d.small_items) if lv.kind == "gemm")
    # THEN its GEMM lever says so, naming those ops
    assert "ran with no input shapes recorded" in lever.evidence and "aten::mm" in lever.evidence
    assert "graph replays" not in lever.evidence


def test_precision_reads_what_kernel_names_prove(tmp_path: Path) -> None:
    # GIVEN an A100 step with three 100 µs GEMMs named by what they compute: a TF32 tensor-op s1688 kernel,
    # a bf16 cuDNN "sgemm", and a plain FP32 sgemm (no input types recorded)
    names = ("cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4",
             "void precomputed_convolve_sgemm<__nv_bfloat16, 1024, 5, 5, 4, 3, 3, 1, false>(int, int)",
             "ampere_sgemm_128x64_nn")
    ev = [_x("user_annotation", "ProfilerStep#1", 0, 400)]
    for i, name in enumerate(names):
        ev += [_x("cpu_op", "aten::mm", 1 + i, 1), _x("cuda_runtime", "cudaLaunchKernel", 1.2 + i, 0.5, correlation=i + 1),
               _kernel(name, 10 + 100 * i, 100, i + 1)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB",
                                                                      "totalGlobalMem": 85_000_000_000}]}))
    with profuse.load(p, cache=False) as tr:
        d = diagnose(tr)
    lever = next(lv for lv in (*d.levers, *d.small_items) if lv.kind == "precision")
    # THEN only the sgemm is FP32 (the raw JSON's own count), the gain BF16's over its 100 µs, and the
    # evidence quotes each dtype's dense A100 peak
    fp32 = oracle.fp32_matrix_kernel_us(p)
    assert fp32 == 100.0
    assert lever.gain_us == pytest.approx(fp32 * (1 - 19.5 / 312.0), abs=0.01) and lever.grade == "inferred"
    assert lever.evidence.startswith(f"{fp32:.1f} µs of FP32 GEMM/conv kernels")
    assert "FP32 19.5, TF32 156, BF16 312 TFLOP/s; the gain assumes BF16" in lever.evidence
    assert f"(TF32 alone: up to {fp32 * (1 - 19.5 / 156.0):.1f} µs)" in lever.evidence
    assert lever.kernels == ("ampere_sgemm_128x64_nn",)


def _precision(path: Path) -> Any:
    with profuse.load(path) as tr:
        d = diagnose(tr)
    return next(lv for lv in (*d.levers, *d.small_items) if lv.kind == "precision")


def _formats(text: str) -> set[str]:
    """The reduced-precision formats a lever's text names."""
    up = text.upper()
    return {f for f, words in (("BF16", ("BF16", "BFLOAT16")), ("TF32", ("TF32",)), ("FP16", ("FP16", "FLOAT16")))
            if any(w in up for w in words)}


@pytest.mark.parametrize("name", ["v100_ns_timestamps.json.gz", "v100_rank1_of2_216k_events.json.gz"])
def test_precision_on_a_v100_names_fp16_and_no_tf32(name: str) -> None:
    # GIVEN a real V100 trace spending its time in FP32 cuBLAS/cuDNN kernels (volta_sgemm, volta_scudnn)
    path = TRACES / name
    lever = _precision(path)
    # THEN the gain is those kernels' time (the raw JSON's own count) at FP16's rate, the only faster format
    # Volta has, and the evidence and advice name FP16 alone: no BF16 autocast, no TF32 setting
    fp32 = oracle.fp32_matrix_kernel_us(path)
    assert lever.gain_us == pytest.approx(fp32 * (1 - V100_FP32 / V100_FP16), abs=0.01)
    assert lever.evidence == (f"{fp32 / 1e3:.2f} ms of FP32 GEMM/conv kernels; datasheet: V100 (dense): "
                              f"FP32 {V100_FP32:g}, FP16 {V100_FP16:g} TFLOP/s; the gain assumes FP16")
    assert _formats(lever.evidence) == _formats(lever.how) == {"FP16"}
    assert "torch.autocast(device_type, dtype=torch.float16)" in lever.how and "GradScaler" in lever.how


def test_precision_on_an_a100_keeps_bf16_and_tf32() -> None:
    # GIVEN a real A100 trace with FP32 cuDNN/cuBLAS kernels
    path = TRACES / "a100_alexnet.json.gz"
    lever = _precision(path)
    # THEN BF16 bounds the gain, TF32 alone is said apart, and the advice names both
    fp32 = oracle.fp32_matrix_kernel_us(path)
    assert lever.gain_us == pytest.approx(fp32 * (1 - A100_FP32 / A100_BF16), abs=0.01)
    assert lever.evidence == (f"{fp32 / 1e3:.2f} ms of FP32 GEMM/conv kernels; datasheet: A100 40GB (dense): FP32 "
                              f"{A100_FP32:g}, TF32 {A100_TF32:g}, BF16 {A100_BF16:g} TFLOP/s; the gain assumes BF16 "
                              f"(TF32 alone: up to {fp32 * (1 - A100_FP32 / A100_TF32) / 1e3:.2f} ms)")
    assert lever.how == ("run the matrix work in lower precision: torch.autocast(device_type, dtype=torch.bfloat16) "
                         "or a bf16/fp16 model; or allow TF32 (torch.set_float32_matmul_precision('high'), "
                         "torch.backends.cudnn.allow_tf32 = True)")


@pytest.mark.parametrize(("device", "launch", "kernel", "rates", "ratio", "has"), [
    # T4 datasheet: single precision 8.1 TFLOPS, mixed precision (FP16/FP32) 65; Turing has no BF16 or TF32
    ("Tesla T4", "cudaLaunchKernel", "volta_sgemm_128x64_nn", "FP32 8.1, FP16 65", 8.1 / 65, ("FP16",)),
    # MI210 datasheet: FP32 vector 22.6, FP32 matrix 45.3, BF16 181 TFLOPs; CDNA2 has no TF32, and its FP32
    # Tensile GEMMs (an MFMA tile, MI16x16x1) already run at the FP32 matrix rate
    ("AMD Instinct MI210", "hipModuleLaunchKernel", "Cijk_Ailk_Bljk_SB_MT64x16x32_MI16x16x1_SN_LDSB0",
     "FP32 22.6, FP32 matrix 45.3, BF16 181", 45.3 / 181, ("BF16", "FP16")),
])
def test_precision_names_only_the_formats_the_device_has(tmp_path: Path, device: str, launch: str, kernel: str,
                                                         rates: str, ratio: float, has: tuple[str, ...]) -> None:
    # GIVEN one step with a 100 µs FP32 GEMM (its op's recorded inputs are float) on a device without TF32
    ev = [_x("user_annotation", "ProfilerStep#1", 0, 200),
          _x("cpu_op", "aten::mm", 1, 1, **{"Input Dims": [[1024, 1024], [1024, 1024]], "Input type": ["float", "float"]}),
          _x("cuda_runtime" if launch.startswith("cuda") else "hip_runtime", launch, 1.2, 0.5, correlation=1),
          _kernel(kernel, 10, 100, 1)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev, "deviceProperties": [{"id": 0, "name": device}]}))
    lever = _precision(p)
    # THEN the gain is the 100 µs at the fastest format it has (the first of ``has``) over the rate the kernel
    # runs at now; the evidence quotes that format alone, and the advice names only formats the device has
    assert lever.gain_us == pytest.approx(100 * (1 - ratio), abs=0.01)
    assert f"(dense): {rates} TFLOP/s; the gain assumes {has[0]}" in lever.evidence
    assert _formats(lever.evidence) == {has[0]} and has[0] in _formats(lever.how) <= set(has)
