"""Hostile inputs to the Neuron readers: NEFFs beside a trace, NEFF archives, framework mapping files
and neuron-explorer Parquet folders. Each is built here in tmp_path; each must give one line (or a
listed reason), exit code 2 where the command fails, and never a traceback, hang or memory blow-up.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import trace_path

TRACE = "a100_triton_kernel.json.gz"


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real CLI in a child, so a hang fails the test on the timeout instead of hanging it."""
    return subprocess.run([sys.executable, "-m", "profuse", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_special_neffs_beside_a_trace_are_listed_not_read(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(trace_path(TRACE), folder / "trace.json.gz")
    os.mkfifo(folder / "a.neff")
    (folder / "b.neff").symlink_to("/dev/zero")
    (folder / "c.neff").symlink_to(tmp_path / "missing.neff")
    r = _run(["report", str(folder), "--format", "json"])
    assert r.returncode == 0, r.stderr
    neffs = {n["file"]: n["error"] for n in json.loads(r.stdout)["compiled"]["neffs"]}
    assert neffs == {"a.neff": "is not a regular file (a FIFO)", "b.neff": "is a symbolic link: not followed",
                     "c.neff": "is a symbolic link: not followed"}
    r = _run(["report", str(folder)])
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert r.stdout.count("not read:") == 3
