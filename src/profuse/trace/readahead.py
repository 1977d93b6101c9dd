"""What a load started early (trace/early.py) read and scanned ahead on its thread, for the build
(trace/build.py) to take once: kept apart from ``early`` so that the build, which ``early``'s load
runs, does not import its caller."""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._decode import TraceBytes
    from ._native import RawScan

_ahead = threading.local()  # this thread's read-ahead: only the load on the same thread takes it


def _read_ahead(path: str, options: dict[str, Any]) -> None:
    """Read and scan ``path`` as the load will (the same functions), unless a cache may answer; a
    read that fails leaves nothing, and the load's own read then fails the same way."""
    if options.get("cache", True):  # checked first: a cached load imports no decoder
        from .cache import cache_folder, holds_cache_of_size

        try:
            folder = cache_folder(options.get("cache_dir"))
            if folder is not None and holds_cache_of_size(folder, os.stat(path).st_size):
                return
        except OSError:  # gone or unreadable: the load says so in its own words
            return
    from . import _decode, _native

    try:
        data, gzip_hash = _decode.read_trace(path, map_ok=True)  # build.py checks a mapping when done with it
    except Exception:
        return
    _ahead.read = (str(Path(path)), data, gzip_hash)
    _ahead.scan = (data, _native.raw_scan_document(data))


def prefetched(path: str) -> tuple[TraceBytes, tuple[str, int] | None] | None:
    """The bytes (and gzip hash) this thread read ahead for ``path`` (:func:`_decode.read_trace`'s
    answer), once; None where it read nothing."""
    found = getattr(_ahead, "read", None)
    if found is None or found[0] != path:
        return None
    del _ahead.read
    return found[1], found[2]


def prescanned(data: TraceBytes) -> RawScan | None:
    """The scanner's answers for exactly these bytes, where this thread scanned them ahead; once."""
    found = getattr(_ahead, "scan", None)
    if found is None or found[0] is not data:
        return None
    del _ahead.scan
    raw: RawScan = found[1]
    return raw
