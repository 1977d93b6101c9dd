"""packed_order (by thread first, then one Timsort of the packed keys) against its definition, np.lexsort,
on every shared trace's nesting and memory keys and on hand-built keys."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from profuse.trace import build
from profuse.trace import memory as memory_module
from profuse.trace._columns import packed_order
from profuse.trace._prepare import base_time_ns, prepare
from profuse.trace.correlate import device_threads
from profuse.trace.event_columns import kind_mask
from profuse.trace.schema import DEVICE_KINDS
from tests.conftest import ALL_TRACES, trace_id


def _lexsort(major: np.ndarray, minor: np.ndarray, tie: np.ndarray | None = None) -> np.ndarray:
    """The previous rule, as packed_order's docstring defines it."""
    return np.lexsort((minor, major) if tie is None else (tie, minor, major))


def _same(major: np.ndarray, minor: np.ndarray, tie: np.ndarray | None = None) -> None:
    np.testing.assert_array_equal(packed_order(major, minor, tie), _lexsort(major, minor, tie))


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_as_lexsort_on_the_shared_traces(path: Path) -> None:
    cols, top, _ = build.decode(str(path))
    memory = memory_module.scanned_memory_events(cols)
    events = prepare(str(path), cols, base_time_ns(str(path), top.get("baseTimeNanoseconds"))).events
    kind, thread = events.kind, events.thread
    host = ~kind_mask(kind, *DEVICE_KINDS) & ~device_threads(kind, thread, len(events.pid_of_thread))[thread]
    idx = np.flatnonzero(host)
    end = events.ts[idx] + np.maximum(events.dur[idx], 1)
    _same(thread[idx], events.ts[idx], -end)                 # correlate's nesting order
    _same(thread, events.ts)                                 # every event, by thread and start
    _same(thread.astype(np.int32), events.ts, events.dur)    # int32 majors, as memory's host runs pass them
    if memory is not None and len(memory):
        major = memory.device_type * (int(memory.device.max()) + 2) + memory.device + 1
        _same(major, memory.addr)                            # memory's address order


def test_as_lexsort_on_hand_built_keys() -> None:
    rng = np.random.default_rng(7)
    n = 50_000
    for threads in (1, 2, 3, 40, 1 << 15, 1 << 16):         # one major, a few, and past the radix step's int16
        major = rng.integers(0, threads, n)
        minor = np.sort(rng.integers(-1000, 1000, n))        # nearly sorted per major, with ties
        minor[rng.integers(0, n, n // 100)] = rng.integers(-1000, 1000, n // 100)
        tie = rng.integers(0, 3, n)
        _same(major, minor)
        _same(major, minor, tie)
        _same(major + 10**12, minor)                         # offset majors
        _same(major.astype(np.int32), -minor, tie)
    _same(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    _same(np.array([5]), np.array([2**40]))
    _same(np.array([3, 3, 1, 1, 2]), np.array([0, 0, 0, 0, 0]))   # all tied: by position
    wide = np.array([0, 2**62, -(2**62), 5], dtype=np.int64)       # keys that do not pack: lexsort itself
    _same(np.array([1, 0, 1, 0]), wide)
