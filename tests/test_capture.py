"""Capture: config validation, profile()/Exporter bundles, `profuse run`, interrupted captures."""
from __future__ import annotations

import json
import textwrap

import pytest

torch = pytest.importorskip("torch")

import profuse
from profuse.capture import is_bundle, read_meta
from profuse.cli import main


@pytest.mark.parametrize("kwargs,field", [
    ({"streams": ("ops", "gpu")}, "streams"),
    ({"streams": ()}, "streams"),
    ({"warmup": -1}, "warmup"),
    ({"steps": 0}, "steps"),
    ({"max_events": "many"}, "max_events"),
    ({"devices": "cuda:zero"}, "devices"),
])
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"ProfileConfig\.{field}"):
        profuse.ProfileConfig(**kwargs)


def test_absent_device_is_a_clear_error():
    cfg = profuse.ProfileConfig(devices="cuda:0" if not torch.cuda.is_available() else "cuda:99")
    with pytest.raises(ValueError, match=r"ProfileConfig\.devices: .*(not available|does not exist)"):
        cfg.torch_kwargs()


def test_unknown_stream_lists_allowed():
    with pytest.raises(ValueError, match="allowed: ops, device, runtime, python, shapes, memory, flops"):
        profuse.ProfileConfig(streams="ops,gpu")


def model_and_input():
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return m, torch.randn(8, 16)


def test_profile_writes_a_bundle_report_reads(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PROFUSE_CACHE_MIN_SECONDS", "0")  # this tiny trace is cached too
    m, x = model_and_input()
    cfg = profuse.ProfileConfig(out=tmp_path / "b", warmup=1, steps=3)
    with profuse.profile(cfg) as p:
        for _ in range(4):
            m(x)
            p.step()
    assert p.bundle == tmp_path / "b" and is_bundle(p.bundle)
    meta = read_meta(p.bundle)
    assert meta.status == "complete" and meta.config is not None and meta.config.steps == 3
    assert meta.device is not None and meta.device.torch == torch.__version__
    assert not list(p.bundle.glob("*.duckdb")), "a bundle carries no database: a colleague's would be untrusted"
    with profuse.load(p.bundle) as t:
        assert t.from_cache, "the tables were built into this user's cache at capture time"
    assert main(["report", str(p.bundle), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    ops = {o["name"]: o for o in doc["ops"]}
    assert ops["aten::addmm"]["calls"] == 2 * 3, "two Linear layers over three recorded steps"
    # the three recorded steps are the step table's; on this CPU-only trace they are no op-table rows
    assert [s["name"].startswith("ProfilerStep#") for s in doc["steps"]] == [True] * 3
    assert not any(n.startswith("ProfilerStep#") for n in ops)
    # every row: with module scopes on by default, Python frames reorder the top
    assert "aten::addmm" in repr(profuse.table(p, top=0))


def test_exporter_is_an_on_trace_ready_callback(tmp_path, capsys):
    m, x = model_and_input()
    cfg = profuse.ProfileConfig(out=tmp_path / "e", streams="ops,shapes")
    exporter = profuse.Exporter(cfg)
    with torch.profiler.profile(**cfg.torch_kwargs(), on_trace_ready=exporter):
        m(x)
    assert exporter.bundle == tmp_path / "e"
    assert main(["report", str(exporter.bundle), "--group-by", "shape", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["ops"]
    assert any(r["name"] == "aten::addmm" and "[8,16]" in r["shape"].replace(" ", "") for r in rows)


def test_keyboard_interrupt_leaves_no_complete_bundle(tmp_path):
    m, x = model_and_input()
    cfg = profuse.ProfileConfig(out=tmp_path / "k", warmup=0, steps=5)
    with pytest.raises(KeyboardInterrupt), profuse.profile(cfg) as p:
        m(x)
        p.step()
        raise KeyboardInterrupt
    assert not (tmp_path / "k").exists()
    assert list(tmp_path.iterdir()) == [], "no temporary folder left behind either"


def test_error_in_block_leaves_a_failed_bundle(tmp_path):
    m, x = model_and_input()
    cfg = profuse.ProfileConfig(out=tmp_path / "f", warmup=0, steps=5)
    with pytest.raises(ZeroDivisionError), profuse.profile(cfg) as p:
        m(x)
        p.step()
        1 / 0
    meta = read_meta(tmp_path / "f")
    assert meta.status == "failed" and "ZeroDivisionError" in (meta.error or "")


SCRIPT = textwrap.dedent("""
    import sys, torch
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Linear(8, 8)
        def forward(self, x):
            return self.inner(x).relu().sum()
    net = Net()
    for i in range(int(sys.argv[1])):
        net(torch.randn(4, 8))
    print("script done", sys.argv[1:])
    sys.exit(int(sys.argv[2]))
""")


def test_run_profiles_an_unmodified_script(tmp_path, capsys):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    out = tmp_path / "bundle"
    code = main(["run", "--out", str(out), "--warmup", "2", "--steps", "3", "--", "python", str(script), "7", "3"])
    captured = capsys.readouterr()
    assert code == 3, "the script's exit code is kept"
    assert "script done ['7', '3']" in captured.out, "the script's output is kept"
    meta = read_meta(out)
    assert meta.run is not None
    assert meta.run.forwards == 5, "2 warm-up + 3 recorded outermost calls seen"
    assert meta.run.steps_recorded == 3
    assert meta.status == "complete", "the capture's status is the capture's own"
    assert meta.run.exit_code == 3, "the script's exit code is recorded apart from it"
    assert main(["report", str(out), "--format", "json"]) == 0
    ops = {o["name"]: o for o in json.loads(capsys.readouterr().out)["ops"]}
    # outermost Net calls are steps: the inner Linear does not start steps of its own
    assert ops["aten::linear"]["calls"] == 3
    assert ops["aten::relu"]["calls"] == 3


def test_run_script_that_raises_keeps_its_error_apart_from_the_capture(tmp_path, capsys):
    script = tmp_path / "boom.py"
    script.write_text("import torch\nm = torch.nn.Linear(2, 2)\nm(torch.randn(1, 2))\nm(torch.randn(1, 2))\n"
                      "raise RuntimeError('boom')\n")
    code = main(["run", "--out", str(tmp_path / "b"), "--warmup", "1", "--", "python", str(script)])
    assert code == 1
    assert "RuntimeError: boom" in capsys.readouterr().err
    meta = read_meta(tmp_path / "b")
    assert meta.status == "complete" and meta.run is not None and "boom" in (meta.run.error or "")
    assert meta.run.exit_code == 1
    assert main(["report", str(tmp_path / "b")]) == 0
    assert "The profiled script exited with code 1 (RuntimeError: boom); the capture is complete" \
        in capsys.readouterr().out


def test_run_without_a_module_profiles_the_whole_run(tmp_path, capsys):
    script = tmp_path / "plain.py"
    script.write_text("import torch\na = torch.randn(64, 64)\nfor _ in range(3):\n    a = a @ a.t()\n")
    assert main(["run", "--out", str(tmp_path / "w"), "--", "python", str(script)]) == 0
    assert "whole run" in capsys.readouterr().err
    run = read_meta(tmp_path / "w").run
    assert run is not None and run.whole_run is True
    assert main(["report", str(tmp_path / "w"), "--format", "json"]) == 0
    ops = {o["name"]: o for o in json.loads(capsys.readouterr().out)["ops"]}
    assert ops["aten::mm"]["calls"] == 3


def test_run_needs_a_script(capsys):
    assert main(["run", "--", "python"]) == 2
    assert "name the script" in capsys.readouterr().err


STDERR_SCRIPT = textwrap.dedent("""
    import sys, torch
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    for i in range(4):
        net(torch.randn(4, 8))
        print(f"script stderr {i}", file=sys.stderr, flush=True)
""")


def test_run_defaults_record_steps_and_modules_and_keep_markers_off_stderr(tmp_path, capfd):
    # GIVEN the plain torch profiler prints its USDT marker lines to fd 2 on this machine
    import subprocess
    import sys

    probe = subprocess.run([sys.executable, "-c", "import torch\nwith torch.profiler.profile(): torch.ones(1)"],
                           capture_output=True, text=True, check=True)
    markers_here = "USDT:" in probe.stderr
    script = tmp_path / "s.py"
    script.write_text(STDERR_SCRIPT)
    out = tmp_path / "b"
    # WHEN profuse run profiles the script with its default streams
    assert main(["run", "--out", str(out), "--warmup", "1", "--steps", "2", "--", "python", str(script)]) == 0
    err = capfd.readouterr().err
    # THEN the script's own stderr is all there, the profiler's markers are not
    for i in range(4):
        assert f"script stderr {i}" in err
    assert "USDT:" not in err, err if markers_here else "markers never printed here"
    # and the bundle has a ProfilerStep per recorded step and nn.Module scopes
    with profuse.load(out) as t:
        steps = t.sql_rows("SELECT name FROM events WHERE name LIKE 'ProfilerStep#%' ORDER BY ts")[1]
        modules = {r[0] for r in t.sql_rows("SELECT name FROM scopes WHERE kind = 'module'")[1]}
    assert len(steps) == 2
    assert {"Sequential", "Linear", "ReLU"} <= modules
    assert main(["report", str(out), "--format", "json"]) == 0
    doc = json.loads(capfd.readouterr().out)
    assert doc["device_busy"] is None, "CPU-only: no device claims"
    assert [s["name"] for s in doc["steps"]] == [n for (n,) in steps], "per-step CPU time, one per mark"


def test_profuse_s_own_captures_replace_what_they_wrote(tmp_path, capsys):
    # a study or advise run twice writes its variants' folders again (no OUT-2 piling up), while
    # profuse.profile into an existing folder keeps it and goes to OUT-2
    from profuse.capture import ProfileConfig, profile_calls

    lin = torch.nn.Linear(8, 8)
    x = torch.randn(2, 8)
    cfg = ProfileConfig(out=str(tmp_path / "v"), warmup=1, steps=2)
    first = profile_calls(lambda: lin(x), cfg)
    second = profile_calls(lambda: lin(x), cfg)
    assert first == second == tmp_path / "v" and not (tmp_path / "v-2").exists()
    with profuse.profile(ProfileConfig(out=str(tmp_path / "v"), warmup=1, steps=2)) as p:
        for _ in range(3):
            lin(x)
            p.step()
    assert p.bundle == tmp_path / "v-2" and is_bundle(first)
    assert "already exists" in capsys.readouterr().err
