"""The advice's records: what the advisor finds, as every renderer sends it (the payloads hold these
records themselves, no copy of their fields). Light on purpose: a stored report decodes into them
without importing the analyses that make them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..compiled import CompiledSummary
from .hotspots import Hotspot
from .interruptions import Interruption
from .roofline import Peaks, RooflineRow


@dataclass
class Candidate:
    """A run of ops worth fusing in a scope: instances, kernels, measured time and the predicted saving
    (``predicted_saving_us <= device_us``), times rounded when made."""

    pattern: str
    scope: str
    instances: int
    kernels_per_instance: float
    recommendation: str
    confidence: str
    ops: list[str]
    intermediates: list[dict[str, Any]]
    intermediate_bytes: int
    bytes_now: int
    bytes_fused: int
    shape: str              # input shapes of the first op: instances that differ in shape are grouped apart
    device_us: float
    predicted_saving_us: float
    saving_model: str       # what the prediction comes from: a key of SAVING_MODELS (fusion.saving_model)


# The models a fusion candidate's predicted saving comes from (``Candidate.saving_model``; which one a match
# takes is fusion.saving_model's rule): how a lever's evidence names each, and what it assumes.
SAVING_MODELS = {
    "memory traffic": ("the memory-traffic model", "the kernels are memory-bound, so their time goes with the bytes "
                       "they move, read from the recorded input shapes"),
    "kernels between the matmuls": ("the kernels between the matmuls", "a fused attention kernel runs none of the "
                                    "kernels between the two matmuls (scale, mask, softmax): their measured time goes"),
    "norm kernel count": ("a kernel-count rule, not a memory-traffic model,", "a norm op's k kernels are taken as k + 1 "
                          "passes over its tensor (a read per kernel, one write) and the fused kernel's as 2, so "
                          "(k - 1)/(k + 1) of its time goes"),
    "kernel count": ("a kernel-count rule, not a memory-traffic model,", "no input shapes were recorded, so no bytes: "
                     "fusing an instance's kernels into one is taken to save half the time of all but one of them"),
}


@dataclass
class AdviceSections:
    """The trace-level advice's sections (docs/advisor.md), shared by the analysis result
    (``findings.Findings``: with the diagnosis) and the payload (``payloads.advice.AdvicePayload``:
    with the diagnosis as sent)."""

    hotspots: list[Hotspot]
    interruptions: list[Interruption]
    fusion_candidates: list[Candidate]
    peaks: Peaks | None
    roofline: list[RooflineRow]
    compiled: CompiledSummary
    roofline_note: str | None = None   # "no peak for <device name>: ..." where there are no peaks
    skewed_launches: int = 0           # device activities starting before their launch call (clock skew)
