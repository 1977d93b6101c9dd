"""The RMSNorm study at a tiny size: JSON contract, bundles, and numerics of every variant."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from profuse.capture import is_bundle
from profuse.cli import main
from profuse.studies.rmsnorm import alike_rounds, representative, rms_norm_op_by_op, traffic_bytes

VARIANT_KEYS = {"name", "ops_per_call", "kernels_per_call", "device_us_per_call", "speedup_vs_op_by_op",
                "bytes_per_call", "roofline_pct", "max_abs_err", "bundle"}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["study", "rmsnorm", "--device", "cpu", "--shape", "2,8,64", "--iters", "9",
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


def test_each_bundle_is_one_kept_round_of_three(study):
    doc, out = study
    # 9 calls in 3 interleaved rounds: each variant's bundle holds the 3 calls of one round, the other
    # rounds' bundles are gone
    assert not (out / ".rounds").exists()
    for v in doc["variants"]:
        meta = json.loads((__import__("pathlib").Path(v["bundle"]) / "meta.json").read_text())
        assert meta["status"] == "complete" and meta["steps_recorded"] == 3, v["name"]


def test_the_kept_bundle_is_the_round_representative_picks(tmp_path, monkeypatch):
    import profuse.studies.rmsnorm as study_module

    # GIVEN a study whose choice of round is forced to the first of the alike rounds
    monkeypatch.setattr(study_module, "representative", lambda rounds, median: 0)
    out = tmp_path / "study"
    assert main(["study", "rmsnorm", "--device", "cpu", "--shape", "2,8,64", "--iters", "9", "--out", str(out),
                 "--format", "json"]) == 0
    # THEN each variant's bundle is its round 0 (its meta.json names the folder it was recorded in)
    for name in ("op_by_op", "torch.rms_norm", "torch.compile"):
        meta = json.loads((out / name / "meta.json").read_text())
        assert meta["config"]["out"].endswith(f".rounds/{name}-0"), meta["config"]["out"]


def test_a_folder_that_is_no_bundle_is_refused_before_profiling(tmp_path, capsys):
    # GIVEN the study's output folder, where the op_by_op bundle would go, holding a user's own folder
    out = tmp_path / "study"
    mine = out / "op_by_op"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    # THEN the study stops with one line and exit 2, the folder untouched and nothing else left behind
    assert main(["study", "rmsnorm", "--device", "cpu", "--shape", "2,8,64", "--iters", "3", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "exists and is not a profuse bundle" in err and len(err.strip().splitlines()) == 1, err
    assert (mine / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == ["op_by_op"]


def test_the_kept_round_is_the_one_nearest_the_median_call():
    # rounds' per-call times (µs): the study's figure is the median of all nine
    rounds = [(10.0, 11.0, 12.0), (40.0, 41.0, 42.0), (11.0, 12.0, 13.0)]
    median = sorted(t for r in rounds for t in r)[4]
    assert median == 12.0
    assert representative(rounds, median) == 2   # medians 11, 41, 12: the third is nearest (12 = 12)
    assert representative([(5.0,), (7.0,)], 6.0) == 1   # a tie: the later round, as the last round was kept
    assert representative([(), ()], 0.0) == 1   # no calls at all: the last round
    assert representative([(3.0,), ()], 3.0) == 0   # a round without a call is never the nearest
    # kept bundles hold as many calls: the rounds of the commonest size (20 calls: 7, 7, 6; 10: 4, 3, 3)
    assert alike_rounds(20, 3) == [0, 1] and alike_rounds(10, 3) == [1, 2] and alike_rounds(9, 3) == [0, 1, 2]
    assert alike_rounds(7, 2) == [1] and alike_rounds(5, 1) == [0]


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
