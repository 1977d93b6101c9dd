"""``profuse peaks``: measured copy bandwidth and matmul rate of a device, cached per machine."""
from __future__ import annotations

import platform
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from ..errors import UserError
from ..trace.bundle import MeasuredPeaks
from ..trace.cache import user_cache_dir


def _timer(device: str) -> Callable[[Callable[[], object]], float]:
    """A function timing one call of its argument in seconds: device events on CUDA, the wall clock else."""
    import torch

    if device.startswith("cuda"):
        cuda: Any = torch.cuda  # untyped in torch's stubs

        def timed(fn: Callable[[], object]) -> float:
            start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            cuda.synchronize()
            return float(start.elapsed_time(end)) / 1e3
        return timed

    def timed_cpu(fn: Callable[[], object]) -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    return timed_cpu


def measure(device: str = "cpu", *, repeats: int = 7) -> MeasuredPeaks:
    """Median of ``repeats`` after warm-up: copy GB/s (read + write) and matmul TFLOP/s (fp32)."""
    import torch

    on_gpu = not device.startswith("cpu")
    n_bytes = (1 << 30) if on_gpu else (64 << 20)
    src = torch.empty(n_bytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    timed = _timer(device)
    for _ in range(2):
        timed(lambda: dst.copy_(src))
    copy_s = statistics.median(timed(lambda: dst.copy_(src)) for _ in range(repeats))
    n = 8192 if on_gpu else 1024
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    for _ in range(2):
        timed(lambda: a @ b)
    mm_s = statistics.median(timed(lambda: a @ b) for _ in range(repeats))
    return MeasuredPeaks(device=device, device_name=device_name(device),
                         copy_bandwidth_gbps=2 * n_bytes / copy_s / 1e9,
                         matmul_tflops_fp32=2 * n**3 / mm_s / 1e12,
                         threads=torch.get_num_threads(), measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
                         source="measured")


def device_name(device: str) -> str:
    """The device's marketing name (CUDA/ROCm), else the CPU's."""
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return platform.processor() or platform.machine()


def _cache_file() -> Path:
    """``peaks.json`` in the user cache: one entry per host, device and device name."""
    return user_cache_dir() / "peaks.json"


def _key(device: str) -> str:
    return f"{socket.gethostname()}|{device}|{device_name(device)}"


def _read_cache(path: Path) -> dict[str, Any]:
    """The peaks cache as ``{key: entry}``; a missing or damaged file is an empty cache."""
    try:
        cached = msgspec.json.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError):
        return {}
    return cached if isinstance(cached, dict) else {}


def _entry(cached: dict[str, Any], key: str) -> MeasuredPeaks | None:
    """The cache's entry for ``key`` as MeasuredPeaks; an entry of another shape counts as absent."""
    try:
        return msgspec.convert(cached[key], MeasuredPeaks) if key in cached else None
    except msgspec.ValidationError:
        return None


def cached_peaks(device: str = "cpu") -> MeasuredPeaks | None:
    """Peaks measured earlier on this machine, without measuring now."""
    return _entry(_read_cache(_cache_file()), _key(device))


def peaks(device: str = "cpu", *, refresh: bool = False) -> MeasuredPeaks:
    """Cached peaks for this machine and device; measured on first use or with ``refresh``.

    A peak is the highest rate ever seen: a new measurement lower than the cached one (a busy
    spell) keeps the cached figure, so a roofline never gets a lower bound than the machine reached."""
    key = _key(device)
    path = _cache_file()
    cached = _read_cache(path)
    known = _entry(cached, key)
    if known is not None and not refresh:
        return known
    result = _highest(measure(device), known)
    _store(path, cached, key, result)
    return result


def _highest(new: MeasuredPeaks, old: MeasuredPeaks | None) -> MeasuredPeaks:
    """``new`` with each figure raised to ``old``'s where that was higher."""
    if old is None:
        return new
    return msgspec.structs.replace(new, copy_bandwidth_gbps=max(new.copy_bandwidth_gbps, old.copy_bandwidth_gbps),
                                   matmul_tflops_fp32=max(new.matmul_tflops_fp32, old.matmul_tflops_fp32))


def _store(path: Path, cached: dict[str, Any], key: str, result: MeasuredPeaks) -> None:
    cached[key] = msgspec.to_builtins(result)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        from .._io import atomic_write

        atomic_write(path, msgspec.json.format(msgspec.json.encode(cached), indent=2))
    except (OSError, UserError):
        pass  # an unwritable cache costs the next run a measurement, nothing else


def raise_copy_peak(device: str, known: MeasuredPeaks, achieved_gbps: float) -> MeasuredPeaks:
    """Raise the cached copy bandwidth to ``achieved_gbps`` when something moved bytes faster than
    it: the old figure was not the machine's peak. Returns the peaks now cached (``known`` when not raised)."""
    if not achieved_gbps > known.copy_bandwidth_gbps:
        return known
    raised = msgspec.structs.replace(known, copy_bandwidth_gbps=achieved_gbps,
                                     measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"), source="raised: achieved")
    path = _cache_file()
    _store(path, _read_cache(path), _key(device), raised)
    return raised
