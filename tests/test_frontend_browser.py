"""The front end in a real browser: errors that reach the page, listeners that outlive their view,
selection in the self-contained HTML report, and lane labels. Debian's Chromium through Playwright."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import test_explorer_browser as explorer_browser
from conftest import trace_path
from explorer_util import running, scroll_timeline_to
from test_explorer_browser import open_view, wait_ready

import profuse
from profuse.analysis.timeline import timeline_model
from profuse.cli import main
from profuse.frontend import payload_json

# the Chromium fixtures and the skip rule of the explorer's browser tests
browser, page, pytestmark = explorer_browser.browser, explorer_browser.page, explorer_browser.pytestmark
DATA_OPEN = '<script type="application/json" id="profuse-data">'
ROW, LANE_GAP = 14, 6  # timeline_view.js: a row's height and the gap between lanes, CSS pixels


@pytest.fixture(scope="module")
def bert():
    t = profuse.load(trace_path("h100_bert_small.json.gz"))
    yield t
    t.close()


@pytest.fixture(scope="module")
def bert_report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "bert.html"
    assert main(["report", str(trace_path("h100_bert_small.json.gz")), "--format", "html", "-o", str(out)]) == 0
    return out


def embedded(html: str) -> dict:
    start = html.index(DATA_OPEN) + len(DATA_OPEN)
    return json.loads(html[start:html.index("</script>", start)])


def with_payload(html: str, payload: dict) -> str:
    start = html.index(DATA_OPEN) + len(DATA_OPEN)
    return html[:start] + payload_json(payload) + html[html.index("</script>", start):]


def window_listeners(page) -> list[str]:
    """The event types of every listener on `window`, as Chrome's DevTools protocol lists them."""
    cdp = page.context.new_cdp_session(page)
    win = cdp.send("Runtime.evaluate", {"expression": "window"})["result"]["objectId"]
    found = [item["type"] for item in cdp.send("DOMDebugger.getEventListeners", {"objectId": win})["listeners"]]
    cdp.detach()
    return sorted(found)


def fmt_us(us: float) -> str:
    """dom.js fmtUs for durations under a second."""
    return f"{us / 1e3:.2f} ms" if abs(us) >= 1e3 else f"{us:.1f} µs"


def test_a_view_that_throws_shows_its_error_and_fails_the_render_check(page, bert_report, tmp_path):
    # GIVEN a report whose overview payload is broken (no summary, no categories)
    html = bert_report.read_text()
    payload = embedded(html)
    broken = {k: ({} if k.endswith("/overview") else v) for k, v in payload.items()}
    assert broken != payload
    out = tmp_path / "broken.html"
    out.write_text(with_payload(html, broken))
    # WHEN the overview opens THEN the page says the view failed, and waiting for it fails the test
    page.goto(out.as_uri() + "#view=overview")
    with pytest.raises(AssertionError, match="the overview view did not render: the overview view failed"):
        wait_ready(page, "overview")
    assert page.get_attribute("body", "data-ready") == "error"
    assert "the overview view failed" in page.locator("main .error").inner_text()
    assert page.inner_text("#status") == "error"
    # AND the views whose data is whole still render
    page.goto(out.as_uri() + "#view=ops")
    wait_ready(page, "ops")
    assert page.locator("main .error").count() == 0


def test_leaving_the_timeline_removes_its_listeners(page, bert):
    with running([bert]) as url:
        open_view(page, url, "overview")
        before = window_listeners(page)
        page.click('#nav a[data-view="timeline"]')
        wait_ready(page, "timeline")
        on_timeline = window_listeners(page)
        assert len(on_timeline) > len(before), "the timeline listens on the window (drag, resize)"
        for _ in range(3):
            page.click('#nav a[data-view="ops"]')
            wait_ready(page, "ops")
            assert window_listeners(page) == before
            assert page.evaluate("window.profuseTimeline === undefined")
            page.click('#nav a[data-view="timeline"]')
            wait_ready(page, "timeline")
            assert window_listeners(page) == on_timeline
        page.click('#nav a[data-view="modules"]')
        wait_ready(page, "modules")
        assert window_listeners(page) == before
        assert page.locator("canvas").count() == 0


def test_report_timeline_click_shows_the_event_from_the_embedded_data(page, bert_report):
    # GIVEN the report's embedded timeline and its longest single op, checked against the raw trace
    tl = embedded(bert_report.read_text())["0/timeline"]
    ops = [i for i in range(len(tl["id"])) if tl["id"][i] >= 0 and tl["kinds"][tl["kind"][i]] == "cpu_op"]
    i = max(ops, key=lambda k: tl["dur"][k])
    eid, name, ts, dur = tl["id"][i], tl["names"][tl["name"][i]], tl["ts"][i], tl["dur"][i]
    raw = json.load(gzip.open(trace_path("h100_bert_small.json.gz")))["traceEvents"]
    assert any(e.get("name") == name and e.get("cat") == "cpu_op" and abs(float(e["dur"]) - dur) < 1e-3 for e in raw)
    # WHEN it is clicked on the timeline
    page.goto(bert_report.as_uri() + "#view=timeline")
    wait_ready(page, "timeline")
    assert "click an event for its name, kind, start and duration" in page.inner_text("main")
    x, y, w = page.evaluate(f"window.profuseTimeline.positions.get({eid})")
    box = page.locator("canvas").first.bounding_box()
    page.mouse.click(box["x"] + x + min(w / 2, 20), box["y"] + y + 6)
    # THEN its name, kind, start and duration are shown, and the URL carries the selection
    page.wait_for_selector("#details b")
    assert page.inner_text("#details b") == name
    text = page.inner_text("#details")
    assert f"cpu_op · starts {fmt_us(ts)} · lasts {fmt_us(dur)}" in text
    assert page.locator("#kernel-list").count() == 0, "no server: no linked kernels"
    assert f"sel={eid}" in page.url
    assert page.evaluate("window.profuseTimeline.selected") == eid
    # AND reopening that URL selects it again
    page.reload()
    wait_ready(page, "timeline")
    assert page.inner_text("#details b") == name
    # AND a click on nothing clears it (the gap above the memory lanes, which a click would pick a point of)
    memory_top = page.evaluate("window.profuseTimeline.counters.length ? window.profuseTimeline.counters[0].y : null")
    nothing_y = box["height"] - 1 if memory_top is None else memory_top - 2
    # the lanes scroll in their box (it opens on the device lanes): bring that gap in view
    scroll_timeline_to(page, nothing_y)
    box = page.locator("canvas").first.bounding_box()
    page.mouse.click(box["x"] + box["width"] - 2, box["y"] + nothing_y)
    page.wait_for_function("window.profuseTimeline.selected === null")
    assert "click an event to select it" in page.inner_text("#details")


def test_lane_labels_name_their_kind_and_show_the_full_label_on_hover(page, bert):
    model = timeline_model(bert)
    lanes = [{"kind": ln.kind, "label": ln.label, "rows": ln.rows} for ln in model.lanes]
    model.close()
    kinds = {lane["kind"] for lane in lanes}
    assert {"ops", "stream"} <= kinds
    with running([bert]) as url:
        open_view(page, url, "timeline")
        y = 0
        for lane in lanes:
            # the lanes scroll in their box (it opens on the device lanes): bring this one in view
            page.evaluate("y => { document.getElementById('tl-wrap').scrollTop = y; }", y)
            box = page.locator("canvas").first.bounding_box()
            page.mouse.move(box["x"] + 100, box["y"] + y + ROW / 2)
            expected = f"{lane['kind']}: {lane['label']}"
            page.wait_for_function("t => document.querySelector('canvas').title === t", arg=expected)
            y += lane["rows"] * ROW + LANE_GAP
        # lanes of one thread differ by their kind, not by where a cut happened to fall
        by_thread: dict[str, set[str]] = {}
        for lane in lanes:
            if lane["kind"] != "stream":
                by_thread.setdefault(lane["label"].rsplit(" · ", 1)[0], set()).add(lane["kind"])
        assert any(len(k) > 1 for k in by_thread.values())
        page.evaluate("document.getElementById('tl-wrap').scrollTop = 0")
        box = page.locator("canvas").first.bounding_box()
        page.mouse.move(box["x"] + 600, box["y"] + 5)
        page.wait_for_function("document.querySelector('canvas').title === ''")


def test_report_timeline_click_on_a_merged_block_says_how_many_it_holds(page, bert_report):
    tl = embedded(bert_report.read_text())["0/timeline"]
    page.goto(bert_report.as_uri() + "#view=timeline")
    wait_ready(page, "timeline")
    # what is drawn counts every embedded event once, however it was merged to fit the pixels
    assert page.evaluate("window.profuseTimeline.drawn.n.reduce((a, b) => a + b, 0)") == sum(tl["n"])
    block = page.evaluate("""(() => {
        const tl = window.profuseTimeline, d = tl.drawn;
        const b = tl.boxes.filter(b => d.id[b.i] < 0 && d.n[b.i] > 1).sort((p, q) => q.w - p.w)[0];
        return b && { x: b.x, y: b.y, w: b.w, n: d.n[b.i] };
    })()""")
    assert block is not None, "the full span of this trace has sub-pixel events"
    box = page.locator("canvas").first.bounding_box()
    page.mouse.click(box["x"] + block["x"] + block["w"] / 2, box["y"] + block["y"] + 6)
    page.wait_for_selector("#details b")
    text = page.inner_text("#details")
    assert text.startswith(f"{block['n']} events merged, the longest ")
    assert "together they span" in text and "lasts" not in text, "a block's extent is no event's duration"
    assert "sel=" not in page.url, "a block is not an event: nothing to reopen"


def test_report_grouped_by_module_without_modules_says_why(page, tmp_path):
    # a100_alexnet has no nn.Module scopes: no python_function event named 'nn.Module: ...' (plain json)
    src = trace_path("a100_alexnet.json.gz")
    with gzip.open(src) as fh:
        events = json.load(fh)["traceEvents"]
    assert not any(str(e.get("name", "")).startswith("nn.Module: ") for e in events)
    out = tmp_path / "alexnet.html"
    assert main(["report", str(src), "--format", "html", "--group-by", "module", "-o", str(out)]) == 0
    assert embedded(out.read_text())["0/ops"]["rows"] == []
    page.goto(out.as_uri() + "#view=ops")
    wait_ready(page, "ops")
    assert page.inner_text("#no-modules").startswith("No nn.Module scopes in this trace")


def test_report_grouped_by_kernel_shows_a_dash_for_cpu_time_the_json_has_null(page, tmp_path):
    # GIVEN h100_bert_small's HTML report grouped by kernel: its embedded rows have no CPU figures (null)
    out = tmp_path / "kernels.html"
    assert main(["report", str(trace_path("h100_bert_small.json.gz")), "--format", "html", "--group-by", "kernel",
                 "-o", str(out)]) == 0
    rows = embedded(out.read_text())["0/ops"]["rows"]
    assert rows and all(r["self_cpu_us"] is None and r["cpu_total_us"] is None for r in rows)
    # THEN its ops view shows "-" in both CPU columns of every row, and the device time beside them
    page.goto(out.as_uri() + "#view=ops")
    wait_ready(page, "ops")
    for label in ("Self CPU", "CPU total"):
        assert set(explorer_browser.ops_column(page, label)) == {"-"}, label
    assert explorer_browser.ops_column(page, "Self CUDA")[0] == fmt_us(max(r["self_device_us"] for r in rows))


def test_report_shows_its_compiled_tab_with_every_kernel_where_the_trace_compiled(page, tmp_path):
    # GIVEN reports of the H200 BERT step compiled (a torch.compile region) and eager (none)
    from conftest import FIXTURES

    pages = {}
    for run in ("bert_compile", "bert_eager"):
        out = tmp_path / f"{run}.html"
        assert main(["report", str(FIXTURES / "h200" / run / "trace.json.gz"), "--format", "html", "-o", str(out)]) == 0
        pages[run] = out
    region = embedded(pages["bert_compile"].read_text())["0/compiled"]["regions"][0]
    assert "0/compiled" not in embedded(pages["bert_eager"].read_text())
    # THEN the compiled report's Compiled tab lists the region's kernels, extern GEMMs too, adding up to its time
    page.goto(pages["bert_compile"].as_uri() + "#view=compiled")
    wait_ready(page, "compiled")
    assert page.is_visible('#nav a[data-view="compiled"]')
    rows = page.locator("#main table").first.locator("tbody tr")
    assert rows.count() == len(region["kernels"])
    assert sum(k["device_us"] for k in region["kernels"]) == pytest.approx(region["device_us"], abs=0.01)
    assert "extern (not generated)" in page.inner_text("#main")
    # and the eager report hides the tab
    page.goto(pages["bert_eager"].as_uri())
    wait_ready(page, "overview")
    assert not page.is_visible('#nav a[data-view="compiled"]')


def test_the_reports_overview_shows_the_trace_health_the_json_has(page, bert_report):
    # GIVEN h100_bert_small's HTML report (its JSON health: 22 cudaMemsetAsync without activity, Python stacks)
    h = embedded(bert_report.read_text())["0/overview"]["health"]
    assert [f["key"] for f in h["findings"]] == ["launches_without_activity", "python_stacks"]
    # WHEN the overview opens THEN its health section lists the same findings with their texts
    page.goto(bert_report.as_uri() + "#view=overview")
    wait_ready(page, "overview")
    shown = page.eval_on_selector_all("#health li", "els => els.map(e => [e.dataset.key, e.textContent])")
    assert [k for k, _ in shown] == [f["key"] for f in h["findings"]]
    assert all(f["text"] in text and f["fix"] in text for f, (_k, text) in zip(h["findings"], shown))
    assert f"{h['device_activities']} device activities" in page.text_content("#health")
