"""correlate's device and stream columns, worked out for the device events alone, against the previous rule
(every event's columns, then masked: kept below as the oracle) on every shared trace and hand-built cases."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from profuse.trace import build
from profuse.trace._prepare import base_time_ns, prepare
from profuse.trace.correlate import _device_and_stream
from profuse.trace.event_columns import NONE, DecodedEvents, kind_mask, narrowed
from profuse.trace.schema import DEVICE_KINDS, KIND_CODE
from tests.conftest import ALL_TRACES, trace_id
from tests.test_correlate_rules import Ev, decoded


def _previous(events: DecodedEvents, is_device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rule as it was: each event's device and stream from args, else its thread's pid and tid, then
    -1 for the host events."""
    device = np.where(events.device < 0, events.pid_of_thread[events.thread], events.device)
    stream = np.where(events.stream < 0, events.tid_of_thread[events.thread], events.stream)
    return np.where(is_device, device, NONE), np.where(is_device, stream, NONE)


def _same(events: DecodedEvents) -> None:
    is_device = kind_mask(events.kind, *DEVICE_KINDS)
    got, want = _device_and_stream(events, is_device), _previous(events, is_device)
    for g, w in zip(got, want):
        assert w.dtype == np.int64 and g.dtype == narrowed(w).dtype  # int32 where every value fits
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_device_and_stream_as_before_on_the_shared_traces(path: Path) -> None:
    cols, top, _ = build.decode(str(path))
    events = prepare(str(path), cols, base_time_ns(str(path), top.get("baseTimeNanoseconds"))).events
    _same(events)


def test_device_and_stream_hand_built() -> None:
    # thread 0: pid 1 / tid 1 (host); thread 1: pid 0 / tid 7 (a GPU stream); args given, absent, or on host events
    evs = [Ev("cpu_op", "aten::mm", 0, 100), Ev("runtime", "cudaLaunchKernel", 10, 5),
           Ev("kernel", "k0", 20, 30, thread=1), Ev("kernel", "k1", 60, 30, thread=1),
           Ev("memcpy", "Memcpy HtoD", 95, 3, thread=1), Ev("memset", "Memset", 99, 1, thread=1),
           Ev("cpu_op", "aten::add", 200, 10)]
    base = decoded(evs)
    device = np.array([3, -1, 2, -1, 5, -1, 9], dtype=np.int64)    # the host events' args are not used
    stream = np.array([-1, 4, 13, -1, -1, 8, 9], dtype=np.int64)
    events = replace(base, device=device, stream=stream)
    _same(events)
    got_device, got_stream = _device_and_stream(events, kind_mask(events.kind, *DEVICE_KINDS))
    assert got_device.tolist() == [-1, -1, 2, 0, 5, 0, -1]
    assert got_stream.tolist() == [-1, -1, 13, 7, 7, 8, -1]
    # a thread whose pid / tid are not numbers (-1 per thread): the device event keeps -1
    odd = replace(events, pid_of_thread=np.array([1, -1], dtype=np.int64), tid_of_thread=np.array([1, -1], dtype=np.int64))
    _same(odd)
    # no device event at all, and no event at all
    host_only = replace(events, kind=np.full(len(evs), KIND_CODE["cpu_op"], dtype=np.int8))
    _same(host_only)
    assert _device_and_stream(host_only, np.zeros(len(evs), dtype=bool))[0].tolist() == [-1] * len(evs)
    _same(decoded([]))
