"""Where a trace's tables are cached, and when a cache may be trusted.

Caches live in the user cache folder (``$PROFUSE_CACHE_DIR``, else ``$XDG_CACHE_HOME/profuse``, else
``~/.cache/profuse``), named by the SHA-1 of the trace's bytes, so an input folder is never written to
and an edited trace never meets its old tables. A bundle may carry its own cache, written when the
bundle was (``trace.json.gz.profuse.duckdb``); it is read, never written, at load time.

Every cache file has a sidecar (``.sum``) with the SHA-1 of the cache file itself: a cache is used only
when its bytes hash to that value, it opens, and the trace fingerprint in its ``meta`` table matches.
Anything else (flipped bytes, a truncated file, a stale schema) discards the file and the tables are
rebuilt. Files are built under a temporary name holding the writer's pid and renamed into place;
temporaries of processes that no longer exist are removed by the next load. The folder is kept under
a size cap (``$PROFUSE_CACHE_MAX_MB``, default 4096) by removing the least recently used caches.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from .schema import SCHEMA_VERSION

SUFFIX = ".profuse.duckdb"
SUM = ".sum"
DEFAULT_MAX_MB = 4096
_TEMP = re.compile(r"^\..+\.(?P<pid>\d+)\.tmp(\.wal|\.sum)?$")


def file_sha1(path: Path, *, chunk: int = 1 << 20) -> str:
    h = hashlib.sha1()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def fingerprint(src: Path) -> dict[str, Any]:
    """What a cache must match: the trace's size and the hash of all its bytes, and the table schema."""
    return {"size": src.stat().st_size, "sha1": file_sha1(src), "schema_version": SCHEMA_VERSION}


def user_cache_dir() -> Path:
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
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_temporaries(folder: Path) -> list[Path]:
    """Remove cache temporaries (``.<name>.<pid>.tmp[.wal|.sum]``) left by processes that are gone."""
    removed = []
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


@dataclass
class CacheSlot:
    """One cache file and its checksum sidecar."""

    path: Path
    writable: bool = True

    @property
    def sum_path(self) -> Path:
        return self.path.with_name(self.path.name + SUM)

    def open_if_valid(self, fp: dict[str, Any]) -> tuple[duckdb.DuckDBPyConnection | None, str | None]:
        """(connection, None) for a trustworthy cache; (None, why) when it was there but bad; (None, None)."""
        if not self.path.is_file():
            return None, None
        problem = self._check_sum()
        con = None
        if problem is None:
            try:
                con = duckdb.connect(str(self.path), read_only=True)
                rows = con.execute("SELECT value FROM meta WHERE key = 'source'").fetchall()
                if not rows or json.loads(rows[0][0]) != fp:
                    con.close()
                    return None, None  # another trace's or another schema's tables: replaced, no news
            except (duckdb.Error, ValueError) as err:
                problem = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                if con is not None:
                    con.close()
                con = None
        if problem is not None:
            if self.writable:
                self.discard()
            return None, problem
        self._touch()
        return con, None

    def _check_sum(self) -> str | None:
        try:
            saved = json.loads(self.sum_path.read_text())
            if saved.get("size") != self.path.stat().st_size or saved.get("sha1") != file_sha1(self.path):
                return "its checksum does not match (the file was changed or damaged)"
        except FileNotFoundError:
            return "it has no checksum file"
        except (OSError, ValueError, AttributeError) as err:
            return f"its checksum file is unreadable ({type(err).__name__})"
        return None

    def _touch(self) -> None:
        if self.writable:
            with contextlib.suppress(OSError):
                os.utime(self.path)  # mtime = last use, for least-recently-used eviction

    def discard(self) -> None:
        for p in (self.path, self.sum_path, self.path.with_name(self.path.name + ".wal")):
            with contextlib.suppress(OSError):
                p.unlink()

    def begin(self) -> Path:
        work = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        self.abort(work)
        return work

    def abort(self, work: Path) -> None:
        for suffix in ("", ".wal", SUM):
            work.with_name(work.name + suffix).unlink(missing_ok=True)

    def commit(self, work: Path) -> Path:
        """Checksum the finished file and move it and its sidecar into place."""
        summed = work.with_name(work.name + SUM)
        summed.write_text(json.dumps({"size": work.stat().st_size, "sha1": file_sha1(work)}))
        os.replace(work, self.path)
        os.replace(summed, self.sum_path)
        return self.path


def evict(folder: Path, *, keep: Path, max_bytes: int) -> list[Path]:
    """Remove least recently used caches until the folder holds at most ``max_bytes``."""
    caches = []
    for p in folder.glob(f"*{SUFFIX}"):
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
        CacheSlot(p).discard()
        total -= size
        removed.append(p)
    return removed


def max_cache_bytes() -> int:
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
        self._thread = threading.Thread(target=self._run, name="profuse-cache-writer", daemon=True)
        _live.add(self)
        self._thread.start()

    def _run(self) -> None:
        work = self.slot.begin()
        try:
            self._cursor.execute(f"ATTACH {sql_string(work)} AS profuse_cache")
            self._cursor.execute("COPY FROM DATABASE trace TO profuse_cache")
            self._cursor.execute("DETACH profuse_cache")
            self.slot.commit(work)
            evict(self.slot.path.parent, keep=self.slot.path, max_bytes=max_cache_bytes())
        except (duckdb.Error, OSError, ValueError) as err:
            self.error = str(err).splitlines()[0] if str(err) else type(err).__name__
            self.slot.abort(work)
        finally:
            self._cursor.close()

    def wait(self) -> None:
        self._thread.join()


@atexit.register
def _finish_writes() -> None:
    for w in list(_live):
        w.wait()


def bundle_cache(src: Path) -> CacheSlot | None:
    """The cache a bundle carries beside its trace (read only: loads never write into input folders)."""
    beside = src.with_name(src.name + SUFFIX)
    return CacheSlot(beside, writable=False) if beside.is_file() else None


def cache_slot(fp: dict[str, Any], cache_dir: str | os.PathLike[str] | None = None) -> CacheSlot | None:
    """The user-cache file for a trace with fingerprint ``fp``, or None when no cache folder is writable."""
    folder = Path(cache_dir) if cache_dir is not None else user_cache_dir()
    if not _writable(folder):
        return None
    clean_stale_temporaries(folder)
    return CacheSlot(folder / f"{fp['sha1']}-{fp['size']}{SUFFIX}")
