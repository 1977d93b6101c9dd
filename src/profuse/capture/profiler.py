"""``profuse.profile(cfg)`` and ``profuse.Exporter(cfg)``: torch.profiler in, a bundle out."""
from __future__ import annotations

import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from ._quiet import CANCELLED, quiet_profiler_markers
from .bundle import free_out, write_bundle
from .config import ProfileConfig


def _filters(cfg: ProfileConfig) -> dict[str, Any] | None:
    dmap = cfg.device_map()
    drop_runtime = "runtime" not in cfg.streams
    if not drop_runtime and not cfg.max_events and all(v is None for v in dmap.values()):
        return None  # keep the trace exactly as torch wrote it
    return {"keep_device_ids": dmap, "drop_runtime": drop_runtime, "max_events": cfg.max_events}


class Exporter:
    """An ``on_trace_ready`` callback writing a bundle: two lines for a torch.profiler user.

        cfg = profuse.ProfileConfig(out="prof")
        with torch.profiler.profile(**cfg.torch_kwargs(), on_trace_ready=profuse.Exporter(cfg)) as p: ...
    """

    def __init__(self, cfg: ProfileConfig, *, status: str = "complete", extra: dict[str, Any] | None = None,
                 replace: bool = False) -> None:
        self.cfg = cfg
        self.replace = replace  # profuse's own repeated captures (studies, advise) replace what they wrote
        self.status = status
        self.extra = dict(extra or {})
        self.bundles: list[Path] = []
        self._owner = os.getpid()  # a process forked from the one that set up the profiler writes nothing

    @property
    def bundle(self) -> Path | None:
        """The last bundle written, or None before the first."""
        return self.bundles[-1] if self.bundles else None

    def __call__(self, prof: Any) -> None:
        """The ``on_trace_ready`` callback: write this cycle's bundle (only in the process that made the exporter)."""
        if os.getpid() != self._owner:
            return
        # never over an existing bundle: the first free of OUT, OUT-2, ... (a repeating schedule: one per cycle);
        # replace=True (a study's or advise's own folder, written again each run): OUT, then OUT-2, ... per cycle
        out, moved = Path(self.cfg.out), False
        if self.replace:
            out = out.with_name(f"{out.name}-{len(self.bundles) + 1}") if self.bundles else out
        else:
            out, moved = free_out(out)
        if moved and not self.bundles:
            print(f"profuse: {self.cfg.out} already exists: this capture is written to {out}", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="profuse-export-") as tmp:
            raw = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(raw))
            self.bundles.append(write_bundle(out, raw, config=self.cfg.as_capture_config(), status=self.status,
                                             extra=self.extra, filters=_filters(self.cfg)))


class Profile:
    """Context manager returned by :func:`profile`. ``step()`` after each iteration."""

    def __init__(self, cfg: ProfileConfig, *, replace: bool = False) -> None:
        import torch.profiler

        self.cfg = cfg
        self.exporter = Exporter(cfg, replace=replace)
        self.steps_done = 0
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*warmup.*")  # warmup=0 is the user's choice
            sched = torch.profiler.schedule(skip_first=max(cfg.warmup - 1, 0), wait=0,
                                            warmup=min(cfg.warmup, 1), active=cfg.steps, repeat=1)
        self._prof: Any = torch.profiler.profile(**cfg.torch_kwargs(), schedule=sched,  # untyped in torch
                                                 on_trace_ready=self._ready)
        self._failed: BaseException | None = None

    def _ready(self, prof: Any) -> None:
        self.exporter.extra.update(steps_recorded=min(max(self.steps_done - self.cfg.warmup, 0), self.cfg.steps),
                                   warmup=self.cfg.warmup)
        if self._failed is not None:
            self.exporter.status = "failed"
            self.exporter.extra["error"] = f"{type(self._failed).__name__}: {self._failed}"
        self.exporter(prof)

    def __enter__(self) -> Profile:
        with quiet_profiler_markers():
            self._prof.__enter__()
        return self

    def step(self) -> None:
        """Mark the end of one iteration (the schedule records after the warm-up steps)."""
        self.steps_done += 1
        with quiet_profiler_markers():  # the schedule starts and stops the trace inside step()
            self._prof.step()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        interrupted = isinstance(ev, KeyboardInterrupt)
        if interrupted:
            # interrupted: stop recording and write nothing, so no folder looks complete
            self._prof.on_trace_ready = None
        elif ev is not None:
            self._failed = ev
        # stopped in its warm-up, torch's C++ side says no session was active: profuse says it was interrupted
        with quiet_profiler_markers(also=(CANCELLED,) if interrupted else ()):
            self._prof.__exit__(et, ev, tb)

    @property
    def bundle(self) -> Path | None:
        """The bundle written when the block ended, or None if no complete step was recorded."""
        return self.exporter.bundle

    @property
    def profiler(self) -> Any:
        """The underlying ``torch.profiler.profile``."""
        return self._prof


def profile_calls(fn: Callable[[], Any], cfg: ProfileConfig) -> Path:
    """Call ``fn`` for the config's warm-up and steps, one step per call, without autograd (device
    work synchronised at each step), and return the bundle written: profuse's own captures (the studies,
    ``advise``), so a bundle already at ``cfg.out`` is replaced, as running the study again expects."""
    import torch

    sync: Callable[[], object] = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    with torch.no_grad(), Profile(cfg, replace=True) as p:
        for _ in range(cfg.warmup + cfg.steps):
            fn()
            sync()
            p.step()
    if p.bundle is None:
        raise RuntimeError("the profiler wrote no bundle")
    return p.bundle


def profile(cfg: ProfileConfig | None = None, **kwargs: Any) -> Profile:
    """Profile a block: ``with profuse.profile(cfg) as p: ...; p.step()``. ``p.bundle`` is the folder."""
    return Profile(cfg or ProfileConfig(**kwargs))
