"""Turn decoded chunks into column arrays (numpy), interning repeated strings."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np

from ..errors import TraceError
from ._decode import Event, Skipped, args_of, int_column, raw_text
from .schema import CATEGORY_KIND, KINDS, MTIA_DEVICE_KIND

_TS_TEXT = re.compile(rb'"ts"\s*:\s*(-?\d+)(?:\.(\d+))?')
_PRECISE_ABOVE_US = float(2**33)  # above this many µs a double no longer holds whole ns

_get = {k: attrgetter(k) for k in ("ph", "name", "cat", "ts", "dur")}
_ARG_INTS = ("correlation", "seq", "fwd_tid", "python_id", "python_parent_id", "nbytes")


def _intern(table: dict[Any, int], values: list[Any]) -> np.ndarray:
    setdefault = table.setdefault
    return np.fromiter((setdefault(v, len(table)) for v in values), dtype=np.int32, count=len(values))


@dataclass
class Columns:
    """Growing columns of the complete events, plus everything else the trace holds."""

    names: dict[str | None, int] = field(default_factory=dict)
    cats: dict[str | None, int] = field(default_factory=dict)
    threads: dict[tuple[Any, Any], int] = field(default_factory=dict)
    parts: dict[str, list[np.ndarray]] = field(default_factory=dict)
    shapes: list[tuple[int, str | None, str | None, str | None, str | None]] = field(default_factory=list)
    thread_meta: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    instants: list[tuple[str | None, str | None, int, str, str]] = field(default_factory=list)
    flows: list[tuple[str, str | None, str, float, int]] = field(default_factory=list)
    phase_counts: dict[str, int] = field(default_factory=dict)
    n: int = 0
    imprecise_ts: int = 0

    def add(self, key: str, arr: np.ndarray) -> None:
        self.parts.setdefault(key, []).append(arr)

    def column(self, key: str) -> np.ndarray:
        parts = self.parts.get(key) or [np.empty(0, dtype=np.int64)]
        return np.concatenate(parts)


_pid_tid = attrgetter("pid", "tid")


def _thread_key(pid: Any, tid: Any) -> tuple[str, str]:
    return ("" if pid is None else str(pid), "" if tid is None else str(tid))


def _ns(us: np.ndarray) -> np.ndarray:
    """µs (float64) -> integer ns, exact for whole-µs values of any size."""
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


def _precise_ts(chunk: memoryview, events: list[Event]) -> np.ndarray | None:
    """Exact integer-ns start times read from the text, for traces whose µs floats exceed a double."""
    found = _TS_TEXT.findall(chunk)
    with_ts = [i for i, e in enumerate(events) if e.ts is not None]
    if len(found) != len(with_ts):
        return None
    out = np.full(len(events), np.iinfo(np.int64).min, dtype=np.int64)
    for i, (whole, frac) in zip(with_ts, found):
        out[i] = int(whole) * 1000 + (int(frac[:3].ljust(3, b"0")) if frac else 0) * (-1 if whole.startswith(b"-") else 1)
    return out


def add_chunk(
    cols: Columns, path: str, base: int, events: list[Event], chunk: memoryview,
    *, lenient: bool, skipped: Skipped,
) -> None:
    phases = list(map(_get["ph"], events))
    precise: np.ndarray | None = None
    x_idx = [i for i, p in enumerate(phases) if p == "X"]
    if len(x_idx) != len(events):
        _add_other_phases(cols, events, phases)
    xs = [events[i] for i in x_idx]
    if not xs:
        return
    ts = np.array([np.nan if v is None else v for v in map(_get["ts"], xs)], dtype=np.float64)
    dur = np.array([np.nan if v is None else v for v in map(_get["dur"], xs)], dtype=np.float64)
    if np.any(np.abs(ts[~np.isnan(ts)]) >= _PRECISE_ABOVE_US) and np.any(ts % 1 != 0):
        precise = _precise_ts(chunk, events)
        if precise is None:
            cols.imprecise_ts += len(xs)
    bad = np.isnan(ts) | np.isnan(dur) | (dur < 0)
    keep = ~bad
    if bad.any():
        first = int(np.argmax(bad))
        what = "has no ts" if np.isnan(ts[first]) else "has no dur" if np.isnan(dur[first]) else f"has a negative dur ({dur[first]:g})"
        if not lenient:
            e = xs[first]
            raise TraceError(path, f"event #{base + x_idx[first]} ({e.name!r}) {what} (use --lenient to skip such events)")
        for j in np.flatnonzero(bad):
            reason = "no ts" if np.isnan(ts[j]) else "no dur" if np.isnan(dur[j]) else "negative dur"
            skipped.add(reason, f"event #{base + x_idx[j]} ({xs[j].name!r})")
        xs = [e for e, k in zip(xs, keep) if k]
        x_idx = [i for i, k in zip(x_idx, keep) if k]
        ts, dur = ts[keep], dur[keep]
    n = len(xs)
    ts_ns = _ns(ts) if precise is None else precise[np.asarray(x_idx, dtype=np.int64)]
    cols.add("ts", ts_ns)
    cols.add("dur", np.rint(dur * 1000).astype(np.int64))
    cols.add("name", _intern(cols.names, list(map(_get["name"], xs))))
    cat_ids = _intern(cols.cats, list(map(_get["cat"], xs)))
    cols.add("cat", cat_ids)
    cols.add("thread", _intern(cols.threads, list(map(_pid_tid, xs))))
    args = args_of(xs)
    where = f"in {path}"
    for key in _ARG_INTS:
        cols.add(key, int_column(map(attrgetter(key), args), n, key, where))
    ext = [a.external_id if a.external_id is not None else a.external_id_lc for a in args]
    cols.add("external_id", int_column(ext, n, "External id", where))
    cols.add("device", int_column(map(attrgetter("device"), args), n, "device", where))
    stream = [a.stream if a.stream is not None else a.stream_id for a in args]
    cols.add("stream", int_column(stream, n, "stream", where))
    cols.add("flops", np.array([np.nan if a.flops is None else a.flops for a in args], dtype=np.float64))
    for j, a in enumerate(args):
        if a.input_dims or a.grid:
            cols.shapes.append((cols.n + j, raw_text(a.input_dims), raw_text(a.input_type),
                                raw_text(a.grid), raw_text(a.block)))
    cols.n += n


def _add_other_phases(cols: Columns, events: list[Event], phases: list[str]) -> None:
    for e, ph in zip(events, phases):
        if ph == "X":
            continue
        cols.phase_counts[ph] = cols.phase_counts.get(ph, 0) + 1
        if ph == "M":
            key = _thread_key(e.pid, e.tid if e.name and e.name.startswith("thread") else "")
            value = e.args.name if e.args.name is not None else e.args.labels
            if value is not None and e.name:
                cols.thread_meta.setdefault(key, {})[e.name] = value
        elif ph in ("i", "I"):
            ts = 0 if e.ts is None else int(round(e.ts * 1000))
            cols.instants.append((e.name, e.cat, ts, *_thread_key(e.pid, e.tid)))
        elif ph in ("s", "f", "t") and e.id is not None and e.ts is not None:
            thread = cols.threads.setdefault((e.pid, e.tid), len(cols.threads))
            cols.flows.append((str(e.id), e.cat, ph, e.ts, thread))


def flow_times(cols: Columns) -> None:
    """Flow timestamps (µs floats as read) to integer ns, in one vector pass."""
    if cols.flows:
        ns = _ns(np.array([f[3] for f in cols.flows], dtype=np.float64))
        cols.flows = [(f[0], f[1], f[2], int(t), f[4]) for f, t in zip(cols.flows, ns.tolist())]


def kinds_of(cols: Columns, name_list: np.ndarray, name_id: np.ndarray, cat_ids: np.ndarray) -> np.ndarray:
    """The kind code (index into schema.KINDS) of each event, from its category and, for MTIA, name."""
    cat_list = [None] * len(cols.cats)
    for c, i in cols.cats.items():
        cat_list[i] = c
    cat_kind = np.array([KINDS.index(CATEGORY_KIND.get((c or "").lower(), "other")) for c in cat_list] or [0],
                        dtype=np.int8)
    kinds = cat_kind[cat_ids]
    mtia_cat = np.array([(c or "").lower() == "mtia_ccp_events" for c in cat_list] or [False])
    if mtia_cat.any():
        by_name = np.array([KINDS.index(MTIA_DEVICE_KIND.get(str(nm), "device_other")) for nm in name_list], dtype=np.int8)
        sel = mtia_cat[cat_ids]
        kinds[sel] = by_name[name_id[sel]]
    return kinds
