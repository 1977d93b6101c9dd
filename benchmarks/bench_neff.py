"""NEFF reading cost on hostile inputs, as ratios to reading the real NEFF in the same run.

    python benchmarks/bench_neff.py [--instructions 2000] [--fan 50000]

Builds, in a temporary folder, (1) a debug-info fan-out: every PE instruction links to one backend
entry that links to ``--fan`` HLO entries (the walk used to cost instructions x fan), and (2) a
gzip bomb: two 48 MiB members of zeros in a ~100 KB NEFF. Each is read in its own subprocess so
peak RSS is its own. Prints seconds, peak RSS and the ratio to tests/data/neuron/matmul_small.neff.
Not a test: these machines are shared and noisy, so it reports, never fails.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _bytecode import current_bytecode

HERE = Path(__file__).resolve().parent
REAL = HERE.parent / "tests" / "data" / "neuron" / "matmul_small.neff"

CHILD = """
import json, resource, sys, time
from profuse.errors import TraceError
from profuse.neuron.neff import read_neff
t = time.perf_counter()
try:
    read_neff(sys.argv[1]); outcome = "read"
except TraceError as err:
    outcome = "refused: " + err.problem
print(json.dumps({"seconds": time.perf_counter() - t, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "outcome": outcome}))
"""


def _measure(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instructions", type=int, default=2000)
    ap.add_argument("--fan", type=int, default=50_000)
    args = ap.parse_args()
    current_bytecode()
    sys.path.insert(0, str(HERE.parent / "tests"))
    from test_neff import _archive
    from test_neuron_hostile import _fan_out, _tar_level, _with_payload  # the tests' builders

    with tempfile.TemporaryDirectory() as tmp:
        fan_dir, bomb_dir = Path(tmp) / "fan", Path(tmp) / "bomb"
        fan_dir.mkdir()
        bomb_dir.mkdir()
        cases = {"real NEFF (baseline)": REAL,
                 f"fan-out {args.instructions} x {args.fan}": _fan_out(fan_dir, args.instructions, args.fan),
                 "gzip bomb 2 x 48 MiB": _with_payload(bomb_dir, _tar_level(
                     {**_archive(), "m0.json": bytes(48 << 20), "m1.json": bytes(48 << 20)}, 9), "bomb.neff")}
        base = None
        print(f"{'input':32} {'bytes':>10} {'seconds':>8} {'x base':>7} {'peak RSS MB':>11}  outcome")
        for name, path in cases.items():
            m = _measure(path)
            base = base or m["seconds"]
            print(f"{name:32} {path.stat().st_size:>10,} {m['seconds']:>8.3f} {m['seconds'] / base:>7.1f} "
                  f"{m['rss'] / 1e6:>11.0f}  {m['outcome'][:60]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
