"""The load's writes in proportion to the size (issue 44, item 2): what correlate worked out reused by the
memory tables instead of sorted and walked again, and the events' inserts planned so that the load
compresses as few rows as DuckDB's uncompressed copy allows.

The memory holders are checked against the previous rule (kept here as the oracle, :func:`old_holders`) on
every shared trace, with times at, just before and just after every host event's edges on every thread, and
on hand-built threads: several threads, nesting, zero-length events, memory events before any host event, a
device thread's host-kind events (not nested), a thread with no events.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import ALL_TRACES

# every test runs on both nesting paths (the extension's stack pass and numpy's): the rules' own fixture
from test_correlate_rules import nesting_path  # noqa: F401

from profuse.trace import build
from profuse.trace._columns import packed_order
from profuse.trace._prepare import base_time_ns, prepare
from profuse.trace._write import INSERT_BATCH, insert_batches
from profuse.trace.arrays import distinct
from profuse.trace.correlate import correlate, correlated, nearest_ancestor_numpy
from profuse.trace.event_columns import NONE, DecodedEvents, EventColumns, Flows, kind_mask
from profuse.trace.memory import _holders
from profuse.trace.schema import DEVICE_KINDS, HOST_KINDS, KIND_CODE, TABLE_KINDS


def old_holders(events: EventColumns, ts: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """The previous rule (memory._holders before issue 44): per thread a mask of the whole trace, its
    host-kind events sorted by (ts, depth), the last one starting at or before t, then out through the
    parents to the first still running at t (a zero-length event lasts 1 ns)."""
    out = np.full(len(ts), NONE, dtype=np.int64)
    host = kind_mask(events.kind, *HOST_KINDS)
    end = events.ts + np.maximum(events.dur, 1)
    for th in distinct(thread[thread >= 0]).tolist():
        cand = np.flatnonzero(host & (events.thread == th))
        if not cand.size:
            continue
        cand = cand[packed_order(events.ts[cand], events.depth[cand])]
        sel = np.flatnonzero(thread == th)
        t = ts[sel]
        pos = np.searchsorted(events.ts[cand], t, side="right") - 1
        cur = np.where(pos >= 0, cand[np.maximum(pos, 0)], NONE)
        while True:
            live = cur >= 0
            bad = live.copy()
            bad[live] = end[cur[live]] <= t[live]
            if not bad.any():
                break
            cur[bad] = events.parent[cur[bad]]
        out[sel] = cur
    return out


def _correlated(path: str):
    cols, top, _ = build.decode(path)
    prepared = prepare(path, cols, base_time_ns(path, top.get("baseTimeNanoseconds")))
    return correlated(prepared.events)


def _probe_times(events: EventColumns) -> tuple[np.ndarray, np.ndarray]:
    """Memory-event times and threads as write_memory_tables hands them over (in time order): every host-kind
    event's start, end, and the ns either side of each, on its own thread; before the first event; on each
    thread number the trace has plus one it has not, and a thread the trace does not know (-1)."""
    host = np.flatnonzero(kind_mask(events.kind, *HOST_KINDS))
    start, end = events.ts[host], events.ts[host] + events.dur[host]
    t = np.concatenate([start - 1, start, start + 1, end - 1, end, end + 1])
    th = np.tile(events.thread[host].astype(np.int64), 6)
    first = int(events.ts.min()) - 100 if len(events) else 0
    known = int(events.thread.max()) + 1 if len(events) else 1
    extra_t = np.array([first] * (known + 2) + [first + 1], dtype=np.int64)
    extra_th = np.array([*range(known + 1), NONE, 0], dtype=np.int64)
    t, th = np.concatenate([t, extra_t]), np.concatenate([th, extra_th])
    order = np.lexsort((th, t))
    return t[order], th[order]


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name)
def test_holders_match_the_previous_rule_on_every_shared_trace(path):
    # GIVEN a shared trace's correlated events and memory times at every host event's edges on every thread
    events, reusable = _correlated(str(path))
    ts, thread = _probe_times(events)
    # WHEN the holders are found from correlate's nesting order, and without it
    want = old_holders(events, ts, thread)
    # THEN each is the previous rule's holder, event for event
    assert _holders(events, ts, thread, reusable.host_order).tolist() == want.tolist()
    assert _holders(events, ts, thread).tolist() == want.tolist()
    assert (want >= 0).any() or not kind_mask(events.kind, *HOST_KINDS).any()


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name)
def test_what_correlate_hands_on_is_what_the_memory_tables_worked_out_themselves(path):
    # GIVEN a shared trace's correlated events
    events, reusable = _correlated(str(path))
    # THEN the host order is the nested events (not device kinds, not on a device thread: one with device events,
    # or one holding only cuda_sync records in a process whose threads carry device events) by thread, start,
    # the longer first, then id: worked out here with one lexsort
    dev = kind_mask(events.kind, *DEVICE_KINDS)
    device_thread = np.zeros(int(events.thread.max(initial=0)) + 1, dtype=bool)
    device_thread[events.thread[dev]] = True
    pids = _decoded_again(str(path)).pid_of_thread
    device_pids = {int(p) for p in pids[np.flatnonzero(device_thread)] if p >= 0}
    for t in range(device_thread.size):
        kinds = set(events.kind[events.thread == t].tolist())
        if kinds == {KIND_CODE["sync"]} and int(pids[t]) in device_pids:
            device_thread[t] = True
    nested = np.flatnonzero(~dev & ~device_thread[events.thread])
    end = events.ts[nested] + np.maximum(events.dur[nested], 1)
    want = nested[np.lexsort((nested, -end, events.ts[nested], events.thread[nested]))]
    assert reusable.host_order.tolist() == want.tolist()
    assert (events.depth[nested] >= 0).all()
    # and the op-table parent is the one the op_memory table found by walking the parents (numpy's walk)
    in_table = kind_mask(events.kind, *TABLE_KINDS)
    assert reusable.table_parent.tolist() == nearest_ancestor_numpy(events.parent, in_table, False).tolist()
    # and correlate() gives the same columns as correlated()
    again = correlate(_decoded_again(str(path)))
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(again.arrays().values(), events.arrays().values()))


def _decoded_again(path: str) -> DecodedEvents:
    cols, top, _ = build.decode(path)
    return prepare(path, cols, base_time_ns(path, top.get("baseTimeNanoseconds"))).events


def _hand_built(spans: list[tuple[str, int, int, int]]) -> DecodedEvents:
    """(kind, thread, ts, dur) events as the decoder hands them over; thread 3 carries a kernel."""
    n = len(spans)
    ints = lambda v: np.array(v, dtype=np.int64)
    none = ints([-1] * n)
    return DecodedEvents(
        kind=np.array([KIND_CODE[k] for k, *_ in spans], dtype=np.int8), name=np.zeros(n, dtype=np.int32),
        names=np.array(["e"], dtype=object), cat=np.zeros(n, dtype=np.int32), ts=ints([s[2] for s in spans]),
        dur=ints([s[3] for s in spans]), thread=ints([s[1] for s in spans]), pid_of_thread=ints([1, 1, 1, 0, 1]),
        tid_of_thread=ints([1, 2, 3, 7, 9]), device=none, stream=none, correlation=none, external_id=none, seq=none,
        python_id=none, python_parent_id=none, nbytes=none, flops=np.full(n, np.nan),
        flows=Flows(ids=np.zeros(0, dtype=np.int32), id_text=np.zeros(0, dtype=object), ph=np.zeros(0, dtype=np.int8),
                    ts=ints([]), thread=ints([])))


HAND_BUILT = [
    # thread 0: a step holding nested ops, a zero-length op, equal starts, an op ending where the next starts
    ("annotation", 0, 1_000, 9_000), ("cpu_op", 0, 1_000, 4_000), ("cpu_op", 0, 1_000, 4_000),
    ("cpu_op", 0, 2_000, 0), ("cpu_op", 0, 2_000, 1_000), ("python", 0, 5_000, 0), ("cpu_op", 0, 5_000, 2_000),
    ("runtime", 0, 6_000, 500), ("cpu_op", 0, 9_999, 0),
    # thread 1: interleaved with thread 0, an event outliving its parent (improper nesting)
    ("python", 1, 500, 3_000), ("cpu_op", 1, 600, 3_500), ("cpu_op", 1, 4_000, 0),
    # thread 2: a lone zero-length event
    ("cpu_op", 2, 7_000, 0),
    # thread 3: a kernel and host-kind events on the same thread (not nested)
    ("kernel", 3, 1_500, 100), ("cpu_op", 3, 1_000, 2_000), ("runtime", 3, 1_200, 100),
]


def test_holders_on_hand_built_threads_match_the_previous_rule():
    # GIVEN hand-built events on several threads (a device thread among them; thread 4 has none)
    events, reusable = correlated(_hand_built(HAND_BUILT))
    ts, thread = _probe_times(events)
    ts = np.concatenate([[0, 0, 0], ts])  # memory events before any host event, on three threads
    thread = np.concatenate([[0, 1, 3], thread])
    want = old_holders(events, ts, thread)
    # THEN the holders are the previous rule's, with correlate's order and without it
    assert _holders(events, ts, thread, reusable.host_order).tolist() == want.tolist()
    assert _holders(events, ts, thread).tolist() == want.tolist()
    # and, worked out by hand: at 1,001 on thread 0 the second of two equal ops (the inner one); at 2,000 the
    # zero-length op (2,000, 1 ns) inside the op that starts with it; at 2,001 that op; at 9,999 the zero-length op;
    # at 10,000 nothing (the step ends there); on thread 3, whose events are not nested, the last host-kind
    # event starting at or before t while it runs (1,201: the runtime call), else none (1,301: no parent to
    # walk out to); thread 4 holds no event; on thread 1 an op outliving its parent by 600 ns stays in it
    holder = dict(zip(zip(thread.tolist(), ts.tolist()), want.tolist()))
    assert holder[(0, 2_000)] == 3 and holder[(0, 2_001)] == 4 and holder[(0, 1_001)] == 2
    assert holder[(0, 9_999)] == 8 and holder[(0, 10_000)] == NONE and holder[(0, 0)] == NONE
    assert holder[(3, 1_201)] == 15 and holder[(3, 1_301)] == NONE and holder[(4, 400)] == NONE
    assert holder[(1, 4_000)] == 11 and holder[(1, 3_501)] == 10 and holder[(1, 4_001)] == 10


def test_holders_of_no_memory_events():
    events, reusable = correlated(_hand_built(HAND_BUILT))
    empty = np.zeros(0, dtype=np.int64)
    assert _holders(events, empty, empty, reusable.host_order).tolist() == []


@pytest.mark.parametrize("most", [1000, 4096, 122_880, INSERT_BATCH, 368_657])
def test_insert_batches_cover_the_rows_with_the_most_in_the_last(most):
    for n in [0, 1, most - 1, most, most + 1, 2 * most, 2 * most + 1, 5 * most - 3, 9_354_460, 18_708_920]:
        batches = insert_batches(n, most)
        # THEN the inserts cover the rows once, in order, none over ``most`` rows
        assert batches[0][0] == 0 and batches[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(batches, batches[1:]))
        sizes = [hi - lo for lo, hi in batches]
        assert all(0 < s <= most for s in sizes) or (n == 0 and batches == [(0, 0)])
        # and no more inserts (nor checkpoints between them) than ``most``-row inserts would need
        assert len(batches) == max(-(-n // most), 1)
        # and the last is a whole ``most`` rows: the load compresses (all but the last insert's) ``n - most``,
        # in inserts of about one size
        assert sizes[-1] == min(n, most)
        assert max(sizes[:-1], default=0) - min(sizes[:-1], default=0) <= 1


def test_a_three_gigabyte_trace_compresses_fewer_rows_than_in_fixed_batches():
    # GIVEN the events of the 3 GB benchmark trace (9,354,460) in inserts of at most 4 M rows
    n = 9_354_460
    fixed = [(lo, min(lo + INSERT_BATCH, n)) for lo in range(0, n, INSERT_BATCH)]
    planned = insert_batches(n, INSERT_BATCH)
    # THEN as many checkpoints, and the load compresses 5.2 M rows instead of 8.4 M
    assert len(planned) == len(fixed) == 3
    assert planned[-1][0] == n - INSERT_BATCH == 5_160_156 and fixed[-1][0] == 2 * INSERT_BATCH
