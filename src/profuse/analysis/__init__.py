"""Analyses: pure functions from a loaded trace's tables to result dataclasses. They never print.

The names below are imported on first use, so that `profuse --help` does not pay for them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._choices import GROUPS, SORT_KEYS

if TYPE_CHECKING:
    from .optable import OpRow, OpTable, op_table
    from .summary import Summary, summarize

__all__ = ["GROUPS", "SORT_KEYS", "OpRow", "OpTable", "Summary", "op_table", "summarize"]
_FROM = {"OpRow": "optable", "OpTable": "optable", "op_table": "optable", "Summary": "summary", "summarize": "summary"}


def __getattr__(name: str) -> Any:
    if name in _FROM:
        from importlib import import_module

        return getattr(import_module(f".{_FROM[name]}", __name__), name)
    raise AttributeError(name)
