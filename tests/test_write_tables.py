"""The table writers on a trace with more distinct names than fit a lookup list (LOOKUP_MAX).

String columns go to DuckDB as codes looked up in a short list, or as the strings themselves when
the list is long; both must give the names the file holds (read back with plain json).
"""
from __future__ import annotations

import json
from pathlib import Path

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
