"""A mapped trace stays out of the load's memory once read: the scan and the hash let its pages go behind them.

The trace file is mapped (trace/_decode.py, _map): its pages are the page cache's, but while mapped and
touched they count in the process's resident set (RssFile). The scanner (trace/_scan.c, ``release``) and
the hash (trace/_native.py, digest_releasing) give them back a window at a time, so what stays resident
of a ~200 MB trace after both is a few windows, not the file. Measured in a fresh process (no other
test's pages), on a generated trace; the columns and the digest must be exactly those of the bytes read.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profuse.trace import _native, compiled
from profuse.trace.cache import RACY_NS, bytes_digest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not _native.available()
                                or not compiled.enabled(), reason="mapping and madvise: Linux with the extension")

TARGET_BYTES = 200 << 20


def _event(i: int) -> str:
    ts = 1_000_000 + i * 7
    if i % 3 == 0:
        return (f'{{"ph": "X", "cat": "python_function", "name": "nn.Module: Block_{i % 50}", "pid": 11, '
                f'"tid": 11, "ts": {ts}, "dur": 5, "args": {{"Python id": {i}, "Python parent id": {i // 2}}}}}')
    return (f'{{"ph": "X", "cat": "cpu_op", "name": "aten::op_{i % 97}", "pid": 11, "tid": {11 + i % 3}, '
            f'"ts": {ts}, "dur": 3, "args": {{"External id": {i}, "Sequence number": {i}, '
            f'"Input Dims": [[{i % 64}, 128], []], "Input type": ["float", ""]}}}}')


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ~200 MB trace, old enough (RACY_NS) to be mapped rather than read."""
    path = tmp_path_factory.mktemp("loadmem") / "big.json"
    with open(path, "w") as fh:
        fh.write('{"schemaVersion": 1, "traceEvents": [\n')
        i, written = 0, 0
        while written < TARGET_BYTES:
            block = ",\n".join(_event(j) for j in range(i, i + 20_000))
            fh.write(("" if i == 0 else ",\n") + block)
            written += len(block) + 2
            i += 20_000
        fh.write('\n], "traceName": "loadmem", "displayTimeUnit": "ms"}\n')
    time.sleep(RACY_NS / 1e9 + 0.2)  # settled: the load maps it (trace/_accel.c, map_file)
    return path


_PROBE = r"""
import json, sys
import numpy as np
from profuse.trace import _decode, _native

def rss_file():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) << 10 for line in fh if line.startswith("RssFile:"))

path = sys.argv[1]
before = rss_file()
data, _ = _decode.read_trace(path, map_ok=True)
out = {"mapped": _decode.is_mapped(data), "size": len(data)}
raw = _native.raw_scan_document(data, threads=2)
out["after_scan"] = rss_file() - before
out["digest"] = _native.digest_releasing(data)
out["after_hash"] = rss_file() - before
cols, top = _native.scan_document(data, raw=raw)
copy = _decode.as_bytes(data)  # the same bytes, read into memory: scanned without letting anything go
again, top_again = _native.scan_document(copy, threads=2)
out["same_columns"] = cols.n == again.n and all(
    np.array_equal(cols.take(k), again.take(k)) for k in ("ts", "dur", "name", "thread_key", "external_id", "seq"))
out["same_names"] = cols.names == again.names
out["same_top"] = {k: bytes(v) for k, v in top.items()} == {k: bytes(v) for k, v in top_again.items()}
out["events"] = cols.n
print(json.dumps(out))
"""


def test_scan_and_hash_leave_the_mapping_out_of_memory(big_trace: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    r = subprocess.run([sys.executable, "-c", _PROBE, str(big_trace)], capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    size = big_trace.stat().st_size
    assert out["mapped"] and out["size"] == size >= TARGET_BYTES
    bound = size // 4  # a few 16 MB windows; the whole mapping (the size itself) before the pages were let go
    assert out["after_scan"] < bound, f"{out['after_scan']:,} bytes of the {size:,}-byte mapping resident after the scan"
    assert out["after_hash"] < bound, f"{out['after_hash']:,} bytes of the {size:,}-byte mapping resident after the hash"
    assert out["digest"] == [bytes_digest(big_trace.read_bytes()), size]  # the cache's key: every byte hashed
    assert out["same_columns"] and out["same_names"] and out["same_top"]
    lines = big_trace.read_text().count('"ph": "X"')
    assert out["events"] == lines


def test_release_refuses_a_span_outside_the_buffer() -> None:
    buf = bytes(8192)
    with pytest.raises(ValueError):
        _native._scan.release(buf, 0, len(buf) + 1)
    with pytest.raises(ValueError):
        _native._scan.release(buf, 10, 5)


def test_bytes_read_are_never_released() -> None:
    """Read bytes (not a mapping) are hashed whole by the caller: madvise would zero them."""
    assert _native.digest_releasing(b"[]" * 10) is None
    assert not _native._releasable(bytearray(100))
