"""The compiled scanner against the msgspec reference decoder: same tables, same accept/reject.

The scanner (trace/_scan.c) answers None on anything it does not accept and the reference path
then runs, so on good traces these tests prove it accepted them (else the comparison would be the
reference against itself) and built the same tables row for row; on mutated traces they prove it
never crashes and that a load through it ends exactly like a load through the reference alone.
"""
from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ALL_TRACES, trace_id, trace_path

import profuse
from profuse.errors import TraceError
from profuse.trace import _decode, _native

pytestmark = pytest.mark.skipif(not _native.available(), reason="compiled scanner not built (pure-Python install)")

TABLES = ("events", "shapes", "directions", "scopes", "threads", "instants", "flows")


def _load_tables(path: Path, *, scanner: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("PROFUSE_SCANNER", "1" if scanner else "0")
    monkeypatch.setenv("PROFUSE_WORKERS", "1")  # the reference path in one process: the oracle
    t = profuse.load(path, cache=False)
    try:
        out: dict[str, Any] = {tb: t.con.execute(f"SELECT * FROM {tb} ORDER BY ALL").fetchall() for tb in TABLES}
        out["meta"] = {k: json.loads(v) for k, v in t.con.execute("SELECT key, value FROM meta").fetchall()}
    finally:
        t.close()
    return out


def _outcome(path: Path, *, scanner: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    try:
        return "ok", _load_tables(path, scanner=scanner, monkeypatch=monkeypatch)
    except TraceError as err:
        return "error", str(err)


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_scanner_accepts_every_shared_trace(path: Path):
    data = _decode.read_bytes(str(path))
    doc = _decode.split_document(str(path), data)
    cols = _native.scan_columns(doc, threads=1)
    assert cols is not None, "the scanner fell back to the reference path on a real trace"
    x_events = sum(1 for e in json.loads(data)["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X")
    assert cols.n == x_events


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_scanner_tables_equal_reference_tables(path: Path, monkeypatch: pytest.MonkeyPatch):
    fast = _load_tables(path, scanner=True, monkeypatch=monkeypatch)
    ref = _load_tables(path, scanner=False, monkeypatch=monkeypatch)
    for table in (*TABLES, "meta"):
        assert fast[table] == ref[table], table
    assert fast["meta"]["events"] > 0


def test_two_thread_split_equals_one_thread():
    path = next(p for p in ALL_TRACES if p.name.startswith("v100_rank1"))
    doc = _decode.split_document(str(path), _decode.read_bytes(str(path)))
    one, two = _native.scan_columns(doc, threads=1), _native.scan_columns(doc, threads=2)
    assert one is not None and two is not None
    assert one.n == two.n
    names1, names2 = _lookup(one.names), _lookup(two.names)
    assert [names1[i] for i in one.take("name")] == [names2[i] for i in two.take("name")]
    for key in ("ts", "dur", "correlation", "external_id", "flow_ts"):
        assert (one.take(key) == two.take(key)).all(), key
    assert _flows(one) == _flows(two) and one.phase_counts == two.phase_counts
    assert _shape_rows(one) == _shape_rows(two)


def _flows(cols: Any) -> tuple[list[Any], list[Any]]:
    from profuse.trace._columns import flow_cat_values, flow_id_texts

    return flow_id_texts(cols), flow_cat_values(cols)


def _shape_rows(cols: Any) -> list[tuple[Any, ...]]:
    return [*cols.shapes, *(cols.shape_columns.tuples() if cols.shape_columns is not None else [])]


def test_shapes_of_two_halves_equal_those_of_one_pass():
    # GIVEN a trace with shapes (input dims, types, concrete inputs) on its ops, scanned whole and in two halves
    path = trace_path("h100_vit_falconsai.json.gz")
    doc = _decode.split_document(str(path), _decode.read_bytes(str(path)))
    one, two = _native.scan_columns(doc, threads=1), _native.scan_columns(doc, threads=2)
    assert one is not None and two is not None and two.shape_columns is not None
    # THEN the merged halves give the same rows: one per op with input dims or a launch grid, each row's
    # texts as json reads them from the file
    rows = _shape_rows(two)
    events = [e for e in json.loads(bytes(doc.events)) if e.get("ph") == "X"]
    want = [k for k, e in enumerate(events) if e.get("args", {}).get("Input Dims") or e.get("args", {}).get("grid")]
    assert rows == _shape_rows(one) and [r[0] for r in rows] == want and len(want) > 1000
    for row, dims, types, grid, _block, _concrete in rows:
        args = events[row]["args"]
        assert (json.loads(dims) if dims is not None else None) == (args.get("Input Dims") or None)
        assert (json.loads(types) if types is not None else None) == (args.get("Input type") or None)
        assert (json.loads(grid) if grid is not None else None) == args.get("grid")


def _directions(cols: Any) -> list[tuple[int, str]]:
    return [(int(r), str(v)) for d in cols.directions for r, v in zip(d.rows.tolist(), d.values().tolist())]


@pytest.mark.parametrize("document", [False, True])
def test_directions_of_two_halves_equal_those_of_one_pass(document: bool, monkeypatch: pytest.MonkeyPatch):
    # GIVEN the MTIA trace, whose DMA requests record args.direction (all in the file's second half: rows the
    # tail's scan numbers from its own start), scanned whole and in two halves (the events array alone, or
    # the document with its halves' event columns joined in place)
    from profuse.trace import _parallel

    path = trace_path("mtia_inference.json.gz")
    data = _decode.read_bytes(str(path))
    merged, real = [], _parallel.merge
    monkeypatch.setattr(_parallel, "merge", lambda d, s: (merged.append(len(s.directions)), real(d, s)))
    if document:
        one, two = (r[0] if r is not None else None
                    for r in (_native.scan_document(data, threads=1), _native.scan_document(data, threads=2)))
    else:
        doc = _decode.split_document(str(path), data)
        one, two = _native.scan_columns(doc, threads=1), _native.scan_columns(doc, threads=2)
    assert one is not None and two is not None
    # THEN the merged halves give each event's direction as json reads it from the file, at its row
    events = [e for e in json.loads(data)["traceEvents"] if e.get("ph") == "X"]
    want = [(k, e["args"]["direction"]) for k, e in enumerate(events) if "direction" in e.get("args", {})]
    assert _directions(two) == _directions(one) == want and len(want) == 877
    assert merged == [1], "the tail's directions were merged after the head's events"


def test_directions_of_every_json_type_are_read_as_the_reference_reads_them(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch):
    # GIVEN copies whose args.direction is a string (one escaped), a number, null, an object, or absent
    values = ['"HOST_TO_DEVICE"', '"DEVICE\\u005fTO_HOST"', "7", "null", '{"a": 1}', None]
    events = []
    for i, v in enumerate(values):
        direction = "" if v is None else f', "direction": {v}'
        events.append(f'{{"ph": "X", "cat": "mtia_ccp_events", "name": "dma_request", "pid": 1, "tid": 2, '
                      f'"ts": {i}, "dur": 1, "args": {{"stream": 3{direction}}}}}')
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [' + ", ".join(events) + "]}")
    assert "\\u005f" in path.read_text()
    assert _native.scan_columns(_decode.split_document(str(path), path.read_bytes()), threads=1) is not None
    # THEN the scanner keeps the strings alone, unescaped, as the reference decoder does
    fast = _load_tables(path, scanner=True, monkeypatch=monkeypatch)
    assert fast["directions"] == _load_tables(path, scanner=False, monkeypatch=monkeypatch)["directions"]
    assert fast["directions"] == [(0, "HOST_TO_DEVICE"), (1, "DEVICE_TO_HOST")]


def test_document_scan_two_threads_equals_one_and_the_reference_split():
    path = next(p for p in ALL_TRACES if p.name.startswith("v100_rank1"))
    data = _decode.read_bytes(str(path))
    one, two = _native.scan_document(data, threads=1), _native.scan_document(data, threads=2)
    assert one is not None and two is not None
    ref = _decode.split_document(str(path), data).top
    assert one[1] is not None and two[1] is not None
    assert {k: bytes(v) for k, v in one[1].items()} == {k: bytes(v) for k, v in ref.items()}
    assert {k: bytes(v) for k, v in two[1].items()} == {k: bytes(v) for k, v in ref.items()}
    assert one[0].n == two[0].n > 100_000
    # AND every per-event column is the same, the halves' joined in place (one part: taken without a copy)
    assert all(len(two[0].parts[key]) == 1 for key in (*_native._EVENT_I64, "name", "cat", "thread_key"))
    names1, names2 = _lookup(one[0].names), _lookup(two[0].names)
    assert [names1[i] for i in one[0].take("name")] == [names2[i] for i in two[0].take("name")]
    cats1, cats2 = _lookup(one[0].cats), _lookup(two[0].cats)
    assert [cats1[i] for i in one[0].take("cat")] == [cats2[i] for i in two[0].take("cat")]
    assert _threads_of(one[0]) == _threads_of(two[0])
    for key in _native._EVENT_I64:
        assert np.array_equal(one[0].take(key), two[0].take(key), equal_nan=key == "flops"), key


def _threads_of(cols: Any) -> list[tuple[Any, Any]]:
    from profuse.trace._columns import THREAD_SHIFT

    pids, tids = _lookup(cols.pids), _lookup(cols.tids)
    return [(pids[k // THREAD_SHIFT], tids[k % THREAD_SHIFT]) for k in cols.take("thread_key").tolist()]


def _raw_halves() -> tuple[dict[str, Any], dict[str, Any]]:
    path = next(p for p in ALL_TRACES if p.name.startswith("v100_rank1"))
    head, tail, split = _native.raw_scan_document(_decode.read_bytes(str(path)), threads=2)
    assert split and head["met"] and head["n"] and tail["n"]
    return head, tail


def _values(column: Any, dtype: Any) -> list[Any]:
    return np.frombuffer(column, dtype=dtype).tolist()


def test_join_appends_and_renumbers_in_place():
    # GIVEN the two halves of a split scan
    from profuse.trace._native import _scan

    head, tail = _raw_halves()
    ts, tail_ts = _values(head["ts"], np.int64), _values(tail["ts"], np.int64)
    names, tail_names = _values(head["name"], np.int32), _values(tail["name"], np.int32)
    remap = np.arange(len(tail["names"]), dtype=np.int32)[::-1].copy()  # any table: each code c -> remap[c]
    # WHEN their ts and name columns are joined, the names through the remap
    assert _scan.join([(head["ts"], tail["ts"], None), (head["name"], tail["name"], remap)]) is None
    # THEN the head's columns hold both halves, the tail's codes renumbered; the tail's are as they were
    assert _values(head["ts"], np.int64) == ts + tail_ts and len(head["ts"]) == 8 * (head["n"] + tail["n"])
    assert _values(head["name"], np.int32) == names + [int(remap[c]) for c in tail_names]
    assert _values(tail["ts"], np.int64) == tail_ts


def test_join_on_two_threads_appends_every_column_in_place():
    # GIVEN the two halves of a split scan, and remaps that renumber the tail's codes
    from profuse.trace._native import _scan

    head, tail = _raw_halves()
    keys = {"ts": np.int64, "dur": np.int64, "name": np.int32, "cat": np.int32, "pid": np.int32, "tid": np.int32}
    remaps = {k: np.arange(len(tail[k + "s"]), dtype=np.int32)[::-1].copy() for k in ("name", "cat", "pid", "tid")}
    expected = {k: _values(head[k], t) + ([int(remaps[k][c]) for c in _values(tail[k], t)] if k in remaps
                                          else _values(tail[k], t)) for k, t in keys.items()}
    # WHEN they are joined with a second thread copying the second half of every column (split_from 0)
    assert _scan.join([(head[k], tail[k], remaps.get(k)) for k in keys], 0) is None
    # THEN each of the head's columns holds its values, then the tail's (codes renumbered), each once
    assert {k: _values(head[k], t) for k, t in keys.items()} == expected
    assert len(head["ts"]) == 8 * (head["n"] + tail["n"])


def test_join_checks_every_pair_before_joining_any():
    # GIVEN halves of a split scan, and pairs of which one cannot be joined
    from profuse.trace._native import _scan

    head, tail = _raw_halves()
    size = len(head["dur"])
    short = np.zeros(max(_values(tail["name"], np.int32)), dtype=np.int32)  # the tail's top name code is outside it
    view = memoryview(head["ts"])  # a view alive over a column: it cannot move
    bad = [[(head["ts"], tail["ts"], None)],
           [(head["name"], tail["name"], short)],
           [(head["cat"], tail["cat"], np.zeros(len(tail["cats"]), dtype=np.int64))],  # int64 is no int32 table
           [(head["seq"], tail["seq"], None), (head["seq"], tail["stream"], None)],  # one column grown twice
           [(head["seq"], head["seq"], None)]]
    for pairs in bad:
        # WHEN it is asked, with a good pair first
        with pytest.raises(ValueError, match="join"):
            _scan.join([(head["dur"], tail["dur"], None), *pairs])
        # THEN nothing was joined: the good pair's column is as it was
        assert len(head["dur"]) == size
    view.release()
    assert _scan.join([(head["ts"], tail["ts"], None)]) is None
    with pytest.raises(TypeError):
        _scan.join([(head["ts"], b"not a column", None)])


def test_join_grows_a_mapped_column_by_remapping_it():
    # GIVEN a trace whose halves' int64 columns are over 4 MB each (kept in their own mappings, grown by mremap)
    n = 1_100_000
    events = b",".join(b'{"ph":"X","name":"k%d","pid":1,"tid":%d,"ts":%d,"dur":1}' % (i % 3, i % 2, i) for i in range(n))
    data = b'{"traceEvents":[' + events + b"]}"
    # WHEN it is scanned in two halves
    cols, _top = _native.scan_document(data, threads=2)
    # THEN the joined columns hold every event once, in file order, with its name and thread
    assert cols.n == n and len(cols.parts["ts"]) == 1
    assert np.array_equal(cols.take("ts"), np.arange(n, dtype=np.int64) * 1000)
    names = _lookup(cols.names)
    got = [names[c] for c in cols.take("name")[[0, 1, 2, n // 2, n // 2 + 1, n - 1]].tolist()]
    assert got == [f"k{i % 3}" for i in (0, 1, 2, n // 2, n // 2 + 1, n - 1)]
    assert _threads_of(cols)[n // 2:n // 2 + 2] == [(1, (n // 2) % 2), (1, (n // 2 + 1) % 2)]


def _lookup(table: dict[Any, int]) -> list[Any]:
    out: list[Any] = [None] * len(table)
    for v, i in table.items():
        out[i] = v
    return out


# --- mutated inputs --------------------------------------------------------------------------

SMALL = [p for p in ALL_TRACES if p.stat().st_size < 40_000]
EVENT = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2,
         "args": {"External id": 3, "correlation": 9, "stream": 7, "device": 0}}


def _with_event(**change: Any) -> bytes:
    ev = {**EVENT, **change}
    other = {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 0, "tid": 1, "ts": 1, "dur": 5,
             "args": {"External id": 3}}
    return json.dumps({"traceEvents": [other, ev]}).encode()


TYPE_CASES: list[bytes] = [
    _with_event(ts="1.5"), _with_event(ts=None), _with_event(dur=-1), _with_event(dur=None),
    _with_event(ts=1.23456), _with_event(ts=1e3), _with_event(ts=2**60), _with_event(pid=1.5),
    _with_event(pid=True), _with_event(pid="0"), _with_event(tid="7"), _with_event(name=5), _with_event(cat=None),
    _with_event(ph=None), _with_event(ph=1), _with_event(args=None), _with_event(args=[1]),
    _with_event(args={"External id": 1.5}), _with_event(args={"External id": "12"}),
    _with_event(args={"External id": "x1"}), _with_event(args={"correlation": [1]}),
    _with_event(args={"stream": "0x0"}), _with_event(args={"stream": "1.5"}), _with_event(args={"stream": True}),
    _with_event(args={"device": "auto"}), _with_event(args={"device": 2**64}), _with_event(args={"bytes": "  4"}),
    _with_event(args={"flops": 1.25}), _with_event(args={"flops": "3"}), _with_event(args={"flops": 2**70}),
    _with_event(args={"Input Dims": [[1, 2]], "Input type": ["float"]}), _with_event(args={"grid": None}),
    _with_event(args={"ts": 5}), _with_event(name="caf\u00e9 \"q\" \\ \ud83d\ude00"), _with_event(ph="i"),
    _with_event(ph="s", id=4), _with_event(ph="f", id="4", bp="e"), _with_event(ph="M", name="thread_name",
                                                                         args={"name": ["x"]}),
    _with_event(ph="M", name="process_name", args={"name": 7}), _with_event(extra={"deep": [[[[[[1]]]]]]}),
    b'{"traceEvents": [{"ph": "X", "ph": "X", "ts": 1, "dur": 1}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "args": {"correlation": 1, "correlation": 2}}]}',
    b'{"traceEvents": [{"\\u0070h": "X", "ts": 1, "dur": 1}]}',
    b'{"traceEvents": [{"ph": "\\u0058", "ts": 1, "dur": 1}, {"ph": "\\u0073", "id": 1, "ts": 1}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "args": {"k\\"ts": 2}}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}], "traceEvents": []}',
    b'{"a": {"ts": 1}, "traceEvents": [{"ph": "X", "ts": 1, "dur": 1}], "b": [1, {"c": "\\u00e9"}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 01, "dur": 1}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1},]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "name": "a\\ud800"}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "name": "\xff"}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "name": "tab\there"}]}',
    b'{"traceEvents": []}', b'[]', b'[{"ph": "X", "ts": 1, "dur": 1}]  \n', b' [{"ph": "X", "ts": 1, "dur": 1}]',
    b'{"traceEvents": [1, 2]}', b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}] , "x": NaN}',
    b'{"traceEvents": [{"ph": "X", "ts": -0.5, "dur": 0.001, "pid": -0}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": -0}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "pid": 1}, {"ph": "X", "ts": 1, "dur": 1, "pid": "1"}]}',
    # float noise in times: read as the reference reads the doubles, or (from 2^33 µs) left to it
    _with_event(ts=1.0000000001), _with_event(dur=2.0004999999999997), _with_event(ts=-3.1234565),
    _with_event(ts=1234567.0005), _with_event(ts=0.0015, dur=0.0025), _with_event(ts=8589934591.123456),
    _with_event(ts=8589934590.9999999), _with_event(ph="i", ts=77.77777777), _with_event(ph="s", id=4, ts=5.55555555),
    b'{"traceEvents": [{"ph": "X", "ts": 1.23456, "dur": 1}, {"ph": "X", "ts": 9000000000.5, "dur": 1}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1.23456, "dur": 1}, {"ph": "X", "ts": 9000000000, "dur": 1}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1.2345678901234567890123, "dur": 0.99999999999999999999}]}',
    # keys met again at the same place (the scanner's key memo): other whitespace, escapes, prefixes,
    # long keys, many members, a repeated "ts" in args, a key close to the end of the buffer
    b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}, {"ph":"X", "ts" : 2, "dur":\n 3}, {"ph":   "X", "ts": 3, "dur": 1}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}, {"\\u0070h": "X", "ts": 2, "dur": 1}]}',
    b'{"traceEvents": [{"name": "a", "ph": "X", "ts": 1, "dur": 1}, {"name2": "b", "ph": "X", "ts": 2, "dur": 1},'
    b' {"nam": "c", "ph": "X", "ts": 3, "dur": 1}, {"name": "d", "ph": "X", "ts": 4, "dur": 1}]}',
    b'{"traceEvents": [' + b', '.join(b'{"ph": "X", "ts": %d, "dur": 1, "args": {"a_key_longer_than_thirty_two_bytes_x": %d,'
                                      b' "correlation": %d}}' % (k, k, k) for k in range(4)) + b']}',
    b'{"traceEvents": [' + b', '.join(b'{' + b', '.join(b'"k%d": %d' % (j, j) for j in range(30)) +
                                      b', "ph": "X", "ts": %d, "dur": 1, "name": "n%d"}' % (k, k) for k in range(3)) + b']}',
    b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "args": {"tz": 1}}, '
    b'{"ph": "X", "ts": 1, "dur": 1, "args": {"ts": 1}}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "args": {"correlation": 4}}, '
    b'{"ph": "X", "ts": 1, "dur": 1, "args": {"correlation": 5, "correlation": 6}}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}, {"ph": "X", "ts": 2, "dur": 1}]}',
    b'[{"ph": "X", "ts": 1, "dur": 1}, {"ph": "X", "ts": 2, "dur": 1}, {"ph": "X", "ts": 3, "dur": 1}]',
]


def _mutations(seed: int, data: bytes, n: int) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for k in range(n):
        b = bytearray(data)
        how = k % 4
        if how == 0:
            b = b[: rng.randrange(len(b))]
        elif how == 1:
            for _ in range(rng.randrange(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif how == 2:
            for _ in range(rng.randrange(1, 4)):
                b[rng.randrange(len(b))] = rng.choice(b'{}[],:"0.-e \\n')
        else:
            i = rng.randrange(len(b))
            del b[i: i + rng.randrange(1, 40)]
        out.append(bytes(b))
    return out


def _cases() -> list[tuple[str, bytes]]:
    cases = [(f"type{k}", c) for k, c in enumerate(TYPE_CASES)]
    per = int(os.environ.get("PROFUSE_FUZZ_PER_TRACE", "12"))
    for k, p in enumerate(SMALL):
        raw = gzip.decompress(p.read_bytes())
        cases += [(f"{p.name}-{j}", m) for j, m in enumerate(_mutations(k, raw, per))]
    return cases


CASES = _cases()


def test_scanner_survives_many_mutations():
    """The scanner alone over a bigger corpus (what `make sanitize` runs under ASan/UBSan): no crash,
    and whatever it accepts the reference decoder accepts too, with as many complete events."""
    per = int(os.environ.get("PROFUSE_SCAN_FUZZ", "150"))
    accepted = 0
    for k, p in enumerate(SMALL):
        raw = gzip.decompress(p.read_bytes())
        for data in _mutations(1000 + k, raw, per):
            whole = [_native.scan_document(data, threads=t) for t in (1, 2)]
            try:
                doc = _decode.split_document("t.json", data)
            except TraceError:
                assert whole == [None, None]  # the reference rejects the document: so must the scanner
                continue
            for got in whole:
                if got is not None:
                    assert got[1] is None or {k: bytes(v) for k, v in got[1].items()} == \
                        {k: bytes(v) for k, v in doc.top.items()}
            cols = _native.scan_columns(doc, threads=1)
            if cols is None:
                continue
            accepted += 1
            events = [e for _, chunk, _ in _decode.iter_chunks("t.json", doc, lenient=False, skipped=_decode.Skipped())
                      for e in chunk]
            assert cols.n == sum(1 for e in events if e.ph == "X")
    assert accepted > 0  # some mutations (e.g. a changed digit) stay valid traces


@pytest.mark.parametrize("data", [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_mutated_input_same_outcome(data: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "t.json"
    path.write_bytes(data)
    fast = _outcome(path, scanner=True, monkeypatch=monkeypatch)
    ref = _outcome(path, scanner=False, monkeypatch=monkeypatch)
    assert fast == ref


@pytest.mark.parametrize("scanner", [True, False], ids=["scanner", "msgspec"])
def test_flow_and_instant_times_are_exact_ns(scanner: bool, monkeypatch: pytest.MonkeyPatch):
    """On a ns-resolution trace flow ends and instants keep the text's ns, as complete events do."""
    from decimal import Decimal

    path = next(p for p in ALL_TRACES if p.name == "v100_ns_timestamps.json.gz")
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    base = doc.get("baseTimeNanoseconds") or 0
    want_flows = sorted(base + int(Decimal(e["ts"]) * 1000) for e in doc["traceEvents"]
                        if e.get("ph") in ("s", "f", "t") and e.get("id") is not None and e.get("ts") is not None)
    want_inst = sorted(base + int(Decimal(e.get("ts") or 0) * 1000) for e in doc["traceEvents"] if e.get("ph") in ("i", "I"))
    tables = _load_tables(path, scanner=scanner, monkeypatch=monkeypatch)
    assert len(want_flows) > 1000
    assert sorted(r[3] for r in tables["flows"]) == want_flows
    assert sorted(r[2] for r in tables["instants"]) == want_inst


def _noisy(path: Path, seed: int) -> bytes:
    """A real trace whose times carry float noise below the ns, as float maths leaves it: every dur
    nudged (shortest repr: 156.7767396258617), every fractional ts nudged and written with 7 digits
    (4458676522690.6552734)."""
    import re

    rng = random.Random(seed)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    for e in doc["traceEvents"]:
        if isinstance(e.get("dur"), (int, float)) and e["dur"] > 0:
            e["dur"] = e["dur"] + rng.uniform(1e-9, 4e-4)
    text = json.dumps(doc).encode()
    return re.sub(rb'"ts": (\d+\.\d+)', lambda m: b'"ts": %.7f' % (float(m.group(1)) + rng.uniform(0, 4e-4)), text)


NOISY = [p for p in ALL_TRACES if p.name in ("h100_bert_small.json.gz", "a100_nccl_rank0_of2.json.gz",
                                               "mi300_sglang_decode_cudagraph.json.gz")]


@pytest.mark.parametrize("path", NOISY, ids=trace_id)
def test_scanner_reads_noisy_float_times_as_the_reference(path: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    # GIVEN a real trace whose every time carries float noise (1234.5670000001)
    data = _noisy(path, 7)
    assert data.count(b'"ts": ') > 1000 and b'"dur": ' in data
    # THEN the scanner accepts it, on one thread and on two, and builds the reference's tables
    assert _native.scan_document(data, threads=1) is not None
    doc = _decode.split_document("t.json", data)
    assert _native.scan_columns(doc, threads=1) is not None
    noisy = tmp_path / "noisy.json"
    noisy.write_bytes(data)
    assert _load_tables(noisy, scanner=True, monkeypatch=monkeypatch) == \
        _load_tables(noisy, scanner=False, monkeypatch=monkeypatch)


def test_scanned_flow_ids_and_categories_give_the_codes_of_the_listed_ones():
    # GIVEN flow ids as the scanner hands them over (integers as numbers, anything else as text) and categories
    # as codes into a table in order of first use, from two halves merged (integer ids in one half and text
    # ids in the other included); and category tables out of that order or with an entry no flow uses
    from profuse.trace._columns import Coded, Columns, factorize
    from profuse.trace._parallel import merge
    from profuse.trace._prepare import _flow_codes, flow_codes

    rng = random.Random(7)

    def coded(values: list[Any]) -> Coded:
        table = list(dict.fromkeys(values))
        return Coded(codes=np.array([table.index(v) for v in values], dtype=np.int32), table=table)

    def half(ints: bool) -> tuple[Columns, list[str], list[Any]]:
        n = rng.randrange(0, 30)
        cols = Columns()
        if ints:
            values = [rng.randrange(0, 10**rng.randrange(1, 12)) for _ in range(n)]
            if n:
                cols.add("flow_id_int", np.array(values, dtype=np.int64))
            texts = [str(v) for v in values]
        else:
            texts = [rng.choice(["a", "7", "01", "x y", "é", "-3", "123"]) for _ in range(n)]
            cols.flow_ids = list(texts)
        cats = [rng.choice(["ac2g", None, "fwdbwd", 3]) for _ in range(n)]
        cols.flow_cat_coded = coded(cats)
        return cols, texts, cats

    for trial in range(80):
        (first, ids1, cats1), (second, ids2, cats2) = half(trial % 4 != 0), half(trial % 5 != 0)
        merge(first, second)
        want_ids, want_cats = flow_codes(ids1 + ids2), factorize(cats1 + cats2)
        got = _flow_codes(first)
        # THEN the codes and distinct values are those of the plain lists
        assert got[0].tolist() == want_ids[0].tolist() and list(got[1]) == list(want_ids[1]), trial
        assert got[2].tolist() == want_cats[0].tolist() and got[3] == want_cats[1], trial
    for table, codes in ((["b", "a"], [1, 0, 1]), (["a", "b", "c"], [0, 0, 1])):
        cols = Columns()
        cols.flow_cat_coded = Coded(codes=np.array(codes, dtype=np.int32), table=table)
        assert not cols.flow_cat_coded.first_seen()
        got, want = _flow_codes(cols), factorize([table[i] for i in codes])
        assert got[2].tolist() == want[0].tolist() and got[3] == want[1]
