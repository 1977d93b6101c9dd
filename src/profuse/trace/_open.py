"""Finding a trace and opening its cache: what a cached load needs, without the decoder.

``load`` here answers from the cache when the file is unchanged and imports the decoder (numpy,
msgspec, the scanner, correlation) only when the trace has to be decoded, so a cached
``profuse sql`` starts in the time DuckDB takes to open a file.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import TraceError

if TYPE_CHECKING:
    from .trace import Trace

TRACE_NAMES = ("trace.json.gz", "trace.json")


def resolve(path: str | os.PathLike[str]) -> Path:
    """A trace file, or the trace inside a bundle folder."""
    p = Path(path)
    if p.is_dir():
        for name in TRACE_NAMES:
            if (p / name).is_file():
                return p / name
        found = sorted(q for q in p.iterdir() if q.name.endswith((".json", ".json.gz", ".pt.trace.json")))
        if len(found) == 1:
            return found[0]
        if not found:
            raise TraceError(p, "is a folder with no trace in it (expected trace.json.gz or one *.json[.gz])")
        raise TraceError(p, f"holds {len(found)} traces; name one of them: {', '.join(q.name for q in found[:4])}")
    if not p.exists():
        raise TraceError(p, "no such file")
    return p


def load(
    path: str | os.PathLike[str], *, lenient: bool = False, cache: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> Trace:
    """Load a trace: from its cache when the file is unchanged, else decode it and write the cache.

    The tables are built in memory and returned at once; the cache file is written behind, on
    another core, and :meth:`Trace.close` (or interpreter exit) waits for it. A cache that cannot be
    written costs only the next load's time: the tables in memory are complete either way.
    """
    src = resolve(path)
    if cache and not lenient:
        from .cache import cache_slot, fingerprint
        from .trace import Trace

        slot = cache_slot(src)
        cached = slot.open_if_valid(fingerprint(src)) if slot is not None else None
        if cached is not None:
            return Trace(src, cached, from_cache=True)
    from .loader import load as decode_and_load

    return decode_and_load(src, lenient=lenient, cache=cache, progress=progress)
