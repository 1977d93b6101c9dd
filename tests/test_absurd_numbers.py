"""Absurd numbers (issue 45): no memory figure is ever negative, a memory snapshot whose history and final
state disagree says so and reports the figure the history supports, and a trace mixing device and host
time units never shows a negative queue delay.
"""
from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from conftest import trace_path

import profuse
from profuse.cli import main

MiB = 1 << 20


def _report(capsys, path: Path, *extra: str) -> dict[str, Any]:
    assert main(["report", str(path), "--format", "json", "--no-cache", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _numbers(doc: Any, key: str = "") -> list[tuple[str, float]]:
    """Every number in a JSON document with the key it sits under."""
    if isinstance(doc, dict):
        return [x for k, v in doc.items() for x in _numbers(v, k)]
    if isinstance(doc, list):
        return [x for v in doc for x in _numbers(v, key)]
    return [(key, doc)] if isinstance(doc, (int, float)) and not isinstance(doc, bool) else []


def _mem(ts: int, addr: int, nbytes: int, total: int, reserved: int) -> dict[str, Any]:
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "s": "t",
            "args": {"Device Type": 1, "Device Id": 0, "Addr": addr, "Bytes": nbytes, "Total Allocated": total,
                     "Total Reserved": reserved}}


def test_memory_events_whose_totals_disagree_with_their_bytes_give_no_negative_figure(tmp_path, capsys):
    # GIVEN [memory] events allocating 1000 and 4000 bytes whose Total Allocated says 10 and 20, and whose
    # Total Reserved (5) is below it: a malformed trace (the old report said gap -15 and -4980 bytes
    # "allocated before the trace")
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 50, "args": {}}
    path = tmp_path / "mem.json"
    path.write_text(json.dumps({"traceEvents": [op, _mem(2, 100, 1000, 10, 5), _mem(3, 200, 4000, 20, 5)]}))
    # WHEN it is reported
    doc = _report(capsys, path)
    (dev,) = doc["memory"]["devices"]
    # THEN the peak is the largest total the events report, what they show live is listed as it is, and no
    # figure is negative: no gap (reserved below allocated tells none) and no "before the trace" row
    assert dev["peak_allocated_bytes"] == 20 and dev["gap_bytes"] is None
    assert dev["live_at_peak"] == [{"op": "aten::add", "module": None, "bytes": 5000, "allocations": 2}]
    assert all(v >= 0 for k, v in _numbers(doc["memory"]))


def _entry(action: str, addr: int, size: int, t: int) -> dict[str, Any]:
    frames = [{"filename": "/home/u/model.py", "line": t, "name": f"layer{t}"}]
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": frames}


def test_snapshot_whose_history_stops_before_its_frees_says_so(tmp_path, capsys):
    # GIVEN a snapshot whose history records three 128 MiB allocations and stops there, while its final
    # state holds only one 32 KiB block (the frees came after the history stopped)
    base = 0x7F00_0000_0000
    blocks = [{"address": base, "size": 32 << 10, "requested_size": 32 << 10, "state": "active_allocated",
               "frames": []}]
    snap = {"segments": [{"device": 0, "address": base, "total_size": 2 * MiB, "stream": 0, "segment_type": "large",
                          "allocated_size": 32 << 10, "active_size": 32 << 10, "blocks": blocks}],
            "device_traces": [[_entry("alloc", base + (i + 1) * 128 * MiB, 128 * MiB, 10 * (i + 1))
                               for i in range(3)]]}
    path = tmp_path / "stopped.pickle"
    path.write_bytes(pickle.dumps(snap))
    # WHEN it is reported
    assert main(["report", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (dev,) = doc["memory"]["devices"]
    # THEN the totals are counted from the history, which cannot have started below zero: the peak is the
    # 384 MiB it saw allocated (the old report: 32 KiB beside 384 MiB live, its timeline from -384 MiB)
    assert dev["peak_allocated_bytes"] == 384 * MiB
    assert sum(g["bytes"] for g in dev["live_at_peak"]) == 384 * MiB
    (lane,) = doc["timeline"]
    assert [p[1] for p in lane["points"]] == [128 * MiB, 256 * MiB, 384 * MiB]
    assert all(v >= 0 for k, v in _numbers(doc["memory"]) + _numbers(doc["timeline"]))
    # AND the counts say the history and the final state disagree, and by how much
    assert doc["counts"]["history_disagrees"] == 1
    assert doc["counts"]["history_disagrees_bytes"] == 384 * MiB - (32 << 10)
    # the reserved total (the 2 MiB segment) never went below zero: its start is not raised
    assert doc["counts"]["history_disagrees_reserved_bytes"] == 0
    # AND the console says so in one line
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "history and the final state disagree on 1 device(s)" in " ".join(out.split())


def test_device_times_in_another_unit_give_no_negative_queue_delay(tmp_path, capsys):
    # GIVEN a real trace whose device activities were written in ms (host µs / 1000): every kernel starts
    # long before the call that launched it
    doc = json.loads(gzip.decompress(trace_path("a100_event_sync.json.gz").read_bytes()))
    device = {"kernel", "gpu_memcpy", "gpu_memset"}
    moved = 0
    for e in doc["traceEvents"]:
        if e.get("cat") in device and "ts" in e:
            e["ts"], e["dur"], moved = e["ts"] / 1000, e.get("dur", 0) / 1000, moved + 1
    path = tmp_path / "ms_device.json"
    path.write_text(json.dumps(doc))
    # WHEN it is reported
    out = _report(capsys, path)
    # THEN no queue delay is negative: every such launch is counted as skewed instead
    delays = [v for k, v in _numbers(out) if "delay" in k]
    assert delays and all(v >= 0 for v in delays)
    assert out["skewed_launches"] == moved


@pytest.mark.parametrize("scanner", ["1", "0"])
def test_numbers_of_another_type_are_read_as_docs_input_says(tmp_path, monkeypatch, capsys, scanner):
    # GIVEN a launch and its kernel, and three [memory] events: one with its Device Id and totals written as
    # whole floats (0.0, 100.0: a re-serialised trace), one with a Device Id of 0.5, one of "zero"
    monkeypatch.setenv("PROFUSE_SCANNER", scanner)
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20,
              "dur": 5, "args": {"correlation": 9}}
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30, "dur": 10,
              "args": {"correlation": 9, "device": 0, "stream": 7}}
    whole = _mem(15, 5, 100, 100, 200)
    whole["args"].update({"Device Id": 0.0, "Total Allocated": 100.0})
    frac, text = _mem(16, 6, 50, 150, 200), _mem(17, 7, 50, 200, 200)
    frac["args"]["Device Id"], text["args"]["Device Id"] = 0.5, "zero"
    path = tmp_path / "types.json"
    path.write_text(json.dumps({"traceEvents": [launch, kernel, whole, frac, text]}))
    with profuse.load(path, cache=False) as t:
        # THEN the whole floats are the integers they are: that event is kept, on CUDA 0 (it was left out)
        assert t.meta.memory_events == 1 and t.meta.memory_skipped == 2
        assert t.con.execute("SELECT device_type, device, total_allocated FROM memory").fetchall() == [("CUDA", 0, 100)]
    # AND a correlation of another type (text, a fraction) is read as absent and counted, its kernel kept
    for bad in ("abc", 9.5):
        kernel["args"]["correlation"] = bad
        path.write_text(json.dumps({"traceEvents": [launch, kernel]}))
        with profuse.load(path, cache=False) as t:
            assert t.meta.ignored_args == {"correlation": 1}
            assert t.con.execute("SELECT count(*), count(launch) FROM events WHERE kind = 'kernel'").fetchone() == (1, 0)
    # AND a ts written as text stops a strict load with one line naming the event, and with --lenient the
    # event is left out and counted
    kernel["args"]["correlation"], kernel["ts"] = 9, "30"
    path.write_text(json.dumps({"traceEvents": [launch, kernel]}))
    assert main(["report", str(path), "--no-cache"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and str(path) in err[0] and "event #1: ts:" in err[0] and "--lenient" in err[0]
    with profuse.load(path, cache=False, lenient=True) as t:
        assert sum(t.meta.skipped.values()) == 1
        assert t.con.execute("SELECT count(*) FROM events WHERE kind = 'kernel'").fetchone() == (0,)
