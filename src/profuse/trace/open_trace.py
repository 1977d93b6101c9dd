"""Finding a trace and opening its cache: what a cached load needs, without the decoder.

``load`` here answers from the cache when the trace's bytes are unchanged and imports the decoder
(numpy, msgspec, the scanner, correlation) only when the trace has to be decoded, so a cached
``profuse sql`` costs hashing the trace and the cache file (both are checked) and DuckDB opening it
(the explorer's ``verify="behind"`` hashes the trace on a thread instead, checked before anything is shown).
"""
from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..errors import TraceError
from .sniff import PERFETTO_SUFFIXES, is_perfetto_path

if TYPE_CHECKING:
    from .trace import Trace

TRACE_NAMES = ("trace.json.gz", "trace.json")
MAPPING_PATTERN = "framework_mapping_*.json"  # TorchNeuron's side files: never the trace itself


def resolve(path: str | os.PathLike[str]) -> Path:
    """A trace file, or the trace inside a bundle folder; only regular files are accepted."""
    p = Path(path)
    if p.is_dir():
        for name in TRACE_NAMES:
            if (p / name).exists() or (p / name).is_symlink():
                return _regular(p / name)
        found = _trace_files(p)
        if len(found) == 1:
            return _regular(found[0])
        if not found:
            raise TraceError(p, "is a folder with no trace in it (expected trace.json.gz, or one *.json[.gz] "
                                "or *.pftrace[.gz])")
        raise TraceError(p, f"holds {len(found)} traces; name one of them: {', '.join(q.name for q in found[:4])} "
                            "(`profuse report` on the folder gives one report over all of them as ranks)")
    if not p.exists():
        raise TraceError(p, "no such file")
    return _regular(p)


def _trace_files(folder: Path) -> list[Path]:
    """Entries of ``folder`` named like a Kineto trace (``*.json``, ``*.json.gz``), mapping files aside."""
    return sorted(q for q in folder.iterdir() if q.name.endswith((".json", ".json.gz", ".pt.trace.json", *PERFETTO_SUFFIXES))
                  and not q.match(MAPPING_PATTERN))


def _holds_kineto_trace(folder: Path) -> bool:
    """Whether :func:`resolve` would find (or complain about) a Kineto JSON trace in ``folder``."""
    return any((folder / n).exists() or (folder / n).is_symlink() for n in TRACE_NAMES) or any(
        not q.name.endswith(PERFETTO_SUFFIXES) for q in _trace_files(folder))


def _regular(p: Path) -> Path:
    """``p`` if it is a regular file (links followed); FIFOs and devices would block or never end."""
    try:
        mode = p.stat().st_mode
    except OSError as err:
        raise TraceError(p, f"cannot be read ({err.strerror})") from None
    if stat.S_ISDIR(mode):
        raise TraceError(p, "is a folder, not a trace file")
    if not stat.S_ISREG(mode):
        raise TraceError(p, f"is not a regular file (a {_file_kind(mode)}); give a .json, .json.gz or .pftrace file")
    return p


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
             (stat.S_ISSOCK, "socket"))
    return next((label for test, label in kinds if test(mode)), "special file")


def load(
    path: str | os.PathLike[str], *, lenient: bool = False, cache: bool = True,
    progress: Callable[[int, int], None] | None = None, cache_dir: str | os.PathLike[str] | None = None,
    verify: Literal["first", "behind"] = "first",
) -> Trace:
    """Load a trace: from a verified cache when one matches the file's bytes, else decode it.

    The tables are built in memory and returned at once; the cache file is written behind, on a
    background thread, and :meth:`Trace.close` (or interpreter exit) waits for it. A cache that
    cannot be written costs only the next load's time: the tables in memory are complete either way.
    A trace of COMPRESS_MIN_EVENTS (1 M) events and more is built into its cache file instead (DuckDB
    compresses what goes in, as it would compress it in memory), and read from it: nothing is written
    behind; where that file cannot be written (a full disk), the trace is built again in memory, uncached,
    with a note.
    Caches go to ``cache_dir`` (default: the user cache folder, see :mod:`profuse.trace.cache`); no
    cache is read or written when that folder is not writable or with ``lenient`` (a strict load of
    the same bytes must still refuse what it skipped), and none is written for a trace that built in
    under ``$PROFUSE_CACHE_MIN_SECONDS`` (0.05 s). A damaged cache is discarded and rebuilt, with a note in
    ``Trace.notes``; one of another schema version is replaced without a note. A folder of
    neuron-explorer Parquet tables (and no Kineto trace) is built in memory, uncached.

    ``verify``: "first" (the default) hashes the trace before its cache is opened, so the tables are
    always those of the file's bytes. "behind" opens the cache the file's stat entry names (the same
    device, inode, size, mtime and ctime as when it was last hashed; see :mod:`profuse.trace.cache`)
    without hashing, and hashes the trace on a thread meanwhile: ``Trace.source_check`` then says
    whether its bytes were those of the tables, and its ``reload()`` loads them hashing first. A caller
    that asks for "behind" must wait for ``source_check.wait()`` before it shows anything from the tables
    (the explorer does: no payload leaves it before its trace's bytes are checked). With no stat entry
    (or another stat), "behind" is "first".
    """
    folder = Path(path)
    if folder.is_dir() and not _holds_kineto_trace(folder):
        from ..neuron import explorer_parquet  # a neuron-explorer Parquet folder (imported late: it uses trace/)

        if explorer_parquet.is_explorer_folder(folder):
            return explorer_parquet.load_folder(folder)
        from . import perfetto

        if perfetto.is_explorer_export(folder):  # neuron-explorer's --output-format perfetto folder
            return with_bundle(with_mapping(perfetto.load_folder(folder, lenient=lenient)))
    from .cache import cache_folder

    src = resolve(path)
    if is_perfetto_path(src):  # a Perfetto protobuf trace: built in memory, uncached (trace/perfetto.py)
        from . import perfetto

        return with_bundle(with_mapping(perfetto.load_file(src, lenient=lenient)))
    notes: list[str] = []
    caches = cache_folder(cache_dir) if cache and not lenient else None
    if caches is not None:
        reload = functools.partial(load, path, lenient=lenient, cache=cache, progress=progress, cache_dir=cache_dir)
        cached = _from_cache(src, caches, verify, notes, reload)
        if cached is not None:
            return cached
    from .build import build

    return with_bundle(with_mapping(_caching(build(src, cache_folder=caches, notes=notes, lenient=lenient,
                                                   progress=progress), caches)))


def _from_cache(src: Path, caches: Path, verify: str, notes: list[str], reload: Callable[[], Trace]) -> Trace | None:
    """The trace from its verified cache in ``caches`` (see :func:`load`'s ``verify``), or None (a note in
    ``notes`` where a damaged cache was found): the build then hashes the bytes it decodes."""
    from .cache import (
        CacheSlot,
        SourceCheck,
        discard,
        fingerprint,
        fingerprint_by_stat,
        holds_cache_of_size,
        slot_key,
        stat_path,
    )
    from .trace import Trace

    # With no cache of this size in the folder, no hash can find one: the trace is hashed while it is
    # decoded (the new cache is keyed by the bytes decoded, whatever happens to the file meanwhile).
    if not holds_cache_of_size(caches, src.stat().st_size):
        return None
    by_stat = fingerprint_by_stat(caches, src) if verify == "behind" else None
    fp = by_stat or fingerprint(src, record_in=caches)
    cached, problem = CacheSlot(caches, slot_key(fp)).open_if_valid(fp)
    if cached is not None:
        trace = Trace(src, cached, from_cache=True, notes=notes)
        if by_stat is not None:
            trace.source_check = SourceCheck(src, fp, caches, reload)
        return with_bundle(with_mapping(_caching(trace, caches)))
    if by_stat is not None:  # an entry naming no usable cache: the build below hashes the bytes it decodes
        discard(stat_path(caches, src))
    if problem is not None:
        notes.append(f"cache {problem}; tables rebuilt from the trace")
    return None


def _caching(trace: Trace, folder: Path | None) -> Trace:
    """``trace`` with the folder its derived results are kept in (``Trace.derived``)."""
    trace.cache_folder = folder
    return trace


def with_bundle(trace: Trace) -> Trace:
    """A profuse bundle's meta.json beside the trace, as ``Trace.bundle`` (what was wrong with it, as notes)."""
    if not os.path.lexists(trace.path.parent / "meta.json"):  # a plain trace: no record, no msgspec import
        return trace
    from .bundle import read_bundle_meta

    trace.bundle, notes = read_bundle_meta(trace.path.parent)
    trace.notes.extend(notes)
    trace.side_notes.extend(notes)
    return trace


def with_mapping(trace: Trace) -> Trace:
    """TorchNeuron's framework_mapping_*.json beside the trace, as the ``framework_mapping`` view."""
    if not any(trace.path.parent.glob(MAPPING_PATTERN)):
        return trace
    from . import framework_mapping

    try:
        trace.framework_mapping = framework_mapping.attach(trace.con, trace.path)
    except BaseException:
        trace.close()
        raise
    skipped = (trace.framework_mapping or {}).get("skipped")
    if skipped:
        trace.notes.append(f"{skipped:,} framework_mapping record(s) skipped: no integer runtime sequence id "
                           "or op sequence number")
        trace.side_notes.append(trace.notes[-1])
    return trace
