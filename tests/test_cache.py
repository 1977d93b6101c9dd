"""The table cache: in the user cache folder, keyed by the trace's bytes, verified, healed, capped."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import blake3
import duckdb
import pytest
from conftest import trace_path

import profuse
from profuse.cli import main
from profuse.trace import cache

SMALL = "a100_event_sync.json.gz"


@pytest.fixture(autouse=True)
def _always_cache(monkeypatch):
    monkeypatch.setenv("PROFUSE_CACHE_MIN_SECONDS", "0")  # small traces are cached too, in these tests


def caches(folder):
    return sorted(folder.glob(f"*{cache.SUFFIX}"))


def test_second_load_reads_the_cache_and_the_input_folder_is_untouched(tmp_path, _cache_dir):
    src = tmp_path / "in" / "t.json.gz"
    src.parent.mkdir()
    shutil.copy(trace_path(SMALL), src)
    first = profuse.load(src)
    assert not first.from_cache
    n = first.meta["events"]
    first.close()
    import gzip
    import json

    # independently: the trace's complete events, counted with plain json
    assert n == sum(1 for e in json.loads(gzip.decompress(src.read_bytes()))["traceEvents"] if e.get("ph") == "X")
    assert list(src.parent.iterdir()) == [src], "the input folder is never written to"
    (found,) = caches(_cache_dir)
    # named by the BLAKE3 hash of the trace's bytes, computed here independently
    assert found.name.startswith(blake3.blake3(src.read_bytes()).hexdigest())
    con = duckdb.connect(str(found), read_only=True)  # a real DuckDB file anyone can open
    assert con.execute("SELECT count(*) FROM events").fetchall()[0][0] == n
    con.close()
    second = profuse.load(src)
    assert second.from_cache and second.meta["events"] == n
    second.close()


def test_same_size_same_mtime_different_bytes_is_not_served_stale(tmp_path):
    # GIVEN a cached trace whose middle byte then changes with its size and mtime kept
    src = tmp_path / "t.json"
    import gzip

    raw = gzip.decompress(trace_path(SMALL).read_bytes())
    src.write_bytes(raw)
    profuse.load(src).close()
    st = src.stat()
    i = raw.index(b'"dur": ') + 7
    changed = raw[:i] + (b"9" if raw[i:i + 1] != b"9" else b"8") + raw[i + 1:]
    src.write_bytes(changed)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert src.stat().st_size == st.st_size and src.stat().st_mtime_ns == st.st_mtime_ns
    # WHEN it is loaded again THEN the tables are rebuilt from the new bytes
    t = profuse.load(src)
    assert not t.from_cache
    t.close()


def test_read_only_folder_is_fine(tmp_path, _cache_dir):
    ro = tmp_path / "ro"
    ro.mkdir()
    shutil.copy(trace_path(SMALL), ro / "t.json.gz")
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        profuse.load(ro / "t.json.gz").close()
        assert list(ro.iterdir()) == [ro / "t.json.gz"]
        assert caches(_cache_dir)
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


def test_cache_dir_flag_and_env(tmp_path, capsys):
    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path(SMALL), src)
    chosen = tmp_path / "chosen"
    assert main(["report", str(src), "--cache-dir", str(chosen), "--top", "1"]) == 0
    assert caches(chosen)
    assert main(["report", str(src), "--cache-dir", str(chosen), "--top", "1"]) == 0
    assert "from cache" in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["flip", "truncate", "renamed"])
def test_damaged_cache_is_discarded_and_rebuilt_with_a_note(tmp_path, _cache_dir, capsys, damage):
    # GIVEN a written cache, then damaged: bytes flipped in its middle, cut short, or named for other bytes
    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path("a100_alexnet.json.gz"), src)
    assert main(["report", str(src), "--format", "json", "-o", str(tmp_path / "a.json")]) == 0
    (path,) = caches(_cache_dir)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        for i in range(len(data) // 3, len(data) // 3 + 64):
            data[i] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    else:
        key, _digest, rest = path.name.split(".", 2)
        path.rename(path.with_name(f"{key}.{'f' * 16}.{rest}"))
    capsys.readouterr()
    # WHEN reported again THEN one note says the cache was not used, the result is the same, exit 0
    assert main(["report", str(src), "--format", "json", "-o", str(tmp_path / "b.json")]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "profuse: note: cache" in err and "Traceback" not in err
    assert (tmp_path / "a.json").read_text() == (tmp_path / "b.json").read_text()
    # AND the rebuilt cache is good again: the next load is from it, silently
    t = profuse.load(src)
    assert t.from_cache and not t.notes
    t.close()


def test_caches_named_by_sha1_before_blake3_count_against_the_cap_and_go(tmp_path, _cache_dir, monkeypatch):
    # GIVEN what profuse wrote before it hashed with BLAKE3: tables, a derived entry and a dead writer's
    # temporary named by a 40-hex SHA-1, beside a user's own file
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    key = "cd" * 20 + "-123"
    legacy = [_cache_dir / f"{key}.{'e' * 16}{cache.SUFFIX}", _cache_dir / f"{key}.{'f' * 16}{cache.DERIVED_SUFFIX}"]
    temp = _cache_dir / f".{key}{cache.SUFFIX}.{dead}.tmp"
    mine = _cache_dir / f"{'ab' * 20}-1.notes.duckdb"  # not profuse's shape: never touched
    for p in [*legacy, temp, mine]:
        p.write_bytes(b"x" * 4096)
    assert all(cache.is_cache_file(p.name) for p in [*legacy, temp]) and not cache.is_cache_file(mine.name)
    # WHEN a trace is loaded with a cap of 0 (only the cache just written may stay)
    monkeypatch.setenv("PROFUSE_CACHE_MAX_MB", "0")
    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path(SMALL), src)
    t = profuse.load(src)
    assert t.wait_for_cache() is None
    t.close()
    # THEN the old files were counted and evicted, the dead temporary cleaned, the user's file kept
    assert not any(p.exists() for p in [*legacy, temp]) and mine.exists()
    (left,) = caches(_cache_dir)
    assert left.name.startswith(blake3.blake3(src.read_bytes()).hexdigest())


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path, _cache_dir):
    # GIVEN temporaries left by a killed process (a pid that exists no more) and by a live one
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    key = "ab" * 32 + "-123"  # a BLAKE3 hex digest: 64 characters
    stale = [_cache_dir / f".{key}{cache.SUFFIX}.{dead}.tmp", _cache_dir / f".{key}{cache.SUFFIX}.{dead}.tmp.wal",
             # tables a big trace's load was building (before its hash was known)
             _cache_dir / f".build-{'0f' * 8}{cache.SUFFIX}.{dead}.tmp",
             _cache_dir / f".build-{'0f' * 8}{cache.SUFFIX}.{dead}.tmp.wal"]
    live = _cache_dir / f".{key}{cache.SUFFIX}.{os.getppid()}.tmp"
    huge_pid = _cache_dir / f".{key}{cache.SUFFIX}.{'9' * 30}.tmp"  # not our shape: left alone, no crash
    mine = _cache_dir / "notes.profuse.duckdb"  # a user's own file in a chosen folder: never touched
    for p in [*stale, live, huge_pid, mine]:
        p.write_bytes(b"x")
    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path(SMALL), src)
    profuse.load(src).close()
    assert not any(p.exists() for p in stale) and live.exists() and huge_pid.exists() and mine.exists()


def test_least_recently_used_caches_are_evicted_past_the_cap(tmp_path, _cache_dir, monkeypatch):
    names = ["a100_event_sync.json.gz", "a100_alexnet.json.gz", "mi250_rocm_toy_train.json.gz"]
    for i, name in enumerate(names):
        src = tmp_path / name
        shutil.copy(trace_path(name), src)
        profuse.load(src).close()
        for p in caches(_cache_dir):  # make the order of use unambiguous on coarse clocks
            if not p.name.startswith(blake3.blake3(src.read_bytes()).hexdigest()):
                os.utime(p, (p.stat().st_mtime - 10 * (i + 1),) * 2)
    assert len(caches(_cache_dir)) == 3
    first_sha = blake3.blake3((tmp_path / names[0]).read_bytes()).hexdigest()
    profuse.load(tmp_path / names[0]).close()  # used again: now the most recent
    total = sum(p.stat().st_size for p in caches(_cache_dir))
    monkeypatch.setenv("PROFUSE_CACHE_MAX_MB", "0")
    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path("h100_bert_small.json.gz"), src)
    t = profuse.load(src)
    assert t.wait_for_cache() is None
    t.close()
    left = caches(_cache_dir)
    assert len(left) == 1 and left[0].name.startswith(blake3.blake3(src.read_bytes()).hexdigest()), \
        "with a cap of 0 only the cache just written stays"
    assert total > 0 and not any(p.name.startswith(first_sha) for p in left)


def test_cache_write_failure_is_reported_not_fatal(tmp_path, monkeypatch):
    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path(SMALL), src)
    monkeypatch.setattr(cache.CacheSlot, "begin", lambda self: tmp_path / "missing" / "x.tmp")
    t = profuse.load(src)
    assert t.wait_for_cache() is not None, "the writer says why it failed"
    assert t.meta["events"] > 0
    t.close()


def test_bundle_folder_loads_its_trace(tmp_path):
    b = tmp_path / "bundle"
    b.mkdir()
    shutil.copy(trace_path(SMALL), b / "trace.json.gz")
    t = profuse.load(b)
    assert t.path.name == "trace.json.gz"
    t.close()
    assert sorted(p.name for p in b.iterdir()) == ["trace.json.gz"]


def test_reading_needs_no_torch(tmp_path):
    # A user reads a colleague's GPU trace on a laptop without torch: load, report (table, JSON with
    # the advisor's sections, HTML), sql and diff run in a child where importing torch fails.
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


def test_a_database_shipped_beside_a_trace_is_never_opened(tmp_path):
    # GIVEN a bundle carrying a DuckDB file where an old profuse put its cache, with a view reading a
    # local file and a meta row claiming to be this trace's tables
    b = tmp_path / "b"
    b.mkdir()
    shutil.copy(trace_path(SMALL), b / "trace.json.gz")
    secret = tmp_path / "secret.txt"
    secret.write_text("kind,n\nLEAKED,1\n")
    planted = duckdb.connect(str(b / "trace.json.gz.profuse.duckdb"))
    fp = cache.fingerprint(b / "trace.json.gz")
    planted.execute("CREATE TABLE meta (key VARCHAR, value VARCHAR)")
    planted.execute("INSERT INTO meta VALUES ('source', ?)", [__import__("json").dumps(fp)])
    planted.execute(f"CREATE VIEW events AS SELECT * FROM read_csv({cache.sql_string(secret)})")
    planted.close()
    # WHEN it is loaded and queried THEN the tables are built from the trace, not taken from that file
    with profuse.load(b) as t:
        assert not t.from_cache
        kinds = {k for (k,) in t.sql_rows("SELECT DISTINCT kind FROM events")[1]}
    assert "LEAKED" not in kinds and "kernel" in kinds


def _json_events(raw: bytes) -> int:
    """Complete events of a trace's bytes (gzip or plain), counted with plain json."""
    import gzip
    import json

    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return sum(1 for e in doc["traceEvents"] if e.get("ph") == "X")


@pytest.mark.parametrize("scanner", ["1", "0"], ids=["scanner", "msgspec"])
@pytest.mark.parametrize("gzipped", [True, False], ids=["gzip", "plain"])
@pytest.mark.parametrize("change", ["replaced", "deleted"])
def test_a_trace_changed_while_it_loads_is_cached_under_the_bytes_decoded(tmp_path, monkeypatch, gzipped, change,
                                                                          scanner):
    import gzip

    from profuse.trace import _decode

    monkeypatch.setenv("PROFUSE_SCANNER", scanner)

    first, other = trace_path("compare_base.json.gz").read_bytes(), trace_path("a100_alexnet.json.gz").read_bytes()
    if not gzipped:
        first, other = gzip.decompress(first), gzip.decompress(other)
    assert _json_events(first) != _json_events(other)
    src = tmp_path / ("t.json.gz" if gzipped else "t.json")
    src.write_bytes(first)
    real_read = _decode.read_trace

    def read_then_change(path: str, **kw):  # the file changes right after its bytes were read
        got = real_read(path, **kw)
        if change == "replaced":
            src.write_bytes(other)
        else:
            src.unlink()
        return got

    # GIVEN a load during which the file is replaced by another trace (or deleted)
    monkeypatch.setattr(_decode, "read_trace", read_then_change)
    with profuse.load(src) as t:
        assert t.meta["events"] == _json_events(first)  # it decoded what it read
    monkeypatch.setattr(_decode, "read_trace", real_read)
    # THEN the other trace's bytes, loaded later, never get the first trace's tables from the cache
    again = tmp_path / ("o.json.gz" if gzipped else "o.json")
    again.write_bytes(other)
    with profuse.load(again) as t:
        assert t.meta["events"] == _json_events(other)
    # AND the first trace's bytes are served from the cache the interrupted load wrote
    back = tmp_path / ("f.json.gz" if gzipped else "f.json")
    back.write_bytes(first)
    with profuse.load(back) as t:
        assert t.from_cache and t.meta["events"] == _json_events(first)


def test_a_write_through_the_connection_after_load_never_reaches_the_cache(tmp_path):
    # GIVEN a first load whose tables are changed through the engine's connection while the cache is written
    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path(SMALL), src)
    with profuse.load(src) as t:
        assert not t.from_cache
        t.con.execute("UPDATE events SET name = 'POISON'")
    # THEN the cache holds the tables as they were built
    with profuse.load(src) as t:
        assert t.from_cache
        assert t.sql_rows("SELECT count(*) FROM events WHERE name = 'POISON'")[1] == [(0,)]


def _all_tables(t) -> dict[str, list]:
    names = [r[0] for r in t.con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = "
                                         "current_database() ORDER BY 1").fetchall()]
    return {n: t.con.execute(f"SELECT * FROM {n} ORDER BY ALL").fetchall() for n in names}


def test_a_big_trace_is_built_into_its_cache_file(tmp_path, _cache_dir, monkeypatch):
    # GIVEN a shared trace loaded in memory, and then down the path of a trace of millions of events
    from profuse.trace import build

    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path("h100_bert_small.json.gz"), src)
    with profuse.load(src, cache=False) as t:
        want = _all_tables(t)
        in_file_order = t.con.execute("SELECT id FROM events").fetchnumpy()["id"].tolist()
    monkeypatch.setattr(build, "COMPRESS_MIN_EVENTS", 10)
    with profuse.load(src) as t:
        # THEN its tables are those of the load in memory, read from its cache file, in place and named
        # when the load returns: nothing is written behind, no temporary is left
        assert not t.from_cache and t.writer is None and t.wait_for_cache() is None
        assert len(caches(_cache_dir)) == 1 and not list(_cache_dir.glob(".*"))
        assert _all_tables(t) == want and sorted(want) == sorted(
            ["directions", "events", "flows", "instants", "memory", "memory_blocks", "memory_frames", "memory_segments",
             "meta", "nested_calls", "op_memory", "scopes", "shapes", "threads"])
        assert t.con.execute("SELECT id FROM events").fetchnumpy()["id"].tolist() == in_file_order
        # AND no write through its connection reaches the cache
        with pytest.raises(duckdb.Error):
            t.con.execute("UPDATE events SET name = 'POISON'")
    # WHEN it loads again THEN from that cache, with the same tables
    with profuse.load(src) as t:
        assert t.from_cache and _all_tables(t) == want


def test_a_big_trace_without_a_cache_is_built_in_a_temporary_file(tmp_path, monkeypatch):
    # GIVEN a shared trace loaded in memory, and then down the path of a trace of millions of events
    # without a cache (--no-cache), with its own temporary folder
    import tempfile

    from profuse.trace import build

    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path("h100_bert_small.json.gz"), src)
    with profuse.load(src, cache=False) as t:
        want = _all_tables(t)
        assert t.con.execute("SELECT path FROM duckdb_databases() WHERE database_name = 'trace'").fetchone()[0] is None
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(build, "COMPRESS_MIN_EVENTS", 10)
    with profuse.load(src, cache=False) as t:
        # THEN its tables are those of the load in memory, read from a file in the temporary folder that is
        # already gone (unlinked once attached, its folder removed): nothing is left if the process dies
        path = t.con.execute("SELECT path FROM duckdb_databases() WHERE database_name = 'trace'").fetchone()[0]
        assert path is not None and path.startswith(str(scratch))
        assert not list(scratch.iterdir())
        assert _all_tables(t) == want and not t.from_cache and t.writer is None
        # AND nothing writes to it, and no cache was written anywhere
        with pytest.raises(duckdb.Error):
            t.con.execute("UPDATE events SET name = 'POISON'")
    assert not list(scratch.iterdir())


def _file_writes_fail(monkeypatch) -> list:
    """The events' insert fails as on a full disk where ``trace`` is a file (a cache or temporary one) and goes
    in where it is in memory; returns the list of each call's database path, filled as they come."""
    from profuse.trace import _write, build

    real, calls = _write.write_events, []

    def write_events(con, **kw):
        calls.append(con.execute("SELECT path FROM duckdb_databases() WHERE database_name = 'trace'").fetchall())
        if calls[-1][0][0] is not None:
            raise duckdb.IOException("Could not write file: No space left on device")
        real(con, **kw)

    monkeypatch.setattr(build, "write_events", write_events)
    return calls


def test_a_big_trace_whose_temporary_file_fails_is_built_in_memory(tmp_path, monkeypatch):
    # GIVEN a trace down the big-trace path without a cache, whose temporary file cannot be written once
    # its tables go in (a full disk, say)
    import tempfile

    from profuse.trace import _write, build

    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path("h100_bert_small.json.gz"), src)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(build, "COMPRESS_MIN_EVENTS", 10)
    real, calls = _write.write_events, _file_writes_fail(monkeypatch)
    with profuse.load(src, cache=False) as t:
        # THEN the load succeeds in memory, says so, and leaves nothing in the temporary folder
        assert t.meta["events"] > 0 and not t.from_cache
        assert any("temporary tables file not written (" in n for n in t.notes), t.notes
        assert len(calls) == 2 and calls[1][0][0] is None
    assert not list(scratch.iterdir())
    # AND with no temporary folder at all, the tables go in memory at once
    monkeypatch.setattr(build, "write_events", real)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    with profuse.load(src, cache=False) as t:
        assert t.con.execute("SELECT path FROM duckdb_databases() WHERE database_name = 'trace'").fetchone()[0] is None
        assert _all_tables(t)["events"]


def test_a_big_trace_whose_cache_file_fails_is_built_in_memory(tmp_path, _cache_dir, monkeypatch):
    # GIVEN a trace down the big-trace path whose cache file cannot be written once its tables go in
    # (a full disk, say), and one whose build fails for another reason
    from profuse.trace import _write, build

    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path("h100_bert_small.json.gz"), src)
    monkeypatch.setattr(build, "COMPRESS_MIN_EVENTS", 10)
    real, calls = _write.write_events, _file_writes_fail(monkeypatch)
    with profuse.load(src) as t:
        # THEN the load succeeds in memory, says so, and leaves no file behind
        assert t.meta["events"] > 0 and not t.from_cache
        assert any("cache file not written (" in n and "No space left" in n for n in t.notes), t.notes
        assert len(calls) == 2 and calls[1][0][0] is None
    assert not caches(_cache_dir) and not list(_cache_dir.glob(".*"))

    def broken(con, meta):
        raise RuntimeError("not a cache problem")

    monkeypatch.setattr(build, "write_events", real)
    monkeypatch.setattr(build, "write_meta", broken)
    with pytest.raises(RuntimeError, match="not a cache problem"):
        profuse.load(src)
    assert not caches(_cache_dir) and not list(_cache_dir.glob(".*"))


def test_a_big_trace_with_no_room_for_its_cache_file_is_built_in_memory(tmp_path, _cache_dir, monkeypatch):
    # GIVEN a trace down the big-trace path and a cache folder with less room than its tables need
    import collections

    from profuse.trace import build

    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path("h100_bert_small.json.gz"), src)
    monkeypatch.setattr(build, "COMPRESS_MIN_EVENTS", 10)
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(build.shutil, "disk_usage", lambda folder: usage(1 << 30, 1 << 30, 1000))
    with profuse.load(src) as t:
        # THEN the tables are built in memory and the cache written behind, as for a small trace
        assert t.writer is not None
        assert t.wait_for_cache() is None and len(caches(_cache_dir)) == 1
