"""Map workers that die: the local pool retries the rank once in a fresh worker, then names it; Ray's
own messages about a dead worker never reach stdout. Workers are really killed (SIGKILL) mid-run."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import trace_path

from profuse.cli import main

NCCL = "a100_nccl_rank0_of2.json.gz"


def _rank_set(tmp_path: Path, n: int = 2) -> Path:
    folder = tmp_path / "set"
    folder.mkdir()
    for r in range(n):
        shutil.copy(trace_path(NCCL), folder / f"rank-{r}.json.gz")
    return folder


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _pool_workers() -> list[int]:
    """This process's spawned pool workers (not multiprocessing's resource tracker)."""
    me, out = os.getpid(), []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == me and "spawn_main" in _cmdline(int(d.name)):
                out.append(int(d.name))
    return out


@contextlib.contextmanager
def killing(find, *, once: bool):
    """Kill (SIGKILL) processes ``find()`` lists while the block runs: the first one only, or every one."""
    killed: list[int] = []
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            for pid in find():
                if pid not in killed and not (once and killed):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.01)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield killed
    finally:
        stop.set()
        t.join()


def test_local_engine_retries_a_rank_whose_worker_was_killed(tmp_path, capsys):
    folder = _rank_set(tmp_path)
    assert main(["report", str(folder), "--format", "json", "--work-dir", str(tmp_path / "clean"),
                 "--workers", "2"]) == 0
    clean = json.loads(capsys.readouterr().out)
    # WHEN the first pool worker is killed while the ranks are being mapped
    with killing(_pool_workers, once=True) as killed:
        rc = main(["report", str(folder), "--format", "json", "--work-dir", str(tmp_path / "killed"),
                   "--workers", "2"])
    out, err = capsys.readouterr()
    assert len(killed) == 1
    # THEN the ranks it held are mapped again in a fresh worker: the same document, nothing on stderr
    assert rc == 0, err
    assert json.loads(out) == clean
    assert err == ""


def test_local_engine_names_a_rank_whose_worker_dies_twice(tmp_path, capsys):
    folder = _rank_set(tmp_path)
    # WHEN every worker is killed, the retries' too
    with killing(_pool_workers, once=False) as killed:
        rc = main(["report", str(folder), "--format", "json", "--work-dir", str(tmp_path / "w"), "--workers", "2"])
    out, err = capsys.readouterr()
    # THEN one line names the first rank, says it was tried twice, exit 2
    assert len(killed) >= 3, killed  # the pool's worker(s), then one fresh worker per rank
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "rank 0" in err and "rank-0.json.gz" in err and "again in a fresh worker" in err
    assert "2 of 2 rank traces failed" in err


@pytest.fixture(scope="module")
def ray_cluster():
    from ray_cluster import RayCluster

    cluster = RayCluster()
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def test_ray_dead_worker_leaves_stdout_json(tmp_path, ray_cluster, capsys):
    from ray_cluster import AUTH_MODE, _cluster_pids

    folder = _rank_set(tmp_path)
    assert main(["report", str(folder), "--format", "json", "--work-dir", str(tmp_path / "local")]) == 0
    local = json.loads(capsys.readouterr().out)

    def map_workers() -> list[int]:
        return [p for p in _cluster_pids(ray_cluster.tmp) if _cmdline(p).startswith("ray::map_rank")]

    env = {**os.environ, "RAY_AUTH_MODE": AUTH_MODE, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "profuse", "report", str(folder), "--format", "json", "--engine", "ray",
           "--ray-address", ray_cluster.address, "--work-dir", str(tmp_path / "ray")]
    # WHEN a Ray worker running a rank's map is killed; Ray retries the task
    with killing(map_workers, once=True) as killed:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert len(killed) == 1, "a map worker was killed"
    assert r.returncode == 0, r.stderr[-3000:]
    # THEN stdout is exactly the JSON document (Ray's words about the dead worker, if any, on stderr)
    assert json.loads(r.stdout) == local, r.stdout[:500]
