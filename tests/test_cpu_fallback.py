"""A CPU fallback (an op with no kernel for the device, run on the host between device work, with copies
to the host and back around it: ``aten::to -> _to_copy -> copy_``) is a ``cpu_fallback`` lever naming
the op, on any device: CUDA, and the same trace written as a PrivateUse1 backend (Neuron) writes it.

The trace is hand-built in Kineto's JSON form (a step: a GEMM, the copy to the host, ``aten::unique``
on the CPU, the copy back, an add); the expected gain is computed from the raw events alone: the
round trip from the device-to-host copy's start to the host-to-device copy's end, during which the
device ran nothing but the copies.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from profuse.cli import main

PID, TID = 100, 100


def _x(name: str, cat: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    pid, tid = (0, 7) if cat in ("kernel", "gpu_memcpy") else (PID, TID)
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _copy(ts: float, corr: int, way: str) -> list[dict[str, Any]]:
    """``aten::to -> _to_copy -> copy_ -> cudaMemcpyAsync`` and its copy (pageable: the call blocks)."""
    name = "Memcpy DtoH (Device -> Pageable)" if way == "d2h" else "Memcpy HtoD (Pageable -> Device)"
    return [_x("aten::to", "cpu_op", ts, 50), _x("aten::_to_copy", "cpu_op", ts + 1, 48),
            _x("aten::copy_", "cpu_op", ts + 2, 46), _x("cudaMemcpyAsync", "cuda_runtime", ts + 3, 44, correlation=corr),
            _x(name, "gpu_memcpy", ts + 10, 30, correlation=corr, device=0, stream=7, bytes=4096)]


def fallback_trace() -> dict[str, Any]:
    events = [
        _x("ProfilerStep#1", "user_annotation", 0, 1000),
        _x("aten::mm", "cpu_op", 10, 20), _x("cudaLaunchKernel", "cuda_runtime", 12, 8, correlation=1),
        _x("ampere_sgemm_128x64_nn", "kernel", 25, 75, correlation=1, device=0, stream=7),
        *_copy(110, 2, "d2h"),
        _x("aten::unique", "cpu_op", 170, 300),  # no kernel for the device: ran on the CPU
        *_copy(480, 3, "h2d"),
        _x("aten::add", "cpu_op", 530, 20), _x("cudaLaunchKernel", "cuda_runtime", 535, 10, correlation=4),
        _x("vectorized_elementwise_kernel", "kernel", 550, 50, correlation=4, device=0, stream=7),
    ]
    return {"schemaVersion": 1, "traceEvents": events}


def _device_window(doc: dict[str, Any]) -> float:
    """From the raw events: the device-to-host copy's start to the host-to-device copy's end (µs), less
    any kernel time inside it (the round trip the fallback costs)."""
    ev = doc["traceEvents"]
    d2h = next(e for e in ev if "DtoH" in e["name"])
    h2d = next(e for e in ev if "HtoD" in e["name"])
    lo, hi = d2h["ts"], h2d["ts"] + h2d["dur"]
    kernels = sum(max(0, min(hi, e["ts"] + e["dur"]) - max(lo, e["ts"])) for e in ev if e["cat"] == "kernel")
    return hi - lo - kernels


def _write(doc: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _as_privateuse1(doc: dict[str, Any]) -> dict[str, Any]:
    """The same run as a PrivateUse1 backend writes it: its runtime category, Neuron Runtime call names."""
    out = json.loads(json.dumps(doc))
    for e in out["traceEvents"]:
        if e["cat"] == "cuda_runtime":
            e["cat"], e["name"] = "privateuse1_runtime", "nrt_" + e["name"][len("cuda"):]
    return out


@pytest.mark.parametrize("backend", ["CUDA", "Neuron"])
def test_cpu_fallback_is_a_lever_naming_the_op(backend, tmp_path, capsys):
    doc = fallback_trace() if backend == "CUDA" else _as_privateuse1(fallback_trace())
    path = _write(doc, tmp_path / backend / "trace.json.gz")
    assert main(["report", str(path), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["trace"]["device_kind"] == backend
    diagnosis = report["diagnosis"]
    levers = [lv for lv in diagnosis["levers"] if lv["kind"] == "cpu_fallback"]
    assert len(levers) == 1, [lv["kind"] for lv in diagnosis["levers"]]
    lever = levers[0]
    assert lever["target"] == "aten::unique"
    assert lever["ops"][:3] == ["aten::unique", "aten::to", "aten::to"]
    expected = _device_window(doc)
    assert lever["gain_us"] == pytest.approx(expected, abs=1e-3)
    # bounded: never more than the leaves it draws hold, each at most its cap
    leaves = {lf["key"]: lf["us"] for lf in diagnosis["budget"]}
    assert lever["gain_us"] <= sum(leaves.get(k, 0.0) for k in lever["draws"]) + 1e-6
    assert all(c <= leaves.get(k, 0.0) + 1e-6 for k, c in zip(lever["draws"], lever["caps"]))
    assert "aten::unique ran on the CPU" in lever["evidence"] and "Memcpy DtoH" in lever["evidence"]


def test_no_fallback_where_the_op_between_the_copies_launched_device_work(tmp_path, capsys):
    doc = fallback_trace()
    ev = doc["traceEvents"]
    ev += [_x("cudaLaunchKernel", "cuda_runtime", 200, 10, correlation=9),
           _x("unique_kernel", "kernel", 215, 40, correlation=9, device=0, stream=7)]  # unique ran on the device
    path = _write(doc, tmp_path / "ok" / "trace.json.gz")
    assert main(["report", str(path), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    d = report["diagnosis"]
    assert not [lv for lv in d["levers"] if lv["kind"] == "cpu_fallback"]


@pytest.mark.parametrize("op", ["aten::unsqueeze", "aten::view", "aten::reshape", "aten::detach"])
def test_no_fallback_for_an_op_that_moves_no_data(op, tmp_path, capsys):
    # a view between the copies never runs on any device: it is no fallback (found by review)
    doc = fallback_trace()
    for e in doc["traceEvents"]:
        if e["name"] == "aten::unique":
            e["name"] = op
    path = _write(doc, tmp_path / "view" / "trace.json.gz")
    assert main(["report", str(path), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)["diagnosis"]
    assert not [lv for lv in d["levers"] if lv["kind"] == "cpu_fallback"]
    assert not [k for k in d["small_items"]["kinds"] if k.startswith("cpu_fallback")]
