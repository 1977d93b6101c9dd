"""Typed decoding of Kineto JSON: bytes in, column chunks out.

The trace is decoded in chunks of whole events (split where a raw newline sits between two events,
which can only happen outside a JSON string) so memory stays bounded and progress can be shown.
Each chunk is decoded by msgspec straight into Structs holding only the fields profuse uses; the
rest of ``args`` is skipped by the decoder. No per-event dicts are built on the fast path.
"""
from __future__ import annotations

import os
import re
import stat
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, BinaryIO, Protocol, TypeGuard, cast

import msgspec
import numpy as np
from msgspec import Raw, Struct

from ..errors import TraceError, UserError
from .cache import RACY_NS, hasher

CHUNK_BYTES = 16 << 20
_EVENT_GAP = re.compile(rb",\s*\n\s*\{")
_NOT_SPACE = re.compile(rb"\S")  # bytes.isspace's whitespace is regex's \s for bytes
_MSGSPEC_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$\[(?P<idx>\d+)\](?P<rest>[^`]*)`)?$", re.DOTALL)


class Args(Struct, gc=False, frozen=True):
    """The ``args`` keys profuse reads; every other key is skipped by the decoder."""

    # ids re-serialised as floats (35.0) are the integers they are; any other float is read as absent
    # and counted (int_column)
    external_id: int | float | str | None = msgspec.field(name="External id", default=None)
    external_id_lc: int | float | str | None = msgspec.field(name="external id", default=None)
    correlation: int | float | str | None = None
    device: Any = None
    stream: Any = None
    stream_id: Any = None
    input_dims: Raw = msgspec.field(name="Input Dims", default=Raw(b""))
    input_type: Raw = msgspec.field(name="Input type", default=Raw(b""))
    concrete: Raw = msgspec.field(name="Concrete Inputs", default=Raw(b""))
    grid: Raw = Raw(b"")
    block: Raw = Raw(b"")
    python_id: Any = msgspec.field(name="Python id", default=None)
    python_parent_id: Any = msgspec.field(name="Python parent id", default=None)
    seq: Any = msgspec.field(name="Sequence number", default=None)
    fwd_tid: Any = msgspec.field(name="Fwd thread id", default=None)
    nbytes: Any = msgspec.field(name="bytes", default=None)
    flops: Any = msgspec.field(name="flops", default=None)
    name: Any = None
    labels: Any = None
    direction: Any = None   # a copy's direction as the device writes it (MTIA DMA: HOST_TO_DEVICE, ...)


_NO_ARGS = Args()


class Event(Struct, gc=False):
    """One trace event as msgspec decodes it (only the fields profuse reads)."""

    ph: str = ""
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: int | float | None = None
    dur: int | float | None = None
    id: int | str | None = None
    bp: str | None = None
    args: Args = _NO_ARGS


_events_decoder = msgspec.json.Decoder(list[Event])
_event_decoder = msgspec.json.Decoder(Event)
_raw_list_decoder = msgspec.json.Decoder(list[Raw])


# --- reading bytes --------------------------------------------------------------------------


MIN_DEFAULT_MAX_TRACE_BYTES = 2 << 30
MAX_TRACE_BYTES_ENV = "PROFUSE_MAX_TRACE_BYTES"
_READ_BLOCK = 1 << 20


def default_max_trace_bytes() -> int:
    """Half of this machine's physical memory, at least 2 GiB: a trace loads and reports in about 1.7x its
    size, so the largest trace the machine holds loads without a variable (a 10 GB trace on 24 GB), and a
    gzip bomb, whose inflation stops at the limit, still cannot take the machine down."""
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):   # no sysconf (Windows), or the value is unknown
        physical = 0
    return max(MIN_DEFAULT_MAX_TRACE_BYTES, physical // 2)


def max_trace_bytes() -> int:
    """The most JSON bytes a trace may hold (after gzip): ``$PROFUSE_MAX_TRACE_BYTES``, else
    :func:`default_max_trace_bytes`."""
    raw = os.environ.get(MAX_TRACE_BYTES_ENV, "").strip()
    if not raw:
        return default_max_trace_bytes()
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise UserError(f"{MAX_TRACE_BYTES_ENV}={raw!r}: expected a positive whole number of bytes")
    return value


def _too_big(path: str, limit: int, what: str) -> TraceError:
    return TraceError(path, f"{what} more than {limit:,} bytes of JSON, profuse's limit; "
                            f"set {MAX_TRACE_BYTES_ENV} to a larger number of bytes to load it anyway")


def read_bytes(path: str) -> bytes | bytearray:
    """Read a ``.json`` or ``.json.gz`` file whole, with gzip detected by its magic bytes.

    Only regular files are read (a FIFO or a device would block or never end), and at most
    :func:`max_trace_bytes` of JSON, so a small gzip that inflates to gigabytes stops early.
    """
    return cast("bytes | bytearray", read_trace(path)[0])  # never mapped: map_ok is off


class _Hashed:
    """A file read through the cache's hash (:func:`cache.hasher`): the digest and size of exactly the bytes read from it."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh, self.hash, self.size = fh, hasher(), 0

    def read(self, n: int = -1) -> bytes:
        """``n`` bytes of the file (all that is left for -1), hashed on the way."""
        block = self.fh.read(n)
        self.hash.update(block)
        self.size += len(block)
        return block

    def drain(self) -> None:
        """Hash the rest of the file (what the decoder did not need to read)."""
        while self.read(_READ_BLOCK):
            pass


class Mapped(Protocol):
    """A plain trace file's bytes mapped read-only (trace/_accel.c's ``map_file``): a buffer, whose
    ``intact()`` says whether the file stayed as it was while mapped (else read it again)."""

    def __len__(self) -> int: ...

    def __buffer__(self, flags: int, /) -> memoryview: ...

    def intact(self) -> bool: ...


TraceBytes = bytes | bytearray | Mapped


def is_mapped(data: object) -> TypeGuard[Mapped]:
    """Whether ``data`` came from :func:`read_trace` as a mapping rather than as bytes."""
    return not isinstance(data, (bytes, bytearray, memoryview))


def as_bytes(data: TraceBytes) -> bytes | bytearray:
    """``data`` as bytes (a mapping copied: for the readers that need bytes' methods, off the common path)."""
    return data if isinstance(data, (bytes, bytearray)) else bytes(memoryview(data))


def read_trace(path: str, *, map_ok: bool = False) -> tuple[TraceBytes, tuple[str, int] | None]:
    """:func:`read_bytes`, and for a gzip file the hash (:func:`cache.hasher`) and size of the compressed bytes it inflated
    (None for plain JSON: the bytes returned are the file's own, to be hashed by the caller). So a
    cache is always keyed by the bytes actually decoded, never by a second read of a file that may
    have changed in between.

    ``map_ok``: a plain file of MAP_MIN bytes and more may come back mapped (:class:`Mapped`, see
    :func:`_map`) instead of read; the caller must then ask ``intact()`` once it has finished reading
    it, and read the file again (``map_ok=False``) where it answers False."""
    limit = max_trace_bytes()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceError(path, "is a folder with no trace in it") from None
    except OSError as err:
        raise TraceError(path, f"cannot be read ({err.strerror})") from None
    try:
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if stat.S_ISDIR(st.st_mode):
                raise TraceError(path, "is a folder with no trace in it")
            if not stat.S_ISREG(st.st_mode):
                raise TraceError(path, "is not a regular file (a FIFO or a device); give a .json or .json.gz file")
            hashed = _Hashed(fh)
            head = hashed.read(2)
            raw: tuple[str, int] | None = None
            if head == b"\x1f\x8b":
                data: TraceBytes = _gunzip(path, hashed, head, limit)
                hashed.drain()
                raw = (str(hashed.hash.hexdigest()), hashed.size)
            else:
                if st.st_size > limit:
                    raise _too_big(path, limit, "holds")
                data = (_map(fh, st.st_size) if map_ok else None) or _read_rest(fh, st.st_size, limit)
                if len(data) > limit:  # grew since fstat
                    raise _too_big(path, limit, "holds")
    except OSError as err:
        raise TraceError(path, f"cannot be read ({err.strerror or err})") from None
    except MemoryError:
        raise TraceError(path, f"too big for the memory left; set {MAX_TRACE_BYTES_ENV} lower") from None
    if not data or not _NOT_SPACE.search(data):  # a search stops at the first other byte, mapped or read
        raise TraceError(path, "file is empty")
    return data, raw


def _read_rest(fh: BinaryIO, size: int, limit: int) -> bytes:
    """The whole file (``size`` bytes by fstat; up to ``limit`` + 1 if it grew since), read in one piece.

    Read from the start again rather than appended to the bytes already looked at: one buffer,
    never zero-filled, no second copy.
    """
    data = _read_parallel(fh, size + 1)  # one spare byte shows a file that grew since fstat
    if data is None:
        fh.seek(0)
        data = fh.read(size + 1)
    if len(data) > size:
        fh.seek(len(data))
        data += fh.read(max(limit + 1 - len(data), 0))
    return data


PARALLEL_READ_MIN = 8 << 20
MAP_MIN = 8 << 20
MAP_SETTLED_NS = RACY_NS  # only a file last changed this long ago is mapped (see _map), the cache's rule


def _map(fh: BinaryIO, size: int) -> Mapped | None:
    """The file's ``size`` bytes (its size by fstat) mapped read-only (trace/_accel.c's map_file: the page
    cache's own pages, no copy into fresh memory: a 50 MB trace 40-100 ms read, 6 ms mapped; each page
    resident only from when the scan reaches it to when the scan and the hash let it go); None below
    MAP_MIN, without the extension, or where it cannot (not Linux, not a local filesystem, a file that
    changed size since fstat, or one written or changed less than MAP_SETTLED_NS ago, whose next write
    might leave its times as they are): the caller reads."""
    from . import compiled

    if size < MAP_MIN or not compiled.enabled():
        return None
    mapped: Mapped | None = compiled.accel.map_file(fh.fileno(), size, MAP_SETTLED_NS)
    return mapped


def _read_parallel(fh: BinaryIO, n: int) -> bytes | None:
    """The first ``n`` bytes of the file (fewer where it ends first), read by a thread per core the load
    may use (:func:`cores_wanted`, up to 4) into one buffer (trace/_accel.c's read_file: the fresh
    buffer's page faults, most of a read from the page cache, then run on every core); None below
    PARALLEL_READ_MIN, without the extension, with one core or where it cannot (Windows): the caller
    reads as before."""
    from . import compiled

    if n < PARALLEL_READ_MIN or not compiled.enabled():
        return None
    parts = min(4, cores_wanted())
    if parts < 2:
        return None
    data: bytes | None = compiled.accel.read_file(fh.fileno(), n, parts)
    return data


def _inflater() -> Any:
    """A gzip decompressor: ISA-L's (python-isal, about twice as fast) when installed, else zlib's."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib.decompressobj(31)
    return isal_zlib.decompressobj(31)


def _inflate_errors() -> tuple[type[Exception], ...]:
    try:
        from isal import isal_zlib
    except ImportError:
        return (zlib.error,)
    return (zlib.error, cast("type[Exception]", isal_zlib.error))


def _gunzip(path: str, fh: BinaryIO | _Hashed, head: bytes, limit: int) -> bytearray:
    """Inflate every gzip member of ``fh`` into one buffer, refusing more than ``limit`` bytes."""
    out = bytearray()
    inflater = _inflater()
    pending = head
    try:
        while True:
            if not pending:
                pending = fh.read(_READ_BLOCK)
                if not pending:
                    break
            out += inflater.decompress(pending, limit + 1 - len(out))
            if len(out) > limit:
                raise _too_big(path, limit, "inflates to")
            if not inflater.eof:
                pending = inflater.unconsumed_tail
                continue
            pending = inflater.unused_data
            while len(pending) < 2:  # what follows a member: another member, zero padding, or the end
                more = fh.read(_READ_BLOCK)
                if not more:
                    break
                pending += more
            if not pending.strip(b"\x00") and not fh.read(_READ_BLOCK).strip(b"\x00"):
                return out
            if not pending.startswith(b"\x1f\x8b"):
                raise TraceError(path, "gzip data is followed by bytes that are not gzip")
            inflater = _inflater()
    except _inflate_errors() as err:
        raise TraceError(path, f"gzip data is truncated or corrupt ({err})") from None
    raise TraceError(path, "gzip data is truncated (the file ends inside the compressed data)")


# --- splitting ------------------------------------------------------------------------------


@dataclass
class Document:
    """The top level of a trace file: its events array as raw bytes and the other keys."""

    events: memoryview
    top: dict[str, Raw]
    repeated: list[str] = field(default_factory=list)  # top-level keys given more than once (the last is read)


def split_document(path: str, data: bytes | bytearray) -> Document:
    """The ``traceEvents`` array (as a view, undecoded) and the other top-level members of a trace."""
    head = data[:4096].lstrip()[:1]
    if head == b"[":
        return Document(events=memoryview(data), top={})
    if head != b"{":
        raise TraceError(path, "not JSON (it does not start with '{' or '[')")
    try:
        top = msgspec.json.decode(data, type=dict[str, Raw])
    except RecursionError:
        raise TraceError(path, NESTED_TOO_DEEP) from None
    except msgspec.DecodeError as err:
        raise TraceError(path, _json_problem(str(err))) from None
    except msgspec.ValidationError:
        raise TraceError(path, "not a trace: the top level is not an object") from None
    raw = top.pop("traceEvents", None)
    if raw is None:
        raise TraceError(path, "JSON but not a trace: no 'traceEvents' key")
    view = memoryview(raw)
    if bytes(view[:1]) != b"[":
        raise TraceError(path, "JSON but not a trace: 'traceEvents' is not a list")
    return Document(events=view, top=top, repeated=repeated_keys(data, {**top, "traceEvents": raw}))


def _address(buf: Any) -> int:
    return int(np.frombuffer(buf, dtype=np.uint8).__array_interface__["data"][0])


def repeated_keys(data: bytes | bytearray, top: dict[str, Raw]) -> list[str]:
    """The top-level keys of ``data`` given more than once, where the decoder kept only the last.

    msgspec's ``Raw`` values point into ``data``: between two kept values there is room for exactly
    one key, so a gap holding more is where a repeated member was dropped, and it is decoded to
    name it. Only a document with a repeated key pays more than a look at a few gaps.
    """
    spans = sorted((_address(v) - _address(data), len(v), k) for k, v in top.items() if len(v))
    names: list[str] = []
    pos = data.find(b"{") + 1
    for start, size, key in spans:
        gap = bytes(data[pos:start])
        if not _ONE_KEY.fullmatch(gap):
            body = gap[gap.find(b",") + 1 if pos > data.find(b"{") + 1 else 0:gap.rfind(b'"', 0, gap.rfind(b'"'))]
            try:
                dropped = msgspec.json.decode(b"{" + body.rstrip().rstrip(b",") + b"}", type=dict[str, Raw])
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                dropped = {key: Raw(b"")}
            names.extend(k for k in dropped if k not in names)
        pos = start + size
    return names


_ONE_KEY = re.compile(rb'\s*,?\s*"(?:[^"\\]|\\.)*"\s*:\s*', re.DOTALL)


NESTED_TOO_DEEP = "JSON is nested too deeply (arrays or objects inside each other beyond the decoder's limit)"


def _json_problem(msg: str) -> str:
    if "truncated" in msg.lower():
        return "JSON is truncated (the file ends in the middle of the data)"
    if "utf-8" in msg.lower():
        return f"not valid UTF-8 ({msg})"
    return f"not valid JSON ({msg})"


def chunk_spans(events: memoryview, chunk_bytes: int = CHUNK_BYTES) -> list[tuple[int, int]]:
    """Split the events array ``[ ... ]`` into (start, end) spans of whole events."""
    end = len(events)
    while end > 0 and bytes(events[end - 1 : end]) in (b" ", b"\n", b"\r", b"\t"):
        end -= 1
    inner_start, inner_end = 1, end - 1  # drop the brackets
    spans: list[tuple[int, int]] = []
    pos = inner_start
    while inner_end - pos > chunk_bytes:
        m = _EVENT_GAP.search(events, pos + chunk_bytes, inner_end)
        if m is None:
            break
        spans.append((pos, m.start()))
        pos = m.start() + 1  # past the comma
    spans.append((pos, inner_end))
    return spans


# --- decoding -------------------------------------------------------------------------------


@dataclass
class Skipped:
    """Events dropped under ``--lenient``, counted by reason."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    def add(self, reason: str, example: str) -> None:
        """Count one skipped item under ``reason``; the first five are kept as examples."""
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if len(self.examples) < 5:
            self.examples.append(example)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def decode_chunk(
    path: str, buf: memoryview, base_index: int, lenient: bool, skipped: Skipped
) -> list[Event]:
    """Decode one span of whole events. Strict: the first bad event raises a TraceError."""
    body = b"[" + bytes(buf) + b"]"
    try:
        return _events_decoder.decode(body)
    except RecursionError:
        if not lenient:
            raise TraceError(path, NESTED_TOO_DEEP) from None
    except msgspec.ValidationError as err:
        if not lenient:
            raise TraceError(path, _validation_problem(str(err), base_index)) from None
    except msgspec.DecodeError as err:
        if not lenient:
            raise TraceError(path, _json_problem(str(err))) from None
        body = bytes(buf).decode("utf-8", "replace").encode()
        body = b"[" + body + b"]"
    return _decode_one_by_one(path, body, base_index, skipped)


def _decode_one_by_one(path: str, body: bytes, base_index: int, skipped: Skipped) -> list[Event]:
    try:
        raws = _raw_list_decoder.decode(body)
    except RecursionError:
        raise TraceError(path, NESTED_TOO_DEEP + "; --lenient cannot recover it") from None
    except msgspec.DecodeError as err:
        raise TraceError(path, _json_problem(str(err)) + "; --lenient cannot recover it") from None
    out: list[Event] = []
    for i, raw in enumerate(raws):
        try:
            out.append(_event_decoder.decode(raw))
        except RecursionError:
            skipped.add("nested too deeply", f"event #{base_index + i}")
        except (msgspec.ValidationError, msgspec.DecodeError) as err:
            msg = _MSGSPEC_AT.match(str(err))
            reason = msg.group("msg") if msg else str(err)
            skipped.add(f"bad field: {reason}", f"event #{base_index + i}: {err}")
    return out


def _validation_problem(msg: str, base_index: int) -> str:
    m = _MSGSPEC_AT.match(msg)
    if not m or m.group("idx") is None:
        return f"not a trace ({msg})"
    where = m.group("rest").lstrip(".") or "the event"
    index = base_index + int(m.group("idx"))
    return f"event #{index}: {where}: {m.group('msg')} (use --lenient to skip such events)"


def iter_chunks(
    path: str,
    doc: Document,
    *,
    lenient: bool,
    skipped: Skipped,
    on_progress: Callable[[int], None] | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[tuple[int, list[Event], memoryview]]:
    """Yield (index of first event, events, the chunk's bytes) for each chunk, falling back to one chunk if needed."""
    spans = chunk_spans(doc.events, chunk_bytes)
    base = 0
    for n, (start, end) in enumerate(spans):
        try:
            events = decode_chunk(path, doc.events[start:end], base, lenient, skipped)
        except TraceError:
            if len(spans) > 1 and n == 0:
                # A split landed inside a nested value: decode the whole array in one go.
                yield from iter_chunks(
                    path, doc, lenient=lenient, skipped=skipped,
                    on_progress=on_progress, chunk_bytes=len(doc.events) + 1,
                )
                return
            raise
        if on_progress:
            on_progress(end - start)
        yield base, events, doc.events[start:end]
        base += len(events)


# --- columns --------------------------------------------------------------------------------

_get_args = attrgetter("args")


# the args key each int column is read from, as the trace spells it (for messages)
ARG_LABELS = {"seq": "Sequence number", "fwd_tid": "Fwd thread id", "python_id": "Python id",
              "python_parent_id": "Python parent id", "nbytes": "bytes"}


def int_column(values: Iterator[Any] | list[Any], n: int, what: str, path: str,
               ignored: dict[str, int] | None = None, *, skipped: Skipped | None = None) -> np.ndarray:
    """Optional ints to int64 with -1 for absent; strings of digits are accepted (MTIA streams), and
    integral floats (``35.0``, a re-serialised trace) as the integer they are.

    Values of other types, and floats with a fraction, are read as absent and counted per key in
    ``ignored``. A number beyond
    64 bits (``2**70``, ``1e308``) is an error naming ``path``, or with ``skipped`` (``--lenient``)
    read as absent and counted there.
    """
    vals = values if isinstance(values, list) else list(values)
    try:
        f = np.array(vals, dtype=np.float64)  # None -> nan, at C speed
        if not np.any(np.abs(f) >= 2.0**53) and not np.any(f != np.floor(f)):   # (nan != nan: absent)
            return np.where(np.isnan(f), -1, f).astype(np.int64)
    except (TypeError, ValueError, OverflowError, RecursionError):
        pass
    out = np.full(n, -1, dtype=np.int64)
    for i, v in enumerate(vals):
        if isinstance(v, str) and v.strip().lstrip("-").isdigit():
            # more digits than 64 bits hold is beyond them (and int() refuses past 4300 digits)
            v = int(v) if len(v.strip().lstrip("-")) <= 20 else 2**64
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
            if v is not None and ignored is not None:  # not a whole number: treated as absent, counted
                ignored[what] = ignored.get(what, 0) + 1
            continue
        if not -(2**63) <= v < 2**63:
            label, shown = ARG_LABELS.get(what, what), _number_text(v)
            if skipped is None:
                raise TraceError(path, f"an event's args {label!r} value {shown} does not fit in 64 bits "
                                       "(use --lenient to read it as absent)")
            skipped.add(f"{label} beyond 64 bits (read as absent)", f"args {label!r} value {shown}")
            continue
        out[i] = int(v)
    return out


def _number_text(v: float) -> str:
    """A number for a message: as written, or its size where printing it whole would be huge."""
    if isinstance(v, int) and v.bit_length() > 256:
        return f"of {v.bit_length()} bits"
    return str(v)


def raw_text(raw: Raw) -> str | None:
    """An undecoded JSON value as its text (None when absent)."""
    return bytes(raw).decode() if raw else None


def concrete_text(raw: Raw) -> str | None:
    """``Concrete Inputs`` as its text; None when absent or when every entry is an empty string."""
    text = raw_text(raw)
    return None if text is None or not text.strip('[]", ') else text


def args_of(events: list[Event]) -> list[Args]:
    """The ``args`` of each event."""
    return list(map(_get_args, events))


def cores_wanted() -> int:
    """The cores one load may use: ``$PROFUSE_WORKERS`` where set (a rank's map task sets 1), else the
    machine's (the decoding processes here and the parallel read of _decode.py both ask)."""
    return int(os.environ.get("PROFUSE_WORKERS", "0")) or (os.cpu_count() or 1)
