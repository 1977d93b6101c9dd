"""``ProfileConfig``: what to record, on which devices, where to. Validated on construction."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..trace.bundle import CaptureConfig

STREAMS = ("ops", "device", "runtime", "python", "shapes", "memory", "flops")
# "python" gives nn.Module scopes (torch records them with its Python tracer): on by default, since
# the advisor scopes its advice by module
DEFAULT_STREAMS = ("ops", "device", "runtime", "shapes", "python")
_DEVICE_SPEC = re.compile(r"^(?P<type>[a-z][a-z0-9_]*)(?::(?P<ids>\d+(?:,\d+)*))?$")


def _split(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(s.strip() for s in items if s.strip())


def parse_devices(spec: str) -> dict[str, tuple[int, ...] | None]:
    """``"cuda:0,1"`` -> {"cuda": (0, 1)}; ``"cpu"`` -> {"cpu": None}; ``"cpu;cuda"`` for several types."""
    out: dict[str, tuple[int, ...] | None] = {}
    for part in [p.strip() for p in spec.split(";") if p.strip()] or ["cpu"]:
        m = _DEVICE_SPEC.match(part)
        if not m:
            raise ValueError(f"ProfileConfig.devices: cannot read {part!r}; use e.g. 'cpu', 'cuda', 'cuda:0,1' "
                             "(several types: 'cpu;cuda:0')")
        ids = tuple(int(i) for i in m.group("ids").split(",")) if m.group("ids") else None
        out[m.group("type")] = ids
    return out


EMU = "emu"  # profuse's own emulated PrivateUse1 device (profuse.emu), loaded when a config names it


def load_emu() -> None:
    """Register profuse's emulated device with torch (``profuse.emu``): a UserError if it is not built or
    another PrivateUse1 backend holds this process."""
    from .. import emu  # noqa: F401  (importing it registers the device)


def available_device_types() -> dict[str, int]:
    """Device types torch can use here, with their device counts."""
    import torch

    found = {"cpu": 1}
    if torch.cuda.is_available():
        found["cuda"] = torch.cuda.device_count()  # ROCm builds answer here too
    if hasattr(torch, "mtia") and torch.mtia.is_available():
        found["mtia"] = torch.mtia.device_count()
    backend = torch._C._get_privateuse1_backend_name()
    mod = getattr(torch, backend, None) if backend != "privateuseone" else None
    if mod is not None and getattr(mod, "is_available", lambda: False)():
        found[backend] = getattr(mod, "device_count", lambda: 1)()
    return found


PRIVATEUSE1_ALIASES = ("privateuse1", "neuron")  # names a user may give for the PrivateUse1 backend


def privateuse1_backend() -> str | None:
    """The name torch's PrivateUse1 backend is registered under (``neuron`` with TorchNeuron), or None."""
    import torch

    name = torch._C._get_privateuse1_backend_name()
    return None if name == "privateuseone" else name


def _resolve_privateuse1(dtype: str) -> str:
    """``privateuse1``/``neuron`` -> the registered backend's name; a clear error when none fits."""
    backend = privateuse1_backend()
    if backend is None:
        hint = " (import torch_neuronx / TorchNeuron first)" if dtype == "neuron" else ""
        raise ValueError(f"ProfileConfig.devices: {dtype!r} needs a PrivateUse1 backend registered with torch, "
                         f"and this torch has none{hint}")
    if dtype != "privateuse1" and dtype != backend:
        raise ValueError(f"ProfileConfig.devices: {dtype!r} is not the registered PrivateUse1 backend "
                         f"({backend!r}); use devices={backend!r} or 'privateuse1'")
    return backend


@dataclass(frozen=True)
class ProfileConfig:
    """What to record. ``streams``: ops, device, runtime, python, shapes, memory, flops.

    ``devices`` picks which devices' events to keep (``"cpu"``, ``"cuda"``, ``"cuda:0,1"``;
    ``"neuron"`` or ``"privateuse1"`` for the PrivateUse1 backend torch has registered, e.g. TorchNeuron;
    ``"emu"`` for profuse's emulated PrivateUse1 device, registered on first use).
    ``warmup`` steps run with the profiler off; ``steps`` are recorded. ``max_events`` caps the
    trace (0 = no cap); events past the cap are dropped and counted in the bundle's meta.json.
    ``memory=True`` adds the ``memory`` stream (torch's ``profile_memory``: every allocation and free,
    see docs/memory.md); ``memory=False`` leaves the streams as given.
    """

    streams: tuple[str, ...] | str = DEFAULT_STREAMS  # a tuple, or "ops,device" as one string
    devices: str = "auto"
    out: str | Path = "profuse-out"
    warmup: int = 1
    steps: int = 5
    max_events: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    memory: bool = False

    def __post_init__(self) -> None:
        streams = _split(self.streams)
        if self.memory is True and "memory" not in streams:
            streams = (*streams, "memory")
        elif not isinstance(self.memory, bool):
            raise ValueError(f"ProfileConfig.memory: must be True or False (got {self.memory!r})")
        bad = [s for s in streams if s not in STREAMS]
        if bad or not streams:
            raise ValueError(f"ProfileConfig.streams: unknown {', '.join(map(repr, bad)) or 'empty list'}; "
                             f"allowed: {', '.join(STREAMS)}")
        object.__setattr__(self, "streams", streams)
        for name in ("warmup", "steps", "max_events"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"ProfileConfig.{name}: must be a whole number >= 0 (got {v!r})")
        if self.steps == 0:
            raise ValueError("ProfileConfig.steps: must be at least 1 (got 0)")
        if not str(self.out):
            raise ValueError("ProfileConfig.out: must name a folder")
        if self.devices != "auto":
            parse_devices(self.devices)

    # --- resolved views -------------------------------------------------------------------

    def device_map(self) -> dict[str, tuple[int, ...] | None]:
        """The devices to record, checked against what torch sees here."""
        asked = parse_devices(self.devices) if self.devices != "auto" else {}
        if EMU in asked and privateuse1_backend() is None:
            load_emu()
        have = available_device_types()
        if self.devices == "auto":
            auto: dict[str, tuple[int, ...] | None] = {t: None for t in have}
            return auto
        wanted = {(_resolve_privateuse1(t) if t in PRIVATEUSE1_ALIASES else t): ids for t, ids in asked.items()}
        for dtype, ids in wanted.items():
            if dtype not in have:
                raise ValueError(f"ProfileConfig.devices: {dtype!r} is not available here "
                                 f"(available: {', '.join(sorted(have))})")
            for i in ids or ():
                if i >= have[dtype]:
                    raise ValueError(f"ProfileConfig.devices: {dtype}:{i} does not exist "
                                     f"({have[dtype]} {dtype} device(s) here)")
        return wanted

    def activities(self) -> list[Any]:
        """The torch.profiler activities the streams and devices ask for (CPU always)."""
        from torch.profiler import ProfilerActivity

        acts = [ProfilerActivity.CPU]
        if "device" in self.streams or "runtime" in self.streams:
            for dtype in self.device_map():
                if dtype == "cuda":
                    acts.append(ProfilerActivity.CUDA)
                elif dtype == "mtia" and hasattr(ProfilerActivity, "MTIA"):
                    acts.append(ProfilerActivity.MTIA)
                elif dtype != "cpu" and dtype == privateuse1_backend():
                    if not hasattr(ProfilerActivity, "PrivateUse1"):
                        raise ValueError(f"ProfileConfig.devices: {dtype!r} is a PrivateUse1 backend and this "
                                         "torch has no ProfilerActivity.PrivateUse1 (torch >= 2.1 has)")
                    acts.append(ProfilerActivity.PrivateUse1)
        return list(dict.fromkeys(acts))

    def torch_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``torch.profiler.profile`` (add ``on_trace_ready=Exporter(cfg)``)."""
        return {
            "activities": self.activities(),
            "record_shapes": "shapes" in self.streams,
            "profile_memory": "memory" in self.streams,
            "with_stack": "python" in self.streams,
            "with_modules": "python" in self.streams,
            "with_flops": "flops" in self.streams,
        }

    def as_capture_config(self) -> CaptureConfig:
        """This config as a bundle's meta.json records it."""
        return CaptureConfig(streams=list(self.streams), devices=self.devices, out=str(self.out),
                             warmup=self.warmup, steps=self.steps, max_events=self.max_events,
                             extra=dict(self.extra))
