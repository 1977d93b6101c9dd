"""The explorer serves its own assets and the traces it was given, nothing else; it binds 127.0.0.1."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from conftest import trace_path
from explorer_util import running

import profuse


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.fixture(scope="module")
def base():
    t = profuse.load(trace_path("a100_alexnet.json.gz"))
    with running([t]) as url:
        yield url
    t.close()


@pytest.mark.parametrize("path", [
    "/assets/../server.py", "/assets/..%2Fserver.py", "/assets/%2e%2e%2f%2e%2e%2fpyproject.toml",
    "/assets/server.py", "/assets/data.py", "/assets//etc/passwd", "/etc/passwd", "/../../../../etc/passwd",
    "/api/0/../../../etc/passwd", "/api/1/overview", "/api/-1/overview", "/api/0/event/999999999",
    "/api/0/nope", "/static/app.js", "/assets/.%2e/__init__.py", "/api/compare",
    "/api/0/ops?group_by=../../etc/passwd", "/api/0/timeline?t0=nan", "/api/0/timeline?t0=0&t1=inf",
    "/api/0/timeline?t0=abc", "/api/0/timeline?width=x",
])
def test_everything_outside_assets_and_traces_is_refused(base, path):
    assert status(base + path) in (400, 404)


@pytest.mark.parametrize("path", ["/", "/assets/app.js", "/assets/style.css", "/api/runs", "/api/0/overview",
                                  "/api/0/ops?group_by=kernel", "/api/0/lanes", "/api/0/timeline?width=800",
                                  "/api/0/modules", "/api/0/compiled"])
def test_assets_and_api_are_served(base, path):
    assert status(base + path) == 200


def listening_addresses(port: int) -> list[str]:
    """Local addresses of the sockets listening on ``port``, from the kernel's own tables (Linux)."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                out.append(socket.inet_ntop(socket.AF_INET, bytes.fromhex(addr)[::-1]) if len(addr) == 8
                           else socket.inet_ntop(socket.AF_INET6, b"".join(
                               bytes.fromhex(addr[i:i + 8])[::-1] for i in range(0, 32, 8))))
    return out


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads Linux's socket table")
def test_binds_loopback_only(tmp_path):
    # GIVEN `profuse explore` started the way a user starts it (its own serve(), its own socket)
    env = {**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "profuse", "explore", str(trace_path("a100_event_sync.json.gz")),
                             "--no-browser"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = proc.stdout.readline().split()[2]
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        # THEN the socket the kernel lists as listening on that port is bound to 127.0.0.1 and nothing else
        assert listening_addresses(port) == ["127.0.0.1"]
        assert status(url + "api/runs") == 200
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()


def test_pages_forbid_inline_script_and_other_origins(base):
    with urllib.request.urlopen(base + "/") as r:
        csp = r.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "default-src 'self'" in csp and "unsafe-inline" not in csp


def test_timeline_level_of_detail(base):
    with urllib.request.urlopen(base + "/api/0/timeline?width=200") as r:
        coarse = json.load(r)
    with urllib.request.urlopen(base + f"/api/0/timeline?t0={coarse['span'][0]}&t1={coarse['span'][0] + 50}"
                                f"&width=2000") as r:
        fine = json.load(r)
    # zoomed out, short events merge into blocks with counts; zoomed in they come one by one
    assert any(n > 1 for n in coarse["n"]) and -1 in coarse["id"]
    from oracle import complete_events

    # fewer items than the trace has complete events (plain json; a fixed 2000 exceeded them: no bound)
    n_events = len(complete_events(trace_path("a100_alexnet.json.gz")))
    assert len(coarse["id"]) < n_events
    assert sum(coarse["n"]) == n_events, "zoomed out over the whole span, every event is drawn once"
    assert all(i >= 0 for i, n in zip(fine["id"], fine["n"]) if n == 1)


def test_reports_drop_secret_looking_metadata(tmp_path):
    import gzip

    from profuse.cli import main

    doc = json.load(gzip.open(trace_path("a100_event_sync.json.gz")))
    doc["distributedInfo"] = {"rank": 0, "auth_token": "SECRET-123", "env": {"HF_TOKEN": "SECRET-456"}}
    src = tmp_path / "t.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / "r.html"
    assert main(["report", str(src), "--format", "html", "-o", str(out)]) == 0
    html = out.read_text()
    assert "SECRET-123" not in html and "SECRET-456" not in html
    assert '"rank":0' in html, "the rest of the metadata stays"
    assert main(["report", str(src), "--format", "html", "-o", str(out), "--keep-metadata"]) == 0
    assert "SECRET-123" in out.read_text()


def test_explore_stops_cleanly_on_ctrl_c(tmp_path):
    env = {**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "profuse", "explore", str(trace_path("a100_event_sync.json.gz")),
                             "--no-browser"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line
        url = line.split()[2]
        assert status(url + "api/runs") == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
