"""A load started before the command has imported what it needs afterwards (analysis, renderers).

A cold ``profuse report`` used to import its libraries first (0.2-0.3 s of CPU: numpy, DuckDB, the
analyses) and only then read and scan the trace, with the second core idle. :func:`start_load` starts
a thread at once that reads the trace and scans it (the scan releases the GIL) before it imports the
rest of the loader, then runs :func:`profuse.trace.load`, which takes those bytes and that scan
(:func:`prefetched`) instead of reading and scanning again; the read, the scan and DuckDB's work
overlap the caller's imports. Where a cache of the trace's size exists nothing is read ahead (the
cache may answer).

Only where nothing can differ from loading in the caller's thread: one regular file named like a
Kineto trace (no folder, glob or snapshot), a strict load, and the compiled scanner on (the
reference path may fork decoding workers, which must not happen beside a thread importing modules).
Everywhere else the load runs when the result is asked for, exactly as before.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._glibc import one_arena
from .readahead import _ahead, _read_ahead, prefetched, prescanned

if TYPE_CHECKING:
    from .trace import Trace

TRACE_SUFFIXES = (".json", ".json.gz")
__all__ = ["TRACE_SUFFIXES", "_ahead", "_read_ahead", "prefetched", "prescanned", "start_load"]


def start_load(path: str, **options: Any) -> Callable[[], Trace]:
    """Start ``load(path, **options)``; the function returned waits for it and gives the trace or
    raises what the load raised. Call it once."""
    from .open_trace import load

    # before any thread starts, early or not: the load's heap reuse holds on every thread, and a report's analyses
    # on two threads reuse each other's freed blocks (trace/_glibc.py)
    one_arena()
    if not _may_start_early(path, options):
        return lambda: load(path, **options)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            _read_ahead(path, options)
            box["trace"] = load(path, **options)
        except BaseException as err:  # handed to the caller's thread, which raises it
            box["error"] = err
        finally:
            _ahead.__dict__.clear()

    # a daemon: a caller that stops (an error, Ctrl-C) before asking for the trace does not wait for it
    worker = threading.Thread(target=run, name="profuse-load", daemon=True)
    worker.start()

    def result() -> Trace:
        worker.join()
        if "error" in box:
            raise box.pop("error")
        trace: Trace = box.pop("trace")
        return trace

    return result


def _may_start_early(path: str, options: dict[str, Any]) -> bool:
    if options.get("lenient") or os.environ.get("PROFUSE_SCANNER", "1") == "0" or not _scanner_built():
        return False
    name = os.path.basename(path).lower()
    if not name.endswith(TRACE_SUFFIXES) or not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as fh:
            return fh.read(1) != b"\x80"  # a pickle named .json: a memory snapshot (trace/snapshot.py)
    except OSError:
        return False


def _scanner_built() -> bool:
    """Whether the compiled scanner can be imported (cheap: it imports nothing but the C API)."""
    if os.environ.get("PROFUSE_SCAN_LIB"):
        return True
    try:
        from . import _scan  # noqa: F401
    except ImportError:
        return False
    return True
