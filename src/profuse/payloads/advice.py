"""The advisor's sections (hotspots, interruptions, fusion candidates, peaks, roofline, compiled
regions), as the JSON report and the Overview show them."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from msgspec import Struct

from ..analysis.advice.hotspots import Hotspot
from ..analysis.advice.interruptions import Interruption
from ..analysis.advice.roofline import Peaks, RooflineRow
from ..analysis.compiled import CompiledSummary
from .diagnosis import DiagnosisPayload, diagnosis_payload

if TYPE_CHECKING:  # signatures only: decoding a stored report needs none of the analyses
    from ..analysis.advice.findings import Findings
    from ..analysis.advice.fusion import Candidate


class FusionCandidate(Struct):
    """A run of ops worth fusing, with its predicted saving (``predicted_saving_us <= device_us``)."""

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
    shape: str
    device_us: float
    predicted_saving_us: float


class AdvicePayload(Struct):
    """Every section of the trace-level advice (docs/advisor.md)."""

    hotspots: list[Hotspot]
    interruptions: list[Interruption]
    fusion_candidates: list[FusionCandidate]
    peaks: Peaks | None
    roofline: list[RooflineRow]
    compiled: CompiledSummary   # the analysis record itself
    roofline_note: str | None = None   # "no peak for <device name>: ..." where there are no peaks
    skewed_launches: int = 0           # device activities starting before their launch call (clock skew)
    diagnosis: DiagnosisPayload | None = None


def _candidate(c: Candidate) -> FusionCandidate:
    return FusionCandidate(
        pattern=c.pattern, scope=c.scope, instances=c.instances, kernels_per_instance=c.kernels_per_instance,
        recommendation=c.recommendation, confidence=c.confidence, ops=list(c.ops),
        intermediates=[dict(i) for i in c.intermediates], intermediate_bytes=c.intermediate_bytes,
        bytes_now=c.bytes_now, bytes_fused=c.bytes_fused, shape=c.shape, device_us=round(c.device_us, 3),
        predicted_saving_us=round(c.predicted_saving_us, 3))


def advice_payload(advice: Findings) -> AdvicePayload:
    """The advice as sent: candidates carry the fields the report documents, times rounded to ns."""
    return AdvicePayload(
        hotspots=list(advice.hotspots), interruptions=list(advice.interruptions),
        fusion_candidates=[_candidate(c) for c in advice.fusion_candidates], peaks=advice.peaks,
        roofline=list(advice.roofline),
        compiled=advice.compiled,
        roofline_note=advice.roofline_note, skewed_launches=advice.skewed_launches,
        diagnosis=diagnosis_payload(advice.diagnosis) if advice.diagnosis is not None else None)
