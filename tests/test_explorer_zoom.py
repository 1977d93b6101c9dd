"""The timeline's windows at fixed buckets, and the explorer zooming in the page from what it holds.

A window is complete over any view inside it at its level of detail, so the page draws a zoom or pan
there without a request; what it draws is what a fetch of that view itself would draw.
"""
from __future__ import annotations

import random

import oracle
import pytest
from conftest import trace_path
from explorer_util import running

import profuse
from profuse.analysis.timeline import bucket_ns_for, timeline_model, timeline_window

TRACES = ["h100_bert_small.json.gz", "v100_ns_timestamps.json.gz", "mtia_inference.json.gz"]
WIDTH = 1180


def _items(w, v0, v1):
    """The window's entries that a view of [v0, v1] draws (timeline_model.js decimate keeps the same)."""
    return [(w.lane[i], w.row[i], w.ts[i], w.dur[i], w.names[w.name[i]], w.id[i], w.n[i], w.kinds[w.kind[i]])
            for i in range(len(w.id)) if w.ts[i] + w.dur[i] >= v0 and w.ts[i] <= v1]


@pytest.mark.parametrize("name", TRACES)
def test_full_window_counts_every_complete_event_once(name):
    # GIVEN the whole trace at a screen's width; every complete event of the raw file, by the oracle
    path = trace_path(name)
    with profuse.load(path) as t:
        model = timeline_model(t)
        w = timeline_window(model, None, None, WIDTH)
        model.close()
    # THEN events and merged blocks together hold each event once, and blocks are sub-bucket merges
    assert sum(w.n) == len(oracle.complete_events(path))
    assert any(n > 1 for n in w.n), "the whole trace at a screen's width merges something"
    assert w.bucket_ns & (w.bucket_ns - 1) == 0 and w.bucket_ns * 2 > (w.span[1] - w.span[0]) * 1e3 / WIDTH
    assert all(d * 1e3 < 2 * w.bucket_ns for d, n in zip(w.dur, w.n, strict=True) if n > 1), \
        "a block's members start within one bucket and each is shorter than it"


@pytest.mark.parametrize("name", TRACES)
def test_a_wider_window_at_the_views_level_draws_the_view_as_its_own_window(name):
    # GIVEN views of every scale, and for each a window around it (a margin each side) at its level
    rng = random.Random(7)
    with profuse.load(trace_path(name)) as t:
        model = timeline_model(t)
        lo, hi = model.span_us
        checked = merged = 0
        for _ in range(60):
            width = (hi - lo) / (10 ** rng.uniform(0, 4))
            v0 = rng.uniform(lo - width * 0.1, hi - width * 0.5)
            v1 = v0 + width
            bk = bucket_ns_for(v0, v1, WIDTH)
            margin = width * rng.uniform(0, 0.5)
            wide = timeline_window(model, v0 - margin * rng.random(), v1 + margin, WIDTH, bk)
            own = timeline_window(model, v0, v1, WIDTH)
            # THEN the wide one is at that level, holds the view, and gives exactly its entries
            assert own.bucket_ns == wide.bucket_ns == bk
            assert wide.t0 <= max(v0, lo) and min(v1, hi) <= wide.t1
            assert _items(wide, v0, v1) == _items(own, v0, v1)
            checked += len(_items(own, v0, v1))
            merged += sum(1 for n in own.n if n > 1)
        model.close()
    assert checked > 100 and merged > 10, "the views cover events and merged blocks"


def test_a_window_too_fine_for_its_span_is_refused():
    with profuse.load(trace_path("h100_bert_small.json.gz")) as t:
        model = timeline_model(t)
        lo, hi = model.span_us
        with pytest.raises(ValueError, match="bucket"):
            timeline_window(model, lo, hi, WIDTH, 1)
        with pytest.raises(ValueError, match="power of two"):
            timeline_window(model, lo, hi, WIDTH, 3 << 20)
        model.close()


# ---- in the browser ----------------------------------------------------------------------------------

DRAWN = """async () => {
  const tl = window.profuseTimeline, M = profuse.timelineModel;
  const describe = (d, boxes) => boxes.map(b => [b.x, b.y, b.w, d.id[b.i], d.n[b.i], d.names[d.name[b.i]],
    d.kinds[d.kind[b.i]], d.ts[b.i], d.dur[b.i]]);
  const [a, b] = tl.view, w = tl.width(), win = tl.window();
  const fresh = await tl.source.get(`/api/${tl.run}/timeline?t0=${a}&t1=${b}&width=${w}`);
  const d = M.decimate(fresh, win);
  const boxes = M.layoutBoxes(d, new Map(tl.lanes.map(l => [l.lane, l])), win, profuse.timelineView.ROW);
  return { page: describe(tl.drawn, tl.boxes), fresh: describe(d, boxes), view: tl.view, width: w,
    bucket: tl.data.bucket_ns, level: M.bucketNs(tl.view, w) };
}"""

SET_HASH = """async hash => {
  document.body.dataset.ready = "";
  location.hash = hash;
  await new Promise(done => {
    const ob = new MutationObserver(() => { if (document.body.dataset.ready) { ob.disconnect(); done(); } });
    ob.observe(document.body, { attributes: true, attributeFilter: ["data-ready"] });
  });
  return document.body.dataset.ready;
}"""




def test_zoom_and_pan_in_the_page_draw_what_a_fetch_of_the_view_draws(browser):
    # GIVEN the explorer on a 45k-event trace, its timeline at a view that needed a fetch
    with profuse.load(trace_path("v100_ns_timestamps.json.gz")) as t, running([t]) as url:
        page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        fetched: list[str] = []
        page.on("request", lambda r: fetched.append(r.url) if "/timeline?" in r.url else None)
        page.goto(url.at("/#view=timeline"))
        page.wait_for_selector("canvas[data-painted]", state="attached", timeout=15000)
        lo, hi = page.evaluate("window.profuseTimeline.span")
        a, b = lo + (hi - lo) * 0.30, lo + (hi - lo) * 0.34
        assert page.evaluate(SET_HASH, f"#view=timeline&t0={a:.3f}&t1={b:.3f}") == "timeline"
        first = page.evaluate(DRAWN)
        assert first["page"] == first["fresh"]
        n_fetched = len(fetched)
        # WHEN the URL moves the view within what the page holds, at the same level of detail
        for moves, (f0, f1) in enumerate([(0.1, 0.1), (-0.3, -0.3), (0.02, -0.02), (0.2, 0.25), (-0.05, 0.0)], 1):
            w = b - a
            a2, b2 = a + w * f0, b + w * f1
            assert page.evaluate(SET_HASH, f"#view=timeline&t0={a2:.3f}&t1={b2:.3f}") == "timeline"
            drawn = page.evaluate(DRAWN)
            # THEN it draws exactly the boxes of a fresh fetch of that view, and no request went out
            # for it (the comparison's own fetch is the one after it)
            assert drawn["page"] == drawn["fresh"], (a2, b2)
            assert drawn["bucket"] == drawn["level"]
            assert len(fetched) == n_fetched + moves, "the move itself fetched nothing"
            assert any(box[4] > 1 for box in drawn["page"]) or len(drawn["page"]) > 50
        # WHEN it pans past what the page holds on one side: only that side is fetched, and merged
        for step in (0.8, 0.9, -2.5):
            held = page.evaluate("[window.profuseTimeline.data.t0, window.profuseTimeline.data.t1]")
            w = b2 - a2
            a2, b2 = a2 + w * step, b2 + w * step
            before = len(fetched)
            assert page.evaluate(SET_HASH, f"#view=timeline&t0={a2:.3f}&t1={b2:.3f}") == "timeline"
            assert len(fetched) == before + 1
            q = dict(kv.split("=") for kv in fetched[-1].split("?", 1)[1].split("&"))
            assert float(q["t0"]) == held[1] if step > 0 else float(q["t1"]) == held[0], (q, held)
            drawn = page.evaluate(DRAWN)
            assert drawn["page"] == drawn["fresh"], (a2, b2)
            assert len(drawn["page"]) > 50
        # WHEN it zooms out past the level: one fetch, and still the boxes of a fresh fetch
        before = len(fetched)
        assert page.evaluate(SET_HASH, f"#view=timeline&t0={lo:.3f}&t1={lo + (hi - lo) * 0.6:.3f}") == "timeline"
        assert len(fetched) == before + 1
        drawn = page.evaluate(DRAWN)
        assert drawn["page"] == drawn["fresh"]
        assert any(box[4] > 1 for box in drawn["page"]), "zoomed out, sub-pixel events merge"
        page.context.close()
        assert not errors, errors


def test_a_url_change_of_window_updates_the_timeline_in_place(browser):
    # GIVEN the timeline open, its lanes loaded once
    with profuse.load(trace_path("h100_bert_small.json.gz")) as t, running([t]) as url:
        page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
        lanes: list[str] = []
        page.on("request", lambda r: lanes.append(r.url) if r.url.endswith("/lanes") else None)
        page.goto(url.at("/#view=timeline"))
        page.wait_for_selector("canvas[data-painted]", state="attached", timeout=15000)
        page.evaluate("window.__same = window.profuseTimeline")
        lo, hi = page.evaluate("window.profuseTimeline.span")
        # WHEN the URL's window changes, then its view
        assert page.evaluate(SET_HASH, f"#view=timeline&t0={lo:.3f}&t1={(lo + hi) / 2:.3f}") == "timeline"
        # THEN the same timeline shows it (no new page, no second lanes request)
        assert page.evaluate("window.__same === window.profuseTimeline")
        view = page.evaluate("window.profuseTimeline.view")
        assert abs(view[0] - round(lo, 3)) < 1e-6 and abs(view[1] - round((lo + hi) / 2, 3)) < 1e-6
        assert len(lanes) == 1
        assert page.evaluate(SET_HASH, "#view=ops") == "ops"
        assert page.evaluate("window.profuseTimeline === undefined")
        page.context.close()
