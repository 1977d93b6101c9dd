"""Build the DuckDB tables of a Kineto trace: decode, correlate, write, cache (``load`` in load.py opens one)."""
from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import msgspec
import numpy as np

from ..errors import TraceError
from . import _decode, _glibc, _native, readahead
from . import memory as _memory
from ._columns import Columns, add_chunk
from ._parallel import decode_parallel, worker_count
from ._prepare import Prepared, base_time_ns, prepare
from ._privateuse1 import privateuse1_name
from ._write import (
    checkpoint_before_events,
    write_correlated_tables,
    write_directions,
    write_events,
    write_flows,
    write_instants,
    write_meta,
    write_shapes,
)
from .arrays import distinct
from .cache import (
    CacheSlot,
    CacheWriter,
    building_path,
    discard,
    fingerprint_of_bytes,
    fingerprint_of_hash,
    slot_key,
    sql_string,
)
from .correlate import UNLINKED, correlated, nested_in_own_name, unmatched_flows
from .event_columns import EventColumns, kind_mask
from .meta import listed_device
from .schema import DDL, KIND_CODE, KINDS, SCHEMA_VERSION
from .trace import Trace
from .vocabulary import device, moves_work, named_by_categories

COMPRESS_MIN_EVENTS = 1_000_000

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


def build(src: Path, *, cache_folder: Path | None, notes: list[str], lenient: bool = False,
          progress: Progress | None = None) -> Trace:
    """Decode ``src`` into in-memory tables and start writing them to a cache in ``cache_folder``
    behind, or, from COMPRESS_MIN_EVENTS events, into that cache file itself (:func:`_file_tables`; see
    :func:`profuse.trace.load`, which tries the cache first).

    The cache is keyed by the fingerprint of the bytes decoded (hashed on another thread while they
    are decoded), never by an earlier or later read of the file, which may have changed meanwhile.
    """
    with _load_settings():
        try:
            return _build_again_where_needed(src, cache_folder=cache_folder, notes=notes, lenient=lenient,
                                             progress=progress)
        except (MemoryError, duckdb.OutOfMemoryException):
            raise TraceError(str(src), "does not fit in the memory left: a load needs about the trace's "
                                       "JSON size, more for a small one or with --lenient (see docs/input.md)"
                             ) from None


def _build_again_where_needed(src: Path, *, cache_folder: Path | None, notes: list[str], lenient: bool,
                              progress: Progress | None) -> Trace:
    """:func:`_build`, built again where it could not finish, each way at most once and in either order: read
    (not mapped) where the mapped file changed meanwhile, in memory (uncached) where its tables' file could not
    be written (the disk filled, say). A build's notes are thrown away with it, but the failed file's."""
    added, carried = len(notes), []
    options: dict[str, Any] = {"cache_folder": cache_folder, "map_ok": True, "scratch": True}
    while True:
        try:
            return _build(src, notes=notes, lenient=lenient, progress=progress, **options)
        except _SourceChanged:  # the file changed while it was mapped: read it, as it is now
            if not options["map_ok"]:
                raise
            options["map_ok"] = False
        except _CacheFileFailed as failed:
            if not options["scratch"]:
                raise
            what = "cache file" if cache_folder is not None else "temporary tables file"
            carried.append(f"{what} not written ({failed}); tables built in memory")
            options.update(cache_folder=None, scratch=False)
        del notes[added:]
        notes.extend(carried)


class _SourceChanged(Exception):
    """The mapped trace file changed (cut short, written, replaced in place) while it was decoded."""


class _CacheFileFailed(Exception):
    """Tables being built into their cache file (:func:`_file_tables`) could not be written there."""


_PAUSED_LOCK = threading.Lock()
_gc_was_on = False  # whether the cycle collector was on when the first of the running builds began
_huge_was_on = False  # numpy's 2 MB-page advice then
_paused_builds = 0


def _numpy_hugepage_switch() -> Callable[[bool], bool] | None:
    """numpy's own switch of its madvise(MADV_HUGEPAGE) on arrays of 4 MB and more (it returns the
    setting it replaces; numpy >= 2 keeps it in numpy._core, older ones in numpy.core), or None."""
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            switch = getattr(importlib.import_module(module), "_set_madvise_hugepage", None)
        except ImportError:
            continue
        if callable(switch):
            return switch  # type: ignore[no-any-return]
    return None


_HUGEPAGE_SWITCH = _numpy_hugepage_switch()


class _GlibcHeap:
    """glibc's malloc thresholds for big arrays (mallopt and malloc_trim, reached through trace/_glibc.py).

    glibc gives every block over its mmap threshold (at most 32 MiB) fresh pages from the kernel and
    hands them back when it is freed, so each such numpy temporary, however short-lived, is faulted in
    anew, 4 KB at a time (numpy's 2 MB pages are off: see _load_settings). A 9.4 M-event trace's int64
    column is 75 MB: ``np.full`` took 4.4 ns per element at 9.4 M elements against 0.5 at 3.1 M, and
    ``correlated`` faulted 1.15 M times (164 k at 3.1 M events), so the load's per-event time grew with
    the size. :meth:`reusing` has blocks up to MMAP_MAX come from the heap, where a freed one serves
    the next (as smaller blocks always do); on leaving (the last of the threads using it) the thresholds
    become what a numpy process reaches by itself (glibc's largest dynamic mmap threshold, twice that to
    trim; glibc keeps them fixed from then on). 3 GB trace (9.4 M events), 2 cores: ``correlated``
    1.16 M -> 0.44-0.55 M faults, 4.1 -> 2.1-2.5 s CPU; 1 GB: as before.

    Only around the main thread's numpy passes (prepare, correlate), while the writer thread's DuckDB
    inserts are small: DuckDB allocates with the same malloc, and the events' inserts under these
    settings kept ~0.4 GB more of that load resident at its peak (4.1 -> 4.6 GB). :meth:`trim` hands the
    pages of the holes the passes leave back when correlate ends (kept, they were the load's peak while the
    events went in beside the memory tables), and again once the main thread's part is done.
    """

    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = _glibc.M_TRIM_THRESHOLD, -3
    MMAP_MAX = 1 << 30       # blocks up to this come from the heap while reusing, and as much is kept free
    DYNAMIC_MAX = _glibc.DYNAMIC_MAX

    def __init__(self) -> None:
        self._libc: Any = _glibc.libc()
        self._users = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def reusing(self) -> Iterator[None]:
        """Big blocks from the heap and kept there while inside (see the class docstring)."""
        libc = self._libc
        if libc is None:
            yield
            return
        with self._lock:
            if self._users == 0:
                libc.mallopt(self.M_MMAP_THRESHOLD, self.MMAP_MAX)
                libc.mallopt(self.M_TRIM_THRESHOLD, self.MMAP_MAX)
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    libc.mallopt(self.M_MMAP_THRESHOLD, self.DYNAMIC_MAX)
                    # a report's load leaves its freed blocks to the analysis (_glibc.keeping)
                    libc.mallopt(self.M_TRIM_THRESHOLD, self.MMAP_MAX if _glibc.keeps() else _glibc.TRIM_AFTER)

    def trim(self) -> None:
        """The heap's free pages back to the system (glibc's malloc_trim), where no thread is reusing."""
        with self._lock:
            if self._libc is not None and self._users == 0:
                self._libc.malloc_trim(0)


_HEAP = _GlibcHeap()


@contextlib.contextmanager
def _load_settings() -> Iterator[None]:
    """While any build runs (counted, so builds on several threads put things back only when the last
    one ends, as they were before the first began):

    - Python's cycle collector is paused: decoding allocates hundreds of thousands of long-lived objects
      (interned strings, shape rows, flow ids), whose allocation triggers collections that walk them
      all (measured 20-50 ms of a 0.35 s load). Reference counting frees as before; any cycle waits for
      the collector's next run.
    - numpy asks for no 2 MB pages (nor does the scanner, for its read buffer and its columns). A fresh
      2 MB page is cheaper than 512 small ones only where the kernel has it at hand. Where it does not
      (fragmented memory: direct compaction; a VM that hands freed memory back to its host, as these
      machines' virtio-balloon free page reporting does: the host must back it again) it costs far
      more. 1 GB synthetic trace, 2 cores, THP "madvise", 3 interleaved rounds: with 2 MB pages
      6.1-12.1 s (system time up to 4.8 s of a scan alone), without 3.0-3.5 s; at a quieter hour
      (6 rounds) medians 4.16 s with them, 4.11 s without; an earlier session (814b084, 5 pairs) had
      6.5 s with them against 7.2 s without. 200 MB of fresh 2 MB pages took 501 ms to touch here, then
      22-24 ms while the host still backed them; 4 KB pages 80-106 ms every time. So 2 MB pages win
      ~10% at best and lose 40-80% at worst: small pages fault more (1 GB: ~380 k -> ~750 k faults) at
      a cost that stays put.
    """
    global _paused_builds, _gc_was_on, _huge_was_on
    switch = _HUGEPAGE_SWITCH
    with _PAUSED_LOCK:
        if _paused_builds == 0:
            _gc_was_on = gc.isenabled()
            gc.disable()
            if switch is not None:
                _huge_was_on = switch(False)
        _paused_builds += 1
    try:
        yield
    finally:
        with _PAUSED_LOCK:
            _paused_builds -= 1
            if _paused_builds == 0:
                if _gc_was_on:
                    gc.enable()
                if switch is not None:
                    switch(_huge_was_on)


@contextlib.contextmanager
def bulk_settings() -> Iterator[None]:
    """What a report's analysis runs under (cli/report.py): the load's settings (:func:`_load_settings`: no cycle
    collector, no 2 MB pages) and big blocks reused from glibc's heap (:class:`_GlibcHeap`), whose free pages go
    back to the system at the end (not in a report: :func:`_glibc.keeping`). The analysis reads columns of
    every event several times over; without the reuse each big temporary is faulted in anew."""
    with _load_settings(), _HEAP.reusing():
        yield
    if not _glibc.keeps():   # a report's: the process ends soon after (_glibc.keeping)
        _HEAP.trim()


def _memory_events(path: str, data: _decode.TraceBytes, cols: Columns, *,
                   behind: bool) -> Callable[[], _memory.MemoryEvents | None]:
    """The trace's memory events (a call that gives them): as the scanner read them, else read from the
    text again, on another thread when ``behind``."""
    if not _memory.has_memory_events(cols.names):
        return lambda: None
    scanned = _memory.scanned_memory_events(cols)
    if scanned is not None:
        return lambda: scanned
    return (_behind if behind else _now)(functools.partial(_read_memory, path, data), "profuse-memory")


def _build(src: Path, *, cache_folder: Path | None, notes: list[str], lenient: bool,
           progress: Progress | None, map_ok: bool = True, scratch: bool = True) -> Trace:
    started = time.perf_counter()
    # With the scanner, DuckDB starts up with empty tables on another thread while the trace is decoded,
    # and the trace is hashed on another while it is prepared and correlated (on one core; the scan takes
    # two); the forked msgspec workers are then not used (forking after threads have started is unsafe).
    threads = _native.enabled() and not lenient
    connection = _behind(_empty_tables, "profuse-connect") if threads else None
    source = _MappedSource()
    try:
        data, gzip_hash = readahead.prefetched(str(src)) or _decode.read_trace(str(src), map_ok=threads and map_ok)
        source.hold(data)
        cols, top, skipped = decode(str(src), data=data, lenient=lenient, progress=progress, fork=not threads)
        # the [memory] events: as the scanner read them, else read (compiled, without the GIL) on another
        # thread while the tables are prepared; their bytes are let go when it is done
        memory = _memory_events(str(src), data, cols, behind=threads)
        fingerprint_of = _fingerprint_of(data, gzip_hash, behind=threads, then=source.checker(memory))
        notes.extend(cols.notes)
        del data
    except BaseException as err:
        if connection is not None:
            connection().close()
        source.raise_if_changed(err)
        raise
    con = connection() if connection is not None else _empty_tables()
    work: Path | None = None
    try:
        if cols.n >= COMPRESS_MIN_EVENTS:
            work = _file_tables(con, cache_folder, cols.n * 64) if cache_folder is not None else (
                _scratch_tables(con, cols.n * 64) if scratch else None)
            if work is None:
                _compressed_tables(con)
        fp = _write_tables(con, str(src), cols, top, fingerprint_of, skipped, memory_of=memory, parallel=threads)
        if work is not None:
            con.execute("USE memory; DETACH trace")  # checkpointed and closed: the cache file is whole
    except BaseException as err:
        con.close()
        if work is not None:
            discard(work)
            _drop_scratch_folder(work, scratch=cache_folder is None)
        source.raise_if_changed(err)
        if work is not None and isinstance(err, (duckdb.IOException, OSError)):
            raise _CacheFileFailed(str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                                   ) from err
        raise
    if cols.n >= COMPRESS_MIN_EVENTS and not _glibc.keeps():
        _hand_back_freed(con)
    del cols
    slot = CacheSlot(cache_folder, slot_key(fp)) if cache_folder is not None else None
    if work is not None:
        return _built_in_file(src, con, slot, work, notes)
    if time.perf_counter() - started < _min_cache_seconds():
        slot = None  # built faster than a cache opens: not worth a file
    writer = CacheWriter(con, slot) if slot is not None else None
    return Trace(src, con, from_cache=False, writer=writer, notes=notes)


class _MappedSource:
    """The trace file's mapping, where it was mapped rather than read (_decode.read_trace), until every
    reader of it is done: the scan, then the hash and the memory events read from the text (on their
    threads). :meth:`check` then asks it whether the file stayed as it was, and lets it go (its pages
    then leave the load's memory, as the read bytes did)."""

    def __init__(self) -> None:
        self._mapping: _decode.Mapped | None = None
        self._changed: bool | None = None  # None: not asked yet (or nothing mapped)
        self._lock = threading.Lock()

    def hold(self, data: object) -> None:
        if _decode.is_mapped(data):
            self._mapping = data

    def check(self) -> None:
        """:class:`_SourceChanged` where the mapped file changed while it was read; once asked, the answer stays."""
        with self._lock:
            if self._changed is None and self._mapping is not None:
                mapping, self._mapping = self._mapping, None
                self._changed = not mapping.intact()
            if self._changed:
                raise _SourceChanged

    def checker(self, memory_of: Callable[[], Any]) -> Callable[[], None] | None:
        """What the hash's thread runs after the hash: wait for the memory events (the other reader that
        may still run), then :meth:`check`; None where nothing was mapped."""
        if self._mapping is None:
            return None

        def after_hash() -> None:
            with contextlib.suppress(Exception):  # its own error reaches the build through memory_of
                memory_of()
            self.check()

        return after_hash

    def raise_if_changed(self, err: BaseException) -> None:
        """Where a build that read a mapped file fails (an error in its bytes, say) and the file changed
        meanwhile, the failure says nothing of the file as it is: :class:`_SourceChanged` instead. An
        interrupt (Ctrl-C) stays what it is."""
        if isinstance(err, Exception) and not isinstance(err, _SourceChanged):
            try:
                self.check()
            except _SourceChanged:
                raise _SourceChanged from err


def _read_memory(path: str, data: _decode.TraceBytes) -> _memory.MemoryEvents:
    text = _decode.as_bytes(data)  # a mapping is copied: the reader needs bytes' methods (off the common path)
    return _memory.read_memory_events(text, lambda: _decode.split_document(path, text).events)


def _now(work: Callable[[], T], name: str = "") -> Callable[[], T]:
    """``work`` run now; the returned call gives its result (the same shape as :func:`_behind`)."""
    result = work()
    return lambda: result


def _empty_tables() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection whose current database, ``trace``, is in memory and holds the empty tables."""
    con = duckdb.connect()
    try:
        con.execute("ATTACH ':memory:' AS trace; USE trace")
        con.execute(DDL)
    except BaseException:
        con.close()
        raise
    return con


def _compressed_tables(con: duckdb.DuckDBPyConnection) -> None:
    """``trace`` attached again, compressed in memory (at COMPRESS_MIN_EVENTS events and more: repeated
    kernel names and sparse columns would otherwise cost GBs; below that compressing costs more time
    than the memory is worth)."""
    con.execute("USE memory; DETACH trace; ATTACH ':memory:' AS trace (COMPRESS); USE trace")
    con.execute(DDL)


def _file_tables(con: duckdb.DuckDBPyConnection, folder: Path, room: int) -> Path | None:
    """``trace`` attached again as a new file in the cache folder (at COMPRESS_MIN_EVENTS events and
    more, where a cache is written): DuckDB compresses the tables into the cache file as they go in, where
    in memory it would compress them at checkpoints, and nothing is copied after the load. None (nothing
    changed) where the folder has less than ``room`` bytes free or the file cannot be made."""
    try:
        if shutil.disk_usage(folder).free < room:
            return None
    except OSError:
        return None
    work = building_path(folder)
    try:
        con.execute(f"USE memory; DETACH trace; ATTACH {sql_string(work)} AS trace; USE trace")
        con.execute(DDL)
    except duckdb.Error:
        con.execute("USE memory; DETACH DATABASE IF EXISTS trace; ATTACH ':memory:' AS trace; USE trace")
        discard(work)
        return None  # the caller's _compressed_tables makes the tables
    return work


def _scratch_tables(con: duckdb.DuckDBPyConnection, room: int) -> Path | None:
    """``trace`` attached again as a new file in a fresh temporary folder (tempfile's: ``$TMPDIR``), for a
    load of COMPRESS_MIN_EVENTS events and more without a cache folder (``--no-cache``, ``--lenient``): the
    rows are compressed into it as they go in, as into a cache file, where in memory DuckDB would hold
    up to 4 M of them uncompressed beside the numpy columns (a 1 GB trace's load then peaked at 1.9x its
    size). The file is removed once the tables are attached again to be read (:func:`_built_in_file`);
    None (nothing changed, the folder removed) where the temporary folder has no room or takes no file."""
    try:
        folder = Path(tempfile.mkdtemp(prefix="profuse-tables-"))
    except OSError:
        return None
    work = _file_tables(con, folder, room)
    if work is None:
        shutil.rmtree(folder, ignore_errors=True)
    return work


def _hand_back_freed(con: duckdb.DuckDBPyConnection) -> None:
    """What the load's inserts freed handed back to the system now, not held through the analysis.

    DuckDB's allocator (jemalloc, in its Linux wheels) keeps the pages its inserts freed for its next
    allocations, which the analysis (numpy, glibc's heap) never reuses; DuckDB hands them back, and trims
    glibc's heap, when its thread count changes (TaskScheduler::RelaunchThreads calls
    Allocator::FlushAll), so the count goes up by one and back. It takes about 2 ms, so it follows only a
    big build (a 1 GB trace's leaves 0.2-0.45 GB behind, a 50 MB trace's 25 MB). A DuckDB that refuses
    the setting keeps its pages: nothing else changes. Not where an analysis follows in the process
    (:func:`_glibc.keeping`): it reuses those pages.
    """
    with contextlib.suppress(duckdb.Error):
        row = con.execute("SELECT current_setting('threads')").fetchone()
        threads = int(row[0]) if row else 1
        con.execute(f"SET threads = {threads + 1}")
        con.execute(f"SET threads = {threads}")


def _built_in_file(src: Path, con: duckdb.DuckDBPyConnection, slot: CacheSlot | None, work: Path,
                   notes: list[str]) -> Trace:
    """The trace whose tables were built in ``work`` (:func:`_file_tables`, detached): the file moved into
    its cache slot and attached again, read-only, as ``trace``, so that the analysis reads it as it would a
    cache and no later write reaches it. Where there is no slot (:func:`_scratch_tables`) or the move fails,
    the file is read where it is, unlinked at once (DuckDB keeps reading the file it opened, and nothing is
    left behind even if the process is killed), or where that fails removed when the trace closes."""
    where: Path | None = None
    if slot is not None:
        with contextlib.suppress(OSError):
            where = slot.install(work)
    try:
        con.execute(f"ATTACH {sql_string(where or work)} AS trace (READ_ONLY); USE trace")
    except BaseException:
        con.close()
        discard(where or work)
        _drop_scratch_folder(work, scratch=slot is None)
        raise
    trace = Trace(src, con, from_cache=False, notes=notes)
    if where is None:
        try:
            os.unlink(work)
        except OSError:
            trace.closing.append(functools.partial(discard, work))
        _drop_scratch_folder(work, scratch=slot is None)
    return trace


def _drop_scratch_folder(work: Path, *, scratch: bool) -> None:
    """The temporary folder of :func:`_scratch_tables` (``scratch``) removed once its file is gone (only
    while empty)."""
    if scratch:
        with contextlib.suppress(OSError):
            work.parent.rmdir()


def _min_cache_seconds() -> float:
    try:
        return float(os.environ.get("PROFUSE_CACHE_MIN_SECONDS", "0.05"))
    except ValueError:
        return 0.05


def _fingerprint_of(data: _decode.TraceBytes, gzip_hash: tuple[str, int] | None, *, behind: bool,
                    then: Callable[[], None] | None = None) -> Callable[[], dict[str, Any]]:
    """The fingerprint of the bytes decoded: of the compressed bytes a gzip file inflated from
    (``gzip_hash``, taken as they were read), else of ``data`` itself, hashed on another thread when
    ``behind`` (the hash releases the GIL) or now; ``then`` runs after the hash, on its thread (a mapped
    file's check: the fingerprint then raises its error)."""
    if gzip_hash is not None:
        known = fingerprint_of_hash(*gzip_hash)
        return lambda: known

    def work() -> dict[str, Any]:
        windowed = _native.digest_releasing(data)  # a mapping: hashed a window at a time, its pages let go
        fp = fingerprint_of_bytes(data) if windowed is None else fingerprint_of_hash(*windowed)
        if then is not None:
            then()
        return fp

    if behind:
        return _behind(work, "profuse-hash")
    now = work()
    return lambda: now


T = TypeVar("T")


def _behind(work: Callable[[], T], name: str) -> Callable[[], T]:
    """Run ``work`` on another thread now; the returned call waits for its result (or raises its error)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = work()
        except BaseException as err:  # handed to the caller
            box["err"] = err

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()

    def result() -> T:
        thread.join()
        if "err" in box:
            raise box["err"]
        out: T = box["result"]
        return out

    return result


def decode(path: str, *, data: _decode.TraceBytes | None = None, lenient: bool = False,
           progress: Progress | None = None, fork: bool = True) -> tuple[Columns, dict[str, Any], _decode.Skipped]:
    """Read (unless ``data`` holds its bytes) and decode a trace into columns (all cores for big files),
    before any table is written.

    ``fork=False``: the msgspec path stays in this process (no forked workers).
    """
    data = _decode.read_bytes(path) if data is None else data
    skipped = _decode.Skipped()
    # the compiled scanner first, the whole document in one pass; anything it does not accept goes
    # down the reference path below (which then accepts, recovers or raises exactly as before)
    fast = _native.scan_document(data, raw=readahead.prescanned(data)) if not lenient and _native.enabled() else None
    if fast is not None and fast[1] is not None:
        if progress:
            progress(len(data), len(data))
        cols, top = fast[0], {k: _safe_json(v) for k, v in fast[1].items()}
    else:  # the reference reads bytes (a mapping is copied: off the common path)
        cols, top = _decode_reference(path, _decode.as_bytes(data), lenient=lenient, skipped=skipped,
                                      progress=progress, fork=fork)
    try:
        base_time_ns(path, top.get("baseTimeNanoseconds"))
    except TraceError as err:
        if not lenient:
            raise TraceError(path, err.problem + " (use --lenient to ignore it)") from None
        skipped.add("baseTimeNanoseconds ignored", err.problem)  # times stay relative to the trace
        top.pop("baseTimeNanoseconds")
    return cols, top, skipped


def _decode_reference(path: str, data: bytes | bytearray, *, lenient: bool, skipped: _decode.Skipped,
                      progress: Progress | None, fork: bool) -> tuple[Columns, dict[str, Any]]:
    """The msgspec decoder: chunks on every core (forked workers) or in this process."""
    doc = _decode.split_document(path, data)
    total, done = len(doc.events), 0

    def on_chunk(nbytes: int) -> None:
        nonlocal done
        done += nbytes
        if progress:
            progress(done, total)

    workers = 1 if lenient or not fork else worker_count(total)
    cols = decode_parallel(path, doc, workers=workers, on_progress=on_chunk) if workers > 1 else None
    if cols is None:
        cols, done = Columns(), 0
        for base, events, span in _decode.iter_chunks(path, doc, lenient=lenient, skipped=skipped,
                                                      on_progress=on_chunk):
            add_chunk(cols, path, base, events, span, lenient=lenient, skipped=skipped)
    for key in doc.repeated:
        cols.notes.append(f"{path}: top-level key {key!r} appears more than once; the last one is read")
    return cols, {k: _safe_json(v) for k, v in doc.top.items()}


def _safe_json(raw: msgspec.Raw) -> Any:
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None


def _write_tables(con: duckdb.DuckDBPyConnection, path: str, cols: Columns, top: dict[str, Any],
                  fp_of: Callable[[], dict[str, Any]], skipped: _decode.Skipped,
                  memory_of: Callable[[], _memory.MemoryEvents | None] = lambda: None, *,
                  parallel: bool = True) -> dict[str, Any]:
    """The pipeline after decoding: prepare, correlate, write every table; the trace's fingerprint
    (``fp_of`` gives it, and ``memory_of`` the memory events, once needed: either may be computed on
    another thread meanwhile), which is returned.

    A writer thread (its own cursor; DuckDB works without the GIL) writes ``shapes`` and ``directions`` while
    this one prepares the events (they need only the decoded columns), then ``flows`` and ``instants`` while it
    correlates them (and compresses them there, where the events go in checkpointed batches: see
    _write.checkpoint_before_events), then the ``events`` table, the longest write, which starts when correlate ends,
    while this one finds the calls nested in their own name and writes the correlated side tables and the
    memory tables: the two threads end about
    together (vit50, 2 cores). Without ``parallel`` all runs here in turn, as on the msgspec path, which
    may be short of memory for a thread's stack.
    """
    base_ns = base_time_ns(path, top.get("baseTimeNanoseconds"))
    writer = _Writer(con, parallel=parallel and not os.environ.get("PROFUSE_SERIAL_WRITE"))
    try:
        writer.submit(write_shapes, cols=cols)
        writer.submit(write_directions, cols=cols)
        with _HEAP.reusing():  # big temporaries reused, not faulted in anew each (see _GlibcHeap)
            prepared = prepare(path, cols, base_ns)
            writer.submit(write_flows, prepared=prepared)
            writer.submit(write_instants, prepared=prepared)
            writer.submit(checkpoint_before_events, events=len(prepared.events))
            memory = memory_of()
            events, reused = correlated(prepared.events)
        _HEAP.trim()  # the passes' freed temporaries back before the events go in (the load's peak was here)
        writer.submit(write_events, events=events, strings=prepared.strings, told=len(events) >= COMPRESS_MIN_EVENTS)
        # the calls nested in their own name, while the events go in (nothing there reads them)
        nested = nested_in_own_name(events, reused.table_parent)
        reusable = reused if memory is not None else None  # only the memory tables ask it again
        del reused
        write_correlated_tables(con, cols=cols, prepared=prepared, events=events, nested=nested)
        fp = fp_of()
        meta = _meta(path, cols, prepared, events, top=top, fp=fp, skipped=skipped)
        if memory is not None:
            memory = memory.usable()
            _memory.write_memory_tables(con, memory, base_ns=base_ns, thread_keys=prepared.threads.keys,
                                        events=events, names=prepared.events.names, reusable=reusable)
            reusable = None
            meta["memory_events"], meta["memory_skipped"] = len(memory), memory.skipped
        _HEAP.trim()  # this thread's part is done: what its passes freed goes back while the events go in
    finally:
        writer.close()  # never leaves a write running on a connection the caller may close; raises its error
    write_meta(con, meta)
    return fp


class _Writer:
    """Table writes run in order on one other thread, on a cursor of ``con`` (unless ``parallel`` is
    false, or no thread can start: then on this thread, at once). :meth:`close` waits for them all and
    raises the first one's error."""

    def __init__(self, con: duckdb.DuckDBPyConnection, *, parallel: bool) -> None:
        self._con, self._own, self._pool = con, False, None
        self._done: list[Future[None]] = []
        if parallel:
            self._con, self._own = con.cursor(), True
            self._con.execute("USE trace")
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="profuse-write")

    def submit(self, write: Callable[..., None], **kwargs: Any) -> None:
        if self._pool is not None:
            try:
                self._done.append(self._pool.submit(write, self._con, **kwargs))
                return
            except RuntimeError:  # can't start new thread (short of memory): the rest in turn, here
                self._finish()
        write(self._con, **kwargs)

    def close(self) -> None:
        try:
            if self._pool is not None:
                self._finish()
        finally:
            if self._own:
                self._con.close()

    def _finish(self) -> None:
        assert self._pool is not None
        try:
            wait(self._done)
            for done in self._done:
                done.result()
        finally:
            self._pool.shutdown()
            self._pool = None


def detect_device(kind: np.ndarray, cats: set[str], runtime_names: np.ndarray, top: dict[str, Any],
                  process_names: Iterable[str] = (), launches: Callable[[], bool] = lambda: True
                  ) -> tuple[str, str | None]:
    """The device kind (CUDA, ROCm, MTIA, CPU, or the backend's name) and the device's name
    (``runtime_names``: the names of the trace's first 2,000 runtime events). ``launches()``: whether any
    runtime call puts work on a device (:func:`vocabulary.moves_work`), asked only where there is no device
    activity.

    A CUDA or ROCm trace with no device activity and no launch is a model run on the CPU of a machine
    with a GPU (torch writes ``deviceProperties`` and a few runtime queries whenever CUDA is present): it
    is read as CPU (the CPU diagnosis notes the listed GPU). Launches without device activity stay
    CUDA/ROCm (the device was not recorded)."""
    props, dev_name = listed_device(top)
    has_device = bool(kind_mask(kind, "kernel", "memcpy", "memset", "device_other").any())
    lower = {c.lower() for c in cats if c}
    rocm, cuda = device("ROCm"), device("CUDA")   # the device vocabulary's entries (trace/vocabulary.py)
    pu1 = set(device("PrivateUse1").runtime_categories)
    named = named_by_categories(lower)
    if named is not None:   # a family its categories name (MTIA, or one registered)
        return named, dev_name
    if not has_device and not lower & pu1 and not launches():
        return "CPU", None
    if any(k in top for k in rocm.metadata_keys) or any(
        isinstance(s, str) and s.startswith(rocm.call_prefixes) for s in runtime_names
    ):
        return "ROCm", dev_name
    if lower & pu1:
        return privateuse1_name(runtime_names, process_names), dev_name
    if has_device or props or lower & {*cuda.runtime_categories, "kernel"}:
        return "CUDA", dev_name
    return "CPU", None


def _launches(prepared: Prepared, events: EventColumns) -> bool:
    """Whether a runtime call launches, copies or sets device memory (each distinct name of every
    runtime event looked at once)."""
    codes = distinct(events.name[kind_mask(events.kind, "runtime", "sync")])
    return any(moves_work(str(n)) for n in prepared.events.names[codes])


META_CHUNK = 1 << 20  # events per piece of _meta's whole-column sums: no event-length temporary


def _last_end(ts: np.ndarray, dur: np.ndarray) -> int:
    """The latest ``ts + dur`` of non-empty columns, a piece at a time (the load's heap gives each
    event-length temporary fresh pages at this point: 75 MB a column at 9.4 M events)."""
    return max(int((ts[lo:lo + META_CHUNK] + dur[lo:lo + META_CHUNK]).max()) for lo in range(0, len(ts), META_CHUNK))


def _code_counts(codes: np.ndarray, size: int) -> np.ndarray:
    """How many of ``codes`` (small non-negative integers below ``size``) hold each value: bincount a piece
    at a time (np.unique sorts: 2.4 M events, ~130 ms; a whole-column bincount makes an int64 copy)."""
    counts = np.zeros(size, dtype=np.int64)
    for lo in range(0, len(codes), META_CHUNK):
        counts += np.bincount(codes[lo:lo + META_CHUNK], minlength=size)
    return counts


def _meta(path: str, cols: Columns, prepared: Prepared, events: EventColumns, *, top: dict[str, Any],
          fp: dict[str, Any], skipped: _decode.Skipped) -> dict[str, Any]:
    """The ``meta`` table's keys: what the trace is, and everything the load counted or left out."""
    procs = [m["process_name"] for m in cols.thread_meta.values() if "process_name" in m]
    runtime = np.flatnonzero(events.kind == KIND_CODE["runtime"])[:2000]  # not every event's name: 2.4 M at 1 GB
    names = prepared.events.names[events.name[runtime]]
    device_kind, device_name = detect_device(events.kind, {c for c in cols.cats if c}, names, top, procs,
                                             lambda: _launches(prepared, events))
    ts = events.ts
    span = _last_end(ts, events.dur) - int(ts.min()) if len(ts) else 0
    reason_counts = _code_counts(events.unlinked, len(UNLINKED))
    reasons = {UNLINKED[c]: int(reason_counts[c]) for c in np.flatnonzero(reason_counts).tolist() if c > 0}
    kind_counts = _code_counts(events.kind, len(KINDS))
    kinds, counts = [KINDS[c] for c in np.flatnonzero(kind_counts).tolist()], kind_counts[kind_counts > 0]
    return {
        "schema_version": SCHEMA_VERSION,
        "source": fp,
        "path": path,
        "device_kind": device_kind,
        "device_name": device_name,
        "events": len(ts),
        "span_us": span / 1000,
        "kinds": {str(k): int(c) for k, c in zip(kinds, counts)},
        "other_phases": cols.phase_counts,
        "unlinked": reasons,
        "unmatched_flows": unmatched_flows(prepared.events.flows),
        "skipped": skipped.counts,
        "skipped_examples": skipped.examples,
        "imprecise_ts_events": cols.imprecise_ts,
        "ignored_args": cols.ignored_args,
        "base_time_ns": top.get("baseTimeNanoseconds"),
        "trace_meta": {k: v for k, v in top.items() if k in ("schemaVersion", "distributedInfo", "deviceProperties",
                                                            "computeProperties",
                                                            "traceName", "displayTimeUnit", "record_shapes",
                                                            "with_stack", "with_modules", "with_flops",
                                                            "profile_memory", "cuda_runtime_version",
                                                            "hip_runtime_version")},
        "unnamed_events": prepared.unnamed,
    }
