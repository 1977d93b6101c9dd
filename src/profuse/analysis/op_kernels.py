"""The device events under each row of the op table: which kernels an op (or shape, module) launched.

A row's kernels are the device events whose own op is one of the row's ops (the events counted in
the row's ``kernels`` column); for ``--group-by module``, those whose innermost module is one of the
row's modules; for ``--group-by kernel``, the row's own kernel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import UserError
from ..trace.schema import DEVICE_TIME_SQL, TABLE_KINDS_SQL
from ._choices import GROUPS
from ._memo import once_per_trace

if TYPE_CHECKING:
    from ..trace import Trace
from . import figures

RowId = tuple[str, "str | None"]  # (name, shape); shape only when grouped by shape

_QUERIES = {
    "op": f"""SELECT o.name, NULL, k.name, count(*), sum(k.dur) FROM events k JOIN events o ON o.id = k.op
              WHERE k.kind IN ({DEVICE_TIME_SQL}) AND o.kind IN ({TABLE_KINDS_SQL}) AND o.depth IS NOT NULL GROUP BY ALL""",
    "shape": f"""SELECT o.name, coalesce(s.input_dims, ''), k.name, count(*), sum(k.dur)
                 FROM events k JOIN events o ON o.id = k.op LEFT JOIN shapes s ON s.id = o.id
                 WHERE k.kind IN ({DEVICE_TIME_SQL}) AND o.kind IN ({TABLE_KINDS_SQL})
                   AND o.depth IS NOT NULL GROUP BY ALL""",
    "module": f"""SELECT m.name, NULL, k.name, count(*), sum(k.dur) FROM events k
                  JOIN scopes m ON m.id = k.module AND m.kind = 'module'
                  WHERE k.kind IN ({DEVICE_TIME_SQL}) GROUP BY ALL""",
    "kernel": f"""SELECT name, NULL, name, count(*), sum(dur) FROM events WHERE kind IN ({DEVICE_TIME_SQL})
                  GROUP BY ALL""",
}

_UNDER_NO_ROW = {"op": "op IS NULL", "shape": "op IS NULL", "kernel": "false",
                 "module": "module IS NULL OR module NOT IN (SELECT id FROM scopes WHERE kind = 'module')"}


@dataclass(frozen=True)
class KernelCalls:
    """One kernel name under a row: how many times it ran and its device time."""

    name: str
    calls: int
    device_us: float


@dataclass(frozen=True)
class RowKernels:
    """The kernels under every row of one grouping, and how many device events are under no row
    (linked to no op; for the module grouping, under no module): the lists miss exactly those."""

    group_by: str
    rows: dict[RowId, list[KernelCalls]]
    unlinked: int


def kernels_by_row(trace: Trace, group_by: str = "op") -> RowKernels:
    """Kernels per op-table row (most device time first), once per loaded trace and grouping (the
    explorer asks again on every opened row). A CPU-only trace has none."""
    if group_by not in GROUPS:
        raise UserError(f"--group-by must be one of {', '.join(GROUPS)} (got {group_by!r})")
    return _kernels_by_row(trace, group_by)


@once_per_trace
def _kernels_by_row(trace: Trace, group_by: str) -> RowKernels:
    rows: dict[RowId, list[KernelCalls]] = {}
    if trace.cpu_only:
        return RowKernels(group_by=group_by, rows=rows, unlinked=0)
    for name, shape, kernel, calls, dur in trace.con.execute(_QUERIES[group_by]).fetchall():
        rows.setdefault((name or "", shape), []).append(
            KernelCalls(name=kernel or "", calls=int(calls), device_us=figures.us((dur or 0) / 1e3)))
    for kernels in rows.values():
        kernels.sort(key=lambda k: (-k.device_us, k.name))
    (unlinked,), = trace.con.execute(
        f"SELECT count(*) FILTER (WHERE {_UNDER_NO_ROW[group_by]}) FROM events WHERE kind IN ({DEVICE_TIME_SQL})").fetchall()
    return RowKernels(group_by=group_by, rows=rows, unlinked=int(unlinked))
