"""``profuse neff`` on the real compiled NEFF in tests/data/neuron, and on damaged copies of it.

Expected values are read here straight from the file with tarfile, json and a few lines of protobuf
wire decoding, never from a previous run of profuse.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED

from profuse.cli import main
from profuse.errors import TraceError
from profuse.neuron import neff as neff_mod
from profuse.neuron.neff import read_neff

NEFF = SHARED / "neuron" / "matmul_small.neff"


def _archive() -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(NEFF.read_bytes()[1024:]), mode="r:gz") as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}


def _count_field3(buf: bytes) -> int:
    """Top-level field-3 entries of a protobuf message (the asm debug info has one per instruction)."""
    def varint(i: int) -> tuple[int, int]:
        v = s = 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << s
            s += 7
            if b < 0x80:
                return v, i
    i = n = 0
    while i < len(buf):
        key, i = varint(i)
        if key & 7 == 0:
            _, i = varint(i)
        else:
            assert key & 7 == 2
            ln, i = varint(i)
            i += ln
        n += key >> 3 == 3
    return n


def test_header_and_hlo_stats_match_the_file() -> None:
    import profuse

    raw = NEFF.read_bytes()
    files = _archive()
    stats = json.loads(files["hlo_stats.json"])
    n = profuse.read_neff(NEFF)
    assert n.header.header_size == 1024
    assert n.header.data_size == len(raw) - 1024 == struct.unpack_from("<Q", raw, 16)[0]
    # packaging 2 keeps an MD5 of the payload, written as four little-endian 32-bit words
    md5 = hashlib.md5(raw[1024:]).digest()
    assert n.header.checksum_ok is True
    assert bytes.fromhex(n.header.checksum) == b"".join(md5[i:i + 4][::-1] for i in range(0, 16, 4))
    assert n.header.name == json.loads(files["info.json"])["name"]
    assert n.compiler_version == json.loads(files["info.json"])["tool_version"]
    assert n.hlo_stats["macs"] == stats["HloMacCount"] == 128 * 256 * 128  # the matmul's shape, from neff.json
    assert n.hlo_stats["traffic"] == stats["Traffic"]
    assert n.hlo_stats["arithmetic_intensity"] == stats["ArithmeticIntensity"]
    assert n.hlo_stats["raw"]["HloInputCount"] is None  # -1 in the file: not computed


def test_subgraphs_engines_and_tensors_match_the_archive() -> None:
    files = _archive()
    kelf = json.loads(files["kelf-0.json"])
    n = read_neff(NEFF)
    assert [s.name for s in n.subgraphs] == [g["name"] for g in kelf["graphs"]]
    with tarfile.open(fileobj=io.BytesIO(NEFF.read_bytes()[1024:]), mode="r:gz") as tf:
        sizes = {m.name: m.size for m in tf.getmembers()}
    for sg, g in zip(n.subgraphs, kelf["graphs"]):
        folder = g["definition"].rsplit("/", 1)[0]
        d = json.loads(files[g["definition"]])
        want = {}
        for key, instr in d.items():
            if key.endswith("_instr"):
                asm = files[f"{folder}/{d[key[:-6] + '_asm_dbg'][0]}"]
                want[instr[:-4]] = (sizes[f"{folder}/{instr}"], _count_field3(asm))
        got = {e.name: (e.bytes, e.instructions) for e in sg.engines}
        assert got == want
        assert set(got) == {"PE", "Activation", "DVE", "Pool", "SP"}
        tmap = json.loads(files[f"{folder}/tensor_map.json"])
        assert {t.name: (t.shape, t.bytes) for t in sg.tensors} == {
            k: (v["tf_shape"], math.prod(v["tf_shape"]) * np.dtype(v["dtype"]).itemsize) for k, v in tmap.items()}
        # every instruction is either traced to a source or counted as unmapped: none dropped
        for e in sg.engines:
            mapped = sum(r.instructions for r in sg.mapping if r.engine == e.name)
            assert mapped + sg.unmapped.get(e.name, 0) == e.instructions


def test_debug_info_maps_matmul_instructions_to_the_dot() -> None:
    files = _archive()
    n = read_neff(NEFF)
    assert b"hlo__dot_op0" in files["debug_info/debug_info_pttf.dbg_sg000000"]
    assert b"%op0 = dot(%x, %y)" in files["debug_info/debug_info_hlo.dbg_sg000000"]
    pe = [r for r in n.subgraphs[0].mapping if r.engine == "PE" and r.hlo == "%op0 = dot(%x, %y)"]
    assert len(pe) == 1 and pe[0].framework == "hlo__dot_op0" and pe[0].instructions > 0
    # the BIR names it lists are the ones in the PE backend debug info
    assert all(name.encode() in files["sg00/debug_info_backend_PE.dbg"] for name in pe[0].bir)


def test_cli_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    stats = json.loads(_archive()["hlo_stats.json"])
    assert main(["neff", str(NEFF)]) == 0
    out = capsys.readouterr().out
    assert f"MACs {stats['HloMacCount']:,}" in out and "PE" in out and "hlo__dot_op0" in out
    assert main(["neff", str(NEFF), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "profuse.neff/1"
    assert doc["hlo_stats"]["macs"] == stats["HloMacCount"]


# --- damaged and hostile NEFFs: one line, exit 2, nothing written


def _with_payload(tmp_path: Path, payload: bytes, name: str = "x.neff") -> Path:
    """A NEFF with the real header, its size and MD5 rewritten for ``payload``."""
    head = bytearray(NEFF.read_bytes()[:1024])
    struct.pack_into("<Q", head, 16, len(payload))
    md5 = hashlib.md5(payload).digest()
    head[172:188] = b"".join(md5[i:i + 4][::-1] for i in range(0, 16, 4))
    out = tmp_path / name
    out.write_bytes(bytes(head) + payload)
    return out


def _tar(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buf.getvalue()


def _info(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, len(data) if kind == tarfile.REGTYPE else 0
    if kind == tarfile.SYMTYPE:
        info.linkname = "/etc/passwd"
    return info, data


def _cases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    raw = NEFF.read_bytes()
    cases: dict[str, tuple[Path, str]] = {}

    def put(name: str, data: bytes, want: str) -> None:
        p = tmp_path / f"{name}.neff"
        p.write_bytes(data)
        cases[name] = (p, want)

    put("truncated", raw[:-100], "truncated")
    put("short", raw[:500], "too short")
    put("empty", b"", "too short")
    flipped = bytearray(raw)
    flipped[5000] ^= 0xFF
    put("flipped", bytes(flipped), "MD5")
    bad_size = bytearray(raw)
    struct.pack_into("<Q", bad_size, 8, 2048)
    put("header_size", bytes(bad_size), "not a NEFF")
    put("trailing", raw + b"\0" * 10, "trailing bytes")
    cases["not_gzip"] = (_with_payload(tmp_path, b"hello" * 100, "not_gzip.neff"), "not a readable tar.gz")
    cases["traversal"] = (_with_payload(tmp_path, _tar([_info("../evil.json", b"{}")]), "traversal.neff"),
                          "outside the archive")
    cases["absolute"] = (_with_payload(tmp_path, _tar([_info("/tmp/evil.json", b"{}")]), "absolute.neff"),
                         "outside the archive")
    cases["symlink"] = (_with_payload(tmp_path, _tar([_info("kelf-0.json", kind=tarfile.SYMTYPE)]), "symlink.neff"),
                        "link or device")
    cases["no_kelf"] = (_with_payload(tmp_path, _tar([_info("info.json", b"{}")]), "no_kelf.neff"), "kelf")
    cases["bad_json"] = (_with_payload(tmp_path, _tar([_info("kelf-0.json", b"{nope")]), "bad_json.neff"),
                         "not valid JSON")
    gz_cut = gzip.compress(b"x" * 4096)[:-20]
    cases["gzip_cut"] = (_with_payload(tmp_path, gz_cut, "gzip_cut.neff"), "not a readable tar.gz")
    return cases


def test_damaged_neffs_get_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = _cases(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    for name, (path, want) in cases.items():
        assert main(["neff", str(path)]) == 2, name
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "Traceback" not in err, (name, err)
        assert err.startswith(f"profuse: {path}:") and want in err, (name, err)
    # read in memory: nothing was extracted beside the files or above them
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not (tmp_path.parent / "evil.json").exists()


def test_oversized_member_is_refused_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = json.dumps({"graphs": [], "pad": "x" * 5000}).encode()
    path = _with_payload(tmp_path, _tar([_info("kelf-0.json", big)]))
    monkeypatch.setattr(neff_mod, "MAX_READ_MEMBER", 4096)
    with pytest.raises(TraceError, match="too large to read"):
        read_neff(path)
    monkeypatch.setattr(neff_mod, "MAX_ARCHIVE", 1000)
    with pytest.raises(TraceError, match="refused"):
        read_neff(path)


def _rebuilt(tmp_path: Path, keep, name: str, *, packaging: int = 2) -> Path:
    """The real NEFF's archive with only the members ``keep`` accepts, under a valid header."""
    with tarfile.open(fileobj=io.BytesIO(NEFF.read_bytes()[1024:]), mode="r:gz") as tf:
        members = [(m, tf.extractfile(m).read() if m.isfile() else b"") for m in tf.getmembers() if keep(m.name)]
    payload = _tar([(m, data) for m, data in members])
    path = _with_payload(tmp_path, payload, name)
    if packaging == 1:
        raw = bytearray(path.read_bytes())
        struct.pack_into("<Q", raw, 0, 1)
        raw[172:204] = hashlib.sha256(payload).digest()
        path.write_bytes(bytes(raw))
    return path


def test_without_debug_info_counts_are_unknown_not_guessed(tmp_path: Path, capsys) -> None:
    path = _rebuilt(tmp_path, lambda n: ".dbg" not in n, "nodebug.neff")
    n = read_neff(path)
    files = _archive()
    for sg in n.subgraphs:
        assert {e.name: e.instructions for e in sg.engines} == dict.fromkeys(("PE", "Activation", "DVE", "Pool", "SP"))
        assert all(e.bytes == len(files[e.file]) for e in sg.engines)  # sizes still known
        assert sg.mapping == [] and sg.unmapped == {}
    assert main(["neff", str(path)]) == 0
    assert "unknown" in capsys.readouterr().out


def test_packaging_1_sha256_is_checked_but_a_mismatch_only_reported(tmp_path: Path) -> None:
    path = _rebuilt(tmp_path, lambda n: True, "sha.neff", packaging=1)
    assert read_neff(path).header.checksum_ok is True
    raw = bytearray(path.read_bytes())
    raw[180] ^= 0xFF  # the stored digest, not the payload
    path.write_bytes(bytes(raw))
    h = read_neff(path).header
    assert h.packaging == "tar.gz + SHA-256" and h.checksum_ok is False


def test_fifo_or_folder_is_refused_without_reading(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    fifo = tmp_path / "pipe.neff"
    os.mkfifo(fifo)  # nobody writes to it: reading would block forever
    assert main(["neff", str(fifo)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(fifo) in err and "regular file" in err
    assert main(["neff", str(tmp_path)]) == 2
    assert "folder" in capsys.readouterr().err
