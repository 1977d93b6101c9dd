"""``emu``: an emulated PrivateUse1 device, built in this project, so the PrivateUse1 path is profiled for real.

Importing this package loads ``_emu.so`` (built from ``_emu.cpp`` by ``make venv``, i.e. by both
``make demo`` and ``make test``) and registers it with torch as the PrivateUse1 backend named ``emu``:
``torch.empty(3, device="emu")``, ``tensor.to("emu")``, ``tensor.is_emu``, ``torch.emu.synchronize()``.
Tensors live in host memory; each kernel computes on it; torch's profiler records the device's
runtime calls, kernels and copies (``ProfilerActivity.PrivateUse1``) through the Kineto activity
profiler the library registers. Ops without an emu kernel run through the CPU fallback, counted
per op (:func:`fallbacks`); :func:`force_fallback` sends named ops there on purpose.

A process has one PrivateUse1 backend: importing this where another one is registered (TorchNeuron)
is a :class:`~profuse.errors.UserError`, as is importing it before it was built.
"""
from __future__ import annotations

import types
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import UserError

NAME = "emu"
LIBRARY = Path(__file__).with_name("_emu.so")
SOURCE = Path(__file__).with_name("_emu.cpp")
DEVICE_COUNT = 1


def _ops() -> Any:
    import torch

    return torch.ops.emu


def fallbacks() -> dict[str, int]:
    """Calls per op (``aten::gelu``, ``aten::arange.out``...) that ran through the CPU fallback since
    the library loaded or :func:`reset_counts`."""
    names, counts = _ops().fallback_counts()
    return dict(zip(names, counts, strict=True))


def launches() -> tuple[int, int]:
    """(kernels, host<->device copies) the device ran since the library loaded or :func:`reset_counts`."""
    kernels, copies = _ops().launches()
    return int(kernels), int(copies)


def reset_counts() -> None:
    """Zero the fallback and launch counters."""
    _ops().reset_counts()


def force_fallback(ops: Iterable[str]) -> None:
    """Send these ops (``aten::silu`` or ``aten::silu.out``) to the CPU fallback even where emu has a
    kernel for them; an empty list restores the kernels."""
    _ops().force_fallback(list(ops))


@contextmanager
def forced_fallback(ops: Iterable[str]) -> Iterator[None]:
    """:func:`force_fallback` for a ``with`` block."""
    force_fallback(ops)
    try:
        yield
    finally:
        force_fallback([])


def synchronize(device: Any = None) -> None:
    """Wait for the device (it runs each launch in order as it is made: this records the host sync)."""
    _ops().synchronize()


def new_stream() -> int:
    """A new stream's id (kernels launched while it is current run on it; 0 is the default stream)."""
    return int(_ops().new_stream())


def current_stream() -> int:
    """The id of this thread's current stream."""
    return int(_ops().current_stream())


@contextmanager
def stream(stream_id: int) -> Iterator[None]:
    """Make ``stream_id`` this thread's current stream inside the block."""
    before = current_stream()
    _ops().set_stream(stream_id)
    try:
        yield
    finally:
        _ops().set_stream(before)


def _device_module() -> types.ModuleType:
    """``torch.emu``: what torch and profuse ask a backend module for."""
    mod = types.ModuleType("torch.emu")
    mod.__dict__.update(
        is_available=lambda: True, device_count=lambda: DEVICE_COUNT, current_device=lambda: 0,
        is_initialized=lambda: True, _is_in_bad_fork=lambda: False, synchronize=synchronize,
        # emu's random ops run the CPU kernel with the CPU's generator: torch.manual_seed already seeds it
        manual_seed=lambda seed: None, manual_seed_all=lambda seed: None,
        get_device_name=lambda device=None: "emu (emulated PrivateUse1 device, host memory)")
    return mod


def _load() -> None:
    import torch

    backend = torch._C._get_privateuse1_backend_name()
    if backend not in ("privateuseone", NAME):
        raise UserError(f"profuse.emu: torch's PrivateUse1 backend is already {backend!r} in this process; "
                        "emu needs a process of its own")
    if hasattr(torch.ops, NAME) and hasattr(torch.ops.emu, "launches"):
        return  # loaded before (a reload of this module)
    if not LIBRARY.is_file():
        raise UserError(f"profuse.emu: {LIBRARY} is not built; run `make venv` (or `python tools/build_emu.py`) "
                        "with this torch")
    if SOURCE.is_file() and LIBRARY.stat().st_mtime < SOURCE.stat().st_mtime:
        raise UserError(f"profuse.emu: {LIBRARY} is older than {SOURCE.name}; rebuild with `make venv`")
    api: Any = torch  # the registration functions are untyped in torch's stubs
    try:
        api.ops.load_library(str(LIBRARY))
    except OSError as err:
        first = (str(err).strip().splitlines() or ["cannot load"])[0]
        raise UserError(f"profuse.emu: {LIBRARY}: {first} (built for another torch? rebuild with `make venv`)") from None
    if backend == "privateuseone":
        api.utils.rename_privateuse1_backend(NAME)
    api._register_device_module(NAME, _device_module())
    api.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)


_load()

__all__ = ["DEVICE_COUNT", "LIBRARY", "NAME", "current_stream", "fallbacks", "force_fallback", "forced_fallback",
           "launches", "new_stream", "reset_counts", "stream", "synchronize"]
