"""A bundle's meta.json: one typed record (BundleMeta) written by capture, read back without torch."""
from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from conftest import trace_path

import profuse
from profuse.cli import main
from profuse.trace.bundle import BundleMeta, MeasuredPeaks, read_bundle_meta

# A child in which `import torch` fails however it is spelled, and profuse's capture side with it.
NO_TORCH = """
import importlib.abc, sys
class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"{name} is blocked in this test")
        return None
sys.meta_path.insert(0, _Refuse())
"""
FORBIDDEN = ("torch", "profuse.capture", "profuse.fixes", "profuse.studies")


def run_without_torch(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child whose ``import torch`` fails; its own cache folder under ``tmp_path``."""
    return subprocess.run([sys.executable, "-c", NO_TORCH + code], capture_output=True, text=True,
                          env={**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path / "child-cache")})


def capture_bundle(out: Path) -> tuple[Path, MeasuredPeaks]:
    """A bundle written by the real torch profiler through ``profuse.Exporter``, on a machine whose
    peaks were measured first (so they travel in the bundle)."""
    torch = pytest.importorskip("torch")
    from profuse.capture.peaks import peaks

    measured = peaks("cpu")
    cfg = profuse.ProfileConfig(out=out, warmup=0, steps=1, streams="ops,shapes")
    exporter = profuse.Exporter(cfg, extra={"experiment": "bundle-meta", "seed": 7})
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    with torch.profiler.profile(**cfg.torch_kwargs(), on_trace_ready=exporter):
        model(torch.randn(4, 16))
    assert exporter.bundle == out
    return out, measured


def test_a_captured_bundle_reads_back_into_the_same_record_without_torch(tmp_path):
    torch = pytest.importorskip("torch")
    bundle, measured = capture_bundle(tmp_path / "b")
    raw = (bundle / "meta.json").read_bytes()
    # THEN the file is the record, field for field (a strict decode: nothing of another shape)
    written = msgspec.json.decode(raw, type=BundleMeta)
    plain = json.loads(raw)
    assert plain["schema"] == "profuse.bundle/2" and plain["status"] == "complete"
    assert plain["device"]["torch"] == torch.__version__ and plain["host"] == socket.gethostname()
    assert plain["python"] == platform.python_version() and plain["config"]["steps"] == 1
    assert plain["config"]["streams"] == ["ops", "shapes"]
    assert plain["extra"] == {"experiment": "bundle-meta", "seed": 7}, "the user's extras are kept"
    assert plain["peaks"]["copy_bandwidth_gbps"] == measured.copy_bandwidth_gbps
    assert written.peaks == measured
    # ... and the torch-free reader, in a child where torch cannot be imported, gives the same record
    code = (f"import msgspec, profuse\nt = profuse.load({str(bundle)!r})\n"
            "from profuse.analysis.advice.findings import trace_findings\n"
            "f = trace_findings(t)\n"
            "print(msgspec.json.encode({'bundle': t.bundle, 'notes': t.notes, 'peaks': f.peaks}).decode())\n"
            f"print(sorted(m for m in sys.modules if m.startswith({FORBIDDEN!r}) and sys.modules[m] is not None))\n")
    child = run_without_torch(code, tmp_path)
    assert child.returncode == 0, child.stderr[-2000:]
    first, loaded = child.stdout.splitlines()[-2:]
    got = json.loads(first)
    assert msgspec.convert(got["bundle"], BundleMeta) == written
    assert got["notes"] == []
    assert loaded == "[]", f"reading a bundle imported {loaded}"
    # the roofline is bounded by the peaks the bundle carried (a CPU trace names no datasheet device)
    assert got["peaks"]["source"] == "measured" and got["peaks"]["gbps"] == measured.copy_bandwidth_gbps
    with profuse.load(bundle) as t:
        assert t.bundle == written == profuse.capture.read_meta(bundle)


def test_trace_and_analysis_import_neither_torch_nor_capture(tmp_path):
    # every module of trace/ and analysis/, imported where torch cannot be, pulls in no capture side
    code = ("import importlib, pkgutil, profuse.trace, profuse.analysis\n"
            "for pkg in (profuse.trace, profuse.analysis):\n"
            "    for m in pkgutil.iter_modules(pkg.__path__):\n"
            "        importlib.import_module(f'{pkg.__name__}.{m.name}')\n"
            f"print(sorted(m for m in sys.modules if m.startswith({FORBIDDEN!r}) and sys.modules[m] is not None))\n"
            "print(len([m for m in sys.modules if m.startswith(('profuse.trace.', 'profuse.analysis.'))]))\n")
    child = run_without_torch(code, tmp_path)
    assert child.returncode == 0, child.stderr[-2000:]
    loaded, count = child.stdout.splitlines()[-2:]
    assert loaded == "[]"
    expected = len([p for d in ("trace", "analysis") for p in (Path(profuse.__file__).parent / d).glob("*.py")
                    if p.name != "__init__.py"])
    assert int(count) >= expected, "every module was imported"


def test_a_plain_trace_folder_has_no_bundle_record(tmp_path):
    b = tmp_path / "plain"
    b.mkdir()
    (b / "trace.json.gz").write_bytes(trace_path("compare_base.json.gz").read_bytes())
    with profuse.load(b, cache=False) as t:
        assert t.bundle is None and t.notes == []


@pytest.mark.parametrize("meta,why", [
    (b"[1]", "not a profuse bundle's"),
    (b'{"status": "complete"}', "not a profuse bundle's"),
    (b"\xff{", "not valid JSON"),
])
def test_a_meta_json_that_is_not_a_bundles_is_ignored_and_said(tmp_path, meta, why):
    (tmp_path / "meta.json").write_bytes(meta)
    got, notes = read_bundle_meta(tmp_path)
    assert got is None and len(notes) == 1 and why in notes[0]


def test_fields_of_the_wrong_shape_are_dropped_one_by_one_and_named(tmp_path):
    # GIVEN a meta.json whose status and peaks are of the wrong shape but whose run is fine
    doc = {"schema": "profuse.bundle/1", "status": [1], "peaks": {"copy_bandwidth_gbps": 0, "matmul_tflops_fp32": 1},
           "run": {"error": "RuntimeError: x", "exit_code": 1}, "host": "h"}
    (tmp_path / "meta.json").write_text(json.dumps(doc))
    got, notes = read_bundle_meta(tmp_path)
    # THEN the rest is kept and the two dropped fields are named
    assert got is not None and got.status is None and got.peaks is None and got.host == "h"
    assert got.run is not None and got.run.error == "RuntimeError: x" and got.run.exit_code == 1
    assert notes == ["meta.json: status, peaks of an unexpected shape: ignored"]


def test_a_meta_json_that_is_a_fifo_is_refused_not_read(tmp_path):
    os.mkfifo(tmp_path / "meta.json")
    got, notes = read_bundle_meta(tmp_path)
    assert got is None and "not a regular file" in notes[0]


def test_an_extra_that_takes_a_capture_field_of_another_shape_is_a_clear_error(tmp_path):
    pytest.importorskip("torch")
    import gzip

    from profuse.capture.bundle import write_bundle
    from profuse.errors import UserError
    from profuse.trace.bundle import CaptureConfig

    raw = tmp_path / "t.json"
    raw.write_bytes(gzip.decompress(trace_path("compare_base.json.gz").read_bytes()))
    with pytest.raises(UserError, match=r"bundle extra .run.: Expected `object \| null`, got `int`"):
        write_bundle(tmp_path / "b", raw, config=CaptureConfig(), status="complete", extra={"run": 5},
                     build_cache=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"], "nothing half-written is left"


def test_a_meta_json_that_is_a_folder_is_said_not_raised(tmp_path):
    # GIVEN a bundle-like folder whose meta.json is a folder (os.fdopen would raise IsADirectoryError)
    (tmp_path / "meta.json").mkdir()
    got, notes = read_bundle_meta(tmp_path)
    # THEN no record, and one note naming what it is
    assert got is None and len(notes) == 1 and "is not a regular file (a folder)" in notes[0]


def test_a_zero_matmul_rate_is_no_peak_and_the_report_still_runs(tmp_path, capsys):
    # GIVEN a bundle whose recorded matmul rate is 0 (a roofline divides by it)
    b = tmp_path / "bundle"
    b.mkdir()
    (b / "trace.json.gz").write_bytes(trace_path("compare_base.json.gz").read_bytes())
    doc = {"schema": "profuse.bundle/1", "peaks": {"copy_bandwidth_gbps": 100, "matmul_tflops_fp32": 0}}
    (b / "meta.json").write_text(json.dumps(doc))
    got, notes = read_bundle_meta(b)
    assert got is not None and got.peaks is None and notes == ["meta.json: peaks of an unexpected shape: ignored"]
    # THEN the report runs, says so, and bounds no roofline by it
    assert main(["report", str(b), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["peaks"] is None or out["peaks"]["source"] != "measured"


def test_the_command_line_names_profuse_not_this_machines_path_to_it(monkeypatch):
    # GIVEN profuse started as `python -m profuse run ...` (argv[0]: the absolute path of its __main__.py)
    # or as the console script, and a user's own script calling profuse.profile()
    from pathlib import Path

    import profuse
    from profuse.capture.bundle import command_line

    main_py = str(Path(profuse.__file__).parent / "__main__.py")
    for argv0 in (main_py, "/home/someone/.venv/bin/profuse"):
        monkeypatch.setattr("sys.argv", [argv0, "run", "--out", "b"])
        assert command_line() == ["profuse", "run", "--out", "b"]
    monkeypatch.setattr("sys.argv", ["/srv/app/infer.py", "--batch", "8"])
    assert command_line() == ["/srv/app/infer.py", "--batch", "8"]
