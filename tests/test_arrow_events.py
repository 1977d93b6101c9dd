"""Tables written as Arrow C streams (trace/_accel.c arrow_stream, _write.ArrowFrame and ArrowTable):
the events, and the flows, instants and memory side tables.

Against the numpy-frame writers they replace (the rows of every table equal on real traces, across
batch boundaries), against rows built by hand from the columns (NULL sentinels, NaN flops, None and
non-ASCII strings, flow ids as text), and the stream's refusals: nothing it hands DuckDB points
outside a buffer.
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from conftest import trace_path

import profuse
from profuse.trace import _write, build, compiled
from profuse.trace.event_columns import WRITE_RULES, EventColumns, EventStrings

pytestmark = pytest.mark.skipif(compiled.accel is None, reason="the compiled extension is not built")

INT32 = {"kind", "cat", "name", "pid", "tid", "thread", "link", "unlinked"}  # int32 arrays
SMALL = {"device", "depth", "kernels", "kernels_total"}  # int64 arrays into INTEGER columns


def _events_rows(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    return con.sql("SELECT * FROM events ORDER BY id").fetchall()


@pytest.mark.parametrize("name", ["mtia_inference", "a100_nccl_rank0_of2", "h100_vit_falconsai",
                                  "mi300_sglang_decode_cudagraph"])
def test_arrow_stream_writes_the_rows_the_numpy_frame_writes(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(trace_path(f"{name}.json.gz"))
    used: list[bool] = []
    arrow = _write._write_events_arrow

    def spy(*args: object) -> bool:
        used.append(arrow(*args))  # type: ignore[arg-type]
        return used[-1]

    monkeypatch.setattr(_write, "ARROW_BATCH", 997)  # many batches, none aligned to a byte of the bitmaps
    monkeypatch.setattr(_write, "_write_events_arrow", spy)
    with profuse.load(path, cache=False) as via_arrow:
        got = {t: via_arrow.con.sql(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in ("events", "threads")}
        types = via_arrow.con.sql("DESCRIBE events").fetchall()
    assert used == [True]
    monkeypatch.setattr(_write, "_write_events_arrow", lambda *args: False)
    with profuse.load(path, cache=False) as via_numpy:
        want = {t: via_numpy.con.sql(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in ("events", "threads")}
        assert via_numpy.con.sql("DESCRIBE events").fetchall() == types
    assert got == want
    assert len(got["events"]) > 0


SIDE_TABLES = ("flows", "instants", "memory", "op_memory", "scopes", "shapes", "threads", "meta")


def _tables(path: str, monkeypatch: pytest.MonkeyPatch, *, arrow: bool) -> tuple[dict[str, list], list[str]]:
    """Every table of ``path`` loaded with the side tables' Arrow streams on or off, and the tables
    that went in as streams."""
    streamed: list[str] = []
    insert = _write.insert_arrow

    def spy(con: duckdb.DuckDBPyConnection, table: str, *args: object) -> bool:
        if not arrow and table != "events":
            return False
        streamed.append(table)
        return insert(con, table, *args)  # type: ignore[arg-type]

    with monkeypatch.context() as m:
        m.setattr(_write, "insert_arrow", spy)
        with profuse.load(path, cache=False) as t:
            got = {tb: t.con.sql(f"SELECT * FROM {tb} ORDER BY ALL").fetchall()
                   for tb in ("events", *SIDE_TABLES) if tb != "meta"}
            got["types"] = [t.con.sql(f"DESCRIBE {tb}").fetchall() for tb in ("events", *SIDE_TABLES)]
    return got, streamed


@pytest.mark.parametrize("name, streamed", [
    ("v100_rank1_of2_216k_events", {"events", "flows", "instants", "memory", "op_memory", "scopes", "shapes"}),
    ("mi300_normalization_layers", {"events", "flows", "instants", "memory", "op_memory", "scopes", "shapes"}),
    ("mtia_inference", {"events", "flows", "instants", "scopes", "shapes"}),
    ("mi300_sglang_decode_cudagraph", {"events", "flows", "scopes", "shapes"}),
])
def test_side_tables_as_streams_hold_the_rows_the_numpy_frames_hold(name: str, streamed: set[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(trace_path(f"{name}.json.gz"))
    via_arrow, used = _tables(path, monkeypatch, arrow=True)
    via_numpy, _ = _tables(path, monkeypatch, arrow=False)
    assert set(used) == streamed
    assert via_arrow == via_numpy
    assert all(via_arrow[t] for t in streamed)


def test_flow_ids_as_text_and_instants_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ids that are no plain decimal numbers keep their text ("07", "a-1"); instants name their thread
    events = [{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 2, "ts": 10, "dur": 5},
              {"ph": "X", "name": "k", "cat": "kernel", "pid": 0, "tid": 7, "ts": 20, "dur": 3}]
    for i, ident in enumerate(["07", "a-1", "07", "\u00e9t\u00e9"]):
        events.append({"ph": "s" if i % 2 == 0 else "f", "id": ident, "pid": 1, "tid": 2, "ts": 11 + i,
                       "cat": "ac2g", "name": "ac2g", **({"bp": "e"} if i % 2 else {})})
    events += [{"ph": "i", "s": "t", "name": f"mark {i}", "cat": None if i == 1 else "user", "pid": 1 + i % 2,
                "tid": 2, "ts": 12 + i} for i in range(3)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    via_arrow, used = _tables(str(path), monkeypatch, arrow=True)
    via_numpy, _ = _tables(str(path), monkeypatch, arrow=False)
    assert {"flows", "instants"} <= set(used)
    assert via_arrow == via_numpy
    assert sorted(r[0] for r in via_arrow["flows"]) == ["07", "07", "a-1", "\u00e9t\u00e9"]
    assert [(r[0], r[1], r[3], r[4]) for r in via_arrow["instants"]] == [
        ("mark 0", "user", "1", "2"), ("mark 1", None, "2", "2"), ("mark 2", "user", "1", "2")]


@pytest.mark.parametrize("values", [[], [0], [0, 9, 10, 99, 100, 101], [2**63 - 1, 1, 10**18], list(range(0, 5000, 7))])
@pytest.mark.parametrize("make", [_write.decimal_dictionary, _write.decimal_dictionary_numpy])
def test_decimal_dictionary_is_the_decimal_text(values: list[int], make: Callable[..., Any]) -> None:
    offsets, data, known = make(np.array(values, dtype=np.int64))
    assert [data[offsets[i]:offsets[i + 1]].decode() for i in range(len(values))] == [str(v) for v in values]
    assert known.all() and offsets[0] == 0 and offsets[-1] == len(data) and len(offsets) == len(values) + 1


def test_decimal_text_writes_negative_values_as_python_does() -> None:
    values = np.array([-1, -10, -(2**63), 7, -999], dtype=np.int64)
    offsets, data = compiled.accel.decimal_text(values)
    at = np.frombuffer(offsets, dtype=np.int32)
    assert [data[at[i]:at[i + 1]].decode() for i in range(len(values))] == [str(v) for v in values.tolist()]
    with pytest.raises(ValueError):
        compiled.accel.decimal_text(np.zeros(3, dtype=np.int32))  # not int64


def _columns(n: int, rng: np.random.Generator, strings: EventStrings) -> EventColumns:
    cols: dict[str, np.ndarray] = {}
    lists = strings.params()
    for f in dataclasses.fields(EventColumns):
        rule = WRITE_RULES.get(f.name, {})
        if "lookup" in rule:
            cols[f.name] = rng.integers(0, len(lists[rule["lookup"]]), n).astype(np.int32)
        elif f.name == "flops":
            v = rng.random(n) * 1e12
            v[rng.random(n) < 0.3] = np.nan
            cols[f.name] = v
        else:
            v = rng.integers(0, 1000 if f.name in INT32 | SMALL else 1 << 40, n)
            if "null" in rule:
                v[rng.random(n) < 0.4] = rule["null"]
            cols[f.name] = v.astype(np.int32 if f.name in INT32 else np.int64)
    cols["id"] = np.arange(n, dtype=np.int64)
    return EventColumns(**cols)


def _by_hand(events: EventColumns, strings: EventStrings) -> list[tuple]:
    """The rows the table must hold, from the columns and WRITE_RULES, one value at a time."""
    lists, rows = strings.params(), []
    for i in range(len(events)):
        row = []
        for f in dataclasses.fields(EventColumns):
            v, rule = getattr(events, f.name)[i].item(), WRITE_RULES.get(f.name, {})
            if "lookup" in rule:
                v = lists[rule["lookup"]][v]
            elif ("null" in rule and v == rule["null"]) or (rule.get("nan_null") and math.isnan(v)):
                v = None
            row.append(v)
        rows.append(tuple(row))
    return rows


STRINGS = EventStrings(kinds=["cpu_op", "kernel"], cats=[None, "cpu_op", "kernel"],
                       names=["", "aten::mm", "ÿ 名前 \u00e9\u0301", "void k<float>(x)", "😀" * 40],
                       pids=["1", "gpu 0"], tids=["7", ""], how=[None, "correlation"], why=[None, "no launch"])


@pytest.mark.parametrize("n", [0, 1, 8, 2500])
def test_rows_equal_the_columns_read_value_by_value(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_write, "ARROW_BATCH", 1000)
    events = _columns(n, np.random.default_rng(n), STRINGS)
    want = _by_hand(events, STRINGS)
    for writer in (_write._write_events_arrow, None):
        con = build._empty_tables()
        try:
            if writer is None:
                monkeypatch.setattr(_write, "_write_events_arrow", lambda *args: False)
                _write.write_events(con, events, STRINGS)
            else:
                assert _write._write_events_arrow(con, events.arrays(), n, STRINGS)
            assert _events_rows(con) == want
        finally:
            con.close()


def test_a_frame_scans_again_with_a_fresh_stream() -> None:
    events = _columns(50, np.random.default_rng(1), STRINGS)
    columns = _write.arrow_columns(events.arrays(), STRINGS)
    assert columns is not None
    frame = _write.ArrowFrame(columns, 50)
    con = duckdb.connect()
    con.register("f", frame)
    first = con.sql("SELECT name, count(*) FROM f GROUP BY ALL ORDER BY ALL").fetchall()
    assert con.sql("SELECT name, count(*) FROM f GROUP BY ALL ORDER BY ALL").fetchall() == first
    assert sum(c for _, c in first) == 50
    con.close()
    frame.__arrow_c_stream__()  # a stream never taken by a consumer is let go with its capsule


def test_a_string_that_is_not_utf8_leaves_the_numpy_path_to_write() -> None:
    odd = dataclasses.replace(STRINGS, names=["ok", "\ud800 lone surrogate"])
    events = _columns(10, np.random.default_rng(2), odd)
    assert _write.arrow_columns(events.arrays(), odd) is None


def _column(kind: str = "d", values: object = None, valid: object = None, offsets: object = None,
            data: object = None) -> tuple:
    return ("c", kind, np.zeros(4, np.int32) if values is None else values, valid,
            np.array([0, 1, 3], np.int32) if offsets is None else offsets, b"abc" if data is None else data)


@pytest.mark.parametrize("column, problem", [
    (_column(values=np.array([0, 1, 2, 0], np.int32)), "outside its dictionary"),
    (_column(values=np.array([0, -1, 0, 0], np.int32)), "outside its dictionary"),
    (_column(offsets=np.array([0, 1, 4], np.int32)), "outside its dictionary"),
    (_column(offsets=np.array([0, 2, 1], np.int32)), "outside its dictionary"),
    (_column(offsets=np.array([1, 2, 3], np.int32)), "outside its dictionary"),
    (_column(values=np.zeros(3, np.int32)), "values holds 12 bytes, 16 expected"),
    (_column(valid=np.zeros(0, np.uint8)), "validity holds 0 bytes, at least 1 expected"),
    (_column(kind="l", values=np.zeros(4, np.int64)), "a dictionary exactly for kind d"),
    (("c", "l", np.zeros(4, np.int64), None, None, None), None),
    (("c", "x", np.zeros(4, np.int64), None, None, None), "unknown kind x"),
    (("c", "l", np.zeros(8, np.int32)[::2], None, None, None), "contiguous"),
])
def test_arrow_stream_refuses_what_would_point_outside_a_buffer(column: tuple, problem: str | None) -> None:
    if problem is None:
        assert compiled.accel.arrow_stream([column], 4, 2) is not None
        return
    with pytest.raises((ValueError, BufferError), match=problem):
        compiled.accel.arrow_stream([column], 4, 2)
