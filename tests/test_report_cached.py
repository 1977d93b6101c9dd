"""A cached ``profuse report``: the document comes back from the trace's derived entry, byte for byte what
the report computed from the trace gives, and is never reused for other bytes, options, side files or
another build of profuse."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import trace_path

from profuse.cli import main
from profuse.trace import cache

# a spread of devices and advice: CUDA with NCCL and memory, ROCm, MTIA, CPU only, a serving decode
TRACES = ["a100_nccl_rank0_of2.json.gz", "mi300_bert_small.json.gz", "mtia_inference.json.gz",
          "cpu_only_gloo_rank34.json.gz", "mi300_sglang_decode_cudagraph.json.gz", "h100_vit_falconsai.json.gz"]


@pytest.fixture(autouse=True)
def _always_cache(monkeypatch):
    monkeypatch.setenv("PROFUSE_CACHE_MIN_SECONDS", "0")  # small traces get their tables cached too


def report(capsys, *argv):
    assert main(["report", *map(str, argv)]) == 0
    out = capsys.readouterr()
    cache._finish_writes()  # the entry is written behind: wait, as interpreter exit does
    return out.out, out.err


def entries(folder):
    return sorted(folder.glob(f"*{cache.DERIVED_SUFFIX}"))


def uncached_header(text):
    """The console report of an uncached run differs in one place: it does not say "from cache"."""
    return text.replace(" · from cache\n", "\n", 1)


@pytest.mark.parametrize("name", TRACES)
def test_cached_report_is_the_computed_report_byte_for_byte(name, capsys, _cache_dir):
    src = trace_path(name)
    computed_json, _ = report(capsys, src, "--format", "json", "--no-cache")
    computed_table, _ = report(capsys, src, "--no-cache")
    assert entries(_cache_dir) == []  # --no-cache stores nothing
    assert report(capsys, src, "--format", "json")[0] == computed_json  # cold: computes and stores
    (entry,) = entries(_cache_dir)
    assert report(capsys, src, "--format", "json")[0] == computed_json  # from the entry
    cached_table, _ = report(capsys, src)  # rendered from the entry's document; the text is kept
    assert " · from cache\n" in cached_table
    assert uncached_header(cached_table) == computed_table
    assert len(entries(_cache_dir)) == 2  # the table and the JSON share one entry, plus this console's text
    assert report(capsys, src)[0] == cached_table  # the text kept
    assert entry in entries(_cache_dir)
    for p in entries(_cache_dir):
        if p != entry:
            p.unlink()
    # the same bytes through the tables (the entry removed): the table is the cached table exactly
    entry.unlink()
    assert report(capsys, src)[0] == cached_table
    assert uncached_header(report(capsys, src, "--top", "3")[0]) == report(capsys, src, "--top", "3", "--no-cache")[0]
    doc = json.loads(computed_json)
    assert doc["schema"] == "profuse.report/4" and doc["trace"]["path"] == str(src)


def test_a_cached_report_opens_no_tables_and_imports_neither_duckdb_nor_numpy(tmp_path, _cache_dir):
    src = trace_path("a100_nccl_rank0_of2.json.gz")
    code = ("import sys\nfrom profuse.cli import main\ncode = main(sys.argv[1:])\n"
            "print('IMPORTED', sorted(m for m in ('duckdb', 'numpy') if m in sys.modules), file=sys.stderr)\n"
            "print('PAYLOADS', 'profuse.payloads.report' in sys.modules, file=sys.stderr)\n"
            "print('MSGSPEC', 'msgspec' in sys.modules, file=sys.stderr)\n"
            "sys.exit(code)")
    env = {**os.environ, "PROFUSE_CACHE_DIR": str(_cache_dir)}

    def run(*argv):
        return subprocess.run([sys.executable, "-c", code, "report", str(src), *argv], capture_output=True,
                              text=True, env=env, check=True)

    cold = run("--format", "json")
    assert "IMPORTED ['duckdb', 'numpy']" in cold.stderr
    for argv in (("--format", "json"), (), (), ("--top", "5"), ("-o", str(tmp_path / "r.txt"))):
        warm = run(*argv)
        assert "IMPORTED []" in warm.stderr, argv
    warm = run("--format", "json")
    assert warm.stdout == cold.stdout
    assert "MSGSPEC False" in warm.stderr  # the entry holds the JSON as printed: no decoder needed
    assert "PAYLOADS False" in run().stderr  # the table printed before on this console: its text, no records
    assert "IMPORTED ['duckdb', 'numpy']" in run("--group-by", "kernel").stderr  # other options: computed


def test_options_that_change_the_document_have_their_own_entries(capsys, _cache_dir):
    src = trace_path("mi300_bert_small.json.gz")
    seen = set()
    for argv in ((), ("--group-by", "kernel"), ("--sort", "calls"), ("--no-advice",), ("--keep-metadata",)):
        cold, _ = report(capsys, src, "--format", "json", *argv)
        assert report(capsys, src, "--format", "json", *argv)[0] == cold
        assert report(capsys, src, "--format", "json", "--no-cache", *argv)[0] == cold
        seen.add(cold)
    assert len(entries(_cache_dir)) == 5
    assert len(seen) >= 4  # --keep-metadata may change nothing on a trace without secrets; the rest do


def test_a_damaged_entry_or_another_profuse_build_is_recomputed(capsys, _cache_dir, monkeypatch):
    src = trace_path("a100_nccl_rank0_of2.json.gz")
    computed, _ = report(capsys, src, "--format", "json", "--no-cache")
    report(capsys, src, "--format", "json")
    (entry,) = entries(_cache_dir)
    raw = bytearray(entry.read_bytes())
    raw[len(raw) // 2] ^= 0x20
    entry.write_bytes(bytes(raw))
    assert report(capsys, src, "--format", "json")[0] == computed
    assert entry.read_bytes() != bytes(raw)  # rewritten whole
    entry.write_bytes(entry.read_bytes()[: len(raw) // 3])  # cut short, as by a full disk
    assert report(capsys, src, "--format", "json")[0] == computed
    monkeypatch.setattr(cache, "_stamp", ["0.0.0+another-build"])  # profuse upgraded or edited
    assert report(capsys, src, "--format", "json")[0] == computed
    assert len(entries(_cache_dir)) == 2  # the old build's entry was not used: a new one was written


def test_an_entry_is_not_reused_after_a_side_file_changes_and_its_notes_come_back(tmp_path, capsys, _cache_dir):
    bundle = tmp_path / "prof"
    bundle.mkdir()
    shutil.copy(trace_path("mi300_bert_small.json.gz"), bundle / "trace.json.gz")
    (bundle / "meta.json").write_text('{"peaks": 3}')
    first_out, first_err = report(capsys, bundle, "--format", "json")
    assert "meta.json beside the trace is not a profuse bundle's" in first_err
    assert report(capsys, bundle, "--format", "json") == (first_out, first_err)  # notes printed again
    (bundle / "meta.json").write_text(json.dumps({"schema": "profuse.bundle/2", "command": ["python", "x.py"]}))
    out, err = report(capsys, bundle, "--format", "json")
    assert "not a profuse bundle" not in err
    assert (out, err) == report(capsys, bundle, "--format", "json", "--no-cache")
    assert len(entries(_cache_dir)) == 2
    # the path as given is in the report: the same bytes under another name have their own entry
    other = tmp_path / "elsewhere.json.gz"
    shutil.copy(bundle / "trace.json.gz", other)
    assert report(capsys, other, "--format", "json")[0] == report(capsys, other, "--format", "json",
                                                                  "--no-cache")[0]
    assert len(entries(_cache_dir)) == 3


def test_bad_input_is_reported_as_without_a_cache(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing.json.gz"), "--format", "json"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_text_kept_is_per_console_and_per_top(tmp_path, _cache_dir):
    """A coloured terminal's text is not a pipe's, nor is one --top another's."""
    src = trace_path("mi300_bert_small.json.gz")
    env = {**os.environ, "PROFUSE_CACHE_DIR": str(_cache_dir), "PROFUSE_CACHE_MIN_SECONDS": "0"}

    def run(*argv, **extra):
        return subprocess.run([sys.executable, "-m", "profuse", "report", str(src), *argv], capture_output=True,
                              text=True, env={**env, **extra}, check=True).stdout

    run("--format", "json")  # the entry
    plain = run()
    coloured = run(FORCE_COLOR="1")
    assert "\x1b[" in coloured and "\x1b[" not in plain
    assert run(FORCE_COLOR="1") == coloured and run() == plain  # each from its own text
    top3 = run("--top", "3")
    assert top3 != plain and run("--top", "3") == top3
    assert uncached_header(top3) == run("--top", "3", "--no-cache")
    out = tmp_path / "r.txt"
    run("-o", str(out))
    first = out.read_text()
    out.unlink()
    run("-o", str(out))
    assert out.read_text() == first == plain  # a file gets the pipe's plain text


def test_secrets_stay_redacted_from_the_cache_and_kept_only_with_keep_metadata(tmp_path, capsys):
    bundle = tmp_path / "prof"
    bundle.mkdir()
    shutil.copy(trace_path("a100_nccl_rank0_of2.json.gz"), bundle / "trace.json.gz")
    (bundle / "meta.json").write_text(json.dumps({"schema": "profuse.bundle/2", "status": "failed",
                                                  "error": "RuntimeError: login failed for --api-key=s3cr3tvalue"}))
    for fmt in (("--format", "json"), ()):
        uncached, _ = report(capsys, bundle, *fmt, "--no-cache")
        report(capsys, bundle, *fmt)
        for _ in range(2):  # from the entry, then (table) from the text kept
            out, _ = report(capsys, bundle, *fmt)
            assert "s3cr3tvalue" not in out and "--api-key=[redacted]" in out
            assert (out if fmt else uncached_header(out)) == uncached
        kept, _ = report(capsys, bundle, *fmt, "--keep-metadata")
        assert "s3cr3tvalue" in kept
        assert report(capsys, bundle, *fmt, "--keep-metadata")[0] == kept


def test_a_lazy_module_is_bound_in_place_on_first_use():
    import numpy

    from profuse.analysis import busy

    start, end = numpy.array([5, 0, 1]), numpy.array([6, 2, 3])
    assert busy.union_ns(start, end) == 4  # [0, 3) and [5, 6)
    assert busy.np is numpy


def test_after_a_profuse_version_change_the_entry_is_not_reused(_cache_dir):
    src = trace_path("a100_nccl_rank0_of2.json.gz")
    code = ("import sys, profuse\nprofuse.__version__ = sys.argv[1]\nfrom profuse.cli import main\n"
            "code = main(['report', sys.argv[2], '--format', 'json'])\n"
            "print('TABLES', 'duckdb' in sys.modules, file=sys.stderr)\nsys.exit(code)")
    env = {**os.environ, "PROFUSE_CACHE_DIR": str(_cache_dir)}

    def run(version):
        out = subprocess.run([sys.executable, "-c", code, version, str(src)], capture_output=True, text=True,
                             env=env, check=True)
        return out.stdout, "TABLES True" in out.stderr

    old, computed = run("0.1.0")
    assert computed and run("0.1.0") == (old, False)  # the entry, then from it
    assert run("0.2.0") == (old, True)  # the same report, computed again: the old build's entry is not read
    assert run("0.2.0") == (old, False)
    assert len(entries(_cache_dir)) == 2


def test_a_cache_folder_beside_or_at_the_trace_does_not_stale_its_own_entry(tmp_path, capsys):
    """Writing the cache changes the trace's folder when the cache is there: that is no side file."""
    shutil.copy(trace_path("a100_nccl_rank0_of2.json.gz"), tmp_path / "t.json.gz")
    for folder in (tmp_path / "cache", tmp_path):
        computed, _ = report(capsys, tmp_path / "t.json.gz", "--format", "json", "--cache-dir", folder)
        before = len(entries(folder))
        for _ in range(2):
            assert report(capsys, tmp_path / "t.json.gz", "--format", "json", "--cache-dir", folder)[0] == computed
        assert len(entries(folder)) == before  # read back, not written again
    (tmp_path / "artifacts" / "inductor").mkdir(parents=True)
    (tmp_path / "artifacts" / "inductor" / "k.py").write_text("def triton_poi_fused_add_0(): pass\n")
    report(capsys, tmp_path / "t.json.gz", "--format", "json", "--cache-dir", tmp_path)
    assert len(entries(tmp_path)) == before + 1  # a new inductor artifact is a side file: a new entry


def test_snapshots_and_rank_folders_are_never_answered_from_an_entry(tmp_path, capsys):
    """The entry is looked for first: whatever is not one trace finds none and goes its own way."""
    runs = tmp_path / "run"
    runs.mkdir()
    for i, name in enumerate(("compare_base.json.gz", "compare_test.json.gz")):
        shutil.copy(trace_path(name), runs / f"rank{i}.json.gz")
        report(capsys, runs / f"rank{i}.json.gz", "--format", "json")  # each rank has an entry of its own
    out, _ = report(capsys, runs, "--format", "json")
    assert json.loads(out)["schema"].startswith("profuse.ranks/")
    glob_out, _ = report(capsys, f"{runs}/rank*.json.gz", "--format", "json")
    assert json.loads(glob_out)["schema"].startswith("profuse.ranks/")


# --- found by the trace's stat entry, its bytes hashed behind (trace/cache.py) --------------------------

SETTLE_NS = 50_000_000


def _settled_report(tmp_path, capsys, monkeypatch, folder):
    """A trace file whose JSON report is cached, then reported again once settled: its stat entry written."""
    import gzip

    monkeypatch.setattr(cache, "RACY_NS", SETTLE_NS)  # files count as settled 50 ms after their last change
    src = tmp_path / "t.json"
    src.write_bytes(gzip.decompress(trace_path("a100_event_sync.json.gz").read_bytes()))
    cold, _ = report(capsys, src, "--format", "json")
    import time

    time.sleep(2 * SETTLE_NS / 1e9)
    assert report(capsys, src, "--format", "json")[0] == cold  # hashed: finds the entry, records the stat entry
    assert cache.stat_path(folder, src).exists()
    return src, cold


def test_a_cached_report_finds_its_entry_by_stat_and_hashes_only_behind(tmp_path, capsys, monkeypatch, _cache_dir):
    src, cold = _settled_report(tmp_path, capsys, monkeypatch, _cache_dir)
    # GIVEN a hash before the entry is found fails the test, and the hashes taken are counted by thread
    def no_hash_first(*a, **k):
        raise AssertionError("the trace was hashed before its entry was found")

    threads = []
    digest = cache.file_digest

    def counted(path, **k):
        import threading

        threads.append(threading.current_thread().name)
        return digest(path, **k)

    monkeypatch.setattr(cache, "fingerprint", no_hash_first)
    monkeypatch.setattr(cache, "file_digest", counted)
    # WHEN the report is asked again, as JSON and as a table (twice: rendered, then the text kept)
    assert report(capsys, src, "--format", "json")[0] == cold
    table, _ = report(capsys, src)
    assert report(capsys, src)[0] == table and " · from cache\n" in table
    # THEN each found its entry by the stat entry, and the bytes were hashed once per run, behind, on a thread
    assert threads == ["profuse-source-check"] * 3


def test_a_cached_report_of_a_big_trace_trusts_its_stat_entry_and_hashes_nothing(tmp_path, capsys, monkeypatch,
                                                                                  _cache_dir):
    src, cold = _settled_report(tmp_path, capsys, monkeypatch, _cache_dir)
    # GIVEN the trace counts as big (over the size a cached report hashes behind) and any hash is counted
    monkeypatch.setattr(cache, "FULL_CHECK_BYTES", src.stat().st_size - 1)
    hashed = []
    digest = cache.file_digest

    def counted(path, **k):
        hashed.append(path)
        return digest(path, **k)

    monkeypatch.setattr(cache, "file_digest", counted)
    # WHEN its report is asked again, as JSON and as a table (rendered, then the text kept)
    assert report(capsys, src, "--format", "json")[0] == cold
    table, _ = report(capsys, src)
    assert report(capsys, src)[0] == table and " · from cache\n" in table
    # THEN each was answered from the entry its stat entry names, and no run hashed the trace
    assert hashed == []


def test_a_cached_report_never_prints_the_old_bytes_report(tmp_path, capsys, monkeypatch, _cache_dir):
    src, cold = _settled_report(tmp_path, capsys, monkeypatch, _cache_dir)
    entry = cache.stat_path(_cache_dir, src)
    # GIVEN the trace's bytes changed (the same size) where its stat entry cannot see it (a rewrite in the
    # clock tick of the hash, or a file system that keeps no ctime): the entry records the new stat
    old, new = b'"name": "aten::ones"', b'"name": "aten::onez"'
    src.write_bytes(src.read_bytes().replace(old, new))
    rec = json.loads(entry.read_text())
    st = src.stat()
    rec["stat"] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    entry.write_text(json.dumps(rec))
    # WHEN the report is asked for, as JSON and as a table
    got, _ = report(capsys, src, "--format", "json")
    # THEN it is the new bytes' report, computed (the old one is never printed), and the stat entry is gone
    assert got != cold and "aten::onez" in got and "aten::ones\"" not in got
    assert got == report(capsys, src, "--format", "json", "--no-cache")[0]
    assert not entry.exists() or json.loads(entry.read_text())["fingerprint"] != rec["fingerprint"]
    entry.write_text(json.dumps(rec))  # the same blind spot again, for the table
    table, _ = report(capsys, src)
    assert "aten::onez" in table and "aten::ones " not in table


def test_timings_name_each_phase_and_add_up(capsys, _cache_dir):
    # GIVEN a real trace reported with --timings
    src = trace_path("h100_bert_small.json.gz")
    out, err = report(capsys, src, "--format", "json", "--no-cache", "--timings")
    # THEN the document is the report's, and stderr holds one line per phase: the load, the analyses
    # (each inner phase under its parent), the view, the rendering, and a total no phase exceeds
    assert json.loads(out)["schema"] == "profuse.report/4"
    rows = {}
    for line in err.splitlines()[1:]:
        name, secs = line.rsplit(maxsplit=1)
        rows[(len(name) - len(name.lstrip()), name.strip())] = float(secs)
    assert {"load", "analyse", "view", "render", "total"} <= {n for _, n in rows}
    assert any(n == "fusion candidates" and depth > 2 for depth, n in rows)
    # AND each analysis of the report is named under "analyse", those run on the other thread marked so
    inner = {n for depth, n in rows if depth > 2}
    assert {"diagnosis", "roofline", "call tree [beside]", "summary [beside]", "op table [beside]", "memory [beside]",
            "health [beside]", "device events [beside]"} <= inner
    total = rows[(2, "total")]
    assert all(0 <= s <= total + 1e-3 for s in rows.values())
    top = sum(s for (depth, n), s in rows.items() if depth == 2 and n != "total")
    assert top <= total + 1e-3 and top >= 0.5 * total


def test_the_progress_line_is_drawn_on_a_terminal_only_and_erased():
    import io
    import os
    import time

    from profuse import _progress

    # GIVEN a command that runs past the line's 2 s, on a pipe and on a terminal (a pseudo-terminal)
    master, slave = os.openpty()
    tty = os.fdopen(slave, "w")
    pipe = io.StringIO()
    try:
        for stream in (pipe, tty):
            with _progress.tracking("report t.json", stream=stream):
                with _progress.phase("analyse"), _progress.phase("fusion candidates"):
                    time.sleep(_progress.LINE_AFTER_S + 4 * _progress.LINE_EVERY_S)
                with _progress.phase("render", quiet=True):
                    time.sleep(3 * _progress.LINE_EVERY_S)  # the report's own output: no line meanwhile
        tty.flush()
        drawn = os.read(master, 65536).decode()
    finally:
        tty.close()
        os.close(master)
    # THEN the pipe got nothing; the terminal got the line naming the phase, rewritten in place, and erased
    assert pipe.getvalue() == ""
    assert "profuse: report t.json: analyse: fusion candidates (2 s)" in drawn
    assert drawn.endswith("\r\x1b[2K") and "render" not in drawn


def test_a_cached_json_report_prints_what_the_output_boundary_passed_on_before(capsys, monkeypatch, _cache_dir):
    # GIVEN a real trace whose JSON report is computed, then printed from its entry through the output
    # boundary once (which keeps what the boundary passed on), with the boundary's redaction counted
    from profuse import redact
    from profuse.cli import report_cached

    monkeypatch.setattr(report_cached, "PRINTED_MIN", 0)  # this trace's document counts as big
    src = trace_path("h100_bert_small.json.gz")
    computed, _ = report(capsys, src, "--format", "json")
    first, _ = report(capsys, src, "--format", "json")
    scanned: list[int] = []
    whole_text = redact.redact_text

    def counted(text):
        scanned.append(len(text))
        return whole_text(text)

    monkeypatch.setattr(redact, "redact_text", counted)
    # WHEN it is asked for again
    again, _ = report(capsys, src, "--format", "json")
    # THEN every run printed the same bytes, and the last wrote the kept text without scanning the
    # document again (only short lines: the notes, if any)
    assert computed == first == again and len(again) > 10_000
    assert all(n < 1000 for n in scanned), scanned
    assert len(entries(_cache_dir)) == 2  # the document, and the text the boundary passed on
    # AND with --keep-metadata (no boundary) the document is the entry's own, as before
    kept, _ = report(capsys, src, "--format", "json", "--keep-metadata")
    assert report(capsys, src, "--format", "json", "--keep-metadata")[0] == kept
