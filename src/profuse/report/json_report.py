"""``profuse report --format json``: the stable ``profuse.report/2`` document."""
from __future__ import annotations

from typing import Any, TypedDict

import msgspec

from ..analysis import OpTable, Summary
from ..analysis.findings import Findings
from ..redact import redact_text

SCHEMA = "profuse.report/2"


class TraceInfo(TypedDict):
    path: str
    device_kind: str
    device_name: str | None
    events: int
    span_us: float


class Totals(TypedDict):
    device_us: float
    kernels: int
    kernels_linked: int
    unlinked: dict[str, int]


def advice_dict(advice: Findings) -> dict[str, Any]:
    """The advisor's sections of the report (keys added by the advisor; never renamed)."""
    def plain(obj: Any) -> Any:
        return msgspec.to_builtins(obj)

    cands = []
    for c in advice.fusion_candidates:
        d = {k: plain(getattr(c, k)) for k in ("pattern", "scope", "instances", "kernels_per_instance",
                                                "recommendation", "confidence", "ops", "intermediates",
                                                "intermediate_bytes", "bytes_now", "bytes_fused", "shape")}
        d["device_us"] = round(c.device_us, 3)
        d["predicted_saving_us"] = round(c.predicted_saving_us, 3)
        cands.append(d)
    comp = advice.compiled
    return {
        "hotspots": [plain(h) for h in advice.hotspots],
        "interruptions": [plain(i) for i in advice.interruptions],
        "fusion_candidates": cands,
        "peaks": plain(advice.peaks) if advice.peaks else None,
        "roofline": [plain(r) for r in advice.roofline],
        "compiled": {"regions": [plain(r) for r in comp.regions], "graph_breaks": comp.graph_breaks,
                     "eager_between": comp.eager_between, "generated_kernels": comp.generated_kernels,
                     "neffs": [plain(n) for n in comp.neffs]},
    }


def capture_dict(summary: Summary, *, keep_metadata: bool = False) -> dict[str, str | None] | None:
    """A bundle's capture status and error (secrets redacted); None for a plain trace."""
    if summary.bundle_status is None:
        return None
    error = summary.bundle_error
    return {"status": summary.bundle_status,
            "error": error if keep_metadata or error is None else redact_text(error)}


def report_dict(summary: Summary, table: OpTable, advice: Findings | None = None, *,
                keep_metadata: bool = False) -> dict[str, Any]:
    trace: TraceInfo = {"path": summary.path, "device_kind": summary.device_kind,
                        "device_name": summary.device_name, "events": summary.events,
                        "span_us": round(summary.span_us, 3)}
    totals: Totals = {"device_us": round(summary.device_us, 3), "kernels": summary.kernels,
                      "kernels_linked": summary.kernels_linked, "unlinked": summary.unlinked}
    ops = [{"name": r.name, "calls": r.calls, "self_cpu_us": round(r.self_cpu_us, 3),
            "cpu_total_us": round(r.cpu_total_us, 3), "self_device_us": round(r.self_device_us, 3),
            "device_total_us": round(r.device_total_us, 3), "kernels": r.kernels}
           | ({"shape": r.shape} if table.group_by == "shape" else {})
           for r in table.rows]
    busy = msgspec.to_builtins(summary.device_busy) if summary.device_busy is not None else None
    steps = [msgspec.to_builtins(s) for s in summary.steps]
    return {"schema": SCHEMA, "trace": trace, "totals": totals, "device_busy": busy, "steps": steps,
            "group_by": table.group_by,
            "device_label": table.device_label, "cpu_only": table.cpu_only,
            "skipped": summary.skipped, "unmatched_flows": summary.unmatched_flows,
            "capture": capture_dict(summary, keep_metadata=keep_metadata), "ops": ops} \
        | (advice_dict(advice) if advice is not None else {})


def render_json(summary: Summary, table: OpTable, advice: Findings | None = None, *,
                keep_metadata: bool = False) -> str:
    doc = report_dict(summary, table, advice, keep_metadata=keep_metadata)
    return msgspec.json.format(msgspec.json.encode(doc), indent=2).decode()
