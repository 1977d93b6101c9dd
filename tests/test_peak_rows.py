"""Which datasheet peaks a trace gets: device names from deviceProperties or computeProperties,
the longest matching row, and a plain "no peak for <device>" where there is none."""
from __future__ import annotations

import json

import pytest

import profuse
from profuse.analysis.advice.roofline import device_peaks
from profuse.cli import main


def _trace(tmp_path, device, key="deviceProperties"):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
           "args": {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 2,
           "args": {"correlation": 1}},
          {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 3, "dur": 5,
           "args": {"correlation": 1, "device": 0, "stream": 7}}]
    p = tmp_path / f"{abs(hash((device, key)))}.json"
    p.write_text(json.dumps({"traceEvents": ev, key: [{"id": 0, "name": device}]}))
    return p


@pytest.mark.parametrize(("device", "row"), [
    ("NVIDIA L40S", "L40S"), ("NVIDIA L4", "L4"), ("NVIDIA H200", "H200"), ("NVIDIA B300 SXM6 AC", "B300"),
    ("NVIDIA B200", "B200"), ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA GeForce RTX 4080", "RTX 4080"),
    ("AMD Instinct MI325X", "MI325X"), ("AMD Instinct MI355X", "MI355X"), ("AMD Instinct MI300X", "MI300X"),
])
def test_longest_matching_row(tmp_path, device, row):
    with profuse.load(_trace(tmp_path, device)) as t:
        p = device_peaks(t)
    assert p is not None and p.source == f"datasheet: {row}"


def test_compute_properties_name_the_device(tmp_path, capsys):
    path = _trace(tmp_path, "NVIDIA GeForce RTX 4090", key="computeProperties")
    with profuse.load(path) as t:
        assert t.meta["device_name"] == "NVIDIA GeForce RTX 4090"
    assert main(["report", str(path)]) == 0
    assert "Roofline (datasheet: RTX 4090)" in capsys.readouterr().out


def test_no_peak_says_so(tmp_path, capsys):
    path = _trace(tmp_path, "NVIDIA GeForce RTX 3050")
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Roofline" in out and "no peak for NVIDIA GeForce RTX 3050" in out
    assert main(["report", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["roofline"] == [] and doc["roofline_note"].startswith("no peak for NVIDIA GeForce RTX 3050")
    # a known device has peaks and no such note
    assert main(["report", str(_trace(tmp_path, "NVIDIA H100 80GB HBM3")), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["roofline"] and doc.get("roofline_note") is None
