"""Analyses: pure functions from a loaded trace's tables to result dataclasses. They never print."""
from __future__ import annotations

from .optable import GROUPS, SORT_KEYS, OpRow, OpTable, op_table
from .summary import Summary, summarize

__all__ = ["GROUPS", "SORT_KEYS", "OpRow", "OpTable", "Summary", "op_table", "summarize"]
