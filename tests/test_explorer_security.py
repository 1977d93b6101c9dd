"""The explorer serves its own assets and the traces it was given, nothing else; it binds 127.0.0.1."""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from conftest import trace_path
from explorer_util import Explorer, running

import profuse
from profuse.explorer import server


def status(url: str) -> int:
    return get(url)[0]


def get(url: str, headers: dict[str, str] | None = None, timeout: float = 10) -> tuple[int, bytes]:
    """Status and body of a GET (redirects followed, without cookies: urllib keeps none)."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # the 3xx itself is the answer looked at


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
    assert status(base.at(path)) in (400, 404)


@pytest.mark.parametrize("path", ["/", "/assets/app.js", "/assets/style.css", "/api/runs", "/api/0/overview",
                                  "/api/0/ops?group_by=kernel", "/api/0/lanes", "/api/0/timeline?width=800",
                                  "/api/0/modules", "/api/0/compiled"])
def test_assets_and_api_are_served(base, path):
    assert status(base.at(path)) == 200


@pytest.mark.parametrize("path", ["/", "/?view=ops", "/assets/app.js", "/assets/style.css", "/api/runs",
                                  "/api/0/overview", "/api/0/timeline?width=800", "/api/compare", "/api/0/nope",
                                  "/etc/passwd"])
def test_nothing_is_served_without_the_session_token(base, path):
    # GIVEN another local account, which can reach 127.0.0.1:PORT but never saw the printed URL
    wrong = secrets.token_urlsafe(32)
    port = base.rsplit(":", 1)[1]
    sep = "&" if "?" in path else "?"
    # THEN no token, a wrong one, an empty one, a wrong cookie: 403, whatever the path
    assert status(base + path) == 403
    assert status(f"{base}{path}{sep}token={wrong}") == 403
    assert status(f"{base}{path}{sep}token=") == 403
    assert status(f"{base}{path}{sep}token={base.token[:-1]}") == 403
    assert get(base + path, {"Cookie": f"profuse-explorer-{port}={wrong}"})[0] == 403
    assert get(base + path, {"Cookie": f"profuse-explorer-{int(port) + 1}={base.token}"})[0] == 403, \
        "the cookie of another port's explorer"


def test_the_page_opened_with_the_token_sets_a_strict_cookie_that_opens_the_rest(base):
    opener = urllib.request.build_opener(NoRedirect)
    # WHEN a browser opens the printed URL (Sec-Fetch-Site: none: typed, or opened by `webbrowser`)
    try:
        opener.open(urllib.request.Request(base.at("/"), headers={"Sec-Fetch-Site": "none"}), timeout=10)
        raise AssertionError("the page with the token was answered without a redirect")
    except urllib.error.HTTPError as e:
        code, location, cookie = e.code, e.headers["Location"], e.headers["Set-Cookie"]
    # THEN it is sent on to the same page without the token, with the token in an HttpOnly, strict cookie
    assert code == 303 and location == "/"
    port = base.rsplit(":", 1)[1]
    name, value = cookie.split(";")[0].split("=", 1)
    assert (name, value) == (f"profuse-explorer-{port}", base.token)
    attributes = {a.strip().lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/"} <= attributes
    # AND that cookie alone opens the page, its files and the API
    for path in ("/", "/assets/app.js", "/api/runs", "/api/0/ops"):
        assert get(base + path, {"Cookie": f"{name}={value}"})[0] == 200, path
    # AND a page opened from another site's link keeps its token (a strict cookie would not come with a
    # redirect there): answered at once, with the cookie set for its own requests
    for fetch_site in ("cross-site", None):
        r = opener.open(urllib.request.Request(base.at("/"), headers={"Sec-Fetch-Site": fetch_site} if fetch_site
                                               else {}), timeout=10)
        assert r.status == 200 and r.headers["Set-Cookie"].startswith(f"{name}={value};"), fetch_site


def test_an_api_error_without_the_token_is_one_line_of_json(base):
    code, body = get(base + "/api/0/ops")
    assert code == 403 and "\n" not in json.loads(body)["error"]


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
        url = Explorer.printed(proc.stdout.readline().split()[2])
        port = int(url.rsplit(":", 1)[1])
        # THEN the socket the kernel lists as listening on that port is bound to 127.0.0.1 and nothing else
        assert listening_addresses(port) == ["127.0.0.1"]
        assert status(url.at("/api/runs")) == 200
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()


def test_pages_forbid_inline_script_and_other_origins(base):
    with urllib.request.urlopen(base.at("/")) as r:
        csp = r.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "default-src 'self'" in csp and "unsafe-inline" not in csp


def test_timeline_level_of_detail(base):
    with urllib.request.urlopen(base.at("/api/0/timeline?width=200")) as r:
        coarse = json.load(r)
    with urllib.request.urlopen(base.at(f"/api/0/timeline?t0={coarse['span'][0]}&t1={coarse['span'][0] + 50}"
                                        f"&width=2000")) as r:
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


@pytest.mark.parametrize("query", [
    "t0=-1e308&t1=1e308",  # each bound finite, their difference not: this froze the explorer
    "t0=-1e308", "t1=1e308", "t0=1e300&t1=1e300", "t0=-1.7e308&t1=1.7e308&bucket_ns=1024",
    "t0=0&t1=2e12", "t0=1e13&t1=1e13", "t0=0&t1=1000&bucket_ns=1", "width=800&bucket_ns=1",
])
def test_windows_out_of_bounds_are_refused_at_once_and_the_explorer_answers_on(base, query):
    start = time.monotonic()
    code, body = get(base.at(f"/api/0/timeline?{query}"), timeout=5)
    assert code == 400 and time.monotonic() - start < 2
    error = json.loads(body)["error"]
    assert error and "\n" not in error
    # AND the next request is answered (nothing holds the run)
    assert get(base.at("/api/0/ops"), timeout=5)[0] == 200


@pytest.mark.parametrize("path", ["/api/0/event/99999999999999999999999999",
                                  "/api/0/memory_live?device=0&id=99999999999999999999999999",
                                  "/api/0/memory_live?device=0&id=-99999999999999999999999999"])
def test_numbers_beyond_64_bits_are_refused(base, path):
    code, body = get(base.at(path), timeout=5)
    assert code in (400, 404) and "\n" not in json.loads(body)["error"]


def test_a_request_that_waits_too_long_for_its_run_is_answered_503(monkeypatch):
    with profuse.load(trace_path("a100_event_sync.json.gz")) as t, running([t]) as base:
        assert status(base.at("/api/0/ops")) == 200
        run = base.app.state.runs[0]
        # GIVEN the run busy with another request
        with run.lock:
            # THEN a window out of bounds is refused without waiting for it
            start = time.monotonic()
            assert status(base.at("/api/0/timeline?t0=-1e308&t1=1e308")) == 400
            assert time.monotonic() - start < server.LOCK_WAIT_S / 4
        # GIVEN the run busy for longer than a request may wait
        monkeypatch.setattr(server, "LOCK_WAIT_S", 0.5)
        with run.lock:
            start = time.monotonic()
            code, body = get(base.at("/api/0/ops"), timeout=10)
            waited = time.monotonic() - start
        # THEN the waiting request gets 503 (one line) after the wait, and the next one is answered
        assert code == 503 and 0.5 <= waited < 3 and "\n" not in json.loads(body)["error"]
        assert status(base.at("/api/0/ops")) == 200


def _fetch_quietly(url: str) -> None:
    with contextlib.suppress(OSError):  # the explorer stops under it: no answer is expected
        get(url, timeout=5)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_explore_stops_within_2_s_with_one_line_even_mid_requests(tmp_path, sig):
    env = {**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "profuse", "explore", str(trace_path("a100_event_sync.json.gz")),
                             "--no-browser"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line and "?token=" in line
        url = Explorer.printed(line.split()[2])
        assert status(url.at("/api/runs")) == 200
        # GIVEN requests in flight: the window that froze the explorer, and others queued behind it
        paths = ["/api/0/timeline?t0=-1e308&t1=1e308"] + ["/api/0/ops", "/api/0/timeline?width=8000",
                                                           "/api/0/overview", "/api/0/memory"] * 6
        for path in paths:
            threading.Thread(target=_fetch_quietly, args=(url.at(path),), daemon=True).start()
        time.sleep(0.2)
        # WHEN it is told to stop
        proc.send_signal(sig)
        # THEN it has stopped within 2 s, exit 0, saying so in one line and nothing else
        assert proc.wait(timeout=2) == 0
        out, err = proc.communicate(timeout=5)
        assert out == "" and err.splitlines() == ["profuse explorer stopped"], err
        assert "Traceback" not in err and "CancelledError" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_browser_is_opened_on_a_private_page_not_the_token(tmp_path, monkeypatch):
    # GIVEN the page serve() hands the browser: the token must not reach a command line (/proc/PID/cmdline
    # is every local account's), so the browser gets a file only this account can read
    import stat

    from profuse.explorer.server import _private_opener

    url = "http://127.0.0.1:1234/?token=abc&x=<1>"
    page = _private_opener(url)
    try:
        assert "abc" not in str(page)
        assert stat.S_IMODE(page.stat().st_mode) == 0o600 and stat.S_IMODE(page.parent.stat().st_mode) == 0o700
        text = page.read_text()
        assert 'content="0;url=http://127.0.0.1:1234/?token=abc&amp;x=&lt;1&gt;"' in text
    finally:
        import shutil
        shutil.rmtree(page.parent)
