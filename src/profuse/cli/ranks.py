"""``profuse report DIR`` on a folder (or glob) of rank traces: the cross-rank report."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ._common import console, emit

if TYPE_CHECKING:
    from ..ranks.maptask import MapResult

ENGINES = ("local", "ray")  # profuse.ranks.engine.ENGINES, named here so --help imports no engine


def add_rank_args(p: argparse.ArgumentParser) -> None:
    """Add the options for a folder or glob of rank traces (--engine and its settings)."""
    g = p.add_argument_group("several rank traces (a folder or glob of them)")
    g.add_argument("--engine", choices=ENGINES, default="local",
                   help="where each rank is summarised: local (a process pool sized to cores and memory, "
                        "the default) or ray (Ray tasks)")
    g.add_argument("--ray-address", metavar="HOST:PORT",
                   help="join this Ray cluster (default: $RAY_ADDRESS, else start Ray on this machine)")
    g.add_argument("--workers", type=int, metavar="N", help="local engine: at most N processes")
    g.add_argument("--work-dir", metavar="DIR",
                   help="where per-rank Parquet tables go (default: the profuse cache); with Ray on several "
                        "machines, a path every node can read and write, as the traces must be")


def run_ranks_report(args: argparse.Namespace, files: list[Path]) -> int:
    """``profuse report DIR``: summarise every rank trace and print, or write, the rank report."""
    from rich.console import Console
    from rich.text import Text

    from .._io import atomic_write
    from ..ranks import run_ranks
    from ..report.ranks import print_ranks, render_ranks_json

    err = Console(stderr=True)
    done = {"n": 0}

    def on_done(res: MapResult) -> None:
        done["n"] += 1
        if sys.stderr.isatty():
            err.print(f"mapped {done['n']}/{len(files)} ranks", end="\r")

    result = run_ranks(args.path, files, engine=args.engine, ray_address=args.ray_address, workers=args.workers,
                       lenient=args.lenient, cache=not args.no_cache, fusion=not args.no_advice,
                       work_dir=args.work_dir, on_done=on_done)
    from ..redact import redacted

    doc = redacted(result.doc, keep=getattr(args, "keep_metadata", False))  # every string, once, as a report's
    if args.format == "json":
        text = render_ranks_json(doc)
        return emit(text, args.output, json_document=True)
    if args.format == "html":
        from ..report.html import render_ranks_html

        atomic_write(args.output, render_ranks_html(doc))
        print(f"wrote {args.output}")
        return 0
    con = console()
    print_ranks(con, doc, args.top or None)
    cached = sum(1 for m in result.maps if m.cached)
    con.print(Text(f"{len(result.maps)} ranks mapped with --engine {args.engine} on {len(result.nodes)} node(s) "
                   f"in {result.map_seconds:.1f} s ({cached} from an earlier run), reduced in "
                   f"{result.reduce_seconds:.2f} s; tables in {result.folder}", style="dim"))
    return 0
