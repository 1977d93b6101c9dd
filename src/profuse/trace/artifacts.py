"""Files a bundle keeps beside its trace (``artifacts/inductor/*.py``), read safely.

A trace folder is input from anyone: its ``artifacts`` may be links to files elsewhere, FIFOs that
block a reader forever, or huge files. Only regular files inside the folder itself are read, each
opened without following links and without blocking, and cut at a size before it is read whole.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

INDUCTOR = ("artifacts", "inductor")
MAX_FILES = 20
MAX_BYTES = 200_000
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
