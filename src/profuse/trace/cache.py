"""Where a trace's tables are cached, and when a cache is still valid.

The cache is a DuckDB file beside the trace (``<trace>.profuse.duckdb``), or under the user cache
folder when the trace's folder is read-only, or a temporary file when neither can be written.
Files are built under a temporary name and renamed into place, so a reader never sees half a cache.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from .schema import SCHEMA_VERSION

SUFFIX = ".profuse.duckdb"


def fingerprint(src: Path) -> dict[str, Any]:
    st = src.stat()
    with open(src, "rb") as fh:
        head = fh.read(1 << 16)
        fh.seek(max(st.st_size - (1 << 16), 0))
        tail = fh.read(1 << 16)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "sample_sha1": hashlib.sha1(head + tail).hexdigest(), "schema_version": SCHEMA_VERSION}


def user_cache_dir() -> Path:
    if os.environ.get("PROFUSE_CACHE_DIR"):
        return Path(os.environ["PROFUSE_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "profuse"


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    # root passes os.access on anything; a folder with no write bits is read-only to us too
    return os.access(folder, os.W_OK) and bool(folder.stat().st_mode & 0o222)


@dataclass
class CacheSlot:
    path: Path

    def open_if_valid(self, fp: dict[str, Any]) -> duckdb.DuckDBPyConnection | None:
        if not self.path.is_file():
            return None
        try:
            con = duckdb.connect(str(self.path), read_only=True)
            rows = con.execute("SELECT value FROM meta WHERE key = 'source'").fetchall()
            row = rows[0] if rows else None
        except duckdb.Error:
            return None
        if row is None or json.loads(row[0]) != fp:
            con.close()
            return None
        return con

    def begin(self) -> Path:
        work = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        work.unlink(missing_ok=True)
        return work

    def abort(self, work: Path) -> None:
        for p in (work, work.with_name(work.name + ".wal")):
            p.unlink(missing_ok=True)

    def commit(self, work: Path) -> Path:
        os.replace(work, self.path)
        return self.path


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
            self._cursor.execute(f"ATTACH '{work}' AS profuse_cache")
            self._cursor.execute("COPY FROM DATABASE trace TO profuse_cache")
            self._cursor.execute("DETACH profuse_cache")
            self.slot.commit(work)
        except (duckdb.Error, OSError) as err:
            self.error = str(err).splitlines()[0]
            self.slot.abort(work)
        finally:
            self._cursor.close()

    def wait(self) -> None:
        self._thread.join()


@atexit.register
def _finish_writes() -> None:
    for w in list(_live):
        w.wait()


def cache_slot(src: Path) -> CacheSlot | None:
    """The cache file for ``src``: beside it if that folder is writable, else in the user cache."""
    beside = src.with_name(src.name + SUFFIX)
    if _writable(src.parent):
        return CacheSlot(beside)
    digest = hashlib.sha1(str(src.resolve()).encode()).hexdigest()[:16]
    folder = user_cache_dir()
    if _writable(folder):
        return CacheSlot(folder / f"{src.name}-{digest}{SUFFIX}")
    return None
