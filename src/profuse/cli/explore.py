"""``profuse explore``: the browser explorer over one trace, or two to compare."""
from __future__ import annotations

import argparse
import sys

from ..errors import UserError
from ..redact import RedactingStream
from ._common import add_load_args, load_trace
from .ranks import add_rank_args

HELP = """examples:
  profuse explore prof/                  open the explorer on a bundle
  profuse explore before/ after/         two runs: the Compare view diffs them
  profuse explore trace.json.gz --no-browser --port 8765
  profuse explore run/                   a folder of rank traces: the Ranks
                                         view, click a rank to open its own
                                         views (loaded when first opened)

The server listens on 127.0.0.1 only and answers only the URL it prints: its
?token= is made anew each start, so other accounts on this machine cannot open
it. Ctrl-C (or SIGTERM) stops it.
"""


def add_parser(subs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``profuse explore``."""
    p = subs.add_parser("explore", help="browser explorer: timeline, ops, modules, compare", epilog=HELP,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", metavar="PATH", help="one trace or bundle, or two to compare")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--no-browser", action="store_true", help="print the URL, do not open a browser")
    p.add_argument("--keep-metadata", action="store_true", help="show trace metadata that looks secret")
    add_load_args(p)
    add_rank_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve one trace, or two to compare, on 127.0.0.1 until interrupted."""
    if len(args.paths) > 2:
        raise UserError("profuse explore takes one trace, or two to compare")
    from ..trace._glibc import one_arena

    one_arena()  # before the first thread (the hash, the server's): its analyses reuse each other's freed blocks
    try:
        from ..explorer.server import serve
    except ImportError as e:
        raise UserError(f"profuse explore needs its server packages ({e.name}): pip install profuse") from None
    from ..ranks.discover import candidates

    rank_files = candidates(args.paths[0]) if len(args.paths) == 1 else None
    ranks = None
    if rank_files is not None:
        from ..explorer.server import RankRuns
        from ..ranks import run_ranks

        doc = run_ranks(args.paths[0], rank_files, engine=args.engine, ray_address=args.ray_address,
                        workers=args.workers, lenient=args.lenient, cache=not args.no_cache,
                        work_dir=args.work_dir).doc
        ranks = RankRuns(doc, lambda path: load_trace(path, args))
    # opened by stat, hashed behind: the server answers nothing from a trace before its bytes are checked
    traces = [] if ranks is not None else [load_trace(p, args, verify="behind") for p in args.paths]
    try:
        serve(traces, port=args.port, open_browser=not args.no_browser, keep_metadata=args.keep_metadata,
              on_ready=_say_url, ranks=ranks)
    except OSError as e:
        raise UserError(f"cannot listen on 127.0.0.1:{args.port} ({e.strerror})") from None
    finally:
        for t in traces:
            t.close()
        for r in ranks.runs if ranks is not None else []:
            r.unload()
    print("profuse explorer stopped", file=sys.stderr)
    return 0


def _say_url(url: str) -> None:
    """Print the explorer's URL on stdout as it is, past the redaction of profuse's output: its
    ``?token=`` is this session's own key, for the user who started it, not a secret of the trace's."""
    sys.stdout.flush()
    out = sys.stdout
    while isinstance(out, RedactingStream):
        out = out.inner
    print(f"profuse explorer: {url}  (Ctrl-C to stop)", file=out, flush=True)
