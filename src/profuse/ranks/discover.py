"""Which files of a folder or glob are the rank traces of one run, and which rank each one is.

A rank is named by the trace's own ``distributedInfo.rank`` (read from the first MiB of the file,
where Kineto writes it, before ``traceEvents``), else by the file name (``rank-3``, ``*_rank_3*``,
``rank3``), else by the files' sorted order. One rule is used for the whole set: the first that
gives every file a distinct rank.
"""
from __future__ import annotations

import fnmatch
import glob
import gzip
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import TraceError, UserError
from ..trace.open_trace import MAPPING_PATTERN, TRACE_NAMES

HEAD_BYTES = 1 << 20
_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")
_NAME_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_DIST = re.compile(rb'"distributedInfo"\s*:\s*\{(?P<body>[^{}]*(?:\{[^{}]*\}[^{}]*)*)\}')
_RANK = re.compile(rb'"rank"\s*:\s*(-?\d+)')
_GLOB = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class RankTrace:
    """One rank's trace file and its sizes on disk and decompressed."""

    rank: int
    path: Path
    size: int            # bytes on disk
    raw_size: int        # bytes decompressed (gzip's trailer), or the file size


@dataclass(frozen=True)
class RankSet:
    """The rank traces found from one folder or glob, and where their rank numbers came from."""

    source: str                  # the folder or glob as given
    rank_source: str             # distributedInfo | file name | order
    traces: tuple[RankTrace, ...]


def is_trace_name(name: str) -> bool:
    """A Kineto trace's file name (TorchNeuron's framework_mapping_*.json beside it are not traces)."""
    return name.endswith(_SUFFIXES) and not fnmatch.fnmatch(name, MAPPING_PATTERN)


def candidates(path: str) -> list[Path] | None:
    """The trace files a folder or glob names, or None when ``path`` is a single trace or bundle
    (or a folder holding only one)."""
    found = listing(path)
    if found is None or (len(found) < 2 and not _GLOB.search(path)):
        return None
    return found


def listing(path: str) -> list[Path] | None:
    """Every trace a glob matches or a (non-bundle) folder holds; None for a file or a bundle."""
    if _GLOB.search(path) and not Path(path).exists():
        found = sorted(Path(p) for p in glob.glob(path) if _is_trace(Path(p)))
        if not found:
            raise UserError(f"{path}: the pattern matches no trace (*.json, *.json.gz, or bundle folders)")
        return found
    p = Path(path)
    if not p.is_dir() or any((p / n).is_file() for n in TRACE_NAMES):
        return None
    return sorted(q for q in p.iterdir() if _is_trace(q))


def _is_trace(q: Path) -> bool:
    if q.is_file():
        return is_trace_name(q.name)
    return q.is_dir() and any((q / n).is_file() for n in TRACE_NAMES)


def _file_of(q: Path) -> Path:
    if q.is_dir():
        return next(q / n for n in TRACE_NAMES if (q / n).is_file())
    return q


def head(path: Path, nbytes: int = HEAD_BYTES) -> bytes:
    """The first ``nbytes`` of a trace's text (decompressed when gzipped)."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
            fh.seek(0)
            if magic == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=fh) as gz:
                    return gz.read(nbytes)
            return fh.read(nbytes)
    except (OSError, EOFError, zlib.error) as err:
        raise TraceError(path, f"cannot be read: {err}") from None


def distributed_rank(path: Path) -> int | None:
    """``distributedInfo.rank`` when the trace states it near its start."""
    m = _DIST.search(head(path))
    if not m:
        return None
    r = _RANK.search(m.group("body"))
    return int(r.group(1)) if r else None


def name_rank(path: Path) -> int | None:
    """The rank number in a trace's file name (or its folder's, for a bundle's fixed trace name); None when there is none."""
    hits = _NAME_RANK.findall(path.name if path.name not in TRACE_NAMES else path.parent.name)
    return int(hits[-1]) if hits else None


def raw_size(path: Path) -> int:
    """Decompressed size of a gzip file from its trailer (mod 4 GiB: good enough to size a pool)."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b" or size < 18:
                return size
            fh.seek(-4, os.SEEK_END)
            isize = int.from_bytes(fh.read(4), "little")
    except OSError:
        return size
    while isize < size:  # wrapped past 4 GiB
        isize += 1 << 32
    return isize


def discover(path: str, files: list[Path] | None = None) -> RankSet:
    """Rank traces under a folder or glob, each with its rank."""
    found = [_file_of(q) for q in (files if files is not None else listing(path) or [])]
    if len(found) < 1:
        raise UserError(f"{path}: no rank traces found")
    by_info = [distributed_rank(f) for f in found]
    by_name = [name_rank(f) for f in found]
    ranks: list[int]
    if all(r is not None for r in by_info) and len(set(by_info)) == len(found):
        ranks, how = [int(r) for r in by_info if r is not None], "distributedInfo"
    elif all(r is not None for r in by_name) and len(set(by_name)) == len(found):
        ranks, how = [int(r) for r in by_name if r is not None], "file name"
    else:
        ranks, how = list(range(len(found))), "order"
    traces = sorted((RankTrace(rank=r, path=f.resolve(), size=f.stat().st_size, raw_size=raw_size(f))
                     for r, f in zip(ranks, found)), key=lambda t: t.rank)
    return RankSet(source=path, rank_source=how, traces=tuple(traces))
