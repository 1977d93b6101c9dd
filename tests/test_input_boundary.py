"""The input boundary (issue 9): names that are SQL, user SQL, the explorer's host and files, bundles
that survive kills, secrets kept out of every output, capture status, unwritable output."""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from conftest import trace_path
from explorer_util import Explorer, running

import profuse
from profuse.cli import main
from profuse.trace import cache
from profuse.trace.bundle import CaptureConfig

SMALL = "a100_event_sync.json.gz"
HOSTILE = [
    "a' AS j; COPY (SELECT 42) TO 'pwned.sh' (FORMAT csv); ATTACH 'b.json.gz",
    "bob's trace.json.gz",
    'x"; DROP TABLE events; --.json.gz',
]


@pytest.fixture(autouse=True)
def _always_cache(monkeypatch):
    monkeypatch.setenv("PROFUSE_CACHE_MIN_SECONDS", "0")


# 1. SQL from a path is never executed, and such traces still get their cache


@pytest.mark.parametrize("name", HOSTILE)
@pytest.mark.parametrize("as_folder", [False, True])
def test_hostile_names_run_no_sql_and_are_cached(tmp_path, _cache_dir, monkeypatch, name, as_folder):
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    if as_folder:
        folder = tmp_path / name.replace(".json.gz", "")
        folder.mkdir()
        src = folder / "trace.json.gz"
        arg = folder
    else:
        src = tmp_path / name
        arg = src
    shutil.copy(trace_path(SMALL), src)
    before = {p for p in tmp_path.rglob("*")}
    assert main(["report", str(arg), "--format", "json", "-o", str(tmp_path / "r.json")]) == 0
    assert main(["sql", str(arg), "SELECT count(*) FROM events"]) == 0
    made = {p for p in tmp_path.rglob("*")} - before - {tmp_path / "r.json"}
    assert not made, f"files appeared: {made}"
    assert not list(work.iterdir()) and not (tmp_path / "pwned.sh").exists()
    assert len(list(_cache_dir.glob(f"*{cache.SUFFIX}"))) == 1, "the cache is written"
    t = profuse.load(arg)
    assert t.from_cache
    t.close()


# 2. user SQL sees complete tables and cannot change them or the cache


@pytest.mark.parametrize("query", ["UPDATE events SET dur = 0", "DROP TABLE events", "DELETE FROM events",
                                   "SELECT 1; DROP TABLE events", "CREATE TABLE x AS SELECT 1"])
def test_user_sql_cannot_change_tables_or_cache(tmp_path, capsys, query):
    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path("a100_alexnet.json.gz"), src)
    q = "SELECT count(*) AS n, sum(dur) AS d FROM events"
    # GIVEN an uncached trace; WHEN the first thing run on it is a write
    assert main(["sql", str(src), query]) == 2
    err = capsys.readouterr().err
    assert err.startswith("profuse: SQL error:") and err.count("\n") == 1
    # THEN the cache written behind is complete and unchanged
    assert main(["sql", str(src), q, "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)[0]
    with profuse.load(src, cache=False) as fresh:
        want = fresh.con.execute(q).fetchall()[0]
    assert (got["n"], got["d"]) == want and want[0] > 0
    from oracle import complete_events

    assert want[0] == len(complete_events(src)), "every complete event of the trace (plain json)"


def test_user_sql_reaches_no_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    t = str(trace_path(SMALL))
    assert main(["sql", t, f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'"]) == 2
    assert "not COPY" in capsys.readouterr().err and not (tmp_path / "x.csv").exists()
    secret = tmp_path / "secret.txt"
    secret.write_text("LOCAL-FILE")
    assert main(["sql", t, f"SELECT * FROM read_text('{secret}')"]) == 2
    assert "LOCAL-FILE" not in capsys.readouterr().out
    assert main(["sql", t, "EXPLAIN ANALYZE SELECT count(*) FROM events"]) == 0
    assert main(["sql", t, "DESCRIBE events"]) == 0


# 4. the explorer: loopback host names only, bundle files only, no FIFO hang, SIGTERM stops it


def request(url: str, host: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_explorer_answers_only_its_own_loopback_host():
    with profuse.load(trace_path(SMALL)) as t, running([t]) as base:
        port = base.rsplit(":", 1)[1]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            assert request(base.at("/api/runs"), host)[0] == 200, host
        for host in ("evil.example:" + port, "evil.example", "127.0.0.1", f"127.0.0.1:{int(port) + 1}",
                     f"localhost.evil.example:{port}", f"127.0.0.1:{port}.evil.example"):
            for path in ("/", "/api/runs", "/api/0/overview"):
                assert request(base.at(path), host)[0] == 421, (host, path)


def test_explorer_serves_only_regular_files_inside_the_bundle(tmp_path):
    # GIVEN a bundle whose artifacts hold a link out of it, a FIFO, a huge file and a real file
    b = tmp_path / "b"
    art = b / "artifacts" / "inductor"
    art.mkdir(parents=True)
    shutil.copy(trace_path(SMALL), b / "trace.json.gz")
    secret = tmp_path / "outside.txt"
    secret.write_text("OUTSIDE-SECRET")
    (art / "link.py").symlink_to(secret)
    os.mkfifo(art / "fifo.py")
    with open(art / "huge.py", "wb") as fh:
        fh.truncate(1 << 30)  # 1 GiB, sparse
    (art / "real.py").write_text("def cpp_fused_add_mul_0(): pass\n")
    with profuse.load(b) as t, running([t]) as base:
        start = time.monotonic()
        status, body = request(base.at("/api/0/compiled"))
        assert status == 200 and time.monotonic() - start < 10, "a FIFO never blocks the reader"
        code = json.loads(body)["code"]
        assert set(code) == {"huge.py", "real.py"}
        assert len(code["huge.py"]) <= 200_000, "cut before it is read whole"
        assert "OUTSIDE-SECRET" not in body.decode()
        assert request(base.at("/api/0/ops"))[0] == 200, "the run's lock was released"


def test_explorer_whose_artifacts_folder_is_a_link_reads_nothing(tmp_path):
    b = tmp_path / "b"
    b.mkdir()
    shutil.copy(trace_path(SMALL), b / "trace.json.gz")
    elsewhere = tmp_path / "elsewhere" / "inductor"
    elsewhere.mkdir(parents=True)
    (elsewhere / "x.py").write_text("ELSEWHERE")
    (b / "artifacts").symlink_to(tmp_path / "elsewhere")
    with profuse.load(b) as t, running([t]) as base:
        assert json.loads(request(base.at("/api/0/compiled"))[1])["code"] == {}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_explorer_stops_on_sigterm_and_sigint(tmp_path, sig):
    env = {**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "profuse", "explore", str(trace_path(SMALL)), "--no-browser"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = Explorer.printed(proc.stdout.readline().split()[2])
        assert request(url.at("/api/runs"))[0] == 200
        proc.send_signal(sig)
        assert proc.wait(timeout=15) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()


# 5. bundles: the old one stays until the new one is in; what killed writers left is cleaned


def _bundle(tmp_path, name="b"):
    from profuse.capture.bundle import write_bundle

    raw = tmp_path / f"{name}-src.json"
    import gzip

    raw.write_bytes(gzip.decompress(trace_path(SMALL).read_bytes()))
    return write_bundle, raw


def test_replacing_a_bundle_swaps_it_in_one_step(tmp_path):
    pytest.importorskip("torch")
    from profuse.capture.bundle import _replace, is_bundle

    write_bundle, raw = _bundle(tmp_path)
    out = tmp_path / "b"
    write_bundle(out, raw, config=CaptureConfig(), status="complete", build_cache=False)
    (out / "marker").write_text("old")
    new = tmp_path / ".b.tmp-1"
    shutil.copytree(out, new)
    (new / "marker").write_text("new")
    _replace(new, out)
    assert (out / "marker").read_text() == "new" and is_bundle(out)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".b")) == []


def test_stale_bundle_temporaries_are_cleaned_and_a_moved_bundle_restored(tmp_path):
    pytest.importorskip("torch")
    from profuse.capture.bundle import clean_stale, is_bundle

    write_bundle, raw = _bundle(tmp_path)
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    out = tmp_path / "b"
    write_bundle(out, raw, config=CaptureConfig(), status="complete", build_cache=False)
    # GIVEN a writer killed between moving the old bundle aside and moving the new one in
    os.replace(out, tmp_path / f".b.old-{dead}")
    (tmp_path / f".b.tmp-{dead}").mkdir()
    (tmp_path / f".b.tmp-{dead}" / "half").write_text("x")
    # WHEN the next writer starts THEN the old bundle is back and the half-written folder gone
    clean_stale(out)
    assert is_bundle(out)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".b")] == []


def test_killed_bundle_write_leaves_the_old_bundle(tmp_path):
    pytest.importorskip("torch")
    write_bundle, raw = _bundle(tmp_path)
    out = tmp_path / "b"
    write_bundle(out, raw, config=CaptureConfig(steps=1), status="complete", build_cache=False)
    # a child rewriting the bundle is SIGKILLed while building the new one's cache
    code = ("import sys, os, signal; from pathlib import Path\n"
            "import profuse.trace.open_trace as L\n"
            "real = L.load\n"
            "def dying(*a, **k):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
            "L.load = dying\nimport profuse.trace as T; T.load = dying\n"
            "from profuse.capture.bundle import write_bundle\n"
            "from profuse.trace.bundle import CaptureConfig\n"
            f"write_bundle(Path({str(out)!r}), Path({str(raw)!r}), config=CaptureConfig(steps=2), status='complete')\n")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path)})
    assert r.returncode == -signal.SIGKILL
    assert json.loads((out / "meta.json").read_text())["config"]["steps"] == 1, "the old bundle is still there"
    write_bundle(out, raw, config=CaptureConfig(steps=3), status="complete", build_cache=False)
    assert json.loads((out / "meta.json").read_text())["config"]["steps"] == 3
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".b")] == []


# 7. secrets are redacted by value in every output, unless --keep-metadata


SECRETS = ["hunter2hunter2", "s3cretpass", "sk-abcdefghijklmnopqrstuvwx", "tok3nvalue",
           "hf_abcdefghijklmnopqrstuvwxyz", "AKIAIOSFODNN7EXAMPLE"]


def _secret_trace(tmp_path):
    import gzip

    doc = json.loads(gzip.decompress(trace_path(SMALL).read_bytes()))
    doc["traceName"] = ("python serve.py --password hunter2hunter2 --db https://bob:s3cretpass@db.example/x "
                        "--api-key sk-abcdefghijklmnopqrstuvwx --token=tok3nvalue")
    doc["distributedInfo"] = {"backend": "nccl", "rank": 0, "note": {"deep": ["hf_abcdefghijklmnopqrstuvwxyz"]},
                              "aws": "AKIAIOSFODNN7EXAMPLE"}
    b = tmp_path / "b"
    b.mkdir()
    (b / "trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    (b / "meta.json").write_text(json.dumps({
        "schema": "profuse.bundle/1", "status": "failed",
        "run": {"error": "RuntimeError: cannot connect to https://bob:s3cretpass@db.example with --password "
                         "hunter2hunter2"}}))
    return b


def test_secrets_are_redacted_in_every_output(tmp_path, capsys):
    b = _secret_trace(tmp_path)
    outputs = {}
    assert main(["report", str(b)]) == 0
    outputs["console"] = capsys.readouterr().out
    assert main(["report", str(b), "--format", "json"]) == 0
    outputs["json"] = capsys.readouterr().out
    assert main(["report", str(b), "--format", "html", "-o", str(tmp_path / "r.html")]) == 0
    outputs["html"] = (tmp_path / "r.html").read_text()
    with profuse.load(b) as t, running([t]) as base:
        outputs["explorer"] = request(base.at("/api/0/overview"))[1].decode()
    for where, text in outputs.items():
        for s in SECRETS:
            assert s not in text, f"{s} shown in {where}"
    assert "This bundle's capture failed: RuntimeError: cannot connect" in outputs["console"]
    capture = json.loads(outputs["json"])["capture"]
    assert capture["status"] == "failed" and "[redacted]" in capture["error"]
    assert '"rank":0' in outputs["html"] and "[redacted]" in outputs["explorer"], "the rest stays"
    assert main(["report", str(b), "--format", "html", "-o", str(tmp_path / "k.html"), "--keep-metadata"]) == 0
    kept = (tmp_path / "k.html").read_text()
    assert all(s in kept for s in ("hunter2hunter2", "s3cretpass", "hf_abcdefghijklmnopqrstuvwxyz"))


def test_redaction_is_linear_on_long_hostile_strings():
    # GIVEN 64 KB strings shaped to make a backtracking pattern quadratic (a bounded repeat before a
    # fixed word took 48 s on 16 KB); THEN each is redacted far faster than any quadratic scan could
    from profuse.redact import redact_text

    for s in ("a." * 32000, "a:" * 32000, " --a" * 16000, "x" * 64000 + " --token", "http://" + "a" * 64000):
        start = time.monotonic()
        redact_text(s)
        assert time.monotonic() - start < 10, s[:20]


def test_failure_messages_are_redacted(tmp_path, capsys):
    missing = tmp_path / "https:" / "bob:s3cretpass@host" / "t.json.gz"
    assert main(["report", "https://bob:s3cretpass@host/t.json.gz"]) == 2
    err = capsys.readouterr().err
    assert "s3cretpass" not in err and err.count("\n") == 1
    assert not missing.exists()


# 8. capture status in JSON; a forked child writes no bundle; an unwritable -o is one line


def test_json_report_carries_capture_status(tmp_path, capsys):
    b = _secret_trace(tmp_path)
    assert main(["report", str(b), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["capture"]["status"] == "failed"
    assert main(["report", str(trace_path(SMALL)), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["capture"] is None


FORKING = """
import os, sys, torch
m = torch.nn.Linear(4, 4)
for _ in range(4):
    m(torch.randn(2, 4))
pid = os.fork()
if pid == 0:
    sys.exit(0)
os.waitpid(pid, 0)
print("parent done")
"""


def test_forking_script_writes_its_bundle_once(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    script = tmp_path / "fork.py"
    script.write_text(FORKING)
    out = tmp_path / "bundle"
    r = subprocess.run([sys.executable, "-m", "profuse", "run", "--out", str(out), "--warmup", "1", "--steps", "2",
                        "--", "python", str(script)], capture_output=True, text=True,
                       env={**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("parent done") == 1
    assert r.stderr.count("profuse: bundle") == 1, r.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".bundle")] == []
    assert (out / "meta.json").is_file()


def test_output_that_cannot_be_written_is_one_line(tmp_path):
    # GIVEN a file-size limit of 1 KiB standing in for a full disk; WHEN an HTML report is written
    out = tmp_path / "r.html"
    code = ("import resource, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))\n"
            "from profuse.cli import main\n"
            f"sys.exit(main(['report', {str(trace_path(SMALL))!r}, '--no-cache', '--format', 'html',"
            f" '-o', {str(out)!r}]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path / "c")})
    # THEN one line names the file, exit 2, and nothing half-written is left
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1 and str(out) in r.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".r.html")] == [] and not out.exists()
    assert resource.RLIMIT_FSIZE  # the limit exists on this platform


def test_report_table_goes_to_the_output_file(tmp_path, capsys):
    out = tmp_path / "r.txt"
    assert main(["report", str(trace_path("a100_alexnet.json.gz")), "--top", "3", "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    text = out.read_text()
    assert "aten::" in text and "\x1b[" not in text, "plain text, no terminal colour codes"


def test_error_messages_carry_no_terminal_escapes(tmp_path, capsys):
    # a file name holding an ANSI escape (clear screen) and a bidi override reaches the one-line error escaped
    name = tmp_path / "x\x1b[2J\u202eevil.json"
    assert main(["report", str(name)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\u202e" not in err and "\\x1b[2J" in err and err.count("\n") == 1
