"""``profuse neff``: what a compiled Neuron executable holds, read offline."""
from __future__ import annotations

import argparse
import io
import json

from ._common import console, count, emit

# raw text (not re-wrapped), each example's comment on the line below it: every line fits 80 columns
HELP = """examples:
  profuse neff model.neff
      header, engines, HLO statistics, tensors, instruction sources
  profuse neff model.neff --format json
      the same as JSON (schema profuse.neff/1)
  profuse neff prof/neff_1234.neff --top 0
      every instruction-source row
  profuse neff model.neff -o model.txt
      the table as plain text in a file
"""


def add_parser(subs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``profuse neff``."""
    p = subs.add_parser("neff", help="read a compiled Neuron executable (NEFF) offline", epilog=HELP,
                        description="Show a NEFF's header, subgraphs, per-engine instruction streams, the\n"
                                    "compiler's HLO statistics, tensors, and which HLO and framework ops each\n"
                                    "engine's instructions come from (when the NEFF carries debug info). Needs no\n"
                                    "Neuron SDK and no device.",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", help="a .neff file")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--top", type=count, default=20, help="instruction-source rows per subgraph (0 = all)")
    p.add_argument("-o", "--output", help="write to this file instead of stdout (plain text for the table)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Read a NEFF offline and print it as a table or JSON."""
    from .._io import atomic_write
    from ..neuron.neff import read_neff

    neff = read_neff(args.path)
    if args.format == "json":
        text = json.dumps(neff.as_dict(), indent=2)
        return emit(text, args.output)
    from ..report.neff import print_neff

    if not args.output:
        print_neff(console(), neff, top=args.top or None)
        return 0
    from rich.console import Console

    buf = io.StringIO()
    print_neff(Console(file=buf, width=200, soft_wrap=False, color_system=None), neff, top=args.top or None)
    atomic_write(args.output, buf.getvalue())
    return 0
