"""Every pattern of the library is found in a profile this test records on CPU from a naive module."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import naive_models as nm

import profuse
from profuse.analysis.advice.fusion import fusion_candidates

X = (16, 128, 64)  # large enough that the ops move bytes (at tiny sizes CPU time is dispatch, not traffic)


def _cases():
    x, r = torch.randn(X), torch.randn(X)
    q, k, v = (torch.randn(4, 8, 128, 64) for _ in range(3))
    cos, sin = torch.randn(128, 64), torch.randn(128, 64)
    return [
        ("RMSNorm", nm.NaiveRMSNorm(64), (x,)),
        ("LayerNorm", nm.NaiveLayerNorm(64), (x,)),
        ("softmax", nm.NaiveSoftmax(), (x,)),
        ("GELU (tanh)", nm.NaiveGeluTanh(), (x,)),
        ("GELU (erf)", nm.NaiveGeluErf(), (x,)),
        ("SiLU x mul (SwiGLU)", nm.NaiveSwiGLU(64), (x,)),
        ("rotary embedding", nm.NaiveRotary(), (q, cos, sin)),
        ("bias + activation", nm.NaiveBiasAct(64), (x,)),
        ("residual add + norm", nm.NaiveResidualNorm(64), (x, r)),
        ("attention (matmul-softmax-matmul)", nm.NaiveAttention(), (q, k, v)),
        ("attention (matmul-softmax-matmul)", nm.NaiveAttentionDropout().eval(), (q, k, v)),
        ("QuickGELU (x * sigmoid(1.702 x))", nm.NaiveQuickGELU(), (x,)),
        ("SiLU (x * sigmoid(x))", nm.NaiveSiLU(), (x,)),
        ("SiLU x mul (SwiGLU)", nm.NaiveSigmoidSwiGLU(64), (x,)),
    ]


@pytest.mark.parametrize("pattern,module,args", _cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_pattern_found_in_recorded_profile(pattern, module, args, tmp_path):
    # GIVEN a naive module profiled on the CPU with module scopes and shapes
    cfg = profuse.ProfileConfig(out=tmp_path / "b", warmup=1, steps=2, streams="ops,shapes,python")
    with torch.no_grad(), profuse.profile(cfg) as p:
        for _ in range(3):
            module(*args)
            p.step()
    # WHEN the advisor reads the trace
    with profuse.load(p.bundle) as trace:
        cands = fusion_candidates(trace)
    # THEN it names the pattern, in that module, once per call, with a saving and a fix
    scope = f"nn.Module: {type(module).__name__}"
    hits = [c for c in cands if c.pattern == pattern and c.scope == scope]
    assert hits, [(c.pattern, c.scope) for c in cands]
    c = hits[0]
    assert c.instances == 2
    assert c.kernels_per_instance >= 2
    assert 0 < c.predicted_saving_us <= c.device_us
    assert c.bytes_fused <= c.bytes_now
    assert c.recommendation and c.confidence in ("high", "medium", "low")
    # and no other activation pattern claims the same scope (QuickGELU is not SwiGLU, SiLU is not GELU)
    acts = {"QuickGELU (x * sigmoid(1.702 x))", "SiLU (x * sigmoid(x))", "SiLU x mul (SwiGLU)", "GELU (tanh)",
            "GELU (erf)"}
    others = {h.pattern for h in cands if h.scope == scope and h.pattern in acts} - {pattern}
    assert not others, others


def test_rmsnorm_intermediates_are_what_fusion_avoids_writing(tmp_path):
    m, x = nm.NaiveRMSNorm(64), torch.randn(X)
    cfg = profuse.ProfileConfig(out=tmp_path / "b", warmup=0, steps=1, streams="ops,shapes,python")
    with torch.no_grad(), profuse.profile(cfg) as p:
        m(x)
        p.step()
    with profuse.load(p.bundle) as trace:
        c = next(c for c in fusion_candidates(trace) if c.pattern == "RMSNorm")
    written = {d["op"]: d["bytes_per_instance"] for d in c.intermediates}
    n, rows = X[0] * X[1] * X[2], X[0] * X[1]
    assert written["aten::pow"] == 4 * n          # x_sq
    assert written["aten::mean"] == 4 * rows      # mean_sq
    assert "aten::mul" in written and c.intermediate_bytes >= 4 * (n + rows)


def test_op_classes_include_torch_pointwise_tags_without_torch():
    from profuse.analysis.opclass import op_class

    # aten::hypot is not in the hand-written table; the shipped table of torch's pointwise tags has it
    assert op_class("aten::hypot") == "pointwise"
    assert op_class("aten::hypot_") == "pointwise"
    for name in ("aten::add", "aten::mul", "aten::rsqrt", "aten::silu", "aten::erf"):
        assert op_class(name) == "pointwise"
    assert op_class("aten::mm") == "matmul" and op_class("aten::no_such_op") == "other"
