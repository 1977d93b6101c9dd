"""``Trace.sql`` gives an Arrow table (pyarrow, from real DuckDB on real traces), converted to the
DataFrame library that is installed; ``Trace.sql_rows`` keeps (columns, tuples) for profuse's own
callers; both keep the read-only rule. What a result and a trace *show* (repr, a notebook's HTML) is
redacted and printable; what they *give* is the table's data."""
from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import trace_path
from oracle import category, complete_events

import profuse
from profuse.errors import UserError
from profuse.trace.sql_result import SHOWN_ROWS

pa = pytest.importorskip("pyarrow")

TRACE = "a100_alexnet.json.gz"
SMALL = "a100_event_sync.json.gz"
HF = "hf_" + "QwErTyUiOpAsDfGhJkLz"  # a token shape profuse redacts
ESC = "\x1b[2J"                      # clears a terminal


def test_sql_is_an_arrow_table_with_the_rows_a_plain_reading_gives() -> None:
    # GIVEN a real trace; WHEN its kernels are counted per name through Trace.sql
    with profuse.load(trace_path(TRACE)) as t:
        res = t.sql("SELECT name, count(*) AS n, sum(dur) AS ns FROM events WHERE kind = 'kernel' "
                    "GROUP BY 1 ORDER BY 1")
        rows = t.sql_rows("SELECT name, count(*) AS n, sum(dur) AS ns FROM events WHERE kind = 'kernel' "
                          "GROUP BY 1 ORDER BY 1")
    # THEN an Arrow table holds them, as a plain gzip + json count of the kernel events does
    table = res.arrow()
    assert isinstance(table, pa.Table) and table.column_names == ["name", "n", "ns"] == res.columns
    want = Counter(e["name"] for e in complete_events(trace_path(TRACE)) if category(e) == "kernel")
    assert dict(zip(table.column("name").to_pylist(), table.column("n").to_pylist())) == want
    assert len(res) == len(want) == table.num_rows
    # and the tuples of sql_rows are the same values (a HUGEINT sum: Decimal in Arrow, int in DuckDB's rows)
    assert rows[0] == res.columns and res.rows == rows[1]


def test_df_is_pandas_where_it_is_installed_else_polars(monkeypatch: pytest.MonkeyPatch) -> None:
    pd = pytest.importorskip("pandas")
    pl = pytest.importorskip("polars")
    with profuse.load(trace_path(TRACE)) as t:
        res = t.sql("SELECT kind, count(*) AS n FROM events GROUP BY 1 ORDER BY 2 DESC")
    frame = res.df()
    assert isinstance(frame, pd.DataFrame) and list(frame.columns) == ["kind", "n"]
    assert list(frame.itertuples(index=False, name=None)) == res.rows
    assert isinstance(res.pl(), pl.DataFrame) and res.pl().shape == (len(res), 2)
    assert pl.DataFrame(res).shape == (len(res), 2)  # through __arrow_c_stream__
    # pandas hidden: polars
    monkeypatch.setitem(sys.modules, "pandas", None)
    assert isinstance(res.df(), pl.DataFrame)
    # neither: one line saying what to install
    monkeypatch.setitem(sys.modules, "polars", None)
    with pytest.raises(UserError, match=r"pip install pandas, or polars"):
        res.df()


def test_without_pyarrow_sql_says_so_and_sql_rows_still_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    with profuse.load(trace_path(SMALL)) as t:
        monkeypatch.setitem(sys.modules, "pyarrow", None)
        with pytest.raises(UserError, match=r"needs pyarrow \(pip install pyarrow\)"):
            t.sql("SELECT 1")
        assert t.sql_rows("SELECT 1 AS one") == (["one"], [(1,)])


@pytest.mark.parametrize("query", ["DELETE FROM events", "CREATE TABLE x AS SELECT 1", "SELECT 1; SELECT 2",
                                   "COPY events TO '/tmp/x.csv'"])
def test_both_run_read_only_statements_only(query: str) -> None:
    with profuse.load(trace_path(SMALL)) as t:
        n = t.sql_rows("SELECT count(*) FROM events")[1]
        for run in (t.sql, t.sql_rows):
            with pytest.raises(UserError, match=r"^SQL error: "):
                run(query)
        assert t.sql_rows("SELECT count(*) FROM events")[1] == n


def _planted(tmp_path: Path) -> Path:
    doc = json.loads(gzip.decompress(trace_path(SMALL).read_bytes()))
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    ops[0]["name"] = f"aten::op token {HF}"
    ops[1]["name"] = f"aten::op{ESC}clear"
    p = tmp_path / "planted.json.gz"
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return p


def test_what_a_result_shows_is_redacted_and_printable(tmp_path: Path) -> None:
    # GIVEN a trace with a token and a terminal escape in op names
    with profuse.load(_planted(tmp_path)) as t:
        res = t.sql("SELECT DISTINCT name FROM events WHERE name LIKE 'aten::op%' ORDER BY 1")
        many = t.sql("SELECT * FROM range(45) r(i)")
    # THEN the repr and the notebook's HTML name both ops, the token redacted and the escape visible
    for shown in (repr(res), res._repr_html_()):
        assert HF not in shown and "[redacted]" in shown and ESC not in shown
    assert "aten::op\\x1b[2Jclear" in repr(res)
    assert "(2 rows)" in repr(res)
    # the data is the trace's own
    assert sorted(res.arrow().column("name").to_pylist()) == sorted([f"aten::op token {HF}", f"aten::op{ESC}clear"])
    # a long result shows its first rows and counts the rest
    text = repr(many).splitlines()
    assert len(text) == 2 + SHOWN_ROWS + 1
    assert text[-1] == f"(45 rows, the first {SHOWN_ROWS} shown; .df() or .arrow() has them all)"
    assert many._repr_html_().count("<tr>") == 1 + SHOWN_ROWS


def test_a_trace_shows_what_it_holds(tmp_path: Path) -> None:
    raw = complete_events(trace_path(TRACE))
    with profuse.load(trace_path(TRACE)) as t:
        page = t._repr_html_()
        tables = t.tables()
        line = repr(t)
    assert line == f"<Trace {TRACE}: {t.meta.events:,} events, CUDA>"
    assert {"events", "scopes", "shapes", "threads", "flows", "instants", "meta", "links"} <= set(tables)
    assert f"kernel {sum(1 for e in raw if category(e) == 'kernel'):,}" in page
    assert f"cpu_op {sum(1 for e in raw if category(e) == 'cpu_op'):,}" in page
    assert ", ".join(tables) in page and "CUDA (NVIDIA A100" in page
