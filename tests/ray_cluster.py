"""A real two-node Ray cluster on this machine for tests: ``ray start --head`` plus ``ray start --address``.

Both nodes live under one fresh temp folder; teardown ends exactly the processes of that cluster
(found by the folder in their command line, plus their children), never other users' Ray.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
# Ray >= 2.5x turns token auth on when ~/.ray/auth_token exists (a local ray.init() writes one): a
# test cluster on 127.0.0.1 runs without it, the same for its nodes and the driver (set it there too).
AUTH_MODE = "disabled"
NODE = ["--num-cpus=1", "--object-store-memory=100000000", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster_pids(marker: str) -> set[int]:
    parents: dict[int, int] = {}
    pids: set[int] = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (d / "stat").read_text()
        except OSError:
            continue
        pid = int(d.name)
        parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
        if marker in cmd and pid != os.getpid():
            pids.add(pid)
    grew = True
    while grew:  # children renamed to 'ray::...' no longer show the folder
        more = {p for p, pp in parents.items() if pp in pids and p not in pids and p != os.getpid()}
        grew = bool(more)
        pids |= more
    return pids


class RayCluster:
    def __init__(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="pfray")  # short: Ray's socket paths must stay under 108 bytes
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"

    def start(self) -> RayCluster:
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": AUTH_MODE}
        head = [RAY, "start", "--head", f"--port={self.port}", f"--temp-dir={self.tmp}", "--include-dashboard=false",
                f"--dashboard-port={free_port()}", *NODE]
        second = [RAY, "start", f"--address={self.address}", f"--temp-dir={self.tmp}", *NODE]
        for cmd in (head, second):
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
            if out.returncode != 0:
                self.stop()
                tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
                raise RuntimeError(f"{' '.join(cmd[:3])} failed ({out.returncode}):\n{tail}")
        return self

    def stop(self) -> None:
        """End this cluster's processes (TERM, then KILL what is left) and remove its folder."""
        ours = _cluster_pids(self.tmp)  # taken before any dies: children lose their parent link then
        for sig in (signal.SIGTERM, signal.SIGKILL):
            ours |= _cluster_pids(self.tmp)
            live = {p for p in ours if _alive(p)}
            for pid in live:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + 5
            while live and time.monotonic() < deadline:
                time.sleep(0.2)
                live = {p for p in live if _alive(p)}
            if not live:
                break
        shutil.rmtree(self.tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
