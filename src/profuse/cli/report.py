"""``profuse report``: the correlated op table of a trace or bundle."""
from __future__ import annotations

import argparse
import contextlib
from typing import TYPE_CHECKING

from ..analysis._choices import GROUPS, NOT_APPLICABLE, SORT_KEYS, check_choices
from ..errors import UserError
from ._common import add_load_args, count, emit, print_view, start_load_trace, warm_imports
from .ranks import add_rank_args, run_ranks_report

if TYPE_CHECKING:
    from ..payloads.report import Analysed
    from ..trace import Trace

# raw text (not re-wrapped), each example's comment on the line below it: every line fits 80 columns
HELP = """examples:
  profuse report trace.json.gz
  profuse report trace.json.gz --group-by kernel --top 10
  profuse report prof/ --format json > report.json
      a bundle folder works too
  profuse report prof/ --format html -o report.html
      one file, opens offline
  profuse report snapshot.pickle
      torch.cuda.memory._dump_snapshot: read, never run
  profuse report explorer_out/
      a neuron-explorer Parquet folder: built from the published schema 7.4.0,
      not yet checked on a capture

several rank traces of one distributed run (a folder or a quoted glob): one
cross-rank report
  profuse report run/
      ranks, stragglers, collective skew, step heat map
  profuse report 'run/*rank*.json.gz' --format json
      schema profuse.ranks/1
  profuse report run/ --engine ray
      map the ranks as Ray tasks (starts Ray here)
  profuse report run/ --engine ray --ray-address head-node:6379
      (or set RAY_ADDRESS)
"""


def add_parser(subs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``profuse report``."""
    p = subs.add_parser("report", help="where the time went, the levers to pull, the op table", epilog=HELP,
                        description="Show where time goes: each step's time budget, the levers ranked by what\n"
                                    "they buy back (each with its evidence), and every op with its CPU time and\n"
                                    "the device time of the kernels it launched.",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", help="a Kineto trace (.json / .json.gz), a profuse bundle folder, a folder or glob "
                                "of several rank traces, a neuron-explorer Parquet folder, or a "
                                "torch.cuda.memory._dump_snapshot pickle")
    p.add_argument("--format", choices=("table", "json", "html"), default="table",
                   help="html: one self-contained file (needs -o), viewable offline")
    p.add_argument("--group-by", choices=GROUPS, default="op",
                   help="the op table's rows: per op (default), per op and input shapes, per nn.Module class, "
                        "or per kernel")
    p.add_argument("--sort", choices=SORT_KEYS, default="self_device", metavar="KEY",
                   help=f"order the rows by KEY: {', '.join(SORT_KEYS)} (default %(default)s); not by a column "
                        f"the grouping has no figure for (shown -): {_not_applicable()}")
    p.add_argument("--top", type=count, default=25,
                   help="rows in the table and html formats (default 25; 0 = all); json gives every row")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.add_argument("--keep-metadata", action="store_true",
                   help="keep values that look secret (passwords, tokens, keys in command lines, URLs and "
                        "trace metadata); by default they are shown as [redacted]")
    p.add_argument("--no-advice", action="store_true",
                   help="the op table only: no time budget, levers, hotspots, interruptions, fusion "
                        "candidates, roofline")
    p.add_argument("--timings", action="store_true",
                   help="print the wall time of each phase (load, analyses, rendering) on stderr at the end; "
                        "[beside] marks an analysis run on the other thread, overlapping the rest")
    add_load_args(p)
    add_rank_args(p)
    p.set_defaults(func=run)


def _not_applicable() -> str:
    """The sort keys refused per grouping, in words: "self_cpu by module, self_cpu or cpu_total by kernel"."""
    return ", ".join(f"{' or '.join(keys)} by {group}" for group, keys in NOT_APPLICABLE.items())


def _import_while_loading(fmt: str) -> None:
    """The analyses and the renderer of ``fmt``, imported while the trace loads (trace/early.py)."""
    import importlib

    renderer = {"json": "json_report", "html": "html", "table": "console"}[fmt]
    for name in ("analysis", "analysis.advice.findings", "analysis.memory", "payloads.report", f"report.{renderer}",
                 "analysis.diagnosis.levers", "analysis.submissions", "payloads.calltree",
                 *(("payloads.build",) if fmt == "html" else ())):
        importlib.import_module(f"profuse.{name}")
    importlib.import_module("numpy.ma")   # the analysis's reads of columns with NULLs (analysis/_read.py)


def run(args: argparse.Namespace) -> int:
    """Print, or write as JSON or HTML, the op table and findings of one trace (or a rank report for a folder);
    with ``--timings``, then the wall time of each phase on stderr (on a terminal, a progress line names
    the phase once the report has taken over 2 s: _progress.py)."""
    if args.format == "html" and not args.output:
        raise UserError("--format html writes a file: add -o report.html")
    check_choices(args.group_by, args.sort)  # a sort by a column the grouping lacks: refused before any work
    import sys

    from .._progress import tracking

    with tracking(f"report {args.path}") as phases:
        code = _report(args)
    if getattr(args, "timings", False):
        print(phases.format(), file=sys.stderr)
    return code


def _report(args: argparse.Namespace) -> int:
    """:func:`run`'s work, its phases marked."""
    from .._progress import phase
    from .report_cached import cached_report

    # first: one trace whose report the cache holds for these options is printed from it (a snapshot,
    # a folder or glob of ranks never has an entry), before anything else is imported or started
    with phase("cached report", quiet=True):
        done = cached_report(args)
    if done is not None:
        return done
    from ..trace._glibc import keeping

    with contextlib.ExitStack() as kept:
        # what the load frees stays for the analysis after it, which would fault it all in again (the process
        # ends after the report): from before the load starts, so that it holds whenever the load ends
        kept.enter_context(keeping())
        # one trace file: its read and scan start now, and the imports below run beside them
        finish_load = start_load_trace(args.path, args)
        from ..ranks.discover import candidates
        from ..trace.sniff import is_snapshot_path

        if is_snapshot_path(args.path):  # a torch.cuda.memory._dump_snapshot pickle
            from .snapshot import run_snapshot_report

            kept.close()   # no analysis of a loaded trace follows
            with phase("snapshot report", quiet=True):  # it prints as it goes: no line over its output
                return run_snapshot_report(args)
        files = candidates(args.path)
        if files is not None:
            kept.close()   # several traces' loads, each analysed apart: each hands back what it freed
            with phase("ranks report", quiet=True):
                return run_ranks_report(args, files)
        # the libraries the analysis and the renderer need come in on another thread while the trace's
        # bytes are hashed and its cache opened
        warm_imports("numpy", *(("msgspec",) if args.format in ("json", "html") else ("rich.console", "rich.table")))
        with phase("load", quiet=True):  # the load shows its own bar
            _import_while_loading(args.format)
            loaded = finish_load()
        return _analysed_report(args, loaded)


def _analysed_report(args: argparse.Namespace, trace: Trace) -> int:
    """The report of the loaded trace: analysed, then rendered (:func:`_report`'s second half). The trace
    closes behind the rendering once the analysis has read it: closing frees DuckDB's buffers (0.16 s of a
    3 GB trace's report), which the view and the rendering never read."""
    import threading

    from .._progress import phase
    from ..trace.build import bulk_settings

    try:
        with bulk_settings():  # the analysis as the load: no cycle collector, no 2 MB pages
            from ..payloads.report import analyse

            with phase("analyse"):
                analysed = analyse(trace, group_by=args.group_by, sort=args.sort, advice=not args.no_advice)
            if args.format == "html":
                with trace:   # the HTML payloads read the trace again
                    return _html_report(args, trace, analysed)
    except BaseException:
        trace.close()
        raise
    _ = trace.meta   # read now (a cached property): remember() reads it while or after the trace closes
    closing = threading.Thread(target=trace.close, name="profuse-close")
    closing.start()
    try:
        return _rendered(args, trace, analysed)
    finally:
        closing.join()


def _html_report(args: argparse.Namespace, trace: Trace, analysed: Analysed) -> int:
    """The HTML report of the analysed trace, written to ``args.output``."""
    from .._io import atomic_write
    from .._progress import phase
    from ..payloads.build import report_payloads
    from ..report.html import render_html

    with phase("payloads"):
        payloads = report_payloads(trace, analysed, top=args.top or None, keep_metadata=args.keep_metadata)
    with phase("render", quiet=True):
        atomic_write(args.output, render_html(payloads))
        print(f"wrote {args.output}")
    return 0


def _rendered(args: argparse.Namespace, trace: Trace, analysed: Analysed) -> int:
    """The table or JSON report of the analysed trace, printed or written; remembered for the next report."""
    from .._progress import phase
    from ..payloads.report import report_view
    from .report_cached import remember

    with phase("view"):
        view = report_view(analysed, top=args.top, keep_metadata=args.keep_metadata)
    with phase("render", quiet=True):
        if args.format == "json":
            from ..report.json_report import render_json  # each format imports only its own renderer

            text = render_json(view.document)
            remember(trace, args, view, text)  # written behind, for the next report of these bytes
            return emit(text, args.output, json_document=True)
        remember(trace, args, view)
        return print_view(view, args.output)
