"""A load started early on a thread (trace/early.py): the same trace and report as a load in the caller's
thread, errors raised in the caller, and no thread where the load could behave differently there."""
from __future__ import annotations

import gzip
import json
import pickle
import threading
from pathlib import Path

import pytest
from conftest import trace_path

import profuse
from profuse.cli import main
from profuse.errors import TraceError
from profuse.trace import _native, early

pytestmark = pytest.mark.skipif(not _native.available(), reason="compiled scanner not built (pure-Python install)")


def _loading_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "profuse-load"]


def _summary(t: profuse.Trace) -> tuple:
    return t.con.execute("SELECT count(*), sum(dur), sum(hash(name)) FROM events").fetchone()


def test_early_load_runs_on_a_thread_and_gives_the_same_tables(tmp_path: Path) -> None:
    # GIVEN the big V100 trace unpacked (its load takes a while)
    src = tmp_path / "v100.json"
    src.write_bytes(gzip.decompress(trace_path("v100_rank1_of2_216k_events.json.gz").read_bytes()))
    # WHEN its load is started early
    finish = early.start_load(str(src), cache=False)
    running = _loading_threads()
    with finish() as t:
        got = _summary(t)
    # THEN it ran on the loading thread, which is gone after, and the tables are a plain load's
    assert running and not any(th.is_alive() for th in running)
    with profuse.load(src, cache=False) as plain:
        assert got == _summary(plain)
    events = json.loads(src.read_bytes())["traceEvents"]
    assert got[0] >= sum(1 for e in events if e.get("ph") == "X")


def test_an_error_in_the_early_load_is_raised_by_the_caller(tmp_path: Path) -> None:
    bad = tmp_path / "cut.json"
    bad.write_bytes(gzip.decompress(trace_path("h100_bert_small.json.gz").read_bytes())[:50_000])
    finish = early.start_load(str(bad), cache=False)
    with pytest.raises(TraceError) as err:
        finish()
    assert str(bad) in str(err.value)


@pytest.mark.parametrize("case", ["lenient", "reference decoder", "folder", "pickle named .json", "other name"])
def test_no_early_thread_where_the_load_could_differ(case: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "t.json"
    src.write_bytes(gzip.decompress(trace_path("h100_bert_small.json.gz").read_bytes()))
    options: dict = {"cache": False}
    path = str(src)
    if case == "lenient":
        options["lenient"] = True
    elif case == "reference decoder":
        monkeypatch.setenv("PROFUSE_SCANNER", "0")
    elif case == "folder":
        (tmp_path / "trace.json").write_bytes(src.read_bytes())
        path = str(tmp_path)
    elif case == "pickle named .json":
        src.write_bytes(pickle.dumps({"segments": []}))
    else:
        path = str(src.rename(tmp_path / "t.txt"))
    assert not early._may_start_early(path, options)
    finish = early.start_load(path, **options)
    assert _loading_threads() == []
    if case == "pickle named .json":
        with pytest.raises(TraceError):
            finish()
        return
    with finish() as t:
        assert _summary(t)[0] > 0


def test_report_through_the_early_load_equals_the_plain_load(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "vit.json"
    src.write_bytes(gzip.decompress(trace_path("h100_vit_falconsai.json.gz").read_bytes()))
    out = []
    for may in (True, False):
        monkeypatch.setattr(early, "_may_start_early", lambda p, o, may=may: may)
        assert main(["report", str(src), "--format", "json", "--no-cache"]) == 0
        out.append(json.loads(capsys.readouterr().out))
    assert out[0] == out[1] and out[0]["ops"]


def test_the_load_takes_the_bytes_and_scan_read_ahead_on_its_thread(tmp_path: Path) -> None:
    # GIVEN a trace read and scanned ahead on this thread (what the loading thread does first)
    src = tmp_path / "bert.json"
    src.write_bytes(gzip.decompress(trace_path("h100_bert_small.json.gz").read_bytes()))
    early._read_ahead(str(src), {"cache": False})
    assert early._ahead.read[0] == str(src) and early._ahead.scan[1][0] is not None
    # WHEN it is loaded on the same thread THEN the load took both, and its tables are a plain load's
    with profuse.load(src, cache=False) as t:
        got = _summary(t)
    assert not hasattr(early._ahead, "read") and not hasattr(early._ahead, "scan")
    with profuse.load(src, cache=False) as plain:
        assert got == _summary(plain)


def test_nothing_is_read_ahead_where_a_cache_may_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROFUSE_CACHE_MIN_SECONDS", "0")
    src = tmp_path / "bert.json"
    src.write_bytes(gzip.decompress(trace_path("h100_bert_small.json.gz").read_bytes()))
    cache = tmp_path / "cache"
    with profuse.load(src, cache_dir=cache) as first:
        first.wait_for_cache()
    early._read_ahead(str(src), {"cache": True, "cache_dir": cache})
    assert not hasattr(early._ahead, "read")
    finish = early.start_load(str(src), cache_dir=cache)
    with finish() as again:
        assert again.from_cache


def test_bytes_read_ahead_for_another_file_are_not_taken(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_bytes(gzip.decompress(trace_path("h100_bert_small.json.gz").read_bytes()))
    b.write_bytes(gzip.decompress(trace_path("h100_vit_falconsai.json.gz").read_bytes()))
    early._read_ahead(str(a), {"cache": False})
    try:
        with profuse.load(b, cache=False) as t, profuse.load(b, cache=False) as again:
            assert _summary(t) == _summary(again)
        assert early.prefetched(str(a)) is not None  # still there: b's load did not take it
    finally:
        early._ahead.__dict__.clear()
