"""Op-table columns that do not apply to a grouping: a module class has no self CPU time, a kernel no CPU time
at all. Their records hold None (JSON null), every renderer shows "-", and ``--sort`` by such a column is
refused before any work; never a 0 that reads as measured. By op the CPU figures are still the raw JSON's
(tests/oracle.py)."""
from __future__ import annotations

import json
from itertools import takewhile

import oracle
import pytest
from conftest import trace_path

import profuse
from profuse.analysis._choices import GROUPS, NOT_APPLICABLE, SORT_KEYS
from profuse.analysis.optable import op_table
from profuse.cli import main

DEVICE_TRACES = ["h100_bert_small", "mi300_bert_small"]
CPU_COLUMNS = {"self_cpu": "self_cpu_us", "cpu_total": "cpu_total_us"}  # sort key -> the row's field


def _json_ops(capsys: pytest.CaptureFixture[str], path: str, group: str) -> list[dict]:
    assert main(["report", path, "--format", "json", "--no-advice", "--group-by", group]) == 0
    return json.loads(capsys.readouterr().out)["ops"]


@pytest.mark.parametrize("trace", DEVICE_TRACES)
def test_json_grouped_by_module_or_kernel_has_null_cpu_figures_and_by_op_the_raw_jsons(trace, capsys):
    # GIVEN a real trace with a device, its nn.Module scopes and kernels
    path = str(trace_path(f"{trace}.json.gz"))
    # WHEN reported as JSON by op, by module and by kernel
    by = {group: _json_ops(capsys, path, group) for group in ("op", "module", "kernel")}
    assert by["module"] and by["kernel"]
    # THEN by op every row's self CPU is its calls' own time in the raw JSON, less their op-table children
    expected = oracle.op_self_cpu_us(path)
    assert {r["name"] for r in by["op"]} == set(expected)
    for r in by["op"]:
        assert r["self_cpu_us"] == pytest.approx(float(expected[r["name"]]), abs=1e-3), r["name"]
        assert r["cpu_total_us"] >= r["self_cpu_us"] - 1e-6
    # AND by module no row has a self CPU figure (null, not 0.0) but each its instances' CPU total
    assert all("self_cpu_us" in r and r["self_cpu_us"] is None for r in by["module"])
    assert all(r["cpu_total_us"] > 0 for r in by["module"])
    # AND by kernel no row has any CPU figure, while its device time is there
    assert all(r["self_cpu_us"] is None and r["cpu_total_us"] is None for r in by["kernel"])
    assert all(r["self_device_us"] > 0 for r in by["kernel"])


@pytest.mark.parametrize("trace", DEVICE_TRACES)
def test_the_null_columns_are_those_the_sort_refuses(trace):
    # GIVEN a real trace with a device
    with profuse.load(trace_path(f"{trace}.json.gz")) as t:
        for group in GROUPS:
            allowed = [s for s in SORT_KEYS if s not in NOT_APPLICABLE.get(group, {})]
            rows = op_table(t, group_by=group, sort=allowed[0]).rows
            assert rows, group
            # THEN a grouping's rows are null in exactly the columns the sort refuses for it
            nulls = {key for key, field in CPU_COLUMNS.items() if all(getattr(r, field) is None for r in rows)}
            some = {key for key, field in CPU_COLUMNS.items() if any(getattr(r, field) is None for r in rows)}
            assert nulls == some == set(NOT_APPLICABLE.get(group, {})), group
            # AND every sort left orders the rows (no None compared)
            for sort in allowed:
                assert len(op_table(t, group_by=group, sort=sort).rows) == len(rows)


@pytest.mark.parametrize(("group", "sort"), [(g, s) for g, keys in NOT_APPLICABLE.items() for s in keys])
def test_sort_by_a_column_the_grouping_lacks_is_refused_before_any_work(group, sort, tmp_path, capsys):
    # GIVEN a path that does not exist: any reading of it would fail with "no such file"
    missing = tmp_path / "nope.json"
    # WHEN the report is asked sorted by a column the grouping has no figure for
    code = main(["report", str(missing), "--group-by", group, "--sort", sort])
    out = capsys.readouterr()
    # THEN it is a user error (exit 2), one line naming the sort and the grouping, before the trace is read
    assert code == 2
    assert out.out == ""
    assert out.err.count("\n") == 1
    assert f"--sort {sort} does not apply to --group-by {group}" in out.err
    assert "no such file" not in out.err


def test_sort_refused_on_a_real_trace_too(capsys):
    code = main(["report", str(trace_path("h100_bert_small.json.gz")), "--group-by", "module", "--sort", "self_cpu"])
    out = capsys.readouterr()
    assert code == 2 and out.out == "" and "does not apply to --group-by module" in out.err


def _column(text: str, label: str) -> list[str]:
    """The cells of the first table's column headed ``label`` (a header may wrap over lines): the rows after
    its ``━`` rule, up to the first line that is no row."""
    lines = text.splitlines()
    for rule in (i for i, ln in enumerate(lines) if ln.startswith("━")):
        head = rule
        while head > 0 and "┃" in lines[head - 1]:
            head -= 1
        parts = [[c.strip() for c in ln.split("┃")] for ln in lines[head:rule]]
        labels = [" ".join(p for p in col if p) for col in zip(*parts)]
        if label in labels:
            at = labels.index(label)
            return [ln.split("│")[at].strip() for ln in takewhile(lambda ln: "│" in ln, lines[rule + 1:])]
    raise AssertionError(f"no table with a column {label!r}")


@pytest.mark.parametrize(("group", "dashed", "figured"), [("module", ["Self CPU"], ["CPU total"]),
                                                          ("kernel", ["Self CPU", "CPU total"], [])])
def test_console_and_notebook_show_a_dash_where_a_column_does_not_apply(group, dashed, figured, monkeypatch,
                                                                          capsys):
    # GIVEN h100_bert_small's op table on a terminal wide enough for every column
    monkeypatch.setenv("COLUMNS", "400")
    path = str(trace_path("h100_bert_small.json.gz"))
    assert main(["report", path, "--no-advice", "--group-by", group, "--top", "0"]) == 0
    console = capsys.readouterr().out
    notebook = profuse.table(path, group_by=group, top=0).text
    for text in (console, notebook):
        # THEN a column that does not apply shows "-" on every row; one that does, a duration
        for label in dashed:
            cells = _column(text, label)
            assert cells and set(cells) == {"-"}, label
        for label in figured:
            assert all(c.endswith(("µs", "ms", " s")) for c in _column(text, label)), label
