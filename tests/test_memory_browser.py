"""Memory in the explorer and the HTML report, in a real browser (Debian's Chromium through Playwright):
the timeline's memory lanes, the peak marked, a click on a lane showing what is live, the op table's
memory columns. Expected numbers come from the raw trace (tests/oracle.py)."""
from __future__ import annotations

import oracle
import pytest
import test_explorer_browser as explorer_browser
from conftest import trace_path
from explorer_util import running, scroll_timeline_to
from test_explorer_browser import open_view, wait_ready

import profuse
from profuse.cli import main

browser, page, pytestmark = explorer_browser.browser, explorer_browser.page, explorer_browser.pytestmark
BERT = "h100_bert_small.json.gz"


@pytest.fixture(scope="module")
def bert():
    t = profuse.load(trace_path(BERT))
    yield t
    t.close()


def _click_peak(page, lane: int) -> None:
    x, y = page.evaluate(f"window.profuseTimeline.counters[{lane}].peakXY")
    # the lanes scroll in their box (it opens on the device lanes): bring the memory lane's peak in view
    scroll_timeline_to(page, y)
    box = page.locator("canvas").first.bounding_box()
    page.mouse.click(box["x"] + x + 1, box["y"] + y + 4)


def test_explorer_timeline_has_memory_lanes_with_the_peak_and_shows_what_is_live(page, bert):
    peaks = oracle.peak_allocated_by_device(trace_path(BERT))
    with running([bert]) as url:
        # WHEN the timeline opens
        open_view(page, url, "timeline")
        page.wait_for_function("window.profuseTimeline.counters.length > 0")
        lanes = page.evaluate("window.profuseTimeline.counters.map(l => [l.device, l.points[l.peak][1]])")
        # THEN there is one memory lane per device, each peak the largest Total Allocated of the trace
        assert lanes == [["CUDA 0", peaks[(1, 0)]], ["CPU", peaks[(0, -1)]]]
        # AND a click at the CUDA peak says what is live there, by the op and module that allocated it
        _click_peak(page, 0)
        page.wait_for_selector("#memory-live")
        text = page.inner_text("#details")
        assert "CUDA 0" in text and "(the peak)" in text and "96.61 MiB" in text
        assert "aten::addmm" in text and "Linear" in text and "(allocated before the trace)" in text
        # AND the op table has the memory columns
        page.click('#nav a[data-view="ops"]')
        wait_ready(page, "ops")
        assert "Self CUDA Mem" in page.inner_text("main")


def test_report_timeline_shows_the_memory_lanes_and_the_peak_from_the_embedded_data(page, tmp_path):
    out = tmp_path / "bert.html"
    assert main(["report", str(trace_path(BERT)), "--format", "html", "-o", str(out)]) == 0
    page.goto(out.as_uri() + "#view=timeline")
    wait_ready(page, "timeline")
    page.wait_for_function("window.profuseTimeline.counters.length === 2")
    _click_peak(page, 0)
    page.wait_for_selector("#memory-live")
    assert "(the peak)" in page.inner_text("#details") and "aten::addmm" in page.inner_text("#memory-live")


def test_timeline_without_memory_has_no_memory_lane(page):
    with profuse.load(trace_path("a100_alexnet.json.gz")) as t, running([t]) as url:
        open_view(page, url, "timeline")
        assert page.evaluate("window.profuseTimeline.counters.length") == 0
