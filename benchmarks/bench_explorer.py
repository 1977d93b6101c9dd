"""Explorer scale benchmark: open a >= 1.36M-event trace in a real browser and zoom its timeline.

    python benchmarks/bench_explorer.py [--events 1357169] [--reps 3] [--zooms 40] [--no-browser] [--rows FILE]

The trace is the 216k-event V100 trace repeated with shifted times and ids (bench_load.big_trace: 123,379
complete events per copy; the default is 11 copies, 1,357,169 events). Its table cache is built once,
untimed. Measured, in this process (imports done, the cache file in the OS cache):

- API level: the timeline model's build (analysis/timeline.py), the first full-view window, and one
  viewport's window (query and JSON encoding) at zoom levels from the whole trace down to 50 µs.
- Browser (Playwright's client driving /usr/bin/chromium, launched before the clock starts): first
  paint = from `profuse.load` of the cached trace as `profuse explore` loads it (``verify="behind"``: the
  cache found by the trace's stat entry, its bytes hashed on a thread, checked before the server
  answers anything from it), through starting the explorer's real server
  (uvicorn on 127.0.0.1), to the page at `#view=timeline` having drawn its boxes (the page's
  ``profuse:timeline-painted`` mark, set with the canvas's `data-painted` on the first draw with events,
  read on the same wall clock as the start; Playwright's poll notices it about 0.1 s later here, which
  the log shows beside it); min of --reps, each a fresh load and server.
  Zoom = the URL's hash set to a new window until `body[data-ready]` says the timeline drew it, timed
  in the page: wheel-like steps (x0.8 in or x1.25 out about a random point, as the wheel zooms), and
  jumps to random windows of any width (each one a fetch); median and p90 of --zooms each.

Baselines from the same run: the cached `profuse.load` alone (the floor of opening anything) and the
API-level window (the floor of a zoom that needs the server). Prints the figures; with ``--rows FILE``
writes them as make bench's rows (benchmarks/_rows.py). Never fails on a figure.
"""
from __future__ import annotations

import argparse
import os
import random
import secrets
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import bench_load
from _rows import Row, write_rows

CHROMIUM = "/usr/bin/chromium"
EVENTS_PER_COPY = 123_379  # complete events of the V100 trace, 46.9 MB of JSON as big_trace measures it
COPY_GB = 0.046878
FIRST_PAINT_TARGET_S = 1.0
ZOOM_TARGET_MS = 100.0

WAIT_DRAWN = """async hash => {
  const body = document.body;
  body.dataset.ready = "";
  const t = performance.now();
  location.hash = hash;
  await new Promise(done => {
    if (body.dataset.ready === "timeline") return done();
    const ob = new MutationObserver(() => {
      if (body.dataset.ready === "timeline" || body.dataset.ready === "error") { ob.disconnect(); done(); }
    });
    ob.observe(body, { attributes: true, attributeFilter: ["data-ready"] });
  });
  if (body.dataset.ready === "error") throw new Error(body.dataset.error);
  return performance.now() - t;
}"""


def trace_of(events: int) -> Path:
    """The synthetic trace with at least ``events`` complete events (whole copies of the V100 trace)."""
    copies = -(-events // EVENTS_PER_COPY)
    for digits in (1, 2, 3):  # the shortest size that makes that many copies: int(gb / copy) + 1 (1.36M: 0.5 GB)
        gb = round((copies - 0.5) * COPY_GB, digits)
        if (copies - 1) * COPY_GB <= gb < copies * COPY_GB:
            break
    return bench_load.big_trace(gb)


class Server:
    """The explorer's app on uvicorn in a thread, on 127.0.0.1, with `profuse explore`'s socket and
    configuration."""

    def __init__(self, traces: list[Any]) -> None:
        import uvicorn

        from profuse.explorer.server import create_app, listening_socket, server_config

        token = secrets.token_urlsafe(32)
        self.sock = listening_socket()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/?token={token}"  # as `profuse explore` prints it
        self.server = uvicorn.Server(server_config(create_app(traces, token=token)))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.002)

    def stop(self) -> None:
        """Shut the server down and free its port."""
        self.server.should_exit = True
        self.thread.join(5)
        self.sock.close()


def api_level(path: Path, rng: random.Random) -> dict[str, Any]:
    """The model's build, the first window and viewport windows, without a browser."""
    import msgspec

    import profuse
    from profuse.analysis.timeline import timeline_model, timeline_window

    t = time.perf_counter()
    trace = profuse.load(path)
    t_load = time.perf_counter() - t
    c = time.process_time()
    model = timeline_model(trace)
    t_model, c_model = time.perf_counter() - t - t_load, time.process_time() - c
    s = time.perf_counter()
    first = timeline_window(model, None, None, 1600)
    msgspec.json.encode(first)
    t_first = time.perf_counter() - s
    lo, hi = first.span
    times = []
    for _ in range(60):
        width = (hi - lo) / (10 ** rng.uniform(0, 5))
        a = rng.uniform(lo, max(lo, hi - width))
        s = time.perf_counter()
        msgspec.json.encode(timeline_window(model, a, a + max(width, 50.0), 1600))
        times.append((time.perf_counter() - s) * 1e3)
    out = dict(events=trace.meta["events"], lanes=len(model.lanes), load=t_load, model=t_model, model_cpu=c_model,
               first=t_first, boxes=len(first.id), windows=sorted(times), span=(lo, hi))
    model.close()
    trace.close()
    return out


PAINTED_AT = """() => {
  const mark = performance.getEntriesByName("profuse:timeline-painted")[0];
  return mark ? performance.timeOrigin + mark.startTime : null;
}"""


def first_paint(browser: Any, path: Path) -> tuple[float, float, float, float, Any, Any, Any]:
    """Seconds from `profuse.load` to the timeline's boxes drawn (the page's own mark, set as the canvas
    draws them: time.time() against performance.timeOrigin, one clock), to Playwright noticing the canvas's
    `data-painted` (its poll and round trip come on top), of them the load's, and this process's CPU seconds
    meanwhile (the explorer's side: load, model, requests); the page (left open), server, trace."""
    import profuse

    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    page.goto("about:blank")
    wall, t, c = time.time(), time.perf_counter(), time.process_time()
    trace = profuse.load(path, verify="behind")
    t_load = time.perf_counter() - t
    server = Server([trace])
    page.goto(server.url + "#view=timeline")
    page.wait_for_selector("canvas[data-painted]", state="attached", timeout=60_000)
    noticed, cpu = time.perf_counter() - t, time.process_time() - c
    mark = page.evaluate(PAINTED_AT)
    drawn = mark / 1e3 - wall if mark is not None else noticed
    return drawn, noticed, t_load, cpu, page, server, trace


def zooms(page: Any, span: tuple[float, float], n: int, rng: random.Random, steps: bool) -> tuple[list[float], int]:
    """Milliseconds per hash change to the timeline drawn, and how many of them fetched a window."""
    fetched = []
    page.on("request", lambda r: fetched.append(r.url) if "/timeline?" in r.url else None)
    page.wait_for_function("document.body.dataset.ready === 'timeline'", timeout=60_000)
    lo, hi = span
    a, b = lo, hi
    out, n_fetched = [], 0
    for _ in range(n):
        if steps:  # one wheel notch about a random point, in more often than out, kept inside the span
            f = 0.8 if rng.random() < 0.65 or b - a > (hi - lo) * 0.9 else 1.25
            x = a + (b - a) * rng.random()
            a, b = max(lo, x - (x - a) * f), min(hi, x + (b - x) * f)
            if b - a < 20.0:
                a, b = lo, hi
        else:
            w = (hi - lo) / (10 ** rng.uniform(0, 5))
            a = rng.uniform(lo, max(lo, hi - w))
            b = a + max(w, 50.0)
        before = len(fetched)
        out.append(page.evaluate(WAIT_DRAWN, f"#view=timeline&t0={a:.3f}&t1={b:.3f}"))
        n_fetched += len(fetched) > before
    return sorted(out), n_fetched


def p90(xs: list[float]) -> float:
    """The 90th percentile of sorted ``xs`` (nearest rank)."""
    return xs[min(len(xs) - 1, int(len(xs) * 0.9))]


def main() -> int:
    """Run the benchmark; print figures and write rows."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=11 * EVENTS_PER_COPY, help="complete events at least (default 1.36M)")
    ap.add_argument("--reps", type=int, default=3, help="first-paint runs (min of them)")
    ap.add_argument("--zooms", type=int, default=40, help="hash changes per zoom pattern")
    ap.add_argument("--no-browser", action="store_true", help="API-level figures only")
    ap.add_argument("--rows", help="write make bench's rows here (JSON)")
    args = ap.parse_args()
    import profuse

    path = trace_of(args.events)
    profuse.load(path).close()  # build the cache once, untimed
    rng = random.Random(0)
    api = api_level(path, rng)
    print(f"trace: {path}, {api['events']:,} complete events, {api['lanes']} lanes")
    print(f"API: cached load {api['load']:.2f} s, timeline model {api['model']:.2f} s ({api['model_cpu']:.2f} s CPU), "
          f"first window {api['first']:.2f} s ({api['boxes']:,} boxes)")
    w = api["windows"]
    print(f"API pan/zoom window: median {statistics.median(w):.0f} ms, p90 {p90(w):.0f} ms over {len(w)} viewports "
          f"(load average {os.getloadavg()[0]:.1f})")
    base_load = f"cached profuse.load alone {api['load']:.2f} s"
    rows = [Row("explorer timeline model, 1.36M events (API level)", f"{api['model']:.2f} s", "", None,
                base_load),
            Row("explorer pan/zoom window, API level", f"median {statistics.median(w):.0f} ms, p90 {p90(w):.0f} ms",
                "", None)]
    if args.no_browser or not Path(CHROMIUM).exists():
        why = "not run (--no-browser)" if args.no_browser else f"not run: no {CHROMIUM}"
        rows += [Row("explorer first paint, 1.36M events, cached", why, "<= 1 s", None, base_load),
                 Row("explorer zoom in the browser (hash change to data-ready)", why, "median <= 100 ms", None)]
        write_rows(rows, args.rows)
        return 0
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        paints, loads, cpus = [], [], []
        for i in range(args.reps):
            t, noticed, t_load, cpu, page, server, trace = first_paint(browser, path)
            paints.append(t)
            loads.append(t_load)
            cpus.append(cpu)
            print(f"first paint {i + 1}: {t:.2f} s, noticed by Playwright at {noticed:.2f} s (of which cached load "
                  f"{t_load:.2f} s; explorer process CPU "
                  f"{cpu:.2f} s; load average {os.getloadavg()[0]:.1f})")
            if i < args.reps - 1:
                page.context.close()
                server.stop()
                trace.close()
        steps, n_steps = zooms(page, api["span"], args.zooms, rng, steps=True)
        jumps, n_jumps = zooms(page, api["span"], args.zooms, rng, steps=False)
        page.context.close()
        server.stop()
        trace.close()
        browser.close()
    best = min(paints)
    load_avg = f"load average {os.getloadavg()[0]:.1f}"
    print(f"first paint: {best:.2f} s min of {len(paints)} (target <= {FIRST_PAINT_TARGET_S:g} s; {load_avg})")
    print(f"zoom, wheel steps: median {statistics.median(steps):.0f} ms, p90 {p90(steps):.0f} ms, "
          f"{n_steps} of {len(steps)} fetched (target median <= {ZOOM_TARGET_MS:g} ms)")
    print(f"zoom, jumps: median {statistics.median(jumps):.0f} ms, p90 {p90(jumps):.0f} ms, "
          f"{n_jumps} of {len(jumps)} fetched")
    api_w = f"API-level window median {statistics.median(w):.0f} ms; {load_avg}"
    rows += [
        Row("explorer first paint, 1.36M events, cached", f"{best:.2f} s ({min(cpus):.2f} s CPU in the explorer)",
            f"<= {FIRST_PAINT_TARGET_S:g} s", best <= FIRST_PAINT_TARGET_S,
            f"cached profuse.load alone {min(loads):.2f} s; {load_avg}"),
        Row("explorer zoom in the browser, wheel steps (hash change to data-ready)",
            f"median {statistics.median(steps):.0f} ms, p90 {p90(steps):.0f} ms ({n_steps}/{len(steps)} fetched)",
            f"median <= {ZOOM_TARGET_MS:g} ms", statistics.median(steps) <= ZOOM_TARGET_MS, api_w),
        Row("explorer zoom in the browser, jumps to any window (hash change to data-ready)",
            f"median {statistics.median(jumps):.0f} ms, p90 {p90(jumps):.0f} ms ({n_jumps}/{len(jumps)} fetched)",
            f"median <= {ZOOM_TARGET_MS:g} ms", statistics.median(jumps) <= ZOOM_TARGET_MS, api_w),
    ]
    write_rows(rows, args.rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
