"""``profuse run -- python script.py ...``: profile an unmodified script.

Each call of the outermost ``nn.Module`` forward is one step, marked ``ProfilerStep#N`` in the trace
(N: the call's number, counting warm-up calls), the name torch's own ``step()`` gives. The mark is a
``record_function`` opened in the forward pre-hook and closed in the forward hook, so it holds the
call's work and nothing else: torch's ``step()`` called from a forward hook would start the next
mark inside the module's own scope, which then straddles the marks (steps double counted).

Recording starts at the first step: the first ``warmup`` calls run with the profiler off, and so does
any call after one during which ``torch.compile`` compiled (its next call may recompile); the next
``steps`` calls are recorded, with Python stacks (the ``python`` stream) only then. When
``torch.compile`` starts compiling inside a recorded call, the recording ends before the compile (it is
never recorded under the Python tracer): that call is no steady step, its mark is renamed
``profuse: call #N compiled`` in the trace; with no steady step recorded yet, the recording is dropped
and starts again after the next steady call. Inside code ``torch.compile`` traces the hooks do nothing,
so they add no guards and cause no recompiles. Each outermost call's wall time is measured: the
fastest recorded step against the fastest steady call run with the profiler off (warm-up calls but the
first, and calls after the recording) is the capture's own overhead, kept in the bundle's ``run``.

Before the first module call a profiler without Python stacks records the run (imports are never
recorded with stacks); it is dropped at the first module call, and kept for a script that never
calls an ``nn.Module`` (profiled whole, ops only). The script runs in this process (so its modules can
be hooked), with its own ``sys.argv``; its exit code and output are kept, and recorded in the bundle
apart from the capture's status (a script exiting with code 3 still leaves a complete capture).

The trace is exported to a file before the bundle is built from it, and that file stays on disk
(named in one line) when the bundle cannot be written; ``--out`` naming an existing bundle or folder
gives a new one beside it (``out-2``, ...), never an overwrite.
"""
from __future__ import annotations

import contextlib
import os
import runpy
import shlex
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _interrupt
from ..errors import UserError, printable
from ..trace.bundle import ScriptRun
from ._quiet import CANCELLED, quiet_profiler_markers
from .bundle import free_out, write_bundle
from .config import ProfileConfig
from .profiler import _filters

# torch warns at every call of a torch.compile'd module while global module hooks exist; profuse's are
# harmless there (they do nothing inside compiled code), and the warning is profuse's doing, not the script's
_HOOK_WARNING = r"Using `torch.compile\(module\)` when there are global hooks"


@dataclass
class RunResult:
    """What ``profuse run`` did: the script's exit code, the bundle written (if any) and notes.

    ``trace_kept``: the exported trace left on disk because the bundle could not be built from it;
    ``over_limit``: the bundle was written but its trace is over profuse's size limit (a hint to read it)."""
    exit_code: int
    bundle: Path | None
    status: str
    forwards: int = 0
    steps_recorded: int = 0
    notes: list[str] = field(default_factory=list)
    trace_kept: Path | None = None
    over_limit: str | None = None
    run: ScriptRun | None = None


@dataclass
class _Call:
    """One outermost forward call: its number, wall time, phase (first, warmup, recorded, after) and
    whether torch.compile compiled during it."""
    number: int
    wall_s: float
    phase: str
    compiled: bool


def _say_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _compile_count() -> int:
    """Frames torch.compile has converted so far in this process (0 before dynamo is imported)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    return int(counters["frames"]["total"]) if counters is not None else 0


class _StepHooks:
    """Global forward hooks that turn outermost module calls into profiler steps."""

    def __init__(self, cfg: ProfileConfig, say: Callable[[str], None] = _say_stderr) -> None:
        import torch

        self.torch = torch
        self.cfg = cfg
        self.say = say
        self.depth = 0
        self.forwards = 0          # outermost forward calls finished until the recording ended
        self.recorded = 0          # steady steps recorded
        self.calls: list[_Call] = []
        self.mark: Any = None      # the open ProfilerStep#N record_function, if any
        self._t0, self._c0 = 0.0, 0
        self.cut: int | None = None  # the call whose compile ended the recording
        self._dynamo: Any = None     # torch._dynamo's callback handler, once hooked
        self.prof: Any = self._new_profiler(stacks=False)  # whole-run profiler until a module shows up
        with quiet_profiler_markers():
            self.prof.start()
        self.whole_run = True
        self.done = False
        self._handles = [
            torch.nn.modules.module.register_module_forward_pre_hook(self._pre),
            torch.nn.modules.module.register_module_forward_hook(self._post, always_call=True),
        ]

    def _new_profiler(self, *, stacks: bool = True) -> Any:
        # No schedule: torch then writes no step marks of its own; the hooks write them (see above).
        kwargs = self.cfg.torch_kwargs()
        if not stacks:
            kwargs.update(with_stack=False, with_modules=False)
        return self.torch.profiler.profile(**kwargs)

    @property
    def compiled_steps(self) -> list[int]:
        """Numbers of the recorded calls during which torch.compile compiled (renamed in the trace)."""
        return [c.number for c in self.calls if c.phase == "recorded" and c.compiled]

    def _pre(self, module: Any, args: Any) -> None:
        if self.torch.compiler.is_compiling():
            return  # traced by torch.compile: nothing here, so no guard on profuse's state
        self.depth += 1
        if self.depth != 1:
            return
        if self.whole_run:
            # a model exists: drop the whole-run recording (no stacks: cheap to stop) and go step by step
            with quiet_profiler_markers():
                self.prof.stop()
            self.prof = None
            self.whole_run = False
        self._watch_compiles()
        if self.done or (self.prof is None and not self._ready()):
            self._c0, self._t0 = _compile_count(), time.perf_counter()
            return
        # the mark is made before the profiler starts, so next to nothing is recorded before the step
        mark: Any = self.torch.profiler.record_function(f"ProfilerStep#{self.forwards + 1}")
        if self.prof is None:
            self.say(f"profuse: recording from forward call {self.forwards + 1} "
                     f"({self.forwards} warm-up call(s) not recorded), {self.cfg.steps} step(s)")
            self.prof = self._new_profiler()
            with quiet_profiler_markers():
                self.prof.start()
        self.mark = mark
        mark.__enter__()
        self._c0 = _compile_count()
        self._t0 = time.perf_counter()

    def _watch_compiles(self) -> None:
        """Hook torch.compile's compile start once torch._dynamo is imported (a script that compiles has)."""
        if self._dynamo is None and "torch._dynamo" in sys.modules:
            handler = getattr(sys.modules.get("torch._dynamo.callback"), "callback_handler", None)
            if handler is not None and hasattr(handler, "register_start_callback"):
                handler.register_start_callback(self._on_compile_start)
                self._dynamo = handler

    def _on_compile_start(self, *_: Any) -> None:
        """torch.compile starts compiling inside a recorded call: compiling under the Python tracer is what
        makes a capture huge and slow, so the recording ends before it (this call is no step). With no
        steady step recorded yet, the recording is dropped and starts again at a later steady call."""
        if self.prof is None or self.done or self.mark is None:
            return
        self._close_mark()
        self._sync()
        with quiet_profiler_markers():
            self.prof.stop()
        if self.recorded == 0:
            self.prof = None
        else:
            self.done, self.cut = True, self.forwards + 1

    def _ready(self) -> bool:
        """Whether the next call is recorded: the warm-up is over and the last call compiled nothing."""
        if self.forwards < self.cfg.warmup:
            return False
        return not self.calls or not self.calls[-1].compiled

    def _close_mark(self) -> None:
        if self.mark is not None:
            mark, self.mark = self.mark, None
            mark.__exit__(None, None, None)

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self.torch.compiler.is_compiling():
            return
        self.depth -= 1
        if self.depth != 0 or self.whole_run:
            return
        wall, compiled = time.perf_counter() - self._t0, _compile_count() != self._c0
        if self.done and self.cut is None:
            self.calls.append(_Call(0, wall, "after", compiled))
            return
        self.forwards += 1
        if self.cut is not None:  # the compile ended the recording in this call
            self.calls.append(_Call(self.forwards, wall, "recorded", True))
            self.cut = None
            return
        if self.prof is None:
            self.calls.append(_Call(self.forwards, wall, "first" if self.forwards == 1 else "warmup", compiled))
            return
        self._close_mark()   # no sync here: a step's device work is found by its launches
        self.calls.append(_Call(self.forwards, wall, "recorded", compiled))
        self.recorded += not compiled
        if self.recorded >= self.cfg.steps or compiled:  # a compile not seen starting: still the end
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
        if self._dynamo is not None:
            self._dynamo.remove_start_callback(self._on_compile_start)
        if self.prof is not None and not self.done:
            self._sync()
            self._close_mark()
            with quiet_profiler_markers(also=(CANCELLED,) if interrupted else ()):
                self.prof.stop()
            self.done = True
        return self.prof

    def script_run(self, argv: list[str], exit_code: int, error: str | None) -> ScriptRun:
        """What the bundle records of the run: calls, steps, and the wall times that give the overhead."""
        def fastest_ms(calls: list[_Call]) -> float | None:  # the fastest: least disturbed by other load
            return round(min(c.wall_s for c in calls) * 1e3, 3) if calls else None

        steady = [c for c in self.calls if not c.compiled]
        off = [c for c in steady if c.phase in ("warmup", "after")]
        return ScriptRun(argv=argv, exit_code=exit_code, forwards=self.forwards, warmup=self.cfg.warmup,
                         steps_recorded=self.recorded, whole_run=self.whole_run, error=error,
                         recorded_step_ms=fastest_ms([c for c in steady if c.phase == "recorded"]),
                         unrecorded_step_ms=fastest_ms(off), unrecorded_calls=len(off),
                         compiled_calls=[c.number for c in self.calls if c.compiled and c.number],
                         compiled_steps=self.compiled_steps)


def _run_path(script_argv: list[str]) -> tuple[int, str | None, bool]:
    """Run the script as ``__main__``: ``(exit code, its error, interrupted)``."""
    exit_code, error, interrupted = 0, None, False
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
    return exit_code, error, interrupted


def run_script(argv: list[str], cfg: ProfileConfig, say: Callable[[str], None] = _say_stderr) -> RunResult:
    """Run ``python script.py ARGS`` (or ``python -m module ARGS``) under the profiler.

    ``say`` prints profuse's progress lines (recording starts, the bundle is written) as they happen."""
    script_argv = _script_argv(argv)
    owner = os.getpid()
    hooks = _StepHooks(cfg, say)
    old_argv, old_path = sys.argv[:], sys.path[:]
    sys.argv = script_argv
    interrupted = False
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_HOOK_WARNING)
            exit_code, error, interrupted = _run_path(script_argv)
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
    result = RunResult(exit_code=exit_code, bundle=None, status="complete", forwards=hooks.forwards,
                       steps_recorded=hooks.recorded, run=hooks.script_run(script_argv, exit_code, error))
    if interrupted:
        result.status = "interrupted"
        return result
    if not _steps_note(hooks, cfg, result.notes):
        return result
    _write(prof, cfg, result, hooks.compiled_steps, say)
    return result


def _steps_note(hooks: _StepHooks, cfg: ProfileConfig, notes: list[str]) -> bool:
    """Say what was recorded, in ``notes``; False when nothing was (no bundle then)."""
    if hooks.compiled_steps:
        notes.append(f"torch.compile compiled in call {hooks.compiled_steps[0]}: the recording ended before the "
                     "compile (the call is 'profuse: call #N compiled' in the trace, no step); a larger --warmup "
                     "records after it")
    if hooks.whole_run:
        notes.append("no nn.Module forward calls: the whole run was profiled (ops, no Python stacks)")
    elif hooks.recorded == 0:
        compiled = sum(c.compiled for c in hooks.calls)
        why = f", {compiled} of them compiling (torch.compile)" if compiled else ""
        notes.append(f"only {hooks.forwards} forward call(s){why}, none recorded as a steady step: nothing written")
        return False
    elif hooks.recorded < cfg.steps:
        notes.append(f"the script made {hooks.recorded} steady step(s) after warm-up, not {cfg.steps}")
    return True


def _export(prof: Any, out: Path) -> tuple[Path | None, str | None]:
    """Export the trace to a file that is kept until the bundle holds it: beside ``out``, else (that folder
    cannot be made) in the temporary folder. ``(path, None)``, or ``(None, why)`` when the export failed
    (torch exports a trace once: there is no second try)."""
    folder = out.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        folder = Path(tempfile.gettempdir())
    raw = folder / f"{out.name}.trace-{os.getpid()}.json"
    failed = b"Failed to write to log file"  # what Kineto prints when a write fails (a full disk)
    with quiet_profiler_markers(also=(failed,)) as seen:
        try:
            prof.export_chrome_trace(str(raw))
            why = None if raw.is_file() else "the profiler wrote no file"
        except (OSError, RuntimeError) as err:
            why = getattr(err, "strerror", None) or str(err)
    if failed in seen.dropped:
        why = "the profiler could not write it: the disk is full, or the file too large"
    if why is None:
        return raw, None
    for partial in (raw, raw.with_name(raw.name + ".tmp")):  # Kineto writes PATH.tmp, then renames it
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)  # a partial file is no trace
    return None, f"{printable(str(raw))}: {why}"


def _write(prof: Any, cfg: ProfileConfig, result: RunResult, compiled_steps: list[int],
           say: Callable[[str], None]) -> None:
    """Export the trace (kept on disk first), then build the bundle from it; a failure keeps the trace."""
    out, moved = free_out(Path(cfg.out))
    if moved:
        result.notes.append(f"{printable(str(cfg.out))} already exists: this capture is written to {printable(str(out))}")
    say(f"profuse: writing the bundle {printable(str(out))}")
    raw, why = _export(prof, out)
    if raw is None:
        result.notes.append(f"could not write the trace ({why}): nothing was saved")
        result.status = "not written"
        return
    try:
        _rename_compiled(raw, compiled_steps)
        result.bundle = write_bundle(out, raw, config=cfg.as_capture_config(), status=result.status,
                                     extra={"run": result.run}, filters=_filters(cfg), notes=result.notes)
    except (OSError, UserError, MemoryError) as err:
        kept = _keep(raw, out)
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        result.trace_kept, result.status = kept, "not written"
        shown = printable(str(kept))
        result.notes.append(f"could not write the bundle {printable(str(out))} ({printable(reason)}); "
                            f"the trace is kept at {shown}: profuse report {shlex.quote(shown)}")
        return
    raw.unlink(missing_ok=True)
    result.over_limit = next((n for n in result.notes if "PROFUSE_MAX_TRACE_BYTES=" in n), None)


def _keep(raw: Path, out: Path) -> Path:
    """The exported trace under a plain name beside where it is (``out.trace.json``, or ``-2``...)."""
    n = 1
    while n < 10_000:
        kept = raw.with_name(f"{out.name}.trace.json" if n == 1 else f"{out.name}.trace-{n}.json")
        try:
            os.link(raw, kept)   # fails where the name is taken: no concurrent writer's trace is replaced
        except FileExistsError:
            n += 1
            continue
        except OSError:          # no hard links here (some filesystems): keep the export's own name
            return raw
        raw.unlink(missing_ok=True)
        return kept
    return raw


def _rename_compiled(raw: Path, numbers: list[int]) -> None:
    """Rename the marks of recorded calls that compiled, so no report counts them as steps."""
    if not numbers:
        return
    data = raw.read_bytes()
    for n in numbers:
        data = data.replace(f'"name": "ProfilerStep#{n}"'.encode(), f'"name": "profuse: call #{n} compiled"'.encode())
    renamed = raw.with_name(raw.name + ".renamed")
    try:
        renamed.write_bytes(data)  # beside it, then in its place: a full disk leaves the exported trace whole
        os.replace(renamed, raw)
    finally:
        renamed.unlink(missing_ok=True)


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
