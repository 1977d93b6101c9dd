"""Everything the advisor finds in one trace, in one result: hotspots, interruptions, fusion
candidates, roofline and compiled regions.

These are findings read from a recorded trace; ``profuse.advise`` (package ``fixes``) is the other
half, which applies fixes to a copy of a model and measures them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...trace import Trace
from ..beside import Submit, now
from ..compiled import compiled_regions
from ..diagnosis import Diagnosis, diagnose
from .fusion import fusion_candidates
from .hotspots import hotspots
from .interruptions import interruptions, skewed_launches
from .records import AdviceSections
from .roofline import ALL_ROWS, ROOFLINE_TOP, device_peaks, missing_peak, roofline

if TYPE_CHECKING:
    from ...trace.bundle import MeasuredPeaks  # annotations only: a plain trace never imports msgspec


@dataclass
class Findings(AdviceSections):
    """The advisor's sections of a report, each computed from the trace's tables, and the diagnosis."""

    diagnosis: Diagnosis | None = None


def trace_findings(trace: Trace, *, measured_peaks: MeasuredPeaks | None = None, submit: Submit = now) -> Findings:
    """Every finding on ``trace``; the roofline is bounded by ``measured_peaks``, else by the peaks its
    bundle recorded, else by datasheet peaks for a known device (see :func:`device_peaks`). The sections the
    diagnosis does not read are handed to ``submit`` (another thread: :func:`profuse.analysis.beside.beside`)."""
    bundle_peaks = trace.bundle.peaks if trace.bundle is not None else None
    peaks = device_peaks(trace, measured_peaks or bundle_peaks)
    hot, interrupted = submit(lambda: hotspots(trace)), submit(lambda: interruptions(trace))
    compiled, skewed = submit(lambda: compiled_regions(trace)), submit(lambda: skewed_launches(trace))
    # every op's roofline for the diagnosis (its GEMM bound reads all of them), the top ones for the section
    candidates, rows = fusion_candidates(trace), roofline(trace, peaks, top=ALL_ROWS)
    diagnosis = diagnose(trace, candidates=list(candidates), peaks=peaks, roofline_rows=list(rows), submit=submit)
    return Findings(hotspots=hot(), interruptions=interrupted(), fusion_candidates=candidates, peaks=peaks,
                    roofline=rows[:ROOFLINE_TOP], compiled=compiled(), roofline_note=missing_peak(trace, peaks),
                    skewed_launches=skewed(), diagnosis=diagnosis)
