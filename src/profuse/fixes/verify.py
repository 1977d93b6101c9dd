"""``profuse.advise(model, example_inputs, verify=True)``: find, fix, check, measure.

Profiles the model, finds fusion candidates, applies each fix to a deep copy of the model (the
exact swap the recommendation names where the module has that form: ``F.rms_norm``,
``F.layer_norm``, ``F.gelu``, ``F.silu``, ``scaled_dot_product_attention``; ``torch.compile`` of
the scope always; ``torch.compile(mode="reduce-overhead")`` of the whole model when the inputs are
on a CUDA/ROCm device), checks numerics against the original (failing loudly past a dtype-aware
bound), warms every copy up (compilation, CUDA-graph recording) before anything is timed, re-profiles
before and after in interleaved rounds and reports the median saving with its spread: a fix is
"verified faster" only when its gain exceeds the noise (the larger inter-quartile range of the two
variants), else "not significant"; a copy that still compiled while it was timed is "recompiled
while timed" and never counted faster. The user's model is never modified. Needs torch (imported
lazily).
"""
from __future__ import annotations

import copy
import statistics
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..analysis.advice.records import Candidate
from ..errors import ProfuseError
from . import swaps
from .progress import Progress

# dtype -> (abs, rel) bounds a fix must stay within
TOLERANCE = {"float64": (1e-9, 1e-9), "float32": (1e-4, 1e-4), "bfloat16": (2e-2, 2e-2), "float16": (1e-2, 1e-2)}


ROUNDS = 3              # interleaved before/after measurements per fix
WARM_CALLS = 3          # calls of a fixed copy before it is timed: compilation, graph recording, caches
VERIFIED, NOT_SIGNIFICANT, SLOWER = "verified faster", "not significant", "slower"
RECOMPILED = "recompiled while timed"
GRAPHS_PATTERN, GRAPHS_FIX = "launch overhead (CUDA graphs)", 'torch.compile(mode="reduce-overhead") the model'


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
    verdict: str = ""                     # verified faster | not significant | slower | recompiled while timed
    compiles_while_timed: int = 0         # dynamo compilations during the kept timed calls (0 when clean)


@dataclass(repr=False)
class AdviseResult:
    """What :func:`advise` found and proved: candidates, every fix tried, and the best fixed copy.

    Its ``repr`` (and a notebook's view of it) is a summary: the baseline, each fix tried with its verdict,
    measured saving and numerics, the notes and what ``best`` holds (:mod:`profuse.fixes.summary`).
    """
    device_kind: str
    before_us: float                  # median device time per step, original model
    candidates: list[Candidate]
    fixes: list[FixResult] = field(default_factory=list)
    bundle: str = ""
    # A deep copy of the model with every verified-faster fix applied (numerics checked again on the
    # combination); None when no fix was verified faster, so callers keep the original model.
    best: Callable[..., Any] | None = None
    notes: list[str] = field(default_factory=list)   # fixes not tried, and why

    @property
    def applied(self) -> list[FixResult]:
        """The fixes that kept the numerics and were verified faster."""
        return [f for f in self.fixes if f.ok and f.verdict == VERIFIED]

    def __repr__(self) -> str:
        from .summary import summary_text

        return summary_text(self)

    def _repr_html_(self) -> str:
        from .summary import summary_html

        return summary_html(self)


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
    "GELU (tanh)": ("swap in torch.nn.functional.gelu(approximate='tanh')", swaps.swap_gelu_tanh),
    "GELU (erf)": ("swap in torch.nn.functional.gelu", swaps.swap_gelu_erf),
    "SiLU (x * sigmoid(x))": ("swap in torch.nn.functional.silu", swaps.swap_silu),
    "attention (matmul-softmax-matmul)": ("swap in torch.nn.functional.scaled_dot_product_attention",
                                          swaps.swap_sdpa),
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


def _warm(model: Any, inputs: Sequence[Any]) -> None:
    """Call a fixed copy until compilation and CUDA-graph recording are behind it."""
    for _ in range(WARM_CALLS):
        _run(model, inputs)


def compiles_so_far() -> int:
    """Frames torch.compile (dynamo) has compiled in this process, recompilations included."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover - torch without dynamo
        return 0
    return int(counters["frames"]["total"])


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
    step_samples: list[float] = field(default_factory=list)               # device time of each step
    compiles: int = 0                  # dynamo compilations while this variant was profiled


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
    from ..analysis.step_stats import step_stats
    from ..analysis.steps import step_model
    from ..capture import ProfileConfig, profile_calls
    from ..trace import load

    handles = _watch(model, classes)
    compiled_before = compiles_so_far()
    try:
        bundle = profile_calls(lambda: model(*inputs),
                               ProfileConfig(out=out, warmup=2, steps=steps, streams="ops,device,runtime"))
    finally:
        for h in handles:
            h.remove()
    with load(bundle) as trace:
        stats = step_stats(trace)
        steps_at = [(st.ts, st.end) for st in step_model(trace).steps]   # the steps step_stats counts
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
    return Timing(stats.device_us_per_call, per_class, per_step, list(stats.per_step_us),
                  compiles_so_far() - compiled_before)


def measured(model: Any, inputs: Sequence[Any], *, steps: int, out: Path, classes: set[str]) -> Timing:
    """:func:`timing`, measured again once when torch.compile compiled during the profiled calls
    (a guard that failed only under the profiler): compile time never counts as the model's time.
    The result's ``compiles`` says whether the kept measurement is still not clean."""
    t = timing(model, inputs, steps=steps, out=out, classes=classes)
    if t.compiles:
        t = timing(model, inputs, steps=steps, out=out.with_name(out.name + "-again"), classes=classes)
    return t


@dataclass
class _Rounds:
    before: list[float] = field(default_factory=list)       # per-step samples in the watched scope
    after: list[float] = field(default_factory=list)
    before_steps: list[float] = field(default_factory=list)  # median device time per step, each round
    after_steps: list[float] = field(default_factory=list)
    compiles: int = 0


def _rounds(model: Any, fixed: Any, inputs: Sequence[Any], *, steps: int, work: Path, tag: str,
            cls: str | None, first: Timing) -> _Rounds:
    """Interleaved rounds (before, after, before, after, ...) so a busy spell hits both alike.
    ``cls`` None measures whole steps (a fix of the whole model)."""
    r = _Rounds()
    classes = {cls} if cls else set()
    for k in range(ROUNDS):
        b = first if k == 0 else measured(model, inputs, steps=steps, out=work / f"{tag}-b{k}", classes=classes)
        a = measured(fixed, inputs, steps=steps, out=work / f"{tag}-a{k}", classes=classes)
        r.before += b.scope_samples.get(cls, []) if cls else b.step_samples
        r.after += a.scope_samples.get(cls, []) if cls else a.step_samples
        r.before_steps.append(b.step_us)
        r.after_steps.append(a.step_us)
        r.compiles += a.compiles
    return r


def _judge(pattern: str, scope: str, label: str, changed: int, predicted: float, r: _Rounds,
           errs: tuple[float, float]) -> FixResult:
    saving, judged = verdict(r.before, r.after)
    if r.compiles:
        judged = RECOMPILED
    med_b = statistics.median(r.before) if r.before else 0.0
    med_a = statistics.median(r.after) if r.after else 0.0
    return FixResult(pattern, scope, label, changed, round(predicted, 2), round(saving, 2), round(med_b, 2),
                     round(med_a, 2), round(statistics.median(r.before_steps) - statistics.median(r.after_steps), 2),
                     errs[0], errs[1], True, round(spread_us(r.before), 2), round(spread_us(r.after), 2),
                     min(len(r.before), len(r.after)), judged, r.compiles)


@contextmanager
def intra_op_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``n`` inside the block (None: left as it is), restored after.

    On a CPU shared with other work, a parallel region waits at its barrier for a thread the OS has
    descheduled, so with more threads than free cores a timed call can take a scheduler quantum
    longer; one thread measures the work itself. Set before anything compiles: inductor's CPU
    kernels take the thread count in force when they are compiled.
    """
    import torch

    if n is None:
        yield
        return
    if n < 1:
        raise ValueError(f"threads must be at least 1 (got {n})")
    was = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(was)


def advise(model: Any, example_inputs: Sequence[Any], *, verify: bool = True, steps: int = 10,
           out: str | Path | None = None, patterns: set[str] | None = None,
           threads: int | None = None, progress: bool = True) -> AdviseResult:
    """Find fusion candidates in ``model`` and, with ``verify``, prove each fix on a copy of it.

    ``res.best`` is a copy with every fix verified faster, or None when none was (keep ``model``).
    ``threads`` sets torch's intra-op threads for the whole run (see :func:`intra_op_threads`).
    ``progress`` says each phase and fix as it begins (stderr; in a notebook, one text display updated
    in place: :mod:`profuse.fixes.progress`).
    """
    say = Progress("profuse.advise", enabled=progress)
    with intra_op_threads(threads):
        res = _advise(model, example_inputs, verify=verify, steps=steps, out=out, patterns=patterns, say=say)
    say(f"done: {len(res.fixes)} fix(es) tried, {len(res.applied)} verified faster")
    return res


def _advise(model: Any, example_inputs: Sequence[Any], *, verify: bool, steps: int,
            out: str | Path | None, patterns: set[str] | None, say: Progress) -> AdviseResult:
    from ..analysis.advice.fusion import fusion_candidates
    from ..trace import load

    work = Path(out) if out else Path(tempfile.mkdtemp(prefix="profuse-advise-"))
    inputs = tuple(example_inputs)
    _run(model, inputs)  # warm caches before anything is timed
    analysis_steps = min(steps, 3)
    say(f"profiling the model to find fusion candidates ({analysis_steps} steps, python stacks)")
    with load(_profile_modules(model, inputs, work / "analysis", analysis_steps)) as trace:
        cands = [c for c in fusion_candidates(trace) if patterns is None or c.pattern in patterns]
        kind = trace.device_kind
    classes = {c for c in (_module_class(k.scope) for k in cands) if c}
    say(f"{len(cands)} candidate(s); measuring the model as it is ({steps} steps)")
    before = measured(model, inputs, steps=steps, out=work / "before", classes=classes)
    result = AdviseResult(device_kind=kind, before_us=before.step_us, candidates=cands, bundle=str(work))
    if not verify:
        return result
    s = _Trial(model, inputs, steps, work, before, _checker(_run(model, inputs)), result, say)
    best_fixes: list[tuple[str, Callable[[Any], bool]]] = []
    todo = _scopes_to_try(cands)
    for k, (i, c, cls) in enumerate(todo, 1):
        s.step = f"[{k}/{len(todo)}] {c.pattern} in {c.scope}"
        best = _try_candidate(s, i, c, cls, analysis_steps)
        if best is not None:
            best_fixes.append((cls, best))
    graphs = _try_graphs(s)
    if best_fixes or graphs:
        say("checking the verified fixes together")
        best_model = copy.deepcopy(model)
        for cls, fn in best_fixes:
            for _, m in _instances(best_model, cls):
                fn(m)
        if graphs:
            best_model = swaps.compile_reduce_overhead(best_model)
        s.check("the verified fixes together", "the model", _run(best_model, inputs))
        result.best = best_model
    return result


def _scopes_to_try(cands: list[Candidate]) -> list[tuple[int, Candidate, str]]:
    """(index, candidate, module class) of each candidate whose fix is tried: one per pattern and scope (a
    scope whose instances differ in shape has one candidate per shape; its fix is one change), in a module."""
    out: list[tuple[int, Candidate, str]] = []
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(cands):
        cls = _module_class(c.scope)
        if cls is None or (c.pattern, c.scope) in seen:
            continue
        seen.add((c.pattern, c.scope))
        out.append((i, c, cls))
    return out


@dataclass
class _Trial:
    """What every fix tried on one model shares: the model, inputs, steps, work folder, the measured
    baseline, the numerics check, the result being filled and the progress lines."""

    model: Any
    inputs: tuple[Any, ...]
    steps: int
    work: Path
    before: Timing
    check: Callable[[str, str, Any], tuple[float, float]]
    result: AdviseResult
    say: Progress
    step: str = ""          # the candidate being tried, as progress names it


def _checker(reference: Any) -> Callable[[str, str, Any], tuple[float, float]]:
    """A check of a fixed model's output against ``reference`` within its dtype's bound: (abs, rel) error,
    or a VerificationError naming the fix, where and by how much."""
    dtype = str(_tensor_out(reference).dtype).removeprefix("torch.")
    tol_abs, tol_rel = TOLERANCE.get(dtype, (1e-3, 1e-3))

    def check(label: str, where: str, got: Any) -> tuple[float, float]:
        err_abs, err_rel = compare(reference, got)
        if not (err_abs <= tol_abs or err_rel <= tol_rel):
            raise VerificationError(f"{label} on {where} changed the output by {err_abs:.3g} (abs), "
                                    f"{err_rel:.3g} (rel); the bound for {dtype} is {tol_abs:g}/{tol_rel:g}")
        return err_abs, err_rel
    return check


def _try_candidate(s: _Trial, i: int, c: Any, cls: str, analysis_steps: int) -> Callable[[Any], bool] | None:
    """Every fix of one candidate on a copy of the model, checked and measured (into ``s.result``); the
    best one's swap where it was verified faster, else None."""
    # the model's fraction, applied to the scopes' time measured without the Python tracer (the
    # median step, as the measured saving is: a mean would carry a busy spell into the prediction)
    fraction = c.predicted_saving_us / c.device_us if c.device_us else 0.0
    samples = s.before.scope_samples.get(cls)
    per_step_pred = fraction * (statistics.median(samples) if samples else c.device_us / analysis_steps)
    tried: list[tuple[float, FixResult, Callable[[Any], bool]]] = []
    for j, (label, fn) in enumerate(fixes_for(c)):
        fixed = copy.deepcopy(s.model)
        changed = sum(bool(fn(m)) for _, m in _instances(fixed, cls))
        if not changed:
            s.result.notes.append(f"{label}: {c.scope} does not have the form it replaces; not tried")
            continue
        s.say(f"{s.step}: {label} (numerics, warm-up, {ROUNDS} interleaved rounds of {s.steps} steps)")
        errs = s.check(label, c.scope, _run(fixed, s.inputs))
        _warm(fixed, s.inputs)  # compilation and its first calls stay out of the timed calls
        r = _rounds(s.model, fixed, s.inputs, steps=s.steps, work=s.work, tag=f"fix{i}-{j}", cls=cls, first=s.before)
        fr = _judge(c.pattern, c.scope, label, changed, per_step_pred, r, errs)
        tried.append((-fr.measured_saving_us, fr, fn))
    if not tried:
        return None
    tried.sort(key=lambda t: t[0])
    s.result.fixes.extend(fr for _, fr, _ in tried)
    return best_verified([(fr, fn) for _, fr, fn in tried])


def best_verified(tried: list[tuple[FixResult, Callable[[Any], bool]]]) -> Callable[[Any], bool] | None:
    """Of one candidate's fixes (largest measured saving first), the swap of the first verified faster:
    a larger saving that was not verified (its spread overlaps the baseline's) never hides one that was;
    None when none was."""
    return next((fn for fr, fn in tried if fr.ok and fr.verdict == VERIFIED), None)


def _try_graphs(s: _Trial) -> bool:
    """torch.compile(mode="reduce-overhead") on a copy of the whole model, where the inputs are on a
    CUDA/ROCm device: checked and measured (into ``s.result``); whether it was verified faster."""
    if not swaps.graphable_device(s.inputs):
        s.result.notes.append(f"{GRAPHS_FIX}: not tried, the inputs are not on a CUDA/ROCm device")
        return False
    s.say(f"{GRAPHS_FIX} (numerics, warm-up, {ROUNDS} interleaved rounds of {s.steps} steps)")
    fixed = swaps.compile_reduce_overhead(copy.deepcopy(s.model))
    errs = s.check(GRAPHS_FIX, "the model", _run(fixed, s.inputs))
    _warm(fixed, s.inputs)
    r = _rounds(s.model, fixed, s.inputs, steps=s.steps, work=s.work, tag="graphs", cls=None, first=s.before)
    fr = _judge(GRAPHS_PATTERN, "model", GRAPHS_FIX, 1, 0.0, r, errs)
    s.result.fixes.append(fr)
    return fr.verdict == VERIFIED


def _profile_modules(model: Any, inputs: Sequence[Any], out: Path, steps: int) -> Path:
    from ..capture import ProfileConfig, profile_calls

    return profile_calls(lambda: model(*inputs),
                         ProfileConfig(out=out, warmup=1, steps=steps, streams="ops,device,runtime,shapes,python"))
