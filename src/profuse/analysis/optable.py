"""The op table: torch's ``key_averages()`` with device time correlated, grouped four ways."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from ..errors import UserError
from ..trace.schema import DEVICE_TIME_SQL, TABLE_KINDS_SQL
from . import figures
from ._choices import GROUPS, SORT_KEYS
from ._memo import once_per_trace
from .memory import has_memory
from .steps import STEP_WHERE

if TYPE_CHECKING:
    from ..trace import Trace  # annotations only: importing analysis for --help costs no DuckDB


class OpRow(msgspec.Struct, frozen=True):
    """One row of the op table: an op (or shape, module, kernel) with its calls and times in µs.

    A msgspec record, so the payload that every renderer sends (``payloads.ops.OpsRow``) is this row
    plus its key, with the same field names, rather than a second copy of them.
    """

    name: str
    calls: int
    self_cpu_us: float
    cpu_total_us: float
    self_device_us: float
    device_total_us: float
    kernels: int
    shape: str | None = None
    # torch's key_averages() memory columns (bytes, net within the op; self: minus its children), set
    # when the trace has memory events (profile_memory=True) and the rows are ops (by op or shape)
    cpu_mem_bytes: int | None = None
    self_cpu_mem_bytes: int | None = None
    device_mem_bytes: int | None = None
    self_device_mem_bytes: int | None = None

    @property
    def avg_device_us(self) -> float:
        """Device time per call."""
        return self.device_total_us / self.calls if self.calls else 0.0


@dataclass(frozen=True)
class OpTable:
    """The op table: rows grouped by op, shape, module or kernel, with the trace's device total."""

    group_by: str
    device_label: str           # CUDA, ROCm, MTIA, CPU, ...
    cpu_only: bool              # device time is the CPU's own self time
    device_us: float            # total device time in the trace (denominator of %)
    rows: list[OpRow] = field(default_factory=list)

    def pct(self, row: OpRow) -> float:
        """The row's share of the trace's device time, in percent."""
        base = self.device_us
        return 100.0 * row.self_device_us / base if base else 0.0


@once_per_trace
def total_device_us(trace: Trace) -> float:
    """Device time of the whole trace in µs (the CPU's own self time on a CPU-only trace); read once per
    loaded trace (the report, the advice and the diagnosis each ask)."""
    if trace.cpu_only:
        q = f"SELECT sum(self_cpu) FROM events WHERE kind IN ({TABLE_KINDS_SQL}) AND depth IS NOT NULL{_not_step(trace)}"
        (v,) = trace.con.execute(q).fetchall()[0]
        return (v or 0) / 1000.0
    return device_counts(trace).ns / 1000.0


class DeviceCounts(NamedTuple):
    """The device activities (kernels, copies, memsets) counted: all, those linked to an op, those whose
    launch call the trace holds, and their time summed (ns)."""

    activities: int
    with_op: int
    launched: int
    ns: int


@once_per_trace
def device_counts(trace: Trace) -> DeviceCounts:
    """The trace's :class:`DeviceCounts`, in one scan read once per loaded trace (the summary, the op
    table's total and trace health each ask)."""
    row = trace.con.execute(f"SELECT count(*), count(op), count(launch), sum(dur) FROM events "
                            f"WHERE kind IN ({DEVICE_TIME_SQL})").fetchone()
    return DeviceCounts(*(int(v or 0) for v in (row or (0, 0, 0, 0))))


def op_table(trace: Trace, *, group_by: str = "op", sort: str = "self_device") -> OpTable:
    """The op table grouped and sorted as asked; built once per loaded trace and (group, sort), since
    the report and the advisor's hotspots ask for the same one (callers only read it)."""
    return _op_table(trace, group_by, sort)


@once_per_trace
def _op_table(trace: Trace, group_by: str, sort: str) -> OpTable:
    if group_by not in GROUPS:
        raise UserError(f"--group-by must be one of {', '.join(GROUPS)} (got {group_by!r})")
    if sort not in SORT_KEYS:
        raise UserError(f"--sort must be one of {', '.join(SORT_KEYS)} (got {sort!r})")
    rows = {"op": _by_op, "shape": _by_shape, "module": _by_module, "kernel": _by_kernel}[group_by](trace)
    rows.sort(key=_sort_key(sort))
    return OpTable(group_by=group_by, device_label=trace.device_label, cpu_only=trace.cpu_only,
                   device_us=figures.us(total_device_us(trace)), rows=rows)


def _sort_key(sort: str) -> Any:
    attr = {"self_device": "self_device_us", "device_total": "device_total_us", "self_cpu": "self_cpu_us",
            "cpu_total": "cpu_total_us", "calls": "calls", "kernels": "kernels"}.get(sort)
    if attr is None:
        return lambda r: r.name
    return lambda r: (-getattr(r, attr), r.name)


def _not_step(trace: Trace) -> str:
    """SQL leaving the step annotations (the step model's rule) out of a CPU-only trace's op rows: there
    a step's self time would rank as the top op, though it is the step, not an op (the step table and
    the budget show it)."""
    return f" AND NOT ({STEP_WHERE})" if trace.cpu_only else ""


def _device_cols(trace: Trace) -> tuple[str, str]:
    # In a CPU-only trace the CPU is the device: device time is self CPU time.
    if trace.cpu_only:
        return "self_cpu", "dur"
    return "self_device", "device_total"


def _rows(trace: Trace, query: str, with_shape: bool = False, with_memory: bool = False) -> list[OpRow]:
    out = []
    for r in trace.con.execute(query).fetchall():
        name, calls, self_cpu, cpu_total, self_dev, dev_total, kernels = r[:7]
        mem = [int(v or 0) for v in r[-4:]] if with_memory else [None] * 4
        out.append(OpRow(name=name or "", calls=int(calls), self_cpu_us=figures.us((self_cpu or 0) / 1000),
                         cpu_total_us=figures.us((cpu_total or 0) / 1000),
                         self_device_us=figures.us((self_dev or 0) / 1000),
                         device_total_us=figures.us((dev_total or 0) / 1000), kernels=int(kernels or 0),
                         shape=r[7] if with_shape else None, cpu_mem_bytes=mem[0], self_cpu_mem_bytes=mem[1],
                         device_mem_bytes=mem[2], self_device_mem_bytes=mem[3]))
    return out


# the op_memory columns summed per row, and the join that brings them (analysis.memory.has_memory)
_MEM_SUMS = ", sum(m.cpu_mem), sum(m.self_cpu_mem), sum(m.device_mem), sum(m.self_device_mem)"
_MEM_JOIN = " LEFT JOIN op_memory m USING (id)"


def _by_op(trace: Trace) -> list[OpRow]:
    sd, dt = _device_cols(trace)
    mem = has_memory(trace)
    return _rows(trace, f"""
        SELECT name, count(*), sum(self_cpu), sum(dur), sum({sd}), sum({dt}), sum(kernels){_MEM_SUMS if mem else ""}
        FROM events{_MEM_JOIN if mem else ""} WHERE kind IN ({TABLE_KINDS_SQL}) AND depth IS NOT NULL{_not_step(trace)}
        GROUP BY name""",
                 with_memory=mem)


def _by_shape(trace: Trace) -> list[OpRow]:
    sd, dt = _device_cols(trace)
    mem = has_memory(trace)
    return _rows(trace, f"""
        SELECT e.name, count(*), sum(self_cpu), sum(dur), sum({sd}), sum({dt}), sum(kernels),
               coalesce(s.input_dims, ''){_MEM_SUMS if mem else ""}
        FROM events e LEFT JOIN shapes s USING (id){_MEM_JOIN if mem else ""}
        WHERE kind IN ({TABLE_KINDS_SQL}) AND depth IS NOT NULL{_not_step(trace)} GROUP BY e.name, s.input_dims""",
                 with_shape=True,
                 with_memory=mem)


def _by_module(trace: Trace) -> list[OpRow]:
    """Per nn.Module class: instances, CPU time of the scope, device time under it (self and total).

    Totals count each class's outermost instances only: a module nested in one of its own class
    (recursion, wrappers) is inside that one's time already, so a class never exceeds the trace."""
    dev = "self_cpu" if trace.cpu_only else "dur"
    kinds = TABLE_KINDS_SQL if trace.cpu_only else DEVICE_TIME_SQL
    return _rows(trace, f"""
        WITH RECURSIVE up(scope, anc) AS (
            SELECT id, id FROM scopes WHERE kind = 'module'
            UNION ALL
            SELECT up.scope, s.parent FROM up JOIN scopes s ON s.id = up.anc WHERE s.parent IS NOT NULL
        ),
        timed AS (SELECT module, {dev} AS t FROM events WHERE kind IN ({kinds}) AND module IS NOT NULL),
        self_t AS (SELECT module AS scope, sum(t) AS t, count(*) AS k FROM timed GROUP BY 1),
        total_t AS (SELECT u.anc AS scope, sum(st.t) AS t FROM up u JOIN self_t st ON st.scope = u.scope
                    JOIN scopes a ON a.id = u.anc AND a.kind = 'module' GROUP BY 1),
        -- an instance inside another of its own class is already in that one's totals
        inner_same AS (SELECT DISTINCT u.scope FROM up u JOIN scopes a ON a.id = u.anc JOIN scopes s ON s.id = u.scope
                       WHERE u.anc <> u.scope AND a.kind = 'module' AND a.name = s.name)
        SELECT s.name, count(*), 0, sum(CASE WHEN i.scope IS NULL THEN s.dur ELSE 0 END), sum(coalesce(st.t, 0)),
               sum(CASE WHEN i.scope IS NULL THEN coalesce(tt.t, 0) ELSE 0 END), sum(coalesce(st.k, 0))
        FROM scopes s LEFT JOIN self_t st ON st.scope = s.id LEFT JOIN total_t tt ON tt.scope = s.id
        LEFT JOIN inner_same i ON i.scope = s.id
        WHERE s.kind = 'module' GROUP BY s.name""")


def _by_kernel(trace: Trace) -> list[OpRow]:
    if trace.cpu_only:
        return _by_op(trace)
    return _rows(trace, f"""
        SELECT name, count(*), 0, 0, sum(dur), sum(dur), count(*)
        FROM events WHERE kind IN ({DEVICE_TIME_SQL}) GROUP BY name""")
