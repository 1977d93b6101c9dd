"""The op table and the kernels under each of its rows, as sent to every renderer."""
from __future__ import annotations

import msgspec
from msgspec import Struct, UnsetType

from ..analysis.op_kernels import NO_MODULE, RowKernels
from ..analysis.optable import OpRow, OpTable
from ..trace.schema import not_linked

NO_MODULE_TEXT = "ran inside no nn.Module"  # after the count of device events under no module


class OpsRow(OpRow, frozen=True, kw_only=True, omit_defaults=True):
    """One op-table row as sent: the analysis row (times rounded to ns when made) and ``key``, which names the row
    (see :func:`row_key`). ``shape`` is left out unless grouped by shape."""

    key: str


class Ops(Struct):
    """The op table: ``rows`` are the first ``len(rows)`` of ``total_rows`` in the chosen order;
    ``device_us`` is the trace's device time, the denominator of a row's share."""

    group_by: str
    device_label: str
    cpu_only: bool
    device_us: float
    total_rows: int
    rows: list[OpsRow]


class OpKernel(Struct):
    """One kernel name under an ops row: its calls and device time under the row (its part of the row's device
    total), and the part the row launched itself (of the row's self device time and ``kernels`` count)."""

    name: str
    calls: int
    device_us: float
    self_calls: int
    self_device_us: float


class UnderNoRow(Struct):
    """The trace's device events under no row of a grouping for one reason: ``reason`` (``events.unlinked``'s,
    or ``no_module``), how many, and the words the console prints after the count (``text``)."""

    reason: str
    events: int
    text: str


class OpKernels(Struct):
    """The kernels under one ops row, most device time first: they sum to the row's device total, their self
    parts to its self device time. ``unlinked`` holds the trace's device events under no row of this grouping
    (no op launched them, or no module ran them), per reason: no list can show those."""

    key: str
    group_by: str
    kernels: list[OpKernel]
    unlinked: list[UnderNoRow]


def row_key(name: str, shape: str | None) -> str:
    """The op name; name and shape as a JSON pair when grouped by shape (names may hold any character)."""
    return name if shape is None else msgspec.json.encode([name, shape]).decode()


def _row(r: OpRow, by_shape: bool) -> OpsRow:
    shape = (r.shape or "") if by_shape else None
    return OpsRow(name=r.name, calls=r.calls, self_cpu_us=r.self_cpu_us, cpu_total_us=r.cpu_total_us,
                  self_device_us=r.self_device_us, device_total_us=r.device_total_us, kernels=r.kernels, shape=shape,
                  key=row_key(r.name, shape), cpu_mem_bytes=r.cpu_mem_bytes, self_cpu_mem_bytes=r.self_cpu_mem_bytes,
                  device_mem_bytes=r.device_mem_bytes, self_device_mem_bytes=r.self_device_mem_bytes)


def ops_payload(table: OpTable, top: int | None = None) -> Ops:
    """The table's rows in its order, the first ``top`` of them (None or 0: all)."""
    shown = table.rows[:top] if top else table.rows
    by_shape = table.group_by == "shape"
    return Ops(group_by=table.group_by, device_label=table.device_label, cpu_only=table.cpu_only,
               device_us=table.device_us, total_rows=len(table.rows),
               rows=[_row(r, by_shape) for r in shown])


def op_kernels_payload(ops: Ops, found: RowKernels) -> dict[str, OpKernels]:
    """Row key -> its kernels, for every row of ``ops`` (a row with no device time under it: an empty list)."""
    unlinked = [UnderNoRow(reason=r, events=n, text=NO_MODULE_TEXT if r == NO_MODULE else not_linked(r))
                for r, n in found.unlinked.items()]
    out = {}
    for row in ops.rows:
        shape = None if isinstance(row.shape, UnsetType) else row.shape
        kernels = found.rows.get((row.name, shape), [])
        out[row.key] = OpKernels(key=row.key, group_by=ops.group_by, unlinked=unlinked, kernels=[
            OpKernel(name=k.name, calls=k.calls, device_us=k.device_us, self_calls=k.self_calls,
                     self_device_us=k.self_device_us) for k in kernels])
    return out
