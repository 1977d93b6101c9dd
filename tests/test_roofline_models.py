"""FLOP and byte models per op from recorded shapes, and rooflines that never exceed 100%."""
from __future__ import annotations

import json

import pytest

import profuse
from profuse.analysis.advice.roofline import Peaks, device_peaks, roofline
from profuse.analysis.opclass import Tensor, flops, io_bytes, modelled

F32, BF16 = 4, 2


def t(*dims, elem=F32):
    return Tensor(tuple(dims), elem)


def test_mm_with_out_tensor_counts_only_its_operands():
    a, b, out = t(64, 128), t(128, 32), t(64, 32)
    assert flops("aten::mm", [a, b, out]) == flops("aten::mm", [a, b]) == 2 * 64 * 32 * 128
    assert io_bytes("aten::mm", [a, b, out]) == ((64 * 128 + 128 * 32) * 4, 64 * 32 * 4)


def test_matmul_family_flops():
    assert flops("aten::bmm", [t(8, 16, 32), t(8, 32, 4)]) == 2 * 8 * 16 * 4 * 32
    # baddbmm(bias, b1, b2) and addmm(bias, a, b): 2MNK + MN for the bias
    assert flops("aten::baddbmm", [t(8, 16, 4), t(8, 16, 32), t(8, 32, 4)]) == 2 * 8 * 16 * 4 * 32 + 8 * 16 * 4
    assert flops("aten::addmm", [t(32), t(64, 128), t(128, 32)]) == 2 * 64 * 32 * 128 + 64 * 32
    assert flops("aten::linear", [t(2, 64, 128), t(32, 128)]) == 2 * 128 * 32 * 128


def test_attention_flops_from_qkv_shapes():
    q = k = v = t(4, 12, 197, 64, elem=BF16)
    assert flops("aten::_scaled_dot_product_flash_attention", [q, k, v]) == 4 * 4 * 12 * 197 * 197 * 64
    # the flash kernel's own op takes (batch, seq, heads, dim)
    qb, kb = t(2, 10, 8, 64, elem=BF16), t(2, 300, 8, 64, elem=BF16)
    assert flops("aten::_flash_attention_forward", [qb, kb, kb]) == 4 * 2 * 8 * 10 * 300 * 64


def test_ops_without_a_model_are_unknown():
    for name in ("aten::conv2d", "aten::index_select", "aten::scatter_", "aten::embedding", "my::kv_cache_store"):
        assert not modelled(name), name
    assert modelled("aten::mm") and modelled("aten::add")


def test_peak_matches_dtype():
    p = Peaks(312.0, 19.5, 2039.0, "datasheet: A100", 156.0, 0.0)
    assert p.compute_tflops(F32, matrix=True) == 156.0   # fp32 matmul may run as TF32
    assert p.compute_tflops(F32, matrix=False) == 19.5
    assert p.compute_tflops(BF16, matrix=True) == 312.0
    assert p.compute_tflops(1, matrix=True) == 312.0     # no FP8 units: the half peak bounds it


def _x(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_roofline_above_peak_is_unknown(tmp_path):
    # GIVEN an A100 trace where a 4096^3 bf16 mm "ran" in 1 µs (impossible: 137 TFLOP at 312 TFLOP/s)
    # and a gather, whose bytes profuse cannot model
    events = [
        _x("cpu_op", "aten::mm", 0, 10, **{"Input Dims": [[4096, 4096], [4096, 4096]],
                                          "Input type": ["c10::BFloat16", "c10::BFloat16"]}),
        _x("cuda_runtime", "cudaLaunchKernel", 1, 2, correlation=1),
        _x("kernel", "gemm", 10, 1, pid=0, tid=7, correlation=1, stream=7, device=0),
        _x("cpu_op", "aten::index_select", 20, 10, **{"Input Dims": [[30522, 512], [], [141]],
                                                      "Input type": ["float", "Scalar", "long int"]}),
        _x("cuda_runtime", "cudaLaunchKernel", 21, 2, correlation=2),
        _x("kernel", "gather", 30, 5, pid=0, tid=7, correlation=2, stream=7, device=0),
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"name": "NVIDIA A100-SXM4-80GB"}]}))
    with profuse.load(p) as tr:
        peaks = device_peaks(tr)
        rows = {r.name: r for r in roofline(tr, peaks)}
    assert peaks is not None and peaks.tflops_tf32 == 156.0
    assert rows["aten::mm"].pct_of_roofline is None and rows["aten::mm"].bound == "unknown"
    assert rows["aten::mm"].gflop == pytest.approx(2 * 4096**3 / 1e9, rel=1e-4)
    gather = rows["aten::index_select"]
    assert gather.pct_of_roofline is None and gather.gflop is None and gather.bound == "unknown"
