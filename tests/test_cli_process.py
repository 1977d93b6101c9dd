"""The trace-reading commands ask numpy's OpenBLAS for one thread (cli._one_blas_thread); nothing else does;
and ``profuse run`` passes its script's own output through unredacted.

Each case is a real ``profuse`` process: the command runs, then the process reports the variable OpenBLAS
read when numpy was imported in it (whether numpy is imported, and what the environment said then).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import trace_path

SMALL = "a100_event_sync.json.gz"
BLAS_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")  # what OpenBLAS reads

# runs the command line as the profuse script does (argv from sys.argv), then prints what OpenBLAS saw
PROBE = """
import os, sys
sys.argv = ["profuse", *sys.argv[1:]]
from profuse.cli import main
code = main()
print("numpy" in sys.modules, os.environ.get("OPENBLAS_NUM_THREADS"), code)
"""


def _probe(*args: str, env_extra: dict[str, str] | None = None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in BLAS_VARS}
    env.update(env_extra or {})
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1].split()


@pytest.mark.parametrize("command", [["sql", "{trace}", "SELECT count(*) FROM events"],
                                     ["report", "--no-cache", "--format", "json", "{trace}"]])
def test_a_trace_reading_command_imports_numpy_with_one_blas_thread(command, tmp_path):
    args = [a.format(trace=trace_path(SMALL)) for a in command]
    numpy_in, threads, code = _probe(*args, env_extra={"PROFUSE_CACHE_DIR": str(tmp_path)})
    assert (numpy_in, threads, code) == ("True", "1", "0")


@pytest.mark.parametrize(("chosen", "seen"), [("OPENBLAS_NUM_THREADS", "3"), ("OMP_NUM_THREADS", "None"),
                                             ("GOTO_NUM_THREADS", "None")])
def test_the_users_own_setting_is_kept(chosen, seen, tmp_path):
    # any variable OpenBLAS reads is the user's choice: profuse then sets none of its own
    numpy_in, threads, code = _probe("sql", str(trace_path(SMALL)), "SELECT 1",
                                     env_extra={chosen: "3", "PROFUSE_CACHE_DIR": str(tmp_path)})
    assert (numpy_in, threads, code) == ("True", seen, "0")


def test_run_leaves_the_scripts_blas_and_output_alone(tmp_path):
    pytest.importorskip("torch")  # profuse run needs it
    # `profuse run` runs the user's script in its process: its BLAS threads are the user's business, and
    # what it prints is the user's own output, passed through unredacted ("The script's output ... kept")
    script = tmp_path / "show.py"
    script.write_text("import os\nprint('password=hunter2', os.environ.get('OPENBLAS_NUM_THREADS'))\n")
    env = {k: v for k, v in os.environ.items() if k not in BLAS_VARS}
    env["PROFUSE_CACHE_DIR"] = str(tmp_path / "cache")
    bundle = tmp_path / "token=abcdef123"  # what profuse prints after the run (the bundle's path) is redacted
    out = subprocess.run([sys.executable, "-m", "profuse", "run", "--out", str(bundle), "--", "python",
                          str(script)], capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "password=hunter2 None"
    assert (bundle / "trace.json.gz").exists() and "token=[redacted]" in out.stdout
    assert "abcdef123" not in out.stdout + out.stderr


def test_main_called_from_python_leaves_blas_alone(tmp_path):
    # main(argv) from Python: the caller's process is not profuse's to tune
    env = {k: v for k, v in os.environ.items() if k not in BLAS_VARS}
    env["PROFUSE_CACHE_DIR"] = str(tmp_path)
    code = ("import os\nfrom profuse.cli import main\n"
            f"main(['sql', {str(trace_path(SMALL))!r}, 'SELECT 1'])\nprint(os.environ.get('OPENBLAS_NUM_THREADS'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "None"


@pytest.mark.parametrize(("argv", "hint"), [
    (["reprot", "x.json"], "did you mean 'report'?"),
    (["report", "x.json", "--fromat", "json"], "did you mean --format?"),
    (["report", "x.json", "--format", "htm"], "did you mean 'html'?"),
    (["report"], "the following arguments are required: path"),
])
def test_an_argument_error_is_one_line_with_a_suggestion(argv, hint):
    p = subprocess.run([sys.executable, "-m", "profuse", *argv], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and hint in lines[0] and lines[0].startswith("profuse"), p.stderr
