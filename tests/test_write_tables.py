"""The table writers on a trace with more distinct names than fit a lookup list (LOOKUP_MAX).

String columns go to DuckDB as codes looked up in a short list, or as the strings themselves when
the list is long; both must give the names the file holds (read back with plain json).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import profuse
from profuse.trace._write import LOOKUP_MAX


def _trace(path: Path, names: int) -> dict:
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op_{i}", "pid": 1, "tid": i % 3, "ts": 10 * i, "dur": 5}
              for i in range(names)]
    events += [{"ph": "i", "cat": "mark", "name": f"mark_{i}", "pid": 1, "tid": 0, "ts": 10 * i + 1, "s": "t"}
               for i in range(names)]
    doc = {"traceEvents": events}
    path.write_text(json.dumps(doc))
    return doc


def test_many_distinct_names_reach_the_tables(tmp_path: Path):
    # GIVEN a trace with more distinct names than a lookup list holds
    doc = _trace(tmp_path / "t.json", LOOKUP_MAX + 50)
    with profuse.load(tmp_path / "t.json", cache=False) as t:
        got = t.con.execute("SELECT name, cat, pid, tid FROM events ORDER BY id").fetchall()
        instants = t.con.execute("SELECT name, cat, pid, tid FROM instants ORDER BY ts").fetchall()
    # THEN every event carries its own name, category and thread, as json reads them
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert got == [(e["name"], e["cat"], str(e["pid"]), str(e["tid"])) for e in xs]
    marks = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    assert instants == [(e["name"], e["cat"], str(e["pid"]), str(e["tid"])) for e in marks]


def test_thread_keys_are_numbered_as_np_unique_numbers_them():
    # GIVEN thread keys (pid code * THREAD_SHIFT + tid code) over small and large pid x tid grids
    from profuse.trace._columns import THREAD_SHIFT
    from profuse.trace._prepare import _distinct

    rng = np.random.default_rng(3)
    for pids, tids in ((1, 1), (3, 7), (50, 2000), (3000, 3000)):
        keys = rng.integers(0, pids, 5000) * THREAD_SHIFT + rng.integers(0, tids, 5000)
        parts = [keys[:3000], keys[3000:3000], keys[3000:]]  # as the events, flows and instants come
        uniq, inverses = _distinct(parts, pids, tids)
        want_uniq, want_inverse = np.unique(keys, return_inverse=True)
        assert uniq.tolist() == want_uniq.tolist()
        assert [len(i) for i in inverses] == [3000, 0, 2000]
        assert np.concatenate(inverses).tolist() == want_inverse.reshape(-1).tolist()
        assert keys[:5].tolist() == parts[0][:5].tolist()  # the keys themselves are left as they were
    empty = _distinct([np.empty(0, dtype=np.int64)] * 3, 0, 0)
    assert len(empty[0]) == 0 and [len(i) for i in empty[1]] == [0, 0, 0]


def test_big_trace_path_writes_the_same_tables(monkeypatch, tmp_path):
    # GIVEN a shared trace, loaded as a small one and then down the path of a trace of millions of events
    # without a cache and with no temporary folder to build in (tables attached compressed in memory,
    # events inserted in checkpointed batches)
    import tempfile

    from conftest import ALL_TRACES

    from profuse.trace import _write, build

    path = next(p for p in ALL_TRACES if p.name.startswith("h100_bert"))

    def tables() -> list:
        with profuse.load(path, cache=False) as t:
            return [t.con.execute(f"SELECT * FROM {tb} ORDER BY ALL").fetchall()
                    for tb in ("events", "shapes", "scopes", "threads", "instants", "flows", "meta")]

    small = tables()
    monkeypatch.setattr(build, "COMPRESS_MIN_EVENTS", 10)
    monkeypatch.setattr(_write, "INSERT_BATCH", 1000)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    assert tables() == small


def _tables(t) -> dict[str, list]:
    names = [r[0] for r in t.con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'trace'"
                                         " ORDER BY 1").fetchall()]
    return {n: t.con.execute(f"SELECT * FROM {n} ORDER BY ALL").fetchall() for n in names}


def test_the_writer_thread_writes_the_tables_the_serial_path_writes(monkeypatch):
    # GIVEN shared traces with shapes, flows, instants and memory events (tables written on the writer
    # thread while this one correlates and writes the rest)
    import pytest
    from conftest import trace_path

    for name, memory in (("h100_bert_small.json.gz", 236), ("a100_nccl_rank0_of2.json.gz", 0)):
        path = trace_path(name)
        with profuse.load(path, cache=False) as t:
            threaded = _tables(t)
            events_in_file_order = t.con.execute("SELECT id FROM events").fetchnumpy()["id"]
        with pytest.MonkeyPatch.context() as m:
            m.setenv("PROFUSE_SERIAL_WRITE", "1")
            with profuse.load(path, cache=False) as t:
                serial = _tables(t)
        # THEN every table holds the same rows either way, and the events in file order
        assert set(threaded) == set(serial)
        assert all(len(serial[k]) > 0 for k in ("events", "shapes", "flows", "instants", "scopes"))
        for table, rows in serial.items():
            assert threaded[table] == rows, (name, table)
        assert len(serial["memory"]) == memory
        assert (events_in_file_order == np.arange(len(serial["events"]))).all()


def test_a_load_leaves_numpys_huge_page_setting_as_it_found_it(tmp_path: Path):
    # GIVEN numpy's switch for madvise(MADV_HUGEPAGE) on big arrays, on and then off
    import pytest
    from conftest import trace_path
    from numpy._core import multiarray

    toggle = multiarray._set_madvise_hugepage
    for setting in (True, False):
        before = toggle(setting)
        try:
            # WHEN a trace loads, and a load fails on bad input
            with profuse.load(trace_path("h100_bert_small.json.gz"), cache=False) as t:
                assert t.meta["events"] > 0
            (tmp_path / "bad.json").write_text('{"traceEvents": [{"ph": "X", "ts": "soon"}]')
            with pytest.raises(profuse.TraceError):
                profuse.load(tmp_path / "bad.json", cache=False)
            # THEN the switch is as it was before each
            assert toggle(before) is setting
        finally:
            toggle(before)


def test_loads_on_several_threads_leave_gc_and_huge_pages_as_they_found_them():
    # GIVEN the cycle collector and numpy's huge-page switch on, and loads running on four threads at once
    import gc
    import threading

    from conftest import trace_path
    from numpy._core import multiarray

    toggle = multiarray._set_madvise_hugepage
    before = toggle(True)
    errors: list[BaseException] = []

    def load() -> None:
        try:
            for _ in range(3):
                with profuse.load(trace_path("h100_bert_small.json.gz"), cache=False) as t:
                    assert t.meta["events"] > 0
        except BaseException as e:
            errors.append(e)

    try:
        assert gc.isenabled()
        threads = [threading.Thread(target=load) for _ in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        # THEN every load succeeded and, once the last ended, both settings are back on
        assert not errors
        assert gc.isenabled() and toggle(True) is True
    finally:
        toggle(before)


def test_a_build_asks_numpy_for_no_huge_pages_while_it_runs(monkeypatch):
    # GIVEN numpy's switch for madvise(MADV_HUGEPAGE) on, and a spy on the build's table writing
    from conftest import trace_path
    from numpy._core import multiarray

    from profuse.trace import build

    toggle = multiarray._set_madvise_hugepage
    seen: list[bool] = []
    write_tables = build._write_tables

    def spy(*args, **kwargs):
        now = toggle(False)
        toggle(now)
        seen.append(now)
        return write_tables(*args, **kwargs)

    monkeypatch.setattr(build, "_write_tables", spy)
    before = toggle(True)
    try:
        # WHEN a trace loads
        with profuse.load(trace_path("h100_bert_small.json.gz"), cache=False) as t:
            assert t.meta["events"] > 0
        # THEN the switch was off while its tables were written, and is on again after
        assert seen == [False]
        assert toggle(True) is True
    finally:
        toggle(before)


def test_the_scanners_own_mappings_ask_for_no_huge_pages():
    # GIVEN a trace of 600,000 events: its per-event columns outgrow 4 MB, so the scanner keeps them
    # in mappings of their own
    import pytest

    from profuse.trace import _native

    if not _native.available() or not Path("/proc/self/smaps").exists():
        pytest.skip("needs the compiled scanner and Linux's /proc/self/smaps")
    events = ",".join(f'{{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":{i},"dur":1}}'
                      for i in range(600_000))
    # WHEN it is scanned
    scanned = _native.scan_document(('{"traceEvents":[' + events + "]}").encode(), threads=1)
    assert scanned is not None
    ts = scanned[0].parts["ts"][0]
    assert len(ts) == 600_000 and ts.nbytes >= 4 << 20
    # THEN the mapping that holds the ts column is not advised to use 2 MB pages (VmFlags "hg")
    address = ts.__array_interface__["data"][0]
    flags, inside = None, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and line.startswith("VmFlags:"):
            flags = line.split()[1:]
            break
    assert flags is not None, "the ts column's mapping was not found"
    assert "hg" not in flags
