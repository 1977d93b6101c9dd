"""Reliability at the edges: numbers beyond 64 bits, repeated keys, half-open connections, quiet stderr."""
from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse

import pytest
from conftest import trace_path

from profuse.cli import main

SMALL = "h100_bert_small.json.gz"
HUGE = {"2**70": str(2**70), "2**64": str(2**64), "1e308": "1e308", "-2**64": str(-(2**64))}


def _with_arg(tmp_path, key: str, literal: str):
    """A real trace with ``args[key]`` of its first complete event set to the JSON number ``literal``."""
    doc = json.loads(gzip.decompress(trace_path(SMALL).read_bytes()))
    first = next(e for e in doc["traceEvents"] if e.get("ph") == "X")
    first.setdefault("args", {})[key] = "@@NUMBER@@"
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc).replace('"@@NUMBER@@"', literal))
    return p


def _events(tmp_path, capsys, path, *extra) -> tuple[int, str, str]:
    rc = main(["sql", str(path), "SELECT count(*) FROM events", "--format", "csv", "--no-cache", *extra])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("scanner", ["1", "0"])
@pytest.mark.parametrize("key", ["Python id", "Python parent id", "Sequence number", "correlation", "External id",
                                 "Fwd thread id", "bytes", "device", "stream"])
@pytest.mark.parametrize("value", ["2**70", "1e308", "-2**64"])
def test_numbers_beyond_64_bits(tmp_path, capsys, monkeypatch, scanner, key, value):
    monkeypatch.setenv("PROFUSE_SCANNER", scanner)
    p = _with_arg(tmp_path, key, HUGE[value])
    expected = len([e for e in json.loads(gzip.decompress(trace_path(SMALL).read_bytes()))["traceEvents"]
                    if e.get("ph") == "X"])
    # an id written as a whole float (1e308 is one) is the integer it is (docs/input.md): beyond 64 bits like
    # the others, never a bad event
    bad_event = False
    # strict: one line in the profuse: PATH: problem shape, exit 2
    rc, out, err = _events(tmp_path, capsys, p)
    assert rc == 2 and err.startswith(f"profuse: {p}: ") and err.count("\n") == 1, err
    assert (repr(key) in err or f"args.{key}" in err) and "--lenient" in err
    # --lenient: every event loads, the value is read as absent and counted (or the event skipped, counted)
    rc, out, err = _events(tmp_path, capsys, p, "--lenient")
    assert rc == 0 and out.splitlines()[1] == str(expected - bad_event), (out, err)
    assert main(["sql", str(p), "SELECT value FROM meta WHERE key = 'skipped'", "--format", "json", "--no-cache",
                 "--lenient"]) == 0
    skipped = json.loads(json.loads(capsys.readouterr().out)[0]["value"])
    if bad_event:
        assert list(skipped.values()) == [1] and "float" in next(iter(skipped))
    else:
        assert skipped == {f"{key} beyond 64 bits (read as absent)": 1}


@pytest.mark.parametrize("scanner", ["1", "0"])
def test_repeated_top_level_key_is_a_note(tmp_path, capsys, monkeypatch, scanner):
    monkeypatch.setenv("PROFUSE_SCANNER", scanner)
    text = gzip.decompress(trace_path(SMALL).read_bytes()).decode().rstrip()
    assert text.endswith("}")
    p = tmp_path / "two.json"
    p.write_text(text[:-1] + ', "traceEvents": []}')  # GIVEN a second, empty traceEvents after the real one
    rc, out, err = _events(tmp_path, capsys, p)
    # THEN the last one is read, as JSON parsers do, and the load says so in one line
    assert rc == 0 and out.splitlines()[1] == "0"
    assert err == f"profuse: note: {p}: top-level key 'traceEvents' appears more than once; the last one is read\n"
    rc, out, err = _events(tmp_path, capsys, trace_path(SMALL))
    assert rc == 0 and err == "", "no note for a trace without repeated keys"


def test_cold_json_report_writes_nothing_to_stderr(tmp_path):
    # GIVEN a load slow enough for the progress bar (the reference decoder on 216k events), stderr a pipe
    env = {**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path / "c"), "PROFUSE_SCANNER": "0"}
    r = subprocess.run([sys.executable, "-m", "profuse", "report", str(trace_path("v100_rank1_of2_216k_events.json.gz")),
                        "--format", "json"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and json.loads(r.stdout)
    assert r.stderr == ""


def test_progress_bar_stays_off_a_pipe(capsys):
    from profuse.cli._common import _LazyBar

    bar = _LazyBar("loading x")
    bar.start -= 5  # GIVEN a load that has taken over a second
    bar(10, 100)
    bar(100, 100)
    bar.close()
    assert capsys.readouterr().err == ""


def test_explorer_closes_connections_that_send_no_request(tmp_path):
    # GIVEN `profuse explore` as a user starts it, and 40 connections that send nothing or half a header
    env = {**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "profuse", "explore", str(trace_path("a100_event_sync.json.gz")),
                             "--no-browser"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    socks = []
    try:
        url = urllib.parse.urlsplit(proc.stdout.readline().split()[2])   # http://127.0.0.1:PORT/?token=...
        port, token = url.port, urllib.parse.parse_qs(url.query)["token"][0]
        for i in range(40):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            if i % 2:
                s.sendall(f"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode())
            socks.append(s)
        start = time.monotonic()
        # THEN each is closed by the server within a few seconds (recv sees the end of the stream)
        for s in socks:
            assert s.recv(1024) == b""
        assert time.monotonic() - start < 15
        # and a complete request is still answered
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(f"GET /api/runs?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
                      .encode())
            assert s.recv(64).startswith(b"HTTP/1.1 200")
    finally:
        for s in socks:
            s.close()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()


@pytest.mark.skipif(not os.path.exists("/usr/bin/prlimit"), reason="needs prlimit (util-linux)")
# 600 MiB only: a little more room and the load gets far enough to start its threads, and where a thread
# cannot get its thread-local data glibc aborts the process before Python can say anything ("cannot
# allocate memory for thread-local data", exit 127). That happened at 700 MiB in a fresh clone and not in
# the branch's own venv: it depends on how many threads the libraries start (docs/input.md).
@pytest.mark.parametrize("mib", [600])
def test_load_that_cannot_fit_says_so_in_one_line(tmp_path, mib):
    # GIVEN the 216k-event trace (about 400 MB of JSON inflated) on the msgspec path, in an address
    # space far too small for it
    env = {**os.environ, "PROFUSE_SCANNER": "0", "PROFUSE_CACHE_DIR": str(tmp_path)}
    path = trace_path("v100_rank1_of2_216k_events.json.gz")
    r = subprocess.run(["prlimit", f"--as={mib << 20}", sys.executable, "-m", "profuse", "sql", str(path),
                        "SELECT count(*) FROM events", "--no-cache"], capture_output=True, text=True, env=env,
                       timeout=300)
    # THEN one line naming the file says it does not fit, exit 2
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"profuse: {path}: "), r.stderr[-2000:]
    assert "memory" in r.stderr
