"""``profuse run``: profile an unmodified Python script."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..errors import UserError
from ._common import console, count

if TYPE_CHECKING:
    from rich.console import Console

    from ..capture.runner import RunResult

# raw text (not re-wrapped): every line fits 80 columns
HELP = """examples:
  profuse run -- python infer.py --batch 8
  profuse run --out prof --warmup 2 --steps 10 -- python -m mypkg.serve
  profuse run --streams ops,device,runtime -- python infer.py
      no module scopes: less overhead

Each call of the outermost nn.Module is one step (marked ProfilerStep#N); the
first --warmup calls are not recorded. Module scopes are recorded by default.
A script with no nn.Module is profiled whole. The script's output and exit
code are kept.
"""


def add_parser(subs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``profuse run``."""
    p = subs.add_parser("run", help="profile an unmodified script: profuse run -- python script.py", epilog=HELP,
                        description="Run a Python script under the profiler and write a bundle.",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="profuse-out/run", help="bundle folder (default profuse-out/run)")
    p.add_argument("--warmup", type=int, default=1, help="outermost forward calls to skip (default 1)")
    p.add_argument("--steps", type=int, default=5, help="outermost forward calls to record (default 5)")
    p.add_argument("--streams", default="ops,device,runtime,shapes,python",
                   help="ops,device,runtime,python,shapes,memory,flops (default ops,device,runtime,shapes,python:"
                        " python records nn.Module scopes, which the advisor needs)")
    p.add_argument("--memory", action="store_true",
                   help="record every allocation and free (torch's profile_memory): memory columns, peaks")
    p.add_argument("--devices", default="auto",
                   help="cpu, cuda, cuda:0,1, neuron / privateuse1 (default: every device present)")
    p.add_argument("--top", type=count, default=15, help="op table rows to print after the run")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- python script.py ARGS")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run a script under the profiler and write a bundle; needs torch.

    A Ctrl-C at any moment ends in one line and exit 130 with no half bundle, also where it broke
    something that only fails later (see ``profuse._interrupt``).
    """
    from .. import _interrupt

    _interrupt.watch()
    try:
        return _run(args)
    except UserError:
        raise
    except BaseException as err:
        if isinstance(err, KeyboardInterrupt) or _interrupt.seen():
            raise KeyboardInterrupt from None  # the command line says so in one line, exit 130
        raise


def _run(args: argparse.Namespace) -> int:
    try:
        from ..capture import ProfileConfig, run_script
    except ImportError:
        raise UserError("profuse run needs torch: pip install 'profuse[capture]'") from None
    try:
        cfg = ProfileConfig(out=args.out, warmup=args.warmup, steps=args.steps, streams=args.streams,
                            devices=args.devices, memory=args.memory)
        cfg.device_map()
    except ValueError as e:
        raise UserError(str(e)) from None
    result = run_script(args.command, cfg)
    sys.stdout.flush()
    from ..redact import redacted_output

    with redacted_output():  # the script's output was its own; what profuse prints of the trace is redacted
        return _after_run(args, result)


def _after_run(args: argparse.Namespace, result: RunResult) -> int:
    """The notes, the op table of the bundle just written and where it is (the script has ended)."""
    con = console()
    err = console_err()
    for note in result.notes:
        err.print(f"profuse: {note}", style="yellow", markup=False)
    if result.bundle is None:
        err.print(f"profuse: no bundle written ({result.status})", style="yellow", markup=False)
        return result.exit_code
    from ..payloads.report import analyse, report_view
    from ..report.console import print_report
    from ..trace import load

    with load(result.bundle) as trace:
        print_report(con, report_view(analyse(trace, advice=False), top=args.top))
    err.print(f"profuse: bundle {result.bundle} ({result.status}, {result.steps_recorded} step(s) recorded, "
              f"{result.forwards} forward call(s) seen)", markup=False)
    err.print(f"profuse: explore it with: profuse explore {result.bundle}   (or: profuse report {result.bundle})",
              markup=False)
    return result.exit_code


def console_err() -> Console:
    """A rich console on standard error (imported on first use)."""
    from rich.console import Console

    return Console(stderr=True)
