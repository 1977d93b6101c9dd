"""A ``torch.cuda.memory._dump_snapshot`` pickle read without running it, into the memory tables.

A pickle is a program: ``pickle.load`` calls whatever its ``__reduce__`` names. Here the unpickler
resolves no global at all (``find_class`` refuses every name but ``set`` and ``frozenset``, which a
protocol-2 pickle of a set calls), and no persistent id, so what comes out can only be the builtin
containers and scalars the opcodes make themselves (dict, list, tuple, str, bytes, int, float, bool,
None); anything else is a one-line error naming the file. The file is capped in size
(PROFUSE_MAX_SNAPSHOT_BYTES; read as big as it is, never a buffer of the cap's size), what it decodes to
in depth, and what is read of it in rows: a pickle's shared references can make a small file stand for an
enormous tree, so each container is checked once, and the entries, blocks and frames it stands for,
shared ones counted each time they are met, are counted before any is read and may number at most
ROWS_PER_BYTE per byte of the file (at least MIN_ROWS, at most MAX_ROWS): the work is bounded by the
file's size.

The history is a ring buffer that may have started late or stopped early: where the totals rebuilt
from the final state would go below zero (the history saw more allocated than the end state holds: it
stopped before the frees), the two disagree, and the device's totals are counted from the least start
that keeps them at zero or more; ``meta.memory_snapshot`` says so (``history_disagrees``: the devices,
``history_disagrees_bytes`` / ``history_disagrees_reserved_bytes``: by how much the allocated and the reserved
starts were raised).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import duckdb
import numpy as np

from ..errors import TraceError
from .numbers import int64
from .schema import DDL, SCHEMA_VERSION
from .sniff import is_snapshot_path as is_snapshot_path  # where it was: told apart before DuckDB is imported
from .trace import Trace

MAX_SNAPSHOT_BYTES_ENV = "PROFUSE_MAX_SNAPSHOT_BYTES"
MAX_SNAPSHOT_BYTES = 4 << 30
MAX_DEPTH = 32         # a snapshot nests 6 deep (snapshot / segments / segment / blocks / block / frames)
MAX_ROWS = 20_000_000   # entries, blocks and frames read, shared ones counted each time (~2.5 GB at most)
ROWS_PER_BYTE = 4       # ... per byte of the file: torch shares a frame list only among one block's entries
MIN_ROWS = 1_000_000    # ... whatever the file's size
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
    return _read(path)[0]


def _read_capped(fh: BinaryIO, size: int, limit: int) -> bytes:
    """The file's bytes: ``size`` (by fstat) and, where it grew since, on up to ``limit`` + 1 (never a
    buffer of the limit's size up front)."""
    data: bytes = fh.read(min(size, limit) + 1)
    while len(data) <= limit:
        more = fh.read(min(1 << 20, limit + 1 - len(data)))
        if not more:
            break
        data += more
    return data


def _read(path: str | os.PathLike[str]) -> tuple[dict[str, Any], int]:
    """:func:`read_snapshot`, and how many bytes the file held."""
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
            data = _read_capped(fh, st.st_size, limit)
    except MemoryError:
        raise TraceError(where, "does not fit in the memory left") from None
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
    except MemoryError:
        raise TraceError(where, "does not fit in the memory left (unpickling it)") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            OverflowError, RecursionError, UnicodeDecodeError) as err:
        raise TraceError(where, f"not a readable pickle ({type(err).__name__}: {str(err)[:120]})") from None
    _check_tree(where, obj)
    if not isinstance(obj, dict) or not isinstance(obj.get("segments"), list) or not isinstance(
            obj.get("device_traces", []), list):
        raise TraceError(where, "a pickle, but not a torch memory snapshot (no 'segments' list)")
    return obj, len(data)


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
    got = int64(v)
    return default if got is None else got


def _size(v: Any) -> int:
    """A size in bytes: a whole number from 0 to 2^62; anything else (negative, absurd, not a number) 0."""
    got = int64(v)
    return got if got is not None and 0 <= got < 2**62 else 0


def row_limit(size: int) -> int:
    """The most entries, blocks and frames a snapshot file of ``size`` bytes may stand for."""
    return min(MAX_ROWS, max(MIN_ROWS, ROWS_PER_BYTE * size))


class _Budget:
    """Counts what is read of a snapshot against :func:`row_limit` of its size."""

    def __init__(self, where: str, size: int = 0) -> None:
        self.where, self.size, self.limit = where, size, row_limit(size)
        self.left = self.limit

    def take(self, n: int) -> None:
        """Count ``n`` rows; refuse the file once they pass the limit."""
        self.left -= n
        if self.left < 0:
            raise TraceError(self.where, f"not a memory snapshot: its {self.size:,} bytes stand for more than "
                                         f"{self.limit:,} entries, blocks and frames (shared references counted "
                                         f"each time they are met; at most {ROWS_PER_BYTE} per byte of the file, "
                                         f"{MIN_ROWS:,} for any file, {MAX_ROWS:,} in all)")


def _frames(entry: dict[str, Any]) -> list[tuple[str, str, int]]:
    frames = entry.get("frames")
    out = []
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
    snap, size = _read(path)
    budget = _Budget(str(path), size)
    _count(snap, budget)  # everything it stands for, counted before anything is read
    con = duckdb.connect()
    try:
        con.execute("ATTACH ':memory:' AS trace; USE trace")
        con.execute(DDL)
        try:
            counts = _write_snapshot(con, snap, budget)
        except OverflowError:
            raise TraceError(str(path), "not a memory snapshot: its sizes add up beyond 64 bits") from None
        except MemoryError:   # numpy's _ArrayMemoryError included: under an address-space limit, one line
            read = budget.limit - budget.left
            raise TraceError(str(path), f"more than this machine's memory allows to read ({read:,} entries, blocks "
                                        "and frames): a snapshot that large needs a larger machine") from None
        import json
        con.execute("INSERT INTO meta VALUES ('schema_version', ?), ('source', ?), ('path', ?), "
                    "('device_kind', '\"CUDA\"'), ('events', '0'), ('span_us', '0'), ('memory_snapshot', ?)",
                    [json.dumps(SCHEMA_VERSION), json.dumps({"format": "torch memory snapshot"}),
                     json.dumps(str(path)), json.dumps(counts)])
    except BaseException:
        con.close()
        raise
    return Trace(Path(path), con, from_cache=False, writer=None, notes=[])


def _lists(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _count(snap: dict[str, Any], budget: _Budget) -> None:
    """Count the segments, blocks, entries and frames the snapshot stands for (shared ones each time
    they are met), stopping at the budget: looking costs no more than the budget allows."""
    segments = _lists(snap.get("segments"))
    budget.take(len(segments))
    lists = [_lists(s.get("blocks")) for s in segments if isinstance(s, dict)]
    for entries in (*lists, *_lists(snap.get("device_traces"))):  # each list's work is within the file's size
        entries = _lists(entries)
        budget.take(len(entries) + sum(len(_lists(e.get("frames"))) for e in entries if isinstance(e, dict)))
    budget.left = budget.limit  # what follows counts again as it reads (the same rows, so it never fails)


def _write_snapshot(con: duckdb.DuckDBPyConnection, snap: dict[str, Any], budget: _Budget) -> dict[str, int]:
    segs, blocks, end_alloc, end_reserved = _segments(snap, budget)
    hist = _history(snap, budget, end_alloc, end_reserved)
    if hist.rows:
        _insert_history(con, hist)
    _insert(con, "memory_segments", segs, 7)
    _insert(con, "memory_blocks", blocks, 9)
    counts = {"segments": len(segs), "blocks": len(blocks), "entries": len(hist.rows), "frames": hist.n_frames}
    if hist.raised:
        counts["history_disagrees"] = len(hist.raised)
        counts["history_disagrees_bytes"] = sum(hist.raised.values())
        counts["history_disagrees_reserved_bytes"] = sum(hist.raised_reserved.values())
    return counts


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
        dev, addr, total = _int(s.get("device")), _int(s.get("address")), _size(s.get("total_size"))
        segs.append((dev, addr, total, _int(s.get("stream")), _str(s.get("segment_type")),
                     _size(s.get("allocated_size")), _size(s.get("active_size"))))
        end_reserved[dev] = end_reserved.get(dev, 0) + total
        seg_blocks = s.get("blocks")
        budget.take(len(seg_blocks) if isinstance(seg_blocks, list) else 0)
        for b in seg_blocks if isinstance(seg_blocks, list) else []:
            if not isinstance(b, dict):
                continue
            state = _str(b.get("state"))
            size = _size(b.get("size"))
            budget.take(len(_lists(b.get("frames"))))
            fr = _frames(b)
            site = fr[_site(fr)] if fr else ("", "", 0)
            blocks.append((dev, addr, _int(b.get("address")), size, _size(b.get("requested_size")), state,
                           site[0], site[1], site[2]))
            if state in ("active_allocated", "active_awaiting_free"):
                end_alloc[dev] = end_alloc.get(dev, 0) + size
    return segs, blocks, end_alloc, end_reserved


@dataclass
class _History:
    """The allocation history as columns, its frames as each distinct frame list once, and per device by
    how much the start was raised where the history and the final state disagree."""

    rows: list[tuple[int, int, int, int, int]] = field(default_factory=list)   # id, device, ns, bytes, addr
    allocated: list[int] = field(default_factory=list)
    reserved: list[int] = field(default_factory=list)
    framed: list[tuple[int, int]] = field(default_factory=list)  # (row id, key of its frame list)
    frame_sets: dict[int, list[tuple[str, str, int]]] = field(default_factory=dict)
    raised: dict[int, int] = field(default_factory=dict)           # device -> bytes the allocated start rose
    raised_reserved: dict[int, int] = field(default_factory=dict)  # device -> bytes the reserved start rose

    @property
    def n_frames(self) -> int:
        return sum(len(self.frame_sets[k]) for _, k in self.framed)


def _history(snap: dict[str, Any], budget: _Budget, end_alloc: dict[int, int], end_reserved: dict[int, int]) -> _History:
    """Each device's allocation history as rows (id, device, ns, bytes, address, allocated and reserved
    after it), counted back from the end state, and their frames."""
    hist = _History()
    traces = _lists(snap.get("device_traces"))
    budget.take(sum(len(_lists(t)) for t in traces))
    parsed: dict[int, tuple[str, int, int | None, int]] = {}  # an entry met again is read once
    for dev, entries in enumerate(traces):
        acts = [(e, parsed.get(id(e)) or parsed.setdefault(id(e), _entry(e))) for e in _lists(entries)
                if isinstance(e, dict)]
        alloc_net = sum(ALLOC_ACTIONS.get(a[0], 0) * a[1] for _, a in acts)
        seg_net = sum(SEGMENT_ACTIONS.get(a[0], 0) * a[1] for _, a in acts)
        first = len(hist.rows)
        allocated = end_alloc.get(dev, 0) - alloc_net   # what was allocated when the history began
        reserved = end_reserved.get(dev, 0) - seg_net
        low_alloc, low_res = allocated, reserved
        for i, (e, (action, size, time_us, addr)) in enumerate(acts):
            if action in SEGMENT_ACTIONS:
                reserved += SEGMENT_ACTIONS[action] * size
                low_res = min(low_res, reserved)
                continue
            if action not in ALLOC_ACTIONS:
                continue
            nbytes = ALLOC_ACTIONS[action] * size
            allocated += nbytes
            low_alloc = min(low_alloc, allocated)
            mid = len(hist.rows)
            hist.rows.append((mid, dev, (i if time_us is None else time_us) * 1000, nbytes, addr))
            hist.allocated.append(allocated)
            hist.reserved.append(reserved)
            _take_frames(hist, mid, e, budget)
        _raise_start(hist, dev, first, -min(low_alloc, 0), -min(low_res, 0))
    return hist


def _entry(e: dict[str, Any]) -> tuple[str, int, int | None, int]:
    """An entry's action, size, time (µs; None where it has none, or one whose ns would not fit 62 bits) and address."""
    t = e.get("time_us")
    ok = isinstance(t, int) and not isinstance(t, bool) and abs(t) < (1 << 62) // 1000
    return _str(e.get("action")), _size(e.get("size")), t if ok else None, _int(e.get("addr"))


def _take_frames(hist: _History, mid: int, entry: dict[str, Any], budget: _Budget) -> None:
    """Note entry ``mid``'s frames: a frame list met before (torch shares one among a block's entries;
    a hostile file among all) is read once and kept once."""
    frames = entry.get("frames")
    if not isinstance(frames, list) or not frames:
        return
    key = id(frames)  # the snapshot holds every list while the history is read: ids stay distinct
    budget.take(len(frames))
    if key not in hist.frame_sets:
        hist.frame_sets[key] = _frames(entry)
    hist.framed.append((mid, key))


def _raise_start(hist: _History, dev: int, first: int, by_alloc: int, by_res: int) -> None:
    """Where the totals rebuilt backwards from the final state go below zero, the history saw more than the
    end state holds (it stopped before the frees, or the state lost blocks): count the device's totals from
    the least start that keeps them at zero or more, and note by how much it was raised."""
    by_alloc, by_res = max(by_alloc, 0), max(by_res, 0)   # a total already at zero or more stays as it is
    if not by_alloc and not by_res:
        return
    hist.raised[dev] = by_alloc
    hist.raised_reserved[dev] = by_res
    for i in range(first, len(hist.rows)):
        hist.allocated[i] += by_alloc
        hist.reserved[i] += by_res


def _insert_history(con: duckdb.DuckDBPyConnection, hist: _History) -> None:
    """The history into ``memory`` in (device, time) order, frees matched to their allocations, and the frames."""
    ids, dev_, ts_, nb, addr_ = (np.array(c, dtype=np.int64) for c in zip(*hist.rows))
    tot, res = np.array(hist.allocated, dtype=np.int64), np.array(hist.reserved, dtype=np.int64)
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
    cols = _frame_columns(hist)
    if cols is not None:
        cols["id"] = remap[cols["id"]]
        con.register("_fr", cols)
        con.execute("INSERT INTO memory_frames SELECT id, depth, name, filename, line, site FROM _fr")
        con.unregister("_fr")


def _frame_columns(hist: _History) -> dict[str, np.ndarray] | None:
    """``memory_frames``' columns: each entry's frames, from its frame list's one copy (None: no frames)."""
    keys = list(hist.frame_sets)
    if not hist.framed or not keys:
        return None
    slot = {k: i for i, k in enumerate(keys)}
    sets = [hist.frame_sets[k] for k in keys]
    lens = np.array([len(f) for f in sets], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(lens)[:-1]))
    sites = np.array([_site(f) for f in sets], dtype=np.int64)
    flat = [f for fs in sets for f in fs]
    names = np.array([f[0] for f in flat], dtype=object)
    files = np.array([f[1] for f in flat], dtype=object)
    lines = np.array([f[2] for f in flat], dtype=np.int64)
    mids = np.array([m for m, _ in hist.framed], dtype=np.int64)
    which = np.array([slot[k] for _, k in hist.framed], dtype=np.int64)
    n = lens[which]
    keep = n > 0
    mids, which, n = mids[keep], which[keep], n[keep]
    starts = np.repeat(np.cumsum(n) - n, n)
    depth = np.arange(int(n.sum()), dtype=np.int64) - starts
    src = np.repeat(offsets[which], n) + depth
    return {"id": np.repeat(mids, n), "depth": depth, "name": names[src], "filename": files[src],
            "line": lines[src], "site": depth == np.repeat(sites[which], n)}


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
