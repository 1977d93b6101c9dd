"""The notebook renderer: a real notebook executed by nbclient on a real IPython kernel shows
``profuse.report(path)`` and ``profuse.table(path)`` as the HTML report inline, and that frame renders
offline in a real browser (Debian's Chromium through Playwright)."""
from __future__ import annotations

import gzip
import html
import json
import os
import re
import sys
from pathlib import Path

import pytest
from conftest import trace_path
from oracle import complete_events, is_device

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

TRACE = "a100_alexnet.json.gz"
DATA = re.compile(r'<script type="application/json" id="profuse-data">(.*?)</script>', re.S)
CHROMIUM = "/usr/bin/chromium"


def _embedded(page: str) -> dict:
    m = DATA.search(page)
    assert m, "no embedded payload"
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> list:
    """The notebook's cells after a real kernel ran them."""
    src = str(trace_path(TRACE))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import profuse"),
                nbformat.v4.new_code_cell(f"profuse.report({src!r})"),
                nbformat.v4.new_code_cell(f"profuse.table({src!r}, top=3)")]
    cache = tmp_path_factory.mktemp("cache")
    client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(cache)}})
    # the kernel (a child process) imports this checkout's profuse and writes its caches under tmp
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "PROFUSE_CACHE_DIR")}
    os.environ.update(PYTHONPATH=os.pathsep.join(sys.path), PROFUSE_CACHE_DIR=str(cache))
    try:
        client.execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb.cells


def _frame(cell) -> str:
    [out] = [o for o in cell.outputs if o.output_type == "execute_result"]
    frame = out.data["text/html"]
    assert frame.startswith('<iframe class="profuse-report" sandbox="allow-scripts" srcdoc="')
    assert "<script" not in frame  # the page is an escaped attribute: nothing runs in the notebook's page
    return frame


def test_report_shows_the_html_report_inline(executed) -> None:
    frame = _frame(executed[1])
    page = html.unescape(frame.split('srcdoc="', 1)[1].rsplit('"', 1)[0])
    data = _embedded(page)
    # device time and kernel count as a plain gzip+json reading gives them
    device = [e for e in complete_events(trace_path(TRACE)) if is_device(e)]
    assert data["0/overview"]["totals"]["kernels"] == len(device)
    assert data["0/overview"]["totals"]["device_us"] == pytest.approx(sum(e["dur"] for e in device), abs=0.01)
    advice = data["0/overview"]["advice"]
    assert advice is not None
    # the top 25 rows, then the rows the diagnosis's lever cards link to (payloads/diagnosis_rows.py)
    rows = [r["name"] for r in data["0/ops"]["rows"]]
    linked = {op for lv in advice["diagnosis"]["levers"] for op in lv["ops"]} - set(rows[:25])
    assert len(rows) == 25 + len(linked) and set(rows[25:]) == linked
    assert "device time" in executed[1].outputs[0].data["text/plain"]


def test_table_prints_the_table_and_shows_the_report_without_advice(executed) -> None:
    cell = executed[2]
    # rich prints to a notebook as display data (text/plain beside its own HTML), elsewhere as a stream
    printed = "".join(o.get("text", "") if o.output_type == "stream" else o.data.get("text/plain", "")
                      for o in cell.outputs if o.output_type in ("stream", "display_data"))
    assert "aten::copy_" in printed and "3 of " in printed
    data = _embedded(html.unescape(_frame(cell).split('srcdoc="', 1)[1].rsplit('"', 1)[0]))
    assert data["0/overview"]["advice"] is None and len(data["0/ops"]["rows"]) == 3


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium not installed (make test installs it)")
def test_the_inline_frame_renders_offline_in_a_browser(executed, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    out = tmp_path / "notebook_output.html"
    out.write_text(f"<!doctype html><html><body>{_frame(executed[1])}</body></html>")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run",
                                                              "--disable-background-networking"])
        try:
            page = b.new_page()
            requests: list[str] = []
            errors: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(out.as_uri())
            frame = page.frame_locator("iframe.profuse-report")
            frame.locator("body[data-ready=overview]").wait_for(timeout=15000)
            assert "a100_alexnet" in frame.locator("main").inner_text()
            assert [u for u in requests if not u.startswith(("file:", "about:", "data:"))] == []
            assert errors == []
        finally:
            b.close()


def test_repr_is_one_line_outside_a_notebook() -> None:
    import profuse

    rep = profuse.table(str(trace_path(TRACE)), top=1)
    assert repr(rep).startswith("<profuse report of ") and "\n" not in repr(rep)
    with gzip.open(trace_path(TRACE)) as fh:
        assert json.load(fh)  # the trace is untouched
