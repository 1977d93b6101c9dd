"""`profuse report` on every shared trace, and the JSON contract."""
from __future__ import annotations

import json

import pytest
from conftest import ALL_TRACES, trace_id, trace_path

from profuse.cli import main

TRACE_KEYS = {"path", "device_kind", "device_name", "events", "span_us"}
TOTAL_KEYS = {"device_us", "kernels", "kernels_linked", "unlinked"}
OP_KEYS = {"name", "calls", "self_cpu_us", "cpu_total_us", "self_device_us", "device_total_us", "kernels"}


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_report_json_contract(path, capsys):
    assert main(["report", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "profuse.report/4"
    assert doc["trace"].keys() >= TRACE_KEYS
    assert doc["totals"].keys() >= TOTAL_KEYS
    assert doc["trace"]["events"] > 0
    assert doc["trace"]["device_kind"] in {"CUDA", "ROCm", "MTIA", "CPU"}
    totals = doc["totals"]
    assert 0 <= totals["kernels_linked"] <= totals["kernels"]
    # every device event is either linked or counted under a reason: nothing silently dropped
    assert totals["kernels_linked"] + sum(totals["unlinked"].values()) == totals["kernels"]
    assert doc["ops"], "every trace has ops"
    names = [o["name"] for o in doc["ops"]]
    assert len(names) == len(set(names)), "ops lists each name once"
    for op in doc["ops"]:
        assert op.keys() >= OP_KEYS
        assert op["calls"] >= 1
        assert op["cpu_total_us"] >= op["self_cpu_us"] - 1e-6
        assert op["device_total_us"] >= op["self_device_us"] - 1e-6
    if doc["trace"]["device_kind"] != "CPU":
        linked_device = sum(o["self_device_us"] for o in doc["ops"])
        assert linked_device <= totals["device_us"] + 1e-3


@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_report_table_renders(path, capsys):
    assert main(["report", str(path), "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert "Calls" in out and "Self CPU" in out


@pytest.mark.parametrize("name,kind", [
    ("a100_alexnet.json.gz", "CUDA"), ("mi250_rocm_toy_train.json.gz", "ROCm"),
    ("mtia_inference.json.gz", "MTIA"), ("cpu_only_gloo_rank34.json.gz", "CPU"),
    ("legacy_capitalized_categories.json.gz", "CUDA"), ("mi210_gpu_only.json.gz", "ROCm"),
])
def test_device_kind_names_the_column(name, kind, capsys):
    from conftest import trace_path
    assert main(["report", str(trace_path(name)), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert f"Self {kind}" in out and f"{kind} total" in out
    if kind == "CPU":
        assert "CPU-only trace" in out


def test_every_group_by(capsys):
    from conftest import trace_path
    p = str(trace_path("h100_bert_small.json.gz"))
    for g in ("op", "shape", "module", "kernel"):
        assert main(["report", p, "--group-by", g, "--format", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["group_by"] == g and doc["ops"]
    # modules: BERT's Linear layers carry the addmm kernels
    main(["report", p, "--group-by", "module", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    mods = {o["name"]: o for o in doc["ops"]}
    from oracle import device_events_by_module_class

    # independent count: kernel -> launch (correlation) -> innermost op -> innermost nn.Module, plain json
    assert mods["Linear"]["kernels"] == device_events_by_module_class(p)["Linear"] > 0
    # the outermost module holds every kernel; its children hold less
    assert mods["BertLMHeadModel"]["device_total_us"] == pytest.approx(doc["totals"]["device_us"])
    assert mods["BertModel"]["device_total_us"] < mods["BertLMHeadModel"]["device_total_us"]
    assert mods["BertModel"]["device_total_us"] >= mods["BertEncoder"]["device_total_us"]


def test_group_by_module_without_modules_says_why(capsys):
    # a100_alexnet has no nn.Module scopes (checked independently: no python_function 'nn.Module: ' event)
    import gzip
    import json as _json

    doc = _json.loads(gzip.decompress(trace_path("a100_alexnet.json.gz").read_bytes()))
    assert not any(str(e.get("name", "")).startswith("nn.Module: ") for e in doc["traceEvents"])
    assert main(["report", str(trace_path("a100_alexnet.json.gz")), "--group-by", "module", "--no-advice"]) == 0
    assert "No nn.Module scopes in this trace" in capsys.readouterr().out


def test_negative_top_is_a_usage_error(capsys):
    from conftest import trace_path
    p = str(trace_path("a100_alexnet.json.gz"))
    for argv in (["report", p, "--top", "-1"], ["diff", p, p, "--top", "-3"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        assert "must be a whole number, 0 or more" in capsys.readouterr().err


def test_diff_rows_come_in_the_same_order_every_run():
    # rows tied on |delta| (here every row: a trace against itself) are ordered by name, not by set order
    import subprocess
    import sys

    from conftest import trace_path
    a, b = str(trace_path("compare_base.json.gz")), str(trace_path("compare_test.json.gz"))
    outs = {subprocess.run([sys.executable, "-m", "profuse", "diff", a, b, "--format", "json"], capture_output=True,
                           text=True, check=True, env={**__import__("os").environ, "PYTHONHASHSEED": str(seed)}).stdout
            for seed in (1, 2, 3)}
    assert len(outs) == 1
    doc = json.loads(outs.pop())
    for rows in (doc["ops"], doc["kernels"]):
        keys = [(-abs(r["b_us"] - r["a_us"]), r["name"]) for r in rows]
        assert keys == sorted(keys)
