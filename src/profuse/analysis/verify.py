"""``profuse.advise(model, example_inputs, verify=True)``: find, fix, check, measure.

Profiles the model, finds fusion candidates, applies each fix to a deep copy of the model (swap in
the fused op where the pattern is exact, else ``torch.compile`` the scope), checks numerics against
the original (failing loudly past a dtype-aware bound), re-profiles and reports measured against
predicted saving. The user's model is never modified. Needs torch (imported lazily).
"""
from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ProfuseError
from .fusion import Candidate

# dtype -> (abs, rel) bounds a fix must stay within
TOLERANCE = {"float64": (1e-9, 1e-9), "float32": (1e-4, 1e-4), "bfloat16": (2e-2, 2e-2), "float16": (1e-2, 1e-2)}


class VerificationError(ProfuseError):
    """A fix changed the model's output beyond the bound for its dtype."""


@dataclass
class FixResult:
    pattern: str
    scope: str
    fix: str                          # what was applied to the copy
    modules_changed: int
    predicted_saving_us: float        # per step
    measured_saving_us: float         # per step, in the candidate's scopes (before - after)
    scope_before_us: float            # per step, time in the candidate's scopes before the fix
    scope_after_us: float
    step_saving_us: float             # per step, whole step (median before - median after): noisier
    max_abs_err: float
    max_rel_err: float
    ok: bool


@dataclass
class AdviseResult:
    device_kind: str
    before_us: float                  # median device time per step, original model
    candidates: list[Candidate]
    fixes: list[FixResult] = field(default_factory=list)
    bundle: str = ""
    best: Callable[..., Any] | None = None   # the copy with every fix that paid, when verified

    @property
    def applied(self) -> list[FixResult]:
        return [f for f in self.fixes if f.ok and f.measured_saving_us > 0]


def _module_class(scope: str) -> str | None:
    return scope.removeprefix("nn.Module: ") if scope.startswith("nn.Module: ") else None


def _instances(model: Any, cls_name: str) -> list[tuple[str, Any]]:
    return [(n, m) for n, m in model.named_modules() if type(m).__name__ == cls_name]


def _eps(module: Any) -> float:
    for attr in ("variance_epsilon", "eps", "epsilon"):
        v = getattr(module, attr, None)
        if isinstance(v, (int, float)):
            return float(v)
    return 1e-6


def _weight(module: Any) -> Any:
    w = getattr(module, "weight", None)
    return w if w is not None and getattr(w, "dim", lambda: 0)() == 1 else None


def swap_rms_norm(module: Any) -> bool:
    """Replace a hand-written RMSNorm's forward with torch.nn.functional.rms_norm (same maths:
    computed in float32 when the input is lower precision, weight applied in the input dtype)."""
    import torch
    import torch.nn.functional as F

    w = _weight(module)
    if w is None:
        return False
    eps = _eps(module)

    def forward(x: Any) -> Any:
        y = F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)
        return w * y

    module.forward = forward
    return isinstance(w, torch.Tensor)


def swap_layer_norm(module: Any) -> bool:
    import torch.nn.functional as F

    w = _weight(module)
    b = getattr(module, "bias", None)
    if w is None:
        return False
    eps = _eps(module)
    module.forward = lambda x: F.layer_norm(x, (x.shape[-1],), w, b, eps)
    return True


def compile_module(module: Any) -> bool:
    import torch

    module.forward = torch.compile(module.forward)
    return True


EXACT_SWAPS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "RMSNorm": ("swap in torch.nn.functional.rms_norm", swap_rms_norm),
    "LayerNorm": ("swap in torch.nn.functional.layer_norm", swap_layer_norm),
}


def fixes_for(c: Candidate) -> list[tuple[str, Callable[[Any], bool]]]:
    """The fixes to try for a candidate, exact swap first; torch.compile always."""
    out = []
    if c.pattern in EXACT_SWAPS:
        out.append(EXACT_SWAPS[c.pattern])
    out.append(("torch.compile the module", compile_module))
    return out


def _run(model: Any, inputs: Sequence[Any]) -> Any:
    import torch

    with torch.no_grad():
        return model(*inputs)


def _tensor_out(out: Any) -> Any:
    if hasattr(out, "logits"):
        return out.logits
    if isinstance(out, (tuple, list)):
        return out[0]
    return out


def compare(a: Any, b: Any) -> tuple[float, float]:
    ta, tb = _tensor_out(a).double(), _tensor_out(b).double()
    diff = (ta - tb).abs()
    return float(diff.max()), float((diff / ta.abs().clamp_min(1e-6)).median())


@dataclass
class Timing:
    step_us: float                     # median device time per step
    scope_us: dict[str, float]         # device time per step inside each watched nn.Module class


SCOPE_MARK = "profuse.scope: "


def _watch(model: Any, classes: set[str]) -> list[Any]:
    """Wrap each call of the watched classes in a cheap record_function, so their time can be
    read without the Python tracer (whose overhead would swamp small compiled functions)."""
    import torch

    handles = []
    for _, m in model.named_modules():
        name = type(m).__name__
        if name not in classes:
            continue

        def pre(mod: Any, args: Any, _n: str = name) -> None:
            rf = torch.autograd.profiler.record_function(SCOPE_MARK + _n)
            rf.__enter__()
            mod.__dict__.setdefault("_profuse_rf", []).append(rf)

        def post(mod: Any, args: Any, out: Any) -> None:
            mod.__dict__["_profuse_rf"].pop().__exit__(None, None, None)

        handles += [m.register_forward_pre_hook(pre), m.register_forward_hook(post, always_call=True)]
    return handles


def timing(model: Any, inputs: Sequence[Any], *, steps: int, out: Path, classes: set[str]) -> Timing:
    """Profile ``model(*inputs)`` for ``steps`` steps: time per step and per watched module class."""
    from ..capture import ProfileConfig, profile_calls
    from ..trace import load
    from .scopes import scope_instances
    from .steps import step_stats

    handles = _watch(model, classes)
    try:
        bundle = profile_calls(lambda: model(*inputs),
                               ProfileConfig(out=out, warmup=2, steps=steps, streams="ops,device,runtime"))
    finally:
        for h in handles:
            h.remove()
    with load(bundle) as trace:
        stats = step_stats(trace)
        per_class: dict[str, float] = {}
        for inst in scope_instances(trace).values():
            if inst.kind == "annotation" and inst.name.startswith(SCOPE_MARK):
                cls = inst.name[len(SCOPE_MARK):]
                per_class[cls] = per_class.get(cls, 0.0) + inst.device_ns / 1e3 / stats.steps
    return Timing(stats.device_us_per_call, per_class)


def advise(model: Any, example_inputs: Sequence[Any], *, verify: bool = True, steps: int = 10,
           out: str | Path | None = None, patterns: set[str] | None = None) -> AdviseResult:
    """Find fusion candidates in ``model`` and, with ``verify``, prove each fix on a copy of it."""
    from ..trace import load
    from .fusion import fusion_candidates

    work = Path(out) if out else Path(tempfile.mkdtemp(prefix="profuse-advise-"))
    inputs = tuple(example_inputs)
    _run(model, inputs)  # warm caches before anything is timed
    analysis_steps = min(steps, 3)
    with load(_profile_modules(model, inputs, work / "analysis", analysis_steps)) as trace:
        cands = [c for c in fusion_candidates(trace) if patterns is None or c.pattern in patterns]
        kind = trace.device_kind
    classes = {c for c in (_module_class(k.scope) for k in cands) if c}
    before = timing(model, inputs, steps=steps, out=work / "before", classes=classes)
    result = AdviseResult(device_kind=kind, before_us=before.step_us, candidates=cands, bundle=str(work))
    if not verify:
        return result
    reference = _run(model, inputs)
    dtype = str(_tensor_out(reference).dtype).removeprefix("torch.")
    tol_abs, tol_rel = TOLERANCE.get(dtype, (1e-3, 1e-3))
    best_fixes: list[tuple[str, Callable[[Any], bool]]] = []
    tried_scopes: set[tuple[str, str]] = set()
    for i, c in enumerate(cands):
        cls = _module_class(c.scope)
        # a scope whose instances differ in shape has one candidate per shape; its fix is one change
        if cls is None or (c.pattern, c.scope) in tried_scopes:
            continue
        tried_scopes.add((c.pattern, c.scope))
        # the model's fraction, applied to the scopes' time measured without the Python tracer
        fraction = c.predicted_saving_us / c.device_us if c.device_us else 0.0
        per_step_pred = fraction * before.scope_us.get(cls, c.device_us / analysis_steps)
        tried: list[tuple[float, FixResult, Callable[[Any], bool]]] = []
        for j, (label, fn) in enumerate(fixes_for(c)):
            fixed = copy.deepcopy(model)
            changed = sum(bool(fn(m)) for _, m in _instances(fixed, cls))
            if not changed:
                continue
            got = _run(fixed, inputs)
            err_abs, err_rel = compare(reference, got)
            ok = err_abs <= tol_abs or err_rel <= tol_rel
            if not ok:
                raise VerificationError(f"{label} on {c.scope} changed the output by {err_abs:.3g} (abs), "
                                        f"{err_rel:.3g} (rel); the bound for {dtype} is {tol_abs:g}/{tol_rel:g}")
            after = timing(fixed, inputs, steps=steps, out=work / f"fix{i}-{j}", classes={cls})
            saving = before.scope_us.get(cls, 0.0) - after.scope_us.get(cls, 0.0)
            fr = FixResult(c.pattern, c.scope, label, changed, round(per_step_pred, 2), round(saving, 2),
                           round(before.scope_us.get(cls, 0.0), 2), round(after.scope_us.get(cls, 0.0), 2),
                           round(before.step_us - after.step_us, 2), err_abs, err_rel, ok)
            tried.append((-saving, fr, fn))
        if tried:
            tried.sort(key=lambda t: t[0])
            result.fixes.extend(fr for _, fr, _ in tried)
            _, fr, fn = tried[0]
            if fr.measured_saving_us > 0:
                best_fixes.append((cls, fn))
    if best_fixes:
        best = copy.deepcopy(model)
        for cls, fn in best_fixes:
            for _, m in _instances(best, cls):
                fn(m)
        result.best = best
    return result


def _profile_modules(model: Any, inputs: Sequence[Any], out: Path, steps: int) -> Path:
    from ..capture import ProfileConfig, profile_calls

    return profile_calls(lambda: model(*inputs),
                         ProfileConfig(out=out, warmup=1, steps=steps, streams="ops,device,runtime,shapes,python"))
