"""``profuse.advise(model, example_inputs, verify=True)``: find, fix, check, measure.

Profiles the model, finds fusion candidates, applies each fix to a deep copy of the model (swap in
the fused op where the pattern is exact, else ``torch.compile`` the scope), checks numerics against
the original (failing loudly past a dtype-aware bound), re-profiles before and after in interleaved
rounds and reports the median saving with its spread: a fix is "verified faster" only when its gain
exceeds the noise (the larger inter-quartile range of the two variants), else "not significant".
The user's model is never modified. Needs torch (imported lazily).
"""
from __future__ import annotations

import copy
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..analysis.fusion import Candidate
from ..errors import ProfuseError

# dtype -> (abs, rel) bounds a fix must stay within
TOLERANCE = {"float64": (1e-9, 1e-9), "float32": (1e-4, 1e-4), "bfloat16": (2e-2, 2e-2), "float16": (1e-2, 1e-2)}


ROUNDS = 3              # interleaved before/after measurements per fix
VERIFIED, NOT_SIGNIFICANT, SLOWER = "verified faster", "not significant", "slower"


def spread_us(samples: Sequence[float]) -> float:
    """Inter-quartile range of samples (the range when there are fewer than four)."""
    if len(samples) < 2:
        return 0.0
    if len(samples) < 4:
        return max(samples) - min(samples)
    q = statistics.quantiles(samples, n=4, method="inclusive")
    return q[2] - q[0]


def verdict(before: Sequence[float], after: Sequence[float]) -> tuple[float, str]:
    """(median gain, verdict): a fix is faster only when its gain exceeds the noise of both variants."""
    if not before or not after:
        return 0.0, NOT_SIGNIFICANT
    gain = statistics.median(before) - statistics.median(after)
    noise = max(spread_us(before), spread_us(after))
    if gain > noise and gain > 0:
        return gain, VERIFIED
    if -gain > noise and gain < 0:
        return gain, SLOWER
    return gain, NOT_SIGNIFICANT


class VerificationError(ProfuseError):
    """A fix changed the model's output beyond the bound for its dtype."""


@dataclass
class FixResult:
    """One fix tried on one candidate: what changed, the numerics, and the measured saving with its verdict."""
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
    scope_before_spread_us: float = 0.0   # inter-quartile range of the per-step samples before
    scope_after_spread_us: float = 0.0
    samples: int = 0                      # per-step samples per variant (rounds x steps)
    verdict: str = ""                     # verified faster | not significant | slower


@dataclass
class AdviseResult:
    """What :func:`advise` found and proved: candidates, every fix tried, and the best fixed copy."""
    device_kind: str
    before_us: float                  # median device time per step, original model
    candidates: list[Candidate]
    fixes: list[FixResult] = field(default_factory=list)
    bundle: str = ""
    best: Callable[..., Any] | None = None   # the copy with every fix that paid, when verified

    @property
    def applied(self) -> list[FixResult]:
        """The fixes that kept the numerics and were verified faster."""
        return [f for f in self.fixes if f.ok and f.verdict == VERIFIED]


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
    """Replace a hand-written LayerNorm's forward with torch.nn.functional.layer_norm."""
    import torch.nn.functional as F

    w = _weight(module)
    b = getattr(module, "bias", None)
    if w is None:
        return False
    eps = _eps(module)
    module.forward = lambda x: F.layer_norm(x, (x.shape[-1],), w, b, eps)
    return True


def compile_module(module: Any) -> bool:
    """Replace the module's forward with its ``torch.compile``d version."""
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
    """(max absolute error, median relative error) between two outputs of a model."""
    ta, tb = _tensor_out(a).double(), _tensor_out(b).double()
    diff = (ta - tb).abs()
    return float(diff.max()), float((diff / ta.abs().clamp_min(1e-6)).median())


@dataclass
class Timing:
    """Device time per step of one profiled variant, in total and per watched module class."""
    step_us: float                     # median device time per step
    scope_us: dict[str, float]         # device time per step inside each watched nn.Module class
    scope_samples: dict[str, list[float]] = field(default_factory=dict)  # per step, each class


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
            rf: Any = torch.autograd.profiler.record_function(SCOPE_MARK + _n)
            rf.__enter__()
            mod.__dict__.setdefault("_profuse_rf", []).append(rf)

        def post(mod: Any, args: Any, out: Any) -> None:
            mod.__dict__["_profuse_rf"].pop().__exit__(None, None, None)

        handles += [m.register_forward_pre_hook(pre), m.register_forward_hook(post, always_call=True)]
    return handles


def timing(model: Any, inputs: Sequence[Any], *, steps: int, out: Path, classes: set[str]) -> Timing:
    """Profile ``model(*inputs)`` for ``steps`` steps: time per step and per watched module class."""
    from ..analysis.scopes import scope_instances
    from ..analysis.steps import step_stats
    from ..capture import ProfileConfig, profile_calls
    from ..trace import load

    handles = _watch(model, classes)
    try:
        bundle = profile_calls(lambda: model(*inputs),
                               ProfileConfig(out=out, warmup=2, steps=steps, streams="ops,device,runtime"))
    finally:
        for h in handles:
            h.remove()
    with load(bundle) as trace:
        stats = step_stats(trace)
        steps_at = trace.con.execute("""SELECT ts, ts + dur FROM events WHERE kind = 'annotation'
                                        AND name LIKE 'ProfilerStep#%' ORDER BY ts""").fetchall()
        per_class: dict[str, float] = {}
        per_step: dict[str, list[float]] = {}
        for inst in scope_instances(trace).values():
            if inst.kind == "annotation" and inst.name.startswith(SCOPE_MARK):
                cls = inst.name[len(SCOPE_MARK):]
                per_class[cls] = per_class.get(cls, 0.0) + inst.device_ns / 1e3 / stats.steps
                samples = per_step.setdefault(cls, [0.0] * len(steps_at))
                k = next((i for i, (lo, hi) in enumerate(steps_at) if lo <= inst.ts < hi), None)
                if k is not None:
                    samples[k] += inst.device_ns / 1e3
    return Timing(stats.device_us_per_call, per_class, per_step)


def advise(model: Any, example_inputs: Sequence[Any], *, verify: bool = True, steps: int = 10,
           out: str | Path | None = None, patterns: set[str] | None = None) -> AdviseResult:
    """Find fusion candidates in ``model`` and, with ``verify``, prove each fix on a copy of it."""
    from ..analysis.fusion import fusion_candidates
    from ..trace import load

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
            # interleaved rounds (before, after, before, after, ...) so a busy spell hits both alike
            b_samples, a_samples, b_steps, a_steps = [], [], [], []
            for r in range(ROUNDS):
                b = before if r == 0 else timing(model, inputs, steps=steps, out=work / f"fix{i}-{j}-b{r}",
                                                 classes={cls})
                a = timing(fixed, inputs, steps=steps, out=work / f"fix{i}-{j}-a{r}", classes={cls})
                b_samples += b.scope_samples.get(cls, [])
                a_samples += a.scope_samples.get(cls, [])
                b_steps.append(b.step_us)
                a_steps.append(a.step_us)
            saving, judged = verdict(b_samples, a_samples)
            med_b = statistics.median(b_samples) if b_samples else 0.0
            med_a = statistics.median(a_samples) if a_samples else 0.0
            fr = FixResult(c.pattern, c.scope, label, changed, round(per_step_pred, 2), round(saving, 2),
                           round(med_b, 2), round(med_a, 2),
                           round(statistics.median(b_steps) - statistics.median(a_steps), 2), err_abs, err_rel,
                           ok, round(spread_us(b_samples), 2), round(spread_us(a_samples), 2),
                           min(len(b_samples), len(a_samples)), judged)
            tried.append((-saving, fr, fn))
        if tried:
            tried.sort(key=lambda t: t[0])
            result.fixes.extend(fr for _, fr, _ in tried)
            _, fr, fn = tried[0]
            if fr.verdict == VERIFIED:
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
