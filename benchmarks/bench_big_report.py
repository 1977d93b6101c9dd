"""Cold ``profuse report`` on big traces, phase by phase (issue 44: a report as fast as its load).

    python benchmarks/bench_big_report.py [--reps 2] [--only bert1g] [--no-big] [--rows rows.json]

Inputs: ``bert1g`` (h100_bert_small repeated to ~1 GB with shifted times and ids: bench_load.scaled_trace;
``bert50`` with --no-big) and ``tiny`` (10^6 tiny CPU ops: 500,000 ``aten::add`` of 3 µs each holding an
``aten::empty`` of 1 µs, one thread, every 4 µs). Each is reported ``--reps`` times as a whole process,
``profuse report PATH --format json --no-cache --timings`` under ``/usr/bin/time``: the wall time of each
phase (src/profuse/_progress.py) and the peak RSS, as the fastest and slowest run (the machine is shared:
read the range). Not a test: it reports, never fails. With ``--rows`` it writes make bench's rows.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import bench_load  # the scaled traces and the bench folder
from _bytecode import current_bytecode
from _rows import Row, write_rows

PROFUSE = [sys.executable, "-m", "profuse"]
TIME = "/usr/bin/time"


def tiny_trace() -> Path:
    """The 10^6-op CPU trace (tests/fuzz_corpus.py ``tiny_events``), built once into the bench folder."""
    path = bench_load.WORK / "tiny" / "tiny.json"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    row = ('{{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":{t},"dur":3}},'
           '{{"ph":"X","cat":"cpu_op","name":"aten::empty","pid":1,"tid":1,"ts":{t1},"dur":1}}')
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text('{"traceEvents": [' + ",".join(row.format(t=4 * k, t1=4 * k + 1) for k in range(500_000)) + "]}")
    os.replace(tmp, path)
    return path


def run_once(path: Path) -> tuple[dict[str, float], float, int]:
    """One cold report: seconds per phase (``outer/inner`` names), the wall seconds and peak RSS in KB."""
    cmd = [TIME, "-f", "TIME %e %M", *PROFUSE, "report", str(path), "--format", "json", "--no-cache", "--timings"]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip()[-300:])
    phases: dict[str, float] = {}
    stack: list[str] = []
    wall, rss = 0.0, 0
    for line in r.stderr.splitlines():
        if line.startswith("TIME "):
            _, w, m = line.split()
            wall, rss = float(w), int(m)
            continue
        m_ = re.match(r"^( +)(.+?) +([0-9.]+)$", line)
        if not m_:
            continue
        depth = (len(m_[1]) - 2) // 2
        stack[depth:] = [m_[2]]
        phases["/".join(stack)] = float(m_[3])
    return phases, wall, rss


def measure(name: str, path: Path, reps: int) -> list[Row]:
    """Print each phase's range over ``reps`` runs; a row for the whole and one per analysis phase."""
    runs = [run_once(path) for _ in range(reps)]
    size = path.stat().st_size / 1e6
    print(f"\n{name}: {path} ({size:,.0f} MB), {reps} cold report(s)")
    names = list(runs[0][0])
    for n in names:
        vals = [r[0].get(n, 0.0) for r in runs]
        depth = n.count("/")
        print(f"  {'  ' * depth}{n.rpartition('/')[2]:<{34 - 2 * depth}} {min(vals):8.2f} - {max(vals):8.2f} s")
    walls, rss = [r[1] for r in runs], [r[2] for r in runs]
    print(f"  process wall {min(walls):.2f} - {max(walls):.2f} s, peak RSS {min(rss) / 1e3:,.0f} - {max(rss) / 1e3:,.0f} MB")
    load = min(r[0].get("load", 0.0) for r in runs)
    rows = [Row(f"cold report, {name} ({size:,.0f} MB)", f"{min(walls):.2f}-{max(walls):.2f} s",
                "phases printed (issue 44)", None, f"load {load:.2f} s, peak RSS {max(rss) / 1e3:,.0f} MB")]
    for n in names:
        if n.startswith("analyse/") and n.count("/") == 1 and not n.endswith("/other"):
            vals = [r[0].get(n, 0.0) for r in runs]
            rows.append(Row(f"  {name}: {n.partition('/')[2]}", f"{min(vals):.2f}-{max(vals):.2f} s",
                            "near-linear (issue 44)", None, f"load {load:.2f} s"))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2, help="cold reports per input (default 2)")
    ap.add_argument("--only", action="append", choices=("bert1g", "bert50", "tiny"), help="only these inputs")
    ap.add_argument("--no-big", action="store_true", help="bert50 instead of bert1g")
    ap.add_argument("--rows", help="write make bench's rows here (benchmarks/_rows.py)")
    args = ap.parse_args()
    current_bytecode()
    inputs = args.only or ["bert50" if args.no_big else "bert1g", "tiny"]
    rows: list[Row] = []
    for name in inputs:
        path = tiny_trace() if name == "tiny" else bench_load.scaled_trace(name)
        rows += measure(name, path, args.reps)
    write_rows(rows, args.rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
