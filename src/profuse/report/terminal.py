"""The report's stdout console, made without importing the report's records (a cached report prints
its kept text on it)."""
from __future__ import annotations

import sys

from rich.console import Console


def make_console() -> Console:
    """Stdout console; wide when piped so names are not folded into unreadable columns."""
    return Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200)
