"""Pieces shared by subcommands: loading with a progress bar, the console."""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import io

    from rich.console import Console
    from rich.progress import Progress

    from ..payloads.report import ReportView
    from ..trace import Trace


def console(**kwargs: Any) -> Console:
    """The report console, on which no string from a trace prints a control sequence (report/terminal.py;
    rich is imported on first use, so --help and argument errors stay fast)."""
    from ..report.terminal import make_console

    return make_console(**kwargs)


def add_load_args(p: argparse.ArgumentParser) -> None:
    """Add the options every trace-loading command shares (--lenient, --no-cache, --cache-dir, ...)."""
    p.add_argument("--lenient", action="store_true",
                   help="load what can be read; skip bad events and report how many")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the table cache")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="where table caches go (default: $PROFUSE_CACHE_DIR, else ~/.cache/profuse)")


class _LazyBar:
    """A progress bar (on a terminal only) that appears once a load has taken more than a second."""

    def __init__(self, label: str) -> None:
        self.label, self.start = label, time.monotonic()
        self.bar: Progress | None = None
        self.task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            # not on a pipe or a file: a bar there is noise, and its last frame leaves a lone newline
            if time.monotonic() - self.start < 1.0 or not sys.stderr.isatty():
                return
            from rich.console import Console
            from rich.markup import escape
            from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

            from ..errors import printable

            self.bar = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                                TransferSpeedColumn(), TimeRemainingColumn(),
                                console=Console(stderr=True), transient=True)
            self.bar.start()
            # the label holds a path: never markup ("[/x]" in a folder name), never a control sequence
            self.task = self.bar.add_task(escape(printable(self.label)), total=total)
        self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def warm_imports(*modules: str) -> None:
    """Import third-party ``modules`` on another thread while the caller loads a trace.

    Hashing the trace and opening its cache mostly run outside the GIL, so on a second core the
    imports cost no wall time. Only leaf libraries that import nothing of profuse's belong here (no
    import-lock cycles with the loading thread); a failure is left for the caller's own import to
    report, where the module is used.
    """
    import importlib
    import threading

    def run() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:
                return

    # not a daemon: interpreter exit waits for it, never stopping an extension module mid-import
    threading.Thread(target=run, name="profuse-warm-imports").start()


def load_trace(path: str, args: argparse.Namespace, *, verify: Literal["first", "behind"] = "first") -> Trace:
    """Load ``path`` as the command line asked, with a progress bar once loading takes over a second
    (``verify``: as :func:`profuse.trace.load` takes it)."""
    from ..trace import load

    bar = _LazyBar(f"loading {path}")
    try:
        trace = load(path, lenient=getattr(args, "lenient", False), cache=not getattr(args, "no_cache", False),
                     progress=bar, cache_dir=getattr(args, "cache_dir", None), verify=verify)
    finally:
        bar.close()
    return _noted(path, trace)


def start_load_trace(path: str, args: argparse.Namespace) -> Callable[[], Trace]:
    """:func:`load_trace` started now, on a thread where that changes nothing but the time
    (trace/early.py), so the caller's imports overlap the read and scan; call the result for the trace."""
    from ..trace.early import start_load

    bar = _LazyBar(f"loading {path}")
    pending = start_load(path, lenient=getattr(args, "lenient", False), cache=not getattr(args, "no_cache", False),
                         progress=bar, cache_dir=getattr(args, "cache_dir", None))

    def finish() -> Trace:
        try:
            trace = pending()
        finally:
            bar.close()
        return _noted(path, trace)

    return finish


def _noted(path: str, trace: Trace) -> Trace:
    """``trace``, its notes printed on stderr (a note may quote a name from the trace: made printable)."""
    from ..errors import printable
    from ..redact import redact_text

    for note in trace.notes:
        print(f"profuse: note: {printable(redact_text(note))}", file=sys.stderr)
    source = trace.meta.get("source")
    if isinstance(source, dict) and source.get("note"):  # e.g. neuron-explorer Parquet: say how far it is checked
        print(printable(f"profuse: note: {path} read as {source.get('format')}: {source['note']}"), file=sys.stderr)
    return trace


def emit(text: str, output: str | None, *, json_document: bool = False) -> int:
    """Print ``text``, or write it with a final newline to ``output`` in one atomic step; exit code 0.
    ``json_document``: ``text`` is an indented JSON document (``render_json``'s), which the output boundary
    redacts line by line (:func:`profuse.redact.redact_json`: the same text, in a fraction of the time)."""
    from ..redact import output_redacted, redact_json, write_passed

    passed = json_document and output_redacted()
    if passed:
        text = redact_json(text)   # what passes the boundary: written beneath it (bytes: atomic_write's raw path)
    if output:
        from .._io import atomic_write

        atomic_write(output, (text + "\n").encode() if passed else text + "\n")
    elif passed:
        write_passed(sys.stdout, text + "\n")
    else:
        print(text)
    return 0


def count(value: str) -> int:
    """A whole number >= 0; anything else is a usage error (exit 2)."""
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number, 0 or more (0 = all), not {value!r}")
    return n


def report_console(output: str | None) -> tuple[Console, io.StringIO | None]:
    """The console a table report is printed on: stdout's, or a plain-text one into a buffer for ``output``."""
    if output:  # the table as plain text in a file
        import io

        buf = io.StringIO()
        return console(file=buf, width=200, color_system=None), buf
    return console(), None


def print_view(view: ReportView, output: str | None,
               on: tuple[Console, io.StringIO | None] | None = None) -> int:
    """Print the report as a table on the terminal, or as plain text to ``output`` (on the console
    :func:`report_console` gave, when given); exit code 0."""
    from .._io import atomic_write
    from ..report.console import print_report

    con, buf = on or report_console(output)
    print_report(con, view)
    if output and buf is not None:
        atomic_write(output, buf.getvalue())
        print(f"wrote {output}")
    return 0
