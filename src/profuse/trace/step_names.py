"""Which annotation names are steps, and what a step's name says (phase, batch, tokens): the name rule
of the step model (:mod:`profuse.analysis.steps` states it in full), here in the trace layer so the
loader's memory tables name the step at a time by the same rule."""
from __future__ import annotations

import re
from dataclasses import dataclass

_VLLM = re.compile(r"^execute_(?:(?P<tokens>\d+)_)?context_(?P<ctx>\d+)(?:\((?P<ctx_t>[^)]*)\))?"
                   r"_generation_(?P<gen>\d+)(?:\((?P<gen_t>[^)]*)\))?")
_SGLANG = re.compile(r"^step\[(?P<mode>[A-Z0-9_]+)(?P<rest>[^\]]*)\]")
_FIELD = re.compile(r"(?P<key>bs|toks|tokens)=(?P<val>\d+)")
# sglang's forward modes; speculative decoding runs the draft model (DRAFT_EXTEND) and then the target
# model over the drafted tokens (TARGET_VERIFY)
_SGLANG_PHASE = {"DECODE": "decode", "EXTEND": "prefill", "PREFILL": "prefill", "SPLIT_PREFILL": "prefill",
                 "MIXED": "mixed", "TARGET_VERIFY": "verify", "DRAFT_EXTEND": "draft", "DRAFT_EXTEND_V2": "draft",
                 "DRAFT_DECODE": "draft"}
# vLLM's per-phase statistics in parentheses: sq (query tokens), sk (key/value tokens), sqsq, sqsk
_STAT = re.compile(r"(?<![a-z])(?P<key>sq|sk)(?P<val>\d+)")

# SQL text matching every step annotation's name (fixed patterns, nothing from a trace); the kind is
# checked beside it (STEP_WHERE)
STEP_SQL = ("(name LIKE 'ProfilerStep#%' OR regexp_matches(name, '^execute_([0-9]+_)?context_[0-9]+') "
            "OR regexp_matches(name, '^step\\[[A-Z_]+'))")
STEP_WHERE = f"kind = 'annotation' AND {STEP_SQL}"


@dataclass(frozen=True)
class StepName:
    """What a step annotation's name says: its engine and, for serving steps, phase, batch and tokens."""

    engines: tuple[str, ...]   # ("profiler",) | ("vllm",) | ("sglang",); sorted, several where nested annotations name it
    phase: str | None     # prefill | decode | mixed | draft | verify (speculative decoding) | None
    batch: int | None     # requests in the batch
    tokens: int | None    # tokens scheduled in the step
    kv_tokens: int | None = None   # key/value tokens the step's attention reads (vLLM's sk), where annotated

    @property
    def engine(self) -> str:
        """The engines as one label (``sglang, vllm`` where both name the step)."""
        return ", ".join(self.engines)


def _count(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _stat(text: str | None, key: str) -> int | None:
    """vLLM's ``sq``/``sk`` statistic in a phase's parentheses (``sq32sk32785sqsq32sqsk32785``)."""
    found = [int(m["val"]) for m in _STAT.finditer(text or "") if m["key"] == key]
    return found[0] if found else None


def _sum(a: int | None, b: int | None) -> int | None:
    return a + b if a is not None and b is not None else None


def _vllm_tokens(m: re.Match[str]) -> int | None:
    if m["tokens"] is not None:
        return int(m["tokens"])
    ctx, gen = _count(m["ctx_t"]), _count(m["gen_t"])
    if ctx is not None and gen is not None:
        return ctx + gen
    return _sum(_stat(m["ctx_t"], "sq"), _stat(m["gen_t"], "sq"))


def parse_step(name: str) -> StepName | None:
    """The step a name describes, or None when it is not a step annotation."""
    if name.startswith("ProfilerStep#"):
        return StepName(("profiler",), None, None, None)
    m = _VLLM.match(name)
    if m:
        ctx, gen = int(m["ctx"]), int(m["gen"])
        phase = "mixed" if ctx and gen else "prefill" if ctx else "decode" if gen else None
        return StepName(("vllm",), phase, ctx + gen, _vllm_tokens(m), _sum(_stat(m["ctx_t"], "sk"), _stat(m["gen_t"], "sk")))
    m = _SGLANG.match(name)
    if m:
        fields = {f["key"]: int(f["val"]) for f in _FIELD.finditer(m["rest"])}
        return StepName(("sglang",), _SGLANG_PHASE.get(m["mode"]), fields.get("bs"),
                        fields.get("toks", fields.get("tokens")))
    return None


def merge(outer: StepName, inner: StepName) -> StepName:
    """A step's description from its own name and a step annotation nested in it: known fields win; the engines
    of both, but a ``ProfilerStep#`` around a serving step's annotation, which names no engine of its own."""
    named = tuple(sorted({*outer.engines, *inner.engines} - {"profiler"}))
    return StepName(named or ("profiler",),
                    outer.phase or inner.phase, outer.batch if outer.batch is not None else inner.batch,
                    outer.tokens if outer.tokens is not None else inner.tokens,
                    outer.kv_tokens if outer.kv_tokens is not None else inner.kv_tokens)


def is_step_name(name: str) -> bool:
    """Whether an annotation with this name is a step annotation (the step model's name rule)."""
    return parse_step(name) is not None
