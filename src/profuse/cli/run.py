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
first --warmup calls, and a call after one that torch.compile compiled in, are
not recorded; nothing before them is. Module scopes (Python stacks) are
recorded in the steps only. Steady calls run without the profiler are timed
against recorded ones: the capture's own overhead, printed after the report.
A script with no nn.Module is profiled whole (no Python stacks). The script's
output and exit code are kept; a bundle that cannot be written leaves its
trace file, named in one line. An existing --out is not overwritten: the
bundle goes to OUT-2 (OUT-3, ...) and a line says so.
"""


def add_parser(subs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``profuse run``."""
    p = subs.add_parser("run", help="profile an unmodified script: profuse run -- python script.py", epilog=HELP,
                        description="Run a Python script under the profiler and write a bundle.",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="profuse-out/run", help="bundle folder (default profuse-out/run)")
    p.add_argument("--warmup", type=int, default=2,
                   help="outermost forward calls to skip (default 2: the second, a steady call without the "
                        "profiler, is what the overhead is measured against)")
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
    result = run_script(args.command, cfg, say=_say)
    sys.stdout.flush()
    from ..redact import redacted_output

    with redacted_output():  # the script's output was its own; what profuse prints of the trace is redacted
        return _after_run(args, result)


def _say(line: str) -> None:
    """A progress line while the script runs, redacted as everything profuse prints of the capture."""
    from ..redact import redact_text

    print(redact_text(line), file=sys.stderr, flush=True)


def _after_run(args: argparse.Namespace, result: RunResult) -> int:
    """The notes, the op table of the bundle just written, the capture's overhead and where the bundle is
    (the script has ended). Whatever was or was not written, the exit code is the script's."""
    con = console()
    err = console_err()
    for note in result.notes:
        err.print(f"profuse: {note}", style="yellow", markup=False, soft_wrap=True)
    if result.bundle is None:
        if result.status != "not written":  # not written: the note above said why, and where the trace is
            err.print(f"profuse: no bundle written ({result.status})", style="yellow", markup=False)
        return result.exit_code
    if result.over_limit is None:
        from ..payloads.report import analyse, report_view
        from ..report.console import print_report
        from ..trace import load

        with load(result.bundle) as trace:
            print_report(con, report_view(analyse(trace, advice=False), top=args.top))
    overhead = overhead_line(result, stacks="python" in [x.strip() for x in args.streams.split(",")])
    if overhead:
        err.print(f"profuse: {overhead}", markup=False, soft_wrap=True)
    err.print(f"profuse: bundle {result.bundle} ({result.status}, {result.steps_recorded} step(s) recorded, "
              f"{result.forwards} forward call(s) seen)", markup=False, soft_wrap=True)
    err.print(f"profuse: explore it with: profuse explore {result.bundle}   (or: profuse report {result.bundle})",
              markup=False, soft_wrap=True)
    return result.exit_code


def overhead_line(result: RunResult, *, stacks: bool) -> str | None:
    """The capture's own cost in one line: the fastest recorded step's wall time against the fastest steady
    call's without the profiler (None for a script profiled whole)."""
    run = result.run
    if run is None or run.whole_run or run.recorded_step_ms is None:
        return None
    streams = "with Python stacks" if stacks else "without Python stacks"
    if run.overhead is None or run.unrecorded_step_ms is None:
        return (f"capture overhead: not measured (no steady call ran without the profiler; --warmup 2 or more "
                f"gives one); a recorded step took {run.recorded_step_ms:.3g} ms {streams}")
    return (f"capture overhead: the fastest recorded step took {run.recorded_step_ms:.3g} ms {streams}, the fastest "
            f"steady call without the profiler {run.unrecorded_step_ms:.3g} ms (of {run.unrecorded_calls}): "
            f"{run.overhead:.2f}x; the report's times include the profiler's own")


def console_err() -> Console:
    """A rich console on standard error (imported on first use)."""
    from rich.console import Console

    return Console(stderr=True)
