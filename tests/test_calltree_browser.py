"""The Python call tree, the timeline's search box, the details pane's shapes and stack, and kernels'
launch configurations, in the explorer in a real browser (Debian's Chromium through Playwright), with
expected figures read from the raw JSON; and names with markup in them shown as text."""
from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest
import test_explorer_browser as explorer_browser
from conftest import trace_path
from explorer_util import running
from oracle import category, complete_events
from test_calltree import oracle_tree
from test_explorer_browser import HOSTILE, open_view

import profuse
from profuse.analysis.calltree import split_name

browser, page, pytestmark = explorer_browser.browser, explorer_browser.page, explorer_browser.pytestmark
BERT = "h100_bert_small.json.gz"


@pytest.fixture(scope="module")
def bert():
    t = profuse.load(trace_path(BERT))
    yield t
    t.close()


def test_the_call_tree_view_shows_the_top_function_with_its_time(page, bert):
    # the oracle: the root call path with the most time, and its total
    expected = oracle_tree(trace_path(BERT))
    top = max((p for p in expected if len(p) == 1), key=lambda p: expected[p][1])
    with running([bert]) as url:
        open_view(page, url, "calltree")
        first = page.locator("#calltree tbody tr").first
        assert split_name(top[0])[0] in first.inner_text()
        assert f"{expected[top][1] / 1e6:.2f} ms" in first.inner_text()  # ns -> ms
        # a click closes an opened node: its children go; Enter on it opens it again
        rows = page.locator("#calltree tbody tr").count()
        first.click()
        assert page.locator("#calltree tbody tr").count() < rows
        page.locator("#calltree tbody tr").first.press("Enter")
        assert page.locator("#calltree tbody tr").count() == rows
        # the filter keeps the matching nodes and the nodes above them
        page.fill("#calltree-filter", "scaled_dot_product")
        shown = page.locator("#calltree tbody tr")
        assert "scaled_dot_product" in shown.last.inner_text()
        assert split_name(top[0])[0] not in shown.first.inner_text() or shown.count() > 1


def test_the_timeline_search_box_finds_an_op_and_details_show_its_shapes_and_stack(page, bert):
    # the oracle: the aten::linear events in time order, the first one's input dims
    linears = sorted((e for e in complete_events(trace_path(BERT)) if "aten::linear" in e["name"].lower()),
                     key=lambda e: (e["ts"], e["order"]))
    assert linears
    first_dims = linears[0]["args"]["Input Dims"]
    # asked before the server starts: the trace's connection then serves its requests alone
    ts_of = dict(bert.con.execute("SELECT id, ts FROM events").fetchall())
    kind_of = dict(bert.con.execute("SELECT id, kind FROM events").fetchall())
    first_ts = bert.con.execute("SELECT min(ts) FROM events WHERE name = 'aten::linear'").fetchall()[0][0]
    with running([bert]) as url:
        open_view(page, url, "timeline")
        # "/" goes to the search box; Enter finds the first match and selects it on the timeline
        page.locator("canvas").focus()
        page.keyboard.press("/")
        assert page.evaluate("document.activeElement.id") == "tl-search"
        page.keyboard.type("ATEN::LINEAR")
        page.keyboard.press("Enter")
        page.wait_for_function("s => document.getElementById('tl-found').textContent.startsWith(s)", arg="1 of")
        assert page.inner_text("#tl-found") == f"1 of {len(linears)}"
        page.wait_for_selector("#event-more")
        assert page.inner_text("#details").startswith("aten::linear")
        selected = page.evaluate("window.profuseTimeline.selected")
        assert ts_of[selected] == first_ts
        # AND the details pane gives its input shapes and the Python stack it ran in
        shapes = page.inner_text("#event-shapes")
        assert all(json.dumps(d) in shapes for d in first_dims if d)
        stack = page.locator("#event-stack li").all_inner_texts()
        assert "torch/nn/modules/linear.py(124): forward" in stack[:3]
        # AND Enter again goes to the next match; Shift+Enter back
        page.keyboard.press("Enter")
        page.wait_for_function("s => document.getElementById('tl-found').textContent.startsWith(s)", arg="2 of")
        page.keyboard.press("Shift+Enter")
        page.wait_for_function("s => document.getElementById('tl-found').textContent.startsWith(s)", arg="1 of")
        # the same event selected again: its details once, not twice (found by review)
        page.wait_for_selector("#event-more")
        again = page.evaluate("window.profuseTimeline.selected")
        page.evaluate("id => window.profuseTimeline.select(id)", again)
        page.wait_for_timeout(500)
        assert page.locator("#details #event-more").count() == 1
        assert page.locator("#details #event-stack").count() == 1
        # AND a click on a frame of the stack selects that frame
        page.locator("#event-stack li").first.click()
        page.wait_for_function("id => window.profuseTimeline.selected !== id", arg=selected)
        frame = page.evaluate("window.profuseTimeline.selected")
        page.wait_for_function("id => document.getElementById('details').dataset.id === String(id) "
                               "&& document.getElementById('event-more') !== null", arg=frame)
        assert kind_of[frame] == "python"


def test_the_kernel_view_shows_grid_and_block(page, bert):
    # the oracle: each kernel name's most used (grid, block) from the kernels' args
    configs: dict[str, Counter] = {}
    for e in complete_events(trace_path(BERT)):
        a = e.get("args") or {}
        if category(e) == "kernel" and "grid" in a:
            configs.setdefault(e["name"], Counter())[("×".join(map(str, a["grid"])), "×".join(map(str, a["block"])))] += 1
    name = next(n for n in configs if n.startswith("void at::native::(anonymous namespace)::indexSelectLargeIndex"))
    (grid, block), _ = configs[name].most_common(1)[0]
    op = bert.con.execute("SELECT o.name FROM events k JOIN events o ON o.id = k.op WHERE k.name = ? LIMIT 1",
                          [name]).fetchall()[0][0]
    with running([bert]) as url:
        open_view(page, url, "ops", "&group=kernel")
        heads = page.locator("main table thead th").all_inner_texts()
        assert "Grid" in heads and "Block" in heads
        row = page.locator("main table tbody tr", has_text="indexSelectLargeIndex").first
        cells = row.locator("td").all_inner_texts()
        assert cells[heads.index("Grid")].startswith(grid) and cells[heads.index("Block")].startswith(block)
        # AND the kernels under an op row carry them too
        open_view(page, url, "ops", "&group=op")
        page.fill("#ops-filter", op)
        page.locator("main table tbody tr", has_text=op).first.click()
        page.wait_for_selector("#op-kernels table")
        assert grid in page.inner_text("#op-kernels") and block in page.inner_text("#op-kernels")


def _hostile_python_trace(tmp_path):
    """A CPU trace whose Python frames and ops are named with markup, the op with shapes."""
    base = 1_000_000.0
    ev = [{"ph": "X", "cat": "python_function", "name": HOSTILE[0], "pid": 1, "tid": 1, "ts": base, "dur": 100.0,
           "args": {"Python id": 1, "Python parent id": None}},
          {"ph": "X", "cat": "python_function", "name": HOSTILE[1], "pid": 1, "tid": 1, "ts": base + 10, "dur": 60.0,
           "args": {"Python id": 2, "Python parent id": 1}},
          {"ph": "X", "cat": "cpu_op", "name": HOSTILE[2], "pid": 1, "tid": 1, "ts": base + 20, "dur": 30.0,
           "args": {"Input Dims": [[2, 3]], "Input type": ["<b>float</b>"], "Concrete Inputs": ["<i>x</i>"]}}]
    p = tmp_path / "hostile_python.json.gz"
    with gzip.open(p, "wt") as fh:
        json.dump({"traceEvents": ev}, fh)
    return p


def test_names_with_markup_show_as_text_in_the_tree_search_and_details(page, tmp_path):
    with profuse.load(_hostile_python_trace(tmp_path)) as trace, running([trace]) as url:
        open_view(page, url, "calltree")
        text = page.inner_text("#calltree")
        assert HOSTILE[0] in text and HOSTILE[1] in text
        open_view(page, url, "timeline")
        page.fill("#tl-search", "a&b<c>")
        page.press("#tl-search", "Enter")
        page.wait_for_selector("#event-more")
        details = page.inner_text("#details")
        assert HOSTILE[2] in details and "<b>float</b>[2,3]" in details.replace(" ", "") and "<i>x</i>" in details
        assert HOSTILE[1] in page.inner_text("#event-stack")
        assert page.evaluate("window.__pwned") is None
        assert page.locator("main img").count() == 0 and page.locator("main script").count() == 0
        assert page.locator("main b", has_text="float").count() == 0
