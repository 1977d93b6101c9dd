"""The op rows an HTML report embeds for the diagnosis's lever cards (kept apart from
``payloads.diagnosis`` so the console, which renders that record, imports no op-table payloads)."""
from __future__ import annotations

from ..analysis.optable import OpTable
from .diagnosis import DiagnosisPayload
from .ops import Ops, _row


def with_lever_rows(ops: Ops, table: OpTable, d: DiagnosisPayload) -> Ops:
    """``ops`` with the table rows the levers name appended (after the shown ones, in table order),
    so that every lever card's link finds its row in an HTML report that embeds only the top rows."""
    if ops.group_by != "op":
        return ops
    named = {op for lv in d.levers for op in lv.ops}
    shown = {r.key for r in ops.rows}
    extra = [_row(r, False) for r in table.rows if r.name in named and r.name not in shown]
    return Ops(group_by=ops.group_by, device_label=ops.device_label, cpu_only=ops.cpu_only, device_us=ops.device_us,
               total_rows=ops.total_rows, rows=[*ops.rows, *extra])
