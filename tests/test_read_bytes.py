"""Reading a trace's bytes: plain JSON read in place, gzip through ISA-L when installed, else zlib.

Both inflaters must give exactly the bytes Python's own gzip module gives, and refuse the same
damaged files.
"""
from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest
from conftest import ALL_TRACES, trace_id

from profuse.errors import TraceError
from profuse.trace import _decode

GZ = [p for p in ALL_TRACES if p.name.endswith(".gz")][:3]


def _without_isal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "isal", None)  # `import isal` then raises ImportError


@pytest.mark.parametrize("isal", [True, False], ids=["isal", "zlib"])
@pytest.mark.parametrize("path", GZ, ids=trace_id)
def test_gzip_inflates_to_the_bytes_gzip_gives(path: Path, isal: bool, monkeypatch: pytest.MonkeyPatch):
    if isal:
        pytest.importorskip("isal")
    else:
        _without_isal(monkeypatch)
    assert bytes(_decode.read_bytes(str(path))) == gzip.decompress(path.read_bytes())


@pytest.mark.parametrize("isal", [True, False], ids=["isal", "zlib"])
def test_truncated_and_corrupt_gzip_are_refused(tmp_path: Path, isal: bool, monkeypatch: pytest.MonkeyPatch):
    if isal:
        pytest.importorskip("isal")
    else:
        _without_isal(monkeypatch)
    whole = gzip.compress(b'{"traceEvents": []}' * 1000)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(TraceError, match="truncated"):
        _decode.read_bytes(str(cut))
    flipped = bytearray(whole)
    flipped[len(whole) // 2] ^= 0xFF
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(bytes(flipped))
    with pytest.raises(TraceError, match=r"gzip data is (truncated|corrupt)"):
        _decode.read_bytes(str(bad))


def test_plain_json_is_read_whole(tmp_path: Path):
    # GIVEN a plain JSON trace (a shared trace, decompressed)
    raw = gzip.decompress(ALL_TRACES[0].read_bytes())
    path = tmp_path / "t.json"
    path.write_bytes(raw)
    assert bytes(_decode.read_bytes(str(path))) == raw
    # a one-byte file is read too (shorter than the two bytes looked at for gzip's magic)
    one = tmp_path / "one.json"
    one.write_bytes(b"[")
    assert bytes(_decode.read_bytes(str(one))) == b"["


def test_the_default_size_limit_is_half_the_machine_s_memory(monkeypatch):
    # a 10 GB trace loads on a 24 GB machine without a variable (issue 44); at least 2 GiB anywhere
    import os

    from profuse.trace._decode import max_trace_bytes

    monkeypatch.delenv("PROFUSE_MAX_TRACE_BYTES", raising=False)
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert max_trace_bytes() == max(2 << 30, physical // 2)
    monkeypatch.setenv("PROFUSE_MAX_TRACE_BYTES", "1000")
    assert max_trace_bytes() == 1000
