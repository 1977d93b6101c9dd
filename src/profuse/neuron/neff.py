"""Read a NEFF (Neuron executable) offline: header, subgraphs, engine streams, HLO statistics, tensors.

A NEFF is a 1,024-byte little-endian header followed by a tar.gz. The header layout is the one in
AWS's KLR (``KLR/NEFF``), with field widths checked on a real file (``matmul_small.neff``): the
checksum field holds an MD5 (packaging 2) as four little-endian 32-bit words. The archive is read in
memory, never extracted: only JSON and debug-info members are read, each capped in size, and a member
whose name could escape a folder is an error.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import posixpath
import struct
import sys
import tarfile
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import TraceError
from ..trace.artifacts import read_side_bytes
from ._protobuf import WireError, fields, packed_varints

HEADER_SIZE = 1024
MAX_READ_MEMBER = 64 << 20  # a JSON or debug-info member larger than this is refused
MAX_ARCHIVE = 16 << 30  # sum of declared member sizes: a bigger archive is refused (gzip bomb)
MAX_FILE = 32 << 30
MAX_READ_TOTAL = 256 << 20  # all members read, together
MAX_GRAPHS = 1024  # subgraphs the kelf files may list, copies of one included
MAX_PARSED = 4 * MAX_READ_TOTAL  # members parsed for the subgraphs, counted again for each that reads them
MAX_RATIO, RATIO_SLACK = 200, 8 << 20  # decompressed bytes per compressed byte, past the first 8 MiB
SCHEMA = "profuse.neff/1"
PACKAGING = {1: "tar.gz + SHA-256", 2: "tar.gz + MD5"}
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1, "int16": 2,
            "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "bool": 1, "float8_e4m3": 1,
            "float8_e5m2": 1, "float8_e4m3fn": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
HLO_STATS = {"HloMacCount": "macs", "Traffic": "traffic", "ArithmeticIntensity": "arithmetic_intensity"}


@dataclass(frozen=True)
class Header:
    """The fixed 1,024-byte header."""

    packaging_version: int
    packaging: str
    header_size: int
    data_size: int
    version: str
    num_tpb: int
    checksum: str
    checksum_ok: bool | None  # None: no checksum recorded
    uuid: str
    name: str
    requested_tpb_count: int
    tpb_per_node: list[int]


@dataclass(frozen=True)
class Engine:
    """One engine's instruction stream in one subgraph."""

    name: str
    file: str
    bytes: int | None
    instructions: int | None  # from the engine's assembly debug info; None when it is absent


@dataclass(frozen=True)
class Mapped:
    """Instructions of one engine traced back, through the debug info, to one HLO instruction."""

    engine: str
    instructions: int
    hlo: str | None
    framework: str | None
    source: str | None
    bir: list[str]


@dataclass(frozen=True)
class Tensor:
    """One tensor a subgraph declares: role (input, output, weight, ...), dtype, shape, size; None if unsaid."""

    name: str
    kind: str
    dtype: str | None
    shape: list[int] | None
    bytes: int | None


@dataclass(frozen=True)
class Subgraph:
    """One compiled subgraph: engine instruction streams, tensors, instructions mapped to HLO/framework ops, DMA."""

    name: str
    engines: list[Engine]
    tensors: list[Tensor]
    mapping: list[Mapped]
    unmapped: dict[str, int]  # engine -> instructions the debug info links to nothing
    dma_queues: dict[str, int]


@dataclass(frozen=True)
class Neff:
    """Everything ``profuse neff`` shows; ``as_dict`` is the JSON form (schema ``profuse.neff/1``)."""

    path: str
    header: Header
    compiler_version: str | None
    target: str | None
    hlo_stats: dict[str, Any]
    subgraphs: list[Subgraph]
    members: int
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The NEFF as the ``profuse.neff`` JSON document."""
        return {"schema": SCHEMA, **asdict(self)}


def read_neff(path: str | Path) -> Neff:
    """Parse a NEFF file; a file that is not one, or is damaged, raises :class:`TraceError`."""
    p = Path(path)
    raw, why = read_side_bytes(p, MAX_FILE, follow_links=True)
    if raw is None:
        raise TraceError(p, why)
    return parse_neff(p, raw)


def parse_neff(path: str | Path, raw: bytes) -> Neff:
    """Parse a NEFF's bytes already read (``path`` names it in errors); see :func:`read_neff`."""
    p = Path(path)
    header = read_header(p, raw)
    payload = raw[HEADER_SIZE:]
    sizes, contents = _read_archive(p, payload)
    unread = {d for _, d in _graphs(p, contents)[0] if d in sizes and d not in contents}
    if unread:  # a definition under a name of its own: read the archive again for it
        sizes, contents = _read_archive(p, payload, unread)
    return _assemble(p, header, sizes, contents)


def read_header(path: Path, raw: bytes) -> Header:
    """Check and decode the header; the payload must be exactly as long as it says."""
    if len(raw) < HEADER_SIZE:
        raise TraceError(path, f"is {len(raw):,} bytes: too short for a NEFF (a 1,024-byte header comes first)")
    packaging, header_size, data_size, major, minor = struct.unpack_from("<5Q", raw, 0)
    if header_size != HEADER_SIZE:
        raise TraceError(path, f"header size field is {header_size}, not 1024: not a NEFF")
    if packaging not in PACKAGING:
        raise TraceError(path, f"packaging version {packaging} is unknown (1 = tar.gz + SHA-256, 2 = tar.gz + MD5)")
    have = len(raw) - HEADER_SIZE
    if have != data_size:
        what = "truncated" if have < data_size else "has trailing bytes"
        raise TraceError(path, f"header says {data_size:,} payload bytes, the file has {have:,}: {what}")
    build = _cstring(raw[40:168])
    checksum = raw[172:204]
    ok = _checksum_ok(packaging, checksum, raw[HEADER_SIZE:])
    if ok is False and packaging == 2:
        raise TraceError(path, "payload does not match the MD5 in its header: the file is corrupt")
    tpb_per_node = list(raw[480:544])
    while tpb_per_node and tpb_per_node[-1] == 0:
        tpb_per_node.pop()
    return Header(
        packaging_version=packaging, packaging=PACKAGING[packaging], header_size=header_size, data_size=data_size,
        version=f"{major}.{minor}" + (f" ({build})" if build else ""),
        num_tpb=struct.unpack_from("<I", raw, 168)[0],
        checksum=checksum[:16 if packaging == 2 else 32].hex(), checksum_ok=ok, uuid=raw[204:220].hex(),
        name=_cstring(raw[220:476]), requested_tpb_count=struct.unpack_from("<I", raw, 476)[0],
        tpb_per_node=tpb_per_node)


def _cstring(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode("utf-8", "replace")


def _checksum_ok(packaging: int, stored: bytes, payload: bytes) -> bool | None:
    """Compare the stored digest, as bytes or as little-endian 32-bit words (the MD5 of a real NEFF is)."""
    n = 16 if packaging == 2 else 32
    stored = stored[:n]
    if not any(stored):
        return None
    digest = (hashlib.md5(payload, usedforsecurity=False) if packaging == 2 else hashlib.sha256(payload)).digest()
    words = b"".join(digest[i:i + 4][::-1] for i in range(0, n, 4))
    return stored in (digest, words)


def _safe_member_name(path: Path, name: str) -> str:
    norm = posixpath.normpath(name.replace("\\", "/"))
    if norm.startswith("/") or norm == ".." or norm.startswith("../") or PurePosixPath(norm).is_absolute():
        raise TraceError(path, f"archive member {name!r} points outside the archive")
    return norm


class _Gunzip(io.RawIOBase):
    """The payload's gzip stream, decompressed on demand and refused past a ratio or a total.

    ``tarfile`` reads the tar through this, so a member it skips is still decompressed (to find the
    next header) but never kept, and a gzip bomb stops at the first read past the limit instead of
    decompressing gigabytes: output may not exceed ``MAX_RATIO`` times the compressed bytes consumed
    plus ``RATIO_SLACK`` (the tar's zero padding compresses far better than any real member).
    """

    def __init__(self, path: Path, payload: bytes) -> None:
        self.path, self.payload, self.pos, self.out = path, payload, 0, 0
        self.z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.tail = b""  # compressed bytes the last bounded call did not consume
        self.pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        while not self.pending and not self.z.eof and (self.tail or self.pos < len(self.payload)):
            if not self.tail:
                self.tail = self.payload[self.pos:self.pos + (1 << 16)]
                self.pos += len(self.tail)
            self.pending = self.z.decompress(self.tail, 1 << 20)
            self.tail = self.z.unconsumed_tail
        n = min(len(buf), len(self.pending))
        buf[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        self.out += n
        consumed = self.pos - len(self.tail)
        if self.out > MAX_RATIO * consumed + RATIO_SLACK:
            raise TraceError(self.path, f"archive decompresses to more than {MAX_RATIO}x its compressed size "
                                        "(a gzip bomb?): refused")
        if self.out > MAX_ARCHIVE:
            raise TraceError(self.path, f"archive decompresses to more than {MAX_ARCHIVE:,} bytes: refused")
        return n


def _wanted(name: str, definitions: set[str]) -> bool:
    """Members profuse reads: the subgraph list, info and HLO statistics, each subgraph's definition
    and tensor map, and debug info. Other JSON (engine tables, activation tables) is skipped."""
    base = PurePosixPath(name).name
    return (name in ("info.json", "hlo_stats.json") or name in definitions or ".dbg" in base
            or (base.startswith("kelf-") and base.endswith(".json")) or base in ("def.json", "tensor_map.json"))


def _read_archive(path: Path, payload: bytes, definitions: set[str] | None = None,
                  ) -> tuple[dict[str, int], dict[str, bytes]]:
    """Sizes of every member, and the bytes of the members profuse reads, streamed from memory.

    At most ``MAX_READ_TOTAL`` bytes are kept in all; ``definitions`` (def.json members named by a
    kelf file under another name) are read too.
    """
    sizes: dict[str, int] = {}
    contents: dict[str, bytes] = {}
    total = kept = 0
    try:
        with tarfile.open(fileobj=io.BufferedReader(_Gunzip(path, payload), 1 << 16), mode="r|") as tf:
            for m in tf:
                if m.isdir():
                    continue
                name = _safe_member_name(path, m.name)
                if not m.isfile():
                    raise TraceError(path, f"archive member {name!r} is a link or device, not a file")
                if name in sizes:
                    raise TraceError(path, f"archive holds {name!r} twice")
                total += m.size
                if total > MAX_ARCHIVE:
                    raise TraceError(path, f"archive declares more than {MAX_ARCHIVE:,} bytes: refused")
                sizes[name] = m.size
                if _wanted(name, definitions or set()):
                    if m.size > MAX_READ_MEMBER:
                        raise TraceError(path, f"archive member {name!r} is {m.size:,} bytes: too large to read")
                    kept += m.size
                    if kept > MAX_READ_TOTAL:
                        raise TraceError(path, f"archive members profuse reads exceed {MAX_READ_TOTAL:,} bytes "
                                               "in all: refused")
                    fh = tf.extractfile(m)
                    contents[name] = fh.read() if fh is not None else b""
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        raise TraceError(path, f"payload is not a readable tar.gz ({str(err) or type(err).__name__})") from None
    if not sizes:
        raise TraceError(path, "archive is empty")
    return sizes, contents


def _json(path: Path, contents: dict[str, bytes] | _Reads, name: str, *, required: bool = False) -> Any:
    if name not in contents:
        if required:
            raise TraceError(path, f"archive has no {name}")
        return None
    try:
        # NaN, Infinity and numbers past a double (1e400, or an integer of 5,000 digits) become null: not a
        # statistic, and not valid JSON
        return json.loads(contents[name], parse_constant=lambda _: None, parse_float=_finite, parse_int=_whole)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise TraceError(path, f"{name} in the archive is not valid JSON ({err})") from None
    except RecursionError:
        raise TraceError(path, f"{name} in the archive is nested too deeply to read") from None


def _finite(text: str) -> float | None:
    v = float(text)
    return v if math.isfinite(v) else None


def _whole(text: str) -> int | None:
    """A JSON integer; None past a double's range (never converted whole: Python's int() refuses 4,300 digits)."""
    if len(text.lstrip("-")) > 309:
        return None
    v = int(text)
    return v if abs(v) <= sys.float_info.max else None


def _assemble(path: Path, header: Header, sizes: dict[str, int], contents: dict[str, bytes]) -> Neff:
    notes: list[str] = []
    info = _json(path, contents, "info.json") or {}
    graphs, target = _graphs(path, contents)
    # links and names the debug-info walk may visit, for the whole NEFF: linear in the debug info read
    budget = [WALK_BASE + WALK_PER_BYTE * sum(len(v) for k, v in contents.items() if ".dbg" in k)]
    reads = _Reads(path, contents)
    subgraphs = [_subgraph(path, name, definition, i, sizes, reads, notes, budget)
                 for i, (name, definition) in enumerate(graphs)]
    stats = _json(path, contents, "hlo_stats.json")
    hlo: dict[str, Any] = {}
    if isinstance(stats, dict):
        hlo = {ours: _known(stats.get(theirs)) for theirs, ours in HLO_STATS.items()}
        hlo["raw"] = {k: _known(v) for k, v in stats.items()}
    else:
        notes.append("no hlo_stats.json: HLO statistics unknown")
    return Neff(path=str(path), header=header, compiler_version=_str(info.get("tool_version")), target=target,
                hlo_stats=hlo, subgraphs=subgraphs, members=len(sizes), notes=notes)


def _known(v: Any) -> Any:
    """The compiler writes -1 for a statistic it did not compute."""
    return None if isinstance(v, (int, float)) and v == -1 else v


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _graphs(path: Path, contents: dict[str, bytes]) -> tuple[list[tuple[str, str]], str | None]:
    """(subgraph name, def.json member) in the order the kelf files list them."""
    kelfs = sorted(n for n in contents if PurePosixPath(n).name.startswith("kelf-") and n.endswith(".json"))
    if not kelfs:
        raise TraceError(path, "archive has no kelf-*.json: no subgraph list")
    graphs: list[tuple[str, str]] = []
    target = None
    for k in kelfs:
        doc = _json(path, contents, k)
        if not isinstance(doc, dict) or not isinstance(doc.get("graphs"), list):
            raise TraceError(path, f"{k} in the archive has no 'graphs' list")
        target = target or _str(doc.get("target"))
        for g in doc["graphs"]:
            if not isinstance(g, dict) or not isinstance(g.get("definition"), str):
                raise TraceError(path, f"{k} in the archive lists a graph without a 'definition'")
            graphs.append((str(g.get("name") or g["definition"]), _safe_member_name(path, g["definition"])))
            if len(graphs) > MAX_GRAPHS:
                raise TraceError(path, f"the kelf files list more than {MAX_GRAPHS:,} subgraphs: refused")
    return graphs, target


class _Reads:
    """The archive's members as the subgraphs parse them, each parse counted (a graph listed again and
    again, or many sharing one big member, cannot make the work more than MAX_PARSED bytes)."""

    def __init__(self, path: Path, contents: dict[str, bytes]) -> None:
        self.path, self.contents, self.parsed = path, contents, 0

    def __contains__(self, name: str) -> bool:
        return name in self.contents

    def __getitem__(self, name: str) -> bytes:
        data = self.contents[name]
        self.parsed += len(data)
        if self.parsed > MAX_PARSED:
            raise TraceError(self.path, f"its subgraphs parse more than {MAX_PARSED:,} bytes of members, each "
                                        "counted for every subgraph that reads it: refused")
        return data


def _subgraph(path: Path, name: str, definition: str, index: int, sizes: dict[str, int],
              contents: _Reads, notes: list[str], budget: list[int]) -> Subgraph:
    d = _json(path, contents, definition, required=True)
    if not isinstance(d, dict):
        raise TraceError(path, f"{definition} in the archive is not a JSON object")
    folder = posixpath.dirname(definition)

    def member(f: str) -> str:
        return posixpath.join(folder, f) if folder else f

    engines: list[Engine] = []
    mapping: list[Mapped] = []
    unmapped: dict[str, int] = {}
    for key, instr in d.items():
        if not key.endswith("_instr") or not isinstance(instr, str):
            continue
        eng = key[: -len("_instr")]
        label = PurePosixPath(instr).stem
        asm_files = d.get(f"{eng}_asm_dbg") or []
        asm = member(asm_files[0]) if isinstance(asm_files, list) and asm_files and isinstance(asm_files[0], str) else None
        entries = None
        if asm is not None and asm in contents:
            try:
                entries = _asm_entries(contents[asm])
            except WireError as err:
                notes.append(f"{name}/{label}: assembly debug info unreadable ({err}): instruction count unknown")
        if sizes.get(member(instr)) is None:
            notes.append(f"{name}/{label}: {instr} named in {definition} is not in the archive")
        engines.append(Engine(name=label, file=member(instr), bytes=sizes.get(member(instr)),
                              instructions=len(entries[1]) if entries is not None else None))
        if entries is not None:
            got, missing = _map_engine(label, entries, folder, index, contents, notes, name, budget)
            mapping += got
            if missing:
                unmapped[label] = missing
    raw_queues = d.get("dma_queue")
    queues: dict[str, Any] = raw_queues if isinstance(raw_queues, dict) else {}
    dma = {str(q): int(v.get("num_queues", 0)) for q, v in queues.items()
           if isinstance(v, dict) and isinstance(v.get("num_queues"), int)}
    return Subgraph(name=name, engines=engines, tensors=_tensors(path, contents, member("tensor_map.json")),
                    mapping=mapping, unmapped=unmapped, dma_queues=dma)


def _tensors(path: Path, contents: _Reads, member: str) -> list[Tensor]:
    tmap = _json(path, contents, member)
    if not isinstance(tmap, dict):
        return []
    out = []
    for tname, t in tmap.items():
        if not isinstance(t, dict):
            continue
        shape = t.get("tf_shape") or t.get("sim_shape")
        shape = [int(s) for s in shape] if isinstance(shape, list) and all(isinstance(s, int) for s in shape) else None
        dtype = _str(t.get("dtype"))
        size = math.prod(shape) * ITEMSIZE[dtype] if shape is not None and dtype in ITEMSIZE else None
        kind = _str(t.get("kind")) or ("constant" if t.get("is_const") else "internal")
        out.append(Tensor(name=str(tname), kind=kind, dtype=dtype, shape=shape, bytes=size))
    return out


# --- debug info: asm instruction -> BIR instruction -> Penguin tensor -> HLO instruction -> framework op


@dataclass
class _Entry:
    name: str
    parents: list[int]
    attrs: dict[str, str]


def _parse_level(buf: bytes) -> tuple[str | None, list[_Entry], dict[int, _Entry]]:
    """One debug-info file: (the file its entries point into, entries in order, entries by id).

    Fields as seen in real NEFFs: 2 = next file's name, 3 = entries; an entry has 1 = id, 2 = name,
    3 = ids in the next file, 7 = key/value attributes.
    """
    nxt: str | None = None
    ordered: list[_Entry] = []
    by_id: dict[int, _Entry] = {}
    for num, wire, val in fields(buf):
        if num == 2 and isinstance(val, bytes):
            nxt = val.decode("utf-8", "replace")
        elif num == 3 and isinstance(val, bytes):
            ident, entry = _entry(val)
            ordered.append(entry)
            by_id[ident] = entry
    return nxt, ordered, by_id


def _entry(buf: bytes) -> tuple[int, _Entry]:
    ident, name, parents, attrs = 0, "", [], {}
    for num, wire, val in fields(buf):
        if num == 1 and isinstance(val, int):
            ident = val
        elif num == 2 and isinstance(val, bytes):
            name = val.decode("utf-8", "replace")
        elif num == 3:
            parents += [val] if isinstance(val, int) else packed_varints(val)
        elif num == 7 and isinstance(val, bytes):
            kv = {k: v for k, _, v in fields(val)}
            key, value = kv.get(1), kv.get(2)
            if isinstance(key, bytes) and isinstance(value, bytes):
                attrs[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return ident, _Entry(name, parents, attrs)


def _asm_entries(buf: bytes) -> tuple[str | None, list[_Entry]]:
    nxt, ordered, _ = _parse_level(buf)
    return nxt, ordered


def _find_dbg(contents: _Reads, folder: str, name: str, index: int) -> str | None:
    """A debug file named by another: beside it, else in debug_info/ for this subgraph (or the only one)."""
    for cand in (posixpath.join(folder, name) if folder else name, f"debug_info/{name}_sg{index:06d}",
                 f"debug_info/{name}"):
        if cand in contents:
            return cand
    only = [n for n in contents.contents if n.startswith(f"debug_info/{name}_sg")]
    return only[0] if len(only) == 1 else None


class _Truncated(Exception):
    """The debug-info walk used up its budget."""


class _Walker:
    """Names reached from debug-info entries, memoised per (level, id) so each entry's parents are
    followed once however many instructions share it, within a budget of links and names visited
    shared by the whole NEFF that grows with its debug info's size (so hostile fan-out cannot cost
    N x K, nor many engines naming the same debug files)."""

    def __init__(self, levels: list[tuple[str, dict[int, _Entry]]], budget: list[int]) -> None:
        self.levels = levels
        self.kinds = [next((k for k in ("backend", "pttf", "hlo") if k in fname), None) for fname, _ in levels]
        self.memo: list[dict[int, tuple[frozenset[str], ...]]] = [{} for _ in levels]
        self.budget = budget

    def spend(self, n: int) -> None:
        self.budget[0] -= n
        if self.budget[0] < 0:
            raise _Truncated

    def reach(self, ids: list[int], level: int = 0) -> tuple[frozenset[str], ...]:
        """(backend, hlo, pttf, source) names reached from ``ids`` at ``level`` and below."""
        acc: tuple[set[str], ...] = (set(), set(), set(), set())
        if level >= len(self.levels):
            return _NOTHING
        self.spend(len(ids))
        for i in ids:
            r = self._entry(level, i)
            if r is not _NOTHING:
                self.spend(sum(map(len, r)))
                for a, b in zip(acc, r):
                    a |= b
        return tuple(frozenset(a) for a in acc)

    def _entry(self, level: int, ident: int) -> tuple[frozenset[str], ...]:
        memo = self.memo[level]
        got = memo.get(ident)
        if got is not None:
            return got
        e = self.levels[level][1].get(ident)
        if e is None:
            memo[ident] = _NOTHING
            return _NOTHING
        below = self.reach(e.parents, level + 1) if level + 1 < len(self.levels) else _NOTHING
        own: tuple[set[str], ...] = (set(below[0]), set(below[1]), set(below[2]), set(below[3]))
        kind = self.kinds[level]
        if kind and e.name:
            own[_KIND_SLOT[kind]].add(e.name)
        if kind == "hlo" and e.attrs.get("source_file"):
            line = e.attrs.get("source_line")
            own[3].add(PurePosixPath(e.attrs["source_file"]).name + (f":{line}" if line else ""))
        got = tuple(frozenset(a) for a in own)
        memo[ident] = got
        return got


_KIND_SLOT = {"backend": 0, "hlo": 1, "pttf": 2}
_NOTHING: tuple[frozenset[str], ...] = (frozenset(), frozenset(), frozenset(), frozenset())
WALK_BASE, WALK_PER_BYTE = 2_000_000, 4  # debug-info walk budget: links and names visited


def _map_engine(label: str, asm: tuple[str | None, list[_Entry]], folder: str, index: int,
                contents: _Reads, notes: list[str], sg: str, budget: list[int]) -> tuple[list[Mapped], int]:
    """Group one engine's instructions by the HLO instruction and framework op they come from."""
    levels: list[tuple[str, dict[int, _Entry]]] = []
    nxt = asm[0]
    while nxt and len(levels) < 8:
        found = _find_dbg(contents, folder, nxt, index)
        if found is None:
            notes.append(f"{sg}/{label}: debug info {nxt} not in the archive: mapping stops before it")
            break
        try:
            following, _, by_id = _parse_level(contents[found])
        except WireError as err:
            notes.append(f"{sg}/{label}: {found} unreadable ({err}): mapping stops before it")
            break
        levels.append((nxt, by_id))
        nxt = following
    walker = _Walker(levels, budget)
    groups: dict[tuple[str | None, str | None, str | None], tuple[int, set[str]]] = {}
    missing = 0
    for done, instr in enumerate(asm[1]):
        try:
            backend, hlos, pttf, source = walker.reach(instr.parents)
            walker.spend(len(hlos) + len(pttf) + len(source))
        except _Truncated:
            left = len(asm[1]) - done
            notes.append(f"{sg}/{label}: debug-info walk truncated (it links too many entries): {left:,} of "
                         f"{len(asm[1]):,} instructions not traced, counted as no source")
            missing += left
            break
        if not (backend or hlos or pttf or source):
            missing += 1
            continue
        hlo = " | ".join(sorted(hlos)) or None
        fw = " | ".join(sorted(pttf)) or None
        src = " | ".join(sorted(source)) or None
        n, bir = groups.get((hlo, fw, src), (0, set()))
        groups[(hlo, fw, src)] = (n + 1, bir | backend)
    out = [Mapped(engine=label, instructions=n, hlo=h, framework=f, source=s, bir=sorted(b))
           for (h, f, s), (n, b) in groups.items()]
    return out, missing
