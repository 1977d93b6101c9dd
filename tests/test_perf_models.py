"""Convolution and causal-attention FLOPs from recorded shapes and Concrete Inputs.

Expected values: hand-computed from the shapes the raw JSON records, and for real CPU captures
torch's own FLOP counter (torch.utils.flop_counter), which shares no code with profuse.
"""
from __future__ import annotations

import gzip
import json

import pytest
from conftest import trace_path

import profuse
from profuse.analysis.advice.perf_models import conv_model, is_causal
from profuse.analysis.advice.roofline import Peaks, roofline

PEAKS = Peaks(1000.0, 1000.0, 10000.0, "test peaks")


def _rows(path):
    with profuse.load(path) as t:
        return {r.name: r for r in roofline(t, PEAKS, top=100)}


def _raw_ops(path, name):
    doc = json.loads(gzip.decompress(path.read_bytes())) if str(path).endswith(".gz") else json.loads(path.read_text())
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("name") == name]


def test_vit_patch_embedding_conv_flops():
    # h100_vit_falconsai: the ViT patch embedding, aten::cudnn_convolution launches the kernel
    path = trace_path("h100_vit_falconsai.json.gz")
    (conv,) = _raw_ops(path, "aten::cudnn_convolution")
    assert conv["args"]["Input Dims"][:2] == [[4, 3, 224, 224], [768, 3, 16, 16]]
    # (input, weight, padding, stride, dilation, groups, ...)
    assert conv["args"]["Concrete Inputs"][2:6] == ["[0, 0]", "[16, 16]", "[1, 1]", "1"]
    # out = (224 + 0 - 1*(16-1) - 1) // 16 + 1 = 14; 2 * N*Cout*14*14 * Cin*16*16, no bias in cudnn's op
    want = 2 * 4 * 768 * 14 * 14 * 3 * 16 * 16
    assert want == 924_844_032
    row = _rows(path)["aten::cudnn_convolution"]
    assert row.gflop == pytest.approx(want / 1e9, abs=1e-4)
    assert row.bound != "unknown"
    # bytes: input + weight + output in bf16
    assert row.mbytes == pytest.approx((4 * 3 * 224 * 224 + 768 * 3 * 16 * 16 + 4 * 768 * 14 * 14) * 2 / 1e6, abs=1e-3)
    # the same call through aten::conv2d (input, weight, bias, stride, padding, dilation, groups) adds the bias
    args = _raw_ops(path, "aten::conv2d")[0]["args"]
    m = conv_model("aten::conv2d", json.dumps(args["Input Dims"]), json.dumps(args["Input type"]),
                   json.dumps(args["Concrete Inputs"]))
    assert m is not None and m.flops == want + 4 * 768 * 14 * 14


def test_shared_sdpa_is_not_causal_and_counts_in_full():
    # no shared trace records a causal SDPA (every is_causal is 'False'): their FLOPs stay 4*B*H*N*N*d
    path = trace_path("h100_bert_small.json.gz")
    (call, *_) = _raw_ops(path, "aten::_flash_attention_forward")
    assert call["args"]["Concrete Inputs"][8] == "False"
    assert not is_causal(call["name"], json.dumps(call["args"]["Concrete Inputs"]))
    row = _rows(path)["aten::_flash_attention_forward"]
    assert row.gflop == pytest.approx(row.calls * 4 * 1 * 8 * 141 * 141 * 64 / 1e9, abs=1e-4)


def _capture(tmp_path, fn):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn(torch)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return path


def test_causal_sdpa_is_halved(tmp_path):
    b, h, n, d = 2, 4, 64, 32

    def run(torch):
        q = torch.randn(b, h, n, d)
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        torch.nn.functional.scaled_dot_product_attention(q, q, q)

    path = _capture(tmp_path, run)
    calls = _raw_ops(path, "aten::scaled_dot_product_attention")
    assert [c["args"]["Concrete Inputs"][5] for c in calls] == ["True", "False"]
    row = _rows(path)["aten::scaled_dot_product_attention"]
    full = 4 * b * h * n * n * d
    assert row.calls == 2
    assert row.gflop == pytest.approx((full / 2 + full) / 1e9, abs=1e-5)


def test_conv_variants_match_torch_flop_counter(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    f = torch.nn.functional
    cases = {
        "aten::conv1d": lambda t: f.conv1d(t.randn(2, 6, 50), t.randn(8, 3, 5), stride=2, padding=1, groups=2),
        "aten::conv2d": lambda t: f.conv2d(t.randn(1, 8, 17, 19), t.randn(8, 1, 3, 3), stride=(2, 1),
                                           padding=(1, 2), dilation=(1, 2), groups=8),
        "aten::conv3d": lambda t: f.conv3d(t.randn(1, 2, 6, 7, 8), t.randn(4, 2, 3, 3, 3), padding=1),
        "aten::conv_transpose2d": lambda t: f.conv_transpose2d(t.randn(1, 4, 9, 9), t.randn(4, 3, 3, 3), stride=2,
                                                               padding=1, output_padding=1),
    }
    for name, fn in cases.items():
        path = _capture(tmp_path, fn)
        with FlopCounterMode(display=False) as counter:
            fn(torch)
        want = counter.get_total_flops()
        assert want > 0
        with profuse.load(path) as t:
            ((dims, types, concrete),) = t.sql_rows(
                "SELECT s.input_dims, s.input_types, s.concrete_inputs FROM events e JOIN shapes s USING (id) "
                "WHERE e.name = ?", [name])[1]
        m = conv_model(name, dims, types, concrete)
        assert m is not None and m.flops == want, name
        assert _rows(path)[name].gflop is not None, name


def test_conv_without_its_arguments_claims_nothing():
    dims = json.dumps([[1, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], []])
    types = json.dumps(["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"])
    assert conv_model("aten::conv2d", dims, types, None) is None
    assert conv_model("aten::conv2d", dims, types, json.dumps(["", "", "", "[1, 1]", "[0, 0]", "x", "1"])) is None
    ok = conv_model("aten::conv2d", dims, types, json.dumps(["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "1"]))
    assert ok is not None and ok.flops == 2 * 1 * 4 * 6 * 6 * 3 * 3 * 3
