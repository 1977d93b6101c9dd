"""Analyses run beside the caller's, on one other thread: those the caller does not wait on while it works
(a report's summary, op table, call tree and health while its diagnosis runs). numpy, DuckDB and profuse's
compiled passes release the GIL, so on two cores a big trace's report analyses in about three quarters of
the time (benchmarks/bench_sizes.py). Results are the same either way: every analysis is a function of the
trace's tables, and a result remembered per trace is computed once whichever thread asks first
(:mod:`._memo`)."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Protocol, TypeVar

from .._progress import carried

if TYPE_CHECKING:
    from ..trace import Trace

R = TypeVar("R")


class Submit(Protocol):
    """Hand over a call; get back a getter that waits for its result (and raises its error)."""

    def __call__(self, fn: Callable[[], R], /) -> Callable[[], R]:
        """``fn`` handed over; the getter of its result."""
        ...


def now(fn: Callable[[], R]) -> Callable[[], R]:
    """:class:`Submit` with no other thread: ``fn`` runs at once."""
    result = fn()
    return lambda: result


@contextmanager
def beside(trace: Trace) -> Iterator[Submit]:
    """A :class:`Submit` whose calls run in the order handed, on one other thread querying ``trace`` on a
    cursor of its own (:meth:`Trace.queried_with`); their phases nest in the caller's (``--timings``). The
    block's end waits for them (when the block raises, the other thread's query is interrupted and the calls
    not started are dropped). Where no thread can start, each call runs at once."""
    from concurrent.futures import ThreadPoolExecutor

    cur = trace.cursor()
    pool = ThreadPoolExecutor(1, thread_name_prefix="profuse-analyse")

    def submit(fn: Callable[[], R]) -> Callable[[], R]:
        run = carried(fn)

        def task() -> R:
            with trace.queried_with(cur):
                return run()
        try:
            return pool.submit(task).result
        except RuntimeError:  # can't start new thread (short of memory): here, in turn
            return now(fn)

    done = False
    try:
        yield submit
        done = True
    finally:
        if not done:  # an error or a Ctrl-C here: the other thread's query stops, what has not begun never runs
            with suppress(Exception):
                cur.interrupt()
        pool.shutdown(wait=True, cancel_futures=not done)
        cur.close()
