"""Pieces shared by subcommands: loading with a progress bar, the console."""
from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from ..trace import Trace


def console(*args: Any, **kwargs: Any) -> Console:
    """The report console (rich is imported on first use, so --help and argument errors stay fast)."""
    from ..report.console import make_console

    return make_console(*args, **kwargs)


def add_load_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lenient", action="store_true",
                   help="load what can be read; skip bad events and report how many")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the table cache")


class _LazyBar:
    """A progress bar that appears only once a load has taken more than a second."""

    def __init__(self, label: str) -> None:
        self.label, self.start = label, time.monotonic()
        self.bar: Progress | None = None
        self.task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if time.monotonic() - self.start < 1.0:
                return
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

            self.bar = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                                TransferSpeedColumn(), TimeRemainingColumn(),
                                console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total)
        self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def load_trace(path: str, args: argparse.Namespace) -> Trace:
    from ..trace import load

    bar = _LazyBar(f"loading {path}")
    try:
        return load(path, lenient=getattr(args, "lenient", False), cache=not getattr(args, "no_cache", False),
                    progress=bar)
    finally:
        bar.close()

