"""Explorer scale benchmark: open a >= 1M-event trace and pan/zoom its timeline.

    python benchmarks/bench_explorer.py [--events 1000000]

"Open" = load from the table cache + build the timeline table + the first full-view timeline and
lanes, as the server does for its first page. Pan/zoom = the timeline query of one viewport,
including JSON encoding, at zoom levels from the whole trace down to 50 µs. Prints times; never
fails. The trace is the 216k-event V100 trace repeated with shifted times and ids.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_load


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000, help="complete events at least (default 1M)")
    args = ap.parse_args()
    import msgspec

    import profuse
    from profuse.analysis.timeline import timeline_model, timeline_window

    gb = args.events / 123_379 * 0.0537 * 1.02  # the V100 trace: 123,379 complete events per 53.7 MB
    path = bench_load.big_trace(round(gb, 2))
    profuse.load(path).close()  # build the cache once, untimed
    t = time.perf_counter()
    trace = profuse.load(path)
    t_load = time.perf_counter() - t
    model = timeline_model(trace)
    t_prep = time.perf_counter() - t
    lanes = model.lanes
    first = timeline_window(model, None, None, 1600)
    msgspec.json.encode(first)
    t_open = time.perf_counter() - t
    lo, hi = first.span
    rng = random.Random(0)
    times = []
    for i in range(60):
        width = (hi - lo) / (10 ** rng.uniform(0, 5))
        a = rng.uniform(lo, max(lo, hi - width))
        s = time.perf_counter()
        msgspec.json.encode(timeline_window(model, a, a + max(width, 50.0), 1600))
        times.append((time.perf_counter() - s) * 1e3)
    times.sort()
    print(f"trace: {path.name}, {trace.meta['events']:,} complete events, {len(lanes)} lanes")
    print(f"open: {t_open:.2f} s  (cached load {t_load:.2f} s, timeline model {t_prep - t_load:.2f} s, "
          f"first view {t_open - t_prep:.2f} s; target < 2 s)")
    print(f"pan/zoom: median {statistics.median(times):.0f} ms, p95 {times[int(len(times) * 0.95)]:.0f} ms, "
          f"max {times[-1]:.0f} ms over {len(times)} viewports (target < 100 ms)")
    print(f"first view sends {len(first.id):,} boxes for {trace.meta['events']:,} events")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
