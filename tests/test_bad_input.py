"""Bad input: one line naming the file and the problem, exit code 2, nothing written."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from conftest import trace_path

from profuse.cli import main

SMALL = "a100_event_sync.json.gz"


def small_doc() -> dict:
    return json.load(gzip.open(trace_path(SMALL)))


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def with_event(tmp_path: Path, change) -> Path:
    doc = small_doc()
    ev = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    change(ev)
    return write(tmp_path, "t.json", json.dumps(doc).encode())


def run_bad(capsys, path: Path, *extra: str) -> str:
    before = set(path.parent.iterdir()) if path.parent.exists() else set()
    code = main(["report", str(path), *extra])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert str(path) in lines[0]
    after = set(path.parent.iterdir()) if path.parent.exists() else set()
    assert after == before, f"files left behind: {after - before}"
    return lines[0]


def test_missing_file(tmp_path, capsys):
    assert "no such file" in run_bad(capsys, tmp_path / "nope.json")


def test_folder_without_trace(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hi")
    assert "no trace" in run_bad(capsys, tmp_path / "empty")


def test_not_json(tmp_path, capsys):
    assert "not JSON" in run_bad(capsys, write(tmp_path, "t.json", b"hello world"))


def test_truncated_gzip(tmp_path, capsys):
    data = trace_path(SMALL).read_bytes()
    assert "gzip" in run_bad(capsys, write(tmp_path, "t.json.gz", data[: len(data) // 2]))


def test_truncated_json(tmp_path, capsys):
    data = gzip.decompress(trace_path(SMALL).read_bytes())
    assert "truncated" in run_bad(capsys, write(tmp_path, "t.json", data[: len(data) // 2]))


def test_json_not_a_trace(tmp_path, capsys):
    assert "not a trace" in run_bad(capsys, write(tmp_path, "t.json", b'{"hello": [1, 2]}'))
    assert "not a trace" in run_bad(capsys, write(tmp_path, "u.json", b'{"traceEvents": 5}'))


def test_event_without_dur(tmp_path, capsys):
    msg = run_bad(capsys, with_event(tmp_path, lambda e: e.pop("dur")))
    assert "no dur" in msg and "event #" in msg and "--lenient" in msg


def test_negative_dur(tmp_path, capsys):
    assert "negative dur" in run_bad(capsys, with_event(tmp_path, lambda e: e.update(dur=-5)))


def test_string_number(tmp_path, capsys):
    msg = run_bad(capsys, with_event(tmp_path, lambda e: e.update(ts=str(e["ts"]))))
    assert "ts" in msg and "str" in msg


def test_int_over_64_bits(tmp_path, capsys):
    msg = run_bad(capsys, with_event(tmp_path, lambda e: e["args"].update(correlation=2**70)))
    assert "64 bits" in msg


def test_invalid_utf8(tmp_path, capsys):
    data = gzip.decompress(trace_path(SMALL).read_bytes()).replace(b'"cudaLaunchKernel"', b'"cuda\xffLaunch"', 1)
    assert "UTF-8" in run_bad(capsys, write(tmp_path, "t.json", data))


def test_lenient_loads_what_it_can(tmp_path, capsys):
    doc = small_doc()
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    device_events = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    kernels[0].pop("dur")
    kernels[1]["dur"] = -3
    kernels[2]["ts"] = "oops"
    p = write(tmp_path, "t.json", json.dumps(doc).encode())
    assert main(["report", str(p), "--lenient", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sum(out["skipped"].values()) == 3
    assert out["totals"]["kernels"] == len(device_events) - 3
    assert main(["report", str(p), "--lenient"]) == 0
    assert "--lenient skipped events" in capsys.readouterr().out
    assert not list(tmp_path.glob("*.duckdb")), "a lenient load leaves no cache"


def test_lenient_invalid_utf8_is_replaced(tmp_path, capsys):
    data = gzip.decompress(trace_path(SMALL).read_bytes()).replace(b'"cudaLaunchKernel"', b'"cuda\xffLaunch"', 1)
    p = write(tmp_path, "t.json", data)
    assert main(["report", str(p), "--lenient", "--format", "json"]) == 0
    assert "cuda\ufffdLaunch" in capsys.readouterr().out


def test_unmatched_flows_are_counted_not_fatal(tmp_path, capsys):
    # Real traces carry flow ends without starts (ac2g); they are counted and the load goes on.
    doc = small_doc()
    doc["traceEvents"].append({"ph": "s", "id": 999999, "pid": 1, "tid": 1, "ts": 1, "cat": "ac2g", "name": "ac2g"})
    p = write(tmp_path, "t.json", json.dumps(doc).encode())
    assert main(["report", str(p), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["unmatched_flows"] >= 1


def test_sql_error_is_one_line(capsys):
    code = main(["sql", str(trace_path(SMALL)), "SELECT nope FROM events"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "SQL error" in err


def test_bad_output_folder_writes_nothing(tmp_path, capsys):
    code = main(["report", str(trace_path(SMALL)), "--format", "json", "-o", str(tmp_path / "no" / "r.json")])
    assert code == 2
    assert "no" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()
