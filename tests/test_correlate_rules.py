"""The correlation rules of docs/correlation.md on small hand-built traces, without DuckDB.

Each test builds a handful of events as the decoder would hand them over (DecodedEvents), runs
correlate(), and checks parents, depths, links and attributed times against values worked out by
hand from the rules in docs/correlation.md (written in each test's comments).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

import numpy as np
import pytest

from profuse.trace import _native
from profuse.trace.correlate import LINK_HOW, UNLINKED, correlate, nesting, nesting_in_order
from profuse.trace.event_columns import DecodedEvents, EventColumns, Flows, column_names, insert_sql
from profuse.trace.schema import DDL, KIND_CODE

HOST, DEVICE = 0, 1  # thread numbers used below: (pid 1, tid 1) on the host, (pid 0, tid 7) a GPU stream
THREADS = [(1, 1), (0, 7)]


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def nesting_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every rule holds on both nesting paths: the extension's stack pass and the vectorised numpy one."""
    if request.param == "compiled" and not _native.available():
        pytest.skip("compiled extension not built")
    monkeypatch.setenv("PROFUSE_SCANNER", "1" if request.param == "compiled" else "0")
    return str(request.param)


@dataclass
class Ev:
    """One complete event of a hand-built trace (times in ns)."""

    kind: str
    name: str
    ts: int
    dur: int
    thread: int = HOST
    correlation: int = -1
    external_id: int = -1


def _int64(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def decoded(events: list[Ev], flows: list[tuple[str, str, int, int]] = ()) -> DecodedEvents:
    """DecodedEvents of ``events``; ``flows`` as (id, phase s/f, thread, ts)."""
    names = sorted({e.name for e in events})
    flow_ids = sorted({f[0] for f in flows})
    ints = _int64
    none = ints([-1] * len(events))
    return DecodedEvents(
        kind=np.array([KIND_CODE[e.kind] for e in events], dtype=np.int8),
        name=np.array([names.index(e.name) for e in events], dtype=np.int32), names=np.array(names, dtype=object),
        cat=np.zeros(len(events), dtype=np.int32), ts=ints([e.ts for e in events]), dur=ints([e.dur for e in events]),
        thread=ints([e.thread for e in events]), pid_of_thread=ints([p for p, _ in THREADS]),
        tid_of_thread=ints([t for _, t in THREADS]), device=none, stream=none,
        correlation=ints([e.correlation for e in events]), external_id=ints([e.external_id for e in events]),
        seq=none, python_id=none, python_parent_id=none, nbytes=none, flops=np.full(len(events), np.nan),
        flows=Flows(ids=np.array([flow_ids.index(f[0]) for f in flows], dtype=np.int32),
                    id_text=np.array(flow_ids, dtype=object),
                    ph=np.array([("s", "f").index(f[1]) for f in flows], dtype=np.int8),
                    ts=ints([f[3] for f in flows]), thread=ints([f[2] for f in flows])))


def col(out: EventColumns, name: str) -> list[int]:
    return [int(v) for v in getattr(out, name)]


def links(out: EventColumns) -> list[str | None]:
    return [LINK_HOW[c] for c in out.link]


def reasons(out: EventColumns) -> list[str | None]:
    return [UNLINKED[c] for c in out.unlinked]


def test_event_columns_are_the_ddl_columns_in_order():
    # THEN the writer's column list (the dataclass) is the events table of the DDL, name for name
    body = re.search(r"CREATE TABLE events \((.*?)\n\);", DDL, re.S)
    assert body is not None
    ddl_columns = [line.split()[0] for line in body.group(1).strip().splitlines()]
    assert column_names() == ddl_columns
    # and the INSERT reads the frame's columns in that order (each once, flops twice for its NaN test),
    # with the string columns looked up in lists or not
    for looked_up in ({"kinds", "cats", "names", "pids", "tids", "how", "why"}, set()):
        read = re.findall(r"\bf\.(\w+)", insert_sql("f", looked_up))
        assert [c for i, c in enumerate(read) if i == 0 or read[i - 1] != c] == ddl_columns
    # and every write rule names a column (a misspelt one would silently write codes as numbers)
    from profuse.trace.event_columns import WRITE_RULES
    assert set(WRITE_RULES) <= set(ddl_columns)


def test_timestamp_ties_nest_longer_first_then_in_file_order():
    # GIVEN three ops starting at the same ns: C (4 µs) first in the file, then A and B (10 µs each)
    out = correlate(decoded([Ev("cpu_op", "C", 0, 4_000), Ev("cpu_op", "A", 0, 10_000), Ev("cpu_op", "B", 0, 10_000)]))
    # THEN sorted by start, longer first, file order last: A, B, C; each the parent of the next
    assert col(out, "parent") == [2, -1, 1]
    assert col(out, "depth") == [2, 0, 1]
    # self CPU = dur - direct children in the op table: A 10-10, B 10-4, C 4 (µs)
    assert col(out, "self_cpu") == [4_000, 0, 6_000]
    assert col(out, "op") == [0, 1, 2]  # host events are their own op
    assert col(out, "parent_op") == [2, -1, 1]


def test_zero_length_events_count_as_one_ns():
    # GIVEN P [0, 10 µs) and zero-length calls inside it and at its end
    out = correlate(decoded([
        Ev("cpu_op", "P", 0, 10_000),
        Ev("runtime", "Z1", 5_000, 0),     # [5000, 5001)
        Ev("runtime", "Z2", 5_000, 0),     # the same interval as Z1: nests in it (file order)
        Ev("runtime", "Z3", 5_001, 0),     # starts where Z1 ends: its sibling
        Ev("runtime", "E", 10_000, 0),     # starts where P ends: P's sibling, not its child
    ]))
    assert col(out, "parent") == [-1, 0, 1, 0, -1]
    assert col(out, "depth") == [0, 1, 2, 1, 0]
    assert col(out, "op") == [0, 0, 0, 0, -1]  # the innermost enclosing cpu_op (runtime calls are not ops)
    assert col(out, "self_cpu") == [10_000, 0, 0, 0, 0]


# R [0, 200 µs) a python scope holding P [10, 100 µs); then calls overlapping P's end (ns):
# (events after R and P, expected parent / depth / self CPU of every event)
_OVERLAPS = {
    # C ends 0.5 µs after P (µs rounding): still P's; S, starting as P ends, is past both: R's child
    "ending late by rounding stays in its op": (
        [Ev("cpu_op", "C", 50_000, 50_500), Ev("cpu_op", "S", 100_000, 10_000)],
        [-1, 0, 1, 0], [0, 1, 2, 1], [0, 90_000 - 50_500, 50_500, 10_000]),
    # C2 outlives P by 20 µs: R's child (the nearest ancestor holding it); D inside C2 after P ended
    "improper overlap goes to the ancestor that holds it": (
        [Ev("cpu_op", "C2", 60_000, 60_000), Ev("cpu_op", "D", 110_000, 5_000)],
        [-1, 0, 0, 2], [0, 1, 1, 2], [0, 90_000, 55_000, 5_000]),
    # the same with nothing after C2 on the thread: P's self CPU is never negative
    "improper overlap alone still leaves its parent": (
        [Ev("cpu_op", "C2", 60_000, 60_000)],
        [-1, 0, 0], [0, 1, 1], [0, 90_000, 60_000]),
}


@pytest.mark.parametrize("case", list(_OVERLAPS))
def test_calls_overlapping_their_parents_end(case: str):
    later, parent, depth, self_cpu = _OVERLAPS[case]
    out = correlate(decoded([Ev("python", "R", 0, 200_000), Ev("cpu_op", "P", 10_000, 90_000), *later]))
    assert col(out, "parent") == parent
    assert col(out, "depth") == depth
    assert col(out, "self_cpu") == self_cpu  # R is a python event: no op-table row, no self CPU


def _stack_reference(events: list[tuple[int, int, int]]) -> tuple[list[int], list[int]]:
    """Parents and depths by the documented rule, one event at a time: (thread, start, dur) in any order."""
    end = [s + max(d, 1) for _, s, d in events]  # zero-length events count as 1 ns
    order = sorted(range(len(events)), key=lambda i: (events[i][0], events[i][1], -end[i], i))
    parent = [-1] * len(events)
    stack: list[int] = []
    for k, i in enumerate(order):
        if k and events[order[k - 1]][0] != events[i][0]:
            stack = []
        while stack and end[stack[-1]] <= events[i][1]:
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    depth = [0] * len(events)
    for i in order:  # parents first: they are final when their children are looked at
        p = parent[i]
        while p >= 0 and end[i] > end[p] + 1000:
            p = parent[p]
        parent[i] = p
        depth[i] = depth[p] + 1 if p >= 0 else 0
    return parent, depth


def test_a_chain_of_rounding_overhangs_keeps_each_child_in_its_parent():
    # GIVEN A [0, 6 µs), B [1, 7 µs) and C [2, 8 µs), each ending 1 µs after its parent (rounding: each
    # stays its parent's child), and D, zero length at 6 µs: past A's end, inside B and C
    ts, dur = [0, 1_000, 2_000, 6_000], [6_000, 6_000, 6_000, 0]
    parent, depth = nesting(np.zeros(4, dtype=np.int64), np.array(ts, dtype=np.int64), np.array(dur, dtype=np.int64),
                            np.ones(4, dtype=bool))
    # THEN D's parent is C, the innermost event holding it (the vectorised count once said B)
    assert parent.tolist() == [-1, 0, 1, 2] and depth.tolist() == [0, 1, 2, 3]
    assert (parent.tolist(), depth.tolist()) == _stack_reference([(0, t, d) for t, d in zip(ts, dur)])


def test_nesting_matches_the_rule_on_random_overlaps():
    # GIVEN random events on three threads: nested calls, ties, zero lengths, and overhangs of a few
    # ns up to a few µs past the parent
    rng = random.Random(7)
    for _ in range(1500):
        events = [(rng.randint(0, 2), rng.choice([0, 1_000, 2_000, rng.randint(0, 20_000)]),
                   rng.choice([0, 1, 1_000, rng.randint(0, 15_000)])) for _ in range(rng.randint(1, 25))]
        parent, depth = nesting(np.array([e[0] for e in events], dtype=np.int64),
                                np.array([e[1] for e in events], dtype=np.int64),
                                np.array([e[2] for e in events], dtype=np.int64), np.ones(len(events), dtype=bool))
        assert (parent.tolist(), depth.tolist()) == _stack_reference(events), events


def test_nesting_in_order_with_int32_threads_and_ids_and_unnested_rows():
    # GIVEN random events as a load holds them: int32 threads, int32 ids and parents, some rows not nested
    # (device events), ts and dur int64
    rng = random.Random(11)
    for _ in range(500):
        events = [(rng.randint(0, 2), rng.choice([0, 1_000, rng.randint(0, 20_000)]),
                   rng.choice([0, 1, 1_000, rng.randint(0, 15_000)])) for _ in range(rng.randint(1, 25))]
        mask = np.array([rng.random() < 0.8 for _ in events])
        parent, depth, order = nesting_in_order(np.array([e[0] for e in events], dtype=np.int32),
                                                np.array([e[1] for e in events], dtype=np.int64),
                                                np.array([e[2] for e in events], dtype=np.int64), mask, index=np.int32)
        # THEN the nested rows are nested as the rule nests them alone, the others untouched, all int32
        kept = [i for i in range(len(events)) if mask[i]]
        want_parent, want_depth = _stack_reference([events[i] for i in kept])
        assert [parent[i] for i in kept] == [kept[p] if p >= 0 else -1 for p in want_parent], events
        assert [depth[i] for i in kept] == want_depth, events
        assert all(parent[i] == -1 and depth[i] == -1 for i in range(len(events)) if not mask[i])
        assert parent.dtype == order.dtype == np.int32 and depth.dtype == np.int32
        assert sorted(order.tolist()) == kept


def test_kernel_linked_by_flow_only():
    # GIVEN a kernel with neither correlation nor external id, and an ac2g flow from its launch to it
    out = correlate(decoded(
        [Ev("cpu_op", "aten::mm", 0, 20_000), Ev("runtime", "cudaLaunchKernel", 5_000, 3_000),
         Ev("kernel", "gemm", 30_000, 4_000, thread=DEVICE)],
        flows=[("42", "s", HOST, 5_000), ("42", "f", DEVICE, 30_000)]))
    # THEN the flow finds the launch, the op around the launch gets the kernel's time
    assert col(out, "launch") == [-1, -1, 1]
    assert links(out) == [None, None, "flow"]
    assert col(out, "op") == [0, 0, 0]
    assert col(out, "self_device") == [4_000, 0, 0]
    assert col(out, "kernels") == [1, 0, 0]
    assert reasons(out) == [None, None, None]
    # device and stream of a kernel without args come from its pid and tid; host events have none
    assert col(out, "device") == [-1, -1, 0]
    assert col(out, "stream") == [-1, -1, 7]
    assert col(out, "parent") == [-1, 0, -1]  # device events are not nested


def test_flow_finishing_elsewhere_links_nothing():
    # GIVEN the flow's finish is 1 ns off the kernel's start
    out = correlate(decoded(
        [Ev("cpu_op", "aten::mm", 0, 20_000), Ev("runtime", "cudaLaunchKernel", 5_000, 3_000),
         Ev("kernel", "gemm", 30_000, 4_000, thread=DEVICE)],
        flows=[("42", "s", HOST, 5_000), ("42", "f", DEVICE, 30_001)]))
    assert col(out, "launch") == [-1, -1, -1]
    assert col(out, "op") == [0, 0, -1]
    assert col(out, "self_device") == [0, 0, 0]
    assert reasons(out)[2] == "no_correlation"


def test_graph_replay_one_launch_many_kernels():
    # GIVEN one cudaGraphLaunch (correlation 9) inside op O inside an annotation, replaying three kernels,
    # and a second graph launch (correlation 10) outside every op
    out = correlate(decoded([
        Ev("annotation", "ProfilerStep#1", 0, 100_000),
        Ev("cpu_op", "O", 10_000, 30_000),
        Ev("runtime", "cudaGraphLaunch", 15_000, 5_000, correlation=9),
        Ev("kernel", "k1", 40_000, 1_000, thread=DEVICE, correlation=9),
        Ev("kernel", "k2", 41_000, 2_000, thread=DEVICE, correlation=9),
        Ev("kernel", "k3", 43_000, 3_000, thread=DEVICE, correlation=9),
        Ev("runtime", "cudaGraphLaunch", 200_000, 5_000, correlation=10),
        Ev("kernel", "k4", 210_000, 4_000, thread=DEVICE, correlation=10),
    ]))
    assert col(out, "launch") == [-1, -1, -1, 2, 2, 2, -1, 6]
    assert links(out) == [None, None, None, "graph", "graph", "graph", None, "graph"]
    assert col(out, "op") == [0, 1, 1, 1, 1, 1, -1, -1]
    assert reasons(out) == [None] * 7 + ["launch_outside_op"]
    # O's self device time is its three kernels; the annotation's total includes them
    assert col(out, "self_device") == [0, 6_000, 0, 0, 0, 0, 0, 0]
    assert col(out, "kernels") == [0, 3, 0, 0, 0, 0, 0, 0]
    assert col(out, "device_total") == [6_000, 6_000, 0, 0, 0, 0, 0, 0]
    assert col(out, "kernels_total") == [3, 3, 0, 0, 0, 0, 0, 0]
    assert col(out, "self_cpu") == [70_000, 25_000, 5_000, 0, 0, 0, 5_000, 0]
    # scope: the annotation encloses O and the launch, and reaches the kernels through O
    assert col(out, "scope") == [-1, 0, 0, 0, 0, 0, -1, -1]


def test_external_id_links_straight_to_the_op():
    # GIVEN a kernel with no correlation id or flow but the External id of a cpu_op
    out = correlate(decoded([Ev("cpu_op", "aten::add", 0, 10_000, external_id=5),
                             Ev("kernel", "add", 20_000, 2_000, thread=DEVICE, external_id=5)]))
    assert col(out, "launch") == [-1, -1]
    assert col(out, "op") == [0, 0]
    assert links(out) == [None, "external_id"]
    assert col(out, "self_device") == [2_000, 0]


def test_unlinked_reasons():
    # GIVEN kernels whose launch is missing (correlation 3 has no runtime call), and one with no ids
    out = correlate(decoded([Ev("cpu_op", "aten::add", 0, 10_000),
                             Ev("kernel", "a", 20_000, 2_000, thread=DEVICE, correlation=3),
                             Ev("kernel", "b", 30_000, 2_000, thread=DEVICE)]))
    assert reasons(out) == [None, "no_launch_in_trace", "no_correlation"]
    # WHEN the trace has no host events at all
    gpu_only = correlate(decoded([Ev("kernel", "a", 20_000, 2_000, thread=DEVICE, correlation=3)]))
    assert reasons(gpu_only) == ["gpu_only_trace"]


def test_module_scope_reaches_kernels_through_their_op():
    # GIVEN an nn.Module python scope around an op that launches a kernel
    out = correlate(decoded([
        Ev("python", "nn.Module: Linear_0", 0, 50_000),
        Ev("cpu_op", "aten::linear", 1_000, 40_000),
        Ev("runtime", "cudaLaunchKernel", 2_000, 1_000, correlation=1),
        Ev("kernel", "gemm", 60_000, 5_000, thread=DEVICE, correlation=1),
    ]))
    assert col(out, "module") == [-1, 0, 0, 0]
    assert col(out, "scope") == [-1, 0, 0, 0]
    assert col(out, "op") == [-1, 1, 1, 1]
    assert links(out)[3] == "correlation"
