"""What the timeline's details pane shows of one event beyond its links: its input shapes, types and
scalar arguments, its launch configuration (grid and block) where it is a kernel, and the Python
stack around it (for a device event, around its launch call); plus every kernel's launch
configurations, for the kernel rows of the op table.

Shapes, grid and block are the ``shapes`` table's JSON text as Kineto recorded it. Kineto also writes
registers per thread, shared memory and estimated occupancy in a kernel's args; the tables do not keep
them (docs/schema.md), so they are not shown.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..trace.schema import DEVICE_KINDS
from .figures import us

if TYPE_CHECKING:
    from ..trace import Trace

MAX_STACK = 100      # frames of a stack shown at most (the innermost); the rest are counted
MAX_CONFIGS = 4      # launch configurations listed per kernel name at most (the most used); the rest counted


@dataclass(frozen=True)
class StackFrame:
    """One Python frame around an event (``id``: the frame's event, selectable on the timeline)."""

    id: int
    name: str


@dataclass
class EventDetail:
    """One event's shapes, launch configuration and Python stack, innermost frame first (``stack_more``:
    outer frames left out); ``None`` where the trace records none."""

    id: int
    input_dims: str | None = None
    input_types: str | None = None
    concrete_inputs: str | None = None
    grid: str | None = None
    block: str | None = None
    stack: list[StackFrame] = field(default_factory=list)
    stack_more: int = 0


@dataclass(frozen=True)
class LaunchConfig:
    """Launches of one kernel name with one grid and block."""

    grid: str | None
    block: str | None
    calls: int
    device_us: float


@dataclass
class KernelLaunches:
    """Per kernel name, its launch configurations, the most used first (at most MAX_CONFIGS; ``more``
    counts the others per name). Empty where the trace records no grid or block."""

    kernels: dict[str, list[LaunchConfig]]
    more: dict[str, int]


def python_stack(trace: Trace, eid: int, limit: int = MAX_STACK) -> tuple[list[StackFrame], int]:
    """The Python frames around event ``eid`` (its ancestors in the nesting of its thread; a device
    event's are its launch call's), innermost first, at most ``limit``, and how many more there are."""
    rows = trace.con.execute(f"""
        WITH RECURSIVE up(id, lvl) AS (
            SELECT CASE WHEN kind IN {DEVICE_SQL} THEN launch ELSE parent END, 1 FROM events WHERE id = $1
            UNION ALL
            SELECT e.parent, up.lvl + 1 FROM events e JOIN up ON e.id = up.id WHERE e.parent IS NOT NULL)
        SELECT e.id, e.name FROM up JOIN events e ON e.id = up.id WHERE e.kind = 'python' ORDER BY up.lvl""",
                             [eid]).fetchall()
    return [StackFrame(id=int(i), name=str(n)) for i, n in rows[:limit]], max(len(rows) - limit, 0)


DEVICE_SQL = "(" + ", ".join(f"'{k}'" for k in DEVICE_KINDS) + ")"


def event_detail(trace: Trace, eid: int) -> EventDetail | None:
    """Event ``eid``'s shapes, launch configuration and Python stack; None where the trace has no such event."""
    if not trace.con.execute("SELECT count(*) FROM events WHERE id = ?", [eid]).fetchall()[0][0]:
        return None
    out = EventDetail(id=eid)
    found = trace.con.execute("SELECT input_dims, input_types, concrete_inputs, grid, block FROM shapes WHERE id = ?",
                              [eid]).fetchall()
    if found:
        out.input_dims, out.input_types, out.concrete_inputs, out.grid, out.block = found[0]
    out.stack, out.stack_more = python_stack(trace, eid)
    return out


def kernel_launches(trace: Trace, per_name: int = MAX_CONFIGS) -> KernelLaunches:
    """Every kernel name's launch configurations (grid, block) with calls and device time."""
    rows = trace.con.execute("""
        SELECT e.name, s.grid, s.block, count(*) AS calls, sum(e.dur) AS ns FROM events e JOIN shapes s ON s.id = e.id
        WHERE e.kind = 'kernel' AND (s.grid IS NOT NULL OR s.block IS NOT NULL)
        GROUP BY ALL ORDER BY e.name, calls DESC, ns DESC, s.grid, s.block""").fetchall()
    kernels: dict[str, list[LaunchConfig]] = {}
    more: dict[str, int] = {}
    for name, grid, block, calls, ns in rows:
        have = kernels.setdefault(name, [])
        if len(have) < per_name:
            have.append(LaunchConfig(grid=grid, block=block, calls=int(calls), device_us=us(int(ns) / 1e3)))
        else:
            more[name] = more.get(name, 0) + 1
    return KernelLaunches(kernels=kernels, more=more)
