"""Telling a memory snapshot from a trace by its name and first bytes, before DuckDB or numpy is imported."""
from __future__ import annotations

import os
from pathlib import Path


def is_snapshot_path(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a pickle file (by its name, then by its first byte)."""
    p = Path(path)
    if p.suffix.lower() in (".pickle", ".pkl"):
        return True
    try:
        if not p.is_file():
            return False
        with open(p, "rb") as fh:
            head = fh.read(2)
    except OSError:
        return False
    return len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5
