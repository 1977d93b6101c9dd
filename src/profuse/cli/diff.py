"""``profuse diff A B``: what changed between two runs, and a regression gate for CI."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UserError, printable
from ._common import add_load_args, console, count, emit, load_trace
from .ranks import add_rank_args

if TYPE_CHECKING:
    from ..trace import Trace

HELP = """examples:
  profuse diff before/ after/
      two bundles
  profuse diff base.json.gz test.json.gz --format json
  profuse diff base/ new/ --fail-if-slower 5%
      exit 1 when NEW's steps are significantly >5% slower
  profuse diff base/ new/ --fail-if-slower 5% --metric aten::addmm \\
    --format junit -o diff.xml
  profuse diff run_a/ run_b/
      two folders of rank traces (or repeated runs)

Ops are grouped by name and input shapes over the nn.Module instances they ran
in (each group's instances: --format json), so a CUDA run and a ROCm run
compare; attention and GEMM ops a backend names its own way (flash against
efficient attention) are matched by class; modules by class; kernels by name
only between runs on the same device (device names compared).

Each metric's per-step times (ProfilerStep#N, else serving steps) are compared
by an exact Mann-Whitney U test: a verdict needs 4 steps a side at least; with
fewer it says "cannot tell" and the gate passes. The gate refuses to judge
(exit 2) a side that is empty, whose bundle's capture did not complete, that
marks no steps where the other does, or that --lenient left short of more than
1% of its events. See docs/ci.md.

Exit codes: 0 (no significant slowdown beyond the threshold), 1 (gate failed),
2 (bad input).
Tables fit the terminal (COLUMNS): names shortened in the middle ("…"),
columns left out before anything wraps; --format json gives every name and
column.
"""

FORMATS = ("table", "json", "markdown", "junit")

# the share of a trace's events (%) --lenient may skip before the gate refuses to judge the trace
LENIENT_SKIP_LIMIT_PCT = 1.0


def percent(value: str) -> float:
    """'5%' or '5' -> 5.0; a negative or non-numeric threshold is a usage error (exit 2)."""
    try:
        v = float(value.strip().removesuffix("%"))
    except ValueError:
        v = -1.0
    if not 0 <= v < 1e6:
        raise argparse.ArgumentTypeError(f"must be a percentage such as 5% (0 or more), not {value!r}")
    return v


def add_parser(subs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``profuse diff``."""
    p = subs.add_parser("diff", help="compare two runs: per-op ratios, devices, noise verdicts, a CI gate",
                        epilog=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", help="the baseline trace or bundle")
    p.add_argument("b", help="the trace or bundle to compare with it")
    p.add_argument("--format", choices=FORMATS, default="table",
                   help="markdown: a pull-request comment; junit: JUnit XML for CI")
    p.add_argument("-o", "--output", help="write the json, markdown or junit output to this file")
    p.add_argument("--fail-if-slower", type=percent, metavar="PCT",
                   help="exit 1 when B is significantly slower than A by more than PCT (e.g. 5%%)")
    p.add_argument("--metric", default="step",
                   help="what the gate compares, per step: step (default), device_busy, an op class "
                        "(matmul, attention, norm, ...) or an op name")
    p.add_argument("--top", type=count, default=15)
    add_load_args(p)
    add_rank_args(p)
    p.set_defaults(func=run)


# per trace of a folder: the figure its rank summary gives for a metric
FOLDER_METRICS = {"step": "step_median_us", "device_busy": "device_us"}


def _diff_folders(args: argparse.Namespace, files_a: list[Path], files_b: list[Path]) -> int:
    """Two folders of rank traces or repeated runs: rank by rank, and the distributions compared
    (one figure per trace: its median step time, its device time) by the same test."""
    import msgspec
    from rich.text import Text

    from ..analysis.compare.ranks import RanksDocument, diff_docs
    from ..analysis.compare.significance import TEST, compare
    from ..ranks import run_ranks
    from ..report.diff import junit_of, markdown_folders, verdict_line
    from ..report.ranks import print_ranks_diff, render_ranks_json

    if args.metric not in FOLDER_METRICS:
        raise UserError(f"--metric {args.metric!r}: folders compare {' or '.join(FOLDER_METRICS)} (per trace)")
    docs = [run_ranks(path, files, engine=args.engine, ray_address=args.ray_address, workers=args.workers,
                      lenient=args.lenient, cache=not args.no_cache, work_dir=args.work_dir).doc
            for path, files in ((args.a, files_a), (args.b, files_b))]

    def per_trace(doc: RanksDocument, key: str) -> list[float]:  # key: a RankRow field (FOLDER_METRICS)
        return [float(v) for v in (getattr(r, key) for r in doc.ranks) if v is not None]

    verdicts = [compare(m, per_trace(docs[0], key), per_trace(docs[1], key),
                        threshold_pct=args.fail_if_slower if m == args.metric else None)
                for m, key in FOLDER_METRICS.items()]
    entries = verdicts   # the records themselves, figures rounded when made
    d = msgspec.structs.replace(diff_docs(docs[0], docs[1]), verdicts=entries)
    if args.format == "json":
        emit(render_ranks_json(d), args.output, json_document=True)
    elif args.format == "markdown":
        emit(markdown_folders(args.a, args.b, entries), args.output)
    elif args.format == "junit":
        emit(junit_of(entries, [("a", args.a), ("b", args.b), ("test", TEST + "; one figure per trace")]), args.output)
    else:
        con = console()
        print_ranks_diff(con, d, args.top or None)
        for e in entries:  # one figure per trace: "steps" are the folder's traces here
            con.print(Text("per trace, " + verdict_line(e).replace("step(s)", "trace(s)")))
    return 1 if any(v.fails for v in verdicts) else 0


def _unjudgeable(t: Trace, other: Trace, other_label: str) -> str | None:
    """Why the gate cannot judge trace ``t`` against ``other`` (None: it can)."""
    from ..analysis.compare.step_samples import step_count
    from ..analysis.optable import total_device_us

    if t.meta.events == 0:
        return "holds no events: nothing to compare"
    meta = t.bundle
    if meta is not None and meta.status != "complete":
        if not meta.status:
            return "its bundle's meta.json records no capture status: whether the run is whole is unknown"
        why = f" ({meta.error})" if meta.error else ""
        return f"its bundle's capture {meta.status}{why}: the run it holds is not whole"
    skipped = sum(t.meta.skipped.values())
    if skipped and 100 * skipped / (t.meta.events + skipped) > LENIENT_SKIP_LIMIT_PCT:
        pct = 100 * skipped / (t.meta.events + skipped)
        return (f"--lenient skipped {skipped:,} of its {t.meta.events + skipped:,} events ({pct:.1f}%, more than "
                f"{LENIENT_SKIP_LIMIT_PCT:g}%): what is left is not the run")
    if total_device_us(t) == 0 and (theirs := total_device_us(other)) > 0:
        return f"has no device time while {other_label} has {theirs:,.1f} µs: it lost its device activities"
    if step_count(t) == 0 and (n := step_count(other)):
        return (f"marks no steps while {other_label} marks {n}: per-step times cannot be compared with one "
                "whole-trace figure; record steps on both sides (profuse run --steps N)")
    return None


def check_sides(args: argparse.Namespace, a: Trace, b: Trace) -> None:
    """With ``--fail-if-slower``: a user error (exit 2) naming the side that cannot be judged and why
    (docs/ci.md); without it the same as a note on stderr, the diff still shown."""
    for label, path, t, other, other_label in (("A", args.a, a, b, "B"), ("B", args.b, b, a, "A")):
        why = _unjudgeable(t, other, other_label)
        if why is None:
            continue
        if args.fail_if_slower is not None:
            raise UserError(f"{label} {path}: {why}; the gate cannot judge it")
        print(printable(f"profuse: note: {label} {path}: {why}"), file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Compare two traces, bundles or folders of traces; print or write the differences; gate."""
    from ..ranks.discover import candidates

    files_a, files_b = candidates(args.a), candidates(args.b)
    if files_a is not None or files_b is not None:
        if files_a is None or files_b is None:
            one, many = (args.a, args.b) if files_a is None else (args.b, args.a)
            raise UserError(f"{many} holds several traces but {one} is one trace: "
                            "compare two folders of traces, or two traces")
        return _diff_folders(args, files_a, files_b)
    from ..analysis.compare.memory_diff import memory_diff
    from ..analysis.compare.step_samples import check_metric
    from ..payloads.build import compare_of

    with load_trace(args.a, args) as a, load_trace(args.b, args) as b:
        check_metric(args.metric, [a, b])
        check_sides(args, a, b)
        d = compare_of(a, b, gate_metric=args.metric, threshold_pct=args.fail_if_slower)
        memory = memory_diff(a, b)
    if memory is not None:
        d.memory = memory
    failed = any(v.fails for v in d.verdicts)
    if args.format == "json":
        from ..report.json_report import render_json

        emit(render_json(d), args.output, json_document=True)
    elif args.format == "markdown":
        from ..report.diff import markdown

        emit(markdown(d, args.top or len(d.ops)), args.output)
    elif args.format == "junit":
        from ..report.diff import junit

        emit(junit(d), args.output)
    else:
        from ..report.console_diagnosis import render_budget_diff
        from ..report.console_memory import render_memory_diff
        from ..report.diff import print_diff

        con = console()
        print_diff(con, d, args.top or None)
        if d.budget is not None:
            render_budget_diff(con, d.budget)
        render_memory_diff(con, memory, args.top or 15)
    return 1 if failed else 0
