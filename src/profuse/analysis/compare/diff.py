"""Diff two runs, across devices too: ops grouped by (name, input shapes) over the nn.Module instances
they ran in (each group's instances a drill-down; the instances themselves matched by (name, shapes,
module instance) too), since kernels differ by vendor and ops do not; what one run alone has of an op
class a backend names its own way (attention variants, GEMM ops) matched by its class; modules by class;
kernels by name when both runs ran on the same device. Each side's device, peaks, roofline % of the ops
both have, what exists on one side only (compiled regions, graph replays, fused kernels), and per-metric
noise verdicts."""
from __future__ import annotations

import functools
import json
import re
import statistics
from dataclasses import dataclass, field

from ...trace import Trace
from ...trace.schema import DEVICE_TIME_SQL
from .. import figures
from ..advice.roofline import ALL_ROWS, Peaks, device_peaks, roofline
from ..compiled import compiled_regions
from ..opclass import op_class
from ..optable import op_table, total_device_us
from .significance import Verdict, compare
from .step_samples import samples, step_count


@dataclass(frozen=True)
class DiffRow:
    """One module or kernel name in two runs: calls and time in each; ``delta_us = b_us - a_us``,
    ``ratio = b_us / a_us`` (None when A has none). Made by :func:`diff_row`, figures rounded there."""

    name: str
    a_calls: int
    b_calls: int
    a_us: float
    b_us: float
    delta_us: float
    ratio: float | None


def diff_row(name: str, a_calls: int, b_calls: int, a_us: float, b_us: float) -> DiffRow:
    """The row of one name, its figures rounded (analysis/figures.py)."""
    return DiffRow(name, a_calls, b_calls, figures.us(a_us), figures.us(b_us), figures.us(b_us - a_us),
                   figures.ratio(b_us / a_us if a_us else None))


@dataclass(frozen=True)
class OpPair(DiffRow):
    """One op instance kind in two runs, matched by op name, recorded input shapes and the nn.Module
    instance it ran in (``BertLayer_2``; "" outside any module); ``matched`` is false when only one
    side has it (its calls on the other side are 0)."""

    shape: str
    module: str
    matched: bool


def op_pair(key: tuple[str, str, str], a_calls: int, b_calls: int, a_us: float, b_us: float) -> OpPair:
    """The pair of one (name, shape, module) key, its figures rounded."""
    row = diff_row(key[0], a_calls, b_calls, a_us, b_us)
    return OpPair(row.name, a_calls, b_calls, row.a_us, row.b_us, row.delta_us, row.ratio, key[1], key[2],
                  a_calls > 0 and b_calls > 0)


@dataclass(frozen=True)
class OpInstance:
    """One nn.Module instance of an op group (``Linear_4``; "" outside any module): calls and time in each
    run, rounded as :func:`diff_row` rounds them."""

    module: str
    a_calls: int
    b_calls: int
    a_us: float
    b_us: float
    delta_us: float
    ratio: float | None


@dataclass(frozen=True)
class OpGroup(DiffRow):
    """One op with one set of recorded input shapes, over every module instance it ran in: ``instances``
    counts them, ``by_module`` gives each (the drill-down). ``matched_by`` is "name" when both runs ran it
    (in whichever modules), "class" when each run ran its own variant of an op class a backend names its
    own way (:data:`BACKEND_CLASSES`: flash against efficient attention): ``name``/``shape`` are A's op,
    ``b_name``/``b_shape`` B's; "" when one run alone has it."""

    shape: str
    b_name: str
    b_shape: str
    op_class: str
    matched_by: str
    instances: int
    by_module: list[OpInstance]


@dataclass(frozen=True)
class RooflinePair:
    """One op name both runs have: its time and % of its roofline on each side's own peaks (null:
    unknown), as the roofline rows give them."""

    name: str
    a_us: float
    b_us: float
    a_pct: float | None
    b_pct: float | None


@dataclass(frozen=True)
class Side:
    """What one run is: its device, peaks, step times and what torch.compile / CUDA graphs did."""

    kind: str                      # CUDA, ROCm, MTIA, CPU, ...
    device: str | None             # the device name the trace records (None: not recorded)
    peaks: Peaks | None
    device_us: float
    steps: int
    step_median_us: float
    compiled_regions: list[str]
    graph_replay_kernels: int      # device events replayed by a graph launch
    graph_replay_us: float
    fused_kernels: list[str]       # generated kernels (triton_*, cpp_fused*, *fused*), by name


@dataclass
class Diff:
    """Two runs compared: each side, per-op pairs, modules, kernels, rooflines and verdicts."""

    a: Side
    b: Side
    same_device: bool
    a_label: str                   # run A's path
    b_label: str
    ops: list[OpPair] = field(default_factory=list)
    groups: list[OpGroup] = field(default_factory=list)
    modules: list[DiffRow] = field(default_factory=list)
    kernels: list[DiffRow] = field(default_factory=list)
    roofline: list[RooflinePair] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        """A's device time over B's (0 when B has none): above 1, B is faster."""
        return self.a.device_us / self.b.device_us if self.b.device_us else 0.0

    @property
    def totals_note(self) -> str:
        """Where the runs recorded different numbers of steps, that the device totals (``speedup``) cover
        unequal work and the step verdicts compare per step; else ""."""
        a, b = self.a.steps, self.b.steps
        return f"totals over {a} and {b} steps: the verdicts compare per step" if a and b and a != b else ""

    @property
    def kernels_removed(self) -> list[DiffRow]:
        """Kernels run A launched and run B did not."""
        return [k for k in self.kernels if k.b_calls == 0]

    @property
    def kernels_added(self) -> list[DiffRow]:
        """Kernels run B launched and run A did not."""
        return [k for k in self.kernels if k.a_calls == 0]

    def matched_device_pct(self, side: str) -> float:
        """Share of a side's device time spent in op groups both runs have (by name and shapes, or by class),
        in percent."""
        s = self.a if side == "a" else self.b
        t = sum((g.a_us if side == "a" else g.b_us) for g in self.groups if g.matched_by)
        return 100.0 * t / s.device_us if s.device_us else 0.0


_STEP = re.compile(r"^(ProfilerStep)#\d+$")
_FUSED = ("triton_", "cpp_fused")


def _totals(t: Trace, group: str, attr: str) -> dict[str, tuple[int, float]]:
    """calls and time per name, with every ProfilerStep#N counted as one name."""
    out: dict[str, tuple[int, float]] = {}
    for r in op_table(t, group_by=group).rows:
        name = _STEP.sub(r"\1#*", r.name)
        c, us = out.get(name, (0, 0.0))
        out[name] = (c + r.calls, us + getattr(r, attr))
    return out


def _rows(a: Trace, b: Trace, group: str, attr: str) -> list[DiffRow]:
    ta, tb = _totals(a, group, attr), _totals(b, group, attr)
    out = []
    for name in ta.keys() | tb.keys():
        (ca, ua), (cb, ub) = ta.get(name, (0, 0.0)), tb.get(name, (0, 0.0))
        out.append(diff_row(name, ca, cb, ua, ub))
    out.sort(key=lambda r: (-abs(r.delta_us), r.name))  # ties by name: the same order every run
    return out


_LABEL = re.compile(r"^nn\.Module: ")


_Keys = dict[tuple[str, str, str], tuple[int, float, int]]


def _op_keys(t: Trace) -> _Keys:
    """(op name, input shapes, module instance) -> (calls, self device µs, first start) of every op and
    annotation (the CPU's self time on a CPU-only trace), ProfilerStep#N counted as one name. Runtime calls
    are left out: their names are the vendor's (cudaLaunchKernel, hipLaunchKernel), so never match."""
    own = "self_cpu" if t.cpu_only else "self_device"
    rows = t.con.execute(f"""
        SELECT regexp_replace(e.name, '^ProfilerStep#[0-9]+$', 'ProfilerStep#*'), coalesce(s.input_dims, ''),
               coalesce(m.label, ''), count(*), sum(e.{own}), min(e.ts)
        FROM events e LEFT JOIN shapes s USING (id) LEFT JOIN scopes m ON m.id = e.module
        WHERE e.kind IN ('cpu_op', 'annotation') AND e.depth IS NOT NULL
        GROUP BY 1, 2, 3""").fetchall()
    return {(n, sh, _LABEL.sub("", mod)): (int(c), (ns or 0) / 1e3, int(first or 0))
            for n, sh, mod, c, ns, first in rows}


def _op_pairs(ka: _Keys, kb: _Keys) -> list[OpPair]:
    out = []
    for key in ka.keys() | kb.keys():
        (ca, ua, _), (cb, ub, _) = ka.get(key, (0, 0.0, 0)), kb.get(key, (0, 0.0, 0))
        out.append(op_pair(key, ca, cb, ua, ub))
    out.sort(key=lambda r: (-max(r.a_us, r.b_us), r.name, r.shape, r.module))
    return out


# op classes (opclass.op_class) a backend names its own way: flash, efficient, cuDNN or math attention;
# a GEMM op of its own. What one run alone has of these is matched by class.
BACKEND_CLASSES = ("attention", "matmul")


@dataclass
class _Group:
    """One op group being summed: A's op and shapes, B's (the same unless matched by class), the first
    start of each side's calls, and per module instance [A calls, B calls, A µs, B µs]."""

    name: str
    shape: str
    b_name: str
    b_shape: str
    first: list[int | None] = field(default_factory=lambda: [None, None])
    mods: dict[str, list[float]] = field(default_factory=dict)

    def add(self, side: int, module: str, calls: int, us: float, first: int) -> None:
        m = self.mods.setdefault(module, [0, 0, 0.0, 0.0])
        m[side] += calls
        m[2 + side] += us
        was = self.first[side]
        self.first[side] = first if was is None else min(was, first)

    def one_side(self) -> int | None:
        """0: run A alone has it, 1: run B alone, None: both."""
        a, b = (any(m[i] for m in self.mods.values()) for i in (0, 1))
        return None if a and b else (0 if a else 1)


def _lead_dims(shape: str) -> str:
    """The recorded dims of an op's first input ("" when none): attention's queries, a GEMM's first operand."""
    try:
        dims = json.loads(shape) if shape else None
    except ValueError:
        return ""
    return json.dumps(dims[0]) if isinstance(dims, list) and dims else ""


def _start_order(side: int, g: _Group) -> tuple[int, str, str]:
    """Where a group's first call starts on ``side`` (then its name and shapes: one order every run)."""
    return g.first[side] or 0, g.name, g.shape


def _by_class(groups: list[_Group]) -> list[_Group]:
    """``groups`` with what one run alone has of a :data:`BACKEND_CLASSES` op paired with what the other
    run alone has of the same class, in the same module instances, on a first input of the same (recorded)
    dims, the n-th to start in A with the n-th in B (an outer op before the op it calls); ops of one name
    never pair, nor ops with no shapes recorded."""
    out: list[_Group] = []
    buckets: dict[tuple[str, tuple[str, ...], str], tuple[list[_Group], list[_Group]]] = {}
    for g in groups:
        side, cls, lead = g.one_side(), op_class(g.name), _lead_dims(g.shape)
        if side is None or cls not in BACKEND_CLASSES or not lead:   # no shapes: nothing says it is the same work
            out.append(g)
            continue
        buckets.setdefault((cls, tuple(sorted(g.mods)), lead), ([], []))[side].append(g)
    for sides in buckets.values():
        a, b = (sorted(s, key=functools.partial(_start_order, i)) for i, s in enumerate(sides))
        for i in range(max(len(a), len(b))):
            ga, gb = a[i] if i < len(a) else None, b[i] if i < len(b) else None
            if ga is None or gb is None or ga.name == gb.name:
                out += [g for g in (ga, gb) if g is not None]
                continue
            pair = _Group(ga.name, ga.shape, gb.name, gb.shape, [ga.first[0], gb.first[1]])
            for mod in ga.mods.keys() | gb.mods.keys():
                pair.mods[mod] = [x + y for x, y in zip(ga.mods.get(mod, [0, 0, 0.0, 0.0]),
                                                         gb.mods.get(mod, [0, 0, 0.0, 0.0]), strict=True)]
            out.append(pair)
    return out


def _group(g: _Group) -> OpGroup:
    """The record of one summed group, its figures rounded; its instances largest change first."""
    ca, cb, ua, ub = (sum(m[i] for m in g.mods.values()) for i in range(4))
    row = diff_row(g.name, int(ca), int(cb), ua, ub)
    inst = [OpInstance(mod, int(m[0]), int(m[1]), r.a_us, r.b_us, r.delta_us, r.ratio)
            for mod, m in g.mods.items() for r in (diff_row(mod, int(m[0]), int(m[1]), m[2], m[3]),)]
    inst.sort(key=lambda r: (-abs(r.delta_us), -max(r.a_us, r.b_us), r.module))
    matched = "" if g.one_side() is not None else "name" if (g.name, g.shape) == (g.b_name, g.b_shape) else "class"
    return OpGroup(row.name, row.a_calls, row.b_calls, row.a_us, row.b_us, row.delta_us, row.ratio, g.shape,
                   g.b_name, g.b_shape, op_class(g.name), matched, len(inst), inst)


def op_groups(ka: _Keys, kb: _Keys) -> list[OpGroup]:
    """Each run's (name, shapes, module) figures grouped by (name, shapes) over module instances, matched
    by name and shapes, then by class (:func:`_by_class`); largest change first (ties: the larger time)."""
    groups: dict[tuple[str, str], _Group] = {}
    for side, keys in ((0, ka), (1, kb)):
        for (name, shape, mod), (calls, us, first) in keys.items():
            groups.setdefault((name, shape), _Group(name, shape, name, shape)).add(side, mod, calls, us, first)
    out = [_group(g) for g in _by_class(list(groups.values()))]
    out.sort(key=lambda r: (-abs(r.delta_us), -max(r.a_us, r.b_us), r.name, r.shape, r.b_name, r.b_shape))
    return out


def _peaks(t: Trace) -> Peaks | None:
    return device_peaks(t, t.bundle.peaks if t.bundle is not None else None)


def _side(t: Trace) -> Side:
    steps = samples(t, "step")
    n_steps = step_count(t)
    replay_n, replay_ns = t.con.execute(
        f"SELECT count(*), coalesce(sum(dur), 0) FROM events WHERE kind IN ({DEVICE_TIME_SQL}) AND link = 'graph'"
    ).fetchall()[0]
    if t.cpu_only:
        fused = [r[0] for r in t.con.execute("SELECT DISTINCT name FROM events WHERE kind = 'cpu_op' AND ("
                                             "name LIKE 'triton_%' OR name LIKE 'cpp_fused%') ORDER BY 1").fetchall()]
    else:
        fused = [r[0] for r in t.con.execute(f"""SELECT DISTINCT name FROM events WHERE kind IN ({DEVICE_TIME_SQL})
                 AND (name LIKE 'triton_%' OR name LIKE 'cpp_fused%' OR name ILIKE '%fused%') ORDER BY 1""").fetchall()]
    name = t.meta.get("device_name")
    return Side(kind=t.device_kind, device=str(name) if name else None, peaks=_peaks(t),
                device_us=figures.us(total_device_us(t)), steps=n_steps,
                step_median_us=figures.us(statistics.median(steps)),
                compiled_regions=[r.name for r in compiled_regions(t).regions], graph_replay_kernels=int(replay_n),
                graph_replay_us=figures.us(replay_ns / 1e3), fused_kernels=fused)


def same_device(a: Side, b: Side) -> bool:
    """The same device when both traces name it and the names agree; when either name is missing,
    the same kind of device (CUDA, ROCm, ...) is all that can be told."""
    if a.device and b.device:
        return a.device == b.device
    return a.kind == b.kind


def _roofline_pairs(a: Trace, b: Trace, pa: Peaks | None, pb: Peaks | None) -> list[RooflinePair]:
    ra = {r.name: r for r in roofline(a, pa, top=ALL_ROWS)}
    rb = {r.name: r for r in roofline(b, pb, top=ALL_ROWS)}
    out = [RooflinePair(n, ra[n].time_us, rb[n].time_us, ra[n].pct_of_roofline, rb[n].pct_of_roofline)
           for n in ra.keys() & rb.keys()]
    out.sort(key=lambda r: (-max(r.a_us, r.b_us), r.name))
    return out


METRICS = ("step", "device_busy")


def diff(a: Trace, b: Trace, *, metrics: tuple[str, ...] = METRICS, gate_metric: str | None = None,
         threshold_pct: float | None = None) -> Diff:
    """Compare two loaded traces: sides, op pairs, modules, kernels (same device only), rooflines,
    and a noise verdict per metric (the gate's metric tested against ``threshold_pct`` too)."""
    sa, sb = _side(a), _side(b)
    same = same_device(sa, sb)
    d = Diff(a=sa, b=sb, same_device=same, a_label=str(a.path), b_label=str(b.path))
    ka, kb = _op_keys(a), _op_keys(b)
    d.ops = _op_pairs(ka, kb)
    d.groups = op_groups(ka, kb)
    d.modules = _rows(a, b, "module", "device_total_us")
    if same and not a.cpu_only and not b.cpu_only:
        d.kernels = _rows(a, b, "kernel", "self_device_us")
    d.roofline = _roofline_pairs(a, b, sa.peaks, sb.peaks)
    names = list(dict.fromkeys((*metrics, *((gate_metric,) if gate_metric else ()))))
    d.verdicts = [compare(m, samples(a, m), samples(b, m),
                          threshold_pct=threshold_pct if m == gate_metric else None) for m in names]
    return d

