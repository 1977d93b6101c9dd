"""The events table's integer columns are stored by the compression profuse chooses (trace/_write.py's
integer_compression), which must be the one DuckDB's own analysis would have chosen, at the same size.

The oracle is DuckDB itself: the same rows copied into a table whose compression DuckDB chooses at its
checkpoint (every method tried on every value), and its choice per column read back from
``pragma_storage_info``.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import pytest
from conftest import trace_path

import profuse
from profuse.trace import build
from profuse.trace._write import compressed_bytes, integer_compression
from profuse.trace.event_columns import NONE
from profuse.trace.schema import events_ddl, events_integer_columns

TRACES = ["v100_rank1_of2_216k_events.json.gz", "h100_bert_small.json.gz", "mtia_inference.json.gz",
          "a100_nccl_rank0_of2.json.gz", "mi300_sglang_decode_cudagraph.json.gz", "v100_ns_timestamps.json.gz"]


def _copy(con: duckdb.DuckDBPyConnection, path: Path, ddl: str) -> dict[str, str]:
    """The loaded trace's events copied into a new file database as ``ddl`` makes the table; per integer column,
    the compression of most of its rows there (Constant where DuckDB found one value)."""
    con.execute(f"ATTACH '{path}' AS copy")
    con.execute(ddl.replace("CREATE TABLE events", "CREATE TABLE copy.events", 1))
    con.execute("INSERT INTO copy.events SELECT * FROM events")
    con.execute("CHECKPOINT copy")
    rows: Counter[tuple[str, str]] = Counter()
    for column, how, count in con.execute("""SELECT column_name, compression, count FROM pragma_storage_info('copy.events')
                                             WHERE segment_type <> 'VALIDITY'""").fetchall():
        rows[column, how] += count
    con.execute("DETACH copy")
    chosen: dict[str, str] = {}
    for (column, how), _n in sorted(rows.items(), key=lambda kv: -kv[1]):
        chosen.setdefault(column, how)
    return chosen


@pytest.mark.parametrize("name", TRACES)
def test_chosen_compression_is_duckdbs_own_at_its_size(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # GIVEN a real trace, loaded down the path of a trace of millions of events: its events table made with the
    # compression profuse chose per column
    monkeypatch.setattr(build, "COMPRESS_MIN_EVENTS", 10)
    with profuse.load(trace_path(name), cache=False) as t:
        ddl = t.con.execute("SELECT sql FROM duckdb_tables() WHERE table_name = 'events' AND database_name = "
                            "current_database()").fetchone()[0]
        # WHEN the same rows go into a table whose compression DuckDB chooses, and one made as the load made it
        auto = _copy(t.con, tmp_path / "auto.duckdb", events_ddl({}))
        told = _copy(t.con, tmp_path / "told.duckdb", ddl)
    # THEN every integer column was told a method, and it is the one DuckDB chose wherever DuckDB chose one of the
    # two (a column of one value DuckDB keeps as a constant either way)
    ints = events_integer_columns()
    assert ddl.count("USING COMPRESSION") == len(ints)
    for column in ints:
        if auto[column] in ("RLE", "BitPacking"):
            assert told[column] == auto[column], (name, column, auto[column], told[column])
    # and the files are the same size, to DuckDB's 256 kB block
    auto_size, told_size = ((tmp_path / f).stat().st_size for f in ("auto.duckdb", "told.duckdb"))
    assert abs(told_size - auto_size) <= 256 * 1024, (auto_size, told_size)


def test_compressed_bytes_by_hand():
    rng = np.random.default_rng(7)
    n = 100_000
    # long runs (a thread number, a scope): run-length encoded is the smaller
    runs = np.repeat(np.arange(n // 5000), 5000)
    rle, packed = compressed_bytes(runs, 8, None)
    assert rle < packed
    # distinct wide values (ids of a shuffled order): bit-packed is the smaller
    wide = rng.permutation(n).astype(np.int64) * 1000
    rle, packed = compressed_bytes(wide, 8, None)
    assert packed < rle
    # a rising sequence (start times): bit-packed by its steps, 3 bits for steps of 1 to 7, not by its range
    rising = np.cumsum(rng.integers(1, 8, n)) + 10**15
    rle, packed = compressed_bytes(rising, 8, None)
    assert packed == 32 * (2048 * 3 // 8 + 16)   # 32 windows of 2048 rows, each with its 16 B of header
    # mostly NULL with a distinct value every 100 rows (a correlation id on a host-heavy trace): NULLs extend a
    # run, so run-length encoded is the smaller, though every value differs
    sparse = np.full(n, NONE, dtype=np.int64)
    sparse[::100] = np.arange(0, n, 100) * 7
    rle, packed = compressed_bytes(sparse, 8, NONE)
    assert rle < packed
    # all NULL: one run per window, nothing to pack
    assert compressed_bytes(np.full(n, NONE, dtype=np.int64), 8, NONE)[0] > 0


def test_integer_compression_names_every_integer_column():
    # GIVEN columns of the events table's integer columns: a thread in long runs, everything else distinct
    n = 50_000
    arrays = {c: np.arange(n, dtype=np.int64) * 977 % 100_003 for c in events_integer_columns()}
    arrays["thread"] = np.repeat(np.arange(5), n // 5)
    chosen = integer_compression(arrays)
    assert set(chosen) == set(events_integer_columns())
    assert chosen["thread"] == "rle"
    assert chosen["id"] == "bitpacking"


def test_a_small_trace_leaves_the_choice_to_duckdb():
    # GIVEN a trace of fewer events than a load compresses: its tables are compressed behind the load, as they
    # are copied to the cache, so no column is told its compression (the sample would cost the load, not save it)
    with profuse.load(trace_path("h100_bert_small.json.gz"), cache=False) as t:
        ddl = t.con.execute("SELECT sql FROM duckdb_tables() WHERE table_name = 'events' AND database_name = "
                            "current_database()").fetchone()[0]
    assert "USING COMPRESSION" not in ddl
