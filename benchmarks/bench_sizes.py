"""Big traces at 1, 3 and 6 GB (10 GB with --10g): issue 44's rows, each against its same-run baseline.

    python benchmarks/bench_sizes.py [--sizes 1g 3g 6g] [--10g] [--reps 2] [--hta | --hta-all] [--rows FILE]

Inputs: h100_bert_small repeated to each size with times and ids shifted (bench_load.scaled_trace: built
once into the bench folder; 6 GB takes a few minutes to write). Per size, each run with the trace in the
page cache (bench_load.in_page_cache), the bench folder's other traces out of it (only_in_page_cache), and a fresh,
empty profuse cache folder:

- cold load: ``profuse.load`` in a fresh interpreter, imports outside the clock, the cache written behind
  waited for (bench_load.PROFUSE); MB/s = raw size / seconds; peak RSS of that process. Its runs and the cold
  report's alternate (load, report, load, report, ...), so the ratio compares runs of the same minutes; each
  pair's ratio (a report over the load just before it) is printed beside, the spread the machine's minutes gave.
- cold report: ``profuse report PATH --format json`` as a whole process, the first of a user (a fresh,
  empty cache folder: its tables cache written before the process ends); its ratio to the cold load of the
  same run, and its peak RSS / raw size; the same with ``--no-cache`` beside it.
- cached report: the same without ``--no-cache``, run until its derived entry and stat entry exist (the
  first run computes and stores the report, the second hashes the trace once and records the stat entry),
  then timed: a whole process, ``python -c pass`` measured beside it.
- HTA's TraceAnalysis on the same file, only when asked (``--hta``: the 1 GB trace; ``--hta-all``: every
  size, ~6 GB of RAM per GB): on these traces it runs for over 10 minutes a run at 1 GB, so make bench
  measures HTA on the 50 MB inputs (bench_load.py) instead.

Prints the figures and, with ``--rows``, writes make bench's rows (benchmarks/_rows.py). Never fails on a
figure. The explorer's first paint on the 1 GB trace is benchmarks/bench_explorer.py's ``--trace``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_load
from _bytecode import current_bytecode
from _rows import Row, write_rows

PROFUSE_BIN = bench_load.PROFUSE_BIN
WORK = bench_load.WORK


def bare_python() -> float:
    """The fastest of 5 ``python -c pass`` (the floor under any whole-process figure)."""
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        best = min(best, time.perf_counter() - t)
    return best


def only_in_page_cache(path: Path) -> None:
    """The bench folder's other traces out of the page cache (posix_fadvise DONTNEED), so that each size starts with
    the same free memory whichever ran before it: a 3 GB trace read just before stays cached for about a
    minute (bench_load.in_page_cache), and the 6 GB runs then took 24-25.4 s to load against 22.1-23.1 s
    with its pages gone (the kernel reclaiming page cache while the load allocates 4.5 GB)."""
    if not hasattr(os, "posix_fadvise"):   # not on macOS: the runs then share the page cache as it is
        return
    for other in WORK.glob("*/*.json"):
        if other != path:
            with open(other, "rb") as fh:
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def measure(key: str, reps: int, hta: bool) -> dict[str, dict]:
    """One size's figures: cold load, cold report, cached report, HTA (each a dict, or {"error": why})."""
    path = bench_load.scaled_trace(key)
    only_in_page_cache(path)
    cache = Path(tempfile.mkdtemp(prefix="profuse-bench-sizes-"))
    env = {"PROFUSE_CACHE_DIR": str(cache)}

    def clear() -> None:
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir()

    report = [str(PROFUSE_BIN), "report", str(path), "--format", "json"]
    out: dict[str, dict] = {"cold load": {}, "cold report": {}}
    pairs = []
    for _ in range(reps):   # in turns: a drift of the machine's speed (5-10% within minutes) reaches both alike
        load = bench_load.child(bench_load.PROFUSE, path, env=env, before=clear)
        rep = bench_load.process(report, env=env, before=clear, reads=path)
        out["cold load"], out["cold report"] = fastest(out["cold load"], load), fastest(out["cold report"], rep)
        if "seconds" in load and "seconds" in rep:
            pairs.append(rep["seconds"] / load["seconds"])
    out["pairs"] = {"ratios": pairs}   # each report over the load just before it: how far the minutes moved
    out["no-cache report"] = bench_load.process([*report, "--no-cache"], env=env, reps=reps, reads=path)
    clear()
    for _ in range(2):  # the entry stored, then the stat entry recorded (the trace hashed once)
        bench_load.process(report, env=env, reads=path)
    out["cached report"] = bench_load.process(report, env=env, reps=max(reps, 3), reads=path)
    if hta and (py := bench_load.hta_python()):
        out["HTA"] = bench_load.child(bench_load.HTA, path, python=py)
    shutil.rmtree(cache, ignore_errors=True)
    out["size"] = {"bytes": path.stat().st_size}
    return out


def fastest(best: dict, run: dict) -> dict:
    """The faster of two runs' figures (``best`` empty: ``run``), with the larger peak RSS of the two; an error
    of either is the result."""
    if not best or "error" in run:
        return run
    if "error" in best:
        return best
    out = dict(run if run["seconds"] < best["seconds"] else best)
    out["peak_rss"] = max(run["peak_rss"], best["peak_rss"])
    return out


def rows_of(key: str, r: dict[str, dict], bare: float) -> list[Row]:
    """The rows of one size (see the module docstring)."""
    size = r["size"]["bytes"]
    gb = f"{size / 1e9:.1f} GB"
    load, rep, cached = r["cold load"], r["cold report"], r["cached report"]
    rows: list[Row] = []
    if "error" in load:
        return [Row(f"{gb}: cold load", f"failed: {load['error'][:80]}", ">= 250 MB/s", None)]
    mbs = size / 1e6 / load["seconds"]
    hta = r.get("HTA", {})
    hta_txt = f"HTA {hta['seconds']:.1f} s, {hta['peak_rss'] / 1e9:.1f} GB" if "seconds" in hta else "HTA not run"
    rows.append(Row(f"{gb}: cold load", f"{load['seconds']:.2f} s = {mbs:.0f} MB/s", ">= 250 MB/s", mbs >= 250,
                    hta_txt))
    rows.append(Row(f"{gb}: cold load peak RSS / raw", f"{load['peak_rss'] / size:.2f}x", "<= 1x",
                    load["peak_rss"] <= size, f"{load['peak_rss'] / 1e9:.2f} GB"))
    if "error" in rep:
        rows.append(Row(f"{gb}: cold report", f"failed: {rep['error'][:80]}", "<= 1.5x cold load", None))
    else:
        ratio = rep["seconds"] / load["seconds"]
        plain = r.get("no-cache report", {})
        plain_txt = f"; --no-cache {plain['seconds']:.2f} s" if "seconds" in plain else ""
        pairs = r.get("pairs", {}).get("ratios", [])
        pairs_txt = f"; pairs {min(pairs):.2f}-{max(pairs):.2f}x" if len(pairs) > 1 else ""
        rows.append(Row(f"{gb}: cold report / cold load", f"{rep['seconds']:.2f} s = {ratio:.2f}x", "<= 1.5x",
                        ratio <= 1.5, f"load {load['seconds']:.2f} s{pairs_txt}{plain_txt}"))
        rows.append(Row(f"{gb}: cold report peak RSS / raw", f"{rep['peak_rss'] / size:.2f}x", "<= 1x",
                        rep["peak_rss"] <= size, f"{rep['peak_rss'] / 1e9:.2f} GB"))
    if "error" not in cached:
        target = "<= 0.3 s" if key == "6g" else "<= 0.3 s at 6 GB"
        rows.append(Row(f"{gb}: cached report (process)", f"{cached['seconds']:.2f} s", target,
                        cached["seconds"] <= 0.3 if key == "6g" else None, f"python -c pass {bare:.2f} s"))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["1g", "3g", "6g"], choices=["1g", "3g", "6g", "10g"])
    ap.add_argument("--10g", dest="ten", action="store_true", help="add the 10 GB trace (~17 GB of RAM)")
    ap.add_argument("--reps", type=int, default=2, help="runs per figure, the fastest counts (default 2)")
    ap.add_argument("--hta", action="store_true", help="HTA on the 1 GB trace too (over 10 minutes a run)")
    ap.add_argument("--hta-all", action="store_true", help="HTA on every size (needs ~6 GB of RAM per GB)")
    ap.add_argument("--rows", help="write make bench's rows here (benchmarks/_rows.py)")
    args = ap.parse_args()
    current_bytecode()
    sizes = list(dict.fromkeys([*args.sizes, *(["10g"] if args.ten else [])]))
    bare = bare_python()
    rows: list[Row] = []
    for s in sizes:
        print(f"\n== bert{s} ==", flush=True)
        r = measure(f"bert{s}", args.reps, hta=args.hta_all or (args.hta and s == "1g"))
        for k, v in r.items():
            print(f"  {k:14} {v}", flush=True)
        rows += rows_of(s, r, bare)
    print(f"\nload average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for row in rows:
        mark = "HOLDS " if row.holds else "MISSED" if row.holds is not None else "n/a   "
        print(f"{mark} {row.measure:36} {row.figure:24} {row.target:18} {row.baseline}")
    write_rows(rows, args.rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
