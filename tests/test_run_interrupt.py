"""SIGINT at any moment of `profuse run`: one line on stderr from profuse, exit 130, no half bundle."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import trace_path

pytest.importorskip("torch")

SCRIPT = """
import numpy
import torch
m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
for _ in range(12):
    m(torch.randn(16, 64))
print("script done")
"""


def _run(tmp_path: Path, out: Path, delay: float | None) -> tuple[int, str, str, float]:
    script = tmp_path / "infer.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path / "cache")}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "profuse", "run", "--out", str(out), "--steps", "3", "--",
                             "python", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    if delay is not None:
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    return proc.returncode, stdout, stderr, time.monotonic() - start


PROGRESS = ("profuse: recording from forward call ", "profuse: writing the bundle ")


def _without_progress(stderr: str) -> str:
    """stderr less the progress lines `profuse run` prints while the script runs."""
    return "".join(ln for ln in stderr.splitlines(keepends=True) if not ln.startswith(PROGRESS))


def _complete_bundle(out: Path) -> bool:
    return (out / "meta.json").is_file() and (out / "trace.json.gz").is_file()


def test_sigint_at_many_moments_of_run(tmp_path):
    # GIVEN how long a whole run takes here (profuse's own start, the script's imports, the steps,
    # the bundle and its report)
    rc, stdout, stderr, whole = _run(tmp_path, tmp_path / "full", None)
    assert rc == 0 and "script done" in stdout and _complete_bundle(tmp_path / "full"), stderr
    # WHEN SIGINT comes at moments spread over such a run (the first ones while modules import)
    outcomes = []
    for k, frac in enumerate((0.03, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)):
        out = tmp_path / f"b{k}"
        rc, stdout, stderr, _took = _run(tmp_path, out, max(whole * frac, 1.0))  # after the interpreter's start
        stderr = _without_progress(stderr)
        outcomes.append((frac, rc, stderr))
        if rc == 0:  # the run had finished before the signal came
            assert _complete_bundle(out)
            continue
        # THEN one line from profuse says so (after the bundle's lines, if the signal came that late), no
        # traceback, exit 130
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        assert rc == 130, (frac, rc, stderr[-3000:])
        assert "Traceback" not in stderr and lines, (frac, stderr)
        assert lines[-1] in ("profuse: interrupted", "profuse: no bundle written (interrupted)"), (frac, stderr)
        assert sum("interrupted" in ln for ln in lines) == 1, (frac, stderr)
        # anything before that line is the finished bundle's own report (rich wraps it on a pipe): the capture
        # overhead's note (cli/run.py, printed before the bundle's line where it was measured), then the bundle
        report = [ln for ln in lines[:-1] if not ln.startswith("profuse: capture overhead:")]
        assert len(lines) == 1 or (_complete_bundle(out) and report and report[0].startswith("profuse: bundle ")), \
            (frac, stderr)
        # and either no bundle at all or a complete one (the signal came after it was in place)
        assert not out.exists() or _complete_bundle(out), (frac, sorted(p.name for p in out.iterdir()))
        assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name], "no half-written bundle folder left"
    assert sum(rc == 130 for _, rc, _ in outcomes) >= 5, outcomes


SWALLOWED = """
import os, signal, time
try:  # a library's guarded import: the Ctrl-C that lands in it is swallowed
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(2)
except BaseException:
    pass
import torch
m = torch.nn.Linear(4, 4)
for _ in range(8):
    m(torch.randn(2, 4))
raise AttributeError("module 'numpy' has no attribute 'flexible'")  # what the half-done import broke
"""


def test_swallowed_sigint_that_breaks_the_script_later_is_an_interruption(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(SWALLOWED)
    out = tmp_path / "b"
    r = subprocess.run([sys.executable, "-m", "profuse", "run", "--out", str(out), "--", "python", str(script)],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 130 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert _without_progress(r.stderr).strip().splitlines() == ["profuse: no bundle written (interrupted)"]
    assert not out.exists()


def test_the_program_exits_with_an_idle_thread_pool_left_running(tmp_path):
    # GIVEN a command whose libraries leave an idle ThreadPoolExecutor behind (torch.compile's inductor does:
    # `profuse study rmsnorm` hung after printing its table) WHEN the program exits through its entry point
    # THEN it ends, with the command's exit code
    code = ("import concurrent.futures as f, sys\n"
            "pool = f.ThreadPoolExecutor(2); pool.submit(lambda: 1).result()\n"
            f"sys.argv = ['profuse', 'sql', {str(trace_path('a100_event_sync.json.gz'))!r}, 'SELECT 42 AS x']\n"
            "from profuse.__main__ import entry\nentry()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0 and "42" in r.stdout
