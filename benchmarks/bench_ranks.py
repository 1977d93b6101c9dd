"""Many-rank benchmark: one cross-rank report over N rank traces of ~50 MB each, in one run:
profuse with --engine local and --engine ray, and HTA's multi-rank load of the same folder.

    python benchmarks/bench_ranks.py [--ranks 64] [--no-hta] [--no-ray] [--estimate-ranks 1000]

The rank set is built from the real 216k-event V100 trace (52 MB of JSON once decompressed): N
copies, each with its own distributedInfo.rank. Each measurement runs in its own subprocess, so its
peak RSS is its own: the coordinator's (the process that runs the report) and, for profuse, the
largest peak of a map worker (each reports its own). The per-rank Parquet of the local run is then
copied to --estimate-ranks ranks and reduced for real, so the closing estimate for a 1,000-rank
cluster rests on a measured per-rank map cost and a measured 1,000-rank reduce. It prints; it never
fails. These machines are shared and noisy: read the ratios, not the last digit.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bytecode import current_bytecode
from _rows import Row, write_rows
from bench_load import hta_python

from profuse.ranks.engine import available_memory

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SRC = REPO / "tests" / "data" / "traces" / "v100_rank1_of2_216k_events.json.gz"
WORK = Path(os.environ.get("PROFUSE_BENCH_DIR", Path(tempfile.gettempdir()) / "profuse-bench"))
_RANK = re.compile(rb'("distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*)-?\d+')
_WORLD = re.compile(rb'("distributedInfo"\s*:\s*\{[^{}]*?"world_size"\s*:\s*)\d+')

PROFUSE = """
import json, resource, sys, time
from profuse.ranks import run_ranks
t = time.perf_counter()
r = run_ranks(sys.argv[1], engine=sys.argv[2], work_dir=sys.argv[3], cache=False)
wall = time.perf_counter() - t
me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": wall, "map_seconds": r.map_seconds, "reduce_seconds": r.reduce_seconds,
                  "peak_rss": me, "worker_peak_rss": max((m.peak_rss or 0) for m in r.maps),
                  "per_rank_seconds": [m.seconds for m in r.maps], "nodes": len(r.nodes),
                  "ranks": len(r.doc.ranks), "folder": str(r.folder)}))
"""

REDUCE = """
import json, resource, sys, time
from pathlib import Path
from profuse.ranks import reduce
from profuse.ranks.discover import RankSet, RankTrace
from profuse.report.ranks import render_ranks_json
n = int(sys.argv[2])
rs = RankSet(source="synthetic", rank_source="order",
             traces=tuple(RankTrace(rank=i, path=Path(sys.argv[1]), size=0, raw_size=0) for i in range(n)))
t = time.perf_counter()
doc = reduce(Path(sys.argv[1]), rs)
text = render_ranks_json(doc)
print(json.dumps({"seconds": time.perf_counter() - t, "ranks": len(doc.ranks), "json_bytes": len(text),
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

HTA = """
import json, logging, resource, sys, time
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
traces = ta.t.traces
n = sum(len(df) for df in traces.values())
print(json.dumps({"seconds": time.perf_counter() - t, "ranks": len(traces), "events": n,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "worker_peak_rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))
"""


def child(code: str, *argv: str, python: str = sys.executable, mem_cap: int | None = None,
          env: dict[str, str] | None = None) -> dict:
    def cap() -> None:
        if mem_cap:
            resource.setrlimit(resource.RLIMIT_AS, (mem_cap, mem_cap))

    out = subprocess.run([python, "-c", code, *argv], capture_output=True, text=True, preexec_fn=cap,
                         env={**os.environ, **(env or {})})
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()
        return {"error": tail[-1][:300] if tail else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def build(n: int) -> Path:
    """N copies of the V100 trace, uncompressed (~52 MB each), rank r in each distributedInfo."""
    folder = WORK / f"ranks-{n}"
    raw = gzip.decompress(SRC.read_bytes())
    head, rest = raw[:1 << 16], raw[1 << 16:]
    folder.mkdir(parents=True, exist_ok=True)
    for f in folder.iterdir():
        if not re.fullmatch(r"rank-\d+\.json", f.name):
            shutil.rmtree(f) if f.is_dir() else f.unlink()
    for r in range(n):
        h = _WORLD.sub(lambda m: m.group(1) + str(n).encode(), _RANK.sub(lambda m: m.group(1) + str(r).encode(), head))
        path = folder / f"rank-{r}.json"
        if path.exists() and path.stat().st_size == len(h) + len(rest):
            continue
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            fh.write(h)
            fh.write(rest)
        os.replace(tmp, path)
    return folder


def synthetic_set(folder: Path, n: int, target: Path) -> Path:
    """``n`` rank partitions made by copying the measured ranks' Parquet round-robin."""
    parts = sorted(folder.glob("rank=*"), key=lambda p: int(p.name.split("=")[1]))
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for i in range(n):
        shutil.copytree(parts[i % len(parts)], target / f"rank={i}")
    return target


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--estimate-ranks", type=int, default=1000)
    ap.add_argument("--hta-mem-gb", type=float, default=None,
                    help="address-space cap for the HTA process (default: 70%% of available memory)")
    ap.add_argument("--json", help="also write the raw measurements here")
    ap.add_argument("--rows", help="write make bench's rows (benchmarks/_rows.py) here")
    args = ap.parse_args()
    current_bytecode()
    if not SRC.exists():
        print(f"missing {SRC}", file=sys.stderr)
        return 0
    folder = build(args.ranks)
    total_mb = sum(f.stat().st_size for f in folder.glob("rank-*.json")) / 1e6
    print(f"{args.ranks} ranks x {total_mb / args.ranks:.0f} MB = {total_mb / 1e3:.2f} GB of JSON in {folder} "
          f"({os.cpu_count()} cores, {available_memory() / 1e9:.0f} GB available)")
    rows: dict[str, dict] = {}
    print(f"\n{'measurement':32} {'wall s':>8} {'ranks/s':>8} {'coordinator RSS':>16} {'worker peak RSS':>16}",
          flush=True)

    def show(label: str) -> None:
        r = rows[label]
        if "error" in r:
            print(f"{label:32} failed: {r['error']}", flush=True)
            return
        wpk = r.get("worker_peak_rss")
        print(f"{label:32} {r['seconds']:8.1f} {args.ranks / r['seconds']:8.2f} {r['peak_rss'] / 1e6:13.0f} MB "
              f"{(f'{wpk / 1e6:13.0f} MB') if wpk else '':>16}", flush=True)

    baseline = child("import json, resource, profuse.ranks, duckdb, numpy; print(json.dumps({'peak_rss': "
                     "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))")
    engines = ["local"] + ([] if args.no_ray else ["ray"])
    for engine in engines:
        work = WORK / f"work-{engine}"
        shutil.rmtree(work, ignore_errors=True)
        cache = Path(tempfile.mkdtemp(prefix="profuse-bench-cache-"))
        # RAY_AUTH_MODE: a local Ray would otherwise write a token into ~/.ray on this shared machine
        rows[f"profuse --engine {engine}"] = child(PROFUSE, str(folder), engine, str(work),
                                                   env={"PROFUSE_CACHE_DIR": str(cache), "RAY_AUTH_MODE": "disabled"})
        show(f"profuse --engine {engine}")
        shutil.rmtree(cache, ignore_errors=True)
    if not args.no_hta:
        py = hta_python()
        cap = int((args.hta_mem_gb or available_memory() * 0.7 / 1e9) * 1e9)
        rows["HTA TraceAnalysis (all ranks)"] = (child(HTA, str(folder), python=py, mem_cap=cap) if py
                                                  else {"error": "HTA not installed"})
        if "error" in rows["HTA TraceAnalysis (all ranks)"]:
            rows["HTA TraceAnalysis (all ranks)"]["error"] += f" (address space capped at {cap / 1e9:.0f} GB)"
        show("HTA TraceAnalysis (all ranks)")
    print(f"(an interpreter with profuse, duckdb and numpy imported: {baseline.get('peak_rss', 0) / 1e6:.0f} MB)")
    local = rows.get("profuse --engine local", {})
    hta = rows.get("HTA TraceAnalysis (all ranks)", {})
    if "seconds" in local and "seconds" in hta:
        print(f"HTA wall / profuse local wall: {hta['seconds'] / local['seconds']:.1f}x; "
              f"HTA coordinator RSS / profuse coordinator RSS: {hta['peak_rss'] / local['peak_rss']:.1f}x")
    est = {}
    if "per_rank_seconds" in local:
        per_rank = statistics.median(local["per_rank_seconds"])
        syn = synthetic_set(Path(local["folder"]), args.estimate_ranks, WORK / f"reduce-{args.estimate_ranks}")
        red = child(REDUCE, str(syn), str(args.estimate_ranks))
        shutil.rmtree(syn, ignore_errors=True)
        ray_start = None
        if "seconds" in rows.get("profuse --engine ray", {}):
            r = rows["profuse --engine ray"]
            waves = math.ceil(args.ranks / (os.cpu_count() or 1))
            ray_start = max(0.0, r["map_seconds"] - waves * statistics.median(r["per_rank_seconds"]))
        print(f"\nper-rank map cost (median over {args.ranks} ranks, one core each, {total_mb / args.ranks:.0f} MB): "
              f"{per_rank:.2f} s")
        print(f"reduce at {args.ranks} ranks: {local['reduce_seconds']:.2f} s")
        if "error" in red:
            print(f"reduce at {args.estimate_ranks} ranks: failed: {red['error']}")
        else:
            print(f"reduce at {args.estimate_ranks} ranks (measured on copied Parquet): {red['seconds']:.2f} s, "
                  f"coordinator peak RSS {red['peak_rss'] / 1e6:.0f} MB, JSON {red['json_bytes'] / 1e6:.1f} MB")
            print(f"\npaper estimate for {args.estimate_ranks} ranks x {total_mb / args.ranks:.0f} MB "
                  f"({args.estimate_ranks * total_mb / args.ranks / 1e3:.0f} GB) on a Ray cluster:")
            print(f"{'cores':>8} {'map waves':>10} {'map s':>8} {'reduce s':>9} {'total s':>8}")
            for cores in (64, 256, 1024):
                waves = math.ceil(args.estimate_ranks / cores)
                total = waves * per_rank + red["seconds"] + (ray_start or 0.0)
                est[cores] = total
                print(f"{cores:8d} {waves:10d} {waves * per_rank:8.1f} {red['seconds']:9.2f} {total:8.1f}")
            print("(assumes storage feeds every core at the rate measured here and one rank per core at a time; "
                  f"overhead per Ray run measured here: {ray_start or 0.0:.1f} s; coordinator memory is the "
                  "reduce's, independent of trace size)")
        rows["estimate"] = {"per_rank_seconds": per_rank, "reduce": red, "ray_overhead_s": ray_start,
                            "total_s_by_cores": est}
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    write_rows(bench_rows(rows, args.ranks, total_mb), args.rows)
    return 0


def bench_rows(rows: dict[str, dict], ranks: int, total_mb: float) -> list[Row]:
    """make bench's rows: the local engine against HTA, and Ray within 1.2x of local on one machine."""
    local, ray = rows.get("profuse --engine local", {}), rows.get("profuse --engine ray", {})
    hta = rows.get("HTA TraceAnalysis (all ranks)", {})
    what = f"many ranks: {ranks} x {total_mb / ranks:.0f} MB"
    out = []
    if "seconds" in local:
        vs = (f"HTA {hta['seconds']:.1f} s, {hta['peak_rss'] / 1e6:,.0f} MB" if "seconds" in hta
              else f"HTA: {hta.get('error', 'not run')}")
        out.append(Row(f"{what}, --engine local", f"{local['seconds']:.1f} s, coordinator "
                       f"{local['peak_rss'] / 1e6:,.0f} MB", "faster than HTA, coordinator RSS flat",
                       local["seconds"] < hta["seconds"] if "seconds" in hta else None, vs))
    else:
        out.append(Row(f"{what}, --engine local", f"failed: {local.get('error', 'not run')}", "runs", False))
    if "seconds" in ray and "seconds" in local:
        ratio = ray["seconds"] / local["seconds"]
        out.append(Row(f"{what}, --engine ray", f"{ray['seconds']:.1f} s = {ratio:.2f}x local", "<= 1.2x local",
                       ratio <= 1.2, f"local {local['seconds']:.1f} s"))
    elif ray:
        out.append(Row(f"{what}, --engine ray", f"failed: {ray.get('error', '?')}", "<= 1.2x local", None))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
