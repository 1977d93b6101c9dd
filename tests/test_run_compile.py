"""``profuse run`` on a script that calls ``torch.compile`` with default options, as a user runs it: the script
succeeds, a call that compiles is never recorded as a steady step (nor is the compile recorded under the Python
tracer), and the run costs at most twice the plain script plus profuse's fixed start-up.
"""
from __future__ import annotations

import gzip
import json
import sys
import textwrap

import pytest
from test_run_capture import FIXED_S, _env, _profuse_lines, _timed, _x_events

pytest.importorskip("torch")
pytest.importorskip("transformers")

from profuse.studies.llama import SIZES

# the study's tiny size with one layer (a second only adds the same kernels: compiling takes half the time)
_TINY = {k: v for k, v in SIZES["tiny"].items() if k not in ("seq", "new_tokens")} | {"num_hidden_layers": 1}
# the tiny Llama under torch.compile (default options): call 1 compiles; call 5 brings a new prompt length, so
# dynamo compiles again (a dynamic-shape graph), and calls 6 to 9 run it
COMPILED = textwrap.dedent(f"""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = torch.compile(LlamaForCausalLM(LlamaConfig(max_position_embeddings=256, **{_TINY!r})).eval())
    with torch.no_grad():
        for i in range(9):
            model(torch.randint(0, {_TINY['vocab_size']}, (1, 16 if i < 4 else 24)))
    print("compiled script done")
""")

# dynamo tracing bytecode and inductor compiling a graph: what a compile recorded under the Python tracer is made of
COMPILER_FRAMES = ("torch/_dynamo/symbolic_convert.py", "torch/_inductor/compile_fx.py", "torch/_inductor/graph.py")


def test_a_compiled_script_runs_and_its_compiling_call_is_no_step(tmp_path):
    script = tmp_path / "compiled_infer.py"
    script.write_text(COMPILED)
    out = tmp_path / "prof"
    # WHEN profuse run profiles it with its defaults, and the plain script runs; each compiles from nothing
    # (an inductor cache of its own)
    r, wall, cpu = _timed([sys.executable, "-m", "profuse", "run", "--out", str(out), "--", "python", str(script)],
                          _env(tmp_path, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor-run")))
    plain, plain_wall, plain_cpu = _timed([sys.executable, str(script)],
                                          _env(tmp_path, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor-plain")))
    print(f"plain script {plain_wall:.1f} s wall / {plain_cpu:.1f} s CPU; profuse run {wall:.1f} s wall / "
          f"{cpu:.1f} s CPU")
    # THEN both succeed, without torch's warning about profuse's hooks
    assert plain.returncode == 0 and "compiled script done" in plain.stdout, plain.stderr[-2000:]
    assert r.returncode == 0 and "compiled script done" in r.stdout, r.stderr[-3000:]
    assert "global hooks" not in r.stderr
    # and the run costs at most twice the script plus profuse's fixed start-up and write-up
    assert cpu <= 2 * plain_cpu + FIXED_S, (cpu, plain_cpu)
    # and the calls that compiled are known: call 1 (warm-up) and call 5, which ended the recording before its
    # compile; calls 3 and 4 are the steady steps recorded
    run = json.loads((out / "meta.json").read_text())["run"]
    assert run["compiled_calls"] == [1, 5] and run["compiled_steps"] == [5], run
    assert run["steps_recorded"] == 2 and run["forwards"] == 5, run
    events = _x_events(out)
    marks = [e["name"] for e in sorted(events, key=lambda e: e["ts"]) if e.get("cat") == "user_annotation"
             and (e["name"].startswith("ProfilerStep#") or e["name"].startswith("profuse:"))]
    assert marks == ["ProfilerStep#3", "ProfilerStep#4", "profuse: call #5 compiled"]
    compiling = [e["name"] for e in events if e["name"].startswith(COMPILER_FRAMES)]
    assert compiling == [], compiling[:5]
    # and the report's steps are the two steady ones; the run said why there are not five
    rep = _timed([sys.executable, "-m", "profuse", "report", str(out), "--format", "json"], _env(tmp_path))[0]
    assert rep.returncode == 0, rep.stderr
    assert [s["name"] for s in json.loads(rep.stdout)["steps"]] == ["ProfilerStep#3", "ProfilerStep#4"]
    lines = _profuse_lines(r.stderr)
    assert any(ln.startswith("profuse: torch.compile compiled in call 5: the recording ended before the compile")
               for ln in lines), lines
    assert "profuse: the script made 2 steady step(s) after warm-up, not 5" in lines
    assert len(gzip.decompress((out / "trace.json.gz").read_bytes())) < 20 << 20
