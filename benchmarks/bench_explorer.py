"""Explorer scale benchmark: open a >= 1.36M-event trace (or any, ``--trace``) in a real browser and zoom its timeline.

    python benchmarks/bench_explorer.py [--events 1357169 | --trace FILE] [--reps 3] [--views timeline,overview]
                                        [--zooms 40] [--no-browser] [--rows FILE]

The default trace is the 216k-event V100 trace repeated with shifted times and ids (bench_load.big_trace:
123,379 complete events per copy; 11 copies, 1,357,169 events). Its table cache is built once, untimed.
Measured (imports done, the cache file in the OS cache):

- API level, in this process: the coarse first view and the timeline model's build (analysis/timeline.py),
  the first full-view window, and one viewport's window (query and JSON encoding) at zoom levels from
  the whole trace down to 50 µs.
- First open (Playwright's client driving /usr/bin/chromium, launched before the clock starts), each in
  a fresh explorer process (``--serve``: imports done before the clock) after removing what an earlier
  open kept of the trace's first views: from `profuse.load` of the cached trace as `profuse explore`
  loads it (``verify="behind"``: the cache found by the trace's stat entry, its bytes hashed on a
  thread, checked before the server answers anything from it), through starting the explorer's real
  server (uvicorn on 127.0.0.1), to the view's first content drawn, by the page's own marks read on the
  same wall clock as the start: the timeline (``#view=timeline``) first drawn
  (``profuse:timeline-first``: coarse until the lane model is built), then its exact view
  (``profuse:timeline-painted``); the Overview (the page `profuse explore` opens) drawn. Reported as
  seconds after the load (min of --reps), with the load's and the server start's seconds, the explorer
  process's CPU seconds and peak RSS (VmHWM).
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
import re
import secrets
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import bench_load
from _bytecode import current_bytecode
from _rows import Row, write_rows

CHROMIUM = "/usr/bin/chromium"
EVENTS_PER_COPY = 123_379  # complete events of the V100 trace, 46.9 MB of JSON as big_trace measures it
COPY_GB = 0.046878
FIRST_PAINT_TARGET_S = 2.0  # after the load (issue 44)
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
    from profuse.analysis.timeline import coarse_view, timeline_model, timeline_window

    t = time.perf_counter()
    trace = profuse.load(path)
    t_load = time.perf_counter() - t
    s = time.perf_counter()
    msgspec.json.encode(coarse_view(trace, 1180))
    t_coarse = time.perf_counter() - s
    t, c = time.perf_counter(), time.process_time()
    model = timeline_model(trace)
    t_model, c_model = time.perf_counter() - t, time.process_time() - c
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
    out = dict(events=trace.meta["events"], lanes=len(model.lanes), load=t_load, coarse=t_coarse, model=t_model,
               model_cpu=c_model, first=t_first, boxes=len(first.id), windows=sorted(times), span=(lo, hi))
    model.close()
    trace.close()
    return out


PAINTED_AT = """() => {
  const mark = performance.getEntriesByName("profuse:timeline-painted")[0];
  return mark ? performance.timeOrigin + mark.startTime : null;
}"""


def serve_child(path: str) -> int:
    """The explorer's side of a first paint, in a process of its own (``--serve PATH``): imports done and
    what an earlier open kept of the trace's first views removed, it says ``ready``; on a line from stdin
    it loads the cached trace as `profuse explore` does (``verify="behind"``), starts the server and
    prints one JSON line (the URL, the wall clock at the load's start, the load's and the server start's
    seconds); it serves until stdin closes."""
    import json

    import profuse
    from profuse.explorer.server import create_app  # noqa: F401  (imported before the clock starts)
    from profuse.trace._glibc import one_arena

    one_arena()  # as `profuse explore` does before its first thread

    # here, not in the benchmark's process: the entries' names hold a stamp of profuse's code as this
    # process reads it
    forget_kept_views(Path(path))
    print("ready", flush=True)
    sys.stdin.readline()
    wall, t = time.time(), time.perf_counter()
    trace = profuse.load(path, verify="behind")
    t_load = time.perf_counter() - t
    server = Server([trace])
    t_server = time.perf_counter() - t - t_load
    print(json.dumps(dict(url=server.url, wall=wall, load=t_load, server=t_server)), flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin
    server.stop()
    trace.close()
    return 0


class Explorer:
    """One explorer process (:func:`serve_child`) on ``path``: started with its imports done, then timed."""

    def __init__(self, path: Path) -> None:
        import json
        import subprocess

        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", str(path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit("the explorer process did not start")
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("the explorer process ended before serving (see its error above)")
        got = json.loads(line)
        self.url, self.wall, self.load, self.server = got["url"], got["wall"], got["load"], got["server"]

    def status(self, key: str) -> int:
        """A /proc/PID/status figure in bytes (VmHWM: the peak RSS so far, VmRSS: the RSS now)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        return 0

    def cpu(self) -> float:
        """The process's CPU seconds so far (user + system, all its threads)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        """Close its stdin: it stops its server and ends."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


class Paint:
    """One first open: seconds from the load's start to the view's first content drawn (the page's own
    mark: ``profuse:timeline-first`` for the timeline, coarse or exact, ``profuse:ready:overview`` for the
    Overview), to Playwright noticing the whole view drawn (the timeline's exact view, the Overview's
    advice), to that whole view drawn by the page's own mark (``profuse:timeline-painted``,
    ``profuse:overview-advice``), and the explorer process's CPU seconds and peak RSS at that point."""

    def __init__(self, drawn: float, noticed: float, whole: float, ex: Explorer) -> None:
        self.drawn, self.noticed, self.whole = drawn, noticed, whole
        self.load, self.server, self.ex = ex.load, ex.server, ex
        self.cpu, self.peak_rss = ex.cpu(), ex.status("VmHWM")


MARKS = """names => names.map(n => {
  const m = performance.getEntriesByName(n)[0];
  return m ? performance.timeOrigin + m.startTime : null; })"""


def forget_kept_views(path: Path) -> int:
    """Remove what an earlier open kept of ``path``'s first views (the explorer's derived entries, see
    explorer/server.py ``KEPT``), so the next open is a first one; how many entries were removed."""
    import profuse
    from profuse.explorer.server import KEPT, overview_key
    from profuse.trace.cache import derived_path

    with profuse.load(path) as trace:
        folder, fp = trace.cache_folder, trace.meta.source
        if folder is None:
            return 0
        keys = [f"{KEPT}timeline-head", f"{KEPT}memory", *(f"{KEPT}timeline-full/{1 << k}" for k in range(51)),
                *(overview_key(later=later, keep_metadata=keep) for later in (False, True) for keep in (False, True))]
        gone = 0
        for key in keys:
            found = derived_path(folder, fp, key)
            if found.exists():
                found.unlink()
                gone += 1
        return gone


def first_paint(browser: Any, path: Path, view: str) -> tuple[Paint, Any]:
    """A fresh explorer process on ``path`` and a fresh page opened on it at ``view`` (``timeline``: the
    canvas's boxes drawn; ``overview``, the page `profuse explore` opens: its first content, then its
    advice): the figures and the page (left open, with its explorer)."""
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    page.goto("about:blank")
    ex = Explorer(path)
    t = time.perf_counter() - (time.time() - ex.wall)  # the load's start on this clock
    if view == "timeline":
        page.goto(ex.url + "#view=timeline")
        page.wait_for_selector("canvas[data-painted]", state="attached", timeout=600_000)
        names = ["profuse:timeline-first", "profuse:timeline-painted"]
    else:
        page.goto(ex.url)
        # the page draws the Overview's head (the advice pending), then the whole (views.js, its marks)
        page.wait_for_selector("body[data-ready=overview], body[data-ready=error]", state="attached", timeout=600_000)
        if page.get_attribute("body", "data-ready") == "error":
            raise SystemExit(f"the Overview failed: {page.get_attribute('body', 'data-error')}")
        page.wait_for_selector("#advice-state[data-state=done], #no-advice", state="attached", timeout=600_000)
        names = ["profuse:overview-first", "profuse:overview-advice"]
    noticed = time.perf_counter() - t
    first, whole = [m / 1e3 - ex.wall if m is not None else None for m in page.evaluate(MARKS, names)]
    # a page without the first view's own mark draws it whole at once
    return Paint(first if first is not None else whole or noticed, noticed, whole or noticed, ex), page


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


def mb(n: float) -> str:
    """Bytes as MB."""
    return f"{n / 1e6:,.0f} MB"


def measure_opens(browser: Any, path: Path, reps: int, views: list[str]) -> tuple[dict[str, list[Paint]], Any, Explorer]:
    """``reps`` fresh opens of each of ``views``, printed as they come; the last timeline page and its
    explorer are left open for the zooms."""
    out: dict[str, list[Paint]] = {v: [] for v in views}
    page = ex = None
    for view in views:
        for i in range(reps):
            if page is not None:
                page.context.close()
                ex.stop()
            p, page = first_paint(browser, path, view)
            ex = p.ex
            out[view].append(p)
            whole = "exact view" if view == "timeline" else "advice"
            print(f"first open {i + 1}, {view}: first drawn {p.drawn:.2f} s after the load's start "
                  f"({p.drawn - p.load:.2f} s after the load), {whole} drawn at {p.whole:.2f} s (noticed by "
                  f"Playwright at {p.noticed:.2f} s); "
                  f"cached load {p.load:.2f} s, "
                  f"server start {p.server:.2f} s; explorer process CPU {p.cpu:.2f} s, peak RSS {mb(p.peak_rss)} "
                  f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    if "timeline" in views and views[-1] != "timeline":  # the zooms need a timeline page
        page.context.close()
        ex.stop()
        p, page = first_paint(browser, path, "timeline")
        ex = p.ex
    return out, page, ex


def main() -> int:
    """Run the benchmark; print figures and write rows."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=11 * EVENTS_PER_COPY, help="complete events at least (default 1.36M)")
    ap.add_argument("--trace", help="measure on this trace file, or a scaled trace's key (bert1g)")
    ap.add_argument("--reps", type=int, default=3, help="first opens per view (min of them)")
    ap.add_argument("--views", default="timeline,overview", help="the views first opened, comma-separated")
    ap.add_argument("--zooms", type=int, default=40, help="hash changes per zoom pattern")
    ap.add_argument("--no-browser", action="store_true", help="API-level figures only")
    ap.add_argument("--rows", help="write make bench's rows here (JSON)")
    ap.add_argument("--serve", help=argparse.SUPPRESS)  # the explorer's own process (serve_child)
    args = ap.parse_args()
    current_bytecode()
    if args.serve:
        return serve_child(args.serve)
    import profuse

    # --trace bert1g (a scaled trace's key, built once: bench_load.scaled_trace) or a trace file
    scaled = args.trace and not Path(args.trace).exists() and re.fullmatch(r"[a-z]+(50|1g|3g|6g|10g)", args.trace)
    path = bench_load.scaled_trace(args.trace) if scaled else Path(args.trace) if args.trace else trace_of(args.events)
    profuse.load(path).close()  # build the cache once, untimed
    rng = random.Random(0)
    api = api_level(path, rng)
    what = f"{path.name}, {api['events'] / 1e6:.2f}M events" if args.trace else "1.36M events"
    print(f"trace: {path}, {api['events']:,} complete events, {api['lanes']} lanes")
    print(f"API: cached load {api['load']:.2f} s, coarse first view {api['coarse']:.2f} s, "
          f"timeline model {api['model']:.2f} s ({api['model_cpu']:.2f} s CPU), "
          f"first window {api['first']:.2f} s ({api['boxes']:,} boxes)")
    w = api["windows"]
    print(f"API pan/zoom window: median {statistics.median(w):.0f} ms, p90 {p90(w):.0f} ms over {len(w)} viewports "
          f"(load average {os.getloadavg()[0]:.1f})")
    base_load = f"cached profuse.load alone {api['load']:.2f} s"
    rows = [Row(f"explorer timeline model, {what} (API level)", f"{api['model']:.2f} s", "", None, base_load),
            Row("explorer pan/zoom window, API level", f"median {statistics.median(w):.0f} ms, p90 {p90(w):.0f} ms",
                "", None)]
    views = [v for v in args.views.split(",") if v]
    if args.no_browser or not Path(CHROMIUM).exists():
        why = "not run (--no-browser)" if args.no_browser else f"not run: no {CHROMIUM}"
        rows += [Row(f"explorer first paint ({v}), {what}, cached", why, f"<= {FIRST_PAINT_TARGET_S:g} s after the load",
                     None, base_load) for v in views]
        rows += [Row("explorer zoom in the browser (hash change to data-ready)", why, "median <= 100 ms", None)]
        write_rows(rows, args.rows)
        return 0
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        opens, page, ex = measure_opens(browser, path, args.reps, views)
        if "timeline" in views:
            steps, n_steps = zooms(page, api["span"], args.zooms, rng, steps=True)
            jumps, n_jumps = zooms(page, api["span"], args.zooms, rng, steps=False)
            peak_after_zooms = ex.status("VmHWM")
        page.context.close()
        ex.stop()
        browser.close()
    load_avg = f"load average {os.getloadavg()[0]:.1f}"
    for view, paints in opens.items():
        best = min(paints, key=lambda q: q.drawn - q.load)
        after = best.drawn - best.load
        whole = "exact view" if view == "timeline" else "advice"
        advice = f"; {whole} drawn {min(q.whole - q.load for q in paints):.2f} s after the load"
        print(f"first paint, {view}: {after:.2f} s after the load, min of {len(paints)} (target <= "
              f"{FIRST_PAINT_TARGET_S:g} s); cached load {best.load:.2f} s, server start {best.server:.2f} s; peak RSS "
              f"{mb(max(q.peak_rss for q in paints))}{advice}; {load_avg}")
        rows.append(Row(f"explorer first paint ({view}), {what}, cached, after the load",
                        f"{after:.2f} s ({best.cpu:.2f} s CPU in the explorer; peak RSS "
                        f"{mb(max(q.peak_rss for q in paints))}){advice}",
                        f"<= {FIRST_PAINT_TARGET_S:g} s", after <= FIRST_PAINT_TARGET_S,
                        f"cached profuse.load alone {min(q.load for q in paints):.2f} s; {load_avg}"))
    if "timeline" not in views:
        write_rows(rows, args.rows)
        return 0
    print(f"zoom, wheel steps: median {statistics.median(steps):.0f} ms, p90 {p90(steps):.0f} ms, "
          f"{n_steps} of {len(steps)} fetched (target median <= {ZOOM_TARGET_MS:g} ms)")
    print(f"zoom, jumps: median {statistics.median(jumps):.0f} ms, p90 {p90(jumps):.0f} ms, "
          f"{n_jumps} of {len(jumps)} fetched; explorer peak RSS after the zooms {mb(peak_after_zooms)}")
    api_w = f"API-level window median {statistics.median(w):.0f} ms; {load_avg}"
    rows += [
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
