"""Step annotations of training loops and serving engines, and what their names say.

- ``ProfilerStep#N`` (torch.profiler's ``schedule``/``step()``): a plain step.
- vLLM's ``execute_{tokens}_context_{n}(...)_generation_{m}(...)``: ``tokens`` scheduled tokens,
  ``n`` prefill (context) requests and ``m`` decode (generation) requests; the phase is ``prefill``
  (m = 0), ``decode`` (n = 0) or ``mixed``, the batch n + m.
- sglang's ``step[DECODE bs=B]`` / ``step[EXTEND bs=B toks=T]`` (EXTEND is prefill; ``MIXED`` is
  mixed): batch B, tokens T where the name carries it. ``IDLE`` has no phase.

Any other name is not a step; a name of one of these forms with fields it does not parse keeps its
phase and leaves the rest unknown (None).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_VLLM = re.compile(r"^execute_(?P<tokens>\d+)_context_(?P<ctx>\d+)(?:\(.*?\))?_generation_(?P<gen>\d+)")
_SGLANG = re.compile(r"^step\[(?P<mode>[A-Z_]+)(?P<rest>[^\]]*)\]")
_FIELD = re.compile(r"(?P<key>bs|toks|tokens)=(?P<val>\d+)")
_SGLANG_PHASE = {"DECODE": "decode", "EXTEND": "prefill", "PREFILL": "prefill", "MIXED": "mixed"}

# SQL text matching every step annotation (fixed patterns, nothing from a trace)
STEP_SQL = ("(name LIKE 'ProfilerStep#%' OR regexp_matches(name, '^execute_[0-9]+_context_[0-9]+') "
            "OR regexp_matches(name, '^step\\[[A-Z_]+'))")


@dataclass(frozen=True)
class StepName:
    """What a step annotation's name says: its engine and, for serving steps, phase, batch and tokens."""

    engine: str           # profiler | vllm | sglang
    phase: str | None     # prefill | decode | mixed | None
    batch: int | None     # requests in the batch
    tokens: int | None    # tokens scheduled in the step


def parse_step(name: str) -> StepName | None:
    """The step a name describes, or None when it is not a step annotation."""
    if name.startswith("ProfilerStep#"):
        return StepName("profiler", None, None, None)
    m = _VLLM.match(name)
    if m:
        ctx, gen = int(m["ctx"]), int(m["gen"])
        phase = "mixed" if ctx and gen else "prefill" if ctx else "decode" if gen else None
        return StepName("vllm", phase, ctx + gen, int(m["tokens"]))
    m = _SGLANG.match(name)
    if m:
        fields = {f["key"]: int(f["val"]) for f in _FIELD.finditer(m["rest"])}
        return StepName("sglang", _SGLANG_PHASE.get(m["mode"]), fields.get("bs"),
                        fields.get("toks", fields.get("tokens")))
    return None


def merge(outer: StepName, inner: StepName) -> StepName:
    """A step's description from its own name and a step annotation nested in it (a serving step
    inside ``ProfilerStep#N``, or sglang's inside vLLM-style names): known fields win over None."""
    return StepName(outer.engine if outer.engine != "profiler" else inner.engine,
                    outer.phase or inner.phase, outer.batch if outer.batch is not None else inner.batch,
                    outer.tokens if outer.tokens is not None else inner.tokens)
