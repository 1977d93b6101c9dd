"""A plain trace mapped instead of read (trace/_accel.c's map_file, taken by _decode.read_trace when a load
asks for it): the same bytes and tables as a read; a file cut short, written or replaced while it is
mapped is noticed (its pages past the cut read as zeros instead of ending the process with SIGBUS) and
the load reads it again; every other SIGBUS still reaches the handler that was there before."""
from __future__ import annotations

import gzip
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import cast

import pytest
from conftest import ALL_TRACES, trace_id, trace_path

import profuse
from profuse.errors import TraceError
from profuse.trace import _decode, _native, build, compiled

pytestmark = [
    pytest.mark.skipif(compiled.accel is None, reason="the compiled extension is not built"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="files are mapped on Linux only"),
]

SRC = Path(__file__).resolve().parents[1] / "src"


def _map(path: Path, settled_ns: int = 0) -> object:
    fd = os.open(path, os.O_RDONLY)
    try:
        return compiled.accel.map_file(fd, path.stat().st_size, settled_ns)
    finally:
        os.close(fd)  # the mapping keeps a descriptor of its own


def _child(code: str, *args: object, faulthandler: bool = False) -> subprocess.CompletedProcess[str]:
    """``code`` run with ``args`` in a fresh interpreter (a handler that failed would end that process,
    not the tests); ``faulthandler``: with Python's fault handler on from the start."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    flags = ["-X", "faulthandler"] if faulthandler else []
    return subprocess.run([sys.executable, *flags, "-c", textwrap.dedent(code), *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture(autouse=True)
def _map_fresh_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The tests' files are written just before they are loaded: map them all the same (MAP_SETTLED_NS
    is what keeps a file being written from being mapped; its own test is below). Skipped where the
    temporary folder is on a filesystem profuse does not map (tmpfs, a network one)."""
    monkeypatch.setattr(_decode, "MAP_SETTLED_NS", 0)
    probe = tmp_path / "probe.json"
    probe.write_bytes(b"{}")
    if _map(probe) is None:
        pytest.skip(f"{tmp_path} is on a filesystem profuse does not map")
    probe.unlink()


@pytest.mark.parametrize("size", [1, 4095, 4096, 4097, 3 * 4096 + 5, 1 << 20])
def test_a_mapping_holds_the_files_bytes(tmp_path: Path, size: int) -> None:
    path = tmp_path / "t.json"
    body = bytes((i * 7 + size) % 251 for i in range(size))
    path.write_bytes(body)
    mapped = _map(path)
    assert mapped is not None
    assert len(mapped) == size  # type: ignore[arg-type]
    view = memoryview(mapped)  # type: ignore[arg-type]
    assert view.readonly and bytes(view) == body
    assert mapped.intact()  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        memoryview(mapped)[0:1].cast("B")[0:1] = b"x"  # type: ignore[arg-type]  # read-only


def test_what_cannot_be_mapped_answers_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"{}" * 100)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert compiled.accel.map_file(fd, 199, 0) is None  # not the size fstat gives: changed since
        assert compiled.accel.map_file(fd, 0, 0) is None
        assert compiled.accel.map_file(fd, 200, 3600 * 10**9) is None  # written just now: not settled
        assert compiled.accel.map_file(fd, 200, 0) is not None
    finally:
        os.close(fd)
    assert compiled.accel.map_file(10_000, 200, 0) is None  # no such descriptor
    r, w = os.pipe()
    try:
        assert compiled.accel.map_file(r, 200, 0) is None  # not a regular file
    finally:
        os.close(r)
        os.close(w)
    blank = tmp_path / "blank.json"
    blank.write_bytes(b" \n\t" * 1000)
    assert _map(blank) is not None
    monkeypatch.setattr(_decode, "MAP_MIN", 1)
    with pytest.raises(TraceError, match="file is empty"):  # whitespace alone, mapped
        _decode.read_trace(str(blank), map_ok=True)


def test_a_file_written_or_touched_after_mapping_is_not_intact(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"a" * 10_000)
    os.utime(path, (1_000_000, 1_000_000))  # last modified long ago: a write now moves the time
    mapped = _map(path)
    assert mapped.intact()  # type: ignore[attr-defined]
    with open(path, "r+b") as fh:  # same size, other bytes
        fh.write(b"b")
    assert not mapped.intact()  # type: ignore[attr-defined]
    again = _map(path)
    assert again.intact()  # type: ignore[attr-defined]
    os.chmod(path, 0o600)  # the change time moves
    assert not again.intact()  # type: ignore[attr-defined]


def test_slots_run_out_and_come_back(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"x" * 5000)
    held = []
    while (m := _map(path)) is not None:
        held.append(m)
        assert len(held) <= 64
    assert len(held) == 64  # every slot taken: the caller reads instead
    held.pop()
    assert _map(path) is not None


CUT = """
import os, sys
from profuse.trace import compiled
path, size = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDONLY)
mapped = compiled.accel.map_file(fd, size, 0)
os.close(fd)
assert mapped is not None and mapped.intact()
os.truncate(path, size // 3)
data = bytes(mapped)  # reads past the new end: SIGBUS, answered with zeros
keep = size // 3 // 4096 * 4096
print(data[:keep] == b"x" * keep, data[-4096:] == bytes(4096), mapped.intact())
"""


@pytest.mark.parametrize("faulthandler", [False, True])
def test_a_file_cut_short_while_mapped_reads_zeros_and_is_not_intact(tmp_path: Path, faulthandler: bool) -> None:
    """The pages past the new end read as zeros (not SIGBUS), also with faulthandler's handler in place
    before the mapping's (pytest runs with it)."""
    path = tmp_path / "cut.json"
    size = 5 << 20
    path.write_bytes(b"x" * size)
    out = _child(CUT, path, size, faulthandler=faulthandler)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "False"]


FOREIGN = """
import mmap, os, sys
from profuse.trace import compiled
mine, other = sys.argv[1], sys.argv[2]
fd = os.open(mine, os.O_RDONLY)
mapped = compiled.accel.map_file(fd, os.fstat(fd).st_size, 0)  # installs the handler
assert mapped is not None
with open(other, "rb") as fh:
    foreign = mmap.mmap(fh.fileno(), 1 << 20, prot=mmap.PROT_READ)
os.truncate(other, 0)
print("reading", flush=True)
print(foreign[100])  # not profuse's mapping: SIGBUS as ever
"""


@pytest.mark.parametrize("faulthandler", [False, True])
def test_any_other_sigbus_still_ends_the_process(tmp_path: Path, faulthandler: bool) -> None:
    mine, other = tmp_path / "mine.json", tmp_path / "other.bin"
    mine.write_bytes(b"x" * 10_000)
    other.write_bytes(b"y" * (1 << 20))
    out = _child(FOREIGN, mine, other, faulthandler=faulthandler)
    assert out.stdout.strip() == "reading"
    if "libasan" in os.environ.get("LD_PRELOAD", ""):  # `make sanitize`: AddressSanitizer's handler was first
        assert out.returncode != 0 and "AddressSanitizer: BUS" in out.stderr, (out.returncode, out.stderr)
        return
    assert out.returncode == -signal.SIGBUS, (out.returncode, out.stderr)
    if faulthandler:  # the handler found first still runs: its traceback is printed
        assert "Bus error" in out.stderr


def _digest(tr: profuse.Trace) -> dict[str, tuple[int, str]]:
    """Every table's row count and the hash of its sorted rows (meta without the source's path)."""
    out = {}
    for (name,) in tr.sql_rows("SELECT table_name FROM information_schema.tables WHERE table_catalog = 'trace'")[1]:
        rows = tr.sql_rows(f'SELECT * FROM "{name}"')[1]
        if name == "meta":
            rows = [r for r in rows if r[0] != "path"]
        text = "\n".join(sorted(repr(r) for r in rows))
        out[name] = (len(rows), hashlib.sha256(text.encode()).hexdigest())
    return out


def _digest_of(data: bytes, name: str, folder: Path) -> dict[str, tuple[int, str]]:
    """:func:`_digest` of a file of ``data`` named ``name`` in ``folder`` (made here), loaded uncached."""
    folder.mkdir()
    (folder / name).write_bytes(data)
    with profuse.load(folder / name, cache=False) as tr:
        return _digest(tr)


def _plain(src: Path, folder: Path) -> Path:
    out = folder / src.name.removesuffix(".gz")
    out.write_bytes(gzip.decompress(src.read_bytes()))
    return out


@pytest.mark.parametrize("src", ALL_TRACES, ids=trace_id)
def test_a_mapped_load_gives_the_tables_of_a_read_one(src: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = _plain(src, tmp_path)
    calls: list[bool] = []
    real = _decode._map

    def spy(fh: object, size: int) -> object:
        out = real(fh, size)  # type: ignore[arg-type]
        calls.append(out is not None)
        return out

    monkeypatch.setattr(_decode, "_map", spy)
    monkeypatch.setattr(_decode, "MAP_MIN", 1)
    with profuse.load(path, cache=False) as mapped:
        got = _digest(mapped)
    assert calls == [True]
    monkeypatch.setattr(_decode, "MAP_MIN", 1 << 62)
    with profuse.load(path, cache=False) as read:
        assert _digest(read) == got
    assert calls == [True, False]  # the second load read the file


def _rewrite_during_the_scan(monkeypatch: pytest.MonkeyPatch, path: Path, new: bytes | None,
                             cut: int | None = None) -> list[str]:
    """Make the scan (of a mapped file) first replace the file's bytes in place (``new``) or cut it short
    (to ``cut`` bytes; neither: leave it); returns the log of what the loads did."""
    log: list[str] = []
    real_scan, real_read = _native.scan_document, _decode.read_trace

    def read(p: str, *, map_ok: bool = False) -> object:
        data, raw = real_read(p, map_ok=map_ok)
        log.append("mapped" if _decode.is_mapped(data) else "read")
        return data, raw

    def scan(data: object, **kw: object) -> object:
        if _decode.is_mapped(data) and "changed" not in log and (new is not None or cut is not None):
            log.append("changed")
            if new is not None:
                with open(path, "r+b") as fh:
                    fh.write(new)
                    fh.truncate()
            else:
                os.truncate(path, cast(int, cut))
        return real_scan(data, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_decode, "read_trace", read)
    monkeypatch.setattr(_native, "scan_document", scan)
    monkeypatch.setattr(_decode, "MAP_MIN", 1)
    return log


def test_a_file_rewritten_while_mapped_is_loaded_as_it_is_now(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first load's bytes were a mix of two versions; the load reads the file again and its tables and
    cache key are those of the new version's bytes."""
    old = _plain(trace_path("h100_bert_small.json.gz"), tmp_path)
    new_bytes = gzip.decompress(trace_path("h100_vit_falconsai.json.gz").read_bytes())
    os.utime(old, (1_000_000, 1_000_000))
    want_dir = tmp_path / "want"
    want_dir.mkdir()
    want = want_dir / "t.json"
    want.write_bytes(new_bytes)
    with profuse.load(want, cache=False) as tr:
        expected = _digest(tr)
        expected_source = tr.meta["source"]
    log = _rewrite_during_the_scan(monkeypatch, old, new_bytes)
    with profuse.load(old, cache=False) as tr:
        assert _digest(tr) == expected
        assert tr.meta["source"] == expected_source
        assert not any("changed" in n for n in tr.notes)
    assert log == ["mapped", "changed", "read"]


def test_a_file_cut_short_while_mapped_gives_the_error_of_the_file_as_it_is(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = _plain(trace_path("h100_vit_falconsai.json.gz"), tmp_path)
    size = path.stat().st_size
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / path.name).write_bytes(path.read_bytes()[:size // 2])
    with pytest.raises(TraceError) as direct:
        profuse.load(copy / path.name, cache=False)
    log = _rewrite_during_the_scan(monkeypatch, path, None, cut=size // 2)
    with pytest.raises(TraceError) as err:
        profuse.load(path, cache=False)
    assert log == ["mapped", "changed", "read"]
    assert err.value.problem == direct.value.problem


def test_a_file_being_written_is_read_not_mapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the fixture's setting: a file changed less than MAP_SETTLED_NS ago is read (its next write might
    land in the same clock tick and leave its times as they were)."""
    monkeypatch.setattr(_decode, "MAP_SETTLED_NS", 2_000_000_000)
    monkeypatch.setattr(_decode, "MAP_MIN", 1)
    path = _plain(trace_path("h100_vit_falconsai.json.gz"), tmp_path)
    data, _ = _decode.read_trace(str(path), map_ok=True)
    assert not _decode.is_mapped(data)
    os.utime(path, (1_000_000, 1_000_000))  # moves the change time to now too: still read
    assert not _decode.is_mapped(_decode.read_trace(str(path), map_ok=True)[0])
    assert build._MappedSource().checker(lambda: None) is None  # nothing mapped: nothing to check


def test_an_early_load_maps_the_file_and_reads_it_again_when_it_changed(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`profuse report`'s load started on a thread (trace/early.py) maps the file as the build does, and
    the build checks that mapping too."""
    from profuse.trace import early

    src = _plain(trace_path("h100_bert_small.json.gz"), tmp_path)
    with profuse.load(src, cache=False) as tr:
        expected = _digest(tr)
    log = _rewrite_during_the_scan(monkeypatch, src, None, cut=None)
    with early.start_load(str(src), cache=False)() as tr:
        assert _digest(tr) == expected
    assert log == ["mapped"]  # nothing changed: mapped once, never read
    new_bytes = gzip.decompress(trace_path("h100_vit_falconsai.json.gz").read_bytes())
    expected = _digest_of(new_bytes, src.name, tmp_path / "other")
    log = _rewrite_during_the_scan(monkeypatch, src, new_bytes)
    os.utime(src, (1_000_000, 1_000_000))
    with early.start_load(str(src), cache=False)() as tr:
        assert _digest(tr) == expected
    assert log == ["mapped", "changed", "read"]


def test_an_interrupt_stays_an_interrupt_when_the_mapped_file_changed(tmp_path: Path) -> None:
    """A build interrupted (Ctrl-C) while its mapped file changed is not started again: the interrupt goes on."""
    path = tmp_path / "t.json"
    path.write_bytes(b"x" * 10_000)
    os.utime(path, (1_000_000, 1_000_000))
    fd = os.open(path, os.O_RDONLY)
    try:
        source = build._MappedSource()
        source.hold(compiled.accel.map_file(fd, 10_000, 0))
    finally:
        os.close(fd)
    with open(path, "r+b") as fh:
        fh.write(b"y")
    source.raise_if_changed(KeyboardInterrupt())  # returns: the caller re-raises the interrupt
    with pytest.raises(build._SourceChanged):
        source.raise_if_changed(ValueError("bytes"))


DISPLACED = """
import faulthandler, os, signal, sys
from profuse.trace import compiled
path, how = sys.argv[1], sys.argv[2]
def mapped():
    fd = os.open(path, os.O_RDONLY)
    try:
        return compiled.accel.map_file(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)
first = mapped()  # installs the handler
if how == "signal":
    signal.signal(signal.SIGBUS, lambda *a: None)
elif how == "faulthandler":
    faulthandler.enable()
print(first is not None, mapped() is not None)
"""


@pytest.mark.parametrize("how", ["signal", "faulthandler"])
def test_nothing_is_mapped_once_another_sigbus_handler_took_the_place(tmp_path: Path, how: str) -> None:
    """A handler set after the first mapping (signal.signal, faulthandler.enable) would meet a cut-short
    file's fault first: the file is read instead from then on."""
    path = tmp_path / "t.json"
    path.write_bytes(b"x" * 10_000)
    out = _child(DISPLACED, path, how)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]


IGNORED = """
import os, signal, sys
from profuse.trace import compiled
signal.signal(signal.SIGBUS, signal.SIG_IGN)
fd = os.open(sys.argv[1], os.O_RDONLY)
assert compiled.accel.map_file(fd, os.fstat(fd).st_size, 0) is not None
os.kill(os.getpid(), signal.SIGBUS)  # sent, not a fault: ignored as it was before the mapping
print("survived")
"""


def test_a_sent_sigbus_stays_ignored_where_it_was_ignored(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"x" * 10_000)
    out = _child(IGNORED, path)
    assert (out.returncode, out.stdout.strip()) == (0, "survived"), out.stderr


def test_a_slot_freed_after_a_cut_serves_the_next_mapping_whole(tmp_path: Path) -> None:
    cut, other = tmp_path / "cut.json", tmp_path / "other.json"
    size = 3 * 4096
    cut.write_bytes(b"c" * size)
    os.utime(cut, (1_000_000, 1_000_000))
    other.write_bytes(b"o" * size)
    held = [_map(other) for _ in range(63)]  # every slot but one taken: the next two share it
    first = _map(cut)
    assert all(m is not None for m in held) and first is not None
    os.truncate(cut, 4096)
    assert bytes(memoryview(first))[-4096:] == bytes(4096)  # answered with zeros
    assert not first.intact()  # type: ignore[attr-defined]
    del first
    again = _map(other)  # in the slot the cut mapping held
    assert again is not None and again.intact()  # type: ignore[attr-defined]
    assert bytes(memoryview(again)) == b"o" * size  # type: ignore[arg-type]


EDGE = """
import ctypes, mmap, sys
from profuse.trace._native import _scan
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
doc = sys.stdin.buffer.read()
pages = -(-len(doc) // 4096)
area = mmap.mmap(-1, (pages + 1) * 4096)
start = pages * 4096 - len(doc)  # the document ends exactly where the protected page begins
area[start:start + len(doc)] = doc
base = ctypes.addressof(ctypes.c_char.from_buffer(area))
assert libc.mprotect(base + pages * 4096, 4096, 0) == 0  # PROT_NONE: a read past the end faults
view = memoryview(area)[start:start + len(doc)]
r = _scan.scan(view, 0, len(doc), -1, 1)
print("accepted" if r is not None else "declined", r["n"] if r is not None else -1)
"""


@pytest.mark.parametrize("tail", [0, 1, 7, 15, 16, 17, 31, 32, 33])
def test_the_scan_reads_nothing_past_the_end_of_its_buffer(tail: int) -> None:
    """Keys met again (the key memo's 16-byte compares), strings and whitespace (16-byte steps) right up
    to a buffer that ends where an unreadable page begins: no read past its end (that would fault)."""
    events = [b'{"ph": "X", "cat": "cpu_op", "name": "op%d", "pid": 1, "tid": 1, "ts": %d, "dur": 1,'
              b' "args": {"External id": %d, "Record function id": 0}}' % (k, k, k) for k in range(40)]
    doc = b'[' + b', '.join(events) + b']' + b' ' * tail
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(EDGE)], input=doc, capture_output=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])},
                         timeout=120)
    assert out.returncode == 0, out.stderr.decode()[-500:]
    assert out.stdout.split() == [b"accepted", b"40"]


def test_a_note_of_the_build_thrown_away_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace whose reading makes a note (a top-level key given twice) rewritten while mapped: the notes
    are those of one build, the one that read the file again."""
    text = gzip.decompress(trace_path("h100_vit_falconsai.json.gz").read_bytes())
    doubled = b'{"schemaVersion": 1, "schemaVersion": 1, ' + text.lstrip()[1:]
    path = tmp_path / "t.json"
    path.write_bytes(doubled)
    os.utime(path, (1_000_000, 1_000_000))
    with profuse.load(path, cache=False) as tr:
        want = [n for n in tr.notes if "more than once" in n]
    assert len(want) == 1
    log = _rewrite_during_the_scan(monkeypatch, path, doubled)
    with profuse.load(path, cache=False) as tr:
        assert [n for n in tr.notes if "more than once" in n] == want
    assert log == ["mapped", "changed", "read"]


def test_a_file_rewritten_while_mapped_whose_tables_file_then_fails_loads_in_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both retries in one load: the mapped file changes during the scan (read again), and the second build's
    tables file (a trace of 1 M events and more, lowered here) cannot be written (a full disk): the load
    ends in memory with the new bytes' tables and says why, never with the build's internal error."""
    import duckdb

    from profuse.trace import _write

    src = _plain(trace_path("h100_bert_small.json.gz"), tmp_path)
    new_bytes = gzip.decompress(trace_path("h100_vit_falconsai.json.gz").read_bytes())
    expected = _digest_of(new_bytes, src.name, tmp_path / "want")
    os.utime(src, (1_000_000, 1_000_000))
    log = _rewrite_during_the_scan(monkeypatch, src, new_bytes)
    monkeypatch.setattr(build, "COMPRESS_MIN_EVENTS", 10)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real = _write.write_events

    def write_events(con: duckdb.DuckDBPyConnection, **kw: object) -> None:
        where = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = 'trace'").fetchall()
        if where[0][0] is not None and "changed" in log:
            raise duckdb.IOException("Could not write file: No space left on device")
        real(con, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(build, "write_events", write_events)
    with profuse.load(src, cache=False) as tr:
        assert _digest(tr) == expected
        assert any("temporary tables file not written (" in n for n in tr.notes), tr.notes
    assert log[:2] == ["mapped", "changed"] and "read" in log
