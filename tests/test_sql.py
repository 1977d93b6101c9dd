from __future__ import annotations

import csv
import gzip
import io
import json

from conftest import trace_path

from profuse.cli import main

Q = "SELECT kind, count(*) AS n FROM events GROUP BY kind ORDER BY kind"


def test_sql_formats(capsys):
    p = str(trace_path("a100_alexnet.json.gz"))
    assert main(["sql", p, Q, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    kinds = {r["kind"]: r["n"] for r in rows}
    # independent count: complete events by Kineto category, read with plain json
    with gzip.open(p) as fh:
        events = json.load(fh)["traceEvents"]
    cats = [e.get("cat") for e in events if e.get("ph") == "X"]
    assert kinds["kernel"] == cats.count("kernel") > 0
    assert kinds["cpu_op"] == cats.count("cpu_op") > 0
    assert main(["sql", p, Q, "--format", "csv"]) == 0
    parsed = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert parsed[0] == ["kind", "n"] and len(parsed) == len(rows) + 1
    assert main(["sql", p, Q]) == 0
    assert "kernel" in capsys.readouterr().out


def test_links_view_walks_kernel_to_op_and_module(capsys):
    p = str(trace_path("h100_bert_small.json.gz"))
    q = ("SELECT o.name AS op, s.name AS module FROM links l JOIN events o ON o.id = l.op "
         "JOIN scopes s ON s.id = l.module WHERE l.name LIKE '%gemm%' OR l.name LIKE '%sm90%' LIMIT 50")
    assert main(["sql", p, q, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["op"] == "aten::addmm" and r["module"] == "Linear" for r in rows)
