"""Memory of a load whose timestamps carry float noise: the msgspec path and the compiled scanner, once.

    python benchmarks/bench_noisy_fallback.py [--gb 1.0] [--as-gib 4] [--keep]

Builds a trace of at least --gb GB of JSON from the 216k-event V100 trace, repeated with shifted
times and ids, where every ts and dur carries float noise below the ns as float maths leaves it
(``1669783689181563.0001234``, ``12.3450000001``), then loads it with ``profuse sql`` (no cache)
twice, each in its own process under ``prlimit --as`` (address space, default 4 GiB): with
``PROFUSE_SCANNER=0`` (the msgspec reference path) and with the compiled scanner. Prints wall
seconds, peak RSS, peak RSS as a multiple of the JSON size, exit code and the first stderr line.
Not a test: the machines are shared, so it reports and never fails; say how loaded the machine was.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bytecode import current_bytecode

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "tests" / "data" / "traces" / "v100_rank1_of2_216k_events.json.gz"
WORK = Path(os.environ.get("PROFUSE_BENCH_DIR", Path(tempfile.gettempdir()) / "profuse-bench"))

CHILD = """
import resource, subprocess, sys, time
t0 = time.perf_counter()
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
took = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(r.returncode, took, rss, (r.stderr.strip().splitlines() or [""])[0][:300], sep="\\t")
"""


def noisy_trace(gb: float, seed: int = 1) -> Path:
    """The V100 trace repeated to at least ``gb`` GB, times shifted per copy and given float noise."""
    path = WORK / f"noisy{gb:g}" / "noisy.json"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    doc = json.loads(gzip.decompress(SRC.read_bytes()))
    events = doc.pop("traceEvents")
    xs = [e for e in events if e.get("ph") == "X"]
    t0 = min(e["ts"] for e in xs)
    span = max(e["ts"] + e["dur"] for e in xs) - t0 + 1000
    ids = [v for e in events for v in ((e.get("args") or {}).get("correlation"),
                                       (e.get("args") or {}).get("External id"), e.get("id")) if isinstance(v, int)]
    id_shift = 1 + max(ids)
    copies = max(1, int(gb * 1e9 / len(json.dumps(events))) + 1)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        fh.write(json.dumps(doc)[:-1] + ', "traceEvents": [\n')
        first = True
        for c in range(copies):
            for e in events:
                if c and e.get("ph") == "M":
                    continue
                e2 = dict(e)
                if isinstance(e2.get("id"), int):
                    e2["id"] += c * id_shift
                if e2.get("args"):
                    args = dict(e2["args"])
                    for k in ("correlation", "External id"):
                        if isinstance(args.get(k), int):
                            args[k] += c * id_shift
                    e2["args"] = args
                ts = e2.pop("ts", None)
                if isinstance(e2.get("dur"), (int, float)) and e2["dur"] > 0:
                    e2["dur"] = e2["dur"] + rng.uniform(1e-9, 4e-4)
                text = json.dumps(e2)
                if isinstance(ts, (int, float)):  # written by hand: 7 digits past the µs, as float32 maths leaves
                    text = text[:-1] + ', "ts": %.7f}' % (ts + c * span + rng.uniform(1e-7, 4e-4))
                fh.write(("" if first else ",\n") + "  " + text)
                first = False
        fh.write("\n]}\n")
    os.replace(tmp, path)
    return path


def run(path: Path, *, scanner: bool, as_gib: float, cache: Path) -> dict[str, object]:
    cmd = [sys.executable, "-m", "profuse", "sql", str(path), "SELECT count(*) FROM events", "--format", "csv",
           "--no-cache"]
    if shutil.which("prlimit"):
        cmd = ["prlimit", f"--as={int(as_gib * 2**30)}", *cmd]
    env = {**os.environ, "PROFUSE_SCANNER": "1" if scanner else "0", "PROFUSE_CACHE_DIR": str(cache),
           "PROFUSE_MAX_TRACE_BYTES": str(8 << 30)}
    out = subprocess.run([sys.executable, "-c", CHILD, *cmd], capture_output=True, text=True, env=env)
    fields = out.stdout.rstrip("\n").split("\t", 3)
    rc, took, rss, err = fields if len(fields) == 4 else ("?", "0", "0", out.stderr.strip()[-300:])
    return {"rc": rc, "seconds": float(took), "rss": int(rss), "stderr": err}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--as-gib", type=float, default=4.0)
    ap.add_argument("--keep", action="store_true", help="keep the generated trace for the next run")
    args = ap.parse_args()
    current_bytecode()
    t0 = time.perf_counter()
    path = noisy_trace(args.gb)
    size = path.stat().st_size
    print(f"trace: {path} ({size / 1e9:.2f} GB of JSON, made in {time.perf_counter() - t0:.0f} s); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'path':<24} {'exit':>4} {'seconds':>8} {'peak RSS':>10} {'x JSON':>7}  stderr")
    with tempfile.TemporaryDirectory() as cache:
        for label, scanner in (("msgspec (SCANNER=0)", False), ("compiled scanner", True)):
            r = run(path, scanner=scanner, as_gib=args.as_gib, cache=Path(cache))
            print(f"{label:<24} {r['rc']:>4} {r['seconds']:>8.1f} {int(r['rss']) / 2**30:>9.2f}G "
                  f"{int(r['rss']) / size:>7.2f}  {r['stderr']}")
    if not args.keep:
        shutil.rmtree(path.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
