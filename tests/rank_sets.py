"""Build sets of rank traces from one real trace, with known injected delays and clock offsets.

Every rank is a copy of the source trace. On the straggler rank everything from the end of the
collective before the chosen one onwards starts ``delay_us`` later (its compute before that
collective took longer); on every other rank the chosen collective kernel lasts ``delay_us`` longer
(it waited) and everything after it starts that much later. So all ranks leave every collective
together, the straggler arrives ``delay_us`` late at the chosen one, and it made each of the other
``n - 1`` ranks wait ``delay_us``. Then each rank's whole timeline is moved by its clock offset.
"""
from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any


def is_comm_kernel(e: dict[str, Any]) -> bool:
    return e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel" and "nccl" in str(e.get("name", "")).lower()


def comm_kernels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted((e for e in doc["traceEvents"] if is_comm_kernel(e)), key=lambda e: e["ts"])


def _shift(e: dict[str, Any], at: float, by: float) -> None:
    """Events starting at or after ``at`` move by ``by``; events running across ``at`` stretch by it."""
    ts = e.get("ts")
    if not isinstance(ts, (int, float)):
        return
    if ts >= at:
        e["ts"] = ts + by
    elif isinstance(e.get("dur"), (int, float)) and ts + e["dur"] > at:
        e["dur"] = e["dur"] + by


def make_rank(doc: dict[str, Any], rank: int, n: int, *, straggler: int | None, delay_us: float,
              collective: int, offset_us: float) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    events = out["traceEvents"]
    kernels = comm_kernels(out)
    if straggler is not None and delay_us:
        target = kernels[collective]
        before = kernels[collective - 1]["ts"] + kernels[collective - 1]["dur"] if collective else target["ts"]
        if rank == straggler:
            for e in events:
                _shift(e, before, delay_us)
        else:
            end = target["ts"] + target["dur"]
            for e in events:
                _shift(e, end, delay_us)
            target["dur"] += delay_us
    if offset_us:
        for e in events:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] += offset_us
    info = dict(out.get("distributedInfo") or {})
    info.update(rank=rank, world_size=n)
    out["distributedInfo"] = info
    return out


def write_trace(doc: dict[str, Any], path: Path) -> Path:
    # distributedInfo first, as Kineto writes it (profuse reads the rank from the file's start)
    ordered = {k: doc[k] for k in doc if k != "traceEvents"} | {"traceEvents": doc["traceEvents"]}
    with gzip.open(path, "wt", compresslevel=1) as fh:
        json.dump(ordered, fh)
    return path


def build_set(src: Path, folder: Path, n: int, *, straggler: int | None = None, delay_us: float = 0.0,
              collective: int = 0, offsets_us: dict[int, float] | None = None,
              name: str = "trace_rank_{rank}.json.gz") -> list[Path]:
    """``n`` rank traces in ``folder`` built from ``src``; see the module docstring."""
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(src, "rt") as fh:
        doc = json.load(fh)
    paths = []
    for r in range(n):
        one = make_rank(doc, r, n, straggler=straggler, delay_us=delay_us, collective=collective,
                        offset_us=(offsets_us or {}).get(r, 0.0))
        paths.append(write_trace(one, folder / name.format(rank=r)))
    return paths
