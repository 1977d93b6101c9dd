"""End to end in a real browser: Debian's Chromium driven by Playwright's client."""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, trace_path
from explorer_util import running

import profuse
from profuse.cli import main

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM) and not os.environ.get("CI"),
                                reason="Debian chromium not installed (make test installs it)")
ARTIFACTS = REPO / "test-artifacts"
HOSTILE = ['<img src=x onerror="window.__pwned=1">', "<script>window.__pwned=2</script>",
           "a&b<c>d \" onmouseover=window.__pwned=3"]


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        yield b
        b.close()


@pytest.fixture
def page(browser, request):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        pg.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    ctx.close()
    assert not errors, errors


def wait_ready(page, view):
    """Wait until the view has rendered or failed; fail the test unless it rendered."""
    page.wait_for_selector(f"body[data-ready={view}], body[data-ready=error]", timeout=15000)
    ready = page.get_attribute("body", "data-ready")
    assert ready == view, f"the {view} view did not render: {page.get_attribute('body', 'data-error')}"


def open_view(page, url, view, extra=""):
    page.goto(url.at(f"/#view={view}{extra}"))
    wait_ready(page, view)


@pytest.fixture(scope="module")
def bert():
    t = profuse.load(trace_path("h100_bert_small.json.gz"))
    yield t
    t.close()


def test_the_printed_url_opens_the_explorer_and_the_bare_address_does_not(page, browser, tmp_path):
    # GIVEN `profuse explore` started as a user starts it
    env = {**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "profuse", "explore", str(trace_path("a100_event_sync.json.gz")),
                             "--no-browser"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        printed = proc.stdout.readline().split()[2]
        assert "/?token=" in printed
        base = printed.split("?")[0]
        # WHEN the URL it printed is opened in the browser
        page.goto(printed)
        wait_ready(page, "overview")
        # THEN the page's data loads: the run picker names the trace, the op table fills
        assert "a100_event_sync.json.gz" in page.inner_text("#run")
        page.click('#nav a[data-view="ops"]')
        wait_ready(page, "ops")
        assert page.locator("main table").first.locator("tbody tr").count() > 0
        # AND the token has left the address bar for a cookie that no script reads and no other site sends
        assert "token" not in page.url
        (cookie,) = page.context.cookies()
        assert cookie["value"] == printed.split("token=")[1] and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert page.evaluate("document.cookie") == ""
        # AND a browser that never saw the URL is refused the page and the API
        other = browser.new_context()
        try:
            stranger = other.new_page()
            assert stranger.goto(base).status == 403
            assert stranger.goto(base + "api/runs").status == 403
            assert stranger.goto(base + "?token=" + "x" * 43).status == 403
        finally:
            other.close()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def test_click_an_op_highlights_and_lists_its_kernels(page, bert):
    (op_id, ts, dur, kernels), = bert.con.execute("""
        SELECT e.id, e.ts - (SELECT min(ts) FROM events), e.dur, e.kernels_total FROM events e
        WHERE e.name = 'aten::linear' ORDER BY e.ts LIMIT 1""").fetchall()
    kernel_ids = {r[0] for r in bert.con.execute(
        "SELECT k.id FROM events k JOIN events l ON l.id = k.launch WHERE l.thread = (SELECT thread FROM events "
        "WHERE id = ?) AND l.ts >= ? AND l.ts < ?", [op_id, ts + bert.con.execute(
            "SELECT min(ts) FROM events").fetchall()[0][0], ts + dur + bert.con.execute(
            "SELECT min(ts) FROM events").fetchall()[0][0]]).fetchall()}
    assert kernels >= 1 and len(kernel_ids) == kernels
    with running([bert]) as url:
        # GIVEN the timeline zoomed around the op
        t0, t1 = (ts - dur) / 1e3, (ts + 3 * dur) / 1e3
        open_view(page, url, "timeline", f"&t0={t0}&t1={t1}")
        page.wait_for_function(f"window.profuseTimeline && window.profuseTimeline.positions "
                               f"&& window.profuseTimeline.positions.has({op_id})")
        x, y, w = page.evaluate(f"window.profuseTimeline.positions.get({op_id})")
        box = page.locator("canvas").first.bounding_box()
        # WHEN the op is clicked
        page.mouse.click(box["x"] + x + min(w / 2, 20), box["y"] + y + 6)
        page.wait_for_selector("#kernel-list li")
        # THEN its kernels are listed with times and highlighted on the timeline
        items = page.locator("#kernel-list li")
        assert items.count() == kernels
        assert "µs" in items.first.inner_text()
        highlighted = set(page.evaluate("[...window.profuseTimeline.highlight]"))
        assert kernel_ids <= highlighted
        assert f"sel={op_id}" in page.url, "the URL carries the selection"
        # AND reopening that URL restores the same place
        page.goto(page.url)
        page.reload()
        page.wait_for_selector("#kernel-list li")
        assert page.locator("#kernel-list li").count() == kernels


def test_click_a_kernel_walks_back_to_op_and_module(page, bert):
    (kid,), = bert.con.execute("""SELECT k.id FROM events k JOIN events o ON o.id = k.op
        WHERE k.kind = 'kernel' AND o.name = 'aten::addmm' ORDER BY k.ts LIMIT 1""").fetchall()
    with running([bert]) as url:
        open_view(page, url, "timeline", f"&sel={kid}")
        page.wait_for_selector("#op-chain")
        assert "aten::addmm" in page.locator("#op-chain").inner_text()
        assert "Linear" in page.locator("#module-chain").inner_text()


def test_every_view_renders(page, bert):
    with running([bert]) as url:
        for view in ("overview", "ops", "timeline", "modules", "compiled"):
            open_view(page, url, view)
        open_view(page, url, "ops")
        page.select_option("#group-by", "kernel")
        page.wait_for_selector("body[data-ready=ops] table tbody tr")
        assert "Kernel" in page.inner_text("main") or page.locator("tbody tr").count() > 0


def ops_column(page, label):
    """The cells of the ops view's table under the header ``label`` (None: no such column)."""
    return page.evaluate("""label => {
      const t = document.querySelector('#main table');
      const i = [...t.querySelectorAll('thead th')].findIndex(th => th.textContent === label);
      return i < 0 ? null : [...t.querySelectorAll('tbody > tr:not(.detail)')].map(tr => tr.children[i].textContent);
    }""", label)


@pytest.mark.parametrize(("group", "dashed", "figured"), [("module", ["Self CPU"], ["CPU total"]),
                                                          ("kernel", ["Self CPU", "CPU total"], [])])
def test_ops_grouped_by_module_or_kernel_show_a_dash_where_a_cpu_column_does_not_apply(page, bert, group,
                                                                                         dashed, figured):
    # GIVEN the explorer on h100_bert_small, its ops grouped by module or by kernel
    with running([bert]) as url:
        open_view(page, url, "ops", f"&group={group}")
        page.wait_for_selector("body[data-ready=ops] table tbody tr")
        # THEN a CPU column the grouping has no figure for shows "-" on every row (null in the payload, not 0)
        for label in dashed:
            cells = ops_column(page, label)
            assert cells and set(cells) == {"-"}, label
        # AND one it has shows durations
        for label in figured:
            assert all(c.endswith(("µs", "ms", " s")) for c in ops_column(page, label)), label


def test_compiled_view_gives_region_device_time_and_events(page):
    # the region's device time is its op-table device total; its 12 device events from the raw JSON
    from oracle import compiled_region_device

    path = trace_path("mi300_torch_compile_triton.json.gz")
    ((name, (n, us)),) = compiled_region_device(path).items()
    t = profuse.load(path)
    with running([t]) as url:
        open_view(page, url, "compiled")
        heading = page.locator("main h2").first.inner_text()
    t.close()
    assert name in heading and f"{n} device event(s)" in heading
    assert f"{us / 1e3:.2f} ms" in heading


@contextlib.contextmanager
def comparing(page, a_name: str, b_name: str) -> Iterator[None]:
    """The explorer's Compare view of two shared traces, open on ``page`` until the block ends."""
    a, b = profuse.load(trace_path(a_name)), profuse.load(trace_path(b_name))
    try:
        with running([a, b]) as url:
            open_view(page, url, "compare")
            page.wait_for_selector("#diff-ops tbody tr")
            yield
    finally:
        a.close()
        b.close()


def test_compare_two_runs(page):
    with comparing(page, "compare_base.json.gz", "compare_test.json.gz"):
        # two ProfilerSteps a side: the title's totals cover equal work and say nothing of steps
        assert "x" in page.inner_text("#compare-title") and "totals over" not in page.inner_text("#compare-title")
        assert "All2All_Pooled_Req" in page.inner_text("#diff-ops")
        page.wait_for_function("document.querySelectorAll('#tl-a canvas, #tl-b canvas').length === 2")


def test_compare_says_when_its_totals_cover_unequal_steps(page):
    # one ProfilerStep against two: the title's device times are totals over unequal work, and says so
    with comparing(page, "h100_bert_small.json.gz", "compare_base.json.gz"):
        assert "(totals over 1 and 2 steps: the verdicts compare per step)" in page.inner_text("#compare-title")


def test_compare_across_devices_names_them_and_shows_ratios(page):
    with comparing(page, "h100_bert_small.json.gz", "mi300_bert_small.json.gz"):
        main_text = page.inner_text("main")
        assert "NVIDIA H100 80GB HBM3" in main_text and "AMD Instinct MI300X VF" in main_text
        assert "different devices" in page.inner_text("#compare-devices")
        assert "x (1.26x slower)" in page.inner_text("#compare-title"), "309.4 µs -> 390.7 µs of device time"
        assert "cannot tell" in main_text, "one ProfilerStep a side"
        first = page.locator("#diff-ops tbody tr").first
        # grouped by op and shapes, the largest change first: the four flash-attention calls (one per layer)
        assert first.locator("span").first.get_attribute("title") == "aten::_flash_attention_forward"
        assert "4× BertSdpaSelfAttention" in first.inner_text() and "3.04x slower" in first.inner_text()
        assert "% roofline B" in main_text


def hostile_trace(tmp_path: Path) -> Path:
    doc = json.load(gzip.open(trace_path("a100_event_sync.json.gz")))
    ops = [e for e in doc["traceEvents"] if e.get("cat") in ("cpu_op", "kernel")]
    for e, name in zip(ops, HOSTILE * 10):
        e["name"] = name
    doc["deviceProperties"][0]["name"] = "<b onmouseover=alert(1)>GPU</b>"
    p = tmp_path / "hostile.json"
    p.write_text(json.dumps(doc))
    return p


def test_names_with_html_render_as_text(page, tmp_path):
    t = profuse.load(hostile_trace(tmp_path))
    with running([t]) as url:
        for view in ("overview", "ops", "timeline"):
            open_view(page, url, view)
            page.wait_for_timeout(200)
            assert page.evaluate("window.__pwned") is None
        open_view(page, url, "ops")
        text = page.inner_text("main")
        assert HOSTILE[0] in text and HOSTILE[1] in text
        assert page.locator("main img").count() == 0 and page.locator("main script").count() == 0
    t.close()


def test_html_report_is_self_contained_and_safe(page, tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", str(hostile_trace(tmp_path)), "--format", "html", "-o", str(out)]) == 0
    html = out.read_text()
    assert "http://" not in html and "https://" not in html, "nothing to fetch from a network"
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(out.as_uri() + "#view=ops")
    page.wait_for_selector("body[data-ready=ops] tbody tr")
    assert HOSTILE[0] in page.inner_text("main")
    assert page.evaluate("window.__pwned") is None
    assert all(u.startswith(("file:", "data:")) for u in requests), requests
    open_view_file = out.as_uri() + "#view=timeline"
    page.goto(open_view_file)
    page.wait_for_selector("body[data-ready=timeline] canvas")


def test_graph_replay_is_one_flow_and_its_kernels_are_selectable(page):
    # GIVEN the sglang decode trace, whose one hipGraphLaunch replays hundreds of kernels
    path = trace_path("mi300_sglang_decode_cudagraph.json.gz")
    raw = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X"]
    (corr,) = [e["args"]["correlation"] for e in raw if e.get("name") == "hipGraphLaunch"]
    n_replayed = sum(1 for e in raw if e.get("cat") == "kernel" and e["args"].get("correlation") == corr)
    with profuse.load(path) as t:
        (launch_id,), = t.con.execute("SELECT id FROM events WHERE name = 'hipGraphLaunch'").fetchall()
        with running([t]) as url:
            # WHEN the graph launch is selected
            open_view(page, url, "timeline", f"&sel={launch_id}")
            page.wait_for_selector("#kernel-list li")
            # THEN every replayed kernel is listed and highlighted, with one flow arrow for the replay
            assert page.locator("#kernel-list li").count() == n_replayed
            assert f"graph replay: {n_replayed} kernel(s)" in page.locator(".replay").inner_text()
            assert len(page.evaluate("window.profuseTimeline.highlight.size ? [...window.profuseTimeline.highlight]"
                                     " : []")) >= n_replayed
            assert page.evaluate("window.profuseTimeline.arrows.length") == 1
            # AND clicking a listed kernel selects it, walking back to the annotation around the launch
            from playwright.sync_api import expect

            first = page.locator("#kernel-list li").first
            kid = int(first.get_attribute("data-id"))
            (kname,), = t.con.execute("SELECT name FROM events WHERE id = ?", [kid]).fetchall()
            first.click()
            expect(page.locator("#details b").first).to_have_text(kname)
            assert f"sel={kid}" in page.url
            assert "step[DECODE bs=32]" in page.locator("#op-chain").inner_text()
            assert "launched by hipGraphLaunch" in page.locator("#details").inner_text()


def kernels_under_op(t, op_name: str) -> dict[str, int]:
    """Kernel names and counts under an op, from the raw JSON: device events launched inside its calls."""
    import oracle

    return {name: n for name, (n, _) in oracle.kernels_under_op(t.path, op_name).items()}


def open_ops_row(page, name: str) -> dict[str, int]:
    """Open the ops row called ``name`` (Enter on the focused row) and read the kernels it lists."""
    page.fill("#ops-filter", name)
    row = page.locator("main table").first.locator("tbody tr", has=page.locator("td.name", has_text=name)).first
    row.focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("#op-kernels tbody tr")
    cells = page.locator("#op-kernels tbody tr").evaluate_all(
        "rows => rows.map(r => [r.cells[0].textContent, r.cells[1].textContent])")
    return {n: int(c) for n, c in cells}


def test_ops_row_opens_to_its_kernels_in_explorer_and_report(page, bert, tmp_path):
    expected = kernels_under_op(bert, "aten::addmm")
    assert expected
    with running([bert]) as url:
        open_view(page, url, "ops")
        assert open_ops_row(page, "aten::addmm") == expected
        assert "op=aten" in page.url, "the URL carries the opened row"
        # a click opens another row
        (other,), = bert.con.execute("""SELECT o.name FROM events k JOIN events o ON o.id = k.op
            WHERE o.name <> 'aten::addmm' GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1""").fetchall()
        page.fill("#ops-filter", other)
        page.locator("main table").first.locator("tbody tr", has=page.locator("td.name", has_text=other)).first \
            .click()
        # (while the list loads the box holds "loading kernels…" and no heading yet)
        page.wait_for_function("name => (document.querySelector('#op-kernels h2')?.textContent ?? '').includes(name)",
                               arg=other)
        # (the op with most device events of its own, ProfilerStep#6: 1,231, all gpu annotations; 12 kernel names
        # under it)
        assert {r.split("\t")[0] for r in page.locator("#op-kernels tbody tr").all_inner_texts()} \
            == set(kernels_under_op(bert, other)) != set()
    out = tmp_path / "report.html"
    assert main(["report", str(bert.path), "--format", "html", "-o", str(out)]) == 0
    page.goto(out.as_uri() + "#view=ops")
    page.wait_for_selector("body[data-ready=ops] tbody tr")
    assert open_ops_row(page, "aten::addmm") == expected


def test_html_report_without_advice_says_so(page, tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", str(trace_path("h100_bert_small.json.gz")), "--format", "html", "-o", str(out),
                 "--no-advice", "--top", "3"]) == 0
    page.goto(out.as_uri() + "#view=overview")
    page.wait_for_selector("body[data-ready=overview] #no-advice")
    assert page.locator("#advice").count() == 0
    page.goto(out.as_uri() + "#view=ops")
    page.wait_for_selector("body[data-ready=ops] tbody tr")
    assert page.locator("main table").first.locator("tbody tr").count() == 3
    assert "3 of " in page.inner_text(".toolbar")


def test_overview_names_a_serving_step_as_the_console_report_does(page, tmp_path, capsys):
    # GIVEN the sglang decode trace, whose step name gives batch 32, tokens 32 and KV tokens 0 + 32785
    path = trace_path("mi300_sglang_decode_cudagraph.json.gz")
    main(["report", str(path), "--no-cache"])
    console = capsys.readouterr().out
    label = "decode x1 (473.83 ms, batch 32, tokens 32, KV tokens 32,785 per step)"
    assert label in console
    with profuse.load(path) as t, running([t]) as url:
        open_view(page, url, "overview")
        # THEN the explorer's budget row names it with the same figures, written the same way
        assert label.replace(" x1 ", " ×1 ") in page.inner_text("#diagnosis")
