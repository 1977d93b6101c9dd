"""The diagnosis shows the same numbers everywhere: console, JSON, the HTML report and the
explorer's overview (real Chromium), and a lever card's op link opens that op's row."""
from __future__ import annotations

import json
import re

import pytest
import test_explorer_browser as explorer_browser
from conftest import trace_path
from explorer_util import running
from test_explorer_browser import wait_ready

import profuse
from profuse.cli import main
from profuse.units import fmt_us

browser, page, pytestmark = explorer_browser.browser, explorer_browser.page, explorer_browser.pytestmark
TRACE = "v100_rank1_of2_216k_events.json.gz"   # five steps, several levers, device-bound and idle leaves


def json_diagnosis(name: str) -> dict:
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["report", str(trace_path(name)), "--format", "json"]) == 0
    return json.loads(buf.getvalue())["diagnosis"]


@pytest.fixture(scope="module")
def doc():
    return json_diagnosis(TRACE)


def _shown(page) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """The budget segments (first bar) and the lever cards, as the page holds them."""
    segs = page.eval_on_selector("#diagnosis > .stack-row", "row => [...row.querySelectorAll('.seg')].map("
                                 "n => [n.dataset.key, parseFloat(n.dataset.us)])")
    cards = page.eval_on_selector_all("#levers .lever", "ns => ns.map(n => [n.dataset.kind, parseFloat(n.dataset.gain)])")
    return dict(segs), [tuple(c) for c in cards]


def _expected(doc) -> tuple[dict[str, float], list[tuple[str, float]]]:
    first = doc["groups"][0]["budget"] if doc["groups"] else doc["budget"]
    return {lf["key"]: lf["us"] for lf in first if lf["pct"] > 0}, [(lv["kind"], lv["gain_us"]) for lv in doc["levers"]]


def test_console_prints_the_json_numbers(doc, capsys):
    assert main(["report", str(trace_path(TRACE))]) == 0
    out = capsys.readouterr().out
    # THEN the report opens with the budget (under the two header lines: the trace, its device and span),
    # and every shown lever's gain is the JSON's
    assert out.splitlines()[2].startswith("Where the time went")
    g = doc["groups"][0]
    assert f"{g['kind']} x{g['count']} ({fmt_us(g['span_us'])})" in out
    busy = round(sum(lf["pct"] for lf in g["budget"] if lf["key"].startswith("busy/")), 2)
    assert f"busy {busy:.0f}%" in out
    for lv in doc["levers"][:5]:
        assert f"{lv['kind']} " in out and f"save up to {fmt_us(lv['gain_us'])}" in out
    assert f"pulling all: {fmt_us(doc['combined_gain_us'])}" in out
    assert ("of it outside the trace" in out) == (doc["combined_outside_us"] > 0)


@pytest.mark.parametrize("name", ["a100_alexnet.json.gz", "mi300_normalization_layers.json.gz"])
def test_lever_evidence_writes_durations_as_the_renderers_do(name):
    # GIVEN a trace whose launching thread spent over a second outside launch overhead while the device idled
    d = json_diagnosis(name)
    texts = [lv["evidence"] for lv in d["levers"]]
    # THEN the evidence writes each duration as fmt_us does ("43.29 s", not "43287.75 ms")
    assert not [t for t in texts if re.search(r"\b\d{4,}(\.\d+)? (ms|µs)\b", t)]
    assert any(re.search(r"\b\d+\.\d\d s\b", t) for t in texts)


@pytest.mark.parametrize("name", ["compare_test.json.gz", "compare_base.json.gz"])
def test_notes_and_health_write_durations_as_the_renderers_do(name):
    # GIVEN traces whose launches all waited over 50 ms (mi250's 9.29 ms first step, once a warm-up note here,
    # holds all its device work: no warm-up since steps.warmup keeps it)
    doc = json.loads(_json_report(name))
    texts = [*doc["diagnosis"]["notes"], *(f["text"] for f in doc["health"]["findings"])]
    # THEN the notes and health findings write each duration as fmt_us does ("9.29 ms", not "9288.3 µs")
    assert not [t for t in texts if re.search(r"\b\d{4,}(\.\d+)? (ms|µs)\b", t)]
    assert any(re.search(r"\b\d+\.\d\d ms\b", t) for t in texts)


def test_the_levers_heading_says_the_part_outside_the_trace(capsys):
    # GIVEN the sglang decode, whose 463 ms wait before any recorded work is a lever graded outside the trace
    assert main(["report", str(trace_path("mi300_sglang_decode_cudagraph.json.gz")), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)["diagnosis"]
    wait = next(lv for lv in d["levers"] if lv["kind"] == "unrecorded_wait")
    assert d["combined_outside_us"] == pytest.approx(wait["gain_us"], abs=1e-3) and wait["gain_us"] > 400_000
    # THEN the console's heading says it apart from the combined gain
    assert main(["report", str(trace_path("mi300_sglang_decode_cudagraph.json.gz"))]) == 0
    out = capsys.readouterr().out
    assert (f"pulling all: {fmt_us(d['combined_gain_us'])} of {fmt_us(d['span_us'])}, no time counted twice; "
            f"{fmt_us(d['combined_outside_us'])} of it outside the trace)") in out
    # AND each lever's share is of the device window (the span less the wait: 10.6 ms, not 474 ms), as the 1% fold
    # is, but the wait's own, which lies outside that window and is a share of the span
    leaves = {lf["key"]: lf["us"] for lf in d["budget"]}
    window = d["span_us"] - leaves["unrecorded/wait"]
    assert d["window_us"] == pytest.approx(window, abs=2e-3) and d["window_us"] < d["span_us"] / 40
    for lv in d["levers"]:
        base = d["span_us"] if "unrecorded/wait" in lv["draws"] else window
        assert lv["share_pct"] == pytest.approx(100 * lv["gain_us"] / base, abs=0.01)
        assert lv["share_pct"] >= 1.0   # ranked, not folded: never shown under the fold's 1%
        of = "the span" if "unrecorded/wait" in lv["draws"] else "the device window"
        assert lv["share_of"] == of
        assert f"save up to {fmt_us(lv['gain_us'])} ({lv['share_pct']:.0f}% of {of})" in out
    assert d["levers"][0]["share_pct"] > 10 and wait["share_pct"] > 90
    assert f"under 1% of the device window ({fmt_us(d['window_us'])})" in out


@pytest.mark.parametrize("name", ["cpu_only_gloo_rank34.json.gz", "a100_cupti_counters.json.gz",
                                  "mi300_sglang_decode_cudagraph.json.gz"])
def test_html_report_shows_the_json_numbers_cpu_only_and_unrecorded_too(page, tmp_path, name):
    out = tmp_path / "r.html"
    assert main(["report", str(trace_path(name)), "--format", "html", "-o", str(out)]) == 0
    page.goto(out.as_uri() + "#view=overview")
    wait_ready(page, "overview")
    doc = json_diagnosis(name)
    assert _shown(page) == _expected(doc)
    # each card's share is the JSON's (of the device window; the unrecorded wait's of the span)
    bigs = page.eval_on_selector_all("#levers .lever .big", "ns => ns.map(n => n.textContent)")
    assert [b.split(" (", 1)[1] for b in bigs] == [
        f"{lv['share_pct']:.0f}%{' of ' + lv['share_of'] if lv['share_of'] else ''})" for lv in doc["levers"]]
    small = page.query_selector("#small-items")
    if doc["window_us"] < doc["span_us"] and small is not None:
        assert "under 1% of the device window" in small.inner_text()


def test_html_report_shows_the_json_numbers(page, doc, tmp_path):
    out = tmp_path / "r.html"
    assert main(["report", str(trace_path(TRACE)), "--format", "html", "-o", str(out)]) == 0
    page.goto(out.as_uri() + "#view=overview")
    wait_ready(page, "overview")
    assert _shown(page) == _expected(doc)
    # a lever's op link opens the op table on that row
    # (the cpu_work lever names ops outside the report's top rows: the report embeds those rows too)
    link = page.query_selector("#levers a.lever-op")
    assert link is not None
    op = link.get_attribute("data-op")
    link.click()
    wait_ready(page, "ops")
    assert op in page.inner_text("tr.sel")


def test_explorer_overview_shows_the_json_numbers(page):
    name = "h100_vit_falconsai.json.gz"   # small: the explorer computes the advice on the first request
    with profuse.load(trace_path(name)) as t, running([t]) as url:
        page.goto(url.at("/#view=overview"))
        wait_ready(page, "overview")
        assert _shown(page) == _expected(json_diagnosis(name))
        assert page.inner_text("#diagnosis h2").startswith("Where the time went")
        # the header counts events as the console does: 1,234 (grouped), not 1234, and says what "linked" means
        events, main_text = t.meta.events, page.inner_text("main")
        assert events >= 1000 and f" · {events:,} events · " in main_text
        totals = json.loads(_json_report(name))["totals"]
        assert (f"{totals['kernels_linked']:,} of {totals['kernels']:,} device events linked to the op that "
                "launched them") in main_text


def _legend(page) -> list[tuple[str, str]]:
    """The Overview legend's entries: (leaf key, its text)."""
    return [tuple(e) for e in page.eval_on_selector_all(
        "#diagnosis .legend .leg", "ns => ns.map(n => [n.dataset.key, n.textContent])")]


def test_the_overview_legend_lists_every_leaf_with_time(page):
    # GIVEN a100_alexnet, whose 43.42 s active window makes its 2.02 ms elementwise, 0.92 ms reduction and 2.13 ms
    # host_sync leaves 0.0% once rounded (JSON: pct 0.0, us > 0)
    name = "a100_alexnet.json.gz"
    budget = json_diagnosis(name)["budget"]
    small = [lf["key"] for lf in budget if lf["pct"] == 0 and lf["us"] >= 900]
    assert {"busy/elementwise", "busy/reduction", "idle/host_sync"} <= set(small)
    with profuse.load(trace_path(name)) as t, running([t]) as url:
        page.goto(url.at("/#view=overview"))
        wait_ready(page, "overview")
        shown = _legend(page)
    # THEN the legend lists every leaf of the JSON report's budget with time (by its µs, not its rounded share),
    # each with its time, a share under 0.01% saying so
    assert [k for k, _ in shown] == [lf["key"] for lf in budget if lf["us"] > 0]
    for (_, text), lf in zip(shown, (lf for lf in budget if lf["us"] > 0)):
        assert text == f"{lf['key']} {fmt_us(lf['us'])} ({lf['pct'] if lf['pct'] > 0 else '<0.01'}%)"


def test_a_leaf_too_small_to_show_in_us_reads_in_ns(page):
    # GIVEN a compiled trace whose budget has an idle/queued leaf of 0.01 µs (0.00% of the window)
    name = "mi300_torch_compile_triton.json.gz"
    budget = json_diagnosis(name)["budget"]
    tiny = [lf for lf in budget if lf["pct"] == 0 and 0 < lf["us"] < 0.05]
    assert tiny
    with profuse.load(trace_path(name)) as t, running([t]) as url:
        page.goto(url.at("/#view=overview"))
        wait_ready(page, "overview")
        shown = dict(_legend(page))
    # THEN it is listed, in ns (10 ns, not "0.0 µs"), with a share under 0.01%
    assert set(shown) == {lf["key"] for lf in budget if lf["us"] > 0}
    for lf in tiny:
        assert shown[lf["key"]] == f"{lf['key']} {round(lf['us'] * 1000)} ns (<0.01%)"


def _json_report(name: str) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(trace_path(name)), "--format", "json", "--no-cache"]) == 0
    return out.getvalue()


def test_a_trace_without_steps_calls_its_span_the_active_window(page, tmp_path, capsys):
    # GIVEN a trace with no step marks: its budget is the active window (19.9 ms of the 62.5 ms trace), not the
    # whole trace, as its health line says
    name = "a100_event_sync_multistream.json.gz"
    doc = json.loads(_json_report(name))
    d = doc["diagnosis"]
    assert d["scope"] == "trace" and d["span_us"] < doc["trace"]["span_us"] / 2
    assert main(["report", str(trace_path(name)), "--no-cache"]) == 0
    out = capsys.readouterr().out
    # THEN the console, the levers and the HTML report name it so, and never "whole trace"
    assert f"Where the time went (active window, {fmt_us(d['span_us'])})" in out and "whole trace" not in out
    assert [lv["target"] for lv in d["levers"] if lv["kind"] == "cuda_graphs"] == ["active window"]
    html = tmp_path / "r.html"
    assert main(["report", str(trace_path(name)), "--format", "html", "-o", str(html)]) == 0
    page.goto(html.as_uri() + "#view=overview")
    wait_ready(page, "overview")
    assert page.inner_text("#diagnosis h2").startswith(f"Where the time went (active window, {fmt_us(d['span_us'])})")
    assert "whole trace" not in page.inner_text("#diagnosis")


HOSTILE = '<img src=x onerror="window.__pwned=1">'


def test_trace_names_in_lever_cards_are_text_not_markup(page, tmp_path):
    # GIVEN a step whose CPU work is an op named with HTML markup, so the cpu_work card names it
    def x(cat, name, ts, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}

    ev = [x("user_annotation", "ProfilerStep#1", 0, 5000), x("cpu_op", HOSTILE, 10, 4000),
          x("cpu_op", "aten::mm", 4100, 20), x("cuda_runtime", "cudaLaunchKernel", 4105, 4, correlation=1),
          {"ph": "X", "cat": "kernel", "name": "sm90_gemm_bf16", "pid": 0, "tid": 7, "ts": 4120, "dur": 800,
           "args": {"correlation": 1, "stream": 7, "device": 0}}]
    src = tmp_path / "hostile.json"
    src.write_text(json.dumps({"traceEvents": ev}))
    out = tmp_path / "r.html"
    assert main(["report", str(src), "--format", "html", "-o", str(out)]) == 0
    page.goto(out.as_uri() + "#view=overview")
    wait_ready(page, "overview")
    # THEN the name is shown as text in the card and its link, and nothing ran
    card = page.inner_text("#levers .lever[data-kind=cpu_work]")
    assert HOSTILE in card
    assert page.evaluate("window.__pwned") is None
    assert page.query_selector("#diagnosis img") is None


def _overlap_us(path) -> tuple[float, float]:
    """Raw JSON: the device activities' summed durations and their union (µs)."""
    import oracle

    acts = [(e["ts"], e["ts"] + e["dur"]) for e in oracle.exact_events(str(path)) if oracle.is_device_time(e)]
    return float(sum(b - a for a, b in acts)), float(oracle.union_us(acts))


@pytest.mark.parametrize("name", ["mtia_inference.json.gz", "a100_nccl_rank0_of2.json.gz", "h100_bert_small.json.gz"])
def test_the_headers_say_where_the_summed_device_time_overlaps(page, capsys, name):
    # GIVEN traces whose device activities overlap (MTIA's DMA beside compute; NCCL beside compute) and one whose
    # activities never do
    total, busy = _overlap_us(trace_path(name))
    doc = json.loads(_json_report(name))
    overlapping = total - busy > 0.005 * total
    # THEN the JSON's totals give the time counted more than once (the sum less the union, raw JSON), or none
    assert doc["totals"]["device_us"] == pytest.approx(total, abs=0.01)
    assert doc["totals"]["overlap_us"] == (pytest.approx(total - busy, abs=0.01) if overlapping else 0.0)
    assert overlapping == (name != "h100_bert_small.json.gz")
    # AND the console's and the explorer's headers say it beside the sum, with the busy time
    said = (f"{fmt_us(doc['totals']['overlap_us'])} of it counted more than once where activities overlap: busy "
            f"{fmt_us(doc['totals']['device_us'] - doc['totals']['overlap_us'])}")
    assert main(["report", str(trace_path(name)), "--no-advice"]) == 0
    header = capsys.readouterr().out.splitlines()[1]
    with profuse.load(trace_path(name)) as t, running([t]) as url:
        page.goto(url.at("/#view=overview"))
        wait_ready(page, "overview")
        shown = page.inner_text("main p.muted")
    for text in (header, shown):
        assert (said in text) == overlapping, text
