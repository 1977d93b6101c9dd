"""``profuse report FOLDER`` on neuron-explorer Parquet output, built from the published schema.

No real neuron-explorer output is public. Every fixture table here is written by DuckDB with exactly
the columns and types that tests/data/neuron/profile-schema-reference_v7.4.0.rst documents for it
(parsed from that file by this test), filled with a small profile whose expected numbers follow from
the rows written: two framework ops, the runtime calls they made, instructions and a DMA packet.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest
from conftest import SHARED

from profuse.cli import main
from profuse.trace import load

SCHEMA = SHARED / "neuron" / "profile-schema-reference_v7.4.0.rst"
TYPES = {"integer (int64)": "BIGINT", "integer (int32)": "INTEGER", "string": "VARCHAR", "number (float)": "FLOAT",
         "number (double)": "DOUBLE", "boolean": "BOOLEAN", "array of string": "VARCHAR[]",
         "array of integer (int64)": "BIGINT[]"}


def documented_columns(table: str) -> list[tuple[str, str, bool]]:
    """(field, DuckDB type, required) of a table, in the order the schema reference lists them."""
    text = SCHEMA.read_text()
    start = text.index(f"\n{table}\n{'~' * len(table)}\n")
    end = text.find("\n.. _profile-schema-", start)
    rows = re.findall(r"\* - ``(\w+)``\n\s+- ([^\n]+)\n\s+- [^\n]*\n\s+- (Yes|No)", text[start:end])
    assert rows, table
    return [(name, TYPES.get(re.sub(r" \(:ref:.*", "", typ).strip(), "VARCHAR"), req == "Yes")
            for name, typ, req in rows]


def write_table(folder: Path, table: str, rows: list[dict]) -> None:
    """A Parquet file with every documented column of ``table``; unset fields NULL."""
    cols = documented_columns(table)
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t ({', '.join(f'{n} {t}' for n, t, _ in cols)})")
    for r in rows:
        unknown = set(r) - {n for n, _, _ in cols}
        assert not unknown, f"{table} has no documented field {unknown}"
        con.execute(f"INSERT INTO t VALUES ({', '.join('?' for _ in cols)})", [r.get(n) for n, _, _ in cols])
    con.execute(f"COPY t TO '{folder / (table + '.parquet')}' (FORMAT parquet)")
    con.close()


def _spe(i, name, start, end, source, tid, flow=None, extra=None):
    return {"id": i, "name": name, "start_ts": start, "end_ts": end, "duration_ns": end - start,
            "trace_event_source": source, "instance_id": "i-0", "process_id": 4242, "thread_id": tid,
            "nc_idx": 0, "flow_id": flow, "extra_attributes_json": extra}


def _instr(i, start, dur, engine, opcode):
    return {"start_ts": start, "end_ts": start + dur, "duration_ns": dur, "engine": engine, "opcode": opcode,
            "operands": "", "id": i, "pc": i, "bir_id": f"sg0000:{i}", "hlo_name": "dot.1"}


T0 = 1_700_000_000_000_000_000


@pytest.fixture
def profile(tmp_path: Path) -> tuple[Path, dict]:
    folder = tmp_path / "explorer_out"
    folder.mkdir()
    spe = [
        # thread 10: aten::matmul dispatches through a flow to nrt_execute on runtime thread 20
        _spe(1, "aten::matmul", T0, T0 + 10_000, "framework", 10, ["100"]),
        _spe(2, "nrt_execute", T0 + 1_000, T0 + 9_000, "neuron_rt", 20, ["100"]),
        # aten::add calls the runtime on its own thread (no flow): linked by nesting
        _spe(3, "aten::add", T0 + 12_000, T0 + 20_000, "framework", 10),
        _spe(4, "nrt_execute", T0 + 13_000, T0 + 19_000, "neuron_rt", 10),
        # a driver call the framework recorded: a runtime row, not an op
        _spe(5, "neuron_driver_submit", T0 + 12_500, T0 + 12_900, "framework", 10,
             extra=json.dumps({"cat": "privateuse1_driver"})),
        _spe(6, "exec", T0 + 1_500, T0 + 8_500, "neuron_hw", 0),
    ]
    instr = [_instr(1, T0 + 2_000, 700, "tensor", "MATMUL"), _instr(2, T0 + 2_100, 300, "vector", "TENSOR_TENSOR"),
             _instr(3, T0 + 8_000, 400, "tensor", "MATMUL"), _instr(4, T0 + 14_000, 900, "scalar", "ACTIVATE"),
             _instr(5, T0 + 50_000, 100, "tensor", "MATMUL")]  # after every runtime call: not linked
    dma = [{"start_ts": T0 + 3_000, "end_ts": T0 + 3_250, "duration_ns": 250, "id": 1, "packet_idx": 0,
            "packet_aggregation_id": 0, "read_bytes": 4096, "write_bytes": 4096, "transfer_bytes": 4096,
            "throughput": 16.0, "queue_type": "INPUT", "queue_name": "qSPDynamicHW", "queue_idx": 2, "crc": 0}]
    write_table(folder, "SystemProfileEvents", spe)
    write_table(folder, "Instruction", instr)
    write_table(folder, "DmaPacket", dma)
    write_table(folder, "Metadata", [{"profile_schema_version": "7.4.0", "instance_type": "trn2.48xlarge"}])
    expected = {
        "aten::matmul": (700 + 300 + 400 + 250) / 1e3,  # instructions 1-3 and the DMA inside nrt_execute #2
        "aten::add": 900 / 1e3,
        "device_us": (700 + 300 + 400 + 900 + 100 + 250) / 1e3,
        "kernels": len(instr) + len(dma), "linked": len(instr) + len(dma) - 1,
    }
    return folder, expected


def test_schema_is_parsed_from_the_reference() -> None:
    cols = {n: (t, r) for n, t, r in documented_columns("SystemProfileEvents")}
    assert cols["flow_id"] == ("VARCHAR[]", False) and cols["start_ts"] == ("BIGINT", True)
    assert len(documented_columns("Instruction")) > 40


def test_report_on_explorer_parquet(profile, capsys) -> None:
    folder, want = profile
    assert main(["report", str(folder), "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert "not yet checked on a real capture" in captured.err
    doc = json.loads(captured.out)
    assert doc["trace"]["device_kind"] == "Neuron" and doc["trace"]["device_name"] == "trn2.48xlarge"
    ops = {o["name"]: o for o in doc["ops"]}
    assert ops["aten::matmul"]["self_device_us"] == pytest.approx(want["aten::matmul"])
    assert ops["aten::add"]["self_device_us"] == pytest.approx(want["aten::add"])
    assert ops["neuron_driver_submit"]["self_device_us"] == 0  # a runtime row, listed but launching nothing
    assert "neuron_driver_submit" in ops and ops["aten::add"]["self_cpu_us"] == pytest.approx((8_000 - 400 - 6_000) / 1e3)
    assert doc["totals"]["device_us"] == pytest.approx(want["device_us"])
    assert doc["totals"]["kernels"] == want["kernels"]
    assert doc["totals"]["kernels_linked"] == want["linked"]
    assert doc["totals"]["unlinked"] == {"outside_runtime_calls": 1}


def test_rows_round_trip_into_events(profile) -> None:
    folder, _ = profile
    with load(folder) as trace:
        _, rows = trace.sql_rows("SELECT kind, count(*) FROM events GROUP BY 1 ORDER BY 1")
        assert dict(rows) == {"cpu_op": 2, "runtime": 3, "device_other": 1, "kernel": 5, "memcpy": 1}
        _, rows = trace.sql_rows("SELECT e.name, l.name, o.name, e.link FROM events e JOIN events l ON l.id = e.launch "
                            "JOIN events o ON o.id = e.op WHERE e.kind = 'memcpy'")
        assert rows == [("qSPDynamicHW", "nrt_execute", "aten::matmul", "time_window")]
        _, rows = trace.sql_rows("SELECT bytes, stream FROM events WHERE kind = 'memcpy'")
        assert rows == [(4096, 1002)]
        _, rows = trace.sql_rows("SELECT ts FROM events WHERE kind = 'kernel' ORDER BY ts LIMIT 1")
        assert rows == [(T0 + 2_000,)]


def test_advice_and_kernel_grouping_run(profile, capsys) -> None:
    folder, _ = profile
    assert main(["report", str(folder), "--group-by", "kernel"]) == 0
    out = capsys.readouterr().out
    assert "MATMUL" in out and "Neuron" in out


def test_bad_parquet_is_one_line(tmp_path, capsys) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "Instruction.parquet").write_bytes(b"PAR1 this is not parquet")
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"profuse: {folder / 'Instruction.parquet'}:") and "\n" not in err
    con = duckdb.connect()
    con.execute(f"COPY (SELECT 1::BIGINT AS id, 5::BIGINT AS start_ts) TO '{folder / 'Instruction.parquet'}' "
                "(FORMAT parquet)")
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert "has no column 'duration_ns', 'engine', 'opcode'" in err and "\n" not in err


def test_required_column_with_nulls_is_one_line(profile, capsys) -> None:
    folder, _ = profile
    rows = [_instr(1, T0 + 2_000, 700, "tensor", "MATMUL"), _instr(2, T0, 300, "vector", "TENSOR_TENSOR")]
    rows[1]["start_ts"] = None
    write_table(folder, "Instruction", rows)
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"profuse: {folder / 'Instruction.parquet'}: 1 row(s) have no start_ts") and "\n" not in err
