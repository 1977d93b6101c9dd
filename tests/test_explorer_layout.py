"""Where things land on the page, in the real Chromium: an op's kernels under its row, the device
lanes in view when the timeline opens, modules by device time, long names kept inside the page."""
from __future__ import annotations

import gzip
import json

import pytest
import test_explorer_browser as explorer_browser
from conftest import trace_path
from explorer_util import running
from test_explorer_browser import kernels_under_op, open_view

import profuse

browser, pytestmark = explorer_browser.browser, explorer_browser.pytestmark
ROW = 14  # timeline_view.js: a row's height, CSS pixels


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1100, "height": 700})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    ctx.close()
    assert not errors, errors


@pytest.fixture(scope="module")
def bert():
    t = profuse.load(trace_path("h100_bert_small.json.gz"))
    yield t
    t.close()


def test_an_ops_kernels_open_right_under_its_row_and_in_view(page, bert):
    with running([bert]) as url:
        open_view(page, url, "ops")
        rows = page.locator("main table").first.locator(":scope > tbody > tr")
        # an op far down the table: its kernels must not land after all the rows
        names = rows.evaluate_all("rs => rs.map(r => r.cells[0].textContent)")
        # the Kernels column by its header (memory columns follow it on a trace with memory events)
        col = page.locator("main table").first.locator("thead th").evaluate_all(
            "hs => hs.findIndex(h => h.textContent.startsWith('Kernels'))")
        assert col > 0
        kernel_counts = rows.evaluate_all("(rs, c) => rs.map(r => r.cells[c].textContent)", col)
        i = max(k for k, c in enumerate(kernel_counts) if c != "0")
        assert i > 3
        rows.nth(i).click()
        page.wait_for_selector("#op-kernels tbody tr")
        # THEN the list sits in the row right after the clicked one, and on screen
        assert rows.nth(i).evaluate("r => r.nextElementSibling.querySelector('#op-kernels') !== null")
        box = page.locator("#op-kernels").bounding_box()
        assert box["y"] >= 0 and box["y"] + min(box["height"], 100) <= 700
        listed = page.locator("#op-kernels tbody tr").evaluate_all(
            "rs => rs.map(r => [r.cells[0].textContent, r.cells[1].textContent])")
        assert {n: int(c) for n, c in listed} == kernels_under_op(bert, names[i])
        # AND sorting the table keeps the list under its row
        page.locator("main table").first.locator("thead th", has_text="Calls").first.click()
        opened = page.locator("main table").first.locator(":scope > tbody > tr.sel")
        assert opened.evaluate("r => r.nextElementSibling.querySelector('#op-kernels') !== null")


def test_the_timeline_opens_with_the_device_lanes_in_view(page, bert):
    # the CPU lanes of this trace (a 37-row Python stack) are taller than the window
    with running([bert]) as url:
        open_view(page, url, "timeline")
        lanes = page.evaluate("window.profuseTimeline.lanes.map(l => [l.kind, l.y, l.rows])")
        height = page.evaluate("window.profuseTimeline.height")
        assert height > 700 and any(k == "stream" for k, _, _ in lanes)
        canvas = page.locator("canvas").first.bounding_box()
        wrap = page.locator("#tl-wrap").bounding_box()
        for kind, y, rows in lanes:
            if kind != "stream":
                continue
            top, bottom = canvas["y"] + y, canvas["y"] + y + rows * ROW
            assert wrap["y"] <= top and bottom <= wrap["y"] + wrap["height"] <= 700, (y, canvas, wrap)
        # and a kernel drawn there answers a click
        x, y = page.evaluate("""(() => { const t = window.profuseTimeline, d = t.drawn;
            const b = t.boxes.find(b => d.kinds[d.kind[b.i]] === 'kernel' && d.id[b.i] >= 0); return [b.x, b.y]; })()""")
        page.mouse.click(canvas["x"] + x + 1, canvas["y"] + y + ROW / 2)
        page.wait_for_selector("#op-chain")
        # AND a selection in a lane above them (from the URL) is scrolled into view
        top_id = page.evaluate("[...window.profuseTimeline.positions].find(([id, p]) => p[1] < 20)[0]")
        open_view(page, url, "overview")
        open_view(page, url, "timeline", f"&sel={top_id}")
        page.wait_for_function(f"window.profuseTimeline && window.profuseTimeline.selected === {top_id}")
        page.wait_for_selector("#details b")
        y = page.evaluate(f"window.profuseTimeline.positions.get({top_id})[1]")
        canvas = page.locator("canvas").first.bounding_box()
        wrap = page.locator("#tl-wrap").bounding_box()
        assert wrap["y"] <= canvas["y"] + y and canvas["y"] + y + ROW <= wrap["y"] + wrap["height"]


def test_modules_are_ordered_by_device_time(page, bert):
    with running([bert]) as url:
        open_view(page, url, "modules")
        shown = page.locator("main tbody tr").evaluate_all("rs => rs.map(r => r.cells[0].textContent)")
        nodes = page.evaluate(f"fetch('{url}/api/0/modules').then(r => r.json())")["nodes"]
    assert shown == [n["name"] for n in nodes]
    # depth-first: each node's children follow it, largest device time first; roots likewise
    children: dict[str, list[float]] = {}
    for n in nodes:
        parent = n["path"].rsplit("/", 1)[0] if "/" in n["path"] else ""
        children.setdefault(parent, []).append(n["device_us"])
    assert any(len(v) > 1 for v in children.values())
    for times in children.values():
        assert times == sorted(times, reverse=True), times
    seen: set[str] = set()
    for n in nodes:  # a parent comes before its children
        if "/" in n["path"]:
            assert n["path"].rsplit("/", 1)[0] in seen
        seen.add(n["path"])
    # BertModel's largest child is its encoder, though its embeddings come first by name
    under_model = [n["name"] for n in nodes if n["path"].count("/") == 2 and n["path"].split("/")[1] == "BertModel"]
    assert under_model[:2] == ["BertEncoder", "BertEmbeddings"], under_model


LONG = "void at::native::vectorized_elementwise_kernel<4, " + "Functor" * 120 + ">(int, at::detail::Array<char*, 3>)"


def long_kernel_trace(tmp_path):
    doc = json.load(gzip.open(trace_path("h100_bert_small.json.gz")))
    renamed = 0
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e.get("name", "").startswith("void cutlass::Kernel2<cutlass_80_wmma"):
            e["name"] = LONG
            renamed += 1
    assert renamed
    p = tmp_path / "long.json"
    p.write_text(json.dumps(doc))
    return p


def test_long_kernel_names_stay_inside_the_page(page, tmp_path):
    with profuse.load(long_kernel_trace(tmp_path)) as t:
        (kid,), = t.con.execute("SELECT id FROM events WHERE name = ? ORDER BY ts LIMIT 1", [LONG]).fetchall()
        (op_id,), = t.con.execute("SELECT op FROM events WHERE id = ?", [kid]).fetchall()
        with running([t]) as url:
            width = page.evaluate("window.innerWidth")
            # the ops table, grouped by kernel, and an op's kernel list
            open_view(page, url, "ops")
            page.fill("#ops-filter", "aten::addmm")
            page.locator("main table").first.locator("tbody tr").first.click()
            page.wait_for_selector("#op-kernels tbody tr")
            assert LONG in page.inner_text("#op-kernels")  # wrapped, all of it there
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            # the timeline's list of an op's kernels: cut at the end, the full name on hover
            open_view(page, url, "timeline", f"&sel={op_id}")
            page.wait_for_selector("#kernel-list li")
            item = page.locator("#kernel-list li .kname", has_text="vectorized_elementwise").first
            assert item.get_attribute("title") == LONG
            assert item.evaluate("e => e.scrollWidth > e.clientWidth"), "the long name is cut to fit"
            assert "µs" in item.evaluate("e => e.parentElement.innerText")  # its times still show
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            # the selected kernel's own name wraps inside the details box
            open_view(page, url, "timeline", f"&sel={kid}")
            page.wait_for_selector("#op-chain")
            assert page.locator("#details b").first.inner_text() == LONG
            assert page.evaluate("document.documentElement.scrollWidth") <= width
