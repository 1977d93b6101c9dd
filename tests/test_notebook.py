"""The notebook renderer: a real notebook executed by nbclient on a real IPython kernel shows
``profuse.report(path)`` as the HTML report inline (and that frame renders offline in a real browser,
Debian's Chromium through Playwright) and ``profuse.table(path)`` as the op table, once; outside a
notebook the table's repr is the table ``profuse report`` prints, in the Python API's words; an
``AdviseResult`` shows a summary, and a long call's progress goes to stderr."""
from __future__ import annotations

import gzip
import html
import json
import os
import re
from pathlib import Path

import pytest
from conftest import trace_path
from nbkernel import execute, result
from oracle import complete_events, is_device, launch_of, launches, op_of

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
    tmp = tmp_path_factory.mktemp("nb")
    # the kernel (a child process) imports this checkout's profuse and writes its caches under tmp
    return execute(["import profuse", f"profuse.report({src!r})", f"profuse.table({src!r}, top=3)"], tmp, tmp,
                   timeout=240)


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
    assert "CUDA time" in executed[1].outputs[0].data["text/plain"]


def _top_ops_by_device_time(n: int) -> list[str]:
    """The ops whose launches' device events took the most time (each device event to the innermost op
    around its launch call)."""
    events = complete_events(trace_path(TRACE))
    by_corr = launches(events)
    per_op: dict[str, float] = {}
    for e in events:
        launch = launch_of(e, by_corr) if is_device(e) else None
        op = op_of(events, launch) if launch is not None else None
        if op is not None:
            per_op[op["name"]] = per_op.get(op["name"], 0.0) + e["dur"]
    return sorted(per_op, key=lambda k: -per_op[k])[:n]


def test_table_shows_the_table_once(executed) -> None:
    cell = executed[2]
    # one output, the table (it used to print the table, then show a second, advice-less HTML report)
    assert [o.output_type for o in cell.outputs] == ["execute_result"]
    data = result(cell)
    text, page = data["text/plain"], data["text/html"]
    assert page.startswith('<pre class="profuse-table"') and "<iframe" not in page and "<script" not in page
    assert html.unescape(re.sub(r"<[^>]+>", "", page)).strip() == text.strip()
    # the three ops with the most self device time, in order, by a plain reading of the trace
    rows = [ln.split("│")[0].strip() for ln in text.splitlines() if ln.count("│") >= 5]
    assert rows == _top_ops_by_device_time(3)
    assert re.search(r"^3 of \d+ rows; top=N shows more, top=0 all", text, re.M)
    assert not re.search(r"--[a-z]", text), "a command-line flag in the Python API's table"


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


def test_the_report_s_repr_is_one_line_outside_a_notebook() -> None:
    import profuse

    rep = profuse.report(str(trace_path(TRACE)), top=1)
    assert repr(rep).startswith("<profuse report of ") and "\n" not in repr(rep)
    with gzip.open(trace_path(TRACE)) as fh:
        assert json.load(fh)  # the trace is untouched


def test_the_table_s_repr_is_the_cli_s_table_in_the_python_api_s_words(capsys, monkeypatch) -> None:
    import profuse
    from profuse.cli import main

    path = str(trace_path(TRACE))
    # cached first, so both say "from cache" (a build faster than the 0.05 s floor writes no cache: this
    # small trace's can be, once the modules are imported, and then only the second load would say so)
    monkeypatch.setenv("PROFUSE_CACHE_MIN_SECONDS", "0")
    profuse.load(path).close()
    assert main(["report", path, "--no-advice", "--top", "3"]) == 0
    cli = capsys.readouterr().out.splitlines()
    # the CLI's report goes on with the Python call tree, which the table leaves to profuse.report
    cli = cli[:next(i for i, ln in enumerate(cli) if re.match(r"3 of \d+ rows", ln)) + 1]
    table = repr(profuse.table(path, top=3)).splitlines()
    # the same lines but the last, which says how to see more rows: flags there, arguments here
    assert table[:-1] == cli[:-1] and len(table) > 10
    assert cli[-1].startswith("3 of ") and "--top N" in cli[-1]
    assert table[-1].startswith("3 of ") and "top=0" in table[-1] and "--" not in table[-1]
    assert str(profuse.table(path, top=3)) == "\n".join(table)
    # every row: no "N of M" line
    assert not re.search(r"^\d+ of \d+ rows", repr(profuse.table(path, top=0)), re.M)


def test_progress_lines_go_to_stderr_outside_a_notebook(capsys) -> None:
    from profuse.fixes.progress import Progress

    say = Progress("profuse.advise")
    say("profiling the model")
    say("done: 0 fix(es) tried")
    Progress("quiet", enabled=False)("nothing")
    out = capsys.readouterr()
    lines = out.err.splitlines()
    assert out.out == "" and len(lines) == 2
    assert re.fullmatch(r"profuse\.advise \[\s*\d+\.\d s\] profiling the model", lines[0])
    assert lines[1].endswith("] done: 0 fix(es) tried")


def _advise_result(scope: str):
    from profuse.analysis.advice.records import Candidate
    from profuse.fixes.verify import VERIFIED, AdviseResult, FixResult

    cands = [Candidate(pattern="SiLU (x * sigmoid(x))", scope=scope, instances=4, kernels_per_instance=2.0,
                       recommendation="fuse", confidence="high", ops=["aten::sigmoid", "aten::mul"],
                       intermediates=[], intermediate_bytes=0, bytes_now=0, bytes_fused=0, shape="[8, 64]",
                       device_us=100.0 + i, predicted_saving_us=50.0, saving_model="memory traffic") for i in range(7)]
    fix = FixResult(pattern=cands[0].pattern, scope=scope, fix="swap in torch.nn.functional.silu",
                    modules_changed=1, predicted_saving_us=5.0, measured_saving_us=12.5, scope_before_us=40.0,
                    scope_after_us=27.5, step_saving_us=11.0, max_abs_err=1.2e-7, max_rel_err=0.0, ok=True,
                    scope_before_spread_us=1.5, scope_after_spread_us=2.0, samples=30, verdict=VERIFIED)
    return AdviseResult(device_kind="CPU", before_us=1234.5, candidates=cands, fixes=[fix], bundle="/tmp/b",
                        best=object(), notes=["a note"])


def test_an_advise_result_shows_a_summary_not_its_fields() -> None:
    scope = "nn.Module: <b>Act</b> hf_abcdefghijklmnopqrstuvwxyz0123"
    from profuse.redact import redact_text

    assert redact_text(scope) != scope  # the planted secret is one profuse redacts
    res = _advise_result(scope)
    text = repr(res)
    lines = text.splitlines()
    assert lines[0] == ("profuse.advise on CPU: 1,234.5 µs device time per step before; 7 candidate(s), "
                        "1 fix(es) tried, 1 verified faster")
    assert len(lines) < 25 and "Candidate(" not in text and "FixResult(" not in text
    [fix] = [ln for ln in lines if ln.startswith("swap in torch.nn.functional.silu")]
    assert fix.split()[-5:] == ["faster", "12.50", "2.00", "5.00", "1.2e-07"]
    assert "... 2 more candidate(s) in .candidates" in lines and "note: a note" in lines
    assert any(ln.startswith(".best: a copy of the model with the 1 verified fix(es)") for ln in lines)
    page = res._repr_html_()
    assert "&lt;b&gt;Act&lt;/b&gt;" in page and "<b>Act</b>" not in page
    assert page.count("<tr>") == 1 + 1 + 1 + 5  # header and one fix; header and five candidates
    for shown in (text, page):
        assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in shown and "[redacted]" in shown
