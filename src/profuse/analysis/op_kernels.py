"""The device events under each row of the op table: the kernels that make up its device total.

A row's kernels are the device events its device total counts: those whose op (the op that launched them)
is one of the row's calls or is under one, each kernel once per row (the op table's rule: a call inside a
call of its own row is in that one already, ``optable.nested_calls_from``); for ``--group-by module``, those
whose innermost module is an instance of the row's class or is under one (the outermost instances only, as
the row's total); for ``--group-by kernel``, the row's own kernel. Beside each, the part the row launched
itself (its *self* device time: the op is one of the row's calls; for modules, the innermost module is of
the row's class), the events counted in its ``kernels`` column. So a row's kernels sum to its device total,
their self parts to its self device time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._lazy import lazy_module
from ..errors import UserError
from ..trace.schema import DEVICE_TIME_SQL, TABLE_KINDS_SQL
from . import figures
from ._choices import GROUPS
from ._codes import positions
from ._memo import once_per_trace
from ._read import dense_columns
from .optable import module_scopes, nested_calls_from

if TYPE_CHECKING:
    import numpy as np

    from ..trace import Trace
else:  # numpy loads on first use
    np = lazy_module("numpy", globals(), "np")

RowId = tuple[str, "str | None"]  # (name, shape); shape only when grouped by shape
Tally = dict[RowId, dict[str, tuple[int, int]]]  # row -> kernel name -> (events, ns)

# the reason a device event is under no row of the module grouping (the op groupings' are events.unlinked's)
NO_MODULE = "no_module"

_SELF_QUERIES = {
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

_UNDER_NO_ROW = {
    "op": f"SELECT coalesce(unlinked, ''), count(*) FROM events WHERE kind IN ({DEVICE_TIME_SQL}) AND op IS NULL GROUP BY 1",
    "module": f"""SELECT '{NO_MODULE}', count(*) FROM events WHERE kind IN ({DEVICE_TIME_SQL})
                  AND (module IS NULL OR module NOT IN (SELECT id FROM scopes WHERE kind = 'module')) HAVING count(*) > 0""",
    "kernel": "SELECT '', 0 WHERE false",
}


@dataclass(frozen=True)
class KernelCalls:
    """One kernel name under a row: how many times it ran and its device time under the row, and how much of
    that the row launched itself."""

    name: str
    calls: int
    device_us: float
    self_calls: int
    self_device_us: float


@dataclass(frozen=True)
class RowKernels:
    """The kernels under every row of one grouping, and the trace's device events under no row, per reason
    (``events.unlinked``'s for the op groupings: no op launched them; :data:`NO_MODULE` for the module
    grouping): the lists miss exactly those."""

    group_by: str
    rows: dict[RowId, list[KernelCalls]]
    unlinked: dict[str, int]


def kernels_by_row(trace: Trace, group_by: str = "op") -> RowKernels:
    """Kernels per op-table row (most device time first), once per loaded trace and grouping (the
    explorer asks again on every opened row). A CPU-only trace has none."""
    if group_by not in GROUPS:
        raise UserError(f"--group-by must be one of {', '.join(GROUPS)} (got {group_by!r})")
    return _kernels_by_row(trace, group_by)


@once_per_trace
def _kernels_by_row(trace: Trace, group_by: str) -> RowKernels:
    if trace.cpu_only:
        return RowKernels(group_by=group_by, rows={}, unlinked={})
    own: Tally = {}
    for name, shape, kernel, calls, dur in trace.con.execute(_SELF_QUERIES[group_by]).fetchall():
        own.setdefault((name or "", shape), {})[kernel or ""] = (int(calls), int(dur or 0))
    under = own if group_by == "kernel" else _under_modules(trace) if group_by == "module" else _under_ops(
        trace, group_by == "shape")
    rows = {row: _listed(kernels, own.get(row, {})) for row, kernels in under.items()}
    found = trace.con.execute(_UNDER_NO_ROW["op" if group_by == "shape" else group_by]).fetchall()
    return RowKernels(group_by=group_by, rows=rows, unlinked={str(r): int(n) for r, n in sorted(found, key=lambda f: -f[1])})


def _listed(under: dict[str, tuple[int, int]], own: dict[str, tuple[int, int]]) -> list[KernelCalls]:
    out = [KernelCalls(name=name, calls=calls, device_us=figures.us(ns / 1e3), self_calls=own.get(name, (0, 0))[0],
                       self_device_us=figures.us(own.get(name, (0, 0))[1] / 1e3)) for name, (calls, ns) in under.items()]
    out.sort(key=lambda k: (-k.device_us, k.name))
    return out


def _under_ops(trace: Trace, by_shape: bool) -> Tally:
    """Grouped by op or shape: each device event counted for every row call at or above its op (up the op-table
    chain), but a call its row counts once, inside the call around it (``nested_calls_from``)."""
    con = trace.con
    table_kind = f"kind IN ({TABLE_KINDS_SQL})"
    host = dense_columns(con, f"SELECT id, coalesce(parent, -1) AS parent, {table_kind} AS tab FROM events "
                              f"WHERE parent IS NOT NULL OR {table_kind}")
    n = int(host["id"].max()) + 1 if host["id"].size else 0
    parent = np.full(n, -1, dtype=np.int64)
    parent[host["id"]] = host["parent"]
    table = np.zeros(n, dtype=bool)
    table[host["id"]] = host["tab"]
    from ..trace.correlate import nearest_ancestor

    up = nearest_ancestor(parent, table, include_self=False)
    dims = "coalesce(s.input_dims, '')" if by_shape else "NULL"
    keys = f"coalesce(e.name, ''), {dims}"
    rows = f"""FROM events e{" LEFT JOIN shapes s USING (id)" if by_shape else ""}
               WHERE e.kind IN ({TABLE_KINDS_SQL}) AND e.depth IS NOT NULL
                 AND e.id NOT IN (SELECT e.id {nested_calls_from(by_shape)})"""
    named = [(name, shape) for name, shape in con.execute(f"SELECT DISTINCT {keys} {rows} ORDER BY 1, 2").fetchall()]
    coded = dense_columns(con, f"SELECT e.id, dense_rank() OVER (ORDER BY {keys}) - 1 AS code {rows}")
    code = np.full(n, -1, dtype=np.int64)
    code[coded["id"]] = coded["code"]
    k, kernels = _device_events(trace, "op", "op IS NOT NULL")
    return _tally(k, kernels, code, up, named)


def _under_modules(trace: Trace) -> Tally:
    """Grouped by module: each device event counted for every module class at or above its innermost module,
    but a module inside one of its own class once, in that one (the module rows' ``inner``)."""
    ms = module_scopes(trace.con)
    k, kernels = _device_events(trace, "module", "module IS NOT NULL")
    at = positions(ms.ids, k["at"])
    k = {c: v[at >= 0] for c, v in {**k, "at": at}.items()}
    code = np.where(ms.module & ~ms.inner, ms.code, -1)
    return _tally(k, kernels, code, ms.up, [(n or "", None) for n in ms.names])


def _device_events(trace: Trace, at: str, where: str) -> tuple[dict[str, np.ndarray], list[str]]:
    """The device events ``where`` admits (their ``at`` column, name code, dur), and their names by code."""
    found = f"FROM events WHERE kind IN ({DEVICE_TIME_SQL}) AND {where}"
    cols = dense_columns(trace.con, f"""SELECT {at} AS at, dense_rank() OVER (ORDER BY coalesce(name, ''))
        - 1 AS name, coalesce(dur, 0) AS dur {found}""")
    return cols, [n for (n,) in trace.con.execute(f"SELECT DISTINCT coalesce(name, '') {found} ORDER BY 1").fetchall()]


def _tally(k: dict[str, np.ndarray], names: list[str], code: np.ndarray, up: np.ndarray, named: list[RowId]) -> Tally:
    """Per row (``code`` of each event or scope, -1: none; ``named`` by code) and kernel name (``names`` by code): the
    device events ``k`` (at ``k["at"]``) with the row at or above them (``up``: one step up), and their time; one
    step up every chain at a time."""
    width = max(len(names), 1)
    keys, weights = [], []
    which, cur = np.arange(len(k["at"])), np.asarray(k["at"], dtype=np.int64)
    while which.size:
        hit = code[cur] >= 0
        keys.append(code[cur][hit] * width + k["name"][which[hit]])
        weights.append(k["dur"][which[hit]])
        cur = up[cur]
        live = cur >= 0
        which, cur = which[live], cur[live]
    if not keys:
        return {}
    found, inverse = np.unique(np.concatenate(keys), return_inverse=True)
    calls = np.bincount(inverse)
    ns = np.bincount(inverse, weights=np.concatenate(weights).astype(np.float64))
    out: Tally = {}
    for key, c, t in zip(found.tolist(), calls.tolist(), ns.tolist()):
        out.setdefault(named[key // width], {})[names[key % width]] = (int(c), round(t))
    return out
