"""The trace engine: Kineto JSON -> DuckDB tables with device time correlated. Needs no torch.

Names are imported on first use, so ``import profuse`` (and ``profuse --help``) costs no DuckDB,
numpy or decoder import.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .open_trace import load, resolve
    from .trace import Trace

__all__ = ["Trace", "load", "resolve"]


def __getattr__(name: str) -> Any:
    if name == "Trace":
        from .trace import Trace

        return Trace
    if name in ("load", "resolve"):
        from . import open_trace

        return getattr(open_trace, name)
    raise AttributeError(name)
