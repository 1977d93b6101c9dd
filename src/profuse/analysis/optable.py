"""The op table: torch's ``key_averages()`` with device time correlated, grouped four ways."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from .._lazy import lazy_module
from .._progress import timed
from ..trace.schema import DEVICE_TIME_KINDS, DEVICE_TIME_SQL, TABLE_KINDS_SQL
from . import figures
from ._choices import check_choices
from ._codes import hash_codes, positions
from ._memo import once_per_trace
from ._read import dense_columns
from .device_events import device_events
from .memory import has_memory
from .steps import STEP_WHERE

if TYPE_CHECKING:
    import numpy as np

    from ..trace import Trace  # annotations only: importing analysis for --help costs no DuckDB
else:  # numpy loads on first use
    np = lazy_module("numpy", globals(), "np")


class OpRow(msgspec.Struct, frozen=True):
    """One row of the op table: an op (or shape, module, kernel) with its calls and times in µs.

    A msgspec record, so the payload that every renderer sends (``payloads.ops.OpsRow``) is this row
    plus its key, with the same field names, rather than a second copy of them. A CPU column is None where it
    does not apply to the grouping (``_choices.NOT_APPLICABLE``): a module class's self CPU, a kernel's CPU
    time; never 0, which would read as measured.
    """

    name: str
    calls: int
    self_cpu_us: float | None
    cpu_total_us: float | None
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
    """The trace's :class:`DeviceCounts`, counted once per loaded trace (the summary, the op table's total and
    trace health each ask) from the device activities as :func:`.device_events.device_events` read them (a NULL
    duration counts 0, as SQL's sum leaves it out)."""
    d = device_events(trace)
    return DeviceCounts(int(d.id.size), int(np.count_nonzero(d.has_op)), int(np.count_nonzero(d.has_launch)),
                        int(d.dur.sum()))


@timed("op table")
def op_table(trace: Trace, *, group_by: str = "op", sort: str = "self_device") -> OpTable:
    """The op table grouped and sorted as asked; built once per loaded trace and (group, sort), since
    the report and the advisor's hotspots ask for the same one (callers only read it)."""
    check_choices(group_by, sort)
    return _op_table(trace, group_by, sort)


@once_per_trace
def _op_table(trace: Trace, group_by: str, sort: str) -> OpTable:
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
    return _records(trace.con.execute(query).fetchall(), with_shape, with_memory)


def _records(found: list[tuple[Any, ...]], with_shape: bool = False, with_memory: bool = False) -> list[OpRow]:
    """Op rows from (name, calls, self CPU, CPU total, self device, device total, kernels[, shape][, the four
    memory columns]) in ns and bytes; a CPU column None where it does not apply to the rows (module, kernel)."""
    out = []
    for r in found:
        name, calls, self_cpu, cpu_total, self_dev, dev_total, kernels = r[:7]
        mem = [int(v or 0) for v in r[-4:]] if with_memory else [None] * 4
        out.append(OpRow(name=name or "", calls=int(calls), self_cpu_us=_us_or_none(self_cpu),
                         cpu_total_us=_us_or_none(cpu_total),
                         self_device_us=figures.us((self_dev or 0) / 1000),
                         device_total_us=figures.us((dev_total or 0) / 1000), kernels=int(kernels or 0),
                         shape=r[7] if with_shape else None, cpu_mem_bytes=mem[0], self_cpu_mem_bytes=mem[1],
                         device_mem_bytes=mem[2], self_device_mem_bytes=mem[3]))
    return out


def _us_or_none(ns: Any) -> float | None:
    """A CPU column's ns in µs; None stays None: the column does not apply to the row (an op-table event's
    ``self_cpu`` and ``dur`` are never NULL, so an op's sums never are)."""
    return None if ns is None else figures.us(ns / 1000)


# the op_memory columns summed per row, and the join that brings them (analysis.memory.has_memory)
_MEM_SUMS = ", sum(m.cpu_mem), sum(m.self_cpu_mem), sum(m.device_mem), sum(m.self_device_mem)"
_MEM_JOIN = " LEFT JOIN op_memory m USING (id)"


def _by_op(trace: Trace) -> list[OpRow]:
    if not trace.cpu_only:
        return list(_ops_and_kernels(trace)[0])
    sd, dt = _device_cols(trace)
    where = f"kind IN ({TABLE_KINDS_SQL}) AND depth IS NOT NULL{_not_step(trace)}"
    found = _less_nested(trace.con.execute(f"""
        SELECT name, count(*), sum(self_cpu), sum(dur), sum({sd}), sum({dt}), sum(kernels)
        FROM events WHERE {where} GROUP BY name""").fetchall(), _nested_again(trace, False), by_shape=False)
    if not has_memory(trace):
        return _records(found)
    memory = _memory_by_name(trace, where)
    return _records([(*r, *memory.get(r[0], _NO_MEMORY)) for r in found], with_memory=True)


_NO_MEMORY = (None,) * 4


def _memory_by_name(trace: Trace, where: str) -> dict[Any, tuple[Any, ...]]:
    """The op_memory columns summed per name over the events that ``where`` (SQL on ``events``) admits: what a
    ``LEFT JOIN op_memory`` into the grouped scan would add (op_memory holds one row per op-table event), by a
    join of the few memory rows alone, so that the scan of every event joins nothing. ``where`` filters the
    sums, not the scan: a filter there would be pushed into the scan of every event. A name none of whose
    rows passes sums to NULL, as one with no memory row does."""
    cols = ("cpu_mem", "self_cpu_mem", "device_mem", "self_device_mem")
    sums = ", ".join(f"sum({c}) FILTER (WHERE {where})" for c in cols)
    found = trace.con.execute(f"SELECT name, {sums} FROM op_memory JOIN events USING (id) GROUP BY name").fetchall()
    return {name: tuple(figures) for name, *figures in found}


@once_per_trace
def _ops_and_kernels(trace: Trace) -> tuple[list[OpRow], list[OpRow]]:
    """A trace with a device: its rows by op and by kernel, from one scan grouped by name and kind (the
    report shows the one and ranks the other's hotspots); a name's kinds then summed on each side. The
    op_memory rows are op-table events' (trace/memory.py), so only the ops' rows have memory figures, summed
    per name by :func:`_memory_by_name`."""
    found = trace.con.execute(f"""
        SELECT name, kind, count(*), sum(self_cpu), sum(dur), sum(self_device), sum(device_total), sum(kernels)
        FROM events WHERE (kind IN ({TABLE_KINDS_SQL}) AND depth IS NOT NULL) OR kind IN ({DEVICE_TIME_SQL})
        GROUP BY name, kind""").fetchall()
    ops: dict[Any, list[Any]] = {}
    kernels: dict[Any, list[Any]] = {}
    for name, kind, *sums in found:
        side = kernels if kind in DEVICE_TIME_KINDS else ops
        had = side.get(name)
        # SQL's sum: NULL where every value is
        side[name] = sums if had is None else [None if a is None and b is None else (a or 0) + (b or 0)
                                                for a, b in zip(had, sums)]
    for (name,), (ns, device_ns) in _nested_again(trace, False).items():
        v = ops[name]   # a call inside one of its own name: its time and device total are in that one's already
        v[2], v[4] = (v[2] or 0) - ns, (v[4] or 0) - device_ns
    mem = has_memory(trace)
    memory = _memory_by_name(trace, f"kind IN ({TABLE_KINDS_SQL}) AND depth IS NOT NULL") if mem else {}
    # a kernel row: its launches, no CPU time (None: not 0), its time as self and total device time
    return (_records([(name, *v, *memory.get(name, _NO_MEMORY)) for name, v in ops.items()], with_memory=mem),
            _records([(name, v[0], None, None, v[2], v[2], v[0]) for name, v in kernels.items()]))


def _by_shape(trace: Trace) -> list[OpRow]:
    sd, dt = _device_cols(trace)
    mem = has_memory(trace)
    found = trace.con.execute(f"""
        SELECT e.name, count(*), sum(self_cpu), sum(dur), sum({sd}), sum({dt}), sum(kernels),
               coalesce(s.input_dims, ''){_MEM_SUMS if mem else ""}
        FROM events e LEFT JOIN shapes s USING (id){_MEM_JOIN if mem else ""}
        WHERE kind IN ({TABLE_KINDS_SQL}) AND depth IS NOT NULL{_not_step(trace)}
        GROUP BY e.name, s.input_dims""").fetchall()
    return _records(_less_nested(found, _nested_again(trace, True), by_shape=True), True, mem)


@once_per_trace
def _nested_again(trace: Trace, by_shape: bool) -> dict[tuple[Any, ...], tuple[int, int]]:
    """The op-table calls inside a call of their own row: the ``nested_calls`` table's (their nearest op-table
    ancestor is a call of the same name: trace/correlate.py ``nested_in_own_name``, the one rule), and by
    input shapes those whose call around them has the same input dims too. Their time and device total are inside the
    call around them already, so their row's CPU total and device total must not count them again (torch's
    key_averages() does: sglang's 463 ms blocking ``aten::copy_`` twice in a 474 ms trace). Per row key
    (name[, input dims]): (time, device total) in ns, each summed; the device total is the time on a CPU-only
    trace (its device columns are the CPU's)."""
    device = "e.dur" if trace.cpu_only else "coalesce(e.device_total, 0)"
    dims = ", coalesce(se.input_dims, '')" if by_shape else ""
    found = trace.con.execute(f"""SELECT e.name{dims}, sum(e.dur), sum({device})
        {nested_calls_from(by_shape)} GROUP BY ALL""").fetchall()
    return {tuple(r[:-2]): (int(r[-2] or 0), int(r[-1] or 0)) for r in found}


def nested_calls_from(by_shape: bool) -> str:
    """SQL ``FROM ... [WHERE ...]`` of the op-table calls (``e``; by shape, ``se`` their shapes row) that their row
    counts once, inside the call around them (:func:`_nested_again`'s rule; analysis/op_kernels.py walks past them)."""
    shapes = (" LEFT JOIN shapes se ON se.id = e.id LEFT JOIN shapes sp ON sp.id = n.around"
              " WHERE coalesce(se.input_dims, '') = coalesce(sp.input_dims, '')") if by_shape else ""
    return f"FROM nested_calls n JOIN events e ON e.id = n.id{shapes}"


def _less_nested(found: list[tuple[Any, ...]], nested: dict[tuple[Any, ...], tuple[int, int]], *,
                 by_shape: bool) -> list[tuple[Any, ...]]:
    """Op rows (name, calls, self CPU, CPU total, self device, device total, kernels[, input dims, ...]) less
    the calls inside a call of their own row (:func:`_nested_again`'s, keyed by name[, input dims])."""
    if not nested:
        return found
    out = []
    for r in found:
        ns, device_ns = nested.get((r[0], r[7]) if by_shape else (r[0],), (0, 0))
        out.append((*r[:3], (r[3] or 0) - ns, r[4], (r[5] or 0) - device_ns, *r[6:]))
    return out


def _by_module(trace: Trace) -> list[OpRow]:
    """Per nn.Module class: instances, CPU time of the scope, device time under it (self and total); no self
    CPU time (None: a module's time holds its child modules' and ops', no op-table self time).

    Totals count each class's outermost instances only: a module nested in one of its own class
    (recursion, wrappers) is inside that one's time already, so a class never exceeds the trace.
    Two reads (the scopes, the timed events' module and time: on a device trace, the device activities as read
    once per trace), then numpy: each module instance's time added to every scope above it, one step up the
    scope chains at a time."""
    con = trace.con
    ms = module_scopes(con)
    if trace.cpu_only:
        t = dense_columns(con, f"SELECT module, coalesce(self_cpu, 0) AS t FROM events "
                               f"WHERE kind IN ({TABLE_KINDS_SQL}) AND module IS NOT NULL")
    else:   # the device activities as read once per trace
        d = device_events(trace)
        t = {"module": d.module[d.has_module], "t": d.dur[d.has_module]}
    n = len(ms.code)
    at = positions(ms.ids, t["module"])
    own = np.bincount(at[at >= 0], weights=t["t"][at >= 0], minlength=n)
    timed = np.bincount(at[at >= 0], minlength=n)
    total = _totals_up(ms.up, ms.module, own)
    m = np.flatnonzero(ms.module)
    g = ms.code[m]
    names = ms.names
    calls = np.bincount(g, minlength=len(names))
    sums = [np.bincount(g, weights=w, minlength=len(names))
            for w in (np.where(ms.inner, 0, ms.dur)[m], own[m], np.where(ms.inner, 0, total)[m], timed[m])]
    return _records([(names[i], int(calls[i]), None, *(round(float(v[i])) for v in sums))
                     for i in np.flatnonzero(calls).tolist()])


class ModuleScopes(NamedTuple):
    """The scopes table as the module rows read it: per scope its id, its parent's position (-1: none), whether
    it is an nn.Module, its duration, its name's code into ``names`` (NULL last), and whether it is a module
    inside another module of its own class (``inner``: that one's instance holds its time; a NULL name equals
    none, its own included)."""

    ids: np.ndarray
    up: np.ndarray
    module: np.ndarray
    dur: np.ndarray
    code: np.ndarray
    names: list[str | None]
    inner: np.ndarray


_SCOPE_ROWS = ("SELECT id, coalesce(parent, -1) AS parent, coalesce(kind = 'module', false) AS module, "
               "coalesce(dur, 0) AS dur")


def module_scopes(con: Any) -> ModuleScopes:
    """The scopes (:class:`ModuleScopes`), read once. Name codes from the names' hashes (:func:`hash_codes`); where
    two names share one, by ranking the names themselves."""
    named = con.execute("SELECT name, hash(name) FROM (SELECT DISTINCT name FROM scopes) ORDER BY name NULLS LAST"
                        ).fetchall()
    s = dense_columns(con, f"{_SCOPE_ROWS}, hash(name) AS h FROM scopes")
    code = hash_codes(np.asarray([h for _, h in named], dtype=np.uint64), s["h"])
    if code is None:
        s = dense_columns(con, f"{_SCOPE_ROWS}, dense_rank() OVER (ORDER BY name NULLS LAST) - 1 AS code FROM scopes")
        code = s["code"].astype(np.int64)
    names = [n for n, _ in named]
    up = positions(s["id"], s["parent"])
    module = s["module"].astype(bool)
    own_class = np.where(code == names.index(None), -1, code) if None in names else code
    return ModuleScopes(ids=s["id"], up=up, module=module, dur=s["dur"], code=code, names=names,
                        inner=_inside_own_class(up, module, own_class))


def _totals_up(up: np.ndarray, module: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Per scope: the time of every module instance at or under it (``own`` summed up the chains)."""
    n = len(up)
    me = np.flatnonzero(module)
    total = np.bincount(me, weights=own[me], minlength=n)
    cur = up[me]
    for _ in range(n):   # a chain is at most every scope long
        keep = cur >= 0
        if not keep.any():
            break
        me, cur = me[keep], cur[keep]
        total += np.bincount(cur, weights=own[me], minlength=n)
        cur = up[cur]
    return total


def _inside_own_class(up: np.ndarray, module: np.ndarray, code: np.ndarray) -> np.ndarray:
    """Per scope: whether it is a module with a module of its own class (``code``, -1: none) above it."""
    inner = np.zeros(len(up), dtype=bool)
    me = np.flatnonzero(module & (code >= 0))
    cur = up[me]
    for _ in range(len(up)):
        keep = cur >= 0
        if not keep.any():
            break
        me, cur = me[keep], cur[keep]
        inner[me[module[cur] & (code[cur] == code[me])]] = True
        cur = up[cur]
    return inner


def _by_kernel(trace: Trace) -> list[OpRow]:
    if trace.cpu_only:
        return _by_op(trace)
    return list(_ops_and_kernels(trace)[1])
