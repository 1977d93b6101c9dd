"""``profuse run`` on a real script, as a user runs it (a subprocess): recording starts at the first step and
costs little beyond the script itself; a bundle that cannot be written keeps the trace and the script's exit
code; a trace over the size limit is kept with a hint that works; an existing bundle is never overwritten.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from profuse.studies.llama import SIZES

# A tiny Llama (the study's "tiny" size: transformers' LlamaConfig, random weights, nothing downloaded), called 8
# times on one prompt; the imports (torch, transformers) are most of the script's time.
_TINY = {k: v for k, v in SIZES["tiny"].items() if k not in ("seq", "new_tokens")}
LLAMA = textwrap.dedent(f"""
    import sys, torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(max_position_embeddings=256, **{_TINY!r})).eval()
    ids = torch.randint(0, {_TINY['vocab_size']}, (1, {SIZES['tiny']['seq']}))
    with torch.no_grad():
        for _ in range(8):
            model(ids)
    print("llama done")
""")

SMALL = textwrap.dedent("""
    import sys, torch
    net = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    with torch.no_grad():
        for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 6):
            net(torch.randn(4, 32))
    print("small done")
    sys.exit(3)
""")

# profuse's own cost beyond the script's, whatever the script: its start (Python, profuse's CLI), exporting the
# trace, the bundle and its cached tables, and the report printed after the run (CPU seconds)
FIXED_S = 8.0


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PROFUSE_CACHE_DIR": str(tmp_path / "cache"), **extra}


def _timed(argv: list[str], env: dict[str, str], **kw: object) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run ``argv``; the result, its wall seconds and the CPU seconds (user + system) it and its children used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, **kw)  # type: ignore[call-overload]
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _profuse_run(args: list[str], script: Path, env: dict[str, str], *script_args: str, **kw: object) \
        -> tuple[subprocess.CompletedProcess[str], float, float]:
    return _timed([sys.executable, "-m", "profuse", "run", *args, "--", "python", str(script), *script_args], env, **kw)


def _x_events(bundle: Path) -> list[dict]:
    doc = json.loads(gzip.decompress((bundle / "trace.json.gz").read_bytes()))
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def _profuse_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("profuse: ")]


def test_run_records_from_the_first_step_and_costs_at_most_twice_the_script(tmp_path):
    script = tmp_path / "llama_infer.py"
    script.write_text(LLAMA)
    env = _env(tmp_path)
    # GIVEN the plain script's cost here
    plain, plain_wall, plain_cpu = _timed([sys.executable, str(script)], env)
    assert plain.returncode == 0 and "llama done" in plain.stdout, plain.stderr[-2000:]
    # WHEN profuse run profiles it (default streams: Python stacks on)
    out = tmp_path / "prof"
    r, wall, cpu = _profuse_run(["--out", str(out), "--warmup", "2", "--steps", "3"], script, env)
    assert r.returncode == 0 and "llama done" in r.stdout, r.stderr[-3000:]
    print(f"plain script {plain_wall:.1f} s wall / {plain_cpu:.1f} s CPU; profuse run {wall:.1f} s wall / "
          f"{cpu:.1f} s CPU")
    # THEN it costs at most twice the script plus profuse's fixed start-up and write-up (CPU time: the machine's
    # other load moves wall time, not this)
    assert cpu <= 2 * plain_cpu + FIXED_S, (cpu, plain_cpu)
    # and nothing was recorded before the first step: every event ends inside or after it, except the
    # profiler's own start just before it; no import machinery anywhere outside the steps
    events = _x_events(out)
    steps = sorted((e for e in events if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    assert [s["name"] for s in steps] == ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"]
    first = steps[0]["ts"]
    earlier = [e for e in events if e["ts"] + e["dur"] < first]
    assert all(first - e["ts"] < 100_000 for e in earlier), [e["name"] for e in earlier if first - e["ts"] >= 100_000]
    assert not [e for e in earlier if e.get("cat") == "cpu_op"], "no op of the script ran before the first step"

    def in_a_step(e: dict) -> bool:
        return any(s["ts"] <= e["ts"] <= s["ts"] + s["dur"] for s in steps)

    imports = [e["name"] for e in events if e.get("cat") == "python_function" and "importlib" in e["name"]
               and not in_a_step(e)]
    assert imports == []
    assert [e for e in events if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: Llama")]
    # and it said when recording started, when it wrote, and what the capture itself cost
    lines = _profuse_lines(r.stderr)
    assert lines[0] == "profuse: recording from forward call 3 (2 warm-up call(s) not recorded), 3 step(s)", lines
    assert f"profuse: writing the bundle {out}" in lines
    overhead = next(ln for ln in lines if ln.startswith("profuse: capture overhead:"))
    meta = json.loads((out / "meta.json").read_text())["run"]
    assert meta["steps_recorded"] == 3 and meta["unrecorded_calls"] == 4, meta  # call 2 and calls 6 to 8
    assert meta["unrecorded_step_ms"] > 0 and meta["recorded_step_ms"] > 0
    ratio = meta["recorded_step_ms"] / meta["unrecorded_step_ms"]
    assert f": {ratio:.2f}x;" in overhead and "with Python stacks" in overhead
    # and the report says the same beside the budget (JSON: capture.overhead)
    from profuse.cli import main

    rep = out.parent / "report.json"
    assert main(["report", str(out), "--format", "json", "-o", str(rep)]) == 0
    assert json.loads(rep.read_text())["capture"]["overhead"] == round(ratio, 2)
    # the recorded steps' wall time as the trace holds it: the fastest mark is no shorter than the fastest step's
    # wall time in meta (the hook measured inside the mark)
    assert min(s["dur"] for s in steps) / 1e3 >= meta["recorded_step_ms"] * 0.99


def _fsize_limit(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_bundle_that_cannot_be_written_keeps_the_trace_and_the_exit_code(tmp_path):
    script = tmp_path / "small.py"
    script.write_text(SMALL)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where --out's parent should be\n")
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    # WHEN the bundle's folder cannot be made (its parent is a file)
    r, _, _ = _profuse_run(["--out", str(blocker / "prof"), "--steps", "3"], script, _env(tmp_path, TMPDIR=str(tmp)))
    # THEN the script's exit code is kept, no traceback, and one line says where the trace is
    assert r.returncode == 3 and "small done" in r.stdout, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    kept_lines = [ln for ln in _profuse_lines(r.stderr) if "the trace is kept at" in ln]
    assert len(kept_lines) == 1 and kept_lines[0].startswith(f"profuse: could not write the bundle {blocker / 'prof'} ("), \
        r.stderr
    command = kept_lines[0].split(": profuse report ", 1)[1]
    kept = Path(shlex.split(command)[0])
    assert kept == tmp / "prof.trace.json" and kept.is_file()
    # and the kept trace is the capture: its report has the three recorded steps
    rep = subprocess.run([sys.executable, "-m", "profuse", "report", str(kept), "--format", "json"], capture_output=True,
                         text=True, env=_env(tmp_path), timeout=300)
    assert rep.returncode == 0, rep.stderr
    assert [s["name"] for s in json.loads(rep.stdout)["steps"]] == ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"]


def test_a_full_disk_is_one_line_and_the_scripts_exit_code(tmp_path):
    script = tmp_path / "small.py"
    script.write_text(SMALL)
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    out = tmp_path / "prof"
    # WHEN no file may grow past 64 KiB (a full disk: writes fail with EFBIG) and the trace is larger
    r, _, _ = _profuse_run(["--out", str(out), "--steps", "20"], script, _env(tmp_path, TMPDIR=str(tmp)), "30",
                           preexec_fn=_fsize_limit(64 << 10))
    # THEN one line says nothing could be saved, with no traceback, and the exit code is the script's
    assert r.returncode == 3 and "small done" in r.stdout, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    failed = [ln for ln in _profuse_lines(r.stderr) if "could not" in ln]
    raw = out.parent / "prof.trace-"
    assert len(failed) == 1 and failed[0].startswith(f"profuse: could not write the trace ({raw}"), r.stderr
    assert failed[0].endswith(".json: the profiler could not write it: the disk is full, or the file too large): "
                              "nothing was saved"), r.stderr
    # and no partial file is left that could pass for a trace
    assert not out.exists() and {p.name for p in tmp_path.iterdir()} <= {"cache", "small.py", "tmpdir"}
    assert not [p for p in tmp.rglob("*") if "trace" in p.name]


def test_a_trace_over_the_size_limit_is_kept_with_a_hint_that_works(tmp_path):
    script = tmp_path / "small.py"
    script.write_text(SMALL)
    out = tmp_path / "prof"
    # WHEN the trace is larger than profuse's limit (made small here: 20,000 bytes of JSON)
    r, _, _ = _profuse_run(["--out", str(out), "--steps", "3"], script, _env(tmp_path, PROFUSE_MAX_TRACE_BYTES="20000"))
    # THEN the bundle is kept, the script's exit code too, and one line says how to read it
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert (out / "meta.json").is_file() and (out / "trace.json.gz").is_file()
    hints = [ln for ln in _profuse_lines(r.stderr) if "over profuse's limit" in ln]
    assert len(hints) == 1, r.stderr
    size = len(gzip.decompress((out / "trace.json.gz").read_bytes()))
    assert f"the trace holds {size:,} bytes of JSON, over profuse's limit of 20,000" in hints[0]
    # and the hint's command works as printed
    m = re.search(r"read it with: PROFUSE_MAX_TRACE_BYTES=(\d+) profuse report (.+)$", hints[0])
    assert m and int(m.group(1)) >= size and Path(shlex.split(m.group(2))[0]) == out
    rep = subprocess.run([sys.executable, "-m", "profuse", "report", str(out), "--format", "json"], capture_output=True,
                         text=True, env=_env(tmp_path, PROFUSE_MAX_TRACE_BYTES=m.group(1)), timeout=300)
    assert rep.returncode == 0, rep.stderr
    assert len(json.loads(rep.stdout)["steps"]) == 3


def test_an_existing_bundle_is_not_overwritten(tmp_path):
    script = tmp_path / "small.py"
    script.write_text(SMALL)
    out = tmp_path / "prof"
    first, _, _ = _profuse_run(["--out", str(out), "--steps", "2"], script, _env(tmp_path))
    assert first.returncode == 3 and (out / "meta.json").is_file(), first.stderr[-2000:]
    before = (out / "trace.json.gz").read_bytes(), (out / "meta.json").read_bytes()
    # WHEN the same command runs again
    again, _, _ = _profuse_run(["--out", str(out), "--steps", "3"], script, _env(tmp_path))
    # THEN the first bundle is untouched and the new one is beside it, with a line saying so
    assert again.returncode == 3, again.stderr[-2000:]
    assert ((out / "trace.json.gz").read_bytes(), (out / "meta.json").read_bytes()) == before
    second = tmp_path / "prof-2"
    assert json.loads((second / "meta.json").read_text())["config"]["steps"] == 3
    assert f"profuse: {out} already exists: this capture is written to {second}" in _profuse_lines(again.stderr)
    assert f"profuse: bundle {second} (complete" in again.stderr


def test_a_kept_trace_never_replaces_a_file_of_the_same_name(tmp_path):
    # another run's kept trace under the name this one would take stays as it was (found by review: the
    # name was checked, then replaced, so a writer in between lost its file)
    from profuse.capture.runner import _keep

    (tmp_path / "prof.trace.json").write_text("theirs")
    raw = tmp_path / "prof.trace-123.json"
    raw.write_text("ours")
    kept = _keep(raw, tmp_path / "prof")
    assert kept == tmp_path / "prof.trace-2.json" and kept.read_text() == "ours" and not raw.exists()
    assert (tmp_path / "prof.trace.json").read_text() == "theirs"
