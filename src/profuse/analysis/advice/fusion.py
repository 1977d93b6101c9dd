"""Fusion candidates: chains of fusible work inside a scope, named by a pattern library.

For each scope instance the units that ran directly inside it are scanned for maximal runs of
fusible work (pointwise, reduction, norm, softmax, copy ops and norm/activation child modules).
A run is named by the first pattern that matches (RMSNorm, LayerNorm, softmax, GELU, SwiGLU, rotary
embedding, residual add + norm, bias + activation), attention is found across matmuls, and on
devices a single norm op that launches several kernels is a candidate too. Instances are grouped
by (pattern, scope) and carry what fusion saves, with the model it comes from (``saving_model``).

The search runs over the unit table's columns (analysis/scopes.py): what a rule asks of an op's name
or shapes is answered once per distinct name and shape, the runs, windows and pairs are found by
sweeps over all instances at once, and a run's pattern and bytes once per distinct run; the matches'
savings and their grouping into candidates are array operations over the matches as columns.

The saving model: a chain of memory-bound kernels takes time in proportion to the bytes it moves,
so fused time = time now x bytes fused / bytes now. Bytes come from the recorded input shapes; without
them (and for attention and multi-kernel norms) a saving comes from another rule, and the candidate says
which (:func:`saving_model`).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..._lazy import lazy_module
from ..._progress import timed
from ...trace import Trace
from ...trace.arrays import distinct, distinct_codes, distinct_rows
from .. import figures
from .._codes import positions
from ..device_events import device_events
from ..opclass import ACTIVATIONS, FUSIBLE, NORM, Tensor, base, io_bytes, op_class
from ..scopes import UnitTable, op_parent_rows, op_parents, scope_class, title_of, unit_table
from .records import SAVING_MODELS, Candidate

if TYPE_CHECKING:
    import numpy as np
else:  # numpy loads on first use: the records here are read without it
    np = lazy_module("numpy", globals(), "np")

RECOMMEND = {
    "RMSNorm": "torch.nn.functional.rms_norm(x, (hidden,), weight, eps): one fused kernel on CUDA/ROCm; "
               "or torch.compile the module, which fuses on every device (the CPU too)",
    "LayerNorm": "torch.nn.functional.layer_norm(x, (hidden,), weight, bias, eps)",
    "softmax": "torch.softmax(x, dim)",
    "GELU (tanh)": "torch.nn.functional.gelu(x, approximate='tanh')",
    "GELU (erf)": "torch.nn.functional.gelu(x)",
    "SiLU x mul (SwiGLU)": "torch.compile the module: silu(gate) * up becomes one kernel",
    "QuickGELU (x * sigmoid(1.702 x))": "torch.compile the module: the scale, sigmoid and product become one "
                                        "kernel (F.gelu is a different function: check accuracy before swapping)",
    "SiLU (x * sigmoid(x))": "torch.nn.functional.silu(x): one kernel",
    "rotary embedding": "torch.compile the module: the rotation becomes one kernel",
    "residual add + norm": "torch.compile the module: the residual add folds into the norm kernel",
    "norm + residual add + activation": "torch.compile the module: the norm's output, the residual add and the "
                                        "activation become one kernel (in eval, fold BatchNorm into the conv "
                                        "before it: torch.ao.quantization.fuse_modules)",
    "bias + activation": "torch.compile the module (bias and activation fold into one kernel), or a "
                         "fused linear+activation",
    "attention (matmul-softmax-matmul)": "torch.nn.functional.scaled_dot_product_attention(q, k, v, "
                                         "attn_mask, scale=...)",
    "multi-kernel norm": "torch.compile the module: inductor generates one fused norm kernel",
    "pointwise chain": "torch.compile the module",
}
# Full-size tensors a fused kernel must still read and write, per pattern.
EXTERNAL = {"SiLU x mul (SwiGLU)": (2, 1), "residual add + norm": (2, 2), "rotary embedding": (1, 1),
            "norm + residual add + activation": (2, 1),
            "attention (matmul-softmax-matmul)": (3, 1)}


PASS_THROUGH_WORDS = ("Dropout", "Identity")


class Reading:
    """What the rules ask of a unit's name and shapes, answered once per distinct name and shape of a
    unit table: per name code as an op (``op_*``) and as a child scope (``scope_*``), per shape code."""

    def __init__(self, t: UnitTable) -> None:
        self.table = t
        names = [n or "" for n in t.names]
        cls, bases, scls = [op_class(n) for n in names], [base(n) for n in names], [scope_class(n) for n in names]

        def flags(test: Callable[[int], bool]) -> np.ndarray:
            return np.fromiter((test(i) for i in range(len(names))), dtype=bool, count=len(names))

        self.view, self.matmul = flags(lambda i: cls[i] == "view"), flags(lambda i: cls[i] == "matmul")
        self.fusible, self.norm_cls = flags(lambda i: cls[i] in FUSIBLE), flags(lambda i: cls[i] == "norm")
        self.softmax_like = flags(lambda i: cls[i] == "softmax" or bases[i] == "exp")
        self.add, self.mul = flags(lambda i: bases[i] == "add"), flags(lambda i: bases[i] == "mul")
        self.in_place = flags(lambda i: names[i].endswith("_"))
        self.silu, self.norm_op = flags(lambda i: bases[i] == "silu"), flags(lambda i: bases[i] in NORM)
        self.act_op = flags(lambda i: bases[i] in ACTIVATIONS)
        self.s_norm, self.s_act = flags(lambda i: scls[i] == "norm_module"), flags(lambda i: scls[i] == "activation_module")
        self.s_plain, self.s_silu = flags(lambda i: scls[i] == "scope"), flags(lambda i: "SiLU" in names[i])
        self.s_pass = flags(lambda i: any(w in names[i] for w in PASS_THROUGH_WORDS))
        # a unit's name as the patterns read it: an op's base name, a child scope's "<class>"
        self.words: list[str] = sorted({*bases, *(f"<{c}>" for c in scls)})
        at = {w: i for i, w in enumerate(self.words)}
        self.op_word = np.asarray([at[b] for b in bases], dtype=np.int64)
        self.scope_word = np.asarray([at[f"<{c}>"] for c in scls], dtype=np.int64)
        sh = t.shapes
        self.has_ins = np.asarray([bool(x) for x in sh], dtype=bool)
        self.big = np.asarray([max((u.numel for u in x), default=-1) for x in sh], dtype=np.int64)  # -1: no tensors
        self.any_big = np.asarray([any(u.numel > 1 for u in x) for x in sh], dtype=bool)
        self.main = [max(x, key=lambda u: u.numel) if x else None for x in sh]   # the first largest input
        self.dims = [tuple(u.dims for u in x) for x in sh]
        self._io: dict[tuple[int, int], tuple[int, int]] = {}
        self._flows: dict[tuple[int, int], bool] = {}

    def io(self, name: int, shape: int) -> tuple[int, int]:
        """(bytes read, bytes written) of an op with these name and shape codes."""
        key = (name, shape)
        found = self._io.get(key)
        if found is None:
            found = self._io[key] = io_bytes(self.table.names[name], list(self.table.shapes[shape]))
        return found

    def flows_into(self, a: int, b: int) -> bool:
        """Could an op with input shapes ``b`` consume the output of one with ``a``? Same size, or one is
        the other reduced over its last dim (an op without shapes flows anywhere)."""
        key = (a, b)
        found = self._flows.get(key)
        if found is None:
            x, y = self.big[a], self.big[b]
            if x < 0 or y < 0 or x == y:
                found = True
            else:
                lo, hi = min(x, y), max(x, y)
                last = [t.dims[-1] for t in (*self.table.shapes[a], *self.table.shapes[b]) if t.dims]
                found = any(d and lo * d == hi for d in last)
            self._flows[key] = found
        return found


@dataclass(frozen=True)
class Chain:
    """The units of one match as columns: ``scope`` (a child scope, else an op), ``name`` and ``shape``
    codes into the unit table's names and shapes, read through ``r``."""

    scope: np.ndarray
    name: np.ndarray
    shape: np.ndarray
    r: Reading

    @cached_property
    def op(self) -> np.ndarray:
        """Which units are ops."""
        return ~self.scope

    @cached_property
    def words(self) -> np.ndarray:
        """Each unit's name as the patterns read it (codes into ``r.words``)."""
        found: np.ndarray = np.where(self.scope, self.r.scope_word[self.name], self.r.op_word[self.name])
        return found

    @cached_property
    def n(self) -> set[str]:
        """The names the units carry: ops' base names, child scopes' ``<class>``."""
        return {self.r.words[i] for i in distinct(self.words).tolist()}

    def count(self, word: str) -> int:
        """Units named ``word``."""
        return int(np.count_nonzero(self.words == self.r.words.index(word))) if word in self.n else 0

    def is_norm(self) -> np.ndarray:
        """Norm ops and norm child modules."""
        found: np.ndarray = (self.op & self.r.norm_op[self.name]) | (self.scope & self.r.s_norm[self.name])
        return found

    def ins(self, k: int) -> tuple[Tensor, ...]:
        """The recorded tensor inputs of unit k."""
        return self.r.table.shapes[int(self.shape[k])]

    def label(self, k: int) -> str:
        """Unit k's name as recorded."""
        return self.r.table.names[int(self.name[k])]


# --- patterns ----------------------------------------------------------------------------------


def _residual_then_norm(c: Chain) -> bool:
    """An add whose sum the next unit, a norm, reads: two tensors of the norm's input shape added (shapes
    recorded), or, without shapes, an out-of-place add. An in-place ``add_`` of a scalar or without
    shapes is a counter's increment (BatchNorm's ``num_batches_tracked += 1``), not a residual."""
    adds = c.op & c.r.add[c.name]
    for k in np.flatnonzero(adds[:-1] & c.is_norm()[1:]).tolist():
        a_ins, b_ins = c.ins(k), c.ins(k + 1)
        if not a_ins:
            if not c.label(k).endswith("_"):
                return True
            continue
        big = [t for t in a_ins if t.numel > 1]
        if len(big) >= 2 and (not b_ins or any(t.dims == big[0].dims for t in b_ins)):
            return True
    return False


def _scalar_mul(ins: tuple[Tensor, ...]) -> bool:
    """A multiply by a constant: one tensor input (the other operand is a Scalar), or, without
    shapes, a mul that feeds the sigmoid directly. A Python scalar may be recorded as a 0-dim tensor."""
    return sum(t.numel > 1 for t in ins) <= 1


def _same_input(sig: tuple[Tensor, ...], mul: tuple[Tensor, ...]) -> bool:
    """Whether a product can be x * sigmoid(x): its two tensors have the sigmoid's input's shape
    (traces record shapes, not tensor identity; without shapes nothing contradicts it)."""
    if not sig or not mul:
        return not sig and not mul
    shape = max(sig, key=lambda t: t.numel).dims
    big = [t for t in mul if t.numel > 1]
    return len(big) >= 2 and all(t.dims == shape for t in big[:2])


def _sigmoid_form(c: Chain) -> str | None:
    """Tell sigmoid-built activations apart by data flow, and name nothing else after them: the
    chain's ops must be exactly one of
    QuickGELU  x * sigmoid(1.702 x): [mul by a constant, sigmoid, mul];
    SiLU       x * sigmoid(x):       [sigmoid, mul], the product of the sigmoid's own input;
    gated      sigmoid(g) * g * up:  [sigmoid, mul, mul], the first product of the sigmoid's input.
    A sigmoid among other work ([layer_norm, sigmoid, mul], a loss's log/where/clamp) is none of these."""
    ops = np.flatnonzero(c.op).tolist()
    if len(ops) not in (2, 3):
        return None
    names = [c.r.words[int(c.words[k])] for k in ops]
    ins = [c.ins(k) for k in ops]
    if names == ["mul", "sigmoid", "mul"] and (_scalar_mul(ins[0]) or not ins[0]) and not _scalar_mul(ins[2]):
        return "quick_gelu"
    if names == ["sigmoid", "mul"] and not _scalar_mul(ins[1]) and _same_input(ins[0], ins[1]):
        return "silu"
    if names == ["sigmoid", "mul", "mul"] and not _scalar_mul(ins[1]) and _same_input(ins[0], ins[1]):
        return "gated"
    return None


def _norm_add_act(c: Chain) -> bool:
    """A norm, then an add, then an activation (op or module), one after the other."""
    act = (c.scope & c.r.s_act[c.name]) | (c.op & c.r.act_op[c.name])
    return bool((c.is_norm()[:-2] & (c.op & c.r.add[c.name])[1:-1] & act[2:]).any())


def _bias_act(c: Chain) -> bool:
    """An add right before an activation (op or module)."""
    act = (c.scope & c.r.s_act[c.name]) | (c.op & c.r.act_op[c.name])
    return bool(((c.op & c.r.add[c.name])[:-1] & act[1:]).any())


PATTERNS: list[tuple[str, Callable[[Chain], bool]]] = [
    ("RMSNorm", lambda c: "mean" in c.n and ("rsqrt" in c.n or {"sqrt", "div"} <= c.n)
     and not ({"sub", "var", "var_mean"} & c.n) and bool({"pow", "mul", "square"} & c.n)),
    ("LayerNorm", lambda c: (bool({"var", "var_mean"} & c.n) or {"mean", "sub"} <= c.n)
     and bool({"rsqrt", "sqrt", "div"} & c.n)),
    ("softmax", lambda c: {"exp", "sum", "div"} <= c.n),
    ("GELU (tanh)", lambda c: "tanh" in c.n and "add" in c.n and ("pow" in c.n or c.count("mul") >= 3)),
    ("GELU (erf)", lambda c: "erf" in c.n and "mul" in c.n),
    ("QuickGELU (x * sigmoid(1.702 x))", lambda c: _sigmoid_form(c) == "quick_gelu"),
    ("SiLU (x * sigmoid(x))", lambda c: _sigmoid_form(c) == "silu"),
    ("SiLU x mul (SwiGLU)", lambda c: ("silu" in c.n and "mul" in c.n) or _sigmoid_form(c) == "gated"),
    ("rotary embedding", lambda c: {"neg", "cat", "mul", "add"} <= c.n),
    ("residual add + norm", _residual_then_norm),
    ("norm + residual add + activation", _norm_add_act),
    ("bias + activation", _bias_act),
]


def name_chain(c: Chain) -> str | None:
    """The fusion pattern the units' op names follow, or None."""
    for pattern, test in PATTERNS:
        if test(c):
            return pattern
    return None


# --- bytes model -------------------------------------------------------------------------------


def traffic(pattern: str, c: Chain) -> tuple[int, int, list[tuple[str, int]]]:
    """(bytes now, bytes fused, intermediates written) of a chain, from recorded input shapes."""
    r = c.r
    ops = np.flatnonzero(c.op & r.has_ins[c.shape])
    if not ops.size:
        return 0, 0, []
    shapes = c.shape[ops]
    main = r.main[int(shapes[np.argmax(r.big[shapes])])]   # the first largest tensor any op reads
    assert main is not None
    rw = [(main.nbytes, main.nbytes) if sc else (r.io(nm, sh) if r.has_ins[sh] else None)
          for sc, nm, sh in zip(c.scope.tolist(), c.name.tolist(), c.shape.tolist())]
    now, inter = 0, []
    last = len(rw) - 1
    for k, x in enumerate(rw):
        if x is not None:
            now += x[0] + x[1]
            if k < last and x[1]:
                inter.append((c.label(k), x[1]))
    first_in, last_in = r.main[int(shapes[0])], r.main[int(shapes[-1])]
    assert first_in is not None and last_in is not None
    n_in, n_out = EXTERNAL.get(pattern, (1, 1))
    last_dim = main.dims[-1] if main.dims else 1
    params: dict[tuple[int, ...], Tensor] = {}
    seen = distinct_codes(shapes)[1]
    at = np.full(seen.max() + 1, shapes.size, dtype=np.int64)
    np.minimum.at(at, seen, np.arange(shapes.size))
    for sh in shapes[np.sort(at)].tolist():   # each distinct shape at its first op: the first tensor per dims
        for t in r.table.shapes[sh]:
            if 1 < t.numel <= last_dim:
                params.setdefault(t.dims, t)
    fused = n_in * main.numel * first_in.elem + sum(t.nbytes for t in params.values()) \
        + n_out * main.numel * last_in.elem
    if pattern.startswith("attention") and ops.size >= 2:
        every = [t for sh in shapes.tolist() for t in r.table.shapes[sh]]
        qkv = sorted(every, key=lambda t: -t.numel)
        tail = r.table.shapes[int(shapes[-1])]
        fused = sum(t.nbytes for t in qkv[1:4]) + tail[0].nbytes // max(len(tail), 1)
    return now, min(fused, now), inter


# Below this rate (bytes now per ns of the chain's time = GB/s) no memory system explains the time:
# on a CPU it is per-op overhead (dispatch, allocation), which bytes say nothing about, so no
# byte-model saving is claimed there (80 B -> 32 B in 220 µs is 0.4 MB/s; real traffic is GB/s).
MIN_BYTE_BOUND_GBPS = 0.01


@dataclass(frozen=True)
class Facts:
    """What a match's pattern and bytes are, the same for every match of the same units (names, shapes)."""

    pattern: str
    bytes_now: int
    bytes_fused: int
    intermediates: list[tuple[str, int]]
    ops: list[str]                  # the units' names
    shapes: tuple[tuple[tuple[int, ...], ...], ...]   # the ops' input shapes (instances differing here group apart)


@dataclass
class Match:
    """One place a fusion pattern matched: its scope's title, the unit table rows it fuses, their device
    time and kernels (each unit at least one), and what fusing them saves."""

    title: str
    rows: np.ndarray
    facts: Facts
    device_ns: int
    kernels: int
    saving_ns: float
    confidence: str

    @property
    def pattern(self) -> str:
        """The pattern's name."""
        return self.facts.pattern


CONFIDENCE = ("low", "medium", "high")
_MEDIUM = ("pointwise chain", "bias + activation", "residual add + norm")   # named by bytes alone: medium at most
MODELS = tuple(SAVING_MODELS)   # "memory traffic", "kernels between the matmuls", "norm kernel count", "kernel count"


def saving_model(pattern: str, bytes_now: int) -> str:
    """The model a match's saving comes from (a key of :data:`records.SAVING_MODELS`), first that applies:
    attention, the time of the kernels between its matmuls; a multi-kernel norm, its kernel count; bytes
    recorded (input shapes), the memory traffic; else (no shapes) the kernel count. The one rule
    :func:`_savings` computes by and each candidate names."""
    if pattern.startswith("attention"):
        return "kernels between the matmuls"
    if pattern == MULTI_KERNEL_NORM:
        return "norm kernel count"
    return "memory traffic" if bytes_now else "kernel count"


def _savings(facts: list[Facts], fact: np.ndarray, device_ns: np.ndarray, kernels: tuple[np.ndarray, np.ndarray],
             inner_ns: np.ndarray, cpu: bool) -> tuple[np.ndarray, np.ndarray]:
    """(predicted saving in ns, confidence as a code into :data:`CONFIDENCE`) of each match from its
    :class:`Facts` (``facts[fact]``), its device time, its kernels (all its units', each at least one; its first
    unit's), and its inner units' device time (all but the first and last)."""
    pattern = [f.pattern for f in facts]
    now = np.asarray([f.bytes_now for f in facts], dtype=np.int64)[fact]
    fused = np.asarray([f.bytes_fused for f in facts], dtype=np.int64)[fact]

    def which(test: Callable[[str], bool]) -> np.ndarray:
        found: np.ndarray = np.asarray([test(p) for p in pattern], dtype=bool)[fact]
        return found

    chain, medium = which(lambda p: p == "pointwise chain"), which(lambda p: p in _MEDIUM)
    model = np.asarray([MODELS.index(saving_model(f.pattern, f.bytes_now)) for f in facts], dtype=np.int64)[fact]
    by_traffic, attention, norm = (model == MODELS.index(m) for m in ("memory traffic", "kernels between the matmuls",
                                                                      "norm kernel count"))
    d, n, f = device_ns.astype(np.float64), now.astype(np.float64), fused.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        # nothing known to be saved: an unnamed chain's only model is its bytes; on a CPU only bytes that
        # explain the time back a saving (without shapes nothing is known)
        nothing = (chain & ((now == 0) | (fused >= now))) | \
            (cpu & (device_ns != 0) & ((now == 0) | (n / d < MIN_BYTE_BOUND_GBPS)))
        by_bytes = d * np.maximum(0.0, 1 - f / n)
        k = np.maximum(kernels[1], 1)
        saving = np.select([attention, norm, by_traffic],   # the matmuls stay; the scores' round trips go
                           [inner_ns.astype(np.float64), d * np.maximum(0.0, 1 - 2 / (k + 1)), by_bytes],
                           d * 0.5 * (1 - 1 / kernels[0]))   # no shapes: half of all but one kernel
    conf = np.where(attention, 1, np.where(by_traffic, np.where(medium, 1, 2), 0))
    # on a CPU the chain's tensors often sit in cache and its ops cost dispatch and compute more than
    # memory traffic, so the byte model is an upper bound, not a prediction (Llama RMSNorm on a CPU:
    # 3.12 ms predicted, 0.34 ms measured with torch.compile); measure it before trusting it
    conf[chain | cpu | nothing] = 0
    saving[nothing] = 0.0
    return saving, conf


# Op classes a match can start from: a chain needs a fusible op, attention a matmul, SwiGLU a mul.
_MATCHABLE = FUSIBLE | {"matmul"}


def matchable(names: Iterable[str | None]) -> set[str]:
    """The names among ``names`` of ops that can be part of a match: a scope instance none of whose own ops is
    one of these (only views, "other" ops, child modules) holds no chain, attention or SwiGLU."""
    return {n for n in names if n is not None and op_class(n) in _MATCHABLE}


def copy_only_ops(trace: Trace) -> frozenset[int]:
    """Ops that launched device work (themselves or below) all of which is memcpy/memset: copies,
    never fusion candidates. A device event belongs to its op and every op enclosing that one (its
    ``parent_op``, that one's, and so on): two marks, "a kernel below" and "a copy below", each climbs
    from the ops holding such work until it meets an op already marked."""
    if trace.cpu_only:
        return frozenset()
    d = device_events(trace)
    op, copy = d.op[d.has_op], d.copy[d.has_op]
    ids, up = _op_tree(trace, distinct(op))
    at = np.searchsorted(ids, op)            # every op is among ids
    kernel, copied = np.zeros(ids.size, dtype=bool), np.zeros(ids.size, dtype=bool)
    _climb(kernel, up, at[~copy])
    _climb(copied, up, at[copy])
    return frozenset(ids[copied & ~kernel].tolist())


def _op_tree(trace: Trace, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every ``cpu_op`` and every other event among ``ops`` or enclosing one of these, ascending by id, and the
    row of each one's enclosing op (``parent_op``; -1: none): the ``cpu_op`` ones as :func:`op_parents` has them,
    any other event's read from the events table (one not in the trace has none)."""
    ids, parent = op_parents(trace)
    up = op_parent_rows(trace)
    ascending = bool((ids[1:] > ids[:-1]).all())
    known = ids if ascending else np.sort(ids)
    missing = distinct(np.concatenate([ops[positions(known, ops) < 0], parent[(up < 0) & (parent != -1)]]))
    if ascending and not missing.size:
        return ids, up
    all_ids, all_parent = [ids], [parent]
    while missing.size:
        rows = trace.con.execute("""SELECT id, coalesce(parent_op, -1) FROM events
            WHERE id IN (SELECT unnest(?::BIGINT[])) AND kind <> 'cpu_op'""", [missing.tolist()]).fetchall()
        more = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
        gone = missing[~np.isin(missing, more[:, 0])]
        all_ids += [more[:, 0], gone]
        all_parent += [more[:, 1], np.full(gone.size, -1, dtype=np.int64)]
        nxt = distinct(more[:, 1][more[:, 1] != -1])
        missing = nxt[~np.isin(nxt, np.concatenate(all_ids))]
    flat = np.concatenate(all_ids)
    order = np.argsort(flat, kind="stable")
    return flat[order], positions(flat[order], np.concatenate(all_parent)[order])


def _climb(mark: np.ndarray, up: np.ndarray, rows: np.ndarray) -> None:
    """Mark ``rows`` and every row enclosing one (``up``: each row's enclosing row, -1 for none)."""
    slot = np.empty(mark.size, dtype=np.int64)
    front = rows
    while front.size:
        step = np.arange(front.size)
        slot[front] = step
        front = front[slot[front] == step]     # each row once (its last place)
        mark[front] = True
        nxt = up[front]
        nxt = nxt[nxt >= 0]
        front = nxt[~mark[nxt]]


# --- the sweeps --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Units:
    """The units of the instances searched (those holding a matchable op, whole), in table order: each
    one's table row, instance, kind and codes, and the position one past its instance's last unit."""

    rows: np.ndarray
    inst: np.ndarray
    scope: np.ndarray
    op: np.ndarray
    name: np.ndarray
    shape: np.ndarray
    kernels: np.ndarray
    end: np.ndarray


def _searched(t: UnitTable, wanted: set[str]) -> _Units:
    """The units of every instance with an op unit named in ``wanted``."""
    want = np.fromiter((n in wanted for n in t.names), dtype=bool, count=len(t.names))
    hit = ~t.is_scope & want[t.unit_name]
    held = np.zeros(t.sid.size, dtype=bool)
    held[t.unit_inst[hit]] = True
    rows = np.flatnonzero(held[t.unit_inst])
    inst = t.unit_inst[rows]
    scope = t.is_scope[rows]
    return _Units(rows=rows, inst=inst, scope=scope, op=~scope, name=t.unit_name[rows], shape=t.unit_shape[rows],
                  kernels=t.unit_kernels[rows], end=np.searchsorted(rows, t.bounds[inst + 1]))


def _next_true(mask: np.ndarray) -> np.ndarray:
    """For each position x (and one past the end), the first position >= x where ``mask`` holds, else its length."""
    n = mask.size
    at = np.append(np.where(mask, np.arange(n), n), n)
    found: np.ndarray = np.minimum.accumulate(at[::-1])[::-1]
    return found


def _spans(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positions start..end (inclusive) of each span, flat, and the span each belongs to."""
    lengths = ends - starts + 1
    which = np.repeat(np.arange(starts.size), lengths)
    offset = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return np.arange(which.size) - offset[which] + starts[which], which


def _attention(u: _Units, r: Reading, cpu: bool) -> tuple[np.ndarray, np.ndarray]:
    """matmul -> (scale / mask) -> softmax -> (dropout) -> matmul windows among an instance's units
    (views left out), taken left to right: their units' positions in ``u``'s order and the window of each.

    From a matmul, up to eight fusible ops or pass-through child scopes may follow before the closing
    matmul, one of them a softmax (or exp); a window's closing matmul opens no window of its own, so of
    a row of windows each ending where the next would start every second one is taken."""
    f = np.flatnonzero(~(u.op & r.view[u.name]))
    op, nm, sc = u.op[f], u.name[f], u.scope[f]
    end = np.searchsorted(f, u.end[f])
    transparent = sc & (((not cpu) & (u.kernels[f] == 0)) | r.s_pass[nm])
    ok = (op & r.fusible[nm]) | transparent
    mm = op & r.matmul[nm]
    soft = np.concatenate([[0], np.cumsum(op & r.softmax_like[nm])])
    m = np.flatnonzero(mm)
    if not m.size:
        return m, m
    j = np.minimum(np.minimum(_next_true(~ok)[m + 1], m + 9), end[m])
    acc = (j < end[m]) & mm[np.minimum(j, f.size - 1)] & (soft[j] - soft[m + 1] > 0)
    linked = np.zeros(m.size, dtype=bool)
    linked[1:] = acc[:-1] & (j[:-1] == m[1:])
    group_start = np.maximum.accumulate(np.where(~linked, np.arange(m.size), 0))
    taken = acc & ((np.arange(m.size) - group_start) % 2 == 0)
    at, which = _spans(m[taken], j[taken])
    return f[at], which


def _swiglu(u: _Units, r: Reading, taken: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """silu(gate(x)) * up(x): a SiLU (op or module) and the mul among the next three units (views left
    out) with only matmuls and plain child scopes between; pairs with a unit already ``taken`` are not.
    Returns the (silu, mul) positions in ``u``'s order."""
    f = np.flatnonzero(~(u.op & r.view[u.name]))
    op, nm, sc = u.op[f], u.name[f], u.scope[f]
    end = np.searchsorted(f, u.end[f])
    silu = np.flatnonzero((op & r.silu[nm]) | (sc & r.s_silu[nm]))
    if not silu.size:
        return silu, silu
    stop = (op & ~r.matmul[nm]) | (sc & ~r.s_plain[nm])
    k = _next_true(stop)[silu + 1]
    kk = np.minimum(k, f.size - 1)
    pair = (k <= silu + 3) & (k < end[silu]) & op[kk] & r.mul[nm[kk]]
    a, b = f[silu[pair]], f[k[pair]]
    free = ~taken[a] & ~taken[b]
    return a[free], b[free]


def _joining(u: _Units, r: Reading, cpu: bool, ids: np.ndarray, copies: frozenset[int]) -> tuple[np.ndarray, np.ndarray]:
    """Which units join a chain and which break one. Views and counter increments do neither (an in-place
    ``add_`` of a scalar, or without shapes, whose next unit other than a view is a norm: BatchNorm's
    ``num_batches_tracked += 1``, whose sum the norm does not read); a unit that is not fusible, or a copy
    (an op in ``copies``: all its device work is memcpy/memset), breaks; a fusible unit that does no work
    (a scalar bookkeeping op, or on a device one that launched no kernels) does neither."""
    op, nm, sh = u.op, u.name, u.shape
    view = op & r.view[nm]
    norm = (op & r.norm_op[nm]) | (u.scope & r.s_norm[nm])
    nxt = _next_true(~view)[np.arange(1, u.op.size + 1)]
    counter = op & r.add[nm] & r.in_place[nm] & ~r.any_big[sh] & (nxt < u.end) & norm[np.minimum(nxt, op.size - 1)]
    fusible = (op & r.fusible[nm]) | (u.scope & (r.s_norm[nm] | r.s_act[nm]))
    copy = np.isin(ids, np.fromiter(copies, dtype=np.int64, count=len(copies))) if copies else np.zeros(op.size, bool)
    work = ~(op & r.has_ins[sh] & ~r.any_big[sh]) & (cpu | (u.kernels > 0))
    quiet = view | counter
    return ~quiet & fusible & ~copy & work, ~quiet & (~fusible | copy)


def chains(u: _Units, r: Reading, cpu: bool, ids: np.ndarray, copies: frozenset[int]) -> tuple[np.ndarray, np.ndarray]:
    """Maximal runs of fusible units that could feed each other (views neither join nor break a run):
    the positions of their units in ``u``'s order and the run each is in (0, 1, ... in order).

    A run needs at least one op: a row of child modules (a norm after a norm) is no chain. Two child
    scopes in a row end a run, and so does an op that its run's last op cannot flow into (same size,
    or one is the other reduced over its last dim), the run's last op being the one before it unless
    two child scopes stand between them."""
    join, brk = _joining(u, r, cpu, ids, copies)
    j = np.flatnonzero(join)
    if not j.size:
        return j, j
    breaks = np.cumsum(brk)
    same = (u.inst[j[1:]] == u.inst[j[:-1]]) & (breaks[j[1:]] == breaks[j[:-1]])
    new = np.ones(j.size, dtype=bool)
    new[1:] = ~same | (u.scope[j[1:]] & u.scope[j[:-1]])
    is_op = u.op[j]
    last_op = np.maximum.accumulate(np.where(is_op, np.arange(j.size), -1))
    k = np.flatnonzero(is_op[1:]) + 1
    p = last_op[k - 1]
    k, p = k[p >= 0], p[p >= 0]
    live = (u.inst[j[p]] == u.inst[j[k]]) & (breaks[j[p]] == breaks[j[k]]) & (k - p - 1 <= 1)
    k, p = k[live], p[live]
    if k.size:   # flows asked once per distinct pair of shapes
        n = len(r.table.shapes)
        pairs, back = distinct_codes(u.shape[j[p]] * n + u.shape[j[k]])
        flows = np.asarray([r.flows_into(x // n, x % n) for x in pairs.tolist()], dtype=bool)
        new[k] |= ~flows[back]
    run = np.cumsum(new) - 1
    with_op = np.bincount(run, weights=is_op, minlength=int(run[-1]) + 1) > 0
    keep = with_op[run]
    kept = run[keep]   # numbered again 0, 1, ... (runs come in order)
    return j[keep], np.cumsum(np.concatenate([[0], kept[1:] != kept[:-1]])).astype(np.int64)


ATTENTION, SWIGLU, MULTI_KERNEL_NORM = "attention (matmul-softmax-matmul)", "SiLU x mul (SwiGLU)", "multi-kernel norm"


def _windows(u: _Units, r: Reading, cpu: bool, ids: np.ndarray, copies: frozenset[int]) -> \
        tuple[np.ndarray, np.ndarray, list[str | None], np.ndarray]:
    """Every match's units: (positions in ``u``'s order, the match each is in, each match's pattern (None:
    a chain, named by its units), each match's sort key). Per instance: attention windows first, then
    SwiGLU pairs, then the chains of what is left, each after the multi-kernel norms (on devices: a norm
    op that launched two or more kernels) taken out of it."""
    n = u.op.size
    att, att_of = _attention(u, r, cpu)
    a0 = att[np.searchsorted(att_of, np.arange(int(att_of[-1]) + 1 if att_of.size else 0))]
    taken = np.zeros(n, dtype=bool)
    taken[att] = True
    s0, s1 = _swiglu(u, r, taken)
    taken[s0] = taken[s1] = True
    cj, crun = chains(u, r, cpu, ids, copies)
    free = ~taken[cj]
    cj, crun = cj[free], crun[free]
    mk = np.zeros(cj.size, dtype=bool) if cpu else u.op[cj] & r.norm_cls[u.name[cj]] & (u.kernels[cj] >= 2)
    first = np.full(int(crun.max()) + 1 if crun.size else 0, n, dtype=np.int64)
    np.minimum.at(first, crun, cj)
    rest, rest_run = cj[~mk], crun[~mk]
    size = np.bincount(rest_run, minlength=first.size)
    rest, rest_run = rest[size[rest_run] >= 2], rest_run[size[rest_run] >= 2]
    runs = distinct(rest_run)
    groups = [(att, att_of, a0, 0, np.zeros(a0.size, dtype=np.int64)),
              (np.stack([s0, s1], axis=1).ravel(), np.repeat(np.arange(s0.size), 2), s0, 1, np.zeros(s0.size, np.int64)),
              (cj[mk], np.arange(int(mk.sum())), first[crun[mk]], 2, cj[mk]),
              (rest, np.searchsorted(runs, rest_run), first[runs], 2, np.full(runs.size, n, dtype=np.int64))]
    pos, which, keys, patterns, base_id = [], [], [], [], 0
    for (p, w, at, phase, sub), pattern in zip(groups, (ATTENTION, SWIGLU, MULTI_KERNEL_NORM, None)):
        pos.append(p)
        which.append(w + base_id)
        keys.append(np.stack([u.inst[np.minimum(at, n - 1)], np.full(at.size, phase), at, sub]))
        patterns += [pattern] * at.size
        base_id += at.size
    key = np.concatenate(keys, axis=1)
    return np.concatenate(pos), np.concatenate(which), patterns, key


def find_matches(trace: Trace) -> list[Match]:
    """Every match in every scope instance, in instance (start time) order: attention windows first,
    then SwiGLU pairs, then the chains of what is left (and multi-kernel norms on devices). A match's
    pattern and bytes are worked out once per distinct sequence of units (kinds, names, shapes)."""
    return _found(trace).matches()


def _found(trace: Trace) -> _Matches:
    """:func:`find_matches` as columns."""
    t = unit_table(trace)
    # the op names worth searching, from the table's names (a scope's name that is no op's name is only
    # ever asked of op units, so it changes nothing)
    return _search(t, trace.cpu_only, copy_only_ops(trace), matchable(t.names))


def matches_in(t: UnitTable, cpu: bool, copies: frozenset[int], wanted: set[str]) -> list[Match]:
    """:func:`find_matches` in a unit table: its instances with an op unit named in ``wanted``; ``copies``:
    the ops that are copies (:func:`copy_only_ops`)."""
    return _search(t, cpu, copies, wanted).matches()


@dataclass(frozen=True)
class _Matches:
    """Matches as columns, in order: each one's scope title (a code into ``titles``), :class:`Facts` (a code
    into ``facts``), device time, kernels, saving and confidence (a code into :data:`CONFIDENCE`), and the unit
    table rows it fuses (match m's at ``rows[starts[m]:starts[m + 1]]``)."""

    titles: list[str]
    title: np.ndarray
    facts: list[Facts]
    fact: np.ndarray
    device_ns: np.ndarray
    kernels: np.ndarray
    saving_ns: np.ndarray
    confidence: np.ndarray
    rows: np.ndarray
    starts: np.ndarray

    def matches(self) -> list[Match]:
        """The matches as :class:`Match` objects."""
        cols = zip(self.title.tolist(), self.starts[:-1].tolist(), self.starts[1:].tolist(), self.fact.tolist(),
                   self.device_ns.tolist(), self.kernels.tolist(), self.saving_ns.tolist(), self.confidence.tolist())
        return [Match(self.titles[ti], self.rows[a:b], self.facts[fi], d, k, s, CONFIDENCE[c])
                for ti, a, b, fi, d, k, s, c in cols]

    @staticmethod
    def of(ms: list[Match]) -> _Matches:
        """:class:`Match` objects as columns."""
        titles = list(dict.fromkeys(m.title for m in ms))
        at = {s: i for i, s in enumerate(titles)}
        facts: dict[int, tuple[int, Facts]] = {}
        for m in ms:
            facts.setdefault(id(m.facts), (len(facts), m.facts))

        def col(values: Iterable[Any], dtype: Any = np.int64) -> np.ndarray:
            return np.asarray(list(values), dtype=dtype)

        return _Matches(titles, col(at[m.title] for m in ms), [f for _, f in facts.values()],
                        col(facts[id(m.facts)][0] for m in ms), col(m.device_ns for m in ms), col(m.kernels for m in ms),
                        col((m.saving_ns for m in ms), np.float64), col(CONFIDENCE.index(m.confidence) for m in ms),
                        np.concatenate([m.rows for m in ms]) if ms else np.zeros(0, dtype=np.int64),
                        col([0, *np.cumsum([m.rows.size for m in ms]).tolist()]))


def _search(t: UnitTable, cpu: bool, copies: frozenset[int], wanted: set[str]) -> _Matches:
    """:func:`matches_in` as columns."""
    r = Reading(t)
    u = _searched(t, wanted)
    pos, which, patterns, key = _windows(u, r, cpu, t.unit_id[u.rows], copies)
    if not patterns:
        none = np.zeros(0, dtype=np.int64)
        return _Matches([], none, [], none, none, none, np.zeros(0), none, none, np.zeros(1, dtype=np.int64))
    rank = np.empty(len(patterns), dtype=np.int64)
    rank[np.lexsort(key[::-1])] = np.arange(len(patterns))
    order = np.lexsort((pos, rank[which]))
    pos, which = pos[order], rank[which[order]]
    starts = np.searchsorted(which, np.arange(len(patterns) + 1))
    first, last = starts[:-1], starts[1:] - 1
    by_rank = [patterns[i] for i in np.argsort(rank).tolist()]
    dev = t.unit_device_ns[u.rows][pos]
    dev_sum = np.add.reduceat(dev, first)
    kern = np.add.reduceat(np.maximum(u.kernels[pos], 1), first)
    facts, fact = _distinct_facts(u, r, pos, starts, by_rank)
    titles, title = _titles(t, u.inst[pos[first]])
    saving, conf = _savings(facts, fact, dev_sum, (kern, u.kernels[pos[first]]), dev_sum - dev[first] - dev[last], cpu)
    return _Matches(titles, title, facts, fact, dev_sum, kern, saving, conf, u.rows[pos], starts)


_PHASES = {ATTENTION: 0, SWIGLU: 1, MULTI_KERNEL_NORM: 2, None: 3}


def _distinct_facts(u: _Units, r: Reading, pos: np.ndarray, starts: np.ndarray,
                    patterns: list[str | None]) -> tuple[list[Facts], np.ndarray]:
    """The :class:`Facts` of each distinct (pattern, units' kinds, names and shapes) among the matches (match m's
    units at ``pos[starts[m]:starts[m + 1]]``, its pattern ``patterns[m]``, None for a chain), and each match's."""
    code = (u.name[pos] * len(r.table.shapes) + u.shape[pos]) * 2 + u.scope[pos]
    size = np.diff(starts)
    phase = np.asarray([_PHASES[p] for p in patterns], dtype=np.int64)
    facts: list[Facts] = []
    fact = np.zeros(size.size, dtype=np.int64)
    for n in distinct(size).tolist():   # the matches of n units side by side: one row each
        ms = np.flatnonzero(size == n)
        rows = np.column_stack([phase[ms], code[starts[ms][:, None] + np.arange(n)]])
        first, back = distinct_rows(rows)
        fact[ms] = len(facts) + back.ravel()
        for m in ms[first].tolist():
            at = pos[starts[m]:starts[m + 1]]
            facts.append(_facts(patterns[m], Chain(u.scope[at], u.name[at], u.shape[at], r)))
    return facts, fact


def _titles(t: UnitTable, inst: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The distinct titles of these instances (:func:`title_of`), and each one's (a code into them)."""
    held, back = np.unique(inst, return_inverse=True)
    pairs = [(t.kind[i], t.name[i]) for i in held.tolist()]
    distinct_pairs = list(dict.fromkeys(pairs))
    at_pair = {p: i for i, p in enumerate(distinct_pairs)}
    named = [title_of(k, n) for k, n in distinct_pairs]
    titles = list(dict.fromkeys(named))
    at_title = {s: i for i, s in enumerate(titles)}
    title = np.asarray([at_title[s] for s in named], dtype=np.int64)
    return titles, title[np.asarray([at_pair[p] for p in pairs], dtype=np.int64)][back.ravel()]


def _facts(pattern: str | None, c: Chain) -> Facts:
    """The pattern (a chain's by its units' names) and bytes of a match's units."""
    pattern = pattern or name_chain(c) or "pointwise chain"
    now, fused, inter = traffic(pattern, c)
    ops = list(map(c.r.table.names.__getitem__, c.name.tolist()))
    shapes = tuple(map(c.r.dims.__getitem__, c.shape[c.op].tolist()))
    return Facts(pattern, now, fused, inter, ops, shapes)


@timed("fusion candidates")
def fusion_candidates(trace: Trace, matches: list[Match] | None = None) -> list[Candidate]:
    """Matches (those :func:`find_matches` finds, unless given) grouped by (pattern, scope, input shapes),
    largest predicted saving first.

    A group's saving is the sum of its instances' savings, each at most the device time of the
    units it fuses, so no prediction exceeds the time it comes from; a group that would save
    nothing (the fused form moves no fewer bytes and launches no fewer kernels) is dropped.
    """
    x = _found(trace) if matches is None else _Matches.of(matches)
    if not x.fact.size:
        return []
    saving = np.minimum(np.maximum(x.saving_ns, 0.0), x.device_ns.astype(np.float64))
    kinds: dict[tuple[str, tuple[tuple[tuple[int, ...], ...], ...]], int] = {}
    kind = np.asarray([kinds.setdefault((f.pattern, f.shapes), len(kinds)) for f in x.facts], dtype=np.int64)
    _, first, group = np.unique(kind[x.fact] * len(x.titles) + x.title, return_index=True, return_inverse=True)
    group = group.ravel()
    n = first.size
    saved = np.bincount(group, weights=saving, minlength=n)   # added in match order, as a running sum
    per_fact = np.asarray([(f.bytes_now, f.bytes_fused, sum(b for _, b in f.intermediates)) for f in x.facts],
                          dtype=np.int64).reshape(-1, 3)[x.fact]
    sums = np.zeros((n, 6), dtype=np.int64)    # instances, kernels, device ns, bytes now, bytes fused, intermediates
    np.add.at(sums, group, np.column_stack([np.ones(group.size, dtype=np.int64), x.kernels, x.device_ns, per_fact]))
    out = []
    for g in np.argsort(first, kind="stable").tolist():   # groups in order of their first match
        if saved[g] <= 0:
            continue
        m = int(first[g])
        f = x.facts[int(x.fact[m])]
        count, kernels, device_ns, now, fused, inter_bytes = (int(v) for v in sums[g])
        inter: dict[str, int] = {}
        for name, b in f.intermediates:
            inter[name] = inter.get(name, 0) + b
        out.append(Candidate(
            pattern=f.pattern, scope=x.titles[int(x.title[m])], instances=count,
            kernels_per_instance=round(kernels / count, 2), device_us=figures.us(device_ns / 1000),
            bytes_now=now, bytes_fused=fused, predicted_saving_us=figures.us(float(saved[g]) / 1000),
            recommendation=RECOMMEND[f.pattern], confidence=CONFIDENCE[int(x.confidence[m])], ops=list(f.ops),
            intermediate_bytes=inter_bytes, intermediates=[{"op": k, "bytes_per_instance": v} for k, v in inter.items()],
            shape=json.dumps([list(d) for d in f.shapes[0]]) if f.shapes else "",
            saving_model=saving_model(f.pattern, f.bytes_now)))   # the first match's, as its confidence
    out.sort(key=lambda c: -c.predicted_saving_us)
    return out
