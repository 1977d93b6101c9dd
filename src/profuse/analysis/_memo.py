"""Results remembered per loaded trace: a trace's tables never change after loading, so what several
analyses read from them is computed once, and forgotten with the trace."""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from ..trace import Trace

R = TypeVar("R")


def once_per_trace(build: Callable[[Trace], R]) -> Callable[[Trace], R]:
    """``build(trace)`` computed on the first call for a trace and returned again after (callers only
    read the result)."""
    memo: weakref.WeakKeyDictionary[Trace, R] = weakref.WeakKeyDictionary()

    def get(trace: Trace) -> R:
        found = memo.get(trace)
        if found is None:
            found = memo[trace] = build(trace)
        return found

    get.__doc__ = build.__doc__
    get.__name__ = build.__name__
    return get
