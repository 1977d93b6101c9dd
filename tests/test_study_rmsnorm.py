"""The RMSNorm study at a tiny size: JSON contract, bundles, and numerics of every variant."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from profuse.capture import is_bundle
from profuse.cli import main
from profuse.studies.rmsnorm import rms_norm_op_by_op, traffic_bytes

VARIANT_KEYS = {"name", "ops_per_call", "kernels_per_call", "device_us_per_call", "speedup_vs_op_by_op",
                "bytes_per_call", "roofline_pct", "max_abs_err", "bundle"}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["study", "rmsnorm", "--device", "cpu", "--shape", "2,8,64", "--iters", "4",
                     "--out", str(out), "--format", "json"])
    assert code == 0
    return json.loads(buf.getvalue()), out


def test_study_json_contract(study):
    doc, out = study
    assert doc["schema"] == "profuse.study/1" and doc["study"] == "rmsnorm"
    assert doc["device_kind"] == "CPU" and doc["shape"] == [2, 8, 64] and doc["dtype"] == "float32"
    assert doc["copy_bandwidth_gbps"] > 0
    names = [v["name"] for v in doc["variants"]]
    assert names == ["op_by_op", "torch.rms_norm", "torch.compile"]
    for v in doc["variants"]:
        assert v.keys() >= VARIANT_KEYS
        assert v["device_us_per_call"] > 0 and v["kernels_per_call"] >= 1
        assert is_bundle(__import__("pathlib").Path(v["bundle"]))
    assert json.loads((out / "study.json").read_text())["variants"][0]["name"] == "op_by_op"


def test_op_by_op_runs_six_ops_and_compile_one_kernel(study):
    doc, _ = study
    v = {x["name"]: x for x in doc["variants"]}
    assert v["op_by_op"]["ops_per_call"] == 6
    assert v["op_by_op"]["speedup_vs_op_by_op"] == 1.0
    assert v["torch.compile"]["kernels_per_call"] == 1
    # what ran is shown, not assumed: on CPU torch.rms_norm still runs several ops
    assert v["torch.rms_norm"]["kernels_per_call"] > 1
    assert v["op_by_op"]["bytes_per_call"] == traffic_bytes((2, 8, 64), 4, fused=False)
    assert v["torch.compile"]["bytes_per_call"] == traffic_bytes((2, 8, 64), 4, fused=True)


def test_every_variant_matches_the_float64_reference(study):
    doc, _ = study
    for v in doc["variants"]:
        assert v["max_abs_err"] < 1e-5, v["name"]


def test_compiled_output_matches_reference_directly():
    x = torch.randn(2, 8, 64)
    w = torch.randn(64)
    ref = rms_norm_op_by_op(x.double(), w.double())
    got = torch.compile(rms_norm_op_by_op)(x, w)
    assert (got.double() - ref).abs().max() < 1e-5


def test_roofline_never_above_100_with_a_cached_peak_below_the_achieved_rate(tmp_path, monkeypatch, capsys):
    import re

    from profuse.capture.peaks import cached_peaks, peaks

    monkeypatch.setenv("PROFUSE_CACHE_DIR", str(tmp_path / "cache"))
    peaks("cpu")  # a real measurement, then set far below anything the machine does
    cache = tmp_path / "cache" / "peaks.json"
    doc = json.loads(cache.read_text())
    (key,) = doc
    doc[key]["copy_bandwidth_gbps"] = 0.001
    cache.write_text(json.dumps(doc))
    assert cached_peaks("cpu").copy_bandwidth_gbps == 0.001
    out = tmp_path / "study"
    assert main(["study", "rmsnorm", "--device", "cpu", "--shape", "2,8,64", "--iters", "3", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    rows = [ln for ln in text.splitlines() if ln.split() and ln.split()[0] in ("op_by_op", "torch.rms_norm",
                                                                              "torch.compile")]
    pcts = [int(m) for ln in rows for m in re.findall(r"(\d+)%", ln)]
    assert len(pcts) == 3 and all(0 <= p <= 100 for p in pcts), text
    assert "cached peak copy bandwidth raised from 0.0 to" in text
    result = json.loads((out / "study.json").read_text())
    assert all(0 <= v["roofline_pct"] <= 100 for v in result["variants"])
    # the cache now holds the highest rate seen: at least what every variant achieved
    raised = json.loads(cache.read_text())[key]["copy_bandwidth_gbps"]
    # (study.json rounds the figure to 2 decimals: at a few GB/s that is more than 0.1% of it)
    assert round(raised, 2) == result["peak_copy_bandwidth_gbps"]
    for v in result["variants"]:
        assert v["bytes_per_call"] / (v["device_us_per_call"] * 1e3) <= raised * (1 + 1e-2)
    # a later refresh that measures less keeps the highest figure
    before = cached_peaks("cpu")
    assert peaks("cpu", refresh=True).copy_bandwidth_gbps >= before.copy_bandwidth_gbps
