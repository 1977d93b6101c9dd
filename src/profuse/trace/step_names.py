"""Which annotation names are steps, and what a step's name says (phase, batch, tokens): the name rule
of the step model (:mod:`profuse.analysis.steps` states it in full), here in the trace layer so the
loader's memory tables name the step at a time by the same rule."""
from __future__ import annotations

import re
from dataclasses import dataclass

_VLLM = re.compile(r"^execute_(?:(?P<tokens>\d+)_)?context_(?P<ctx>\d+)(?:\((?P<ctx_t>[^)]*)\))?"
                   r"_generation_(?P<gen>\d+)(?:\((?P<gen_t>[^)]*)\))?")
_SGLANG = re.compile(r"^step\[(?P<mode>[A-Z_]+)(?P<rest>[^\]]*)\]")
_FIELD = re.compile(r"(?P<key>bs|toks|tokens)=(?P<val>\d+)")
_SGLANG_PHASE = {"DECODE": "decode", "EXTEND": "prefill", "PREFILL": "prefill", "MIXED": "mixed"}

# SQL text matching every step annotation's name (fixed patterns, nothing from a trace); the kind is
# checked beside it (STEP_WHERE)
STEP_SQL = ("(name LIKE 'ProfilerStep#%' OR regexp_matches(name, '^execute_([0-9]+_)?context_[0-9]+') "
            "OR regexp_matches(name, '^step\\[[A-Z_]+'))")
STEP_WHERE = f"kind = 'annotation' AND {STEP_SQL}"


@dataclass(frozen=True)
class StepName:
    """What a step annotation's name says: its engine and, for serving steps, phase, batch and tokens."""

    engine: str           # profiler | vllm | sglang
    phase: str | None     # prefill | decode | mixed | None
    batch: int | None     # requests in the batch
    tokens: int | None    # tokens scheduled in the step


def _count(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _vllm_tokens(m: re.Match[str]) -> int | None:
    if m["tokens"] is not None:
        return int(m["tokens"])
    ctx, gen = _count(m["ctx_t"]), _count(m["gen_t"])
    return ctx + gen if ctx is not None and gen is not None else None


def parse_step(name: str) -> StepName | None:
    """The step a name describes, or None when it is not a step annotation."""
    if name.startswith("ProfilerStep#"):
        return StepName("profiler", None, None, None)
    m = _VLLM.match(name)
    if m:
        ctx, gen = int(m["ctx"]), int(m["gen"])
        phase = "mixed" if ctx and gen else "prefill" if ctx else "decode" if gen else None
        return StepName("vllm", phase, ctx + gen, _vllm_tokens(m))
    m = _SGLANG.match(name)
    if m:
        fields = {f["key"]: int(f["val"]) for f in _FIELD.finditer(m["rest"])}
        return StepName("sglang", _SGLANG_PHASE.get(m["mode"]), fields.get("bs"),
                        fields.get("toks", fields.get("tokens")))
    return None


def merge(outer: StepName, inner: StepName) -> StepName:
    """A step's description from its own name and a step annotation nested in it: known fields win."""
    return StepName(outer.engine if outer.engine != "profiler" else inner.engine,
                    outer.phase or inner.phase, outer.batch if outer.batch is not None else inner.batch,
                    outer.tokens if outer.tokens is not None else inner.tokens)


def is_step_name(name: str) -> bool:
    """Whether an annotation with this name is a step annotation (the step model's name rule)."""
    return parse_step(name) is not None
