"""Stat entries: a trace's cache found by its stat (device, inode, size, mtime, ctime) without hashing,
its bytes hashed behind, and a trace whose bytes turn out different never served as the old one."""
from __future__ import annotations

import gzip
import json
import os
import time

import blake3
import httpx
import oracle
import pytest
from conftest import trace_path
from explorer_util import running

import profuse
from profuse.trace import cache

SMALL = "a100_event_sync.json.gz"
OLD, NEW = b'"name": "aten::ones"', b'"name": "aten::onez"'  # one op renamed, the size kept
SETTLE_NS = 50_000_000
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(autouse=True)
def _always_cache(monkeypatch):
    monkeypatch.setenv("PROFUSE_CACHE_MIN_SECONDS", "0")  # small traces are cached too, in these tests


@pytest.fixture
def settled(monkeypatch):
    """Files count as settled SETTLE_NS after their last change (the default wait is 2 s); a stat entry's
    sampled blocks are the file's first and last 16 bytes, so that a rewrite in the middle is one the entry
    cannot see (by default this small trace is sampled whole: see the sample's own tests)."""
    monkeypatch.setattr(cache, "RACY_NS", SETTLE_NS)
    monkeypatch.setattr(cache, "SAMPLE_BLOCK", 16)
    monkeypatch.setattr(cache, "SAMPLE_BLOCKS", 2)

    def wait():
        time.sleep(SETTLE_NS / 1e9 * 2)

    return wait


def raw_trace():
    raw = gzip.decompress(trace_path(SMALL).read_bytes())
    assert raw.count(OLD) == 1
    return raw


def cached_with_stat_entry(tmp_path, folder, wait):
    """A trace file, its cache built, then hashed by a load once it has settled: its stat entry written."""
    src = tmp_path / "t.json"
    src.write_bytes(raw_trace())
    profuse.load(src).close()  # builds the cache (no hash before: no cache of this size yet)
    wait()
    profuse.load(src).close()  # hashes the settled file, finds the cache, writes the stat entry
    return src, cache.stat_path(folder, src)


def op_names(trace):
    return {r[0] for r in trace.con.execute("SELECT DISTINCT name FROM events WHERE kind = 'cpu_op'").fetchall()}


def test_a_hashing_load_records_a_settled_files_fingerprint(tmp_path, _cache_dir, settled):
    src, entry = cached_with_stat_entry(tmp_path, _cache_dir, settled)
    # THEN the entry names the file's path, its stat and the BLAKE3 hash of its bytes (computed here)
    rec = json.loads(entry.read_text())
    st = src.stat()
    assert rec["path"] == str(src.resolve())
    assert rec["stat"] == [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    assert rec["fingerprint"]["blake3"] == blake3.blake3(src.read_bytes()).hexdigest()
    assert rec["fingerprint"]["size"] == len(src.read_bytes())
    assert cache.is_cache_file(entry.name)


def test_a_file_changed_just_before_its_hash_gets_no_stat_entry(tmp_path, _cache_dir):
    # GIVEN a cached trace, then rewritten (the same bytes) just now: within RACY_NS (2 s) of the next hash
    src = tmp_path / "t.json"
    src.write_bytes(raw_trace())
    profuse.load(src).close()
    src.write_bytes(src.read_bytes())
    # WHEN it is hashed again THEN no stat entry is written: a write in the same clock tick could go unseen
    with profuse.load(src) as t:
        assert t.from_cache
    assert not cache.stat_path(_cache_dir, src).exists()
    # and a load that would check behind hashes first instead
    with profuse.load(src, verify="behind") as t:
        assert t.from_cache and t.source_check is None


def test_a_behind_load_opens_by_stat_and_its_check_passes_for_the_same_bytes(tmp_path, _cache_dir, settled):
    src, _ = cached_with_stat_entry(tmp_path, _cache_dir, settled)
    with profuse.load(src, verify="behind") as t:
        assert t.from_cache and t.source_check is not None
        assert t.source_check.wait() is None
        assert t.meta.source["blake3"] == blake3.blake3(src.read_bytes()).hexdigest()
    with profuse.load(src) as t:  # the default still hashes first
        assert t.source_check is None


def _rewrite_unseen(src, entry):
    """The trace's bytes changed (same size) where its stat entry cannot see it: the entry then records
    the file's new stat under the old bytes' fingerprint, as a rewrite in the same clock tick as the
    hash (or a file system that keeps no ctime) leaves it."""
    src.write_bytes(src.read_bytes().replace(OLD, NEW))
    rec = json.loads(entry.read_text())
    st = src.stat()
    rec["stat"] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    entry.write_text(json.dumps(rec))
    assert cache.fingerprint_by_stat(entry.parent, src) == rec["fingerprint"]


def test_a_stat_entry_that_misses_a_change_is_caught_and_removed(tmp_path, _cache_dir, settled):
    src, entry = cached_with_stat_entry(tmp_path, _cache_dir, settled)
    _rewrite_unseen(src, entry)
    # WHEN the trace is opened by its stat entry
    t = profuse.load(src, verify="behind")
    try:
        # THEN the old tables come back (nothing was hashed) but the check behind says they are not the file's
        assert t.from_cache and "aten::ones" in op_names(t)
        why = t.source_check.wait()
        assert why is not None and "changed" in why
        assert not entry.exists(), "a stat entry found wrong is removed"
        # and loading again gives the new bytes' tables
        with t.source_check.reload() as fresh:
            assert "aten::onez" in op_names(fresh) and "aten::ones" not in op_names(fresh)
            assert fresh.meta.source["blake3"] == blake3.blake3(src.read_bytes()).hexdigest()
    finally:
        t.close()


def test_the_explorer_never_answers_from_a_trace_whose_bytes_changed(tmp_path, _cache_dir, settled):
    # GIVEN the explorer started on a trace opened by a stat entry that missed a change of its bytes
    src, entry = cached_with_stat_entry(tmp_path, _cache_dir, settled)
    _rewrite_unseen(src, entry)
    t = profuse.load(src, verify="behind")
    assert "aten::ones" in op_names(t)
    try:
        with running([t]) as url:
            # WHEN the page asks for the op table and the run list
            ops = httpx.get(url.at("/api/0/ops")).json()
            runs = httpx.get(url.at("/api/runs")).json()
            lanes = httpx.get(url.at("/api/0/lanes"))
    finally:
        t.close()
    # THEN every answer is of the file's bytes now: the renamed op, never the old name
    names = {r["name"] for r in ops["rows"]}
    assert "aten::onez" in names and "aten::ones" not in names
    events = sum(1 for e in json.loads(src.read_bytes())["traceEvents"] if e.get("ph") == "X")
    assert runs[0]["events"] == events and lanes.status_code == 200


def test_the_explorer_says_so_when_the_changed_trace_no_longer_loads(tmp_path, _cache_dir, settled):
    src, entry = cached_with_stat_entry(tmp_path, _cache_dir, settled)
    raw = src.read_bytes()
    src.write_bytes(raw[:16] + b"x" * (len(raw) - 32) + raw[-16:])  # not JSON any more, the size and sample kept
    rec = json.loads(entry.read_text())
    st = src.stat()
    rec["stat"] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    entry.write_text(json.dumps(rec))
    t = profuse.load(src, verify="behind")
    try:
        with running([t]) as url:
            r = httpx.get(url.at("/api/0/overview"))
            runs = httpx.get(url.at("/api/runs"))
    finally:
        t.close()
    # THEN a one-line error naming the file, no traceback, and nothing of the old tables
    assert r.status_code == 409 and runs.status_code == 409
    err = r.json()["error"]
    assert err.startswith(str(src)) and "changed on disk" in err and "\n" not in err


def test_the_explorer_keeps_the_first_view_and_answers_it_the_same_when_opened_again(tmp_path, _cache_dir):
    src = tmp_path / "t.json"
    src.write_bytes(raw_trace())
    asked = ["lanes", "timeline?width=1131", "memory"]
    answers = []
    for _ in range(2):
        with profuse.load(src) as t, running([t]) as url:
            answers.append([httpx.get(url.at(f"/api/0/{a}")).json() for a in asked])
        for w in cache._derived_writes:
            w.join()
    # THEN the second opening's answers (from the kept entries) are the first's, and the full window counts
    # every complete event of the file once (the oracle reads the raw file)
    assert answers[0] == answers[1]
    assert len(sorted(_cache_dir.glob(f"*{cache.DERIVED_SUFFIX}"))) >= 3
    assert sum(answers[1][1]["n"]) == len(oracle.complete_events(src))


@pytest.mark.skipif(not os.path.exists(CHROMIUM) and not os.environ.get("CI"),
                    reason="Debian chromium not installed (make test installs it)")
def test_the_page_draws_a_stat_opened_trace_and_shows_the_bytes_on_disk(tmp_path, _cache_dir, settled):
    # GIVEN a trace opened by a stat entry that missed a change, its first view kept from an earlier opening
    src, entry = cached_with_stat_entry(tmp_path, _cache_dir, settled)
    with profuse.load(src) as t, running([t]) as url:
        assert httpx.get(url.at("/api/0/timeline?width=1180")).status_code == 200
    _rewrite_unseen(src, entry)
    from playwright.sync_api import sync_playwright

    t = profuse.load(src, verify="behind")
    try:
        with running([t]) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            # WHEN the page opens on the timeline, then on the op table
            page.goto(url.at("/#view=timeline"))
            page.wait_for_selector("canvas[data-painted]", state="attached", timeout=15000)
            page.goto(url.at("/#view=ops"))
            page.wait_for_selector("body[data-ready=ops]", timeout=15000)
            text = page.inner_text("main")
            browser.close()
    finally:
        t.close()
    # THEN it drew the timeline, and what it shows is the file's bytes now, not the old tables
    assert "aten::onez" in text and "aten::ones" not in text


def test_a_stat_entry_naming_no_cache_is_dropped_and_the_bytes_decoded(tmp_path, _cache_dir, settled):
    # GIVEN a stat entry whose cache is gone, and another cache of the same size (so a lookup is tried)
    src, entry = cached_with_stat_entry(tmp_path, _cache_dir, settled)
    _rewrite_unseen(src, entry)
    for p in _cache_dir.glob(f"*{cache.SUFFIX}"):
        cache.discard(p)
    other = tmp_path / "other.json"
    other.write_bytes(raw_trace())
    profuse.load(other).close()
    cache.discard(cache.stat_path(_cache_dir, other))
    for p in _cache_dir.glob(f"{blake3.blake3(other.read_bytes()).hexdigest()}-*{cache.SUFFIX}"):
        p.rename(p.with_name(p.name.replace(blake3.blake3(other.read_bytes()).hexdigest(), "0" * 64)))
    # WHEN the trace is opened by its stat entry THEN it is decoded from its bytes now and the entry is gone
    with profuse.load(src, verify="behind") as t:
        assert not t.from_cache and t.source_check is None
        assert "aten::onez" in op_names(t)
    assert not entry.exists()


# --- the sampled blocks a stat entry records (trace/cache.py, sample_digest) -----------------------------

def test_the_sample_is_the_whole_file_when_it_fits_and_spread_blocks_otherwise(tmp_path):
    # GIVEN a file that fits in the sample and one four times its size
    small, big = tmp_path / "small", tmp_path / "big"
    small.write_bytes(b"abc" * 1000)
    block, n = cache.SAMPLE_BLOCK, cache.SAMPLE_BLOCKS
    data = os.urandom(4 * block * n + 12345)
    big.write_bytes(data)
    # THEN the small one's sample hashes its size and all its bytes
    assert cache.sample_digest(small, 3000) == blake3.blake3((3000).to_bytes(8, "little") + b"abc" * 1000).hexdigest()
    # and the big one's the blocks at evenly spread offsets, the first at 0 and the last ending at the end
    last = len(data) - block
    starts = [last * k // (n - 1) for k in range(n)]
    assert starts[0] == 0 and starts[-1] + block == len(data)
    want = blake3.blake3(len(data).to_bytes(8, "little") + b"".join(data[s:s + block] for s in starts)).hexdigest()
    assert cache.sample_digest(big, len(data)) == want


@pytest.mark.parametrize("where", ["start", "end"])
def test_a_rewrite_the_stat_cannot_see_is_caught_by_the_sampled_blocks(tmp_path, _cache_dir, monkeypatch, where):
    # GIVEN a trace over the sample's size (padded with whitespace, which JSON allows) and its stat entry
    monkeypatch.setattr(cache, "RACY_NS", SETTLE_NS)
    raw = raw_trace()
    src = tmp_path / "t.json"
    src.write_bytes(raw + b" " * (3 * cache.SAMPLE_BLOCK * cache.SAMPLE_BLOCKS))
    profuse.load(src).close()
    time.sleep(2 * SETTLE_NS / 1e9)
    profuse.load(src).close()
    entry = cache.stat_path(_cache_dir, src)
    assert cache.fingerprint_by_stat(_cache_dir, src) is not None
    # WHEN its bytes change in a sampled block (an op renamed in the first, a space in the last) and the
    # entry is made to record the new stat, as a rewrite the stat cannot see leaves it
    body = src.read_bytes()
    src.write_bytes(body.replace(OLD, NEW) if where == "start" else body[:-1] + b"\n")
    rec = json.loads(entry.read_text())
    st = src.stat()
    rec["stat"] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    entry.write_text(json.dumps(rec))
    # THEN the entry gives no fingerprint and is removed: the next load hashes the bytes
    assert cache.fingerprint_by_stat(_cache_dir, src) is None
    assert not entry.exists()
    with profuse.load(src, verify="behind") as t:
        assert t.source_check is None and ("aten::onez" in op_names(t)) == (where == "start")
