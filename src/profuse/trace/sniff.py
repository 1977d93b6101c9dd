"""Telling a memory snapshot from a trace by its name and first bytes, before DuckDB or numpy is imported."""
from __future__ import annotations

import os
from pathlib import Path


def is_snapshot_path(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a pickle file (by its name, then by its first byte)."""
    p = Path(path)
    if p.suffix.lower() in (".pickle", ".pkl"):
        return True
    head = _head(p, 2)
    return head is not None and len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def _head(p: Path, n: int) -> bytes | None:
    """The first ``n`` bytes of a regular file (None: not one, or unreadable)."""
    try:
        if not p.is_file():
            return None
        with open(p, "rb") as fh:
            return fh.read(n)
    except OSError:
        return None


PERFETTO_SUFFIXES = (".pftrace", ".pftrace.gz")


def is_perfetto_path(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a Perfetto protobuf trace: by its name (``.pftrace``, ``.pftrace.gz``), else
    by its first bytes (inflated where gzip): a Trace message starts with its first packet's tag, 0x0A,
    and a JSON document, even one opening with a line break, has ``{`` or ``[`` as its first other byte."""
    p = Path(path)
    if p.name.lower().endswith(PERFETTO_SUFFIXES):
        return True
    head = _head(p, 64)
    if head is None:
        return False
    if head[:2] == b"\x1f\x8b":
        import zlib

        try:
            head = zlib.decompressobj(31).decompress(head, 16)
        except zlib.error:
            return False
    return head[:1] == b"\x0a" and head.lstrip()[:1] not in (b"{", b"[")
