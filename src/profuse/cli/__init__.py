"""``profuse`` command line: one module per subcommand, ``main(argv) -> int`` callable in-process."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ..errors import UserError, printable
from ..redact import redact_text, redacted_output
from . import diff, explore, mcp, neff, peaks, report, run, sql, study
from ._parser import Parser

# the commands that only read traces and files (no user script, no model run): see _one_blas_thread
READING = {"report", "sql", "diff", "explore", "neff", "mcp"}
COMMANDS = {"report": report, "sql": sql, "run": run, "study": study, "diff": diff, "explore": explore, "peaks": peaks,
            "neff": neff, "mcp": mcp}

EPILOG = """examples:
  profuse report trace.json.gz       where the time went, levers, op table
  profuse report trace.json.gz --group-by module --top 20
  profuse sql trace.json.gz "SELECT name, sum(dur)/1e3 AS us FROM events
    WHERE kind='kernel' GROUP BY 1"
  profuse run --out prof -- python my_script.py --batch 8
  profuse study rmsnorm
  profuse neff model.neff            a compiled Neuron executable, read offline
"""


# what OpenBLAS reads for its thread count, first found wins: a user who set any of them chose
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def _one_blas_thread() -> None:
    """One OpenBLAS thread for this process, unless the user chose a number (:data:`_BLAS_THREADS`) or
    numpy is in already.

    On import numpy's OpenBLAS starts a thread per core that spins waiting for work (measured on 2 cores:
    0.18 s of CPU in the first moments after ``import numpy``, while the trace is read and scanned). A
    command that only reads traces never multiplies matrices, so it has nothing to lose. Not for ``run``
    and ``study`` (a user's script or model: on some machines torch's own BLAS is OpenBLAS) nor for
    ``main()`` called from Python (the caller's process is not profuse's to tune).
    """
    if "numpy" not in sys.modules and not any(v in os.environ for v in _BLAS_THREADS):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


def build_parser() -> argparse.ArgumentParser:
    """The ``profuse`` argument parser with one sub-command per module of ``profuse.cli``."""
    from .. import __version__

    parser = Parser(
        prog="profuse", description="Where PyTorch inference spends its time, on any device, and proof of the fix.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"profuse {__version__}")
    # not dest="command": `run` keeps the script's command line under that name
    subs = parser.add_subparsers(dest="subcommand", metavar="COMMAND")
    for mod in COMMANDS.values():
        mod.add_parser(subs)
    return parser


def _out_of_memory(args: argparse.Namespace) -> int:
    """One line for a load or an analysis that ran out of memory (an address-space limit, a small machine)."""
    where = getattr(args, "path", None) or getattr(args, "a", None) or args.subcommand
    print(f"profuse: {printable(redact_text(str(where)))}: out of memory while reading or analysing it: run it on "
          "a machine with more memory, or record a shorter capture", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``profuse`` command line; a user error prints one line and returns 2, never a traceback."""
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if not args.subcommand:
        parser.print_help()
        return 2
    if argv is None and args.subcommand in READING:
        _one_blas_thread()
    try:
        if args.subcommand == "run":  # the script's own output is the user's, not profuse's
            return int(args.func(args) or 0)
        with redacted_output(keep=getattr(args, "keep_metadata", False)):
            return int(args.func(args) or 0)
    except UserError as err:
        print(f"profuse: {printable(redact_text(str(err)))}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("profuse: interrupted", file=sys.stderr)
        return 130
    except MemoryError:   # numpy's too; DuckDB's own is below
        return _out_of_memory(args)
    except BrokenPipeError:
        return 0
    except Exception as err:
        if type(err).__name__ != "OutOfMemoryException":   # duckdb's, without importing duckdb here
            raise
        return _out_of_memory(args)
