"""The load's big numpy temporaries reuse heap memory instead of being faulted in anew (trace/build.py,
_GlibcHeap), the allocator is put back after the load, and the tables are the same either way.

glibc's heap is the whole process's: a big free hole that an earlier test's analysis left in it serves a
big block without a fault, whatever the thresholds (in the full suite this module's first check saw 0-3
faults, not 19,531). So the checks run together in a fresh interpreter of their own
(:func:`test_the_heap_checks_in_a_fresh_process`), and only there (``PROFUSE_FRESH_HEAP``).
"""
from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import profuse
from profuse.trace import build
from tests.conftest import TRACES


def _glibc() -> bool:
    try:
        return bool(sys.platform.startswith("linux") and ctypes.CDLL(None).gnu_get_libc_version)
    except (OSError, AttributeError):
        return False


pytestmark = pytest.mark.skipif(not _glibc(), reason="glibc's malloc only")
FRESH = os.environ.get("PROFUSE_FRESH_HEAP") == "1"   # this interpreter was started for the checks below
in_fresh_process = pytest.mark.skipif(not FRESH, reason="run by test_the_heap_checks_in_a_fresh_process")


@pytest.mark.skipif(FRESH, reason="the checks themselves run here")
def test_the_heap_checks_in_a_fresh_process() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:logging", __file__],
                          env={**os.environ, "PROFUSE_FRESH_HEAP": "1"}, cwd=Path(__file__).parents[1],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout, done.stdout[-2000:]

BIG = 10_000_000  # int64 elements: 80 MB, over glibc's largest dynamic mmap threshold (32 MiB)
PAGES = BIG * 8 // 4096


def _faults_of_second_block() -> int:
    """Minor page faults of this thread for a big block filled, after one of the same size was freed."""
    first = np.empty(BIG, dtype=np.int64)
    first.fill(1)
    del first
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    second = np.empty(BIG, dtype=np.int64)
    second.fill(2)
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
    del second
    return faults


@pytest.fixture(autouse=True)
def _fresh_heap() -> Iterator[None]:
    """As in a load: numpy's 2 MB pages off (a big block then faults 4 KB at a time), nothing held free."""
    heap = getattr(build, "_HEAP", None)
    with build._load_settings():
        if heap is not None:
            heap.trim()
        yield
    assert heap is None or heap._users == 0


@in_fresh_process
def test_big_blocks_are_reused_inside_and_faulted_anew_after() -> None:
    assert _faults_of_second_block() > PAGES // 2  # glibc's default: a fresh mapping per big block
    with build._HEAP.reusing():
        assert _faults_of_second_block() < PAGES // 10  # the freed block serves the next
    assert _faults_of_second_block() > PAGES // 2  # put back on leaving


@in_fresh_process
def test_put_back_only_when_the_last_user_leaves() -> None:
    entered, leave = threading.Event(), threading.Event()

    def other() -> None:  # another build's thread, still inside when this one leaves
        with build._HEAP.reusing():
            entered.set()
            leave.wait()

    with build._HEAP.reusing():
        thread = threading.Thread(target=other)
        thread.start()
        entered.wait()
    try:
        assert _faults_of_second_block() < PAGES // 10  # this thread left, the other did not: still reused
    finally:
        leave.set()
        thread.join()
    assert _faults_of_second_block() > PAGES // 2


def _correlate_faults(monkeypatch: pytest.MonkeyPatch, path: Path) -> tuple[int, dict[str, tuple[int, str]]]:
    """Faults of a big block made next to the load's correlation (as its temporaries are), and every
    table's row count and content hash."""
    real = build.correlated
    seen: list[int] = []

    def watched(events: object) -> object:
        out = real(events)  # type: ignore[arg-type]
        seen.append(_faults_of_second_block())
        return out

    monkeypatch.setattr(build, "correlated", watched)
    with profuse.load(path, cache=False) as trace:
        tables = [r[0] for r in trace.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'trace'").fetchall()]
        assert "events" in tables and "memory" in tables
        got = {t: tuple(trace.con.execute(f'SELECT count(*), sum(hash(x))::VARCHAR FROM "{t}" x').fetchone())
               for t in tables}
    monkeypatch.setattr(build, "correlated", real)
    return seen[0], got  # type: ignore[return-value]


@in_fresh_process
def test_the_load_reuses_and_its_tables_do_not_change(monkeypatch: pytest.MonkeyPatch) -> None:
    path = TRACES / "h100_bert_small.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is not here")
    reused, tables = _correlate_faults(monkeypatch, path)
    assert reused < PAGES // 10
    assert _faults_of_second_block() > PAGES // 2  # the load put the allocator back
    monkeypatch.setattr(build._HEAP, "_libc", None)  # the previous load: glibc's defaults throughout
    fresh, before = _correlate_faults(monkeypatch, path)
    assert fresh > PAGES // 2
    assert tables == before


@in_fresh_process
def test_the_reports_analysis_reuses_big_blocks_and_puts_the_allocator_back() -> None:
    """cli/report.py runs the analysis under bulk_settings: big temporaries from the heap there, and glibc's
    behaviour back once it ends (a big block faulted in anew again)."""
    with build.bulk_settings():
        assert build._HEAP._users == 1
        assert _faults_of_second_block() < PAGES // 10
    assert build._HEAP._users == 0
    assert _faults_of_second_block() > PAGES // 2


_ARENAS = r"""
import ctypes, sys
from profuse.trace.early import start_load
with start_load(sys.argv[1], cache=False)() as t:
    rows = t.con.execute("SELECT count(*) FROM events").fetchall()[0][0]
print(rows)
ctypes.CDLL(None).malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


@pytest.mark.skipif(FRESH, reason="its own fresh interpreter")
def test_a_load_started_on_a_thread_allocates_from_the_main_arena(tmp_path: Path) -> None:
    # GIVEN a trace loaded as a cold report loads it: on a thread started before any other (trace/early.py),
    # in a fresh interpreter
    import gzip

    path = tmp_path / "t.json"
    path.write_bytes(gzip.decompress((TRACES / "h100_bert_small.json.gz").read_bytes()))
    proc = subprocess.run([sys.executable, "-c", _ARENAS, str(path)], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent.parent)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # THEN it loaded, and its threads (the load's, DuckDB's, the scan's) allocated from glibc's main arena
    # alone, where the load's heap reuse holds (without one_arena: 12 arenas here)
    assert int(proc.stdout.split()[0]) > 0
    arenas = [line for line in proc.stderr.splitlines() if line.startswith("Arena ")]
    assert arenas == ["Arena 0:"], proc.stderr[-2000:]
