"""Where a trace's tables are cached, and when a cache may be trusted.

Caches live in the user cache folder (``--cache-dir``, ``$PROFUSE_CACHE_DIR``, else
``$XDG_CACHE_HOME/profuse``, else ``~/.cache/profuse``), named by the BLAKE3 hash and size of the
trace's bytes, so an input folder is never written to and an edited trace never meets its old tables. Only
caches profuse wrote itself are opened: a ``*.profuse.duckdb`` that came with a trace or a bundle is
someone else's database (its views could read local files) and is never used.

A cache file's name also carries the BLAKE3 hash of the cache file itself
(``<trace blake3>-<size>.<cache blake3 prefix>.profuse.duckdb``): a cache is used only when its bytes hash
to its name, it opens, and the trace fingerprint in its ``meta`` table matches. Anything else (flipped
bytes, a truncated file, a stale schema) discards the file and the tables are rebuilt. Files are built
under a temporary name holding the writer's pid and renamed into place in one step; temporaries of
processes that no longer exist are removed by the next load. The folder is kept under a size cap
(``$PROFUSE_CACHE_MAX_MB``, default 4096) by removing the least recently used caches.

Derived results (what an analysis or a payload computed from a trace's tables: a report's document, a
timeline model) are kept beside the tables as *derived entries*, ``<trace blake3>-<size>.<id>.profuse.derived``:
opaque bytes (the caller encodes them, e.g. with msgspec) under a caller's key, valid for one trace's bytes
and one build of profuse (its version and a stamp of its code files: an edited or upgraded profuse never
reuses an entry). See :func:`read_derived`, :func:`write_derived` and ``Trace.derived``.

A *stat entry* (``<sha1 of the trace's absolute path, 16 hex>.profuse.stat``) remembers the fingerprint a
trace's bytes hashed to, beside the file's device, inode, size, mtime and ctime when they were hashed and
the hash of blocks sampled over the file (:func:`sample_digest`, checked each time the entry is read). It
is written only when the file is provably the one hashed: the same stat before and after the hash, and
last changed (mtime and ctime) at least :data:`RACY_NS` before the hash began, so any later write moves
its ctime (git's "racily clean" rule). A load that may answer first and check behind (the explorer:
``load(verify="behind")``) finds the cache from it without hashing, then hashes the trace on a thread
(:class:`SourceCheck`); different bytes remove the entry and the caller is told (see ``Trace.source_check``).
A cached report does the same up to :data:`FULL_CHECK_BYTES` and trusts the entry above it (cli/report_cached.py).
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import blake3

from .schema import SCHEMA_VERSION

if TYPE_CHECKING:  # DuckDB is imported where a cache is opened or written: a derived entry needs none
    import duckdb
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

SUFFIX = ".profuse.duckdb"
DEFAULT_MAX_MB = 4096
_CACHE = re.compile(r"^(?P<key>[0-9a-f]{64}-\d{1,20})\.(?P<sum>[0-9a-f]{16})\.profuse\.duckdb$")
# a temporary of this profuse (64-hex BLAKE3 key) or of one before it (40-hex SHA-1): both are cleaned
_TEMP = re.compile(r"^\.(?:[0-9a-f]{40}(?:[0-9a-f]{24})?-\d{1,20}(?:\.profuse\.duckdb|\.[0-9a-f]{16}\.profuse\.derived)"
                   r"|build-[0-9a-f]{16}\.profuse\.duckdb"
                   r"|[0-9a-f]{16}\.profuse\.stat)\.(?P<pid>\d{1,10})\.tmp(\.wal)?$")
DERIVED_SUFFIX = ".profuse.derived"
_DERIVED = re.compile(r"^[0-9a-f]{64}-\d{1,20}\.[0-9a-f]{16}\.profuse\.derived$")
# Tables and derived entries named by the SHA-1 of their trace (profuse before BLAKE3): never opened
# (no key matches them), but counted against the size cap and evicted, least recently used, like the others.
_LEGACY = re.compile(r"^[0-9a-f]{40}-\d{1,20}\.[0-9a-f]{16}\.profuse\.(?:duckdb|derived)$")
_DERIVED_MAGIC = b"profuse-derived/2\n"  # then the entry's BLAKE3 checksum (32 bytes)
STAT_SUFFIX = ".profuse.stat"
_STAT = re.compile(r"^[0-9a-f]{16}\.profuse\.stat$")
RACY_NS = 2_000_000_000  # a file changed this shortly before its hash began may change again unseen
# A stat entry also records the hash of SAMPLE_BLOCKS blocks of SAMPLE_BLOCK bytes spread evenly over the
# file (the first and the last among them): the whole file up to 1 MiB. It is checked whenever the entry is
# read (a few reads, ~1 ms), so a rewrite the stat cannot see must also miss every sampled block.
SAMPLE_BLOCK = 64 << 10
SAMPLE_BLOCKS = 16
# A cached report found by a stat entry hashes the whole trace behind up to this size (~50 ms here) and
# trusts the entry (its stat and sampled blocks) above it: a 6 GB trace's hash would take seconds.
FULL_CHECK_BYTES = 256 << 20


# The hash of trace and cache bytes: BLAKE3, a cryptographic hash (no practical collisions, unlike SHA-1)
# that runs at 5 GB/s on one core here, where SHA-1 runs at 1.5 GB/s (54 MB: 11 ms against 35 ms; both
# release the GIL). A fingerprint names its hash by this key.
DIGEST = "blake3"


def hasher() -> Any:
    """A new hash object of :data:`DIGEST` (``update``, ``hexdigest``, ``digest``, as in hashlib)."""
    return blake3.blake3()


def bytes_digest(data: Buffer) -> str:
    """The :data:`DIGEST` of ``data``, as hex."""
    return str(blake3.blake3(data).hexdigest())


def file_digest(path: Path, *, chunk: int = 1 << 20) -> str:
    """The :data:`DIGEST` of a file's bytes, read in chunks, as hex."""
    h = hasher()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return str(h.hexdigest())


_handed: list[tuple[tuple[str, int, int, int, int, int], dict[str, Any]]] = []
_handed_lock = threading.Lock()


def fingerprint(src: Path, *, hand_on: bool = False, record_in: Path | None = None) -> dict[str, Any]:
    """What a cache must match: the trace's size and the hash of all its bytes, and the table schema.

    ``hand_on``: the next call for the same file, unchanged since (its inode, size, times), gets this
    one without hashing it again (one process looking up a derived entry, then its tables). A file
    rewritten in place with the same size within one tick of the file system's clock would pass for
    unchanged: the same window as a change just after any hash, which no reader can see either.
    ``record_in``: a cache folder to write the file's stat entry in, where this call hashed the file
    and the entry's rule holds (see the module docstring).
    """
    started = time.time_ns()
    st = src.stat()
    key = (os.fspath(src), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with _handed_lock:
        handed = _handed.pop() if _handed else None
    if handed is not None and handed[0] == key:
        return handed[1]
    fp = {"size": st.st_size, DIGEST: file_digest(src), "schema_version": SCHEMA_VERSION}
    if hand_on:
        with _handed_lock:
            _handed[:] = [(key, fp)]
    if record_in is not None:
        record_stat(record_in, src, st, started, fp)
    return fp


def _stat_key(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def stat_path(folder: Path, src: Path) -> Path:
    """Where the stat entry of the trace file ``src`` lives in the cache folder ``folder``."""
    name = hashlib.sha1(os.fsencode(os.path.abspath(src))).hexdigest()[:16]
    return folder / f"{name}{STAT_SUFFIX}"


def record_stat(folder: Path, src: Path, before: os.stat_result, started_ns: int, fp: dict[str, Any]) -> bool:
    """Write ``src``'s stat entry: ``fp`` was hashed from its bytes after ``started_ns``, its stat then ``before``.

    Written only when the file still has that stat and was last changed at least RACY_NS before the
    hash began (a file changed later would show another mtime or ctime); returns whether it was written.
    A folder that cannot be written costs only the next load's hash.
    """
    try:
        now = src.stat()
    except OSError:
        return False
    if (_stat_key(now) != _stat_key(before) or fp.get("size") != before.st_size
            or max(before.st_mtime_ns, before.st_ctime_ns) > started_ns - RACY_NS):
        return False
    try:
        sample = sample_digest(src, before.st_size)
        if _stat_key(src.stat()) != _stat_key(before):
            return False
    except OSError:
        return False
    path = stat_path(folder, src)
    body = json.dumps({"path": os.path.abspath(src), "stat": _stat_key(before), "fingerprint": fp,
                       "sample": sample}, sort_keys=True)
    work = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        work.write_text(body, encoding="utf-8")
        os.replace(work, path)
    except OSError:
        work.unlink(missing_ok=True)
        return False
    return True


def sample_digest(src: Path, size: int) -> str:
    """The :data:`DIGEST` of ``src``'s sampled blocks (:data:`SAMPLE_BLOCKS` of :data:`SAMPLE_BLOCK` bytes at
    offsets spread evenly from its start to its end, with ``size``): all its bytes when they fit."""
    h = hasher()
    h.update(size.to_bytes(8, "little"))
    with open(src, "rb") as fh:
        if size <= SAMPLE_BLOCK * SAMPLE_BLOCKS:
            h.update(fh.read())
        else:
            last = size - SAMPLE_BLOCK
            for k in range(SAMPLE_BLOCKS):
                fh.seek(last * k // (SAMPLE_BLOCKS - 1))
                h.update(fh.read(SAMPLE_BLOCK))
    return str(h.hexdigest())


def fingerprint_by_stat(folder: Path, src: Path) -> dict[str, Any] | None:
    """The fingerprint ``src``'s stat entry records for its stat now and its sampled blocks (:func:`sample_digest`)
    now, or None (no entry, another stat; an entry whose sampled blocks differ, or that has none, is removed).

    Not a proof of the bytes (see the module docstring): the explorer checks behind (:class:`SourceCheck`);
    a cached report does for a trace of at most :data:`FULL_CHECK_BYTES` and trusts the entry above that."""
    try:
        st = src.stat()
        entry = json.loads(stat_path(folder, src).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("path") != os.path.abspath(src) or entry.get("stat") != _stat_key(st):
        return None
    fp = entry.get("fingerprint")
    if (not isinstance(fp, dict) or fp.keys() != {"size", DIGEST, "schema_version"} or fp["size"] != st.st_size
            or fp["schema_version"] != SCHEMA_VERSION or not isinstance(fp[DIGEST], str)):
        return None
    try:
        sample = sample_digest(src, st.st_size)
    except OSError:
        return None
    if entry.get("sample") != sample:  # other bytes under the recorded stat (or an entry without a sample)
        discard(stat_path(folder, src))
        return None
    return fp


class SourceCheck:
    """A trace opened by its stat entry, hashed on a thread now: whether its bytes are those its tables
    were built from (the hash releases the GIL, so the caller goes on meanwhile).

    ``reload`` loads the trace again, hashing first (what a caller does with a trace that changed)."""

    def __init__(self, src: Path, fp: dict[str, Any], folder: Path, reload: Callable[[], Any]) -> None:
        self.src, self.fp, self.folder, self.reload = src, fp, folder, reload
        self._why: str | None = None
        self._thread = threading.Thread(target=self._run, name="profuse-source-check", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            same = file_digest(self.src) == self.fp[DIGEST] and self.src.stat().st_size == self.fp["size"]
            why = None if same else "its bytes changed since its tables were cached"
        except OSError as err:
            why = f"it cannot be read again ({err.strerror})"
        except BaseException as err:  # never taken for "the bytes match"
            why = f"it could not be checked ({type(err).__name__})"
        if why is not None:
            discard(stat_path(self.folder, self.src))
        self._why = why

    @property
    def done(self) -> bool:
        """Whether the hash has finished (``wait`` then returns at once)."""
        return not self._thread.is_alive()

    def wait(self) -> str | None:
        """Wait for the hash: None when the bytes are the tables', else why not (a short phrase)."""
        self._thread.join()
        return self._why


def fingerprint_of_bytes(data: Buffer) -> dict[str, Any]:
    """:func:`fingerprint` of a file whose bytes are ``data`` (already read or mapped: no second read)."""
    return fingerprint_of_hash(bytes_digest(data), memoryview(data).nbytes)


def fingerprint_of_hash(digest: str, size: int) -> dict[str, Any]:
    """:func:`fingerprint` of a file of ``size`` bytes whose :data:`DIGEST` was taken while it was read."""
    return {"size": size, DIGEST: digest, "schema_version": SCHEMA_VERSION}


def user_cache_dir() -> Path:
    """Where caches go by default (see the module docstring)."""
    if os.environ.get("PROFUSE_CACHE_DIR"):
        return Path(os.environ["PROFUSE_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "profuse"


def sql_string(value: str | os.PathLike[str]) -> str:
    """A SQL string literal for DuckDB statements that take no parameters (ATTACH)."""
    text = os.fspath(value)
    if "\x00" in text:
        raise ValueError("NUL byte in a SQL string")
    return "'" + text.replace("'", "''") + "'"


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    # root passes os.access on anything; a folder with no write bits is read-only to us too
    return os.access(folder, os.W_OK) and bool(folder.stat().st_mode & 0o222)


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (ours always does)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def clean_stale_temporaries(folder: Path) -> list[Path]:
    """Remove cache temporaries (``.<key>.profuse.duckdb.<pid>.tmp[.wal]``) left by processes that are gone."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        m = _TEMP.match(entry.name)
        if m and not pid_alive(int(m.group("pid"))):
            try:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
            except OSError:
                pass
    return removed


def building_path(folder: Path) -> Path:
    """A fresh temporary file in ``folder`` for tables built before their trace's hash is known (the
    load builds big traces' tables into it; :meth:`CacheSlot.commit` then names it), with this
    process's pid in its name (:func:`clean_stale_temporaries`)."""
    return folder / f".build-{os.urandom(8).hex()}{SUFFIX}.{os.getpid()}.tmp"


@dataclass
class CacheSlot:
    """The cache of one trace: ``<folder>/<key>.<cache blake3 prefix>.profuse.duckdb``."""

    folder: Path
    key: str  # "<trace blake3>-<trace size>"

    def existing(self) -> list[Path]:
        """This trace's cache files in the folder (names profuse writes only), newest first."""
        named = [p for p in self.folder.glob(f"{self.key}.*{SUFFIX}") if _CACHE.match(p.name)]
        return sorted(named, key=_mtime, reverse=True)

    def open_if_valid(self, fp: dict[str, Any]) -> tuple[duckdb.DuckDBPyConnection | None, str | None]:
        """(connection, None) for a trustworthy cache; (None, why) when one was there but bad; (None, None)."""
        problem = None
        for path in self.existing():
            con, why = _open_checked(path, fp)
            if con is not None:
                with contextlib.suppress(OSError):
                    os.utime(path)  # mtime = last use, for least-recently-used eviction
                return con, None
            if why is not None:
                problem = problem or f"{path.name}: {why}"
            discard(path)
        return None, problem

    def begin(self) -> Path:
        """A fresh temporary file to build the cache in, named with this process's pid."""
        work = self.folder / f".{self.key}{SUFFIX}.{os.getpid()}.tmp"
        self.abort(work)
        return work

    def abort(self, work: Path) -> None:
        """Remove a temporary cache file (and its WAL)."""
        for suffix in ("", ".wal"):
            work.with_name(work.name + suffix).unlink(missing_ok=True)

    def install(self, work: Path) -> Path:
        """:meth:`commit` ``work``, then :func:`evict` past the folder's cap, keeping it: how a finished cache
        file enters the folder (written behind by :class:`CacheWriter`, or built in place by the load)."""
        final = self.commit(work)
        evict(self.folder, keep=final, max_bytes=max_cache_bytes())
        return final

    def commit(self, work: Path) -> Path:
        """Name the finished file by its own hash and move it into place in one rename."""
        final = self.folder / f"{self.key}.{file_digest(work)[:16]}{SUFFIX}"
        os.replace(work, final)
        for old in self.existing():
            if old != final:
                discard(old)
        return final


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def _open_checked(path: Path, fp: dict[str, Any]) -> tuple[duckdb.DuckDBPyConnection | None, str | None]:
    """Open a cache whose bytes hash to its name and whose tables are this trace's."""
    m = _CACHE.match(path.name)
    try:
        if m is None or file_digest(path)[:16] != m.group("sum"):
            return None, "its checksum does not match (the file was changed or damaged)"
    except OSError as err:
        return None, f"it cannot be read ({err.strerror})"
    import duckdb

    con = None
    try:
        con = duckdb.connect(str(path), read_only=True)
        rows = con.execute("SELECT value FROM meta WHERE key = 'source'").fetchall()
        if rows and json.loads(rows[0][0]) == fp:
            return con, None
        con.close()
        return None, None  # another schema's tables: replaced, no news
    except (duckdb.Error, ValueError) as err:
        if con is not None:
            con.close()
        return None, str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def discard(path: Path) -> None:
    """Remove a cache file and its WAL, if they are there."""
    for p in (path, path.with_name(path.name + ".wal")):
        with contextlib.suppress(OSError):
            p.unlink()


def evict(folder: Path, *, keep: Path, max_bytes: int) -> list[Path]:
    """Remove least recently used caches until the folder holds at most ``max_bytes``."""
    caches = []
    for p in [*folder.glob(f"*{SUFFIX}"), *folder.glob(f"*{DERIVED_SUFFIX}"), *folder.glob(f"*{STAT_SUFFIX}")]:
        if not (_CACHE.match(p.name) or _DERIVED.match(p.name) or _STAT.match(p.name) or _LEGACY.match(p.name)):
            continue  # not a file profuse named: never removed
        try:
            st = p.stat()
        except OSError:
            continue
        caches.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in caches)
    removed = []
    for _, size, p in sorted(caches):
        if total <= max_bytes:
            break
        if p == keep:
            continue
        discard(p)
        total -= size
        removed.append(p)
    return removed


def max_cache_bytes() -> int:
    """The cache folder's size cap (``$PROFUSE_CACHE_MAX_MB``, default DEFAULT_MAX_MB)."""
    raw = os.environ.get("PROFUSE_CACHE_MAX_MB", "")
    try:
        return max(int(raw), 0) << 20 if raw else DEFAULT_MAX_MB << 20
    except ValueError:
        return DEFAULT_MAX_MB << 20


_live: weakref.WeakSet[CacheWriter] = weakref.WeakSet()


class CacheWriter:
    """Copies an in-memory trace database to its cache file on a background thread."""

    def __init__(self, con: duckdb.DuckDBPyConnection, slot: CacheSlot) -> None:
        self.slot = slot
        self.error: str | None = None
        self._cursor = con.cursor()
        # A snapshot of the tables as built, taken now: a later write through the trace's connection
        # (Trace.con is the engine's own) never reaches the cache.
        self._cursor.execute("BEGIN TRANSACTION")
        self._cursor.execute("SELECT count(*) FROM trace.meta").fetchall()
        self._thread = threading.Thread(target=self._run, name="profuse-cache-writer", daemon=True)
        _live.add(self)
        self._thread.start()

    def _run(self) -> None:
        import duckdb

        work = self.slot.begin()
        try:
            self._cursor.execute(f"ATTACH {sql_string(work)} AS profuse_cache")
            # one DuckDB thread for the copy: each thread's write buffers were a third of the cold load's
            # peak above its tables (V100 216k: 244 -> 212 MB), and the trace's own queries keep the other core
            self._cursor.execute("SET threads = 1")
            try:
                self._cursor.execute("COPY FROM DATABASE trace TO profuse_cache")
            finally:
                self._cursor.execute("RESET threads")
            self._cursor.execute("COMMIT")
            self._cursor.execute("DETACH profuse_cache")
            self.slot.install(work)
        except (duckdb.Error, OSError, ValueError) as err:
            self.error = str(err).splitlines()[0] if str(err) else type(err).__name__
            self.slot.abort(work)
        finally:
            self._cursor.close()

    def wait(self) -> None:
        """Block until the cache file is written (or has failed: see ``error``)."""
        self._thread.join()


@atexit.register
def _finish_writes() -> None:
    for w in list(_live):
        w.wait()
    for t in _derived_writes:
        t.join()


def cache_folder(cache_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The folder caches go to (``cache_dir``, else the user cache folder), or None when it is not writable.

    Temporaries that dead processes left there are removed.
    """
    folder = Path(cache_dir) if cache_dir is not None else user_cache_dir()
    if not _writable(folder):
        return None
    clean_stale_temporaries(folder)
    return folder


def slot_key(fp: dict[str, Any]) -> str:
    """The part of a cache's file name that names its trace: ``<trace blake3>-<trace size>``."""
    return f"{fp[DIGEST]}-{fp['size']}"


def holds_cache_of_size(folder: Path, size: int) -> bool:
    """Whether ``folder`` holds a cache of any trace of ``size`` bytes (if not, no hash can find one)."""
    return any(_CACHE.match(p.name) for p in folder.glob(f"*-{int(size)}.*{SUFFIX}"))



# ---- derived entries (see the module docstring) ----

def _code_files(folder: str) -> list[tuple[str, int, int]]:
    out = []
    with os.scandir(folder) as entries:
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                if e.name not in ("__pycache__", "static"):
                    out.extend(_code_files(e.path))
            elif e.name.endswith((".py", ".so", ".pyd")):
                st = e.stat(follow_symlinks=False)
                out.append((e.name, st.st_size, st.st_mtime_ns))
    return out


_stamp: list[str] = []


def code_stamp() -> str:
    """profuse's version and a hash of the names, sizes and times of its code files (once per process)."""
    if not _stamp:
        from .. import __file__ as package_init
        from .. import __version__

        try:
            files = sorted(_code_files(os.path.dirname(package_init)))
        except OSError:
            files = []
        _stamp.append(f"{__version__}+{hashlib.sha1(repr(files).encode()).hexdigest()[:16]}")
    return _stamp[0]


def _derived_id(fp: dict[str, Any], key: str) -> bytes:
    return json.dumps({"trace": fp, "key": key, "profuse": code_stamp()}, sort_keys=True).encode()


def derived_path(folder: Path, fp: dict[str, Any], key: str) -> Path:
    """Where the derived entry ``key`` of the trace with fingerprint ``fp`` lives in ``folder``."""
    return folder / f"{slot_key(fp)}.{hashlib.sha1(_derived_id(fp, key)).hexdigest()[:16]}{DERIVED_SUFFIX}"


def read_derived(folder: Path, fp: dict[str, Any], key: str) -> bytes | None:
    """The bytes stored under ``key`` for this trace and this build of profuse, or None.

    An entry is used only when it is whole: its header names exactly this trace, key and profuse, and its
    checksum matches; any other file under that name (truncated, damaged, of another build) is removed.
    """
    path = derived_path(folder, fp, key)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    ident = _derived_id(fp, key)
    head = len(_DERIVED_MAGIC) + 32 + 4
    if (len(raw) >= head and raw.startswith(_DERIVED_MAGIC)
            and int.from_bytes(raw[head - 4:head], "big") == len(ident) and raw[head:head + len(ident)] == ident):
        data = raw[head + len(ident):]
        if _entry_sum(ident, data) == raw[len(_DERIVED_MAGIC):head - 4]:
            with contextlib.suppress(OSError):
                os.utime(path)  # last use, for least-recently-used eviction
            return data
    discard(path)
    return None


def _entry_sum(ident: bytes, data: bytes | memoryview) -> bytes:
    """A derived entry's checksum: the :data:`DIGEST` of its ident and then its data (no joined copy)."""
    h = hasher()
    h.update(ident)
    h.update(data)
    return bytes(h.digest())


def write_derived(folder: Path, fp: dict[str, Any], key: str, data: bytes) -> Path:
    """Store ``data`` under ``key`` for this trace: written to a temporary, then renamed into place in one step.

    Raises OSError when the folder cannot be written (nothing is left behind then).
    """
    path = derived_path(folder, fp, key)
    ident = _derived_id(fp, key)
    work = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(work, "wb") as fh:
            fh.write(b"".join((_DERIVED_MAGIC, _entry_sum(ident, data), len(ident).to_bytes(4, "big"),
                               ident, data)))
        os.replace(work, path)
    except BaseException:
        work.unlink(missing_ok=True)
        raise
    return path


def is_cache_file(name: str) -> bool:
    """Whether ``name`` is shaped like a file profuse's cache writes (tables, derived or stat entry, temporary)."""
    return bool(_CACHE.match(name) or _DERIVED.match(name) or _STAT.match(name) or _TEMP.match(name)
                or _LEGACY.match(name))


def holds_derived_of_size(folder: Path, size: int) -> bool:
    """Whether ``folder`` holds a derived entry of any trace of ``size`` bytes (if not, no hash can find one)."""
    return any(_DERIVED.match(p.name) for p in folder.glob(f"*-{int(size)}.*{DERIVED_SUFFIX}"))


_derived_writes: list[threading.Thread] = []


def write_derived_behind(folder: Path, fp: dict[str, Any], key: str, data: bytes) -> None:
    """:func:`write_derived` on a background thread (interpreter exit waits for it); a failure costs only
    the next run's time, so it is dropped."""
    def run() -> None:
        with contextlib.suppress(OSError):
            write_derived(folder, fp, key, data)
            evict(folder, keep=derived_path(folder, fp, key), max_bytes=max_cache_bytes())

    thread = threading.Thread(target=run, name="profuse-derived-writer", daemon=True)
    _derived_writes[:] = [t for t in _derived_writes if t.is_alive()]  # a long-lived process keeps no husks
    _derived_writes.append(thread)
    thread.start()
