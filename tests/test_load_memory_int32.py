"""The load's peak memory, second pass (issue 44, item 3): correlate works in int32 from the start.

- The args the trace gives as integers (device, stream, correlation, External id, Sequence number, Python
  ids, bytes) are decoded as int32 where every value of the column fits it, int64 where one does not, and
  the tables hold them whole either way.
- The compiled passes of correlate (trace/_accel.c ancestors, enclosing, attribute) take and write int32
  ids and counts (``width`` 4) and answer as they do in int64; correlate hands them int32 columns, so no
  int64 copy of a column sits beside its int32 one at the end of correlate (the load's peak was there).
- correlate's own allocations at their peak stay within half again the columns it makes.
"""
from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from conftest import trace_path
from test_accel import _random_forest

import profuse
from profuse.trace import build, compiled, correlate
from profuse.trace._prepare import base_time_ns, prepare
from profuse.trace.correlate import correlated

ARGS = ("device", "stream", "correlation", "external_id", "seq", "python_id", "python_parent_id", "nbytes")
SAMPLE = ("h100_bert_small", "cpu_only_gloo_rank34", "mi300_normalization_layers", "a100_event_sync_multistream")


def _prepared(path: Path):
    cols, top, _ = build.decode(str(path))
    return prepare(str(path), cols, base_time_ns(str(path), top.get("baseTimeNanoseconds")))


@pytest.mark.parametrize("name", SAMPLE)
def test_decoded_integer_args_are_int32_where_they_fit(name):
    prepared = _prepared(trace_path(f"{name}.json.gz"))
    for arg in ARGS:
        values = getattr(prepared.events, arg)
        assert values.dtype == np.int32, arg
    events = correlated(prepared.events)[0]
    assert events.stream.dtype == np.int32 and events.device.dtype == np.int32


def _event(name: str, cat: str, ts: float, dur: float, tid: int | str, **args: int) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1 if cat != "kernel" else 0,
            "tid": tid, "args": args}


def test_an_arg_past_int32_keeps_its_column_int64_and_whole(tmp_path):
    # GIVEN an op launching a kernel whose correlation id, stream and bytes are past 2^31, and whose
    # External id and Sequence number fit 32 bits
    big_corr, big_stream, big_bytes = 2**40 + 5, 2**33 + 1, 3 * 2**31
    events = [
        _event("aten::mm", "cpu_op", 10, 100, 1, **{"External id": 7, "Sequence number": 9}),
        _event("cudaLaunchKernel", "cuda_runtime", 20, 10, 1, correlation=big_corr, **{"External id": 7}),
        _event("gemm", "kernel", 40, 50, 7, correlation=big_corr, stream=big_stream, device=0,
               **{"External id": 7}),
        _event("Memcpy HtoD", "gpu_memcpy", 95, 5, 7, stream=7, device=0, bytes=big_bytes),
    ]
    path = tmp_path / "big_ids.json"
    path.write_text(json.dumps({"traceEvents": events}))
    prepared = _prepared(path)
    # THEN the columns with a value past 32 bits stay int64, the others are int32
    wide = {"correlation", "stream", "nbytes"}
    for arg in ARGS:
        assert getattr(prepared.events, arg).dtype == (np.int64 if arg in wide else np.int32), arg
    # AND the tables hold every value whole, and the kernel is linked to its launch by that correlation id
    trace = profuse.load(path, cache=False)
    try:
        rows = trace.con.execute("SELECT name, correlation, stream, bytes, external_id, seq, launch, op "
                                 "FROM events ORDER BY ts").fetchall()
    finally:
        trace.close()
    assert rows == [("aten::mm", None, None, None, 7, 9, None, 0),
                    ("cudaLaunchKernel", big_corr, None, None, 7, None, None, 0),
                    ("gemm", big_corr, big_stream, None, 7, None, 1, 0),
                    ("Memcpy HtoD", None, 7, big_bytes, None, None, None, None)]


@pytest.fixture
def accel():
    if compiled.accel is None or not compiled.enabled():
        pytest.skip("compiled extension not built")
    return compiled.accel


def test_compiled_passes_answer_alike_in_int32_and_int64(accel):
    rng = np.random.default_rng(41)
    for _ in range(120):
        # GIVEN random forests, scopes, host flags, device events' launches and ops, durations
        n = int(rng.integers(0, 150))
        parent = _random_forest(rng, n)
        accept, host, in_table = (rng.random(n) < p for p in (0.3, 0.6, 0.6))
        launch, op = (np.where(rng.random(n) < 0.5, rng.integers(0, max(n, 1), n), -1).astype(np.int64)
                      for _ in range(2))
        dur = rng.integers(0, 5000, n).astype(np.int64)
        kinds = np.array([correlate.KIND_CODE["cpu_op"], correlate.KIND_CODE["kernel"]], dtype=np.int8)
        kind = kinds[(rng.random(n) < 0.3).astype(np.int64)]
        for include_self in (True, False):
            # WHEN each pass runs on int32 ids THEN it answers int32, as it does in int64
            wide = correlate.nearest_ancestor(parent, accept, include_self)
            narrow = correlate.nearest_ancestor(parent.astype(np.int32), accept, include_self, index=np.int32)
            assert narrow.dtype == np.int32 and narrow.tolist() == wide.tolist()
        links64 = correlate.Links(launch=launch, op=op, how=np.zeros(n, np.int8), unlinked=np.zeros(n, np.int8))
        links32 = correlate.Links(launch=launch.astype(np.int32), op=op.astype(np.int32), how=links64.how,
                                  unlinked=links64.unlinked)
        wide = correlate._enclosing_or_launchers(parent, accept, host, links64)
        narrow = correlate._enclosing_or_launchers(parent.astype(np.int32), accept, host, links32)
        assert wide.dtype == np.int64 and narrow.dtype == np.int32 and narrow.tolist() == wide.tolist()
        up = correlate.nearest_ancestor(parent, in_table, include_self=False)
        a64 = correlate.attribute(kind=kind, dur=dur, parent=parent, device_op=op, table_parent=up)
        a32 = correlate.attribute(kind=kind, dur=dur, parent=parent, device_op=op.astype(np.int32),
                                  table_parent=up.astype(np.int32), index=np.int32)
        assert a32.kernels.dtype == a32.kernels_total.dtype == np.int32 and a32.self_cpu.dtype == np.int64
        for name in ("self_cpu", "self_device", "device_total", "kernels", "kernels_total"):
            assert getattr(a32, name).tolist() == getattr(a64, name).tolist(), name


def test_compiled_passes_refuse_a_bad_width_and_mismatched_columns(accel):
    parent32, accept = np.array([-1, 0, 1, 2], dtype=np.int32), np.ones(4, dtype=bool)
    out32 = np.empty(4, dtype=np.int32)
    with pytest.raises(ValueError, match="width"):
        accel.ancestors(parent32, accept, out32, 3)
    with pytest.raises(ValueError, match="differ in length"):  # int32 columns read as int64: half as many
        accel.ancestors(parent32, accept, out32, 8)
    accel.ancestors(parent32, accept, out32, 4)
    assert out32.tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="width"):
        accel.enclosing(out32, parent32, accept, parent32, parent32, out32, 2)
    with pytest.raises(ValueError, match="differ in length"):  # the op column int64 among int32 ones
        accel.enclosing(out32, parent32, accept, parent32, parent32.astype(np.int64), out32, 4)
    dur = np.zeros(4, dtype=np.int64)
    times = [np.empty(4, dtype=np.int64) for _ in range(3)]
    with pytest.raises(ValueError, match="differ in length"):  # counts int64 where ids are int32
        accel.attribute(dur, accept, parent32, accept, parent32, *times, *times[:2], 4)


def test_correlate_allocates_at_most_half_again_the_columns_it_makes():
    # GIVEN a real trace of 123 k events, prepared
    prepared = _prepared(trace_path("v100_rank1_of2_216k_events.json.gz"))
    decoded = {id(a) for a in vars(prepared.events).values() if isinstance(a, np.ndarray)}
    # WHEN correlate runs under tracemalloc (numpy reports its arrays to it)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        events, _ = correlated(prepared.events)
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    # THEN its peak is at most 1.5 times the bytes of the columns it made (the decoded ones it passes on
    # are not counted): int64 working copies of int32 columns no longer sit beside them (1.9 times before)
    made = {id(a.base if a.base is not None else a): a.nbytes for a in events.arrays().values()
            if id(a) not in decoded}
    assert len(events) > 100_000
    assert peak <= 1.5 * sum(made.values()), (peak, sum(made.values()))
