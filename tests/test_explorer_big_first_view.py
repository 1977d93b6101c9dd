"""The timeline's first view on a trace opened the first time: coarse, from the events without the lane
model, drawn before the model is built; then the model's exact view replaces it (issue 44, item 6)."""
from __future__ import annotations

import json

import oracle
import pytest
from conftest import trace_path
from explorer_util import running

import profuse
from profuse.analysis.timeline import coarse_view, timeline_model, timeline_window
from profuse.explorer import server

TRACES = ["h100_bert_small.json.gz", "v100_ns_timestamps.json.gz", "mtia_inference.json.gz",
          "cpu_only_gloo_rank34.json.gz"]
WIDTH = 1180


@pytest.mark.parametrize("name", TRACES)
def test_the_coarse_view_has_the_models_lanes_span_and_level_and_every_event_once(name):
    # GIVEN a real trace, its coarse first view and (for comparison) the lane model's whole span
    path = trace_path(name)
    with profuse.load(path) as t:
        coarse = coarse_view(t, WIDTH)
        model = timeline_model(t)
        exact = timeline_window(model, None, None, WIDTH)
        lanes = model.lanes
        model.close()
    w = coarse.window
    # THEN it is marked coarse, and its lanes are the model's (numbers, kinds, labels, events), one row each
    assert coarse.exact is False
    assert [(x.lane, x.kind, x.label, x.events) for x in coarse.lanes] == [(x.lane, x.kind, x.label, x.events)
                                                                          for x in lanes]
    assert all(x.rows == 1 for x in coarse.lanes) and set(w.row) == {0}
    # AND its span, level of detail and range are the exact view's, so the page draws both over one axis
    assert (w.span, w.bucket_ns, w.t0, w.t1) == (exact.span, exact.bucket_ns, exact.t0, exact.t1)
    # AND its blocks hold every complete event of the raw file once (by the oracle), each lane's its own
    assert sum(w.n) == len(oracle.complete_events(path))
    for lane in coarse.lanes:
        assert sum(n for i, n in enumerate(w.n) if w.lane[i] == lane.lane) == lane.events
    # AND no block reaches outside the span, and no two blocks of a lane start in one bucket
    assert all(w.span[0] <= ts and ts + d <= w.span[1] + 1e-3 for ts, d in zip(w.ts, w.dur))
    starts = [(w.lane[i], int(w.ts[i] * 1e3 // w.bucket_ns)) for i in range(len(w.id))]
    assert len(set(starts)) == len(starts)
    # AND each block is named by a member: an event of that lane's kinds with that name
    kinds = {x.lane: x.kind for x in coarse.lanes}
    lane_kinds = {"scopes": {"python", "annotation"}, "ops": {"cpu_op", "sync", "other"}, "runtime": {"runtime"},
                  "stream": {"kernel", "memcpy", "memset", "gpu_annotation", "device_other"}}
    assert all(w.kinds[w.kind[i]] in lane_kinds[kinds[w.lane[i]]] for i in range(len(w.id)))




def test_the_timeline_paints_its_coarse_first_view_before_the_model_then_the_exact_one(browser, monkeypatch):
    # GIVEN the explorer on a real trace opened the first time, its model built only when a request
    # wants it or the first view has been answered (not on a timer that a slow page load could beat)
    monkeypatch.setattr(server, "WANT_WITHIN_S", 600.0)
    path = trace_path("v100_ns_timestamps.json.gz")
    with profuse.load(path) as t, running([t]) as url:
        page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        asked: list[str] = []
        page.on("request", lambda r: asked.append(r.url.split("/api/0/")[-1].split("?")[0]) if "/api/0/" in r.url else None)
        answers: dict[str, bytes] = {}
        page.on("response", lambda r: answers.setdefault("first_view", r.body()) if "/first_view?" in r.url else None)
        # WHEN the page opens on the timeline and has drawn the exact view
        page.goto(url.at("/#view=timeline"))
        page.wait_for_selector("canvas[data-painted]", state="attached", timeout=30000)
        page.wait_for_selector("body[data-ready=timeline]", state="attached", timeout=30000)
        first_drawn = page.evaluate("document.querySelector('canvas').dataset.first")
        marks = page.evaluate("""() => ["profuse:timeline-first", "profuse:timeline-painted"].map(
            n => performance.getEntriesByName(n)[0].startTime)""")
        held = page.evaluate("""() => { const d = window.profuseTimeline.data;
            return {n: d.n, lane: d.lane, row: d.row, bucket: d.bucket_ns,
                    rows: window.profuseTimeline.lanes.map(l => l.rows), width: window.profuseTimeline.width()}; }""")
        model = url.app.state.runs[0].loaded.model
        exact = timeline_window(model, None, None, held["width"])
        lanes = model.lanes
    assert not errors, errors
    # THEN the first view was asked for first, and answered coarse: the model was not built yet
    assert asked.index("first_view") < asked.index("lanes") and asked.index("first_view") < asked.index("timeline")
    first = json.loads(answers["first_view"])
    assert first["exact"] is False and set(first["window"]["row"]) == {0}
    # AND the page drew that coarse view first, then the model's exact view
    assert first_drawn == "coarse"
    assert marks[0] < marks[1]
    # AND what it holds at the end is the model's whole span: its lanes' rows, its events and blocks
    assert held["rows"] == [x.rows for x in lanes] and max(held["rows"]) > 1
    assert (held["bucket"], held["lane"], held["row"], held["n"]) == (exact.bucket_ns, exact.lane, exact.row, exact.n)
    assert sum(held["n"]) == len(oracle.complete_events(path))


def test_the_overview_draws_its_head_while_the_diagnosis_is_computed_then_the_whole(browser):
    # GIVEN the explorer on a real trace, and the page's request for the whole Overview held back until
    # the test lets it go (the diagnosis taking its time)
    import threading

    path = trace_path("h100_bert_small.json.gz")
    with profuse.load(path) as t, running([t]) as url:
        page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        go = threading.Event()
        held: list = []
        page.route("**/api/0/overview", lambda route: held.append(route))
        # WHEN the page opens on the Overview
        page.goto(url.at("/#view=overview"))
        # THEN it draws the head (the trace's line, the device time by category, trace health) with the
        # advice pending, before the whole Overview is answered
        page.wait_for_selector("#advice-state[data-state=pending]", timeout=30000)
        cards = page.eval_on_selector_all(".card[data-category]", "els => els.map(e => e.dataset.category)")
        head = page.inner_text("#main")
        assert held and not go.is_set()
        assert cards and "Trace health" in head and page.query_selector("#no-advice") is None
        assert "time by category" in head and "Hotspots" not in head
        # AND once the whole is answered, it draws the diagnosis and the advice in its place
        held[0].continue_()
        page.wait_for_selector("#advice-state[data-state=done]", state="attached", timeout=60000)
        page.wait_for_selector("body[data-ready=overview]", state="attached", timeout=30000)
        whole = page.inner_text("#main")
        want = build_overview(t)
    assert not errors, errors
    assert "Hotspots" in whole and "diagnosing the trace" not in whole
    assert want.advice is not None and all(h.name[:30] in whole for h in want.advice.hotspots[:3])


def build_overview(trace):
    """The Overview the server answers, built here through the payload (the same records)."""
    from profuse.payloads import build

    return build.overview_of(trace)


def test_the_models_build_waits_for_a_request_computing_on_its_run_unless_wanted(monkeypatch):
    # GIVEN a run of the explorer on a real trace, its model's build waiting for the first view (no timer)
    import threading
    import time

    monkeypatch.setattr(server, "WANT_WITHIN_S", 600.0)
    path = trace_path("v100_ns_timestamps.json.gz")
    with profuse.load(path) as t:
        run = server.Run(t, threading.Event())
        # WHEN a request computes on the run (it holds the run's lock) while the first view is answered, and
        # goes on well past the grace after which the build is due
        with run.held():
            run.want_model()
            time.sleep(server.VIEWED_GRACE_S + 0.7)
            # THEN the build has not started beside it: the model's memory and the request's do not add up
            waited = not run._building.built() and run._building._thread.is_alive()
        # AND once the request ends the build goes on by itself and the model is built
        deadline = time.monotonic() + 60
        while not run._building.built() and time.monotonic() < deadline:
            time.sleep(0.02)
        after_release = run._building.built()
        # AND a second run, wanted while a request holds it (a timeline request needs the model), builds at once
        other = server.Run(t, threading.Event())
        with other.held():
            other._building.want()
            deadline = time.monotonic() + 60
            while not other._building.built() and time.monotonic() < deadline:
                time.sleep(0.02)
            wanted_while_held = other._building.built()
        other._building.close()
        run._building.close()
    assert waited
    assert after_release
    assert wanted_while_held
