"""A ``torch.cuda.memory._dump_snapshot`` pickle read without running it, into the memory tables.

A pickle is a program: ``pickle.load`` calls whatever its ``__reduce__`` names. Here the unpickler
resolves no global at all (``find_class`` refuses every name but ``set`` and ``frozenset``, which a
protocol-2 pickle of a set calls), and no persistent id, so what comes out can only be the builtin
containers and scalars the opcodes make themselves (dict, list, tuple, str, bytes, int, float, bool,
None); anything else is a one-line error naming the file. The file is capped in size
(PROFUSE_MAX_SNAPSHOT_BYTES), what it decodes to in depth, and what is read of it in rows (a pickle's
shared references can make a small file stand for an enormous tree: each container is checked once,
and every entry and frame read counts against MAX_ROWS, each time it is met).

The snapshot (torch/cuda/memory.py ``_snapshot``) holds ``segments`` (cudaMalloc'd memory with its
blocks and their frames) and ``device_traces`` (per device, the allocator's actions when
``_record_memory_history`` was on: alloc, free_requested, free_completed, segment_alloc,
segment_free, oom, snapshot, each with addr, size, stream, frames, time_us). See docs/memory.md.
"""
from __future__ import annotations

import io
import os
import pickle
import stat
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from ..errors import TraceError
from .schema import DDL, SCHEMA_VERSION
from .sniff import is_snapshot_path as is_snapshot_path  # where it was: told apart before DuckDB is imported
from .trace import Trace

MAX_SNAPSHOT_BYTES_ENV = "PROFUSE_MAX_SNAPSHOT_BYTES"
MAX_SNAPSHOT_BYTES = 4 << 30
MAX_DEPTH = 32         # a snapshot nests 6 deep (snapshot / segments / segment / blocks / block / frames)
MAX_ROWS = 100_000_000  # entries, blocks and frames read, shared ones counted each time
_ALLOWED_GLOBALS = {("builtins", "set"), ("builtins", "frozenset"), ("__builtin__", "set"),
                    ("__builtin__", "frozenset")}
_SCALARS = (str, bytes, int, float, bool, type(None))
_CONTAINERS = (dict, list, tuple, set, frozenset)
PICKLE_MAGIC = (b"\x80",)  # protocol 2+ (what torch writes); older protocols are refused as not a snapshot


class _Refused(Exception):
    pass


class _SafeUnpickler(pickle.Unpickler):
    """Builds builtin containers and scalars only: no global is looked up, no persistent id resolved."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_GLOBALS:
            return set if name == "set" else frozenset
        raise _Refused(f"it names {module}.{name}, and a memory snapshot holds only builtin containers and "
                       "scalars (refused without running it)")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("it uses a persistent id, which a memory snapshot never does (refused without running it)")


def _max_bytes() -> int:
    raw = os.environ.get(MAX_SNAPSHOT_BYTES_ENV)
    try:
        return int(raw) if raw else MAX_SNAPSHOT_BYTES
    except ValueError:
        return MAX_SNAPSHOT_BYTES


def read_snapshot(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The snapshot's dictionary, read without running anything (see the module docstring)."""
    where = str(path)
    try:
        fd = os.open(where, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise TraceError(where, f"cannot be read ({err.strerror or err})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TraceError(where, "not a regular file")
        limit = _max_bytes()
        if st.st_size > limit:
            raise TraceError(where, f"{st.st_size:,} bytes is over the snapshot limit of {limit:,} "
                                    f"({MAX_SNAPSHOT_BYTES_ENV} raises it)")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise TraceError(where, f"over the snapshot limit of {limit:,} bytes ({MAX_SNAPSHOT_BYTES_ENV} raises it)")
    if not data.startswith(PICKLE_MAGIC):
        raise TraceError(where, "not a memory snapshot: not a pickle of protocol 2 or later")
    try:
        obj = _SafeUnpickler(io.BytesIO(data)).load()
    except _Refused as err:
        raise TraceError(where, f"not a memory snapshot: {err}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            OverflowError, MemoryError, RecursionError, UnicodeDecodeError) as err:
        raise TraceError(where, f"not a readable pickle ({type(err).__name__}: {str(err)[:120]})") from None
    _check_tree(where, obj)
    if not isinstance(obj, dict) or not isinstance(obj.get("segments"), list) or not isinstance(
            obj.get("device_traces", []), list):
        raise TraceError(where, "a pickle, but not a torch memory snapshot (no 'segments' list)")
    return obj


def _check_tree(where: str, obj: Any) -> None:
    """Only builtin containers and scalars, at most MAX_DEPTH deep (each container checked once)."""
    stack: list[tuple[Any, int]] = [(obj, 0)]
    seen: set[int] = set()
    while stack:
        o, depth = stack.pop()
        if isinstance(o, _SCALARS):
            continue
        if id(o) in seen:
            continue
        seen.add(id(o))
        if not isinstance(o, _CONTAINERS):
            raise TraceError(where, f"not a memory snapshot: it holds a {type(o).__name__}")
        if depth >= MAX_DEPTH:
            raise TraceError(where, f"not a memory snapshot: nested deeper than {MAX_DEPTH}")
        items = [x for kv in o.items() for x in kv] if isinstance(o, dict) else list(o)
        stack.extend((x, depth + 1) for x in items)


def _str(v: Any) -> str:
    """A text field as it is; anything else (a container a hostile file put there: printing it could cost
    as much as the tree it stands for) as ""."""
    return v if isinstance(v, str) else ""


def _int(v: Any, default: int = 0) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63 else default


class _Budget:
    """Counts what is read of a snapshot against MAX_ROWS."""

    def __init__(self, where: str) -> None:
        self.where, self.left = where, MAX_ROWS

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise TraceError(self.where, f"not a memory snapshot: more than {MAX_ROWS:,} entries, blocks and "
                                         "frames (shared references counted each time they are met)")


def _frames(entry: dict[str, Any], budget: _Budget) -> list[tuple[str, str, int]]:
    frames = entry.get("frames")
    out = []
    budget.take(len(frames) if isinstance(frames, list) else 0)
    for f in frames if isinstance(frames, list) else []:
        if isinstance(f, dict):
            out.append((_str(f.get("name")), _str(f.get("filename")), _int(f.get("line"))))
    return out


def _site(frames: list[tuple[str, str, int]]) -> int:
    """The frame an allocation is grouped by: the innermost Python frame outside torch itself, else the first."""
    for i, (_, filename, _) in enumerate(frames):
        if filename.endswith(".py") and "/torch/" not in filename:
            return i
    return 0


ALLOC_ACTIONS = {"alloc": 1, "free_completed": -1}
SEGMENT_ACTIONS = {"segment_alloc": 1, "segment_free": -1, "segment_map": 1, "segment_unmap": -1}


def load_snapshot(path: str | os.PathLike[str]) -> Trace:
    """A :class:`Trace` whose ``memory`` table holds the snapshot's alloc/free entries with the totals
    reconstructed from the final state, ``memory_frames`` their frames, and ``memory_segments`` /
    ``memory_blocks`` the state at the snapshot (its ``events`` table is empty)."""
    snap = read_snapshot(path)
    con = duckdb.connect()
    try:
        con.execute("ATTACH ':memory:' AS trace; USE trace")
        con.execute(DDL)
        counts = _write_snapshot(con, snap, _Budget(str(path)))
        import json
        con.execute("INSERT INTO meta VALUES ('schema_version', ?), ('source', ?), ('path', ?), "
                    "('device_kind', '\"CUDA\"'), ('events', '0'), ('span_us', '0'), ('memory_snapshot', ?)",
                    [json.dumps(SCHEMA_VERSION), json.dumps({"format": "torch memory snapshot"}),
                     json.dumps(str(path)), json.dumps(counts)])
    except BaseException:
        con.close()
        raise
    return Trace(Path(path), con, from_cache=False, writer=None, notes=[])


def _write_snapshot(con: duckdb.DuckDBPyConnection, snap: dict[str, Any], budget: _Budget) -> dict[str, int]:
    segs, blocks, end_alloc, end_reserved = _segments(snap, budget)
    rows, frames = _history(snap, budget, end_alloc, end_reserved)
    if rows:
        _insert_history(con, rows, frames)
    _insert(con, "memory_segments", segs, 7)
    _insert(con, "memory_blocks", blocks, 9)
    return {"segments": len(segs), "blocks": len(blocks), "entries": len(rows), "frames": len(frames)}


def _segments(snap: dict[str, Any], budget: _Budget) -> tuple[list[Any], list[Any], dict[int, int], dict[int, int]]:
    """The snapshot's segments and blocks as rows, and per device what was allocated and reserved at its end."""
    segs, blocks = [], []
    end_alloc: dict[int, int] = {}
    end_reserved: dict[int, int] = {}
    segments = snap.get("segments")
    budget.take(len(segments) if isinstance(segments, list) else 0)
    for s in segments if isinstance(segments, list) else []:
        if not isinstance(s, dict):
            continue
        dev, addr, total = _int(s.get("device")), _int(s.get("address")), _int(s.get("total_size"))
        segs.append((dev, addr, total, _int(s.get("stream")), _str(s.get("segment_type")),
                     _int(s.get("allocated_size")), _int(s.get("active_size"))))
        end_reserved[dev] = end_reserved.get(dev, 0) + total
        seg_blocks = s.get("blocks")
        budget.take(len(seg_blocks) if isinstance(seg_blocks, list) else 0)
        for b in seg_blocks if isinstance(seg_blocks, list) else []:
            if not isinstance(b, dict):
                continue
            state = _str(b.get("state"))
            size = _int(b.get("size"))
            fr = _frames(b, budget)
            site = fr[_site(fr)] if fr else ("", "", 0)
            blocks.append((dev, addr, _int(b.get("address")), size, _int(b.get("requested_size")), state,
                           site[0], site[1], site[2]))
            if state in ("active_allocated", "active_awaiting_free"):
                end_alloc[dev] = end_alloc.get(dev, 0) + size
    return segs, blocks, end_alloc, end_reserved


def _history(snap: dict[str, Any], budget: _Budget, end_alloc: dict[int, int],
             end_reserved: dict[int, int]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Each device's allocation history as rows (id, device, ns, bytes, address, allocated and reserved
    after it), counted back from the end state, and their frames."""
    rows: list[tuple[Any, ...]] = []
    frames: list[tuple[Any, ...]] = []
    traces = snap.get("device_traces") or []
    # every entry is counted before any is read, so a shared list met a million times fails at once
    budget.take(sum(len(t) for t in traces if isinstance(t, list)) if isinstance(traces, list) else 0)
    for dev, entries in enumerate(traces if isinstance(traces, list) else []):
        acts = [e for e in (entries if isinstance(entries, list) else []) if isinstance(e, dict)]
        alloc_net = sum(ALLOC_ACTIONS.get(_str(e.get("action")), 0) * _int(e.get("size")) for e in acts)
        seg_net = sum(SEGMENT_ACTIONS.get(_str(e.get("action")), 0) * _int(e.get("size")) for e in acts)
        allocated = end_alloc.get(dev, 0) - alloc_net   # what was allocated when the history began
        reserved = end_reserved.get(dev, 0) - seg_net
        for i, e in enumerate(acts):
            action = _str(e.get("action"))
            size = _int(e.get("size"))
            if action in SEGMENT_ACTIONS:
                reserved += SEGMENT_ACTIONS[action] * size
                continue
            if action not in ALLOC_ACTIONS:
                continue
            nbytes = ALLOC_ACTIONS[action] * size
            allocated += nbytes
            ts = _int(e.get("time_us"), i) * 1000
            mid = len(rows)
            rows.append((mid, dev, ts, nbytes, _int(e.get("addr")), allocated, reserved))
            entry_frames = _frames(e, budget)
            at = _site(entry_frames)
            frames.extend((mid, d, n, f, ln, d == at) for d, (n, f, ln) in enumerate(entry_frames))
    return rows, frames


def _insert_history(con: duckdb.DuckDBPyConnection, rows: list[tuple[Any, ...]], frames: list[tuple[Any, ...]]) -> None:
    """The history into ``memory`` in (device, time) order, frees matched to their allocations, and the frames."""
    ids, dev_, ts_, nb, addr_, tot, res = (np.array(c, dtype=np.int64) for c in zip(*rows))
    order = np.lexsort((ids, ts_, dev_))
    remap = np.empty(len(ids), dtype=np.int64)
    remap[order] = np.arange(len(ids))
    alloc, free = _match(nb[order], addr_[order], dev_[order])
    con.register("_snap", {"id": np.arange(len(ids), dtype=np.int64), "device": dev_[order], "ts": ts_[order],
                           "bytes": nb[order], "addr": addr_[order], "total_allocated": tot[order],
                           "total_reserved": res[order], "alloc": alloc, "free": free})
    con.execute("""INSERT INTO memory SELECT id, 'CUDA', device, ts, bytes, addr, total_allocated, total_reserved,
                   NULL, NULL, NULL, NULL, NULLIF(alloc, -1), NULLIF(free, -1), bytes < 0 AND alloc = -1
                   FROM _snap""")
    con.unregister("_snap")
    if frames:
        cols = list(zip(*frames))
        con.register("_fr", {"id": remap[np.array(cols[0], dtype=np.int64)], "depth": np.array(cols[1]),
                             "name": np.array(cols[2], dtype=object), "filename": np.array(cols[3], dtype=object),
                             "line": np.array(cols[4], dtype=np.int64), "site": np.array(cols[5], dtype=bool)})
        con.execute("INSERT INTO memory_frames SELECT id, depth, name, filename, line, site FROM _fr")
        con.unregister("_fr")


def _match(nbytes: np.ndarray, addr: np.ndarray, device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from .memory import match_frees
    return match_frees(nbytes, addr, np.zeros(len(nbytes), dtype=np.int64), device)


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[tuple[Any, ...]], width: int) -> None:
    if not rows:
        return
    cols = list(zip(*rows))
    con.register("_rows", {f"c{i}": np.array(cols[i], dtype=object) for i in range(width)})
    con.execute(f"INSERT INTO {table} SELECT * FROM _rows")
    con.unregister("_rows")
