"""The advisor's RMSNorm prediction against the study's measurement, as a ratio (not a test).

    python benchmarks/bench_advisor.py [--runs 3]

Runs ``profuse study rmsnorm`` --runs times; each time, the advisor reads the op-by-op bundle alone
and predicts the saving of fusing RMSNorm per call (its memory-traffic model), and the study
measures it (op by op minus torch.compile, device time per call). Prints predicted, measured and
predicted / measured per run, and the median ratio. The target is a ratio within 0.5-2: a model of
bytes moved, judged on a shared CPU, whose measured saving moves with the machine's load and caches;
wall-clock figures belong here rather than in a test that fails on them.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path

from _bytecode import current_bytecode
from _rows import Row, write_rows

import profuse
from profuse.analysis.advice.fusion import fusion_candidates
from profuse.cli import main as cli


def one_run(out: Path) -> tuple[float, float]:
    """(predicted, measured) µs per call of one study run."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli(["study", "rmsnorm", "--iters", "15", "--out", str(out), "--format", "json"]) == 0
    v = {x["name"]: x for x in json.loads(buf.getvalue())["variants"]}
    measured = v["op_by_op"]["device_us_per_call"] - v["torch.compile"]["device_us_per_call"]
    with profuse.load(v["op_by_op"]["bundle"]) as trace:
        c = next(c for c in fusion_candidates(trace) if c.pattern == "RMSNorm")
    return c.predicted_saving_us / c.instances, measured


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rows", help="write make bench's rows (benchmarks/_rows.py) to this JSON file")
    args = ap.parse_args()
    current_bytecode()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            predicted, measured = one_run(Path(tmp) / str(i))
            ratio = predicted / measured if measured > 0 else float("inf")
            ratios.append(ratio)
            print(f"run {i + 1}: predicted {predicted:,.1f} µs, measured {measured:,.1f} µs, ratio {ratio:.2f}")
    med = statistics.median(ratios)
    print(f"median predicted/measured {med:.2f} (target 0.5-2: {'within' if 0.5 <= med <= 2 else 'outside'})")
    write_rows([Row("RMSNorm predicted / measured saving", f"{med:.2f} (median of {len(ratios)})", "0.5-2",
                    0.5 <= med <= 2, "the study's op by op minus torch.compile, same run")], args.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
