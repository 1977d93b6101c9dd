"""profuse's emulated PrivateUse1 device (``emu``, src/profuse/emu): real PrivateUse1 activity recorded by
torch's profiler on this CPU machine, read back by profuse like any device's.

A process has one PrivateUse1 backend, and other tests need this one to have none: everything that
loads emu runs in a child interpreter (``profuse study``, ``profuse run`` or a script), and this
process only reads the bundles it wrote. Expected figures come from the raw trace JSON, read here
with plain json (runtime calls by correlation id, the innermost enclosing op by time), never from
profuse's own tables.
"""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

import profuse
from profuse.analysis.step_stats import step_stats

LIB = Path(profuse.__file__).parent / "emu" / "_emu.so"
RUNTIME = "privateuse1_runtime"
DEVICE_CATS = ("kernel", "gpu_memcpy")


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    if not LIB.is_file():
        pytest.fail(f"{LIB} is not built: `make venv` builds it (tools/build_emu.py)")


def _run(args: list[str], cwd: Path, timeout: int = 600) -> str:
    done = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _raw(bundle: Path) -> list[dict[str, Any]]:
    return json.load(gzip.open(bundle / "trace.json.gz"))["traceEvents"]


def _launching_ops(events: list[dict[str, Any]]) -> dict[int, tuple[str, str, float]]:
    """correlation id -> (the innermost cpu_op around its runtime call on the same thread, the call's
    name, the call's start), from the JSON alone."""
    ops: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            ops[(e["pid"], e["tid"])].append(e)
    out = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == RUNTIME:
            around = [o for o in ops[(e["pid"], e["tid"])]
                      if o["ts"] <= e["ts"] and e["ts"] + e["dur"] <= o["ts"] + o["dur"]]
            inner = min(around, key=lambda o: o["dur"])["name"] if around else None
            out[e["args"]["correlation"]] = (inner, e["name"], e["ts"])
    return out


def _steps(events: list[dict[str, Any]]) -> list[tuple[float, float]]:
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))


def _per_step(events: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(kernels, kernel µs) per ProfilerStep: kernels whose launch call starts in the step's window."""
    launch = _launching_ops(events)
    out = []
    for lo, hi in _steps(events):
        ks = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"
              and lo <= launch[e["args"]["correlation"]][2] < hi]
        out.append((len(ks), sum(e["dur"] for e in ks)))
    return out


def test_rmsnorm_study_on_emu(tmp_path: Path) -> None:
    out = tmp_path / "study"
    doc = json.loads(_run(["-m", "profuse", "study", "rmsnorm", "--device", "emu", "--shape", "2,32,256",
                           "--iters", "6", "--format", "json", "--out", str(out)], tmp_path))
    assert doc["device_kind"] == "emu"
    by = {v["name"]: v for v in doc["variants"]}
    assert list(by) == ["op_by_op", "torch.rms_norm"]
    assert any(n.startswith("torch.compile not run") and "'emu'" in n for n in doc["notes"]), doc["notes"]
    expected_ops = {"op_by_op": {"aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"},
                    "torch.rms_norm": {"aten::rms_norm"}}
    for name, v in by.items():
        bundle = Path(v["bundle"])
        raw = _raw(bundle)
        # PrivateUse1 activity in the raw trace: the runtime's calls, and kernels on the device's process
        calls = Counter(e["name"] for e in raw if e.get("ph") == "X" and e.get("cat") == RUNTIME)
        assert calls["emuLaunchKernel"] > 0, calls
        device_pids = {e["pid"] for e in raw if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS}
        names = {e["pid"]: e["args"]["name"] for e in raw if e.get("ph") == "M" and e.get("name") == "process_name"}
        assert {names.get(p) for p in device_pids} == {"emu 0"}
        # every device activity linked to the op that launched it: by correlation id to its runtime call,
        # and that call's innermost op; profuse's events table links each the same
        launch = _launching_ops(raw)
        device = [e for e in raw if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS]
        want = {e["args"]["correlation"]: launch[e["args"]["correlation"]][0] for e in device}
        assert None not in want.values() and {n for n in want.values()} == expected_ops[name]
        with profuse.load(bundle, cache=False) as t:
            got = dict(t.con.execute("""SELECT d.correlation, o.name FROM events d LEFT JOIN events o ON o.id = d.op
                                        WHERE d.kind IN ('kernel', 'memcpy')""").fetchall())
            stats = step_stats(t)
        assert got == want
        # kernels and device time per call from the device's activities
        per_step = _per_step(raw)
        kernels = {k for k, _ in per_step}
        assert kernels == {6 if name == "op_by_op" else 1} and v["kernels_per_call"] == kernels.pop()
        assert stats.per_step_us == pytest.approx(sorted(us for _, us in per_step), rel=1e-6, abs=2e-3)
        assert v["device_us_per_call"] > 0
    assert by["torch.rms_norm"]["kernels_per_call"] < by["op_by_op"]["kernels_per_call"]
    assert by["torch.rms_norm"]["ran"] == ["emu_fused_rms_norm_kernel"]
    assert by["torch.rms_norm"]["max_abs_err"] < 1e-5 and by["op_by_op"]["max_abs_err"] < 1e-5
    # the op table's device column is named after the device
    fused = Path(by["torch.rms_norm"]["bundle"])
    rep = json.loads(_run(["-m", "profuse", "report", str(fused), "--format", "json", "--no-advice"], tmp_path))
    assert rep["device_label"] == "emu" and rep["trace"]["device_kind"] == "emu"
    table = _run(["-m", "profuse", "report", str(fused), "--no-advice"], tmp_path)
    assert "Self emu" in table
    row = next(o for o in rep["ops"] if o["name"] == "aten::rms_norm")
    kernel_us = sum(e["dur"] for e in _raw(fused) if e.get("ph") == "X" and e.get("cat") == "kernel")
    assert row["self_device_us"] == pytest.approx(kernel_us, rel=1e-6, abs=2e-3)


def test_explore_follows_an_op_to_its_emu_kernels(tmp_path: Path) -> None:
    from explorer_util import running

    script = tmp_path / "fused.py"
    script.write_text(textwrap.dedent("""
        import sys, torch, profuse
        import profuse.emu  # noqa: F401  (registers the device)
        from profuse.capture import profile_calls
        cfg = profuse.ProfileConfig(devices="emu", out=sys.argv[1], warmup=1, steps=4)
        x, w = torch.randn(8, 128).to("emu"), torch.randn(128).to("emu")
        profile_calls(lambda: torch.rms_norm(x, (128,), w, 1e-6), cfg)
    """))
    _run([str(script), str(tmp_path / "b")], tmp_path)
    raw = _raw(tmp_path / "b")
    launch = _launching_ops(raw)
    expected = Counter(e["name"] for e in raw if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS
                       and launch[e["args"]["correlation"]][0] == "aten::rms_norm")
    assert expected == {"emu_fused_rms_norm_kernel": 4}
    with profuse.load(tmp_path / "b") as t, running([t]) as url:
        import urllib.request

        with urllib.request.urlopen(url.at("/api/0/op_kernels?key=aten%3A%3Arms_norm")) as r:
            got = json.load(r)
    assert {k["name"]: k["calls"] for k in got["kernels"]} == dict(expected)


TINY = textwrap.dedent('''
    """A tiny transformer block on emu, profiled with profuse; one op forced to the CPU fallback."""
    import json, sys
    import torch
    from torch import nn
    import torch.nn.functional as F
    import profuse
    import profuse.emu as emu

    torch.manual_seed(0)
    V, D, H = 64, 32, 4


    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(V, D)
            self.norm1, self.norm2 = nn.RMSNorm(D, eps=1e-6), nn.RMSNorm(D, eps=1e-6)
            self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.gate, self.up, self.down = nn.Linear(D, 2 * D), nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

        def forward(self, ids):
            x = self.emb(ids)
            b, s, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, H, D // H).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, D))
            h = self.norm2(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))


    model = Block().eval()
    ids = torch.randint(0, V, (2, 16))
    with torch.no_grad():
        ref = model(ids)
        model.to("emu")
        ids_e = ids.to("emu")
        emu.reset_counts()
        out = model(ids_e)
        unforced = emu.fallbacks()
        err = float((out.cpu() - ref).abs().max())
    cfg = profuse.ProfileConfig(devices="emu", out=sys.argv[1], warmup=1, steps=3)
    emu.reset_counts()
    with emu.forced_fallback([sys.argv[2]]), torch.no_grad(), profuse.profile(cfg) as p:
        for _ in range(cfg.warmup + cfg.steps):
            model(ids_e)
            p.step()
    print(json.dumps({"err": err, "unforced": unforced, "fallbacks": emu.fallbacks(), "bundle": str(p.bundle)}))
''')


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tiny block run once on emu with ``aten::silu`` forced to the CPU fallback."""
    d = tmp_path_factory.mktemp("tiny")
    (d / "tiny.py").write_text(TINY)
    return dict(json.loads(_run([str(d / "tiny.py"), str(d / "bundle"), "aten::silu"], d)))


def test_tiny_model_runs_on_emu_and_counts_the_forced_fallback(tiny_run: dict[str, Any]) -> None:
    assert tiny_run["err"] < 1e-5, "emu computes what the CPU computes"
    assert tiny_run["unforced"] == {}, "every op of the block has an emu kernel"
    assert tiny_run["fallbacks"] == {"aten::silu": 4}, "one per call: warm-up 1 + 3 steps"
    raw = _raw(Path(tiny_run["bundle"]))
    launch = _launching_ops(raw)
    # inside each recorded aten::silu: a device-to-host copy, then a host-to-device copy, and no kernel
    silu = [e for e in raw if e.get("ph") == "X" and e.get("name") == "aten::silu"]
    assert len(silu) == 3
    for op in silu:
        inside = sorted((ts, call) for _, call, ts in launch.values() if op["ts"] <= ts < op["ts"] + op["dur"])
        assert [c for _, c in inside] == ["emuMemcpyDtoH", "emuMemcpyHtoD"], inside
    copies = Counter(e["name"] for e in raw if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy")
    assert copies == {"Memcpy DtoH (emu -> Host)": 3, "Memcpy HtoD (Host -> emu)": 3}


# torch's at::native::cpu_fallback (what PrivateUse1 backends use) records the fallback inside the op
# itself: aten::silu holds aten::_to_cpu (the device-to-host copy), then the CPU kernel (not recorded:
# a redispatch), then aten::to (host-to-device). The cpu_fallback lever (analysis/diagnosis/levers.py)
# looks for three top-level ops in a row instead; strict, so this fails once the rule finds it.
def test_the_diagnosis_names_the_op_that_fell_back(tiny_run: dict[str, Any], tmp_path: Path) -> None:
    rep = json.loads(_run(["-m", "profuse", "report", tiny_run["bundle"], "--format", "json"], tmp_path))
    assert rep["trace"]["device_kind"] == "emu"
    # Where the lever ranks depends on the run's own timings: on a busy machine the fallback's bound can
    # fall under 1% of the span, into the small items, whose JSON keeps only their kinds. So the op is
    # looked for among every lever the diagnosis made, the small items' too.
    from profuse.analysis.diagnosis import diagnose

    with profuse.load(tiny_run["bundle"], cache=False) as t:
        d = diagnose(t)
    named = [lv.target for lv in (*d.levers, *d.small_items) if lv.kind == "cpu_fallback"]
    assert named == ["aten::silu"], [(lv.kind, lv.target) for lv in (*d.levers, *d.small_items)]
    shown = [lv["target"] for lv in rep["diagnosis"]["levers"] if lv["kind"] == "cpu_fallback"]
    assert shown in (["aten::silu"], []) and (shown or "cpu_fallback" in rep["diagnosis"]["small_items"]["kinds"])


def test_profuse_run_on_emu(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    script.write_text(textwrap.dedent("""
        import torch
        import profuse.emu  # noqa: F401  (registers the device; profuse run --devices emu has already)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).to("emu")
        x = torch.randn(4, 32).to("emu")
        with torch.no_grad():
            for _ in range(5):
                model(x)
    """))
    out = tmp_path / "run"
    _run(["-m", "profuse", "run", "--devices", "emu", "--warmup", "1", "--steps", "3", "--out", str(out), "--",
          sys.executable, str(script)], tmp_path)
    raw = _raw(out)
    launch = _launching_ops(raw)
    kernels = Counter((launch[e["args"]["correlation"]][0], e["name"]) for e in raw
                      if e.get("ph") == "X" and e.get("cat") == "kernel")
    assert kernels == {("aten::addmm", "emu_addmm_kernel"): 6, ("aten::gelu", "emu_gelu_kernel"): 3}
    with profuse.load(out, cache=False) as t:
        assert t.device_kind == "emu"


def test_kernels_run_on_the_current_stream(tmp_path: Path) -> None:
    script = tmp_path / "streams.py"
    script.write_text(textwrap.dedent("""
        import sys, torch, profuse
        import profuse.emu as emu
        from profuse.capture import profile_calls
        side = emu.new_stream()
        x = torch.randn(64, 64).to("emu")
        def step():
            x @ x
            with emu.stream(side):
                x + x
        profile_calls(step, profuse.ProfileConfig(devices="emu", out=sys.argv[1], warmup=1, steps=2))
        print(side)
    """))
    side = int(_run([str(script), str(tmp_path / "b")], tmp_path).strip().splitlines()[-1])
    assert side > 0
    raw = _raw(tmp_path / "b")
    streams = Counter((e["name"], e["tid"], e["args"]["stream"]) for e in raw
                      if e.get("ph") == "X" and e.get("cat") == "kernel")
    assert streams == {("emu_mm_kernel", 0, 0): 2, ("emu_add_kernel", side, side): 2}


def test_fused_rms_norm_matches_torch_in_every_dtype_without_eps(tmp_path: Path) -> None:
    # torch's default eps is the machine epsilon of the input's op math type (double's for float64; the
    # fused kernel used float's for every dtype: found by review). On inputs of 1e-9 the eps decides it.
    out = _run(["-c", textwrap.dedent("""
        import torch, profuse.emu
        for dt in (torch.float64, torch.float32):
            x = torch.randn(4, 64, dtype=dt) * 1e-9
            w = torch.rand(64, dtype=dt)
            want, got = torch.rms_norm(x, (64,), w), torch.rms_norm(x.to("emu"), (64,), w.to("emu")).cpu()
            print(dt, float((want - got).abs().max() / want.abs().max()))
    """)], tmp_path)
    errors = dict(line.rsplit(" ", 1) for line in out.strip().splitlines())
    assert float(errors["torch.float64"]) < 1e-12 and float(errors["torch.float32"]) < 1e-5, errors
