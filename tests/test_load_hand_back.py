"""After a big build, what DuckDB's allocator kept of the load's freed memory goes back to the system
(trace/build.py, ``_hand_back_freed``), so the analysis does not start on top of it.

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
import profuse
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
