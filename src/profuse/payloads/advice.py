"""The advisor's sections (hotspots, interruptions, fusion candidates, peaks, roofline, compiled
regions), as the JSON report and the Overview show them: the analysis records themselves, with the
diagnosis as sent."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from ..analysis.advice.records import AdviceSections
from .diagnosis import DiagnosisPayload, diagnosis_payload

if TYPE_CHECKING:  # signatures only: decoding a stored report needs none of the analyses
    from ..analysis.advice.findings import Findings


@dataclass
class AdvicePayload(AdviceSections):
    """Every section of the trace-level advice (docs/advisor.md), and the diagnosis as sent."""

    diagnosis: DiagnosisPayload | None = None


def advice_payload(advice: Findings) -> AdvicePayload:
    """The advice as sent: the findings' own records (figures rounded when made), the diagnosis as
    :func:`diagnosis_payload` sends it."""
    sections = {f.name: getattr(advice, f.name) for f in fields(AdviceSections)}
    return AdvicePayload(**sections,
                         diagnosis=diagnosis_payload(advice.diagnosis) if advice.diagnosis is not None else None)
