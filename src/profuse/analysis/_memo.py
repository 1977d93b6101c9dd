"""Results remembered per loaded trace: a trace's tables never change after loading, so what several
analyses (or several explorer requests) read from them is computed once, and forgotten with the trace.

Safe across threads (a report runs its analyses on two, :func:`profuse.payloads.report.analyse`): a result
being computed on one thread is waited for by another that asks for it, never computed twice. A build that
asks for another remembered result waits only for that one, and the builds call each other in one direction
(no cycle), so no two threads wait on each other."""
from __future__ import annotations

import functools
import threading
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
    # re-entrant: a build that asked for its own result would recurse (RecursionError), not hang
    building: weakref.WeakKeyDictionary[Trace, dict[tuple[Hashable, ...], threading.RLock]] = weakref.WeakKeyDictionary()
    guard = threading.Lock()

    @functools.wraps(build)
    def get(trace: Trace, *args: Hashable) -> R:
        known = memo.setdefault(trace, {})
        if args in known:
            return known[args]
        with guard:   # one lock per (trace, arguments): the first caller builds, the others wait for it
            lock = building.setdefault(trace, {}).setdefault(args, threading.RLock())
        with lock:
            if args not in known:
                known[args] = build(trace, *args)
        return known[args]

    return get
