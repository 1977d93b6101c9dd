"""Load time with and without memory events: does reading ``[memory]`` cost a trace without them anything?

    python benchmarks/bench_memory.py [--reps 5] [--baseline /path/to/other/checkout/src]

Loads (uncached, each rep in its own subprocess, minimum of --reps) the V100 216k-event trace with its
28,010 ``[memory]`` events removed, the same trace as it is, and the MTIA trace (no memory events),
with this checkout's ``src`` and, given --baseline, another checkout's (e.g. main before the memory
tables) for comparison, the two taking turns. Not a test: these machines are shared and noisy, so it reports, never fails.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _bytecode import current_bytecode

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
SHARED = Path(os.environ.get("PROFUSE_SHARED", HERE.parent / "tests" / "data")) / "traces"
WORK = Path(os.environ.get("PROFUSE_BENCH_DIR", Path(tempfile.gettempdir()) / "profuse-bench-memory"))

CHILD = """
import sys, time
import importlib, profuse
try:  # the table builder, imported before the clock starts (trace/build.py; loader.py before the rename)
    importlib.import_module('profuse.trace.build')
except ImportError:
    importlib.import_module('profuse.trace.loader')
t = time.perf_counter()
with profuse.load(sys.argv[1], cache=False) as tr:
    n = tr.con.execute("SELECT count(*) FROM events").fetchone()[0]
print(time.perf_counter() - t)
"""


def inputs() -> dict[str, Path]:
    """The traces to load, decompressed into WORK (the stripped one written once)."""
    WORK.mkdir(parents=True, exist_ok=True)
    out = {}
    v100 = WORK / "v100.json"
    if not v100.exists():
        with gzip.open(SHARED / "v100_rank1_of2_216k_events.json.gz") as fh:
            v100.write_bytes(fh.read())
    stripped = WORK / "v100_no_memory.json"
    if not stripped.exists():
        doc = json.loads(v100.read_bytes())
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "[memory]"]
        stripped.write_text(json.dumps(doc))
    mtia = WORK / "mtia.json"
    if not mtia.exists():
        with gzip.open(SHARED / "mtia_inference.json.gz") as fh:
            mtia.write_bytes(fh.read())
    out["v100 without [memory]"], out["v100 with 28k [memory]"], out["mtia (none)"] = stripped, v100, mtia
    return out


def load_once(src: Path, path: Path) -> float:
    """One uncached load in a fresh interpreter with ``src`` first on the path."""
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def load_seconds(srcs: list[Path], path: Path, reps: int) -> list[float]:
    """The fastest of ``reps`` loads per source, the sources taking turns (so a busy spell hits both)."""
    best = [float("inf")] * len(srcs)
    for _ in range(reps):
        for i, src in enumerate(srcs):
            best[i] = min(best[i], load_once(src, path))
    return best


def main() -> int:
    """Print one line per trace: load seconds here (and with the baseline)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--baseline", type=Path, help="another checkout's src folder to compare with")
    args = ap.parse_args()
    current_bytecode()
    for name, path in inputs().items():
        times = load_seconds([SRC, *([args.baseline] if args.baseline else [])], path, args.reps)
        here = times[0]
        line = f"{name:28s} this checkout {here:.3f} s"
        if args.baseline:
            base = times[1]
            line += f"   baseline {base:.3f} s   ({100 * (here - base) / base:+.1f}%)"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
