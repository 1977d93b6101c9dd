"""Files a bundle keeps beside its trace (``meta.json``, ``artifacts/inductor/*.py``), read safely.

A trace folder is input from anyone: its side files may be links to files elsewhere, FIFOs that
block a reader forever, or huge files. Only regular files inside the folder itself are read, each
opened without following links and without blocking, and cut at a size before it is read whole.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

INDUCTOR = ("artifacts", "inductor")
MAX_FILES = 20
MAX_BYTES = 200_000
SIDE_FILE_MAX_BYTES = 8 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def read_artifacts(trace_path: str | os.PathLike[str], *, subdir: tuple[str, ...] = INDUCTOR,
                   suffix: str = ".py", max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> dict[str, str]:
    """``{file name: text}`` of up to ``max_files`` regular files under ``subdir`` of the trace's folder.

    Each text is at most ``max_bytes`` long (decoded with replacement). Links, FIFOs, devices and
    folders are skipped; a folder on the way that is a link ends the search.
    """
    if os.open not in os.supports_dir_fd or not _NOFOLLOW:
        return {}  # no safe way to open relative to a folder without following links here
    try:
        fd = os.open(Path(trace_path).parent, os.O_RDONLY | _DIRECTORY)
    except OSError:
        return {}
    try:
        for part in subdir:
            try:
                nxt = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=fd)
            except OSError:
                return {}
            os.close(fd)
            fd = nxt
        names = sorted(e.name for e in os.scandir(fd) if e.name.endswith(suffix)
                       and e.is_file(follow_symlinks=False))[:max_files]
        out = {}
        for name in names:
            text = _read_regular(name, fd, max_bytes)
            if text is not None:
                out[name] = text
        return out
    finally:
        os.close(fd)


def _read_regular(name: str, dir_fd: int, max_bytes: int) -> str | None:
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], max_bytes
        while left > 0:
            block = os.read(fd, min(left, 1 << 16))
            if not block:
                break
            chunks.append(block)
            left -= len(block)
        return b"".join(chunks).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def read_side_text(path: str | os.PathLike[str], max_bytes: int = SIDE_FILE_MAX_BYTES) -> str | None:
    """The text of a regular file of at most ``max_bytes``, else None (missing, a link, a FIFO, a
    device, too big). Opened non-blocking and checked on the open file, so a FIFO put in its place
    cannot hang a report."""
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        try:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
                return None
            data = fh.read(max_bytes + 1)
        except OSError:
            return None
    return None if len(data) > max_bytes else data.decode("utf-8", "replace")


def read_side_json(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """A side file holding one JSON object, else None: a bundle's meta.json is optional and may be anything."""
    text = read_side_text(path)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
