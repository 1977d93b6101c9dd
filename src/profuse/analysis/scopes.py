"""Scope instances (nn.Module calls, annotations) and the units that ran directly inside each.

A unit is either a top-level op of the scope (not nested in another op of the same scope) or a call
of a child scope. Fusion patterns are sequences of units. An instance's device time is the one
attribution every view uses (the op table's ``--group-by module``, hotspots, the Modules view): the
device activities whose ``scope`` (the scope holding their launch call, graph replays included) is
the instance or one below it, each counted once; ops outside every scope (one pseudo-scope per
thread) and CPU-only traces (where it is CPU time) sum their op units.
"""
from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_module
from .._progress import timed
from ..trace import Trace
from ._codes import hash_codes, position_lookup
from ._memo import once_per_trace
from ._read import fetch_columns
from .device_events import device_events
from .opclass import Tensor, op_class, tensors

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use: the records here are read without it
    np = lazy_module("numpy", globals(), "np")

NORM_WORDS = ("Norm",)
ACT_WORDS = ("GELU", "Gelu", "SiLU", "ReLU", "Sigmoid", "Tanh", "Activation", "Mish", "Swish")


@dataclass
class Unit:
    """One step inside a scope instance: an op or a child scope, with its device work."""

    id: int
    kind: str             # op | scope
    name: str             # op name, or the child scope's class / annotation name
    ts: int
    dur: int
    device_ns: int        # device time under it (CPU-only traces: its CPU time)
    kernels: int
    ins: list[Tensor] = field(default_factory=list)

    @property
    def cls(self) -> str:
        """Op class for ops; for child scopes: norm / activation / scope by the class name."""
        return op_class(self.name) if self.kind == "op" else scope_class(self.name)


def scope_class(name: str) -> str:
    """A child scope's class by its name: norm_module, activation_module, or scope."""
    if any(w in name for w in NORM_WORDS):
        return "norm_module"
    if any(w in name for w in ACT_WORDS):
        return "activation_module"
    return "scope"


@dataclass
class ScopeInstance:
    """One run of a module or annotation scope (or the ops outside every scope) and its units."""

    id: int
    kind: str             # module | annotation | top (ops outside every scope, per thread)
    name: str
    label: str
    parent: int | None
    ts: int
    dur: int
    units: list[Unit] = field(default_factory=list)
    device_ns: int = 0
    kernels: int = 0

    @property
    def title(self) -> str:
        """The name shown for the scope: ``nn.Module: X`` for a module, else its name."""
        return f"nn.Module: {self.name}" if self.kind == "module" else self.name


_STEP = re.compile(r"#\d+$")


def title_of(kind: str, name: str) -> str:
    """What advice calls a scope: ``nn.Module: <class>`` for modules; for annotations their name, with
    a trailing step number folded (``ProfilerStep#12`` -> ``ProfilerStep#*``)."""
    if kind == "module":
        return f"nn.Module: {name}"
    return _STEP.sub("#*", name)


def scope_title(inst: ScopeInstance) -> str:
    """:func:`title_of` an instance."""
    return title_of(inst.kind, inst.name)


NO_PARENT = -(2**63)   # UnitTable.parent of an instance without one


@dataclass(frozen=True)
class UnitTable:
    """Every scope instance and the units directly inside it, as columns.

    Instances (one row each, in instance order: scopes by start, then the pseudo-scopes of the ops
    outside every scope, one per thread, by their first op): ``sid`` (a pseudo-scope's is -1 - thread),
    ``kind``, ``name``, ``label``, ``parent`` (:data:`NO_PARENT` for none), ``ts``, ``dur``, inclusive
    ``device_ns`` and ``kernels``. Units (one row each, instance i's at rows ``bounds[i]:bounds[i + 1]``
    in time order, an op before a child scope starting with it): ``unit_id`` (the op's event id or the
    child scope's id), ``is_scope``, ``unit_name`` (a code into ``names``), ``unit_ts``, ``unit_dur``,
    ``unit_device_ns``, ``unit_kernels`` (a child scope's inclusive figures) and ``unit_shape`` (a code
    into ``shapes``: the op's tensor inputs, 0 for none recorded).
    """

    sid: np.ndarray
    kind: list[str]
    name: list[str]
    label: list[str]
    parent: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    device_ns: np.ndarray
    kernels: np.ndarray
    bounds: np.ndarray
    unit_inst: np.ndarray
    unit_id: np.ndarray
    is_scope: np.ndarray
    unit_name: np.ndarray
    unit_ts: np.ndarray
    unit_dur: np.ndarray
    unit_device_ns: np.ndarray
    unit_kernels: np.ndarray
    unit_shape: np.ndarray
    names: list[str]
    shapes: list[tuple[Tensor, ...]]


_LINKS: weakref.WeakKeyDictionary[Trace, tuple[np.ndarray, np.ndarray]] = weakref.WeakKeyDictionary()
_UP: weakref.WeakKeyDictionary[Trace, np.ndarray] = weakref.WeakKeyDictionary()


@once_per_trace
def unit_table(trace: Trace) -> UnitTable:
    """The :class:`UnitTable` of a trace, computed once per loaded trace (callers only read it)."""
    return _unit_table(trace)


def op_parents(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Every ``cpu_op``'s id and its enclosing op's (``parent_op``, -1 for none), as :func:`unit_table` read
    them (read again where it did not)."""
    found = _LINKS.get(trace)
    if found is None:
        cols = fetch_columns(trace.con, "SELECT id, coalesce(parent_op, -1) AS p FROM events WHERE kind = 'cpu_op'")
        found = _LINKS[trace] = (np.asarray(cols["id"], dtype=np.int64), np.asarray(cols["p"], dtype=np.int64))
    return found


def op_parent_rows(trace: Trace) -> np.ndarray:
    """Per ``cpu_op`` of :func:`op_parents`: the row there of its enclosing op (-1: none, or not a ``cpu_op``)."""
    found = _UP.get(trace)
    if found is None:
        ids, parent = op_parents(trace)
        found = _UP[trace] = position_lookup(ids)(parent)
    return found


@once_per_trace
def scope_instances(trace: Trace) -> dict[int, ScopeInstance]:
    """Every scope instance with its units in time order and inclusive device time and kernels, as
    objects (the :func:`unit_table`'s rows). Computed once per loaded trace (callers only read)."""
    return _objects(unit_table(trace))


def _objects(t: UnitTable) -> dict[int, ScopeInstance]:
    """The instances of a unit table as :class:`ScopeInstance` objects holding :class:`Unit` objects."""
    out: dict[int, ScopeInstance] = {}
    sid, parent, ts, dur = t.sid.tolist(), t.parent.tolist(), t.ts.tolist(), t.dur.tolist()
    dev, kern, bounds = t.device_ns.tolist(), t.kernels.tolist(), t.bounds.tolist()
    cols = zip(t.unit_id.tolist(), t.is_scope.tolist(), t.unit_name.tolist(), t.unit_ts.tolist(), t.unit_dur.tolist(),
               t.unit_device_ns.tolist(), t.unit_kernels.tolist(), t.unit_shape.tolist())
    units = [Unit(uid, "scope" if sc else "op", t.names[nm], uts, ud, ud_dev, uk, list(t.shapes[sh]))
             for uid, sc, nm, uts, ud, ud_dev, uk, sh in cols]
    for i, s in enumerate(sid):
        out[s] = ScopeInstance(s, t.kind[i], t.name[i], t.label[i], None if parent[i] == NO_PARENT else parent[i],
                               ts[i], dur[i], units[bounds[i]:bounds[i + 1]], dev[i], kern[i])
    return out


# The units of every scope instance: its top-level ops (not nested in another op of the same scope);
# ops outside every scope belong to one pseudo-scope per thread, numbered -1 - thread. (``parent_op``
# is always a cpu_op, so only those are joined.) Names and shapes come as codes into the lists passed.
_SID = "coalesce(e.scope, -1 - e.thread)"
_UNIT_OF = """
        FROM events e LEFT JOIN (SELECT id, scope FROM events WHERE kind = 'cpu_op') po ON po.id = e.parent_op
        WHERE e.kind = 'cpu_op' AND (e.parent_op IS NULL OR po.scope IS DISTINCT FROM e.scope)"""
_OP_UNITS = f"""
    SELECT e.id, {_SID} AS sid, nm.code AS name, e.ts, e.dur, coalesce(e.device_total, 0) AS dev,
           coalesce(e.kernels_total, 0) AS kern, e.thread, coalesce(sh.code + 1, 0) AS shape
    {_UNIT_OF.replace("FROM events e", '''FROM events e
        JOIN (SELECT unnest(?::VARCHAR[]) AS name, unnest(range(?)) AS code) nm ON nm.name IS NOT DISTINCT FROM e.name
        LEFT JOIN shapes s ON s.id = e.id
        LEFT JOIN (SELECT unnest(?::VARCHAR[]) AS d, unnest(?::VARCHAR[]) AS t, unnest(range(?)) AS code) sh
               ON sh.d = s.input_dims AND sh.t IS NOT DISTINCT FROM s.input_types''')}"""


_NAMES = "SELECT DISTINCT name FROM events WHERE kind = 'cpu_op' UNION SELECT DISTINCT name FROM scopes"
_CPU_OPS = f"""SELECT id, coalesce(parent_op, -1) AS parent_op, coalesce(scope, {NO_PARENT}) AS scope, thread, ts,
    dur, coalesce(device_total, 0) AS dev, coalesce(kernels_total, 0) AS kern, hash(name) AS h
    FROM events WHERE kind = 'cpu_op'"""
_PAIRS = "FROM shapes WHERE input_dims IS NOT NULL"
Pairs = list[tuple[str, str | None]]  # (input dims, input types) as the shapes table has them


def op_units(con: Any) -> tuple[dict[str, np.ndarray], list[str], Pairs]:
    """The op units of every instance (each ``cpu_op`` whose enclosing op, if any, is in another scope: the
    rule of ``_UNIT_OF``) as columns: ``id``, ``sid`` (its scope, or its thread's pseudo-scope), ``name`` (a
    code into the names returned), ``ts``, ``dur``, ``dev``, ``kern`` and ``shape`` (0, or 1 + a code into
    the (input dims, input types) pairs returned: every pair a ``cpu_op`` has).

    Three scans (the ops, their shapes, the distinct names and pairs) with names and shapes coded by their
    DuckDB hashes and the enclosing op looked up by a sort; where two names or two pairs share a hash (or a
    shapes row is doubled), the joins on the values themselves (:func:`_op_units_joined`)."""
    return _op_units(con)[0]


def _op_units(con: Any) -> tuple[tuple[dict[str, np.ndarray], list[str], Pairs],
                                 tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
    """:func:`op_units`, and every ``cpu_op``'s id, enclosing op (-1: none) and that one's row among them (-1: none)
    where they were read (None where the joins were used)."""
    named = con.execute(f"SELECT name, hash(name) FROM ({_NAMES})").fetchall()
    names: list[str] = [n for n, _ in named]
    e = {k: np.asarray(v) for k, v in fetch_columns(con, _CPU_OPS).items()}
    code = hash_codes(np.asarray([h for _, h in named], dtype=np.uint64), e["h"].astype(np.uint64))
    shaped = _shape_codes(con, e["id"].astype(np.int64))
    if code is None or shaped is None:
        return _op_units_joined(con, names), None
    ids, parent, scope = (e[k].astype(np.int64) for k in ("id", "parent_op", "scope"))
    at = position_lookup(ids)(parent)
    # a unit: no enclosing op, or one whose scope differs (a NULL scope, or an enclosing op not among the
    # cpu_ops, compares as NO_PARENT: SQL's IS DISTINCT FROM)
    keep = (parent == -1) | (np.where(at >= 0, scope[np.maximum(at, 0)], NO_PARENT) != scope)
    sid = np.where(scope == NO_PARENT, -1 - e["thread"].astype(np.int64), scope)
    ops = {"id": ids, "sid": sid, "name": code, "ts": e["ts"], "dur": e["dur"], "dev": e["dev"], "kern": e["kern"],
           "thread": e["thread"], "shape": shaped[0]}
    return ({k: v[keep] for k, v in ops.items()}, names, shaped[1]), (ids, parent, at)


def _shape_codes(con: Any, ids: np.ndarray) -> tuple[np.ndarray, Pairs] | None:
    """Per op (``ids``): 0, or 1 + its pair's code into the pairs returned (those of the ops, by hash);
    None where two pairs share a hash or an op has two shapes rows."""
    sh = fetch_columns(con, f"SELECT id, hash(input_dims, input_types) AS h {_PAIRS}")
    s_id, s_h = np.asarray(sh["id"], dtype=np.int64), np.asarray(sh["h"], dtype=np.uint64)
    if not bool((s_id[1:] > s_id[:-1]).all()):    # not read in id order (or an id twice)
        order = np.argsort(s_id, kind="stable")
        s_id, s_h = s_id[order], s_h[order]
        if bool((s_id[1:] == s_id[:-1]).any()):
            return None
    texts: dict[int, tuple[str, str | None]] = {}
    for d, t, h in con.execute(f"SELECT DISTINCT input_dims, input_types, hash(input_dims, input_types) {_PAIRS}"
                               ).fetchall():
        if texts.setdefault(int(h), (d, t)) != (d, t):
            return None
    known = np.asarray(sorted(texts), dtype=np.uint64)
    pair = hash_codes(known, s_h)          # each shapes row's pair, by hash
    if pair is None:
        return None
    if s_id.size == ids.size and np.array_equal(s_id, ids):   # every op has its row, in the same order
        of_op = pair
    else:
        row = position_lookup(s_id)(ids)        # each op's shapes row, -1 for none
        of_op = np.where(row >= 0, pair[np.maximum(row, 0)] if pair.size else -1, -1)
    used = np.flatnonzero(np.bincount(of_op[of_op >= 0], minlength=known.size))   # the pairs the ops have
    renumber = np.zeros(known.size + 1, dtype=np.int64)   # the last: an op without shapes (-1)
    renumber[used] = np.arange(1, used.size + 1)
    return renumber[of_op], [texts[h] for h in known[used].tolist()]


def _op_units_joined(con: Any, names: list[str]) -> tuple[dict[str, np.ndarray], list[str], Pairs]:
    """:func:`op_units` by one query joining the names and the shape pairs on their values."""
    pairs = con.execute("""SELECT DISTINCT s.input_dims, s.input_types FROM shapes s SEMI JOIN events e
        ON e.id = s.id AND e.kind = 'cpu_op' WHERE s.input_dims IS NOT NULL""").fetchall()
    ops = con.execute(_OP_UNITS, [names, len(names), [d for d, _ in pairs], [t for _, t in pairs], len(pairs)]
                      ).fetchnumpy()
    return {k: np.asarray(v) for k, v in ops.items()}, names, [(d, t) for d, t in pairs]


@timed("scope instances")
def _unit_table(trace: Trace) -> UnitTable:
    """Every instance's op units (one query, names and shapes as codes), its child scopes, and the roll-up."""
    con = trace.con
    sc = _scope_rows(con)
    (ops, names, pairs), links = _op_units(con)   # in no order: ordered below, with the child scopes
    if links is not None:
        _LINKS[trace], _UP[trace] = links[:2], links[2]
    shapes = [(), *(tuple(tensors(d, t)) for d, t in pairs)]
    code = {n: i for i, n in enumerate(names)}
    o_sid, o_id = np.asarray(ops["sid"], dtype=np.int64), np.asarray(ops["id"], dtype=np.int64)
    # instances: the scopes, then one pseudo-scope per thread with ops outside every scope (first op first)
    outside = np.flatnonzero(o_sid < 0)
    outside = outside[np.lexsort((o_id[outside], np.asarray(ops["ts"], dtype=np.int64)[outside]))]
    _, first = np.unique(o_sid[outside], return_index=True)
    top_at = outside[np.sort(first)]
    neg = o_sid[top_at]
    threads = (-1 - neg).tolist()
    sid = np.concatenate([np.asarray(sc["id"], dtype=np.int64), neg])
    parent = np.concatenate([_ids(sc["parent"]), np.full(neg.size, NO_PARENT, dtype=np.int64)])
    ts = np.concatenate([np.asarray(sc["ts"], dtype=np.int64), np.asarray(ops["ts"], dtype=np.int64)[top_at]])
    dur = np.concatenate([np.asarray(sc["dur"], dtype=np.int64), np.zeros(neg.size, dtype=np.int64)])
    pos = position_lookup(sid)
    par = pos(parent)                                     # parent's row, -1 for none (or one not in the table)
    o_inst = pos(o_sid)
    o_dev, o_kern, own_dev, own_kern = _own_figures(trace, ops, sid, o_inst, pos)
    device_ns, kernels = _roll_up(par, own_dev, own_kern)
    # child-scope units: every scope whose parent is an instance, with its inclusive figures
    child = np.flatnonzero(par >= 0)
    n_ops = o_sid.size
    u_inst = np.concatenate([o_inst, par[child]])
    u_ts = np.concatenate([np.asarray(ops["ts"], dtype=np.int64), ts[child]])
    is_scope = np.concatenate([np.zeros(n_ops, dtype=bool), np.ones(child.size, dtype=bool)])
    # an instance's units by start; at one start its ops (by id) before its child scopes (in instance order)
    order = np.lexsort((np.concatenate([o_id, child]), is_scope, u_ts, u_inst))
    scope_names = [code[n] for n in np.asarray(sc["name"], dtype=object)[child].tolist()]
    return UnitTable(
        sid=sid, kind=[*np.asarray(sc["kind"], dtype=object).tolist(), *(["top"] * neg.size)],
        name=[*np.asarray(sc["name"], dtype=object).tolist(), *(f"top level (thread {t})" for t in threads)],
        label=[*np.asarray(sc["label"], dtype=object).tolist(), *([""] * neg.size)],
        parent=parent, ts=ts, dur=dur, device_ns=device_ns, kernels=kernels,
        bounds=np.searchsorted(u_inst[order], np.arange(sid.size + 1)).astype(np.int64),
        unit_inst=u_inst[order],
        unit_id=np.concatenate([o_id, sid[child]])[order], is_scope=is_scope[order],
        unit_name=np.concatenate([np.asarray(ops["name"], dtype=np.int64),
                                  np.asarray(scope_names, dtype=np.int64)])[order],
        unit_ts=u_ts[order], unit_dur=np.concatenate([np.asarray(ops["dur"], dtype=np.int64), dur[child]])[order],
        unit_device_ns=np.concatenate([o_dev, device_ns[child]])[order],
        unit_kernels=np.concatenate([o_kern, kernels[child]])[order],
        unit_shape=np.concatenate([np.asarray(ops["shape"], dtype=np.int64),
                                   np.zeros(child.size, dtype=np.int64)])[order],
        names=names, shapes=shapes)


_TEXTS = ("kind", "name", "label")


def _scope_rows(con: Any) -> dict[str, Any]:
    """The scopes table by start: ``id``, ``parent``, ``ts``, ``dur``, and ``kind``, ``name``, ``label`` as
    object arrays, read as hash codes into their distinct values (as text where two values share a hash)."""
    rows = fetch_columns(con, f"SELECT id, {', '.join(f'hash({c}) AS {c}' for c in _TEXTS)}, parent, ts, dur "
                         "FROM scopes ORDER BY ts")
    out = dict(rows)
    for c in _TEXTS:
        values = con.execute(f"SELECT DISTINCT {c}, hash({c}) FROM scopes").fetchall()
        code = hash_codes(np.asarray([h for _, h in values], dtype=np.uint64), np.asarray(rows[c], dtype=np.uint64))
        if code is None:
            return dict(con.execute("SELECT id, kind, name, label, parent, ts, dur FROM scopes ORDER BY ts").fetchnumpy())
        out[c] = np.asarray([v for v, _ in values] + [None], dtype=object)[:-1][code]
    return out


def _own_figures(trace: Trace, ops: dict[str, Any], sid: np.ndarray, o_inst: np.ndarray,
                 pos: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Op units' own figures and each instance's own (before the roll-up): on a device a real scope's own
    figures are its device activities, a pseudo-scope keeps its op units'; on a CPU trace an op's time."""
    cpu = trace.cpu_only
    o_dev = np.asarray(ops["dur"] if cpu else ops["dev"], dtype=np.int64)
    o_kern = np.ones(o_inst.size, dtype=np.int64) if cpu else np.asarray(ops["kern"], dtype=np.int64)
    own_dev, own_kern = np.zeros(sid.size, dtype=np.int64), np.zeros(sid.size, dtype=np.int64)
    np.add.at(own_dev, o_inst, o_dev)
    np.add.at(own_kern, o_inst, o_kern)
    if not cpu:
        own_dev[sid >= 0] = 0
        own_kern[sid >= 0] = 0
        d_sid, d_ns, d_n = _device_own(trace)
        at = pos(d_sid)
        own_dev[at[at >= 0]], own_kern[at[at >= 0]] = d_ns[at >= 0], d_n[at >= 0]
    return o_dev, o_kern, own_dev, own_kern


def _ids(col: np.ndarray) -> np.ndarray:
    """A nullable id column as int64, NULL as :data:`NO_PARENT`."""
    if np.ma.isMaskedArray(col):
        return np.asarray(col.filled(NO_PARENT), dtype=np.int64)
    return np.asarray(col, dtype=np.int64)


def _device_own(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scope, ns, count) of the device activities each scope holds itself (its ``scope``), graph replays included."""
    d = device_events(trace)
    scope, dur = d.scope[d.has_scope], d.dur[d.has_scope]
    order = np.argsort(scope, kind="stable")
    scope, dur = scope[order], dur[order]
    at = np.flatnonzero(np.concatenate([[True], scope[1:] != scope[:-1]])) if scope.size else scope
    return scope[at], np.add.reduceat(dur, at) if at.size else dur, np.diff(np.append(at, scope.size))


def _roll_up(par: np.ndarray, own_dev: np.ndarray, own_kern: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inclusive figures per instance: its own plus its children's inclusive ones, deepest level first
    (each instance's depth by pointer doubling: a scope tree can be thousands deep)."""
    depth = (par >= 0).astype(np.int64)
    up = par.copy()
    for _ in range(64):
        live = up >= 0
        if not live.any():
            break
        nxt = up[live]
        depth[live] += depth[nxt]   # distances and pointers of the step before (read before written)
        up[live] = up[nxt]
    dev, kern = own_dev.copy(), own_kern.copy()
    order = np.argsort(-depth, kind="stable")
    cuts = np.flatnonzero(np.diff(depth[order])) + 1
    for level in np.split(order, cuts):
        level = level[par[level] >= 0]
        np.add.at(dev, par[level], dev[level])
        np.add.at(kern, par[level], kern[level])
    return dev, kern
