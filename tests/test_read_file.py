"""The parallel read of a plain trace file (trace/_accel.c's read_file, used by _decode.read_trace)
against Python's own read of the same file: the same bytes, for every split into threads, for a file
that ends early or grew since its size was taken, and a one-line error for a failed read."""
from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
from conftest import trace_path

import profuse
from profuse.errors import TraceError
from profuse.trace import _decode, _parallel, compiled

pytestmark = pytest.mark.skipif(compiled.accel is None, reason="the compiled extension is not built")


@pytest.fixture(scope="module")
def plain_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real trace of more than PARALLEL_READ_MIN bytes as plain JSON (the V100 one, 54 MB)."""
    out = tmp_path_factory.mktemp("read") / "v100.json"
    with gzip.open(trace_path("v100_rank1_of2_216k_events.json.gz"), "rb") as src:
        out.write_bytes(src.read())
    assert out.stat().st_size > _decode.PARALLEL_READ_MIN
    return out


def _read_file(path: Path, n: int, parts: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        data: bytes = compiled.accel.read_file(fd, n, parts)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # the file offset is left where it was
        return data
    finally:
        os.close(fd)


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 7, 16, 40])
def test_every_split_reads_the_bytes_python_reads(plain_trace: Path, parts: int) -> None:
    want = plain_trace.read_bytes()
    size = len(want)
    assert _read_file(plain_trace, size, parts) == want
    assert _read_file(plain_trace, size + 1, parts) == want  # asked for more: the file's end ends it
    assert _read_file(plain_trace, size + 10_000_000, parts) == want  # the end in an early share
    assert _read_file(plain_trace, 12_345_678, parts) == want[:12_345_678]  # not a whole number of pages
    assert _read_file(plain_trace, 0, parts) == b""


def test_small_and_odd_sizes(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    for size in (0, 1, 4095, 4096, 4097, 3 * 4096 + 5):
        body = bytes((i * 7 + size) % 251 for i in range(size))
        path.write_bytes(body)
        for parts in (1, 2, 4):
            assert _read_file(path, size + 1, parts) == body, (size, parts)


def test_a_failed_read_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        compiled.accel.read_file(10_000, 100, 2)  # no such descriptor
    fd = os.open(tmp_path, os.O_RDONLY)  # a folder: read() fails with EISDIR
    try:
        with pytest.raises(OSError):
            compiled.accel.read_file(fd, 100, 2)
    finally:
        os.close(fd)
    with pytest.raises(ValueError):
        compiled.accel.read_file(0, -1, 2)


def test_read_trace_takes_the_parallel_read_and_matches_the_plain_one(plain_trace: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = _decode._read_parallel

    def spy(fh: object, n: int) -> bytes | None:
        out = real(fh, n)  # type: ignore[arg-type]
        calls.append(-1 if out is None else len(out))
        return out

    monkeypatch.setattr(_decode, "_read_parallel", spy)
    fast, raw = _decode.read_trace(str(plain_trace))
    assert raw is None
    want = plain_trace.read_bytes()
    assert fast == want
    if _parallel.cores_wanted() > 1:
        assert calls == [len(want)]  # taken where a load may use more than one core
    monkeypatch.setattr(_decode, "PARALLEL_READ_MIN", 1 << 62)
    assert _decode.read_trace(str(plain_trace))[0] == want


def test_one_worker_reads_in_one_piece(plain_trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PROFUSE_WORKERS=1 (what a rank's map task sets, one task per core) keeps the read on one thread."""
    monkeypatch.setenv("PROFUSE_WORKERS", "1")
    with open(plain_trace, "rb") as fh:
        assert _decode._read_parallel(fh, plain_trace.stat().st_size + 1) is None
    assert _decode.read_trace(str(plain_trace))[0] == plain_trace.read_bytes()
    monkeypatch.setenv("PROFUSE_WORKERS", "2")
    with open(plain_trace, "rb") as fh:
        assert _decode._read_parallel(fh, plain_trace.stat().st_size + 1) == plain_trace.read_bytes()


@pytest.mark.parametrize("parallel", [True, False])
def test_a_file_that_grew_since_its_size_was_taken_is_read_whole(plain_trace: Path, parallel: bool,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """_read_rest told a size smaller than the file's (as when the file grows after fstat): the spare
    byte shows it, and the rest is read after it, up to the limit."""
    if not parallel:
        monkeypatch.setattr(_decode, "PARALLEL_READ_MIN", 1 << 62)
    want = plain_trace.read_bytes()
    with open(plain_trace, "rb") as fh:
        fh.read(2)  # as read_trace has looked at the head
        assert _decode._read_rest(fh, len(want) - 5000, len(want) + 10) == want
    with open(plain_trace, "rb") as fh:
        limit = len(want) - 100
        assert _decode._read_rest(fh, limit - 5000, limit) == want[:limit + 1]  # one past the limit: too big


def test_a_load_of_the_parallel_read_gives_the_tables_of_the_plain_read(plain_trace: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def table(tr: profuse.Trace) -> list[tuple[object, ...]]:
        return tr.sql_rows("SELECT count(*), sum(dur), sum(hash(name)), min(ts), max(ts + dur) FROM events")[1]

    with profuse.load(plain_trace, cache=False) as fast:
        got = table(fast)
    monkeypatch.setattr(_decode, "PARALLEL_READ_MIN", 1 << 62)
    with profuse.load(plain_trace, cache=False) as plain:
        assert table(plain) == got


def test_a_file_that_is_only_whitespace_is_still_empty(tmp_path: Path) -> None:
    path = tmp_path / "blank.json"
    path.write_bytes(b" " * (_decode.PARALLEL_READ_MIN + 10))
    with pytest.raises(TraceError, match="file is empty"):
        _decode.read_trace(str(path))
