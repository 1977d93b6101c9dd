"""Reading the small side files of a bundle (meta.json, saved kernels) without trusting them."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

SIDE_FILE_MAX_BYTES = 8 << 20


def read_side_text(path: str | os.PathLike[str], max_bytes: int = SIDE_FILE_MAX_BYTES) -> str | None:
    """The text of a regular file of at most ``max_bytes``, else None (missing, a FIFO, a device, too big).

    Opened non-blocking and checked on the open file, so a FIFO put in its place cannot hang a report.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
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


def regular_files(folder: Path, pattern: str) -> list[Path]:
    """Files in ``folder`` matching ``pattern`` that are regular files and not links."""
    if folder.is_symlink() or not folder.is_dir():
        return []
    return sorted(p for p in folder.glob(pattern) if not p.is_symlink() and p.is_file())
