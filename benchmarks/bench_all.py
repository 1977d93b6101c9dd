"""``make bench``: every row of issue 23's speed table from one run, each with its target and whether it holds.

    python benchmarks/bench_all.py [--reps 3] [--skip ranks] [--only load] [--quick]

Runs each benchmark in its own process (bench_load, bench_report, bench_explorer, bench_ranks, bench_advisor,
bench_big_report: a cold report's wall time per phase on big traces; bench_sizes and bench_explorer
--trace bert1g: issue 44's 1, 3 and 6 GB rows), each
asked for the minimum of --reps runs and for its rows (``--rows FILE``, see benchmarks/_rows.py), with
its full output kept in a log under PROFUSE_BENCH_DIR (default /tmp/profuse-bench/logs). Every figure is
measured against its baseline in the same run (HTA, the scanner alone, ``python -c pass``). Prints one
table; never fails on a figure (exit 0), so read it: the machine's load average is printed with it.
``--quick`` skips the 1 GB inputs (HTA never runs on them: over 10 minutes a run) and uses 8 ranks instead of 32.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bytecode import current_bytecode
from _rows import Row, read_rows

HERE = Path(__file__).resolve().parent
WORK = Path(os.environ.get("PROFUSE_BENCH_DIR", Path(tempfile.gettempdir()) / "profuse-bench"))


def plan(reps: int, quick: bool) -> dict[str, list[str]]:
    """Each benchmark's command line (without --rows)."""
    big = ["--no-big"] if quick else []
    # HTA on a 1 GB input takes over 10 minutes a run: it is measured on the 50 MB inputs (the same ratio)
    # the load targets are the V100 trace and the scaled ViT/BERT ones (the 1-5 MB shared traces are fixed
    # costs: bench_load.py alone measures them too)
    inputs = [a for k in ("v100_216k", "vit50", "bert50", *(() if quick else ("vit1g", "bert1g")))
              for a in ("--only", k)]
    return {"load": ["bench_load.py", "--reps", str(reps), "--big-hta-reps", "0", *inputs, *big],
            "report": ["bench_report.py", "--reps", str(reps)],
            "explorer": ["bench_explorer.py", "--reps", str(reps)],
            "ranks": ["bench_ranks.py", "--ranks", "8" if quick else "32", "--estimate-ranks", "100"],
            "advisor": ["bench_advisor.py", "--runs", "1" if quick else str(reps)],
            "big_report": ["bench_big_report.py", "--reps", "1" if quick else "2", *big],
            # issue 44: 1, 3 and 6 GB (cold load, cold report, RSS, cached report) and the explorer's first
            # view of the 1 GB trace (not with --quick: the 3 and 6 GB traces take minutes to write)
            **({} if quick else {
                "sizes": ["bench_sizes.py", "--reps", str(min(reps, 2))],
                "explorer_big": ["bench_explorer.py", "--trace", "bert1g", "--reps", str(reps), "--zooms", "10"]})}


def run_one(name: str, argv: list[str], logs: Path) -> tuple[list[Row], float, int]:
    """Run one benchmark; its rows (or one row saying why there are none), its wall seconds, exit code."""
    rows_file = logs / f"{name}.rows.json"
    rows_file.unlink(missing_ok=True)
    log = logs / f"{name}.log"
    t = time.perf_counter()
    with open(log, "w") as out:
        code = subprocess.run([sys.executable, str(HERE / argv[0]), *argv[1:], "--rows", str(rows_file)],
                              stdout=out, stderr=subprocess.STDOUT, cwd=HERE.parent).returncode
    took = time.perf_counter() - t
    if rows_file.exists():
        return read_rows(rows_file), took, code
    tail = (log.read_text(errors="replace").strip().splitlines() or [f"exit {code}"])[-1][:160]
    return [Row(f"{name}: no rows", f"exit {code}: {tail}", "reports its rows", None)], took, code


def show(rows: list[Row]) -> None:
    """The table: measure, figure, target, what it was measured against, and HOLDS / MISSED / n/a."""
    w = max(len(r.measure) for r in rows)
    print(f"\n{'':6} {'measure':{w}}  {'figure':28}  {'target':26}  against (same run)")
    for r in rows:
        mark = "HOLDS " if r.holds else "MISSED" if r.holds is not None else "n/a   "
        print(f"{mark} {r.measure:{w}}  {r.figure:28}  {r.target:26}  {r.baseline}")
    held = sum(1 for r in rows if r.holds)
    missed = sum(1 for r in rows if r.holds is False)
    print(f"\n{held} hold, {missed} missed, {len(rows) - held - missed} not measured")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3, help="runs per measurement, the fastest counts (default 3)")
    ap.add_argument("--quick", action="store_true", help="skip the 1 GB inputs; 8 ranks instead of 32")
    names = list(plan(1, False))
    ap.add_argument("--only", action="append", choices=names, help="run only these benchmarks")
    ap.add_argument("--skip", action="append", choices=names, default=[], help="leave these out")
    args = ap.parse_args()
    current_bytecode()
    logs = WORK / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    start = os.getloadavg()
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in start)} on {os.cpu_count()} cores; logs in {logs}")
    rows: list[Row] = []
    for name, argv in plan(args.reps, args.quick).items():
        if (args.only and name not in args.only) or name in args.skip:
            continue
        print(f"running {' '.join(argv)} ...", end=" ", flush=True)
        got, took, code = run_one(name, argv, logs)
        print(f"{took:.0f} s, exit {code}, {len(got)} rows", flush=True)
        rows.extend(got)
    if rows:
        show(rows)
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
