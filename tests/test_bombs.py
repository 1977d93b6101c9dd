"""Memory bombs: small files that stand for enormous work are refused early, with one line, in bounded
time and memory (issue 45). Each bomb is built here, small on disk, and read by the real CLI in a child
process under a 4 GiB address-space limit, so a blow-up fails the test instead of the machine.
"""
from __future__ import annotations

import json
import os
import pickle
import resource
import subprocess
import sys
import time
from pathlib import Path

import duckdb
from test_memory_snapshot import snapshot
from test_neff import _archive
from test_neuron_hostile import _neff

AS_LIMIT = 4 << 30
BOUND_S = 20.0  # generous: the point is seconds, not minutes


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def _run(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """The real CLI in a child under the address-space limit; its result and how long it took."""
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "profuse", *args], capture_output=True, text=True, timeout=120,
                       preexec_fn=_limit_memory, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return r, time.monotonic() - start


def _refused(r: subprocess.CompletedProcess[str], took: float, path: Path, problem: str) -> None:
    lines = r.stderr.splitlines()
    assert r.returncode == 2, r.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"profuse: {path}:") and problem in lines[0], r.stderr[-2000:]
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert took < BOUND_S, took


def test_snapshot_whose_frames_are_shared_a_million_times_is_refused_at_once(tmp_path):
    # GIVEN a 2 MB snapshot pickle: one entry with 99 frames, listed 10^6 times (shared references), so it
    # stands for 10^8 frames (within the old fixed cap of 10^8; 67 s and 7.5 GB, then a MemoryError)
    frames = [{"filename": f"/home/u/m{i}.py", "line": i, "name": f"f{i}"} for i in range(99)]
    entry = {"action": "alloc", "addr": 1, "size": 8, "stream": 0, "time_us": 1, "frames": frames}
    path = tmp_path / "bomb.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[entry] * 1_000_000]}, protocol=4))
    assert path.stat().st_size < 2_100_000
    # WHEN profuse reports it under a 4 GiB address-space limit
    r, took = _run("report", str(path), "--format", "json")
    # THEN one line naming the file and what it stands for, exit 2, in seconds
    _refused(r, took, path, "stand for more than")


def test_a_small_snapshot_reads_under_a_4gib_address_space_limit(tmp_path):
    # GIVEN a snapshot of a few KB (the read used to allocate a buffer of the 4 GiB size cap up front)
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(snapshot()))
    # WHEN it is reported under the limit
    r, took = _run("report", str(path), "--format", "json")
    assert took < BOUND_S
    # THEN it reads: the peak is 512 B before the history + 1 KiB + 4 KiB (the test's own construction)
    assert r.returncode == 0, r.stderr[-2000:]
    (dev,) = json.loads(r.stdout)["memory"]["devices"]
    assert dev["peak_allocated_bytes"] == 512 + 1024 + 4096


def test_parquet_with_five_million_instruction_rows_is_refused_before_reading(tmp_path):
    # GIVEN a neuron-explorer folder whose Instruction table holds 5 x 10^6 rows (a few MB on disk:
    # every column but the id repeats; materialised, they needed 5.6 GB)
    folder = tmp_path / "explorer"
    folder.mkdir()
    con = duckdb.connect()
    con.execute(f"""COPY (SELECT i AS id, 1700000000000000000 AS start_ts, 1700000000000000005 AS end_ts,
                   5::BIGINT AS duration_ns, 'PE' AS engine, 'MATMUL' AS opcode, '' AS operands, i AS pc,
                   'sg0000:1' AS bir_id, 'dot.1' AS hlo_name FROM range(5000000) t(i))
                   TO '{folder / "Instruction.parquet"}' (FORMAT parquet)""")
    con.close()
    assert (folder / "Instruction.parquet").stat().st_size < 64 << 20
    # WHEN profuse reports the folder under the limit
    r, took = _run("report", str(folder))
    # THEN one line naming the table's file and its row count, exit 2, in seconds
    _refused(r, took, folder / "Instruction.parquet", "5,000,000 rows")


def test_neff_listing_its_graph_100000_times_is_refused(tmp_path):
    # GIVEN the real NEFF with its kelf file listing its one graph 100,000 times (did not finish in 120 s)
    kelf = json.loads(_archive()["kelf-0.json"])
    kelf["graphs"] = kelf["graphs"][:1] * 100_000
    path = _neff(tmp_path, {}, "copies.neff", replace={"kelf-0.json": json.dumps(kelf).encode()})
    # WHEN profuse reads it under the limit
    r, took = _run("neff", str(path))
    # THEN one line, exit 2, in seconds
    _refused(r, took, path, "more than 1,024 subgraphs")


def test_neff_whose_subgraphs_parse_a_member_again_and_again_is_refused(tmp_path, monkeypatch):
    # GIVEN what the real NEFF's two subgraphs parse, measured, as the parse cap
    from profuse.errors import TraceError
    from profuse.neuron import neff as neff_mod

    seen: list[int] = []

    class Counting(neff_mod._Reads):
        def __getitem__(self, name: str) -> bytes:
            data = super().__getitem__(name)
            seen.append(self.parsed)
            return data

    monkeypatch.setattr(neff_mod, "_Reads", Counting)
    real = _neff(tmp_path, {}, "real.neff")
    assert [sg.name for sg in neff_mod.read_neff(real).subgraphs] == ["sg00", "sg01"]
    monkeypatch.setattr(neff_mod, "MAX_PARSED", max(seen))
    assert [sg.name for sg in neff_mod.read_neff(real).subgraphs] == ["sg00", "sg01"]  # at the cap: read
    # WHEN a NEFF lists its first graph 8 times (each listing parses its members again)
    kelf = json.loads(_archive()["kelf-0.json"])
    kelf["graphs"] = kelf["graphs"][:1] * 8
    path = _neff(tmp_path, {}, "again.neff", replace={"kelf-0.json": json.dumps(kelf).encode()})
    # THEN it is refused, naming the file
    try:
        neff_mod.read_neff(path)
    except TraceError as err:
        assert str(path) in str(err) and "parse more than" in str(err)
    else:
        raise AssertionError("a NEFF parsing its members 8 times over the cap was read")


def test_integers_of_5000_digits_are_no_traceback(tmp_path):
    # GIVEN a framework-mapping file beside a real trace whose one record has a 5000-digit op sequence
    # number (Python's int() refuses past 4300 digits), beside a usable record
    from conftest import trace_path

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "trace.json.gz").write_bytes(trace_path("a100_triton_kernel.json.gz").read_bytes())
    (folder / "framework_mapping_0.json").write_text(
        '[{"nrt_sequence_id": 1, "op_sequence_number": ' + "9" * 5000 + '}, '
        '{"nrt_sequence_id": 2, "op_sequence_number": ' + "9" * 30 + '}, {"nrt_sequence_id": 3, "seq": 5}]')
    # WHEN the folder is reported
    r, _ = _run("report", str(folder), "--format", "json", "--no-cache")
    # THEN the two records whose numbers are no 64-bit id are skipped and counted, the other read
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "2 framework_mapping record(s) skipped" in r.stderr
    # AND a NEFF whose hlo_stats.json holds a 5000-digit integer shows it as unknown, as it does 1e400
    stats = ('{"HloMacCount": ' + "7" * 5000 + ', "Traffic": 12}').encode()
    neff = _neff(tmp_path, {}, "digits.neff", replace={"hlo_stats.json": stats})
    r, _ = _run("neff", str(neff), "--format", "json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    hlo = json.loads(r.stdout)["hlo_stats"]
    assert hlo["macs"] is None and hlo["traffic"] == 12


def test_a_snapshot_within_the_row_limit_that_memory_cannot_hold_is_one_line(tmp_path):
    # GIVEN a 2 MB snapshot whose one entry (7 frames) is listed 10^6 times: 8 M rows, within its row limit,
    # read under a 1.5 GB address-space limit (found by review: numpy's MemoryError reached the user)
    frames = [{"filename": f"f{i}.py", "name": f"fn{i}", "line": i} for i in range(7)]
    entries = [{"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "frames": frames}] * 1_000_000
    path = tmp_path / "wide.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [entries]}))
    proc = subprocess.run([sys.executable, "-c", "import resource, sys\n"
                           "resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))\n"
                           "from profuse.cli import main\nsys.exit(main(sys.argv[1:]))", "report", str(path)],
                          capture_output=True, text=True, timeout=120)
    # THEN it reads, or it is refused in one line naming the file: never a traceback
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode == 0 or (proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
                                    and str(path) in proc.stderr), proc.stderr
