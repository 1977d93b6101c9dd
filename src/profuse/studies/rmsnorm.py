"""The RMSNorm case study: op by op vs ``torch.rms_norm`` vs ``torch.compile``, on any device.

Where ``torch.compile`` cannot target the device (no inductor code generator for it, e.g. profuse's
emulated ``emu`` device), that variant is left out and a note says why.

Each variant is warmed up (compilation stays out), profiled, and read back through the trace engine,
so the figures are what the profiler saw, not a stopwatch around a loop. The calls are profiled in
three interleaved rounds (op by op, rms_norm, compile, op by op, ...) so that a busy spell on a shared
machine slows every variant rather than one; per-call figures are medians over all rounds' calls,
and each variant's bundle holds its round whose median call is nearest that figure (among the rounds of
the commonest size, so every bundle holds as many calls; the last of those alike), so that
``profuse report`` or ``profuse diff`` of the bundles reads what the study says.
"""
from __future__ import annotations

import json
import shutil
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..analysis.step_stats import StepStats, spread_pct, step_stats
from ..capture import ProfileConfig, peaks, profile_calls
from ..capture.bundle import check_out, move_bundle
from ..trace import load

VARIANTS = ("op_by_op", "torch.rms_norm", "torch.compile")
DTYPES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
SCHEMA = "profuse.study/1"


def rms_norm_op_by_op(x: Any, weight: Any, eps: float = 1e-6) -> Any:
    """RMSNorm written the way many model files write it: six ops, five intermediates."""
    import torch

    x_sq = x.pow(2)
    mean_sq = x_sq.mean(-1, keepdim=True)
    denom = mean_sq + eps
    inv = torch.rsqrt(denom)
    y = x * inv
    return y * weight


@dataclass
class VariantResult:
    """One RMSNorm variant measured: ops, kernels, device time and bytes per call, and speed-up over op by op."""

    name: str
    ops_per_call: float
    kernels_per_call: float
    device_us_per_call: float
    speedup_vs_op_by_op: float
    bytes_per_call: int
    roofline_pct: float
    max_abs_err: float
    bundle: str
    ran: list[str] = field(default_factory=list)
    spread_pct: float = 0.0


@dataclass
class StudyResult:
    """The RMSNorm study: the device, the input, the measured copy bandwidth and each variant."""

    device_kind: str
    device_name: str
    shape: tuple[int, int, int]
    dtype: str
    iters: int
    copy_bandwidth_gbps: float
    variants: list[VariantResult]
    out: str
    peak_copy_bandwidth_gbps: float = 0.0
    notes: list[str] = field(default_factory=list)   # e.g. the cached peak was raised to what a variant reached

    def to_json(self) -> dict[str, Any]:
        """The study as its JSON document."""
        return {"schema": SCHEMA, "study": "rmsnorm", "device_kind": self.device_kind,
                "device_name": self.device_name, "shape": list(self.shape), "dtype": self.dtype,
                "iters": self.iters, "copy_bandwidth_gbps": round(self.copy_bandwidth_gbps, 2),
                "peak_copy_bandwidth_gbps": round(self.peak_copy_bandwidth_gbps, 2),
                "variants": [asdict(v) for v in self.variants], "notes": list(self.notes)}


def traffic_bytes(shape: tuple[int, int, int], elem: int, fused: bool) -> int:
    """Bytes a variant reads and writes per call: the memory-traffic model of the study.

    Fused: read x and weight, write y. Op by op: every op reads its inputs and writes its output
    (pow 2N, mean N+M, add 2M, rsqrt 2M, mul N+M+N, mul N+H+N), with N = B*S*H and M = B*S.
    """
    b, s, h = shape
    n, m = b * s * h, b * s
    return elem * ((2 * n + h) if fused else (7 * n + 6 * m + h))


def copy_bandwidth(x: Any, repeats: int = 15) -> float:
    """GB/s of copying the study's own input (read + write): the roofline the variants are held to.

    Measured at the study's size rather than with a huge buffer, so a working set that fits in
    cache is compared with what the cache delivers (``profuse peaks`` has the large-buffer figure).
    """
    import time

    import torch

    dst = torch.empty_like(x)
    on_gpu = x.device.type == "cuda"
    times = []
    for i in range(repeats + 3):
        if on_gpu:
            torch.cuda.synchronize()
        t = time.perf_counter()
        dst.copy_(x)
        if on_gpu:
            torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t)
    return float(2 * x.numel() * x.element_size() / statistics.median(times) / 1e9)


def device_kind_of(device: str) -> str:
    """The device kind (CUDA, ROCm, CPU, ...) of a torch device string: the device vocabulary's name for
    the family where it has one (``emu``, ``MTIA``), else the type in capitals."""
    import torch

    from ..trace.vocabulary import DEVICES

    if device.startswith("cuda"):
        return "ROCm" if getattr(torch.version, "hip", None) else "CUDA"
    dtype = device.split(":")[0]
    return next((d.kind for d in DEVICES if d.kind.lower() == dtype), dtype.upper())


# devices whose memory is the host's (profuse's emulated device): their roofline is the CPU's measured peak
HOST_MEMORY_DEVICES = ("emu",)


def peaks_device(device: str) -> str:
    """The device whose measured peaks bound this one: the CPU for a device over host memory."""
    return "cpu" if device.split(":")[0] in HOST_MEMORY_DEVICES else device


def compile_blocker(device: str) -> str | None:
    """Why ``torch.compile`` cannot target this device here, or None: inductor generates code only for
    device types with a code generator registered (CPU, CUDA, XPU, MPS and those a backend registers)."""
    dtype = device.split(":")[0]
    try:
        from torch._inductor.codegen.common import get_scheduling_for_device, init_backend_registration
    except ImportError:  # a torch without inductor: the compile itself says what is missing
        return None
    init_backend_registration()
    if get_scheduling_for_device(dtype) is not None:
        return None
    return (f"torch.compile not run: inductor has no code generator registered for {dtype!r} devices "
            "(torch._inductor.codegen.common.register_backend_for_device); "
            + ("its CPU one would compute on emu's host memory outside emu's launches, so the profiler "
               "would record no device work for it" if dtype in HOST_MEMORY_DEVICES else "the backend provides none"))


def run_study(*, device: str = "cpu", shape: tuple[int, int, int] = (4, 256, 2048), dtype: str = "float32",
              iters: int = 20, out: str | Path = "profuse-out/rmsnorm", eps: float = 1e-6,
              progress: Any = None) -> StudyResult:
    """Profile RMSNorm op by op, as torch.rms_norm and under torch.compile on one device, and measure each."""
    import torch

    if dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)} (got {dtype!r})")
    out = Path(out)
    fns, xd, ref = _variants(device, shape, getattr(torch, dtype), eps)
    notes: list[str] = []
    blocker = compile_blocker(device)
    if blocker:
        del fns["torch.compile"]
        notes.append(blocker)
    peak = peaks(peaks_device(device))
    bw = copy_bandwidth(xd)
    errors = _warm_up(fns, ref, progress)
    merged_stats, bundles = _profiled_rounds(fns, iters, out, device, progress)
    # The roofline's bandwidth is the highest seen: the copy at this size, the cached peak, and what
    # any variant achieved (a fused kernel can beat a copy of a cache-resident input). A rate above
    # the cached peak raises the cache, and says so, so no roofline is above 100%.
    achieved = {n: _achieved_gbps(s, shape, DTYPES[dtype]) for n, s in merged_stats.items()}
    fastest = max(achieved, key=lambda n: achieved[n])
    best, best_from = max((bw, "the copy of x"), (achieved[fastest], fastest))
    if best > peak.copy_bandwidth_gbps:
        from ..capture.peaks import raise_copy_peak

        notes.append(f"cached peak copy bandwidth raised from {peak.copy_bandwidth_gbps:.1f} to {best:.1f} GB/s "
                     f"({best_from} moved its bytes faster)")
        peak = raise_copy_peak(peaks_device(device), peak, best)
    bound = max(bw, peak.copy_bandwidth_gbps, achieved[fastest])
    results = [_variant(name, merged_stats[name], shape, DTYPES[dtype], bound, errors[name], bundles[name])
               for name in VARIANTS if name in fns]
    base = results[0].device_us_per_call
    for r in results:
        r.speedup_vs_op_by_op = round(base / r.device_us_per_call, 2) if r.device_us_per_call else 0.0
    result = StudyResult(device_kind=device_kind_of(device), device_name=_device_name(device), shape=shape,
                         dtype=dtype, iters=iters, copy_bandwidth_gbps=bw, variants=results, out=str(out),
                         peak_copy_bandwidth_gbps=peak.copy_bandwidth_gbps, notes=notes)
    from .._io import atomic_write

    atomic_write(out / "study.json", json.dumps(result.to_json(), indent=2))
    return result



def _variants(device: str, shape: tuple[int, int, int], tdtype: Any,
              eps: float) -> tuple[dict[str, Callable[[], Any]], Any, Any]:
    """The three variants over one seeded input on the device, that input, and the float64 reference."""
    import torch

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    w = 1 + 0.1 * torch.randn(shape[-1], generator=gen, dtype=torch.float64)
    ref = rms_norm_op_by_op(x, w, eps)
    xd, wd = x.to(device=device, dtype=tdtype), w.to(device=device, dtype=tdtype)
    fns: dict[str, Callable[[], Any]] = {
        "op_by_op": lambda: rms_norm_op_by_op(xd, wd, eps),
        "torch.rms_norm": lambda: torch.rms_norm(xd, (shape[-1],), wd, eps),
        "torch.compile": (lambda c: lambda: c(xd, wd, eps))(torch.compile(rms_norm_op_by_op)),
    }
    return fns, xd, ref


def _warm_up(fns: dict[str, Callable[[], Any]], ref: Any, progress: Any) -> dict[str, float]:
    """Each variant's first calls (compilation, caches), kept out of every profile; its max abs error."""
    import torch

    errors: dict[str, float] = {}
    with torch.no_grad():
        for name in fns:
            if progress:
                progress(f"warming up {name}")
            y = fns[name]()
            for _ in range(2):
                fns[name]()
            errors[name] = float((y.double().cpu() - ref).abs().max())
    return errors


def _profiled_rounds(fns: dict[str, Callable[[], Any]], iters: int, out: Path, device: str,
                     progress: Any) -> tuple[dict[str, StepStats], dict[str, Path]]:
    """Each variant profiled in interleaved rounds (a busy spell on a shared machine then slows every
    variant, not one), its steps merged; of each variant's rounds of the commonest size (:func:`alike_rounds`)
    the one nearest its median call (:func:`representative`) is kept under ``out``, the others removed
    (all of them where the study stops early). A folder there that is no bundle is refused first."""
    for name in fns:
        check_out(out / name)
    rounds = max(1, min(ROUNDS, iters // 3))
    try:
        rounds_of = _rounds(fns, iters, rounds, out / ".rounds", device, progress)
        merged: dict[str, StepStats] = {}
        bundles: dict[str, Path] = {}
        alike = alike_rounds(iters, rounds)
        for name in fns:
            steps = sorted(s for st, _ in rounds_of[name] for s in st.per_step_us)
            median = statistics.median(steps) if steps else 0.0
            st, kept = rounds_of[name][alike[representative([rounds_of[name][i][0].per_step_us for i in alike],
                                                            median)]]
            bundles[name] = out / name
            move_bundle(kept, bundles[name])
            merged[name] = StepStats(
                steps=len(steps), ops_per_call=st.ops_per_call, kernels_per_call=st.kernels_per_call,
                device_us_per_call=median, spread_pct=spread_pct(steps),
                op_names=st.op_names, leaf_names=st.leaf_names, per_step_us=tuple(steps))
    finally:
        shutil.rmtree(out / ".rounds", ignore_errors=True)
    return merged, bundles


def _rounds(fns: dict[str, Callable[[], Any]], iters: int, rounds: int, folder: Path, device: str,
            progress: Any) -> dict[str, list[tuple[StepStats, Path]]]:
    """Each variant's rounds, interleaved (the first ``iters % rounds`` make one call more): per variant, each
    round's step figures and its bundle (under ``folder``)."""
    rounds_of: dict[str, list[tuple[StepStats, Path]]] = {n: [] for n in fns}
    for rnd in range(rounds):
        n_calls = iters // rounds + (1 if rnd < iters % rounds else 0)
        for name in fns:
            if progress:
                progress(f"profiling {name} (round {rnd + 1} of {rounds})")
            bundle = _profile_calls(fns[name], n_calls, folder / f"{name}-{rnd}", device)
            with load(bundle) as trace:
                rounds_of[name].append((step_stats(trace), bundle))
    return rounds_of


def alike_rounds(iters: int, rounds: int) -> list[int]:
    """The rounds of the commonest size among ``rounds`` rounds of ``iters`` calls (the first ``iters % rounds``
    make one call more); on a tie, those of the last round's size."""
    more = iters % rounds
    return list(range(more)) if more > rounds - more else list(range(more, rounds))


def representative(rounds: list[tuple[float, ...]], median: float) -> int:
    """The index of the round whose median call is nearest ``median`` (the last of those alike; the last
    round where none has a call)."""
    best, at = float("inf"), len(rounds) - 1
    for i, steps in enumerate(rounds):
        if steps and (gap := abs(statistics.median(steps) - median)) <= best:
            best, at = gap, i
    return at


ROUNDS = 3
PROFILE_WARMUP = 3


def _profile_calls(fn: Any, calls: int, out: Path, device: str) -> Path:
    # the first calls after a profiler starts run slow (its threads and buffers warming): skip three
    return profile_calls(fn, ProfileConfig(out=out, warmup=PROFILE_WARMUP, steps=calls,
                                           devices=device.split(":")[0],
                                           streams=("ops", "device", "runtime", "shapes")))


def _achieved_gbps(stats: StepStats, shape: tuple[int, int, int], elem: int) -> float:
    """GB/s a variant moved: its modelled bytes per call over its time per call."""
    nbytes = traffic_bytes(shape, elem, stats.kernels_per_call <= 1.0)
    return nbytes / (stats.device_us_per_call * 1e3) if stats.device_us_per_call > 0 else 0.0


def _variant(name: str, stats: StepStats, shape: tuple[int, int, int], elem: int, bw: float, err: float,
             bundle: Path) -> VariantResult:
    fused = stats.kernels_per_call <= 1.0
    nbytes = traffic_bytes(shape, elem, fused)
    at_roofline_us = nbytes / (bw * 1e9) * 1e6
    pct = min(100.0 * at_roofline_us / stats.device_us_per_call, 100.0) if stats.device_us_per_call else 0.0
    return VariantResult(name=name, ops_per_call=round(stats.ops_per_call, 2),
                         kernels_per_call=round(stats.kernels_per_call, 2),
                         device_us_per_call=round(stats.device_us_per_call, 2), speedup_vs_op_by_op=1.0,
                         bytes_per_call=nbytes, roofline_pct=round(pct, 1), max_abs_err=err, bundle=str(bundle),
                         ran=list(stats.leaf_names), spread_pct=round(stats.spread_pct, 1))


def _device_name(device: str) -> str:
    import torch

    from ..capture.peaks import device_name

    dtype = device.split(":")[0]
    module = getattr(torch, dtype, None) if dtype not in ("cpu", "cuda") else None
    if module is not None and hasattr(module, "get_device_name"):  # a PrivateUse1 backend's own name
        return str(module.get_device_name())
    return device_name(device)
