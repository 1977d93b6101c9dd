"""`profuse mcp`: the Model Context Protocol server, driven by the MCP SDK's own client over stdio.

Each case starts a real `profuse mcp` process (``python -m profuse mcp``) and talks to it as an agent
would; what it answers is checked against the command line's own output for the same trace (the JSON
report, `profuse sql`), an independent path to the same records.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from conftest import trace_path

from profuse.cli import main

if TYPE_CHECKING:
    from mcp.types import CallToolResult

# the SDK is an optional extra ('profuse[mcp]', in 'dev'): the cases that talk to the server need it
needs_sdk = pytest.mark.skipif(importlib.util.find_spec("mcp") is None, reason="needs pip install 'profuse[mcp]'")
BERT = "h100_bert_small.json.gz"
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2"
KERNELS = "SELECT count(*) AS n FROM events WHERE kind = 'kernel'"


def _serve(cache: Path, errlog: Path, calls: list[tuple[str, dict[str, Any]]]) -> tuple[set[str], list[CallToolResult]]:
    """List the tools of a fresh `profuse mcp` and make ``calls`` in order on it; its stderr goes to ``errlog``."""
    import anyio
    from mcp import Client, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "profuse", "mcp"],
                                   env={"PROFUSE_CACHE_DIR": str(cache)})

    async def session() -> tuple[set[str], list[CallToolResult]]:
        with errlog.open("w") as err:
            async with Client(stdio_client(params, errlog=err), read_timeout_seconds=120) as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                return tools, [await client.call_tool(name, args) for name, args in calls]

    return anyio.run(session)


def _text(result: CallToolResult) -> str:
    assert len(result.content) == 1
    return result.content[0].text  # type: ignore[union-attr]


def _answer(result: CallToolResult) -> Any:
    assert not result.is_error, _text(result)
    return json.loads(_text(result))


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@needs_sdk
def test_tools_are_listed_and_report_gives_the_cli_reports_levers(tmp_path, _cache_dir, capsys):
    path = str(trace_path(BERT))
    tools, (report, again, op, kernel, module) = _serve(_cache_dir, tmp_path / "err.txt", [
        ("report", {"path": path}), ("report", {"path": path, "levers": 1}),
        ("op", {"path": path, "name": "aten::addmm"}), ("kernel", {"path": path, "name": "cutlass_80_wmma"}),
        ("module", {"path": path, "name": "BertLayer", "limit": 2})])
    assert {"report", "sql", "diff", "op", "kernel", "module"} <= tools
    # THEN the first lever is the one the JSON report gives, with its evidence and grade
    doc = _cli_json(capsys, "report", path, "--format", "json")
    got = _answer(report)
    lever = got["diagnosis"]["levers"][0]
    assert lever["kind"] and lever["grade"] and lever["evidence"]
    assert lever == doc["diagnosis"]["levers"][0]
    assert got["trace"] == doc["trace"] and got["totals"]["device_us"] == doc["totals"]["device_us"]
    assert got["diagnosis"]["budget"] == doc["diagnosis"]["budget"]
    assert got["health"] == doc["health"] and got["ops"] == doc["ops"][:5]
    # AND the rest are counted, not sent
    one = _answer(again)["diagnosis"]
    assert len(one["levers"]) == 1 and one["levers_left_out"] == len(doc["diagnosis"]["levers"]) - 1
    # AND the drill-downs answer from the same tables: the op's row, the kernel's launchers, the module
    addmm = next(r for r in doc["ops"] if r["name"] == "aten::addmm")
    op = _answer(op)
    assert op["op"] == addmm and sum(k["calls"] for k in op["kernels"]) == addmm["kernels"]
    kernel = _answer(kernel)
    assert "cutlass_80_wmma" in kernel["kernel"]["name"] and kernel["ops"][0]["op"] == "aten::addmm"
    module = _answer(module)
    assert module["paths"][0]["path"].endswith("/BertLayer") and len(module["children"]) == 2
    assert module["children_left_out"] >= 1


@needs_sdk
def test_sql_is_read_only_and_row_capped(tmp_path, _cache_dir, capsys):
    path = str(trace_path(BERT))
    writes = ["DROP TABLE events", "CREATE TABLE x AS SELECT 1", "INSERT INTO events (id) VALUES (1)",
              "SELECT 1; DROP TABLE events"]
    _, results = _serve(_cache_dir, tmp_path / "err.txt", [
        ("sql", {"path": path, "query": KERNELS}),
        ("sql", {"path": path, "query": "SELECT id FROM events ORDER BY id", "max_rows": 3}),
        *(("sql", {"path": path, "query": q}) for q in writes),
        ("sql", {"path": path, "query": KERNELS})])
    first, capped, *refused, after = results
    cli = _cli_json(capsys, "sql", path, KERNELS, "--format", "json")
    assert _answer(first)["rows"] == [[cli[0]["n"]]] and cli[0]["n"] > 0
    events = _cli_json(capsys, "sql", path, "SELECT count(*) AS n FROM events", "--format", "json")[0]["n"]
    capped = _answer(capped)
    assert capped["rows"] == [[0], [1], [2]] and capped["row_count"] == events
    assert capped["rows_left_out"] == events - 3
    # a write is a one-line tool error, and the trace answers as before afterwards
    for query, result in zip(writes, refused):
        assert result.is_error, query
        assert "SQL error" in _text(result) and "\n" not in _text(result)
    assert _answer(after) == _answer(first)
    assert "Traceback" not in (tmp_path / "err.txt").read_text()


@needs_sdk
def test_bad_input_is_a_one_line_tool_error(tmp_path, _cache_dir):
    bad = tmp_path / "bad.json"
    bad.write_text("{not a trace")
    missing = tmp_path / "missing.json.gz"
    calls: list[tuple[str, dict[str, Any]]] = [
        ("report", {"path": str(missing)}), ("sql", {"path": str(bad), "query": "SELECT 1"}),
        ("op", {"path": str(trace_path(BERT)), "name": "aten::no_such_op"}),
        ("diff", {"a": str(trace_path(BERT)), "b": str(missing)})]
    _, results = _serve(_cache_dir, tmp_path / "err.txt", calls)
    # THEN each is one line naming the file (after the SDK's "Error executing tool NAME: ")
    for (name, _), result, where in zip(calls, results, [missing, bad, trace_path(BERT), missing]):
        assert result.is_error
        text = _text(result)
        assert "\n" not in text and text.startswith(f"Error executing tool {name}: {where}: "), text
    assert "no such file" in _text(results[0]) and "no op named 'aten::no_such_op'" in _text(results[2])
    assert "Traceback" not in (tmp_path / "err.txt").read_text()


@needs_sdk
def test_a_token_in_an_op_name_never_reaches_the_agent(tmp_path, _cache_dir):
    # GIVEN a trace whose busiest op is named with a GitHub token in it
    doc = json.loads(gzip.decompress(trace_path(BERT).read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("name") == "aten::addmm":
            e["name"] = f"aten::addmm_{GHP}"
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    _, results = _serve(_cache_dir, tmp_path / "err.txt", [
        ("report", {"path": str(path)}),
        ("sql", {"path": str(path), "query": "SELECT DISTINCT name FROM events WHERE name LIKE 'aten::addmm%'"}),
        ("op", {"path": str(path), "name": "aten::addmm_"}), ("op", {"path": str(path), "name": "aten::addmm_[redacted]"}),
        ("kernel", {"path": str(path), "name": "cutlass_80_wmma"})])
    # THEN every answer names the op, and none holds the token
    for result in results:
        text = _text(result)
        assert not result.is_error and GHP not in text and "aten::addmm_[redacted]" in text, text
    assert _answer(results[1])["rows"] == [["aten::addmm_[redacted]"]]
    assert _answer(results[2]) == _answer(results[3])


@needs_sdk
def test_diff_gives_verdicts_speedup_and_the_biggest_changes(tmp_path, _cache_dir, capsys):
    a, b = str(trace_path("compare_base.json.gz")), str(trace_path("compare_test.json.gz"))
    _, (result,) = _serve(_cache_dir, tmp_path / "err.txt", [("diff", {"a": a, "b": b, "limit": 2})])
    got = _answer(result)
    doc = _cli_json(capsys, "diff", a, b, "--format", "json")
    assert got["speedup"] == doc["speedup"] and got["verdicts"] == doc["verdicts"]
    assert len(got["ops"]) == 2 and got["ops_left_out"] == len(doc["ops"]) - 2
    changes = sorted((abs(o["delta_us"]) for o in doc["ops"]), reverse=True)
    assert [abs(o["delta_us"]) for o in got["ops"]] == changes[:2]


def test_without_the_sdk_it_says_what_to_install():
    probe = "import sys; sys.modules['mcp'] = None\nfrom profuse.cli import main\nsys.exit(main(['mcp']))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "pip install 'profuse[mcp]'" in out.stderr


def test_help_says_how_to_register_it_within_80_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as done:
        main(["mcp", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert '{"command": "profuse", "args": ["mcp"]}' in text and "examples:" in text
    assert max(len(line) for line in text.splitlines()) <= 80
