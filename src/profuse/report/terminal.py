"""The report's console, made without importing the report's records (a cached report prints its kept
text on it), and the one rule every string it prints obeys: no control sequence reaches the terminal.

A trace names its device, ops, modules, kernels, annotations and threads; any of them can hold ANSI
escapes (``ESC ]52;`` writes the clipboard, ``ESC [2J`` clears the screen), other C0 or C1 controls,
DEL or bidi controls. Renderers show such names through :func:`._text.text`, which escapes them before
rich lays a table out; the render hook here is the net under that: every segment of everything printed
on a :class:`TerminalConsole` (or inside :func:`printable_on` on any console) has its control characters
written as visible escapes, so a section that forgets ``text()`` still prints no control sequence.
"""
from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar

from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderHook, RenderResult
from rich.measure import Measurement
from rich.segment import Segment

from ..errors import printable

P = ParamSpec("P")
R = TypeVar("R")


def shown(text: str) -> str:
    """``text`` with every control character but the line break written as a visible escape."""
    if text.isprintable():
        return text
    return "\n".join(printable(line) for line in text.split("\n"))


class _Printable:
    """A renderable printed as ``inner`` would be, with the text of its segments made :func:`shown`
    (rich's own control segments, cursor moves for a live display, pass as they are)."""

    def __init__(self, inner: ConsoleRenderable) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for seg in console.render(self.inner, options):
            yield seg if seg.control or seg.text.isprintable() else Segment(shown(seg.text), seg.style)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.inner)


class PrintableHook(RenderHook):
    """Makes every renderable a console prints :class:`_Printable`."""

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        """Each renderable wrapped once (a console inside :func:`printable_on` twice wraps it once)."""
        return [r if isinstance(r, _Printable) else _Printable(r) for r in renderables]


class TerminalConsole(Console):
    """A rich ``Console`` that prints no control sequence from its input: every renderable passes
    through :class:`PrintableHook`; strings are never parsed as markup or emoji codes."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        kwargs.setdefault("emoji", False)
        super().__init__(**kwargs)
        self.push_render_hook(PrintableHook())


def make_console(**kwargs: Any) -> Console:
    """Stdout console (or ``file=``) as wide as the terminal, or as ``COLUMNS`` says where it is set; 200
    columns when piped without ``COLUMNS`` (a file or ``grep`` reads most names whole: tables shorten in the
    middle only a name longer than what the other columns leave; ``--format json`` has every name whole)."""
    kwargs.setdefault("soft_wrap", False)
    if "width" not in kwargs:
        out = kwargs.get("file") or sys.stdout
        kwargs["width"] = None if out.isatty() or _columns_set() else 200
    return TerminalConsole(**kwargs)


def _columns_set() -> bool:
    """``COLUMNS`` holds a width (rich reads it itself where the width is left to it)."""
    return os.environ.get("COLUMNS", "").strip().isdigit()


@contextmanager
def printable_on(console: Console) -> Iterator[Console]:
    """``console`` printing through :class:`PrintableHook` while the block runs (a console of
    :func:`make_console` always does)."""
    if isinstance(console, TerminalConsole):
        yield console
        return
    console.push_render_hook(PrintableHook())
    try:
        yield console
    finally:
        console.pop_render_hook()


def renders_printable(render: Callable[Concatenate[Console, P], R]) -> Callable[Concatenate[Console, P], R]:
    """A renderer (its first argument the console) that prints through :func:`printable_on`, whichever
    console it is given."""

    @functools.wraps(render)
    def wrapper(console: Console, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with printable_on(console):
            return render(console, *args, **kwargs)

    return wrapper
