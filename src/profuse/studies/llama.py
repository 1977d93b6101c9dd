"""The Llama study: a small Llama-style decoder (transformers' LlamaConfig, random weights, nothing
downloaded) with Hugging Face's hand-written RMSNorm. The advisor finds the RMSNorm pattern in every
layer, recommends a fix, verifies it on a copy of the model and measures time per token before/after.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..analysis.advice.records import Candidate
from ..fixes.verify import AdviseResult, FixResult, advise, intra_op_threads

SIZES = {
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 256, "seq": 16, "new_tokens": 4},
    "small": {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 12,
              "num_key_value_heads": 4, "vocab_size": 4096, "seq": 512, "new_tokens": 8},
}
SCHEMA = "profuse.study/1"


@dataclass
class LlamaStudy:
    """The Llama study's result: the model configuration, the fusion candidates found and each fix measured."""

    size: str
    config: dict[str, Any]
    device_kind: str
    rmsnorm: Candidate | None
    candidates: list[Candidate]
    fixes: list[FixResult]
    before_step_us: float
    ms_per_token_before: float
    ms_per_token_after: float | None   # None: the fixed model failed end to end (a note says why)
    max_abs_err: float
    out: str
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The study as its JSON document."""
        from dataclasses import asdict

        c = self.rmsnorm
        return {"schema": SCHEMA, "study": "llama", "size": self.size, "config": self.config,
                "device_kind": self.device_kind,
                "rmsnorm_candidate": None if c is None else {
                    "pattern": c.pattern, "scope": c.scope, "instances": c.instances,
                    "kernels_per_instance": c.kernels_per_instance, "device_us": round(c.device_us, 3),
                    "predicted_saving_us": round(c.predicted_saving_us, 3), "recommendation": c.recommendation},
                "candidates": [{"pattern": k.pattern, "scope": k.scope, "instances": k.instances}
                               for k in self.candidates],
                "fixes": [asdict(f) for f in self.fixes], "before_step_us": round(self.before_step_us, 2),
                "ms_per_token_before": round(self.ms_per_token_before, 3),
                "ms_per_token_after": None if self.ms_per_token_after is None else round(self.ms_per_token_after, 3),
                "speedup": round(self.ms_per_token_before / self.ms_per_token_after, 3)
                if self.ms_per_token_after else None,
                "max_abs_err": self.max_abs_err, "notes": self.notes}


def build_model(size: str = "tiny", seed: int = 0, device: str = "cpu") -> tuple[Any, Any, dict[str, Any]]:
    """A randomly initialised Llama of the named size (no download) with a prompt of token ids and its
    configuration, both on ``device``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    spec: dict[str, Any] = dict(SIZES[size])
    seq, _ = spec.pop("seq"), spec.pop("new_tokens")
    torch.manual_seed(seed)
    cfg = LlamaConfig(max_position_embeddings=max(256, 2 * seq), **spec)
    model: Any = LlamaForCausalLM(cfg)
    model.eval().to(device)
    ids = torch.randint(0, cfg.vocab_size, (1, seq), generator=torch.Generator().manual_seed(seed)).to(device)
    return model, ids, spec | {"seq": seq}


def ms_per_token(model: Any, ids: Any, new_tokens: int, repeats: int = 3) -> float:
    """Wall time of greedy generation per new token (median of ``repeats`` after one warm-up)."""
    import torch

    def gen() -> float:
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                           pad_token_id=0)
        if ids.device.type == "cuda":  # ROCm's devices are "cuda" too
            torch.cuda.synchronize(ids.device)
        return (time.perf_counter() - t) * 1e3 / new_tokens

    gen()
    return statistics.median(gen() for _ in range(repeats))


def end_to_end_after(best: Any, ids: Any, new_tokens: int, notes: list[str]) -> float | None:
    """ms per token of greedy generation with the fixed model; None and a note where generation with it
    fails. A fix verified per forward call can still break generation: a forward compiled with
    mode="reduce-overhead" replays CUDA graphs whose outputs the next replay overwrites, and generate()
    keeps the previous step's key/value tensors (it needs a static cache for graphs)."""
    try:
        return ms_per_token(best, ids, new_tokens)
    except Exception as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        notes.append(f"the fixed model failed in greedy generation ({type(err).__name__}: {first}); end to end "
                     f"not measured: the fixes hold per forward call only (for CUDA graphs, generate() needs a "
                     f"static cache: cache_implementation=\"static\")")
        return None


def run_llama_study(*, size: str = "tiny", steps: int = 5, out: str | Path = "profuse-out/llama",
                    all_patterns: bool = False, threads: int | None = None, device: str = "cpu") -> LlamaStudy:
    """Profile a random-weight Llama on ``device``, find its fusion candidates and measure the RMSNorm fix
    on a copy. ``threads`` sets torch's intra-op threads for all of it, the end-to-end timing included."""
    with intra_op_threads(threads):
        study = _run(size=size, steps=steps, out=out, all_patterns=all_patterns, device=device)
    if threads is not None:
        study.notes.append(f"measured with {threads} intra-op thread(s)")
    return study


def _run(*, size: str, steps: int, out: str | Path, all_patterns: bool, device: str) -> LlamaStudy:
    model, ids, cfg = build_model(size, device=device)
    new_tokens = SIZES[size]["new_tokens"]
    res: AdviseResult = advise(model, (ids,), verify=True, steps=steps, out=out,
                               patterns=None if all_patterns else {"RMSNorm"})
    rms = next((c for c in res.candidates if c.pattern == "RMSNorm"), None)
    notes = list(res.notes)
    if rms is None:
        notes.append("no RMSNorm candidate found")
    before = ms_per_token(model, ids, new_tokens)
    after = end_to_end_after(res.best, ids, new_tokens, notes) if res.best is not None else before
    if res.best is None:
        notes.append("no fix made the model faster here; the model is unchanged")
        if size == "tiny":
            notes.append("at this size each RMSNorm call holds 1024 elements: per-call dispatch, not the work "
                         "fusion removes, sets its time; --size small gives the fix work to save")
    err = max((f.max_abs_err for f in res.fixes), default=0.0)
    return LlamaStudy(size=size, config=cfg, device_kind=res.device_kind, rmsnorm=rms, candidates=res.candidates,
                      fixes=res.fixes, before_step_us=res.before_us, ms_per_token_before=before,
                      ms_per_token_after=after, max_abs_err=err, out=str(out), notes=notes)
