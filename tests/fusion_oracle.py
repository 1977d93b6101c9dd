"""The rules analysis/scopes.py, advice/fusion.py, advice/interruptions.py (CPU scopes) and
diagnosis/cpu_budget.py (span painting) followed before they became column sweeps (issue 44): Python
per event, a Unit object per unit. Kept verbatim as the oracles tests/test_fusion_sweeps.py checks the
sweeps against."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profuse.analysis import figures
from profuse.analysis.advice.fusion import EXTERNAL, RECOMMEND
from profuse.analysis.advice.records import Candidate
from profuse.analysis.busy import union_ns
from profuse.analysis.diagnosis.cpu_budget import CPU_LEAVES, _leaf
from profuse.analysis.opclass import ACTIVATIONS, FUSIBLE, NORM, Tensor, base, io_bytes, op_class, tensors
from profuse.analysis.scopes import ScopeInstance, Unit, scope_title
from profuse.analysis.steps import STEP_WHERE
from profuse.trace import Trace
from profuse.trace.schema import DEVICE_TIME_SQL

# --- analysis/scopes.py: scope instances as objects, with ``only`` those holding one of these ops ---------

# The units of every scope instance: its top-level ops (not nested in another op of the same scope);
# ops outside every scope belong to one pseudo-scope per thread, numbered -1 - thread. (``parent_op``
# is always a cpu_op, so only those are joined.)
_SID = "coalesce(e.scope, -1 - e.thread)"
_UNIT_OF = """
        FROM events e LEFT JOIN (SELECT id, scope FROM events WHERE kind = 'cpu_op') po ON po.id = e.parent_op
        WHERE e.kind = 'cpu_op' AND (e.parent_op IS NULL OR po.scope IS DISTINCT FROM e.scope)"""
_UNITS = f"""
    WITH units AS (
        SELECT e.id, {_SID} AS sid, e.name, e.ts, e.dur, e.device_total, e.kernels_total, e.thread {_UNIT_OF})"""


def old_scope_instances(trace: Trace, only: list[str] | None = None) -> dict[int, ScopeInstance]:
    """Every instance, or with ``only`` just those with an op unit of one of those names (their
    child-scope units still carry the child's inclusive totals, summed over all of its units)."""
    cpu = trace.cpu_only
    out: dict[int, ScopeInstance] = {}
    for sid, kind, name, label, parent, ts, dur in trace.con.execute(
            "SELECT id, kind, name, label, parent, ts, dur FROM scopes ORDER BY ts").fetchall():
        out[sid] = ScopeInstance(sid, kind, name, label, parent, ts, dur)
    if only is None:
        rows = trace.con.execute(_UNITS + """
            SELECT u.id, u.sid, u.name, u.ts, u.dur, u.device_total, u.kernels_total, s.input_dims, s.input_types,
                   u.thread
            FROM units u LEFT JOIN shapes s USING (id) ORDER BY u.ts""").fetchall()
        return _fill(out, rows, cpu, None if cpu else _device_own(trace))
    if not only:
        return {}
    # the instances with a wanted op among their units (the join runs over those ops only) ...
    wanted = {sid for (sid,) in trace.con.execute(
        f"SELECT DISTINCT {_SID} {_UNIT_OF} AND e.name IN (SELECT unnest(?::VARCHAR[]))", [only]).fetchall()}
    if not wanted:
        return {}
    # ... their units, and the own totals (op units summed) of them and every scope below them, so a
    # child scope's unit carries its inclusive figures without its units being read
    children: dict[int, list[int]] = {}
    for sid, inst in out.items():
        if inst.parent is not None:
            children.setdefault(inst.parent, []).append(sid)
    below, todo = set(wanted), list(wanted)
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in below:
                below.add(c)
                todo.append(c)
    dev, kern = ("e.dur", "count(*)") if cpu else ("e.device_total", "sum(e.kernels_total)")
    rows = trace.con.execute(f"""
        SELECT false AS total, e.id, {_SID} AS sid, e.name, e.ts, e.dur, e.device_total, e.kernels_total,
               s.input_dims, s.input_types, e.thread
        {_UNIT_OF.replace("FROM events e", "FROM events e LEFT JOIN shapes s USING (id)")}
              AND {_SID} IN (SELECT unnest(?::BIGINT[]))
        UNION ALL
        SELECT true, NULL, {_SID}, NULL, NULL, NULL, sum({dev}), {kern}, NULL, NULL, NULL {_UNIT_OF}
              AND {_SID} IN (SELECT unnest(?::BIGINT[])) GROUP BY {_SID}
        ORDER BY total, ts""", [sorted(wanted), sorted(below)]).fetchall()
    split = next((i for i, r in enumerate(rows) if r[0]), len(rows))
    own = {r[2]: (r[6] or 0, r[7] or 0) for r in rows[split:]}
    if not cpu:  # real scopes: their device activities; the pseudo-scopes (< 0) keep their op units
        own = {**{sid: v for sid, v in own.items() if sid < 0}, **_device_own(trace)}
    return _fill(out, [r[1:] for r in rows[:split]], cpu, own, only_with_units=True)


def _device_own(trace: Trace) -> dict[int, tuple[int, int]]:
    """ns and count of the device activities each scope holds itself (its ``scope``), graph replays included."""
    return {int(sid): (int(ns or 0), int(n)) for sid, ns, n in trace.con.execute(f"""
        SELECT scope, sum(dur), count(*) FROM events WHERE kind IN ({DEVICE_TIME_SQL}) AND scope IS NOT NULL
        GROUP BY scope""").fetchall()}


def _fill(out: dict[int, ScopeInstance], rows: list[tuple[Any, ...]], cpu: bool,
          own: dict[int, tuple[int, int]] | None, *, only_with_units: bool = False) -> dict[int, ScopeInstance]:
    """Units from ``rows`` into their instances; then child-scope units and the roll-up. ``own`` is each
    scope's own (device time, count) (None: its op units'); a pseudo-scope missing from it sums its op
    units. With ``only_with_units`` only instances that received rows are kept."""
    for eid, sid, name, ts, dur, dev, kern, dims, types, thread in rows:
        inst = out.get(sid)
        if inst is None:  # ops outside every scope: one pseudo-scope per thread
            inst = out[sid] = ScopeInstance(sid, "top", f"top level (thread {thread})", "", None, ts, 0)
        inst.units.append(Unit(eid, "op", name, ts, dur, dur if cpu else dev, 1 if cpu else kern,
                               tensors(dims, types)))
    if own is not None:
        own = dict(own)
        for sid, inst in out.items():
            if sid < 0 and sid not in own:
                own[sid] = (sum(u.device_ns for u in inst.units), sum(u.kernels for u in inst.units))
    kept = {sid for sid, inst in out.items() if inst.units} if only_with_units else set(out)
    for inst in list(out.values()):
        if inst.parent is not None and inst.parent in kept:
            out[inst.parent].units.append(Unit(inst.id, "scope", inst.name, inst.ts, inst.dur, 0, 0))
    for inst in out.values():
        inst.units.sort(key=lambda u: u.ts)
    _roll_up(out, own)
    return {sid: out[sid] for sid in out if sid in kept} if only_with_units else out


def _roll_up(out: dict[int, ScopeInstance], own: dict[int, tuple[int, int]] | None = None) -> None:
    """Inclusive device time and kernels per instance, children first; child units get them too.

    Without ``own`` an instance's total is the sum of its units (its child scopes' totals first).
    With ``own`` (each scope's own figures: its device activities, or on a CPU-only trace its summed op
    units, from SQL) totals come from the whole scope tree, so instances whose op units were not read
    still give their parents the right figures.
    """
    children: dict[int, list[int]] = {}
    for sid, inst in out.items():
        if inst.parent is not None and inst.parent in out:
            children.setdefault(inst.parent, []).append(sid)
    done: dict[int, tuple[int, int]] = {}
    # children before parents, without recursion (a scope tree can be thousands deep)
    for root in [sid for sid, inst in out.items() if inst.parent is None or inst.parent not in out]:
        stack = [(root, False)]
        while stack:
            sid, expanded = stack.pop()
            if sid in done:
                continue
            if not expanded:
                stack.append((sid, True))
                stack.extend((c, False) for c in children.get(sid, ()) if c not in done)
                continue
            inst = out[sid]
            if own is None:
                dev = kern = 0
                for u in inst.units:
                    if u.kind == "scope" and u.id in out:
                        u.device_ns, u.kernels = done[u.id]
                    dev += u.device_ns
                    kern += u.kernels
            else:
                dev, kern = own.get(sid, (0, 0))
                for c in children.get(sid, ()):
                    dev += done[c][0]
                    kern += done[c][1]
                for u in inst.units:
                    if u.kind == "scope" and u.id in out:
                        u.device_ns, u.kernels = done[u.id]
            inst.device_ns, inst.kernels = dev, kern
            done[sid] = (dev, kern)


# --- advice/fusion.py: the search over Unit objects ---------------------------------------------------


@dataclass
class Match:
    """One place a fusion pattern matched: the scope instance, its units and their device time."""

    pattern: str
    scope: ScopeInstance
    units: list[Unit]
    device_ns: int
    bytes_now: int
    bytes_fused: int
    saving_ns: float
    confidence: str
    intermediates: list[tuple[str, int]] = field(default_factory=list)
    model: str = ""   # the model the saving is by (a key of advice.records.SAVING_MODELS)


# --- patterns ----------------------------------------------------------------------------------


def _names(units: list[Unit]) -> list[str]:
    return [base(u.name) if u.kind == "op" else f"<{u.cls}>" for u in units]


def _is_norm(u: Unit) -> bool:
    return (u.kind == "op" and base(u.name) in NORM) or u.cls == "norm_module"


def _residual_then_norm(units: list[Unit]) -> bool:
    """An add whose sum the next unit, a norm, reads: two tensors of the norm's input shape added (shapes
    recorded), or, without shapes, an out-of-place add. An in-place ``add_`` of a scalar or without
    shapes is a counter's increment (BatchNorm's ``num_batches_tracked += 1``), not a residual."""
    for a, b in zip(units, units[1:]):
        if not (a.kind == "op" and base(a.name) == "add" and _is_norm(b)):
            continue
        big = [t for t in a.ins if t.numel > 1]
        if not a.ins:
            if not a.name.endswith("_"):
                return True
            continue
        if len(big) >= 2 and (not b.ins or any(t.dims == big[0].dims for t in b.ins)):
            return True
    return False


def _scalar_mul(u: Unit) -> bool:
    """A multiply by a constant: one tensor input (the other operand is a Scalar), or, without
    shapes, a mul that feeds the sigmoid directly. A Python scalar may be recorded as a 0-dim tensor."""
    return u.kind == "op" and base(u.name) == "mul" and sum(t.numel > 1 for t in u.ins) <= 1


def _same_input(sig: Unit, mul: Unit) -> bool:
    """Whether a product can be x * sigmoid(x): its two tensors have the sigmoid's input's shape
    (traces record shapes, not tensor identity; without shapes nothing contradicts it)."""
    if not sig.ins or not mul.ins:
        return not sig.ins and not mul.ins
    shape = max(sig.ins, key=lambda t: t.numel).dims
    big = [t for t in mul.ins if t.numel > 1]
    return len(big) >= 2 and all(t.dims == shape for t in big[:2])


def _sigmoid_form(n: list[str], units: list[Unit]) -> str | None:
    """Tell sigmoid-built activations apart by data flow, and name nothing else after them: the
    chain's ops must be exactly one of
    QuickGELU  x * sigmoid(1.702 x): [mul by a constant, sigmoid, mul];
    SiLU       x * sigmoid(x):       [sigmoid, mul], the product of the sigmoid's own input;
    gated      sigmoid(g) * g * up:  [sigmoid, mul, mul], the first product of the sigmoid's input.
    A sigmoid among other work ([layer_norm, sigmoid, mul], a loss's log/where/clamp) is none of these."""
    ops = [u for u in units if u.kind == "op"]
    names = [base(u.name) for u in ops]
    if names == ["mul", "sigmoid", "mul"] and (_scalar_mul(ops[0]) or not ops[0].ins) and not _scalar_mul(ops[2]):
        return "quick_gelu"
    if names == ["sigmoid", "mul"] and not _scalar_mul(ops[1]) and _same_input(ops[0], ops[1]):
        return "silu"
    if names == ["sigmoid", "mul", "mul"] and not _scalar_mul(ops[1]) and _same_input(ops[0], ops[1]):
        return "gated"
    return None


PATTERNS: list[tuple[str, Callable[[list[str], list[Unit]], bool]]] = [
    ("RMSNorm", lambda n, u: "mean" in n and ("rsqrt" in n or {"sqrt", "div"} <= set(n))
     and not ({"sub", "var", "var_mean"} & set(n)) and bool({"pow", "mul", "square"} & set(n))),
    ("LayerNorm", lambda n, u: (bool({"var", "var_mean"} & set(n)) or {"mean", "sub"} <= set(n))
     and bool({"rsqrt", "sqrt", "div"} & set(n))),
    ("softmax", lambda n, u: {"exp", "sum", "div"} <= set(n)),
    ("GELU (tanh)", lambda n, u: "tanh" in n and "add" in n and ("pow" in n or n.count("mul") >= 3)),
    ("GELU (erf)", lambda n, u: "erf" in n and "mul" in n),
    ("QuickGELU (x * sigmoid(1.702 x))", lambda n, u: _sigmoid_form(n, u) == "quick_gelu"),
    ("SiLU (x * sigmoid(x))", lambda n, u: _sigmoid_form(n, u) == "silu"),
    ("SiLU x mul (SwiGLU)", lambda n, u: ("silu" in n and "mul" in n) or _sigmoid_form(n, u) == "gated"),
    ("rotary embedding", lambda n, u: {"neg", "cat", "mul", "add"} <= set(n)),
    ("residual add + norm", lambda n, u: _residual_then_norm(u)),
    ("norm + residual add + activation", lambda n, u: any(
        _is_norm(x) and y.kind == "op" and base(y.name) == "add" and (z.cls == "activation_module" or (
            z.kind == "op" and base(z.name) in ACTIVATIONS)) for x, y, z in zip(u, u[1:], u[2:]))),
    ("bias + activation", lambda n, u: any(a == "add" and (b in ACTIVATIONS or b == "<activation_module>")
                                           for a, b in zip(n, n[1:]))),
]


def name_chain(units: list[Unit]) -> str | None:
    """The fusion pattern the units' op names follow, or None."""
    n = _names(units)
    for pattern, test in PATTERNS:
        if test(n, units):
            return pattern
    return None


# --- chains ------------------------------------------------------------------------------------


def _fusible(u: Unit) -> bool:
    if u.kind == "scope":
        return u.cls in ("norm_module", "activation_module")
    return op_class(u.name) in FUSIBLE


def _work(u: Unit, cpu: bool) -> bool:
    """A unit that does work worth fusing: not a scalar bookkeeping op, not a kernel-less op."""
    if u.kind == "op" and u.ins and max(t.numel for t in u.ins) <= 1:
        return False
    return cpu or u.kernels > 0


def _big(u: Unit) -> int | None:
    return max((t.numel for t in u.ins), default=None) if u.kind == "op" else None


def _flows_into(a: Unit, b: Unit) -> bool:
    """Could b consume a's output? Same size, or one is the other reduced over its last dim."""
    x, y = _big(a), _big(b)
    if x is None or y is None or x == y:
        return True
    lo, hi = min(x, y), max(x, y)
    last = [t.dims[-1] for t in (a.ins + b.ins) if t.dims]
    return any(d and lo * d == hi for d in last)


def chains(inst: ScopeInstance, cpu: bool, copies: frozenset[int] = frozenset()) -> list[list[Unit]]:
    """Maximal runs of fusible units that could feed each other (views neither join nor break a run).

    A run needs at least one op: a row of child modules (a norm after a norm) is no chain. An op in
    ``copies`` (all its device work is memcpy/memset: an input transfer) is not fusible and breaks
    the run: fusion cannot remove a copy between host and device.
    """
    out: list[list[Unit]] = []
    run: list[Unit] = []

    def close() -> None:
        if any(u.kind == "op" for u in run):
            out.append(list(run))
        run.clear()

    for i, u in enumerate(inst.units):
        if u.kind == "op" and op_class(u.name) == "view":
            continue
        if _counter_increment(inst.units, i):
            continue   # its sum flows nowhere in the chain: neither joins nor breaks it
        if not _fusible(u) or u.id in copies:
            close()
            continue
        if not _work(u, cpu):
            continue
        prev = next((v for v in reversed(run) if v.kind == "op"), None)
        if run and ((run[-1].kind == "scope" and u.kind == "scope") or (prev is not None and not _flows_into(prev, u))):
            close()
        run.append(u)
    close()
    return out


def _counter_increment(units: list[Unit], i: int) -> bool:
    """An in-place ``add_`` of a scalar (or without shapes) right before a norm: BatchNorm's
    ``num_batches_tracked += 1``, whose sum the norm does not read (data flow, not adjacency)."""
    u = units[i]
    if not (u.kind == "op" and base(u.name) == "add" and u.name.endswith("_")):
        return False
    if u.ins and any(t.numel > 1 for t in u.ins):
        return False
    nxt = next((v for v in units[i + 1:] if not (v.kind == "op" and op_class(v.name) == "view")), None)
    return nxt is not None and _is_norm(nxt)


PASS_THROUGH_WORDS = ("Dropout", "Identity")


def _transparent(u: Unit, cpu: bool) -> bool:
    """A child scope that does no work of its own between two steps of a pattern: one that launched
    no kernels (an eval-mode nn.Dropout on a device), or a dropout/identity module."""
    if u.kind != "scope":
        return False
    return (not cpu and u.kernels == 0) or any(w in u.name for w in PASS_THROUGH_WORDS)


def _attention(inst: ScopeInstance, cpu: bool = False) -> list[list[Unit]]:
    """matmul -> (scale / mask) -> softmax -> (dropout) -> matmul windows."""
    units = [u for u in inst.units if not (u.kind == "op" and op_class(u.name) == "view")]
    found = []
    i = 0
    while i < len(units):
        if units[i].kind == "op" and op_class(units[i].name) == "matmul":
            j = i + 1
            saw_softmax = False
            while j < len(units) and j - i <= 8 and ((units[j].kind == "op" and op_class(units[j].name) in FUSIBLE)
                                                     or _transparent(units[j], cpu)):
                n = base(units[j].name) if units[j].kind == "op" else ""
                saw_softmax |= (units[j].kind == "op" and op_class(units[j].name) == "softmax") or n == "exp"
                j += 1
            if saw_softmax and j < len(units) and units[j].kind == "op" and op_class(units[j].name) == "matmul":
                found.append(units[i:j + 1])
                i = j + 1
                continue
        i += 1
    return found


def _swiglu(inst: ScopeInstance) -> list[list[Unit]]:
    """silu(gate(x)) * up(x): the up projection runs between the activation and the product."""
    units = [u for u in inst.units if not (u.kind == "op" and op_class(u.name) == "view")]
    found = []
    for i, u in enumerate(units):
        is_silu = (u.kind == "op" and base(u.name) == "silu") or (u.kind == "scope" and "SiLU" in u.name)
        if not is_silu:
            continue
        for w in units[i + 1:i + 4]:
            if w.kind == "op" and base(w.name) == "mul":
                found.append([u, w])
                break
            if (w.kind == "op" and op_class(w.name) != "matmul") or (w.kind == "scope" and w.cls != "scope"):
                break
    return found


# --- bytes model -------------------------------------------------------------------------------


def traffic(pattern: str, units: list[Unit]) -> tuple[int, int, list[tuple[str, int]]]:
    """(bytes now, bytes fused, intermediates written) of a chain, from recorded input shapes."""
    ops = [u for u in units if u.kind == "op" and u.ins]
    if not ops:
        return 0, 0, []
    main = max((t for u in ops for t in u.ins), key=lambda t: t.numel)
    now, inter = 0, []
    for k, u in enumerate(units):
        if u.kind == "scope":  # a child norm/activation module: reads and writes the main tensor once
            r, w = main.nbytes, main.nbytes
        elif u.ins:
            r, w = io_bytes(u.name, u.ins)
        else:
            continue
        now += r + w
        if k < len(units) - 1 and w:
            inter.append((u.name, w))
    first_in = max(ops[0].ins, key=lambda t: t.numel)
    last_in = max(ops[-1].ins, key=lambda t: t.numel)
    n_in, n_out = EXTERNAL.get(pattern, (1, 1))
    last_dim = main.dims[-1] if main.dims else 1
    params: dict[tuple[int, ...], Tensor] = {}
    for u in ops:
        for t in u.ins:
            if 1 < t.numel <= last_dim:
                params.setdefault(t.dims, t)
    fused = n_in * main.numel * first_in.elem + sum(t.nbytes for t in params.values()) \
        + n_out * main.numel * last_in.elem
    if pattern.startswith("attention") and len(ops) >= 2:
        qkv = sorted((t for u in ops for t in u.ins), key=lambda t: -t.numel)
        fused = sum(t.nbytes for t in qkv[1:4]) + ops[-1].ins[0].nbytes // max(len(ops[-1].ins), 1)
    return now, min(fused, now), inter


# Below this rate (bytes now per ns of the chain's time = GB/s) no memory system explains the time:
# on a CPU it is per-op overhead (dispatch, allocation), which bytes say nothing about, so no
# byte-model saving is claimed there (80 B -> 32 B in 220 µs is 0.4 MB/s; real traffic is GB/s).
MIN_BYTE_BOUND_GBPS = 0.01


def _match(pattern: str, inst: ScopeInstance, units: list[Unit], cpu: bool) -> Match:
    device_ns = sum(u.device_ns for u in units)
    now, fused, inter = traffic(pattern, units)
    # the model the saving is by: attention's inner kernels, a multi-kernel norm's kernel count, the bytes where
    # shapes give them, else (no shapes) the kernel count
    model = ("kernels between the matmuls" if pattern.startswith("attention") else "norm kernel count"
             if pattern == "multi-kernel norm" else "memory traffic" if now else "kernel count")
    if pattern == "pointwise chain" and (not now or fused >= now):
        # nothing known to be saved: an unnamed chain's only model is its bytes
        return Match(pattern, inst, units, device_ns, now, fused, 0.0, "low", inter, model)
    if cpu and device_ns and (not now or now / device_ns < MIN_BYTE_BOUND_GBPS):
        # on a CPU only bytes that explain the time back a saving; without shapes nothing is known
        return Match(pattern, inst, units, device_ns, now, fused, 0.0, "low", inter, model)
    if pattern.startswith("attention"):
        # the matmuls stay; what goes is the scores' round trips through memory (scale, mask, softmax)
        saving = float(sum(u.device_ns for u in units[1:-1]))
        conf = "medium"
    elif pattern == "multi-kernel norm":
        k = max(units[0].kernels, 1)
        saving = device_ns * max(0.0, 1 - 2 / (k + 1))
        conf = "low"
    elif now:
        saving = device_ns * max(0.0, 1 - fused / now)
        conf = "high" if pattern not in ("pointwise chain", "bias + activation", "residual add + norm") else "medium"
    else:  # no shapes recorded: assume half of all but one kernel's time goes
        k = sum(max(u.kernels, 1) for u in units)
        saving = device_ns * 0.5 * (1 - 1 / k)
        conf = "low"
    if pattern == "pointwise chain" or cpu:
        # on a CPU the chain's tensors often sit in cache and its ops cost dispatch and compute more than
        # memory traffic, so the byte model is an upper bound, not a prediction (Llama RMSNorm on a CPU:
        # 3.12 ms predicted, 0.34 ms measured with torch.compile); measure it before trusting it
        conf = "low"
    return Match(pattern, inst, units, device_ns, now, fused, saving, conf, inter, model)


# Op classes a match can start from: a chain needs a fusible op, attention a matmul, SwiGLU a mul.
_MATCHABLE = FUSIBLE | {"matmul"}


def candidate_ops(trace: Trace) -> set[str]:
    """The trace's op names that can be part of a match: a scope instance none of whose own ops is
    one of these (only views, "other" ops, child modules) holds no chain, attention or SwiGLU."""
    names = trace.con.execute("SELECT DISTINCT name FROM events WHERE kind = 'cpu_op' AND name IS NOT NULL").fetchall()
    return {n for (n,) in names if op_class(n) in _MATCHABLE}


def copy_only_ops(trace: Trace) -> frozenset[int]:
    """Ops that launched device work (themselves or below) all of which is memcpy/memset: copies,
    never fusion candidates. A device event belongs to its op and every op enclosing that one."""
    if trace.cpu_only:
        return frozenset()
    rows = trace.con.execute(f"""
        WITH RECURSIVE up(op, copy) AS (
            SELECT DISTINCT op, kind <> 'kernel' FROM events WHERE kind IN ({DEVICE_TIME_SQL}) AND op IS NOT NULL
            UNION SELECT e.parent_op, up.copy FROM up JOIN events e ON e.id = up.op WHERE e.parent_op IS NOT NULL)
        SELECT op FROM up GROUP BY op HAVING bool_and(copy)""").fetchall()
    return frozenset(int(r[0]) for r in rows)


def find_matches(trace: Trace) -> list[Match]:
    """Every match in every scope instance, in instance (start time) order: attention windows first,
    then SwiGLU pairs, then the chains of what is left (and multi-kernel norms on devices)."""
    return matches_of(old_scope_instances(trace, sorted(candidate_ops(trace))).values(), trace.cpu_only,
                      copy_only_ops(trace))


def matches_of(instances: Any, cpu: bool, copies: frozenset[int]) -> list[Match]:
    """:func:`find_matches` over given instances."""
    out: list[Match] = []
    for inst in instances:
        taken: set[int] = set()
        for window in _attention(inst, cpu):
            out.append(_match("attention (matmul-softmax-matmul)", inst, window, cpu))
            taken |= {u.id for u in window}
        for window in _swiglu(inst):
            if not taken & {u.id for u in window}:
                out.append(_match("SiLU x mul (SwiGLU)", inst, window, cpu))
                taken |= {u.id for u in window}
        for run in chains(inst, cpu, copies):
            run = [u for u in run if u.id not in taken]
            if not cpu:
                for u in [u for u in run if u.kind == "op" and op_class(u.name) == "norm" and u.kernels >= 2]:
                    out.append(_match("multi-kernel norm", inst, [u], cpu))
                    run = [v for v in run if v is not u]
            if len(run) < 2:
                continue
            out.append(_match(name_chain(run) or "pointwise chain", inst, run, cpu))
    return out


def shape_key(units: list[Unit]) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """The recorded input shapes of a match's ops: instances that differ here are grouped apart."""
    return tuple(tuple(t.dims for t in u.ins) for u in units if u.kind == "op")


def fusion_candidates(trace: Trace, matches: list[Match] | None = None) -> list[Candidate]:
    """Matches grouped by (pattern, scope, input shapes), largest predicted saving first.

    A group's saving is the sum of its instances' savings, each at most the device time of the
    units it fuses, so no prediction exceeds the time it comes from; a group that would save
    nothing (the fused form moves no fewer bytes and launches no fewer kernels) is dropped.
    """
    groups: dict[tuple[str, str, tuple[tuple[tuple[int, ...], ...], ...]], list[Match]] = {}
    for m in find_matches(trace) if matches is None else matches:
        m.saving_ns = min(max(m.saving_ns, 0.0), float(m.device_ns))
        groups.setdefault((m.pattern, scope_title(m.scope), shape_key(m.units)), []).append(m)
    out = []
    for (pattern, scope, _shapes), ms in groups.items():
        saving_ns = sum(m.saving_ns for m in ms)
        if saving_ns <= 0:
            continue
        first = ms[0]
        inter: dict[str, int] = {}
        for name, b in first.intermediates:
            inter[name] = inter.get(name, 0) + b
        out.append(Candidate(
            pattern=pattern, scope=scope, instances=len(ms),
            kernels_per_instance=round(sum(sum(max(u.kernels, 1) for u in m.units) for m in ms) / len(ms), 2),
            device_us=figures.us(sum(m.device_ns for m in ms) / 1000), bytes_now=sum(m.bytes_now for m in ms),
            bytes_fused=sum(m.bytes_fused for m in ms),
            predicted_saving_us=figures.us(saving_ns / 1000),
            recommendation=RECOMMEND[pattern],
            confidence=first.confidence, ops=[u.name for u in first.units],
            intermediate_bytes=sum(b for m in ms for _, b in m.intermediates),
            intermediates=[{"op": k, "bytes_per_instance": v} for k, v in inter.items()],
            shape=json.dumps([list(d) for d in _shapes[0]]) if _shapes else "", saving_model=first.model))
    out.sort(key=lambda c: -c.predicted_saving_us)
    return out


# --- advice/interruptions.py: a CPU scope's busy and window per instance ----------------------------


def old_cpu_scopes(trace: Trace) -> dict[str, tuple[int, int, int, int]]:
    """On the CPU the ops are the work; a child scope's time is work too, never the parent's idle.
    Each instance's figures come from its own thread's ops, so instances are summed."""
    per: dict[str, list[tuple[int, int, int]]] = {}
    for inst in old_scope_instances(trace).values():
        ops = [u for u in inst.units if u.kind == "op"]
        if inst.kind not in ("module", "annotation") or len(ops) < 2:
            continue
        s = np.array([u.ts for u in inst.units], dtype=np.int64)
        e = np.array([u.ts + u.dur for u in inst.units], dtype=np.int64)
        per.setdefault(scope_title(inst), []).append((len(ops), union_ns(s, e), int(e.max() - s.min())))
    return {title: (len(rows), sum(r[0] for r in rows), sum(r[1] for r in rows), sum(r[2] for r in rows))
            for title, rows in per.items()}


# --- diagnosis/cpu_budget.py: painting a span, one slice assignment per event ------------------------


def old_span_ns(trace: Trace, thread: int, lo: int, hi: int, skip: int) -> np.ndarray:
    """ns per CPU leaf of [lo, hi) seen from ``thread`` (other threads fill its gaps), the event
    ``skip`` (the step) left out: each piece of the span goes to the last event covering it in the order
    other threads, then the step's; shallow first (so the innermost event wins)."""
    cols = trace.con.execute(f"""
        SELECT greatest(ts, ?) AS s, least(ts + dur, ?) AS e, kind, coalesce(name, '') AS name FROM events
        WHERE ts < ? AND ts + dur > ? AND id <> ? AND kind IN ('cpu_op', 'python', 'runtime',
              'annotation', 'sync') AND NOT ({STEP_WHERE})
        ORDER BY thread = ?, depth, ts, id""", [lo, hi, hi, lo, skip, thread]).fetchnumpy()
    start, end = np.asarray(cols["s"], dtype=np.int64), np.asarray(cols["e"], dtype=np.int64)
    kinds, names = np.asarray(cols["kind"], dtype=object), np.asarray(cols["name"], dtype=object)
    # an annotation exactly as long as the span is the span's own mark, not work inside it
    keep = (end > start) & ~((kinds == "annotation") & (start == lo) & (end == hi))
    start, end, kinds, names = start[keep], end[keep], kinds[keep], names[keep]
    out = np.zeros(len(CPU_LEAVES), dtype=np.int64)
    cuts = np.unique(np.concatenate([np.asarray([lo, hi], dtype=np.int64), start, end]))
    cuts = cuts[(cuts >= lo) & (cuts <= hi)]
    label = np.full(cuts.size - 1, CPU_LEAVES.index("idle"), dtype=np.int64)
    memo: dict[tuple[str, str], int] = {}   # one classification per distinct (kind, name)
    leaves = []
    for key in zip(kinds.tolist(), names.tolist()):
        if key not in memo:
            memo[key] = _leaf(*key)
        leaves.append(memo[key])
    first, last = np.searchsorted(cuts, start).tolist(), np.searchsorted(cuts, end).tolist()
    for i, j, leaf in zip(first, last, leaves):   # in the query's order: the innermost last
        label[i:j] = leaf
    np.add.at(out, label, np.diff(cuts))
    return out


