"""Results remembered per loaded trace: a trace's tables never change after loading, so what several
analyses (or several explorer requests) read from them is computed once, and forgotten with the trace."""
from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from ..trace import Trace

R = TypeVar("R")


def once_per_trace(build: Callable[..., R]) -> Callable[..., R]:
    """``build(trace, *args)`` computed on the first call for a trace and those (hashable, positional)
    arguments, and returned again after; callers only read the result."""
    memo: weakref.WeakKeyDictionary[Trace, dict[tuple[Hashable, ...], R]] = weakref.WeakKeyDictionary()

    @functools.wraps(build)
    def get(trace: Trace, *args: Hashable) -> R:
        known = memo.setdefault(trace, {})
        if args not in known:
            known[args] = build(trace, *args)
        return known[args]

    return get
