"""Derived entries in the trace cache (``Trace.derived``): kept per trace bytes, key and profuse build;
a damaged, truncated or foreign entry is never used, and --no-cache stores nothing."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
from conftest import trace_path

import profuse
from profuse.trace import cache

SMALL = "a100_event_sync.json.gz"


def entries(folder):
    return sorted(folder.glob(f"*{cache.DERIVED_SUFFIX}"))


def derive(trace, key, value):
    calls = []

    def compute():
        calls.append(1)
        return value

    data = trace.derived(key, compute)
    cache._finish_writes()  # the entry is written behind: wait for it, as interpreter exit does
    return data, len(calls)


def test_an_entry_is_computed_once_then_read_back_in_another_process(_cache_dir):
    with profuse.load(trace_path(SMALL)) as t:
        assert derive(t, "k/1", b"\x00payload") == (b"\x00payload", 1)
        assert derive(t, "k/1", b"other") == (b"\x00payload", 0)   # from the cache: compute not called
        assert derive(t, "k/2", b"two") == (b"two", 1)             # another key, another entry
    assert len(entries(_cache_dir)) == 2
    # a fresh interpreter finds it by the trace's bytes alone
    code = ("import sys, profuse; t = profuse.load(sys.argv[1]); "
            "sys.stdout.buffer.write(t.derived('k/1', lambda: b'recomputed'))")
    out = subprocess.run([sys.executable, "-c", code, str(trace_path(SMALL))], capture_output=True,
                         env={**os.environ, "PROFUSE_CACHE_DIR": str(_cache_dir)}, check=True)
    assert out.stdout == b"\x00payload"


def test_a_damaged_or_truncated_entry_is_recomputed(_cache_dir):
    with profuse.load(trace_path(SMALL)) as t:
        derive(t, "k", b"A" * 1000)
        (path,) = entries(_cache_dir)
        raw = bytearray(path.read_bytes())
        raw[-10] ^= 0x01  # one flipped bit in the payload
        path.write_bytes(bytes(raw))
        assert derive(t, "k", b"fresh") == (b"fresh", 1)
        path.write_bytes(path.read_bytes()[:40])  # cut short
        assert derive(t, "k", b"again") == (b"again", 1)
        path.write_bytes(b"")
        assert derive(t, "k", b"third") == (b"third", 1)
        assert path.read_bytes().endswith(b"third")


def test_an_entry_of_another_profuse_build_or_trace_is_not_reused(_cache_dir, monkeypatch):
    with profuse.load(trace_path(SMALL)) as t:
        derive(t, "k", b"old build")
        monkeypatch.setattr(cache, "_stamp", ["99.0+0000"])  # as after an upgrade or an edit of profuse
        assert derive(t, "k", b"new build") == (b"new build", 1)
    with profuse.load(trace_path("a100_triton_kernel.json.gz")) as other:
        assert derive(other, "k", b"other trace") == (b"other trace", 1)


def test_an_entry_written_under_another_keys_name_is_refused(_cache_dir):
    """The header names the trace, key and build: a file copied to another entry's name is not read as it."""
    with profuse.load(trace_path(SMALL)) as t:
        derive(t, "a", b"value of a")
        derive(t, "b", b"value of b")
        fp = t.meta.source
        pa, pb = cache.derived_path(_cache_dir, fp, "a"), cache.derived_path(_cache_dir, fp, "b")
        pb.write_bytes(pa.read_bytes())
        assert cache.read_derived(_cache_dir, fp, "b") is None
        assert not pb.exists()  # removed, to be rewritten


def test_no_cache_and_lenient_store_nothing(_cache_dir):
    for kwargs in ({"cache": False}, {"lenient": True}):
        with profuse.load(trace_path(SMALL), **kwargs) as t:
            assert derive(t, "k", b"x") == (b"x", 1)
            assert derive(t, "k", b"y") == (b"y", 1)
    assert entries(_cache_dir) == []


def test_the_code_stamp_follows_the_code_files():
    stamp = cache.code_stamp()
    assert stamp.startswith(profuse.__version__ + "+")
    files = sorted(cache._code_files(os.path.dirname(profuse.__file__)))
    assert any(name == "cache.py" for name, _, _ in files)
    assert stamp.endswith(hashlib.sha1(repr(files).encode()).hexdigest()[:16])


def test_a_temporary_of_a_dead_writer_is_cleaned(_cache_dir):
    with profuse.load(trace_path(SMALL)) as t:
        name = cache.derived_path(_cache_dir, t.meta.source, "k").name
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    tmp = _cache_dir / f".{name}.{dead}.tmp"
    tmp.write_bytes(b"half")
    assert tmp in cache.clean_stale_temporaries(_cache_dir)
    assert not tmp.exists()


@pytest.mark.parametrize("cap_mb", ["0"])
def test_entries_count_toward_the_size_cap(_cache_dir, monkeypatch, cap_mb):
    monkeypatch.setenv("PROFUSE_CACHE_MAX_MB", cap_mb)
    with profuse.load(trace_path(SMALL)) as t:
        derive(t, "a", b"A" * 4096)
        derive(t, "b", b"B" * 4096)  # writing b evicts a (least recently used); b itself is kept
        fp = t.meta.source
        assert [p.name for p in entries(_cache_dir)] == [cache.derived_path(_cache_dir, fp, "b").name]


def test_a_fingerprint_is_handed_on_once_and_only_for_the_file_unchanged(tmp_path, monkeypatch):
    src = tmp_path / "t.json.gz"
    src.write_bytes(trace_path(SMALL).read_bytes())
    hashed = []
    real = cache.file_digest
    monkeypatch.setattr(cache, "file_digest", lambda p, **kw: hashed.append(p) or real(p, **kw))
    fp = cache.fingerprint(src, hand_on=True)
    assert cache.fingerprint(src) == fp and len(hashed) == 1  # handed on: not hashed again
    assert cache.fingerprint(src) == fp and len(hashed) == 2  # once only
    cache.fingerprint(src, hand_on=True)
    os.utime(src, ns=(0, 0))  # touched: no longer the file that was hashed
    cache.fingerprint(src)
    assert len(hashed) == 4
