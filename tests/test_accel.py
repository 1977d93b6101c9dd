"""The compiled [memory] reader (trace/_accel.c) against memory.py's Python reading of the same bytes.

Differential: wherever the compiled reader answers, its columns must equal what the Python path reads
with it turned off (the quick cut, or the whole array where the cut declines); where it declines the
load takes that path anyway. Real traces, the same events written other ways, and seeded byte edits.
"""
from __future__ import annotations

import gzip
import json
import random

import msgspec
import numpy as np
import pytest
from conftest import trace_path

from profuse.trace import memory as trace_memory

pytestmark = pytest.mark.skipif(trace_memory._accel is None, reason="the compiled reader is not built")

FIELDS = ("ts", "bytes", "addr", "total_allocated", "total_reserved", "device_type", "device")
MEMORY_TRACES = ["h100_bert_small", "h100_vit_falconsai", "mi300_bert_small", "mi300_normalization_layers",
                 "v100_rank1_of2_216k_events"]


def _python(data: bytes, monkeypatch: pytest.MonkeyPatch) -> trace_memory.MemoryEvents | None:
    """The Python path's reading (None where it refuses the bytes: not a document a load gets this far with)."""
    with monkeypatch.context() as m:
        m.setattr(trace_memory, "_accel", None)
        try:
            return trace_memory.read_memory_events(data)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, OverflowError, RecursionError):
            return None


def _same(a: trace_memory.MemoryEvents, b: trace_memory.MemoryEvents) -> bool:
    return (len(a) == len(b) and a.skipped == b.skipped and a.pid_tid == b.pid_tid
            and all(np.array_equal(getattr(a, f), getattr(b, f)) for f in FIELDS))


def _check(data: bytes, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether the compiled reader answered; when it did, it agrees with the Python path."""
    got = trace_memory._compiled(data)
    if got is None:
        return False
    want = _python(data, monkeypatch)
    assert want is not None and _same(got, want)
    return True


@pytest.mark.parametrize("name", MEMORY_TRACES)
def test_shared_traces_read_the_same_compiled(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a real trace with [memory] events WHEN both readers read it THEN the compiled one answers, the same
    data = gzip.open(trace_path(f"{name}.json.gz")).read()
    assert _check(data, monkeypatch)
    assert len(trace_memory._compiled(data) or ()) == data.count(b'"[memory]"')


def _rewritten(change) -> bytes:  # type: ignore[no-untyped-def]
    doc = json.loads(gzip.open(trace_path("mi300_normalization_layers.json.gz")).read())
    rnd = random.Random(7)
    doc["traceEvents"] = [change(dict(e), rnd) if e.get("name") == "[memory]" else e for e in doc["traceEvents"]]
    return json.dumps(doc).encode()


def _shuffled(e, rnd):  # type: ignore[no-untyped-def]
    items = [(k, v) for k, v in e.items() if k != "name"]
    rnd.shuffle(items)
    return {"name": e["name"], **dict(items), "args": dict(sorted(e["args"].items(), reverse=True))}


CHANGES = {
    "keys in another order": _shuffled,
    "pid and tid as strings": lambda e, r: {**e, "pid": f"rank {e['pid']}", "tid": str(e["tid"])},
    "tid null, pid absent": lambda e, r: {**{k: v for k, v in e.items() if k != "pid"}, "tid": None},
    "times with 4+ decimals": lambda e, r: {**e, "ts": e["ts"] + r.randrange(1, 10**6) / 10**6},
    "times past 2^33 µs with decimals": lambda e, r: {**e, "ts": 2**34 + e["ts"] + 0.0625},
    "negative times": lambda e, r: {**e, "ts": -e["ts"] - 0.5},
    "more args and keys": lambda e, r: {**e, "x": None, "y": "é\\n", "args": {**e["args"], "Ev Idx": 3, "s": "a\\\"b"}},
    "an array in the event": lambda e, r: {**e, "x": [1, 2]},
    "a figure as a float": lambda e, r: {**e, "args": {**e["args"], "Bytes": float(e["args"]["Bytes"])}},
    "a figure missing": lambda e, r: {**e, "args": {k: v for k, v in e["args"].items() if k != "Addr"}},
    "a figure beyond 64 bits": lambda e, r: {**e, "args": {**e["args"], "Addr": 2**64 + 1}},
    "phase X": lambda e, r: {**e, "ph": "X", "dur": 1},
    "category [memory] before the name": lambda e, r: {**e, "cat": "[memory]"},
    "a brace in a string": lambda e, r: {**e, "cat": "cpu {x}"},
    "args before the name": lambda e, r: {"args": e["args"], **e},
}
ANSWERS = {"keys in another order", "pid and tid as strings", "tid null, pid absent", "times with 4+ decimals",
           "times past 2^33 µs with decimals", "negative times", "more args and keys"}


@pytest.mark.parametrize("what", list(CHANGES))
def test_events_written_other_ways(what: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the trace's memory events written another way WHEN both read it THEN they agree where the
    # compiled reader answers, and it answers for the common variations
    assert _check(_rewritten(CHANGES[what]), monkeypatch) == (what in ANSWERS)


def test_seeded_byte_edits_never_read_differently(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a real trace's bytes with one byte of one memory event (or just before it) changed, many times
    data = gzip.open(trace_path("h100_bert_small.json.gz")).read()
    starts = [i for i in range(len(data)) if data.startswith(b'"[memory]"', i)]
    rnd = random.Random(23)
    answered = 0
    for _ in range(400):
        at = rnd.choice(starts) + rnd.randrange(-140, 320)
        edited = data[:at] + bytes([rnd.choice(b'{}[],:"\\ \n-.eE0123456789ai')]) + data[at + 1:]
        # WHEN both read it THEN the compiled reader agrees wherever it answers
        answered += _check(edited, monkeypatch)
    assert 0 < answered < 400


def test_frees_matched_as_a_walk_in_time_order_matches_them() -> None:
    # GIVEN random allocations and frees over a few addresses, devices and types (0-byte events too)
    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(0, 120))
        nbytes, addr = rng.integers(-3, 4, n), rng.integers(0, 5, n)
        dtype, device = rng.integers(0, 2, n), rng.integers(-1, 2, n)
        # WHEN matched THEN as by the rule written out: an allocation opens its address, a free closes it
        want_alloc, want_free, open_ = [-1] * n, [-1] * n, {}
        for i in range(n):
            key = (dtype[i], device[i], addr[i])
            if nbytes[i] > 0:
                open_[key] = i
            elif nbytes[i] < 0 and key in open_:
                j = open_.pop(key)
                want_alloc[i], want_free[j] = j, i
        alloc, free = trace_memory.match_frees(nbytes, addr, dtype, device)
        assert alloc.tolist() == want_alloc and free.tolist() == want_free


def _op_memory_by_hand(ts: list[int], dur: list[int], in_table: list[bool], parent: list[int], mem_ts: list[int],
                       cpu: list[int], dev: list[int]) -> list[tuple[int, int, int, int, int]]:
    """torch's per-op memory, one event at a time: the bytes of each memory event in [ts, ts + dur], less
    what the op-table children hold; the rows with any figure."""
    n = len(ts)
    total = [(sum(c for t, c in zip(mem_ts, cpu) if ts[i] <= t <= ts[i] + dur[i]),
              sum(d for t, d in zip(mem_ts, dev) if ts[i] <= t <= ts[i] + dur[i])) for i in range(n)]
    rows = []
    for i in range(n):
        if not in_table[i]:
            continue
        kids = [j for j in range(n) if in_table[j] and parent[j] == i]
        self_cpu = total[i][0] - sum(total[j][0] for j in kids)
        self_dev = total[i][1] - sum(total[j][1] for j in kids)
        if total[i][0] or total[i][1] or self_cpu or self_dev:
            rows.append((i, total[i][0], self_cpu, total[i][1], self_dev))
    return rows


def test_op_memory_compiled_matches_the_numpy_twin_and_a_loop_by_hand() -> None:
    from types import SimpleNamespace
    # GIVEN random events (in any time order, some zero or negative long) with random table parents, and
    # sorted memory events (ties, times on the events' edges) of CPU and device bytes
    rng = np.random.default_rng(3)
    for trial in range(400):
        n, m = int(rng.integers(0, 40)), int(rng.integers(0, 30))
        scale = int(rng.choice([1, 7, 1000]))
        ts, dur = rng.integers(0, 50, n) * scale, rng.integers(-1 if trial % 2 else 0, 20, n) * scale
        in_table = rng.random(n) < 0.7
        parent = np.where(rng.random(n) < 0.6, rng.integers(-1, max(n, 1), n), -1).astype(np.int64)
        mem_ts = np.sort(rng.integers(0, 60, m) * scale)
        cpu = rng.integers(-5, 6, m) * (rng.random(m) < 0.6)
        dev = rng.integers(-5, 6, m) * (rng.random(m) < 0.5)
        events = SimpleNamespace(ts=ts.astype(np.int64), dur=dur.astype(np.int64))
        # WHEN the extension and the numpy twin sum each op-table event's memory
        got = trace_memory._op_memory_compiled(events, in_table, parent, mem_ts, cpu, dev)
        want = trace_memory._op_memory_numpy(events, in_table, parent, mem_ts, cpu, dev)
        # THEN they agree with each other, and with the sums by hand where no event is negative long (there
        # both sum the window backwards, as the numpy twin always did: the scanner refuses such an event)
        assert [a.tolist() for a in got] == [a.tolist() for a in want], trial
        if (dur < 0).any():
            continue
        hand = _op_memory_by_hand(ts.tolist(), dur.tolist(), in_table.tolist(), parent.tolist(), mem_ts.tolist(),
                                  cpu.tolist(), dev.tolist())
        assert list(zip(*(a.tolist() for a in got))) == hand, trial


def test_op_memory_refuses_unsorted_times_and_a_parent_out_of_range() -> None:
    from profuse.trace import compiled
    one, two = np.zeros(1, dtype=np.int64), np.zeros(2, dtype=np.int64)
    out = [np.empty(1, dtype=np.int64) for _ in range(5)]
    yes = np.ones(1, dtype=bool)
    with pytest.raises(ValueError, match="not sorted"):
        compiled.accel.op_memory(one, one, yes, one - 1, np.array([5, 1], dtype=np.int64), two, two, *out)
    with pytest.raises(ValueError, match="out of range"):
        compiled.accel.op_memory(one, one, yes, one + 3, two, two, two, *out)
    with pytest.raises(ValueError, match="length"):
        compiled.accel.op_memory(two, one, yes, one, two, two, two, *out)


def test_start_order_is_lexsort_by_time_then_depth() -> None:
    from profuse.trace._columns import packed_order
    # GIVEN times with many ties (small and epoch-sized, and spans too wide for one key) and depths
    rng = np.random.default_rng(9)
    for _ in range(300):
        n = int(rng.integers(0, 60))
        ts = rng.integers(-5, 5, n) * int(rng.choice([1, 10**15, 2**60]))
        depth = rng.integers(0, int(rng.choice([1, 4, 1000])), n)
        # WHEN ordered THEN exactly as lexsort orders them (file order among equals)
        assert packed_order(ts, depth).tolist() == np.lexsort((depth, ts)).tolist()


def test_nesting_order_is_the_four_key_lexsort() -> None:
    from profuse.trace._columns import packed_order
    # GIVEN host events on a few threads with many shared starts and ends (and spans too wide for one key)
    rng = np.random.default_rng(4)
    for _ in range(300):
        n = int(rng.integers(0, 60))
        th = rng.integers(0, int(rng.choice([1, 3, 1000])), n).astype(np.int64)
        start = rng.integers(-4, 6, n) * int(rng.choice([1, 1000, 10**15, 2**58]))
        end = start + rng.integers(1, 4, n)
        # WHEN ordered THEN exactly as the lexsort of (thread, start, longer first, position)
        assert packed_order(th, start, -end).tolist() == np.lexsort((np.arange(n), -end, start, th)).tolist()


def test_address_order_is_the_lexsort_of_type_device_address_and_position() -> None:
    from profuse.trace.memory import _address_order
    # GIVEN memory events with shared addresses (small, real-sized and spans too wide for one key) on
    # a few devices of a few types (and type x device grids too big for one key)
    rng = np.random.default_rng(31)
    for _ in range(300):
        n = int(rng.integers(0, 60))
        addr = rng.integers(-3, 8, n) * int(rng.choice([1, 2**40, 2**60]))
        device = rng.integers(-1, int(rng.choice([1, 3, 70_000])), n)
        dtype = rng.integers(0, int(rng.choice([1, 3, 70_000])), n)
        # WHEN ordered THEN exactly as the lexsort (file order among equals)
        assert _address_order(addr, device, dtype).tolist() == np.lexsort((np.arange(n), addr, device, dtype)).tolist()


def test_distinct_and_kind_mask_answer_as_numpy_does() -> None:
    from profuse.trace.arrays import distinct, distinct_codes
    from profuse.trace.event_columns import kind_mask
    from profuse.trace.schema import KINDS
    rng = np.random.default_rng(2)
    for _ in range(100):
        values = rng.integers(-3, int(rng.choice([1, 50, 2**40])), int(rng.integers(0, 40)))
        assert distinct(values).tolist() == np.unique(values).tolist()
        found, at = distinct_codes(values)
        assert found.tolist() == np.unique(values).tolist() and found[at].tolist() == values.tolist()
        hashes = values.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)   # DuckDB hash values: uint64, any bits
        assert distinct(hashes).tolist() == np.unique(hashes).tolist()
        kind = rng.integers(0, len(KINDS), len(values)).astype(np.int32)
        some = [k for k in KINDS if rng.random() < 0.4]
        assert kind_mask(kind, *some).tolist() == np.isin(kind, [KINDS.index(k) for k in some]).tolist()


def test_nearest_ancestor_compiled_matches_the_numpy_walk() -> None:
    from profuse.trace import correlate
    # GIVEN random forests (parents before or after their children in the arrays) and random accepted events
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(0, 300))
        order = rng.permutation(n)  # event order[k]'s parent is an earlier one in this order, or none
        parent = np.full(n, -1, dtype=np.int64)
        for k in range(1, n):
            if rng.random() < 0.85:
                parent[order[k]] = order[rng.integers(max(0, k - 8), k)]
        accept = rng.random(n) < rng.choice([0.0, 0.1, 0.5, 1.0])
        for include_self in (True, False):
            # WHEN both find each event's nearest accepted ancestor THEN they agree
            got = correlate.nearest_ancestor(parent, accept, include_self)
            want = correlate.nearest_ancestor_numpy(parent, accept, include_self)
            assert got.tolist() == want.tolist()


def test_ancestors_refuses_a_cycle_and_a_parent_out_of_range() -> None:
    from profuse.trace import compiled
    out = np.empty(3, dtype=np.int64)
    no = np.zeros(3, dtype=bool)
    with pytest.raises(ValueError, match="cycle"):
        compiled.accel.ancestors(np.array([1, 2, 0], dtype=np.int64), no, out)
    with pytest.raises(ValueError, match="out of range"):
        compiled.accel.ancestors(np.array([-1, 7, 0], dtype=np.int64), no, out)
    with pytest.raises(ValueError, match="length"):
        compiled.accel.ancestors(np.array([-1, 0], dtype=np.int64), no, out)


def _holder_by_hand(ts: list[int], end: list[int], depth: list[int], is_op: list[bool], t: int, back: int) -> int:
    """The holder of time t, one interval at a time: among the ``back`` latest started by t, those
    running at t; an op beats any non-op, the shallowest op, else the deepest; a tie keeps the later start."""
    started = [j for j in range(len(ts)) if ts[j] <= t][-back:] if back else []
    best, best_key = -1, None
    for j in reversed(started):
        if t < end[j]:
            key = (1, -depth[j]) if is_op[j] else (0, depth[j])
            if best_key is None or key > best_key:
                best, best_key = j, key
    return best


def test_holders_compiled_matches_the_numpy_walk_and_a_walk_by_hand() -> None:
    from profuse.analysis.diagnosis import levers
    from profuse.trace import compiled
    # GIVEN random host intervals sorted by start (nested and overlapping, ops and frames) and random times
    rng = np.random.default_rng(5)
    for trial in range(150):
        n, m = int(rng.integers(0, 80)), int(rng.integers(0, 60))
        ts = np.sort(rng.integers(0, 1000, n)).astype(np.int64)
        end = ts + rng.integers(1, 400, n)
        depth = rng.integers(0, 6, n).astype(np.int64)
        is_op = rng.random(n) < 0.4
        t = rng.integers(-10, 1200, m).astype(np.int64)
        last = np.searchsorted(ts, t, side="right") - 1
        back = int(rng.choice([0, 1, 3, 64]))
        # WHEN the extension and the numpy twin name each time's holder
        got = np.empty(m, dtype=np.int64)
        compiled.accel.holders(ts, end, depth, t, last, is_op, back, got)
        want = levers._holders_numpy(ts, end, depth, is_op, t, last, back)
        # THEN they agree with each other and with the walk by hand
        assert got.tolist() == want.tolist()
        hand = [_holder_by_hand(ts.tolist(), end.tolist(), depth.tolist(), is_op.tolist(), int(x), back) for x in t]
        assert got.tolist() == hand, trial
    with pytest.raises(ValueError, match="out of range"):
        one = np.zeros(1, dtype=np.int64)
        compiled.accel.holders(one, one + 1, one, one, one + 5, np.zeros(1, dtype=bool), 4, np.empty(1, dtype=np.int64))
    with pytest.raises(ValueError, match="length"):
        compiled.accel.holders(np.zeros(2, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(2, dtype=np.int64),
                               one, one, np.zeros(2, dtype=bool), 4, np.empty(1, dtype=np.int64))


def test_ns_by_name_sums_as_a_loop_over_the_pieces_does() -> None:
    from collections import Counter

    from profuse.analysis.diagnosis import levers
    # GIVEN names (some repeated under other indices), pieces naming an index or none (-1), and their ns
    rng = np.random.default_rng(9)
    for _ in range(100):
        name = np.array([f"n{int(x)}" for x in rng.integers(0, 6, int(rng.integers(1, 30)))], dtype=object)
        idx = rng.integers(-1, name.size, int(rng.integers(0, 50))).astype(np.int64)
        ns = rng.integers(0, 1000, idx.size).astype(np.int64)
        # WHEN summed THEN the totals and the order names first appear in are the loop's
        want: Counter[str] = Counter()
        for i, v in zip(idx.tolist(), ns.tolist()):
            if i >= 0:
                want[str(name[i])] += v
        got = levers._ns_by_name(name, idx, ns)
        assert list(got.items()) == list(want.items())


@pytest.mark.parametrize("name", ["a100_nccl_rank0_of2", "mi300_sglang_decode_cudagraph"])
def test_flow_ids_are_written_as_the_trace_writes_them(name: str) -> None:
    import profuse
    # GIVEN a real trace with flow events (integer ids)
    path = trace_path(f"{name}.json.gz")
    doc = json.loads(gzip.open(path).read())
    want = sorted(str(e["id"]) for e in doc["traceEvents"]
                  if e.get("ph") in ("s", "f", "t") and e.get("id") is not None and e.get("ts") is not None)
    assert len(want) > 100
    # WHEN profuse loads it THEN the flows table holds each id as the trace writes it
    with profuse.load(path) as trace:
        got = sorted(r[0] for r in trace.con.execute("SELECT id FROM flows").fetchall())
    assert got == want


def test_flow_codes_take_numbers_only_when_every_id_is_one_written_plainly() -> None:
    from profuse.trace._prepare import flow_codes
    # GIVEN plain decimal ids THEN they are coded as numbers: one code per distinct id
    codes, distinct = flow_codes(["7", "12", "7", "0", "999999999999999999"])
    assert distinct.dtype == np.int64 and distinct[codes].tolist() == [7, 12, 7, 0, 999999999999999999]
    # GIVEN ids that int() reads but that are not written plainly THEN they stay text, as written
    for odd in ("+1", " 1", "01", "1_0", "-3", "٣", "", "x", "99999999999999999999"):
        codes, distinct = flow_codes(["5", odd, "5"])
        assert distinct.dtype == object and distinct[codes].tolist() == ["5", odd, "5"], odd


def _random_forest(rng: np.random.Generator, n: int) -> np.ndarray:
    """Parents: event order[k]'s parent is one of the few before it in a random order, or none."""
    order = rng.permutation(n)
    parent = np.full(n, -1, dtype=np.int64)
    for k in range(1, n):
        if rng.random() < 0.85:
            parent[order[k]] = order[rng.integers(max(0, k - 8), k)]
    return parent


def _attribution_by_hand(dur: list[int], in_table: list[bool], up: list[int], timed: list[bool],
                         op: list[int]) -> list[list[int]]:
    """attribute's five columns one event at a time, from their definitions (docs/correlation.md)."""
    n = len(dur)
    children = [0] * n
    for i in range(n):
        if in_table[i] and up[i] >= 0:
            children[up[i]] += dur[i]
    self_cpu = [max(dur[i] - children[i], 0) if in_table[i] else 0 for i in range(n)]
    self_dev, kern, total, kern_total = ([0] * n for _ in range(4))
    for i in range(n):
        if timed[i] and op[i] >= 0:
            self_dev[op[i]] += dur[i]
            kern[op[i]] += 1
            c = op[i]
            while c >= 0:  # the op and each op-table event above it
                total[c] += dur[i]
                kern_total[c] += 1
                c = up[c]
    return [self_cpu, self_dev, total, kern, kern_total]


def test_attribute_compiled_matches_numpy_and_a_hand_count() -> None:
    from profuse.trace import compiled, correlate
    rng = np.random.default_rng(23)
    for _ in range(150):
        # GIVEN random op-table forests, durations (some children outlasting their parent), device events
        n = int(rng.integers(0, 200))
        up = correlate.nearest_ancestor(_random_forest(rng, n), rng.random(n) < 0.6, include_self=False)
        in_table = rng.random(n) < 0.6
        dur = rng.integers(0, 10**12, n) if rng.random() < 0.3 else rng.integers(0, 5000, n)
        timed = rng.random(n) < 0.4
        op = np.where(rng.random(n) < 0.8, rng.integers(0, max(n, 1), n), -1).astype(np.int64)
        # WHEN the compiled pass, the numpy twin and a count by hand each attribute the time
        out = [np.empty(n, dtype=np.int64) for _ in range(5)]
        compiled.accel.attribute(dur.astype(np.int64), in_table, up, timed, op, *out)
        twin = correlate._attribute_numpy(dur, in_table, up, timed & (op >= 0), op)
        want = _attribution_by_hand(dur.tolist(), in_table.tolist(), up.tolist(), timed.tolist(), op.tolist())
        # THEN all three agree, column by column
        for got, numpy_col, hand in zip(out, (twin.self_cpu, twin.self_device, twin.device_total, twin.kernels,
                                              twin.kernels_total), want):
            assert got.tolist() == numpy_col.tolist() == hand


def test_attribute_and_enclosing_refuse_bad_columns() -> None:
    from profuse.trace import compiled
    z = np.zeros(3, dtype=np.int64)
    no = np.zeros(3, dtype=bool)
    yes = np.ones(3, dtype=bool)
    outs = [np.empty(3, dtype=np.int64) for _ in range(5)]
    with pytest.raises(ValueError, match="cycle"):
        compiled.accel.attribute(z, yes, np.array([1, 2, 0], dtype=np.int64), yes, z, *outs)
    with pytest.raises(ValueError, match="out of range"):
        compiled.accel.attribute(z, yes, np.array([-1, 9, 0], dtype=np.int64), no, z, *outs)
    with pytest.raises(ValueError, match="out of range"):
        compiled.accel.attribute(z, yes, np.full(3, -1, dtype=np.int64), yes, np.array([0, 3, 0], dtype=np.int64),
                                 *outs)
    with pytest.raises(ValueError, match="length"):
        compiled.accel.attribute(z[:2], yes, z, yes, z, *outs)
    with pytest.raises(ValueError, match="out of range"):
        compiled.accel.enclosing(z, np.array([0, 5, -1], dtype=np.int64), yes, z, z, outs[0])
    with pytest.raises(ValueError, match="length"):
        compiled.accel.enclosing(z, z, yes[:2], z, z, outs[0])


def test_enclosing_compiled_matches_the_numpy_twin() -> None:
    from profuse.trace import correlate
    rng = np.random.default_rng(29)
    for _ in range(150):
        # GIVEN random forests, scopes, host flags and device events' launches and ops (or none)
        n = int(rng.integers(0, 200))
        parent = _random_forest(rng, n)
        accept = rng.random(n) < 0.3
        host = rng.random(n) < 0.6
        launch, op = (np.where(rng.random(n) < 0.5, rng.integers(0, max(n, 1), n), -1).astype(np.int64)
                      for _ in range(2))
        links = correlate.Links(launch=launch, op=op, how=np.zeros(n, np.int8), unlinked=np.zeros(n, np.int8))
        # WHEN the compiled pass and the numpy twin find each event's enclosing scope THEN they agree
        got = correlate._enclosing_or_launchers(parent, accept, host, links)
        holding = correlate.nearest_ancestor(parent, accept, include_self=True)
        assert got.tolist() == correlate._enclosing_numpy(holding, parent, host, links).tolist()
