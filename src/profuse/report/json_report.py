"""``profuse report --format json``: the stable ``profuse.report/1`` document."""
from __future__ import annotations

from typing import Any, TypedDict

import msgspec

from ..analysis import OpTable, Summary

SCHEMA = "profuse.report/1"


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


def report_dict(summary: Summary, table: OpTable) -> dict[str, Any]:
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
    return {"schema": SCHEMA, "trace": trace, "totals": totals, "group_by": table.group_by,
            "device_label": table.device_label, "cpu_only": table.cpu_only,
            "skipped": summary.skipped, "unmatched_flows": summary.unmatched_flows, "ops": ops}


def render_json(summary: Summary, table: OpTable) -> str:
    return msgspec.json.format(msgspec.json.encode(report_dict(summary, table)), indent=2).decode()
