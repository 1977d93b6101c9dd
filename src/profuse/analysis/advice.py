"""Everything the advisor says about one trace, in one result: hotspots, interruptions, fusion
candidates, roofline and compiled regions."""
from __future__ import annotations

from dataclasses import dataclass

from ..trace import Trace
from ..trace.artifacts import read_side_json
from .compiled import CompiledSummary, compiled_regions
from .fusion import Candidate, fusion_candidates
from .hotspots import Hotspot, hotspots
from .interruptions import Interruption, interruptions
from .roofline import Peaks, RooflineRow, device_peaks, roofline


@dataclass
class Advice:
    hotspots: list[Hotspot]
    interruptions: list[Interruption]
    fusion_candidates: list[Candidate]
    peaks: Peaks | None
    roofline: list[RooflineRow]
    compiled: CompiledSummary


def advise_trace(trace: Trace, *, measured_peaks: dict | None = None) -> Advice:
    peaks = device_peaks(trace, measured_peaks or _bundle_peaks(trace))
    return Advice(hotspots=hotspots(trace), interruptions=interruptions(trace),
                  fusion_candidates=fusion_candidates(trace), peaks=peaks, roofline=roofline(trace, peaks),
                  compiled=compiled_regions(trace))


def _bundle_peaks(trace: Trace) -> dict | None:
    """Peaks a profuse bundle recorded on its machine, if any."""
    meta = read_side_json(trace.path.parent / "meta.json")
    peaks = meta.get("peaks") if meta else None
    return peaks if isinstance(peaks, dict) else None
