"""``profuse peaks``: measured copy bandwidth and matmul rate of a device, cached per machine."""
from __future__ import annotations

import json
import platform
import socket
import statistics
import time
from pathlib import Path
from typing import Any

from ..trace.cache import user_cache_dir


def _timer(device: str) -> Any:
    import torch

    if device.startswith("cuda"):
        def timed(fn: Any) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3
        return timed

    def timed_cpu(fn: Any) -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    return timed_cpu


def measure(device: str = "cpu", *, repeats: int = 7) -> dict[str, Any]:
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
    return {"device": device, "device_name": device_name(device),
            "copy_bandwidth_gbps": 2 * n_bytes / copy_s / 1e9,
            "matmul_tflops_fp32": 2 * n**3 / mm_s / 1e12,
            "threads": torch.get_num_threads(), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "source": "measured"}


def device_name(device: str) -> str:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return platform.processor() or platform.machine()


def _cache_file() -> Path:
    return user_cache_dir() / "peaks.json"


def _key(device: str) -> str:
    return f"{socket.gethostname()}|{device}|{device_name(device)}"


def cached_peaks(device: str = "cpu") -> dict[str, Any] | None:
    """Peaks measured earlier on this machine, without measuring now."""
    try:
        return json.loads(_cache_file().read_text()).get(_key(device))
    except (OSError, ValueError):
        return None


def peaks(device: str = "cpu", *, refresh: bool = False) -> dict[str, Any]:
    """Cached peaks for this machine and device; measured on first use or with ``refresh``."""
    key = _key(device)
    path = _cache_file()
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if not refresh and key in cached:
        return dict(cached[key], cached=True)
    result = measure(device)
    cached[key] = result
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        from .._io import atomic_write

        atomic_write(path, json.dumps(cached, indent=2))
    except Exception:
        pass
    return dict(result, cached=False)
