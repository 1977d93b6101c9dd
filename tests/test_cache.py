"""The table cache: beside the trace, in the user cache when read-only, temporary as a last resort."""
from __future__ import annotations

import os
import shutil
import stat

import duckdb
from conftest import trace_path

import profuse

SMALL = "a100_event_sync.json.gz"


def test_second_load_reads_the_cache(tmp_path):
    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path(SMALL), src)
    first = profuse.load(src)
    assert not first.from_cache
    n = first.meta["events"]
    first.close()
    cache = tmp_path / "t.json.gz.profuse.duckdb"
    assert cache.is_file()
    # the cache is a real DuckDB file anyone can open
    con = duckdb.connect(str(cache), read_only=True)
    assert con.execute("SELECT count(*) FROM events").fetchall()[0][0] == n
    con.close()
    second = profuse.load(src)
    assert second.from_cache and second.meta["events"] == n
    second.close()


def test_changed_trace_is_reloaded(tmp_path):
    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path(SMALL), src)
    profuse.load(src).close()
    shutil.copy(trace_path("a100_alexnet.json.gz"), src)
    t = profuse.load(src)
    assert not t.from_cache and t.meta["events"] > 100
    t.close()


def test_read_only_folder_uses_user_cache(tmp_path, _cache_dir):
    ro = tmp_path / "ro"
    ro.mkdir()
    shutil.copy(trace_path(SMALL), ro / "t.json.gz")
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        profuse.load(ro / "t.json.gz").close()
        assert list(ro.iterdir()) == [ro / "t.json.gz"]
        assert list(_cache_dir.glob("t.json.gz-*.profuse.duckdb"))
        again = profuse.load(ro / "t.json.gz")
        assert again.from_cache
        again.close()
    finally:
        ro.chmod(0o755)


def test_unwritable_cache_still_loads_in_memory(tmp_path, monkeypatch):
    # GIVEN a trace in a read-only folder and a read-only user cache folder
    ro = tmp_path / "ro"
    ro.mkdir()
    shutil.copy(trace_path(SMALL), ro / "t.json.gz")
    nocache = tmp_path / "nocache"
    nocache.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    nocache.chmod(stat.S_IRUSR | stat.S_IXUSR)
    monkeypatch.setenv("PROFUSE_CACHE_DIR", str(nocache))
    try:
        # WHEN it is loaded twice THEN both loads work from memory and nothing is written anywhere
        for _ in range(2):
            t = profuse.load(ro / "t.json.gz")
            assert not t.from_cache and t.meta["events"] > 0
            t.close()
        assert list(nocache.iterdir()) == [] and list(ro.iterdir()) == [ro / "t.json.gz"]
    finally:
        ro.chmod(0o755)
        nocache.chmod(0o755)


def test_cache_write_failure_is_reported_not_fatal(tmp_path, monkeypatch):
    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path(SMALL), src)
    from profuse.trace import cache

    monkeypatch.setattr(cache.CacheSlot, "begin", lambda self: tmp_path / "missing" / "x.tmp")
    t = profuse.load(src)
    assert t.wait_for_cache() is not None, "the writer says why it failed"
    assert t.meta["events"] > 0
    t.close()
    assert not (tmp_path / "t.json.gz.profuse.duckdb").exists()


def test_bundle_folder_loads_its_trace(tmp_path):
    b = tmp_path / "bundle"
    b.mkdir()
    shutil.copy(trace_path(SMALL), b / "trace.json.gz")
    t = profuse.load(b)
    assert t.path.name == "trace.json.gz"
    t.close()


def test_reading_needs_no_torch(tmp_path):
    # A user reads a colleague's GPU trace on a laptop without torch: load, report (table, JSON with
    # the advisor's sections, HTML), sql and diff run in a child where importing torch fails.
    import subprocess
    import sys

    trace = str(trace_path("h100_bert_small.json.gz"))
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from profuse.cli import main\n"
        f"assert main(['report', {trace!r}, '--top', '3']) == 0\n"
        f"assert main(['report', {trace!r}, '--format', 'json', '-o', {str(tmp_path / 'r.json')!r}]) == 0\n"
        f"assert main(['report', {trace!r}, '--format', 'html', '-o', {str(tmp_path / 'r.html')!r}]) == 0\n"
        f"assert main(['sql', {trace!r}, 'SELECT count(*) FROM events']) == 0\n"
        f"assert main(['diff', {trace!r}, {trace!r}, '--format', 'json']) == 0\n"
        "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    doc = __import__("json").loads((tmp_path / "r.json").read_text())
    assert doc["fusion_candidates"] and doc["hotspots"]
