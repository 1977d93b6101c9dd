"""profuse.advise tries the exact swap each recommendation names, keeps compilation out of the timed
calls, and says what it did not try. Real torch profiler runs on the CPU."""
from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

import naive_models as nm

import profuse
from profuse.fixes import verify

SWAPS = {"GELU (tanh)": "swap in torch.nn.functional.gelu(approximate='tanh')",
         "SiLU (x * sigmoid(x))": "swap in torch.nn.functional.silu",
         "attention (matmul-softmax-matmul)": "swap in torch.nn.functional.scaled_dot_product_attention"}


class Block(torch.nn.Module):
    """Eager attention, then a hand-written tanh GELU and SiLU: three exact swaps to find."""

    def __init__(self):
        super().__init__()
        self.attn, self.gelu, self.silu = nm.NaiveAttention(), nm.NaiveGeluTanh(), nm.NaiveSiLU()

    def forward(self, q, k, v):
        return self.silu(self.gelu(self.attn(q, k, v)))


@pytest.fixture(scope="module")
def advised(tmp_path_factory):
    model = Block().eval()
    q, k, v = (torch.randn(2, 4, 64, 32, generator=torch.Generator().manual_seed(i)) for i in range(3))
    out = tmp_path_factory.mktemp("advise")
    res = profuse.advise(model, (q, k, v), verify=True, steps=3, out=out, patterns=set(SWAPS))
    return res, out


def test_each_recommendation_gets_its_exact_swap(advised):
    res, _ = advised
    for pattern, label in SWAPS.items():
        tried = {f.fix: f for f in res.fixes if f.pattern == pattern}
        assert set(tried) == {label, "torch.compile the module"}, (pattern, list(tried))
        swap = tried[label]
        # the fused op computes the same function: float32 rounding only
        assert swap.ok and swap.max_abs_err < 1e-5 and swap.modules_changed == 1
        assert swap.verdict in (verify.VERIFIED, verify.NOT_SIGNIFICANT, verify.SLOWER)


def test_compilation_stays_out_of_the_timed_calls(advised):
    res, out = advised
    compiled = [f for f in res.fixes if f.fix == "torch.compile the module"]
    assert compiled and all(f.compiles_while_timed == 0 and f.verdict != verify.RECOMPILED for f in compiled)
    # independently, from the recorded traces: no dynamo or inductor compile step ran in a profiled call
    # of a compiled copy (torch marks its compile phases as "... (dynamo_timed)" events), while the
    # compiled region itself did run there
    bundles = {p: m for p in out.iterdir() if (m := re.fullmatch(r"fix\d+-(\d+)-a\d+(-again)?", p.name))}
    assert bundles
    for b, m in bundles.items():
        with profuse.load(b) as t:
            timed = t.sql_rows("SELECT count(*) FROM events WHERE name LIKE '%dynamo_timed%'")[1][0][0]
            regions = t.sql_rows("SELECT count(*) FROM events WHERE name LIKE 'Torch-Compiled Region%'")[1][0][0]
        assert timed == 0, b
        if m.group(1) == "1":  # fix{i}-{j}-a{round}: j indexes fixes_for(candidate), the compile second
            assert regions > 0, b


def test_graphs_are_not_tried_off_a_graphable_device_and_best_needs_a_verified_fix(advised):
    res, _ = advised
    assert any("reduce-overhead" in n and "not on a CUDA/ROCm device" in n for n in res.notes)
    assert not any(f.pattern == verify.GRAPHS_PATTERN for f in res.fixes)
    assert (res.best is None) == (not res.applied)


def test_a_swap_that_does_not_fit_the_module_is_not_made():
    # a module with weights is not a bare activation: the activation swap leaves it alone
    from profuse.fixes.swaps import swap_gelu_tanh, swap_sdpa

    lin = torch.nn.Linear(4, 4)
    fwd = lin.forward
    assert not swap_gelu_tanh(lin) and lin.forward == fwd
    assert not swap_sdpa(nm.NaiveAttention().train())
    assert swap_sdpa(nm.NaiveAttention().eval())


def test_nothing_to_fix_leaves_best_none(tmp_path):
    res = profuse.advise(torch.nn.Linear(64, 64), (torch.randn(8, 64),), verify=True, steps=2, out=tmp_path)
    assert res.candidates == [] and res.fixes == [] and res.best is None


def test_the_graphs_fix_is_measured_on_whole_steps(tmp_path, monkeypatch):
    # No CUDA device is lent here; the reduce-overhead path itself (compile the whole model, warm it,
    # time whole steps, judge, compose res.best) runs on the CPU, where inductor skips the graphs.
    monkeypatch.setattr("profuse.fixes.swaps.graphable_device", lambda inputs: True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), nm.NaiveGeluTanh()).eval()
    res = profuse.advise(model, (torch.randn(8, 64),), verify=True, steps=3, out=tmp_path, patterns=set())
    (g,) = [f for f in res.fixes if f.pattern == verify.GRAPHS_PATTERN]
    assert g.scope == "model" and g.fix == verify.GRAPHS_FIX and g.ok and g.max_abs_err < 1e-5
    assert g.samples >= 3 and g.scope_before_us > 0 and g.scope_after_us > 0
    assert g.compiles_while_timed == 0
    assert not any("reduce-overhead" in n for n in res.notes)
    assert (res.best is not None) == (g.verdict == verify.VERIFIED)


def test_the_best_copy_takes_the_verified_fix_even_where_an_unverified_one_saved_more():
    # GIVEN one candidate's two fixes, the larger measured saving not verified (noise) and the other verified
    def fix(verdict: str, saving: float) -> verify.FixResult:
        return verify.FixResult("GELU (tanh)", "nn.Module: M", "f", 1, 1.0, saving, 10.0, 10.0 - saving, saving,
                                0.0, 0.0, True, verdict=verdict)

    def swap(m: object) -> bool:
        return True

    def other(m: object) -> bool:
        return True

    tried = [(fix("not significant", 5.0), other), (fix(verify.VERIFIED, 3.0), swap)]
    # THEN the verified one goes into the best copy (applied and best agree); none when none was verified
    assert verify.best_verified(tried) is swap
    assert verify.best_verified([(fix("not significant", 5.0), other)]) is None
