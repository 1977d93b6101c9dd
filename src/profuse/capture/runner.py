"""``profuse run -- python script.py ...``: profile an unmodified script.

Each call of the outermost ``nn.Module`` forward is one step, marked ``ProfilerStep#N`` in the trace
(N: the call's number, counting warm-up calls), the name torch's own ``step()`` gives. The mark is a
``record_function`` opened in the forward pre-hook and closed in the forward hook, so it holds the
call's work and nothing else: torch's ``step()`` called from a forward hook would start the next
mark inside the module's own scope, which then straddles the marks (steps double counted). The first
``warmup`` such calls run with the profiler off (compilation and first-call costs stay out); the
next ``steps`` are recorded. A script that never calls an ``nn.Module`` is profiled whole. The
script runs in this process (so its modules can be hooked), with its own ``sys.argv``; its exit code
and output are kept, and recorded in the bundle apart from the capture's status (a script exiting
with code 3 still leaves a complete capture).
"""
from __future__ import annotations

import os
import runpy
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _interrupt
from ..errors import UserError
from ..trace.bundle import ScriptRun
from ._quiet import CANCELLED, quiet_profiler_markers
from .bundle import write_bundle
from .config import ProfileConfig
from .profiler import _filters


@dataclass
class RunResult:
    """What ``profuse run`` did: the script's exit code, the bundle written (if any) and notes."""
    exit_code: int
    bundle: Path | None
    status: str
    forwards: int = 0
    steps_recorded: int = 0
    notes: list[str] = field(default_factory=list)


class _StepHooks:
    """Global forward hooks that turn outermost module calls into profiler steps."""

    def __init__(self, cfg: ProfileConfig) -> None:
        import torch

        self.torch = torch
        self.cfg = cfg
        self.depth = 0
        self.forwards = 0          # outermost forward calls finished
        self.recorded = 0
        self.mark: Any = None      # the open ProfilerStep#N record_function, if any
        self.prof: Any = self._new_profiler()  # whole-run profiler until a module shows up
        with quiet_profiler_markers():
            self.prof.start()
        self.whole_run = True
        self.done = False
        self._handles = [
            torch.nn.modules.module.register_module_forward_pre_hook(self._pre),
            torch.nn.modules.module.register_module_forward_hook(self._post, always_call=True),
        ]

    def _new_profiler(self) -> Any:
        # No schedule: torch then writes no step marks of its own; the hooks write them (see above).
        return self.torch.profiler.profile(**self.cfg.torch_kwargs())

    def _pre(self, module: Any, args: Any) -> None:
        self.depth += 1
        if self.depth != 1 or self.done:
            return
        if self.whole_run:
            # a model exists: drop the whole-run recording and go step by step
            with quiet_profiler_markers():
                self.prof.stop()
            self.prof = None
            self.whole_run = False
        if self.forwards == self.cfg.warmup and self.prof is None:
            self.prof = self._new_profiler()
            with quiet_profiler_markers():
                self.prof.start()
        if self.prof is not None:
            self.mark = self.torch.profiler.record_function(f"ProfilerStep#{self.forwards + 1}")
            self.mark.__enter__()

    def _close_mark(self) -> None:
        if self.mark is not None:
            mark, self.mark = self.mark, None
            mark.__exit__(None, None, None)

    def _post(self, module: Any, args: Any, output: Any) -> None:
        self.depth -= 1
        if self.depth != 0 or self.done or self.whole_run:
            return
        self.forwards += 1
        if self.prof is not None:
            self._close_mark()   # no sync here: a step's device work is found by its launches
            self.recorded += 1
            if self.recorded >= self.cfg.steps:
                self._sync()
                with quiet_profiler_markers():
                    self.prof.stop()
                self.done = True

    def _sync(self) -> None:
        if self.torch.cuda.is_available():
            self.torch.cuda.synchronize()

    def finish(self, *, interrupted: bool = False) -> Any:
        """Stop recording. ``interrupted``: a Ctrl-C ended the script, so a profiler still in its warm-up
        makes torch's C++ side say no session was active; profuse says it was interrupted instead."""
        for h in self._handles:
            h.remove()
        if self.prof is not None and not self.done:
            self._sync()
            self._close_mark()
            with quiet_profiler_markers(also=(CANCELLED,) if interrupted else ()):
                self.prof.stop()
            self.done = True
        return self.prof


def run_script(argv: list[str], cfg: ProfileConfig) -> RunResult:
    """Run ``python script.py ARGS`` (or ``python -m module ARGS``) under the profiler."""
    script_argv = _script_argv(argv)
    owner = os.getpid()
    hooks = _StepHooks(cfg)
    exit_code, error = 0, None
    old_argv, old_path = sys.argv[:], sys.path[:]
    sys.argv = script_argv
    interrupted = False
    try:
        if script_argv[0] == "-m":
            sys.argv = script_argv[1:]
            runpy.run_module(script_argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(script_argv[0])))
            runpy.run_path(script_argv[0], run_name="__main__")
    except SystemExit as e:
        exit_code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except KeyboardInterrupt:
        interrupted, exit_code = True, 130
    except BaseException as e:  # the script's own error: show it as Python would, keep the bundle
        if _interrupt.seen():  # a Ctrl-C swallowed on the way (a guarded import) and what it broke
            interrupted, exit_code = True, 130
        else:
            traceback.print_exc()
            exit_code, error = 1, f"{type(e).__name__}: {e}"
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
        prof = hooks.finish(interrupted=interrupted or _interrupt.seen())
    if os.getpid() != owner:
        # The script forked and this is the child finishing: the parent alone writes the bundle. The
        # profiler's state copied by fork can hang interpreter shutdown, so leave at once.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_code)
    # the capture's status is the capture's: the script's exit code and error are kept in `run`
    result = RunResult(exit_code=exit_code, bundle=None, status="complete",
                       forwards=hooks.forwards, steps_recorded=hooks.recorded)
    if interrupted:
        result.status = "interrupted"
        return result
    if hooks.whole_run:
        result.notes.append("no nn.Module forward calls: the whole run was profiled")
    elif hooks.recorded == 0:
        result.notes.append(f"only {hooks.forwards} forward call(s), all warm-up: nothing recorded")
        return result
    elif hooks.recorded < cfg.steps:
        result.notes.append(f"the script made {hooks.recorded} step(s) after warm-up, not {cfg.steps}")
    extra = {"run": ScriptRun(argv=script_argv, exit_code=exit_code, forwards=hooks.forwards, warmup=cfg.warmup,
                              steps_recorded=hooks.recorded, whole_run=hooks.whole_run, error=error)}
    with tempfile.TemporaryDirectory(prefix="profuse-run-") as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        result.bundle = write_bundle(Path(cfg.out), raw, config=cfg.as_capture_config(), status=result.status,
                                     extra=extra, filters=_filters(cfg))
    return result


def _script_argv(argv: list[str]) -> list[str]:
    args = list(argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        raise UserError("profuse run: give the command after --, e.g. profuse run -- python script.py")
    if os.path.basename(args[0]).startswith("python"):
        args = args[1:]
    if not args:
        raise UserError("profuse run: name the script to run: profuse run -- python script.py ARGS")
    if args[0] == "-m":
        if len(args) < 2:
            raise UserError("profuse run: -m needs a module name")
        return args
    if args[0].startswith("-"):
        raise UserError(f"profuse run: python option {args[0]} is not supported; run a script or -m module")
    if not os.path.isfile(args[0]):
        raise UserError(f"{args[0]}: no such script")
    return args
