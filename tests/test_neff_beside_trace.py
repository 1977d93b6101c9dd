"""A NEFF beside its trace (Neuron's profile folder: trace.json + neff_<hash>.neff) shows in report and explorer.

The trace is a real CUDA trace rewritten in PrivateUse1 form (test_privateuse1), the NEFF the real
one from tests/data/neuron; expected numbers are read from the NEFF's archive here.
"""
from __future__ import annotations

import json
import os
import shutil
import urllib.request

import pytest
from conftest import trace_path
from explorer_util import running
from test_explorer_browser import CHROMIUM, browser, open_view, page  # noqa: F401 - fixtures
from test_neff import NEFF, _archive, _count_field3
from test_privateuse1 import rewrite

import profuse
from profuse.cli import main


def _folder(tmp_path):
    folder = tmp_path / "rank0"
    rewrite(trace_path("a100_alexnet.json.gz"), folder / "trace.json.gz", prefix="nrt_")
    shutil.copy(NEFF, folder / "neff_395760075800974.neff")
    (folder / "neff_broken.neff").write_bytes(NEFF.read_bytes()[:3000])
    return folder


def _expected() -> tuple[int, dict[str, int]]:
    files = _archive()
    kelf = json.loads(files["kelf-0.json"])
    per_engine: dict[str, int] = {}
    for g in kelf["graphs"]:
        folder = g["definition"].rsplit("/", 1)[0]
        d = json.loads(files[g["definition"]])
        for key, instr in d.items():
            if key.endswith("_instr"):
                n = _count_field3(files[f"{folder}/{d[key[:-6] + '_asm_dbg'][0]}"])
                per_engine[instr[:-4]] = per_engine.get(instr[:-4], 0) + n
    return json.loads(files["hlo_stats.json"])["HloMacCount"], per_engine


def test_report_shows_the_neffs_beside_the_trace(tmp_path, capsys):
    folder = _folder(tmp_path)
    macs, per_engine = _expected()
    assert main(["report", str(folder), "--format", "json"]) == 0
    neffs = json.loads(capsys.readouterr().out)["compiled"]["neffs"]
    assert [n["file"] for n in neffs] == ["neff_395760075800974.neff", "neff_broken.neff"]
    good, bad = neffs
    assert good["hlo_stats"]["macs"] == macs and good["error"] is None
    assert {e["name"]: e["instructions"] for e in good["engines"]} == per_engine
    assert any(s["framework"] == "hlo__dot_op0" for s in good["sources"])
    assert "truncated" in bad["error"]
    assert main(["report", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "Compiled NEFF neff_395760075800974.neff" in out and f"HLO MACs {macs:,}" in out
    assert "Compiled NEFF neff_broken.neff" in out and "not read:" in out


def test_explorer_compiled_view_data_has_the_neff(tmp_path):
    folder = _folder(tmp_path)
    macs, _ = _expected()
    t = profuse.load(folder)
    try:
        with running([t]) as url, urllib.request.urlopen(url.at("/api/0/compiled")) as r:
            d = json.loads(r.read())
    finally:
        t.close()
    assert [n["file"] for n in d["neffs"]] == ["neff_395760075800974.neff", "neff_broken.neff"]
    assert d["neffs"][0]["hlo_stats"]["macs"] == macs


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium not installed (make test installs it)")
def test_compiled_view_renders_the_neff_in_a_browser(tmp_path, page):  # noqa: F811 - the fixture
    folder = _folder(tmp_path)
    macs, per_engine = _expected()
    t = profuse.load(folder)
    try:
        with running([t]) as url:
            open_view(page, url, "compiled")
            text = page.inner_text("main")
    finally:
        t.close()
    assert "Compiled NEFF neff_395760075800974.neff" in text and f"HLO MACs {macs:,}" in text
    assert all(name in text for name in per_engine) and "hlo__dot_op0" in text
    assert "not read:" in text
