"""The phases of one command (a load, a report): the wall time of each, and a progress line.

A command runs inside :func:`tracking`; code anywhere below it marks its phases with :func:`phase`
(nothing is recorded, and next to nothing spent, when no command is tracking). The times are what
``profuse report --timings`` prints and ``make bench`` reads. On a terminal, once the command has run
:data:`LINE_AFTER_S` seconds, one line on stderr names the phase it is in and the time so far, rewritten
in place and erased when the command ends (never on a pipe or a file, where it would be noise).
"""
from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TextIO, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

LINE_AFTER_S = 2.0   # the progress line appears once a command has run this long
LINE_EVERY_S = 0.25  # and is rewritten this often
BESIDE_MARK = "[beside]"  # --timings' mark of a phase run on another thread than its parent


class Phases:
    """Wall seconds per phase (inclusive of the phases inside it), in the order each first began;
    a phase inside another is named ``outer/inner``. A phase run on another thread (:func:`carried`) nests
    in the phase that handed it over, and overlaps its siblings in time: it is in :attr:`beside`, marked so in
    :meth:`format`, and its parent's ``other`` is what the parent's own thread spent outside its own phases."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self.stack: list[str] = []   # the tracking thread's phases; the progress line names the innermost
        self._owner = threading.get_ident()
        self._stacks: dict[int, list[str]] = {}  # other threads' (see carried)
        self.beside: set[str] = set()  # phases timed on another thread than their parent's: they overlap it
        self._carried: dict[int, int] = {}  # a thread's depth of the phase it runs under (see under)
        self._lock = threading.Lock()
        self.quiet = 0  # phases that show their own progress or output (a load's bar): no line meanwhile
        self.line: _Line | None = None

    @contextmanager
    def phase(self, name: str, *, quiet: bool = False) -> Iterator[None]:
        """Time the enclosed code as phase ``name`` (inside the phase running now, if any)."""
        stack = self._here()
        full = f"{stack[-1]}/{name}" if stack else name
        with self._lock:
            self.seconds.setdefault(full, 0.0)
            if stack and len(stack) == self._carried.get(threading.get_ident()):  # right under a carried phase
                self.beside.add(full)
        stack.append(full)
        if quiet:
            self._hush(+1)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self.seconds[full] += time.perf_counter() - t0
            if quiet:
                self._hush(-1)
            stack.pop()

    def _here(self) -> list[str]:
        """The phases open on this thread."""
        ident = threading.get_ident()
        if ident == self._owner:
            return self.stack
        with self._lock:
            return self._stacks.setdefault(ident, [])

    def innermost_here(self) -> str:
        """The innermost phase open on this thread ("" for none)."""
        stack = self._here()
        return stack[-1] if stack else ""

    @contextmanager
    def under(self, outer: str) -> Iterator[None]:
        """This thread's phases, inside the block, nest in ``outer`` (a phase of another thread, not timed here)."""
        stack = self._here()
        ident = threading.get_ident()
        was = self._carried.get(ident)
        if outer:
            stack.append(outer)
            self._carried[ident] = len(stack)
        try:
            yield
        finally:
            if outer:
                stack.pop()
                if was is None:
                    self._carried.pop(ident, None)
                else:
                    self._carried[ident] = was

    def _hush(self, step: int) -> None:
        """Count a quiet phase in or out; the line is erased before the phase's own output begins."""
        line = self.line
        if line is None:
            self.quiet += step
            return
        with line.lock:
            self.quiet += step
            line.erase()

    @property
    def total(self) -> float:
        """Seconds since tracking began."""
        return time.perf_counter() - self.started

    def current(self) -> str:
        """The innermost phase running now ("" outside every phase; read from another thread)."""
        try:
            return self.stack[-1]
        except IndexError:
            return ""

    def table(self) -> list[tuple[str, float]]:
        """(phase, seconds) in order, each phase followed by the phases inside it and the time spent in
        it outside them (``<phase>/other``, where that is at least 1 ms), then ``total``."""
        names = list(self.seconds)
        out: list[tuple[str, float]] = []

        def walk(parent: str) -> None:
            kids = [n for n in names if n.rpartition("/")[0] == parent]
            for n in kids:
                out.append((n, self.seconds[n]))
                walk(n)
            here = [n for n in kids if n not in self.beside]  # those beside overlap the parent's own time
            if parent and here and (other := self.seconds[parent] - sum(self.seconds[n] for n in here)) >= 0.001:
                out.append((f"{parent}/other", other))

        walk("")
        out.append(("total", self.total))
        return out

    def format(self) -> str:
        """The timings as lines of text: each phase indented under its parent, in seconds."""
        beside = f"; {BESIDE_MARK}: run on another thread, beside the rest" if self.beside else ""
        lines = [f"profuse: timings of {self.label} (wall seconds{beside})"]
        for name, s in self.table():
            depth = name.count("/")
            shown = name.rpartition("/")[2] + (f" {BESIDE_MARK}" if name in self.beside else "")
            lines.append(f"  {'  ' * depth}{shown:<{34 - 2 * depth}} {s:8.3f}")
        return "\n".join(lines)


_active: Phases | None = None


@contextmanager
def phase(name: str, *, quiet: bool = False) -> Iterator[None]:
    """Time the enclosed code as phase ``name`` of the command being tracked (see :func:`tracking`);
    ``quiet``: the phase shows its own progress, so the line waits meanwhile. A no-op when none is."""
    rec = _active
    if rec is None:
        yield
        return
    with rec.phase(name, quiet=quiet):
        yield


def carried(fn: Callable[[], R]) -> Callable[[], R]:
    """``fn``, to be run on another thread: the phases it marks there nest in the phase running here now
    (``fn`` itself where no command is tracked)."""
    rec = _active
    if rec is None:
        return fn
    outer = rec.innermost_here()

    def run() -> R:
        with rec.under(outer):
            return fn()
    return run


def timed(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A decorator: each call of the function is :func:`phase` ``name``."""
    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            if _active is None:
                return fn(*args, **kwargs)
            with phase(name):
                return fn(*args, **kwargs)
        return run
    return wrap


@contextmanager
def tracking(label: str, *, stream: TextIO | None = None) -> Iterator[Phases]:
    """Record the phases of the enclosed command (``label``: what it is, for the line and the timings),
    with the progress line on ``stream`` (default stderr) where that is a terminal."""
    global _active
    rec, outer = Phases(label), _active
    _active = rec
    out = stream if stream is not None else sys.stderr
    line = rec.line = _Line(rec, out) if _is_tty(out) else None
    try:
        yield rec
    finally:
        if line is not None:
            line.stop()
        _active = outer


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _Line:
    """The progress line, drawn from a daemon thread (the analyses never wait on it); ``lock`` is held
    while it writes, so a quiet phase erases it before anything else is printed."""

    def __init__(self, rec: Phases, out: TextIO) -> None:
        self.rec, self.out, self.shown = rec, out, False
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="profuse-progress", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from .errors import printable

        while not self.done.wait(LINE_EVERY_S):
            rec = self.rec
            if rec.total < LINE_AFTER_S:
                continue
            with self.lock:
                if rec.quiet or self.done.is_set():
                    continue
                text = printable(f"profuse: {rec.label}: {rec.current().replace('/', ': ') or 'working'} "
                                 f"({rec.total:.0f} s)")
                self._write(f"\r\x1b[2K{text[:150]}")
                self.shown = True

    def erase(self) -> None:
        """Erase the line if it is shown (the caller holds ``lock``)."""
        if self.shown:
            self._write("\r\x1b[2K")
            self.shown = False

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):
            self.done.set()

    def stop(self) -> None:
        """Stop drawing and erase the line."""
        self.done.set()
        self.thread.join()
        with self.lock:
            self.erase()
