"""Parallel-decode workers die with the process that started them, however it dies."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import trace_path

BIG = "v100_rank1_of2_216k_events.json.gz"  # 52 MB of JSON: decoded on several workers
LOAD = "import sys, profuse; profuse.load(sys.argv[1], cache=False)"

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name: [state, ppid, ...]."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def children(parent: int) -> set[int]:
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields and int(fields[1]) == parent:
                out.add(int(entry))
    return out


def alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_workers_die_with_their_parent(sig):
    # GIVEN a load of the big trace in its own process, decoding on two forked workers
    proc = subprocess.Popen([sys.executable, "-c", LOAD, str(trace_path(BIG))],
                            env={**os.environ, "PROFUSE_WORKERS": "2", "PROFUSE_SCANNER": "0"},  # forked msgspec path
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while len(workers) < 2 and proc.poll() is None and time.monotonic() < deadline:
            workers = children(proc.pid)
            time.sleep(0.02)
        assert workers, "the load finished or stalled before its decode workers started"
        # WHEN the parent is killed in the middle of decoding
        proc.send_signal(sig)
        proc.wait(timeout=60)
        # THEN every worker is gone within a few seconds
        deadline = time.monotonic() + 10
        while any(alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [w for w in workers if alive(w)]
        assert not left, f"decode workers {left} outlived their parent ({sig.name})"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for w in workers:  # only on failure: the workers this test's child started
            if alive(w):
                os.kill(w, signal.SIGKILL)
