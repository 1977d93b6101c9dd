"""Every renderer of one trace's report shows the same figures: the JSON document, the self-contained
HTML page, the notebook's page, the explorer's API and the console all send the same records (the
diagnosis, the step table, the totals), read here from each output as a user gets it."""
from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from conftest import FIXTURES, TRACES
from explorer_util import running

import profuse
from profuse.cli import main
from profuse.report.console_diagnosis import SHOWN_LEVERS

CASES = ["h200/bert_graph", "h200/bert_eager", "h200/cpu_model_on_gpu_host", "mi300_sglang_decode_cudagraph.json.gz",
         "v100_ns_timestamps.json.gz", "compare_base.json.gz"]
DATA_OPEN = '<script type="application/json" id="profuse-data">'


def _path(name: str) -> Path:
    return FIXTURES / name / "trace.json.gz" if name.startswith("h200/") else TRACES / name


def _embedded(page: str) -> dict:
    start = page.index(DATA_OPEN) + len(DATA_OPEN)
    return json.loads(page[start:page.index("</script>", start)])


def _fmt_us(us: float) -> str:
    """report/_text.py fmt_us, written out again."""
    return f"{us / 1e6:.2f} s" if us >= 1e6 else f"{us / 1e3:.2f} ms" if us >= 1e3 else f"{us:.1f} µs"


@pytest.mark.parametrize("name", CASES)
def test_json_html_notebook_explorer_and_console_show_the_same_figures(name: str, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = _path(name)
    assert main(["report", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["report", str(path), "--format", "html", "-o", str(tmp_path / "r.html")]) == 0
    capsys.readouterr()
    page = _embedded((tmp_path / "r.html").read_text())
    notebook = _embedded(profuse.report(str(path)).html)
    with profuse.load(path) as t, running([t]) as url, urllib.request.urlopen(url.at("/api/0/overview")) as r:
        api = json.loads(r.read())
    assert main(["report", str(path), "--top", "0"]) == 0
    console = capsys.readouterr().out
    d = doc["diagnosis"]
    # THEN the diagnosis is one record in every output
    for where, overview in (("html", page["0/overview"]), ("notebook", notebook["0/overview"]), ("explorer", api)):
        assert overview["advice"]["diagnosis"] == d, where   # grades, caps and evidence included
        assert overview["totals"] == doc["totals"], where
        assert overview["health"] == doc["health"], where
    # the console prints the span and every lever's gain as the record has them
    assert re.search(rf"\({re.escape(_fmt_us(d['span_us']))}[,)]", console), d["span_us"]
    for lever in d["levers"][:SHOWN_LEVERS]:
        assert f"save up to {_fmt_us(lever['gain_us'])}" in console, lever["kind"]
        assert f"[{lever['confidence']}, {lever['grade']}]" in console, lever["kind"]
    assert f"Trace health: {doc['health']['device_activities']:,} device activities" in console
    if len(d["levers"]) > SHOWN_LEVERS:   # the rest are counted, never dropped unsaid
        assert f"{len(d['levers']) - SHOWN_LEVERS} more lever(s)" in console
    # the step table (JSON) and the diagnosis list the same steps
    if d["scope"] == "steps":
        assert [s["name"] for s in doc["steps"]] == [s["name"] for s in d["steps"]]


def test_peaks_have_one_json_shape_in_the_report_and_the_diff(capsys: pytest.CaptureFixture[str]) -> None:
    # the report's advice and the diff's sides send the one Peaks record: the same keys and figures
    path = TRACES / "h100_bert_small.json.gz"
    assert main(["report", str(path), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)["peaks"]
    assert main(["diff", str(path), str(path), "--format", "json"]) == 0
    side = json.loads(capsys.readouterr().out)["sides"]["a"]["peaks"]
    assert side == report and {"tflops_tf32", "tflops_fp8"} <= set(side)
