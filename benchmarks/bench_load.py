"""Load-speed benchmark: profuse vs HTA vs a bare typed decode, on the same bytes, in one run.

    python benchmarks/bench_load.py [--big-gb 1.0] [--no-hta] [--no-big]

Each measurement runs in its own subprocess so peak RSS is its own. Prints a table of MB/s,
ratios against the baselines and peak RSS against the raw JSON size. Not a test: these machines
are shared and noisy, so it reports, never fails.

Inputs: ../shared/traces/v100_rank1_of2_216k_events.json.gz decompressed (52 MB), and a synthetic
trace of at least --big-gb GB made by repeating it with shifted times and ids.
HTA runs in its own virtual environment (benchmarks/.hta-venv), created on first use.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SRC = REPO.parent / "shared" / "traces" / "v100_rank1_of2_216k_events.json.gz"
WORK = Path(os.environ.get("PROFUSE_BENCH_DIR", Path(tempfile.gettempdir()) / "profuse-bench"))
HTA_VENV = HERE / ".hta-venv"

CHILD_PRELUDE = """
import json, resource, sys, time
path = sys.argv[1]
def done(seconds, **extra):
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(dict(seconds=seconds, peak_rss=rss, **extra)))
"""

FLOOR = CHILD_PRELUDE + """
import msgspec
from profuse.trace._decode import Event
t = time.perf_counter()
data = open(path, 'rb').read()
top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
events = msgspec.json.decode(top['traceEvents'], type=list[Event])
done(time.perf_counter() - t, events=len(events))
"""

PROFUSE = CHILD_PRELUDE + """
import profuse
t = time.perf_counter()
tr = profuse.load(path)
n = tr.meta['events']
usable = time.perf_counter() - t
tr.wait_for_cache()
done(usable, events=n, from_cache=tr.from_cache, cache_written=time.perf_counter() - t)
"""

BASELINE = CHILD_PRELUDE + """
import profuse, msgspec, duckdb, numpy
done(0.0)
"""

HTA = CHILD_PRELUDE + """
import logging, os
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t = time.perf_counter()
ta = TraceAnalysis(trace_dir=os.path.dirname(path))
df = next(iter(ta.t.traces.values()))
done(time.perf_counter() - t, events=len(df))
"""


def child(code: str, path: Path, python: str = sys.executable, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([python, "-c", code, str(path)], capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def small_trace() -> Path:
    folder = WORK / "v100"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "v100_rank1.json"
    if not path.exists():
        path.write_bytes(gzip.decompress(SRC.read_bytes()))
    return path


def big_trace(gb: float) -> Path:
    """Repeat the 216k-event trace, shifting times past the previous copy and every id."""
    folder = WORK / f"big{gb:g}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "big_rank1.json"
    if path.exists():
        return path
    doc = json.loads(gzip.decompress(SRC.read_bytes()))
    events = doc.pop("traceEvents")
    xs = [e for e in events if e.get("ph") == "X"]
    t0 = min(e["ts"] for e in xs)
    span = max(e["ts"] + e["dur"] for e in xs) - t0 + 1000
    id_shift = 1 + max(max((e.get("args") or {}).get("correlation", 0) or 0,
                           (e.get("args") or {}).get("External id", 0) or 0, e.get("id", 0) or 0)
                       for e in events if isinstance(e.get("id", 0), int))
    raw_size = len(json.dumps(events))
    copies = max(1, int(gb * 1e9 / raw_size) + 1)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        head = json.dumps(doc)[:-1]
        fh.write(head + ', "traceEvents": [\n')
        first = True
        for c in range(copies):
            for e in events:
                if c and e.get("ph") == "M":
                    continue
                e2 = dict(e)
                if "ts" in e2 and c:
                    e2["ts"] = e2["ts"] + c * span
                if "id" in e2 and isinstance(e2["id"], int):
                    e2["id"] += c * id_shift
                args = e2.get("args")
                if args and c:
                    args = dict(args)
                    for k in ("correlation", "External id"):
                        if isinstance(args.get(k), int):
                            args[k] += c * id_shift
                    e2["args"] = args
                fh.write(("" if first else ",\n") + "  " + json.dumps(e2))
                first = False
        fh.write("\n]}\n")
    os.replace(tmp, path)
    return path


def hta_python() -> str | None:
    py = HTA_VENV / "bin" / "python"
    if not py.exists():
        print("creating the HTA environment (pip install HolisticTraceAnalysis) ...", file=sys.stderr)
        venv.create(HTA_VENV, with_pip=True)
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", "HolisticTraceAnalysis"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"HTA could not be installed: {r.stderr.strip()[-300:]}", file=sys.stderr)
            return None
    return str(py)


def measure(path: Path, with_hta: bool) -> dict[str, dict]:
    mb = path.stat().st_size / 1e6
    cache = Path(tempfile.mkdtemp(prefix="profuse-bench-cache-"))
    env = {"PROFUSE_CACHE_DIR": str(cache)}
    for f in path.parent.glob("*.profuse.duckdb*"):
        f.unlink()
    rows = {"baseline (imports)": child(BASELINE, path, env=env),
            "bare typed decode (floor)": child(FLOOR, path, env=env),
            "profuse cold load": child(PROFUSE, path, env=env),
            "profuse cached load": child(PROFUSE, path, env=env)}
    if with_hta:
        py = hta_python()
        rows["HTA TraceAnalysis"] = child(HTA, path, python=py) if py else {"error": "HTA not installed"}
    for r in rows.values():
        r["mb"] = mb
    return rows


def show(name: str, path: Path, rows: dict[str, dict]) -> None:
    mb = path.stat().st_size / 1e6
    base_rss = rows["baseline (imports)"].get("peak_rss", 0)
    floor = rows["bare typed decode (floor)"].get("seconds")
    cold = rows["profuse cold load"].get("seconds")
    hta = rows.get("HTA TraceAnalysis", {}).get("seconds")
    print(f"\n{name}: {path.name}, {mb:,.0f} MB of JSON")
    print(f"{'measurement':28} {'seconds':>9} {'MB/s':>8} {'peak RSS':>10} {'RSS/JSON':>9} {'events':>10}")
    for label, r in rows.items():
        if "error" in r:
            print(f"{label:28} failed: {r['error']}")
            continue
        s = r["seconds"]
        rate = f"{mb / s:8.0f}" if s else f"{'-':>8}"
        print(f"{label:28} {s:9.3f} {rate} {r['peak_rss'] / 1e6:8.0f}MB {r['peak_rss'] / (mb * 1e6):8.2f}x "
              f"{r.get('events', ''):>10}")
    print(f"(baseline RSS of the interpreter with profuse, duckdb and numpy imported: {base_rss / 1e6:.0f} MB)")
    if "peak_rss" in rows["profuse cold load"]:
        net = rows["profuse cold load"]["peak_rss"] - base_rss
        print(f"profuse cold peak RSS above that baseline / JSON size: {net / (mb * 1e6):.2f}x")
    if cold and floor:
        print(f"cold load / bare decode floor: {cold / floor:.2f}x   (target <= 2x)")
    if cold and hta:
        print(f"profuse cold rate / HTA rate: {hta / cold:.1f}x   (target >= 10x)")
    if rows["profuse cold load"].get("cache_written"):
        print(f"profuse cold load until its cache file is written too: {rows['profuse cold load']['cache_written']:.3f} s")
    if "seconds" in rows["profuse cached load"]:
        print(f"cached load: {rows['profuse cached load']['seconds']:.3f} s   (target <= 0.3 s for the 216k trace)")
    if "peak_rss" in rows["profuse cold load"]:
        print(f"profuse cold peak RSS / JSON size: {rows['profuse cold load']['peak_rss'] / (mb * 1e6):.2f}x"
              "   (target <= 3x)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--big-gb", type=float, default=1.0)
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--no-big", action="store_true")
    ap.add_argument("--json", help="also write the raw measurements here")
    args = ap.parse_args()
    if not SRC.exists():
        print(f"missing {SRC}", file=sys.stderr)
        return 2
    results = {}
    small = small_trace()
    results["v100_216k"] = measure(small, not args.no_hta)
    show("216k-event V100 trace", small, results["v100_216k"])
    if not args.no_big:
        big = big_trace(args.big_gb)
        results["synthetic_big"] = measure(big, not args.no_hta)
        show(f"synthetic >= {args.big_gb:g} GB trace", big, results["synthetic_big"])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
