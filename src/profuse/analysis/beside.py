"""Analyses run beside the caller's, on one other thread: those the caller does not wait on while it works
(a report's device events, call tree, summary, op table, health and interruptions, and its step budgets and
some of its levers, while its fusion search and diagnosis run). numpy, DuckDB and profuse's compiled passes
release the GIL, so the two overlap on two cores. What runs side by side also holds its memory at once: the
report runs its call tree there beside the end of the fusion search and the start of the diagnosis, so its
two largest analyses (diagnosis, call tree) overlap little (payloads/report.py). A call the other thread has
not begun when its result is asked runs on the caller's thread instead, on the caller's connection. Results
are the same either way: every analysis is a function of the trace's tables, and a result remembered per
trace is computed once whichever thread asks first (:mod:`._memo`)."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._progress import carried

if TYPE_CHECKING:
    from ..trace import Trace

R = TypeVar("R")


class Submit(Protocol):
    """Hand over a call; get back a getter that waits for its result (and raises its error)."""

    def __call__(self, fn: Callable[[], R], /, *, first: bool = False) -> Callable[[], R]:
        """``fn`` handed over; the getter of its result. ``first``: run before the calls handed without it that
        have not begun (a call whose result the caller needs soon, behind sections it needs only at the end)."""
        ...


def now(fn: Callable[[], R], /, *, first: bool = False) -> Callable[[], R]:
    """:class:`Submit` with no other thread: ``fn`` runs at once."""
    result = fn()
    return lambda: result


@contextmanager
def beside(trace: Trace) -> Iterator[Submit]:
    """A :class:`Submit` whose calls run in the order handed (those handed ``first`` before the others not begun),
    on one other thread querying ``trace`` on a cursor of its own (:meth:`Trace.queried_with`), unless the
    caller asks for one's result before that thread has begun it: then it runs on the caller's thread
    (:func:`_taken`). Their phases nest in the caller's (``--timings``). The
    block's end waits for them; when the block raises (an error, a Ctrl-C), the calls not begun are dropped
    and the running one's queries interrupted until it ends. Where no thread can start, each call runs at once."""
    from collections import deque
    from concurrent.futures import Future, ThreadPoolExecutor

    cur = trace.cursor()
    pool = ThreadPoolExecutor(1, thread_name_prefix="profuse-analyse")
    handed: list[Future[Any]] = []
    # the calls handed and not begun: those handed first, then the others; each job of the pool runs the next
    # (only the other thread takes from them)
    waiting: tuple[deque[tuple[Future[Any], Callable[[], Any]]], ...] = (deque(), deque())
    alone = False   # no thread could start: every call from then on runs here

    def submit(fn: Callable[[], R], /, *, first: bool = False) -> Callable[[], R]:
        nonlocal alone
        run = carried(fn)

        def task() -> R:
            with trace.queried_with(cur):
                return run()
        if not alone:
            future: Future[R] = Future()
            queue = waiting[0 if first else 1]
            queue.append((future, task))
            try:
                pool.submit(_run_next, waiting)
            except RuntimeError:  # can't start new thread (short of memory): no job ran, none will
                queue.pop()
                alone = True
                pool.shutdown(wait=False, cancel_futures=True)
            else:
                handed.append(future)
                return _taken(future, fn)
        return now(fn)

    try:
        yield submit
    except BaseException:
        _stop(pool, handed, cur)
        raise
    finally:
        try:
            pool.shutdown(wait=True)
        finally:
            with suppress(Exception):
                cur.close()


def _run_next(waiting: tuple[Any, ...]) -> None:
    """One job of :func:`beside`'s pool: the next call handed and not begun, those handed first before the
    others, run (a call taken back by the caller is cancelled: passed over)."""
    while True:
        try:
            future, task = (waiting[0] or waiting[1]).popleft()
        except IndexError:   # every one left taken back, each passed over by an earlier job
            return
        if future.set_running_or_notify_cancel():
            break
    try:
        future.set_result(task())
    except BaseException as err:
        future.set_exception(err)


def _taken(future: Any, fn: Callable[[], R]) -> Callable[[], R]:
    """The getter of a handed call: its result; where the other thread has not begun it yet (busy with those
    handed before), the call taken back and run here, rather than waited for. Asked again, the same result or
    the same error, as a future gives."""
    from concurrent.futures import Future  # loaded already: beside() made the pool

    here: list[Future[R]] = []

    def get() -> R:
        if not here and not future.done() and future.cancel():   # still queued over there: it never will run
            ran: Future[R] = Future()
            try:
                ran.set_result(fn())
            except BaseException as err:
                ran.set_exception(err)
            here.append(ran)
        result: R = (here[0] if here else future).result()
        return result
    return get


def _stop(pool: Any, handed: list[Any], cur: Any) -> None:
    """Drop the calls not begun and interrupt the running one's queries (an interrupt reaches only a query
    that is running, so it is repeated) until it ends."""
    from concurrent.futures import wait

    pool.shutdown(wait=False, cancel_futures=True)
    for future in handed:   # those not begun: never run (the running one is not cancelled)
        future.cancel()
    while not all(f.done() for f in handed):
        with suppress(Exception):
            cur.interrupt()
        wait(handed, timeout=0.05)
