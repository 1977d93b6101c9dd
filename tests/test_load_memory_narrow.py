"""The load's peak memory (issue 44, item 3): the ``events`` columns that hold an event's id or a count of
events, and the thread numbers, are int32 while the tables are built (half the bytes of int64), and the
memory tables' row numbers too; the op-table figures are worked out over the op-table events alone.

The tables must stay what the wide build (every id column int64, the path a trace of 2^31 events and more
takes) writes: each trace is built both ways, in memory and into a cache file, and every table compared
row for row, with the ``events`` table's column types as schema.DDL declares them.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import ALL_TRACES, trace_path

import profuse
from profuse.trace import _prepare, build, correlate, memory
from profuse.trace._prepare import base_time_ns, prepare
from profuse.trace.correlate import correlated

NARROW = ("id", "parent", "depth", "op", "module", "scope", "parent_op", "launch", "kernels", "kernels_total",
          "pid", "tid", "thread", "device")
WIDE_BYTES = {"kind": 4, "cat": 4, "name": 4, "link": 4, "unlinked": 4}  # every other column 8 bytes, before
TABLES = ("events", "shapes", "flows", "instants", "threads", "scopes", "memory", "op_memory")
# a GPU trace with memory events, a CPU-only one, a ROCm one with memory events, a multi-stream one
SAMPLE = ("h100_bert_small", "cpu_only_gloo_rank34", "mi300_normalization_layers", "a100_event_sync_multistream")
MEMORY_HEAVY = "v100_rank1_of2_216k_events"  # 28 k memory events


def _events_of(path: Path):
    cols, top, _ = build.decode(str(path))
    prepared = prepare(str(path), cols, base_time_ns(str(path), top.get("baseTimeNanoseconds")))
    return prepared, correlated(prepared.events)[0]


@pytest.mark.parametrize("name", SAMPLE)
def test_id_and_count_columns_are_int32(name):
    prepared, events = _events_of(trace_path(f"{name}.json.gz"))
    arrays = events.arrays()
    for col in NARROW:
        assert arrays[col].dtype == np.int32, col
    assert prepared.events.thread.dtype == np.int32 and prepared.events.flows.thread.dtype == np.int32
    # distinct buffers: what the columns hold beside the decoded arrays they share
    own = {id(a.base if a.base is not None else a): a.nbytes for a in arrays.values()}
    before = sum(WIDE_BYTES.get(c, 8) for c in arrays) * len(events)
    assert sum(own.values()) <= before - 11 * 4 * len(events), (sum(own.values()), before)


def _rows(con, table: str) -> list[tuple]:
    return con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()


def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """The build as a trace of 2^31 events or more goes: every id and count column int64."""
    monkeypatch.setattr(correlate, "row_type", lambda *counts: np.int64)
    monkeypatch.setattr(correlate, "narrowed", lambda values: values)
    monkeypatch.setattr(_prepare, "narrowed", lambda values: values)
    monkeypatch.setattr(memory, "row_type", lambda *counts: np.int64)


@pytest.mark.parametrize("in_file", [False, True], ids=["memory", "file"])
@pytest.mark.parametrize("path", [p for p in ALL_TRACES if p.name.split(".")[0] in (*SAMPLE, MEMORY_HEAVY)],
                         ids=lambda p: p.name.split(".")[0])
def test_tables_equal_the_wide_build(path, in_file, tmp_path, monkeypatch):
    if in_file:
        monkeypatch.setattr(build, "COMPRESS_MIN_EVENTS", 10)  # the file-backed build for every trace

    def tables(folder: Path) -> tuple[dict[str, list[tuple]], list[tuple]]:
        folder.mkdir()
        trace = profuse.load(path, cache=in_file, cache_dir=folder if in_file else None)
        try:
            got = {t: _rows(trace.con, t) for t in TABLES}
            types = trace.con.execute("SELECT column_name, data_type FROM information_schema.columns "
                                      "WHERE table_name = 'events' ORDER BY ordinal_position").fetchall()
            return got, types
        finally:
            trace.close()

    narrow, narrow_types = tables(tmp_path / "narrow")
    with monkeypatch.context() as m:
        _wide(m)
        wide, wide_types = tables(tmp_path / "wide")
    assert narrow_types == wide_types
    assert dict(narrow_types)["parent"] == "BIGINT" and dict(narrow_types)["depth"] == "INTEGER"
    assert sum(len(rows) for rows in wide.values()) > 0
    for table in TABLES:
        assert narrow[table] == wide[table], table


def test_op_memory_over_the_op_table_alone_matches_numpy():
    """The compiled op-memory pass, handed the op-table events alone, answers as numpy's pass over all."""
    if memory._accel is None:
        pytest.skip("compiled extension not built")
    path = trace_path(f"{MEMORY_HEAVY}.json.gz")
    _, events = _events_of(path)
    cols, top, _ = build.decode(str(path))
    mem = memory.scanned_memory_events(cols) if cols.memory_scanned else None
    assert mem is not None and len(mem) > 1000
    ts = np.sort(mem.ts + base_time_ns(str(path), top.get("baseTimeNanoseconds")))
    rng = np.random.default_rng(7)
    cpu, dev = rng.integers(-4096, 4096, len(ts)), rng.integers(-4096, 4096, len(ts))
    in_table = memory.kind_mask(events.kind, *memory.TABLE_KINDS)
    parent = correlate.nearest_ancestor(events.parent, in_table, include_self=False)
    got = memory._op_memory_compiled(events, in_table, parent, ts, cpu, dev)
    want = memory._op_memory_numpy(events, in_table, parent, ts, cpu, dev)
    assert len(got[0]) > 100
    for g, w in zip(got, want):
        assert g.tolist() == w.tolist()


def test_time_sums_are_int32_where_they_fit_and_whole_where_not(tmp_path):
    # GIVEN a trace whose sums pass int32's 2.1 s (an op of 3 s around an op whose kernel runs 2.5 s), and a
    # shared trace whose sums all fit
    import json

    us = {"outer": 3_000_000, "aten::mm": 50, "cudaLaunchKernel": 5, "gemm": 2_500_000}
    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "outer", "pid": 1, "tid": 1, "ts": 0, "dur": us["outer"]},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": us["aten::mm"]},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20,
         "dur": us["cudaLaunchKernel"], "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100, "dur": us["gemm"],
         "args": {"correlation": 7, "device": 0, "stream": 7}},
    ]}
    path = tmp_path / "long.json"
    path.write_text(json.dumps(doc))
    sums = ("self_cpu", "self_device", "device_total")
    # THEN the long trace keeps them int64, the shared one has them int32
    _, long_events = _events_of(path)
    assert {c: long_events.arrays()[c].dtype for c in sums} == dict.fromkeys(sums, np.dtype(np.int64))
    _, small = _events_of(trace_path("h100_bert_small.json.gz"))
    assert {c: small.arrays()[c].dtype for c in sums} == dict.fromkeys(sums, np.dtype(np.int32))
    # AND the long trace's table holds every sum whole: the outer op's self time is its span less its child's
    with profuse.load(path, cache=False) as t:
        got = dict(t.con.execute("SELECT name, (self_cpu, self_device, device_total) FROM events "
                                 "WHERE kind = 'cpu_op'").fetchall())
    kernel_ns = us["gemm"] * 1000
    assert got["outer"] == ((us["outer"] - us["aten::mm"]) * 1000, 0, kernel_ns)
    assert got["aten::mm"] == ((us["aten::mm"] - us["cudaLaunchKernel"]) * 1000, kernel_ns, kernel_ns)
