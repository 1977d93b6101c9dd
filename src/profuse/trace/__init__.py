"""The trace engine: Kineto JSON -> DuckDB tables with device time correlated. Needs no torch."""
from __future__ import annotations

from .loader import load, resolve
from .trace import Trace

__all__ = ["Trace", "load", "resolve"]
