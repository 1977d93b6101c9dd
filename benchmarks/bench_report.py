"""Cached-report benchmark: `profuse report` on a trace whose tables are already cached, one run.

    python benchmarks/bench_report.py [--reps 3] [--only v100_216k ...] [--json out.json]

For each input (decompressed from ../shared/traces into a temporary folder, like bench_load.py) it
builds the cache once in a temporary PROFUSE_CACHE_DIR (the warm-up), then times, each as a whole
process and the fastest of --reps runs:

- ``profuse report <trace>`` (table format with advice, the default),
- ``profuse report <trace> --format json``,
- ``profuse sql <trace> "SELECT count(*) FROM events" --format csv``,
- ``python -c pass`` and ``profuse --help`` as the floor in the same run,

and then, in a fresh interpreter, an in-process breakdown of the cached report in CPU seconds: imports,
opening the cache, the op table, the summary and each part of the advice (hotspots, fusion,
interruptions, roofline, compiled regions), and rendering. It prints which of issue 10's cached-report targets
hold. Not a test: these machines are shared and noisy, so it reports, never fails.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import bench_load  # the same process timing, shared traces and closing lines

INPUTS = {"v100_216k": "v100_rank1_of2_216k_events.json.gz", "v100_ns": "v100_ns_timestamps.json.gz",
          "a100_nccl": "a100_nccl_rank0_of2.json.gz", "mtia": "mtia_inference.json.gz",
          "mi300_norm": "mi300_normalization_layers.json.gz", "h100_vit": "h100_vit_falconsai.json.gz"}
PROFUSE_BIN = Path(sys.executable).with_name("profuse")
TARGET_S = 0.35

BREAKDOWN = r"""
import json, sys, time
marks = {}
t0 = time.process_time()
def mark(label):  # CPU seconds of this process (all threads): steadier than wall time on a busy machine
    global t0
    now = time.process_time()
    marks[label] = round(now - t0, 4)
    t0 = now
from profuse.cli import main as _cli  # what the command line imports before it runs a subcommand
mark("import profuse.cli")
from profuse.analysis import op_table, summarize
from profuse.analysis.compiled import compiled_regions
from profuse.analysis.fusion import fusion_candidates
from profuse.analysis.hotspots import hotspots
from profuse.analysis.interruptions import interruptions
from profuse.analysis.roofline import device_peaks, roofline
from profuse.cli._common import load_trace
mark("import analysis")
from profuse.report.console import print_advice, print_report
mark("import report.console (rich)")
import argparse, io
args = argparse.Namespace(lenient=False, no_cache=False, cache_dir=None)
trace = load_trace(sys.argv[1], args)
assert trace.from_cache, "the cache was not used"
mark("open cache (hash + connect)")
table = op_table(trace, group_by="op", sort="self_device")
mark("op table")
summary = summarize(trace)
mark("summary")
hs = hotspots(trace)
mark("advice: hotspots")
fc = fusion_candidates(trace)
mark("advice: fusion")
it = interruptions(trace)
mark("advice: interruptions")
peaks = device_peaks(trace, trace.bundle.peaks if trace.bundle is not None else None)
rf = roofline(trace, peaks)
mark("advice: roofline")
cp = compiled_regions(trace)
mark("advice: compiled")
from profuse.analysis.findings import Findings
from rich.console import Console
con = Console(file=io.StringIO(), width=200, soft_wrap=False, color_system=None)
print_report(con, summary, table, 25)
print_advice(con, Findings(hotspots=hs, interruptions=it, fusion_candidates=fc, peaks=peaks, roofline=rf,
                           compiled=cp), table.device_label)
mark("render table")
trace.close()
mark("close")
print(json.dumps(marks))
"""


def process(argv: list[str], env: dict[str, str], reps: int) -> float | str:
    """Fastest whole-process wall time of ``argv`` over ``reps`` runs (bench_load's measure), or the
    error it printed. The CPU time of the fastest run is kept in ``CPU[argv-key]``: on a loaded machine
    it moves less than the wall time."""
    r = bench_load.process(argv, env, reps)
    if "error" in r:
        return str(r["error"])
    CPU[" ".join(argv)] = r["cpu"]
    return float(r["seconds"])


CPU: dict[str, float] = {}


def show(label: str, argv: list[str], value: float | str) -> None:
    """One line: wall seconds and CPU seconds of the fastest run, or why it failed."""
    if isinstance(value, float):
        print(f"  {label:38} {value:8.3f} s wall {CPU.get(' '.join(argv), float('nan')):8.3f} s CPU")
    else:
        print(f"  {label:38} failed: {value}")


def breakdown(path: Path, env: dict[str, str], reps: int) -> dict[str, float]:
    """Per-stage CPU seconds of an in-process cached report, each stage the fastest of ``reps`` runs."""
    best: dict[str, float] = {}
    for _ in range(reps):
        out = subprocess.run([sys.executable, "-c", BREAKDOWN, str(path)], capture_output=True, text=True,
                             env={**os.environ, **env})
        if out.returncode != 0:
            raise SystemExit(f"breakdown failed: {out.stderr.strip()[-500:]}")
        for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items():
            best[k] = min(v, best.get(k, v))
    return best


def imports_of(argv: list[str], env: dict[str, str]) -> list[tuple[float, str]]:
    """The slowest top-level imports of a command (``python -X importtime``), cumulative seconds."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c",
                          "import sys; from profuse.cli import main; sys.exit(main(sys.argv[1:]))", *argv],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
    rows = []
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self, cumulative, name = (p.strip() for p in line[len("import time:"):].split("|"))
        if not name.startswith(" ") and name == name.lstrip():  # top-level imports only
            rows.append((int(cumulative) / 1e6, name))
    return sorted(rows, reverse=True)[:8]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3, help="runs per measurement; the fastest counts (default 3)")
    ap.add_argument("--only", choices=sorted(INPUTS), action="append", help="measure only these shared traces")
    ap.add_argument("--no-breakdown", action="store_true", help="whole-process figures only")
    ap.add_argument("--json", help="also write the raw measurements here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="profuse-bench-report-"))
    env = {"PROFUSE_CACHE_DIR": str(work / "cache")}
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores "
          "(figures from a busy shared machine are noisy)")
    floor_cmds = {"python -c pass": [sys.executable, "-c", "pass"], "profuse --help": [str(PROFUSE_BIN), "--help"]}
    floor = {k: process(argv, env, max(args.reps, 3)) for k, argv in floor_cmds.items()}
    for k, v in floor.items():
        show(k, floor_cmds[k], v)
    results: dict[str, object] = {"floor": floor}
    targets = []
    for key in args.only or list(INPUTS):
        path = bench_load.shared_trace(key, INPUTS[key])
        mb = path.stat().st_size / 1e6
        report = [str(PROFUSE_BIN), "report", str(path)]
        warm = process(report, env, 1)   # builds the cache
        if isinstance(warm, str):
            print(f"\n{key}: the warm-up failed: {warm}")
            continue
        cmds = {"report (table, advice)": report, "report --format json": [*report, "--format", "json"],
                "report --no-advice": [*report, "--no-advice"],
                "sql count(*) --format csv": [str(PROFUSE_BIN), "sql", str(path), "SELECT count(*) FROM events",
                                              "--format", "csv"]}
        rows = {label: process(argv, env, args.reps) for label, argv in cmds.items()}
        print(f"\n{key}: {path.name}, {mb:,.1f} MB of JSON, cached (first run building the cache: {warm:.2f} s)")
        for label, v in rows.items():
            show(label, cmds[label], v)
        entry: dict[str, object] = {"mb": mb, "process": rows,
                                    "cpu": {label: CPU.get(" ".join(argv)) for label, argv in cmds.items()}}
        if not args.no_breakdown:
            stages = breakdown(path, env, args.reps)
            entry["stages"] = stages
            print("  in-process breakdown (CPU seconds, each stage the fastest of the runs):")
            for label, v in stages.items():
                print(f"    {label:36} {v:8.3f}")
            print(f"    {'sum':36} {sum(stages.values()):8.3f}")
            print("  slowest imports of `report` (python -X importtime, cumulative):")
            for seconds, name in imports_of(["report", str(path)], env):
                print(f"    {name:36} {seconds:8.3f}")
        table = rows["report (table, advice)"]
        if isinstance(table, float):
            targets.append((f"{key}: cached report (table, advice) <= {TARGET_S} s", table <= TARGET_S,
                            f"{table:.3f} s"))
        results[key] = entry
    bench_load.finish(targets, results, args.json, decimals=2)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
