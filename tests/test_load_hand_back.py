"""After a big build, what DuckDB's allocator kept of the load's freed memory goes back to the system
(trace/build.py, ``_hand_back_freed``), so the analysis does not start on top of it; unless the analysis
follows in the same process (``_glibc.keeping``, a report), which reuses those pages instead of faulting
its own in again.

Each check runs in a fresh process: its resident set is then its own, not what earlier tests left.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import trace_path

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/statm: Linux")

_FREED = r"""
import json
import duckdb
from profuse.trace import build

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

con = duckdb.connect()
threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
con.execute("CREATE TABLE t AS SELECT range AS a, range * 2 AS b, range % 7 AS c FROM range(20000000)")
con.execute("DROP TABLE t")
held = rss()
build._hand_back_freed(con)
print(json.dumps({"held": held, "after": rss(), "threads": [threads,
                  con.execute("SELECT current_setting('threads')").fetchone()[0]]}))
"""


def _run(code: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_freed_table_memory_leaves_the_process_and_the_thread_count_stays():
    """A 20 M-row table (480 MB) made and dropped: DuckDB keeps most of its pages until the hand-back."""
    got = _run(_FREED)
    assert got["threads"][0] == got["threads"][1]
    assert got["held"] - got["after"] > 200e6, got


_WIRED = r"""
import json, sys
from profuse.trace import build
calls = []
real = build._hand_back_freed
build._hand_back_freed = lambda con: (calls.append(1), real(con))
build.COMPRESS_MIN_EVENTS = int(sys.argv[2])
import contextlib
import profuse
from profuse.trace import _glibc
with _glibc.keeping() if sys.argv[3:] == ["follows"] else contextlib.nullcontext():
    with profuse.load(sys.argv[1], cache=False) as trace:
        n = trace.con.execute("SELECT count(*) FROM events").fetchone()[0]
print(json.dumps({"calls": len(calls), "events": n}))
"""


def test_a_big_build_hands_back_and_a_small_one_does_not():
    """The hand-back follows the build's size: from COMPRESS_MIN_EVENTS events on (lowered here), not below."""
    path: Path = trace_path("h100_bert_small.json.gz")
    big = _run(_WIRED, str(path), "10")
    assert big["events"] >= 10 and big["calls"] == 1
    assert _run(_WIRED, str(path), str(10**9))["calls"] == 0


def test_a_big_build_keeps_its_freed_memory_where_the_analysis_follows():
    """Inside ``_glibc.keeping`` (a report) the big build does not hand back: the analysis reuses the pages."""
    path: Path = trace_path("h100_bert_small.json.gz")
    kept = _run(_WIRED, str(path), "10", "follows")
    assert kept["events"] >= 10 and kept["calls"] == 0


_HEAP = r"""
import json, sys
import numpy as np
from profuse.trace import _glibc, build

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

def freed_after_a_pass():
    # a pass's big temporaries come from glibc's heap (reusing); the last one freed after the pass ends
    with build._HEAP.reusing():
        a = np.ones(40_000_000)         # 320 MB on the heap, every page touched
    before = rss()
    del a
    return before - rss()

out = {}
if sys.argv[1] == "follows":
    with _glibc.keeping():
        out["inside"] = freed_after_a_pass()
        with build._HEAP.reusing():     # the analysis's temporaries reuse those pages: none faulted in anew
            before = rss()
            b = np.ones(40_000_000)
            out["reused_growth"] = rss() - before
            del b
    # after the block: the thresholds of a numpy process, so the next big block freed at the top goes back
    out["after_block"] = freed_after_a_pass()
else:
    out["alone"] = freed_after_a_pass()
print(json.dumps(out))
"""


@pytest.mark.skipif(not __import__("profuse.trace._glibc", fromlist=["libc"]).libc(), reason="glibc's malloc")
def test_the_heap_keeps_a_pass_s_freed_blocks_only_where_the_analysis_follows():
    """Outside ``_glibc.keeping`` a big block freed after a pass goes back to the system at once (glibc's trim
    threshold, as a numpy process has it); inside, it stays on the heap and the next one of its size reuses its
    pages; after the block, such a block goes back at once again."""
    alone = _run(_HEAP, "alone")
    assert alone["alone"] > 250e6, alone
    kept = _run(_HEAP, "follows")
    assert kept["inside"] < 50e6, kept
    assert kept["reused_growth"] < 50e6, kept
    assert kept["after_block"] > 250e6, kept


_REPORT = r"""
import json, sys
from profuse.trace import build
calls = []
real = build._hand_back_freed
build._hand_back_freed = lambda con: (calls.append(1), real(con))
build.COMPRESS_MIN_EVENTS = 10
from profuse.cli import main
code = main(["report", sys.argv[1], "--format", "json", "--no-cache", "-o", sys.argv[2]])
print(json.dumps({"calls": len(calls), "code": code}))
"""


def test_a_report_keeps_what_its_big_build_freed(tmp_path: Path):
    """``profuse report`` loads inside ``_glibc.keeping``: its big build (the threshold lowered) hands nothing back."""
    got = _run(_REPORT, str(trace_path("h100_bert_small.json.gz")), str(tmp_path / "r.json"))
    assert got == {"calls": 0, "code": 0}
    assert json.loads((tmp_path / "r.json").read_text())["ops"]
