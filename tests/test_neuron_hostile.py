"""Hostile inputs to the Neuron readers: NEFFs beside a trace, NEFF archives, framework mapping files
and neuron-explorer Parquet folders. Each is built here in tmp_path; each must give one line (or a
listed reason), exit code 2 where the command fails, and never a traceback, hang or memory blow-up.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile

import duckdb
import pytest
from conftest import SHARED, trace_path
from test_neff import _archive, _info, _tar, _with_payload
from test_neuron_parquet import _instr, _spe, write_table

from profuse.cli import main
from profuse.errors import TraceError
from profuse.neuron import neff as neff_mod
from profuse.neuron.neff import read_neff
from profuse.trace import load

TRACE = "a100_triton_kernel.json.gz"


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real CLI in a child, so a hang fails the test on the timeout instead of hanging it."""
    return subprocess.run([sys.executable, "-m", "profuse", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_special_neffs_beside_a_trace_are_listed_not_read(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(trace_path(TRACE), folder / "trace.json.gz")
    os.mkfifo(folder / "a.neff")
    (folder / "b.neff").symlink_to("/dev/zero")
    (folder / "c.neff").symlink_to(tmp_path / "missing.neff")
    r = _run(["report", str(folder), "--format", "json"])
    assert r.returncode == 0, r.stderr
    neffs = {n["file"]: n["error"] for n in json.loads(r.stdout)["compiled"]["neffs"]}
    assert neffs == {"a.neff": "is not a regular file (a FIFO)", "b.neff": "is a symbolic link: not followed",
                     "c.neff": "is a symbolic link: not followed"}
    r = _run(["report", str(folder)])
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert r.stdout.count("not read:") == 3


# --- NEFF archives


def _neff(tmp_path, extra: dict[str, bytes], name: str = "x.neff", *, replace: dict[str, bytes] | None = None):
    """The real NEFF's members (some replaced) plus ``extra`` ones, under a valid header."""
    files = {**_archive(), **(replace or {})}
    return _with_payload(tmp_path, _tar([_info(n, d) for n, d in {**files, **extra}.items()]), name)


def _tar_level(members: dict[str, bytes], level: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=level) as tf:
        for n, d in members.items():
            info, data = _info(n, d)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_gzip_bomb_inside_a_neff_is_refused_early(tmp_path, capsys):
    # two 48 MiB members of zeros: about 1,000 to 1 each, each under the per-member read cap
    zeros = bytes(48 << 20)
    payload = _tar_level({**_archive(), "m0.json": zeros, "m1.json": zeros}, 9)
    path = _with_payload(tmp_path, payload, "bomb.neff")
    assert path.stat().st_size < 200_000
    assert main(["neff", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"profuse: {path}:") and "gzip bomb" in err


def test_neff_reads_only_the_members_it_uses(tmp_path, monkeypatch):
    # a big JSON member profuse never uses (an activation table) is skipped, not read
    monkeypatch.setattr(neff_mod, "MAX_READ_MEMBER", 64 << 10)
    unused = json.dumps({"table": "x" * (100 << 10)}).encode()
    n = read_neff(_neff(tmp_path, {"sg00/act_table_big.json": unused}))
    assert [sg.name for sg in n.subgraphs] and n.members == len(_archive()) + 1
    # what it does read is capped in all, with one line
    monkeypatch.setattr(neff_mod, "MAX_READ_TOTAL", 30 << 10)
    padded = json.dumps({**json.loads(_archive()["info.json"]), "pad": "y" * (40 << 10)}).encode()
    with pytest.raises(TraceError, match="exceed 30,720 bytes in all"):
        read_neff(_neff(tmp_path, {}, "big_info.neff", replace={"info.json": padded}))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        if not n:
            return bytes(out + bytes([b]))
        out.append(b | 0x80)


def _ld(field: int, data: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _dbg(next_file: str | None, entries: list[tuple[int, str, list[int]]]) -> bytes:
    """A debug-info file as profuse reads it: 2 = next file, 3 = entry (1 id, 2 name, 3 packed parents)."""
    head = _ld(2, next_file.encode()) if next_file else b""
    return head + b"".join(_ld(3, _varint(1 << 3) + _varint(i) + _ld(2, name.encode())
                                  + _ld(3, b"".join(map(_varint, parents)))) for i, name, parents in entries)


def _fan_out(tmp_path, instructions: int = 1000, fan: int = 50_000):
    """Every PE instruction -> one backend entry -> ``fan`` HLO entries named h0, h1, h2 in turn."""
    return _neff(tmp_path, {}, "fan.neff", replace={
        "sg00/debug_info_asm_PE.dbg": _dbg("debug_info_backend_PE.dbg", [(i, f"i{i}", [0]) for i in range(instructions)]),
        "sg00/debug_info_backend_PE.dbg": _dbg("debug_info_hlo_fan.dbg", [(0, "b", list(range(fan)))]),
        "sg00/debug_info_hlo_fan.dbg": _dbg(None, [(i, f"h{i % 3}", []) for i in range(fan)])})


def test_debug_info_fan_out_is_walked_once_per_entry(tmp_path):
    n = read_neff(_fan_out(tmp_path))
    pe = [m for m in n.subgraphs[0].mapping if m.engine == "PE"]
    assert [(m.instructions, m.hlo, m.bir) for m in pe] == [(1000, "h0 | h1 | h2", ["b"])]
    assert "PE" not in n.subgraphs[0].unmapped and not any("truncated" in x for x in n.notes)


def test_debug_info_walk_over_budget_says_truncated(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(neff_mod, "WALK_BASE", 0)
    monkeypatch.setattr(neff_mod, "WALK_PER_BYTE", 0)
    path = _fan_out(tmp_path, instructions=50, fan=2_000)
    n = read_neff(path)
    sg = n.subgraphs[0]
    pe = next(e for e in sg.engines if e.name == "PE")
    assert pe.instructions == 50
    assert sum(m.instructions for m in sg.mapping if m.engine == "PE") + sg.unmapped["PE"] == 50
    assert any("sg00/PE: debug-info walk truncated" in x for x in n.notes)
    assert main(["neff", str(path)]) == 0
    assert "truncated" in capsys.readouterr().out


# --- neuron-explorer Parquet folders


def test_parquet_folder_named_like_a_glob_reads_only_itself(tmp_path):
    star, other = tmp_path / "gl*", tmp_path / "glX"
    for folder, rows in ((star, [_instr(1, 100, 10, "PE", "STAR")]),
                         (other, [_instr(1, 100, 10, "PE", "X"), _instr(2, 200, 10, "PE", "X")])):
        folder.mkdir()
        write_table(folder, "Instruction", rows)
    for folder, want in ((star, [("STAR",)]), (other, [("X",), ("X",)])):
        t = load(folder)
        try:
            assert t.con.execute("SELECT name FROM events WHERE kind = 'kernel' ORDER BY id").fetchall() == want
        finally:
            t.close()


HOSTILE = "[/] [bold red]PWNED[/] \x1b]0;TITLE\x07\x1b[2J\u202e"


def _hostile_names(tmp_path):
    files = _archive()
    kelf = json.loads(files["kelf-0.json"])
    kelf["graphs"][0]["name"] = HOSTILE
    tmap = json.loads(files["sg00/tensor_map.json"])
    first = next(iter(tmap))
    tmap[first].update(kind=HOSTILE, dtype="[/]")
    tmap[HOSTILE] = {"dtype": "float32", "tf_shape": [2, 3]}
    return _neff(tmp_path, {}, "markup.neff", replace={"kelf-0.json": json.dumps(kelf).encode(),
                                                        "sg00/tensor_map.json": json.dumps(tmap).encode()})


def test_neff_strings_are_shown_as_text_not_markup_or_escapes(tmp_path, capsys):
    assert main(["neff", str(_hostile_names(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "subgraph [/] [bold red]PWNED[/] \\x1b]0;TITLE\\x07\\x1b[2J\\u202e" in out  # literally, escaped
    for name in ("[/]", "[/bold]"):
        kelf = json.loads(_archive()["kelf-0.json"])
        kelf["graphs"][0]["name"] = name
        assert main(["neff", str(_neff(tmp_path, {}, "n.neff", replace={"kelf-0.json": json.dumps(kelf).encode()}))]) == 0
        assert f"subgraph {name}: engines" in capsys.readouterr().out


def test_parquet_names_in_the_report_are_text(tmp_path, capsys):
    folder = tmp_path / "pq"
    folder.mkdir()
    write_table(folder, "Instruction", [_instr(1, 100, 10, "PE", HOSTILE)])
    assert main(["report", str(folder), "--group-by", "kernel"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "[/] [bold red]PWNED[/] \\x1b]0;TITLE" in out
    assert main(["sql", str(folder), "SELECT name FROM events"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "[/] [bold red]PWNED[/] \\x1b]0;TITLE" in out


# --- values that used to raise: one line naming the file, exit 2 (or shown as unknown)


def _one_line(capsys, path) -> str:
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if not x.startswith("profuse: note:")]
    assert len(lines) == 1 and "Traceback" not in err and lines[0].startswith(f"profuse: {path}"), err
    return lines[0]


def test_non_numeric_hlo_stats_show_as_unknown(tmp_path, capsys):
    stats = json.dumps({"HloMacCount": "lots", "Traffic": [1], "ArithmeticIntensity": {"a": 1}}).encode()
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(trace_path(TRACE), folder / "trace.json.gz")
    _neff(folder, {}, "neff_1.neff", replace={"hlo_stats.json": stats})
    assert main(["neff", str(folder / "neff_1.neff")]) == 0
    assert "MACs unknown (not a number: 'lots')" in capsys.readouterr().out
    assert main(["report", str(folder)]) == 0
    assert "HLO MACs unknown (not a number: 'lots') · traffic unknown (not a number: [1])" in capsys.readouterr().out


def test_deeply_nested_json_is_one_line(tmp_path, capsys):
    deep = b"[" * 100_000 + b"]" * 100_000
    path = _neff(tmp_path, {}, "deep.neff", replace={"hlo_stats.json": deep})
    assert main(["neff", str(path)]) == 2
    assert "hlo_stats.json in the archive is nested too deeply" in _one_line(capsys, path)
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(trace_path(TRACE), folder / "trace.json.gz")
    (folder / "framework_mapping_0.json").write_bytes(deep)
    assert main(["report", str(folder)]) == 2
    assert "nested too deeply" in _one_line(capsys, folder / "framework_mapping_0.json")
    # a Parquet row's extra_attributes_json nested as deep: no category, like any unreadable JSON
    pq = tmp_path / "pq"
    pq.mkdir()
    write_table(pq, "SystemProfileEvents", [_spe(1, "op", 0, 10, "framework", 7, extra=deep.decode())])
    t = load(pq)
    try:
        assert t.con.execute("SELECT kind, cat FROM events").fetchall() == [("cpu_op", "framework")]
    finally:
        t.close()


def test_superscript_digits_are_not_sequence_ids(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(trace_path(TRACE), folder / "trace.json.gz")
    (folder / "framework_mapping_0.json").write_text(json.dumps(
        [{"nrt_sequence_id": "²", "seq": 1}, {"nrt_sequence_id": "1", "seq": "١"}, {"nrt_sequence_id": "-3", "seq": 2}]))
    t = load(folder)
    try:
        assert t.framework_mapping["rows"] == 1 and t.framework_mapping["skipped"] == 2
        assert t.con.execute("SELECT runtime_seq, seq FROM framework_mapping").fetchall() == [(-3, 2)]
    finally:
        t.close()
    r = _run(["report", str(folder)])
    assert r.returncode == 0 and "profuse: note: 2 framework_mapping record(s) skipped" in r.stderr


@pytest.mark.parametrize("column_type, value, want", [
    ("VARCHAR", "abc", "column 'start_ts' is VARCHAR, not an integer"),
    ("BIGINT[]", [1, 2], "column 'start_ts' is BIGINT[], not an integer"),
    ("DOUBLE", float("inf"), "column 'start_ts' is DOUBLE, not an integer"),
    ("BIGINT", 9223372036854775000, "1 row(s) have start_ts beyond ±2^62"),
    ("BIGINT", (1 << 62) - 5, "1 row(s) have start_ts + duration_ns beyond ±2^62"),
])
def test_parquet_column_types_and_ranges_are_checked(tmp_path, capsys, column_type, value, want):
    folder = tmp_path / "pq"
    folder.mkdir()
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t (id BIGINT, start_ts {column_type}, duration_ns BIGINT, engine VARCHAR, "
                "opcode VARCHAR)")
    con.execute("INSERT INTO t VALUES (1, ?, 10, 'PE', 'MATMUL')", [value])
    con.execute("COPY t TO ? (FORMAT parquet)".replace("?", "'" + str(folder / "Instruction.parquet") + "'"))
    con.close()
    assert main(["report", str(folder)]) == 2
    assert want in _one_line(capsys, folder / "Instruction.parquet")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_framework_mapping_links_and_fifos_are_refused_not_followed(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(trace_path(TRACE), folder / "trace.json.gz")
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps([{"nrt_sequence_id": 1, "seq": 1}]))
    mapping = folder / "framework_mapping_0.json"
    mapping.symlink_to(elsewhere)
    r = _run(["report", str(folder)])
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == (
        f"profuse: {mapping}: is a symbolic link: not followed: move it away to load the trace")
    mapping.unlink()
    os.mkfifo(mapping)  # nobody writes: a blocking read would hang the load
    r = _run(["report", str(folder)])
    assert r.returncode == 2 and "is not a regular file (a FIFO)" in r.stderr and "Traceback" not in r.stderr


def test_folder_with_a_kineto_trace_and_parquet_reads_the_trace(tmp_path):
    folder = tmp_path / "mix"
    folder.mkdir()
    with gzip.open(trace_path(TRACE)) as fh:
        raw = fh.read()
    (folder / "run.pt.trace.json").write_bytes(raw)
    write_table(folder, "Instruction", [_instr(1, 100, 10, "PE", "MATMUL")])
    want = sum(1 for e in json.loads(raw)["traceEvents"] if e.get("ph") == "X")
    t = load(folder)
    try:
        assert t.path == folder / "run.pt.trace.json"
        assert t.con.execute("SELECT count(*) FROM events WHERE name = 'MATMUL'").fetchall() == [(0,)]
        assert t.con.execute("SELECT count(*) FROM events").fetchall()[0][0] == want > 0
    finally:
        t.close()


# --- profuse neff's options


def test_neff_output_file_top_and_non_finite_statistics(tmp_path, capsys):
    stats = b'{"HloMacCount": NaN, "Traffic": Infinity, "ArithmeticIntensity": 1e400, "HloInputCount": -Infinity}'
    path = _neff(tmp_path, {}, "nan.neff", replace={"hlo_stats.json": stats})
    out = tmp_path / "nan.json"
    assert main(["neff", str(path), "--format", "json", "-o", str(out)]) == 0

    def refuse(const: str) -> None:
        raise AssertionError(f"{const} is not JSON")

    doc = json.loads(out.read_text(), parse_constant=refuse)
    assert doc["hlo_stats"]["macs"] is None and doc["hlo_stats"]["traffic"] is None
    assert doc["hlo_stats"]["arithmetic_intensity"] is None
    assert doc["hlo_stats"]["raw"] == dict.fromkeys(("HloMacCount", "Traffic", "ArithmeticIntensity", "HloInputCount"))
    # the table goes to -o too, as plain text, and nothing to stdout
    table = tmp_path / "nan.txt"
    capsys.readouterr()
    assert main(["neff", str(path), "-o", str(table)]) == 0
    assert capsys.readouterr().out == ""
    text = table.read_text()
    assert text.startswith(f"{path}\n") and "MACs unknown" in text and "\x1b" not in text
    # --top counts rows: a negative count is a usage error, not one row fewer
    with pytest.raises(SystemExit) as exc:
        main(["neff", str(path), "--top", "-1"])
    assert exc.value.code == 2 and "0 or more" in capsys.readouterr().err


def test_neff_path_that_is_a_folder_or_empty_file_is_one_line(tmp_path):
    # a folder given as the NEFF, a link to a real NEFF (a path the user typed may be one), an empty file
    (tmp_path / "d.neff").mkdir()
    (tmp_path / "empty.neff").write_bytes(b"")
    real = SHARED / "neuron" / "matmul_small.neff"
    (tmp_path / "link.neff").symlink_to(real)
    r = _run(["neff", str(tmp_path / "d.neff")])
    assert r.returncode == 2 and r.stderr.strip() == f"profuse: {tmp_path / 'd.neff'}: is not a regular file (a folder)"
    r = _run(["neff", str(tmp_path / "empty.neff")])
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = _run(["neff", str(tmp_path / "link.neff"), "--format", "json"])
    assert r.returncode == 0 and json.loads(r.stdout)["schema"] == json.loads(
        _run(["neff", str(real), "--format", "json"]).stdout)["schema"]
