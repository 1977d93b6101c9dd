"""Diff two runs, across devices too: ops matched by (name, input shapes, module instance), since
kernels differ by vendor and ops do not; modules by class; kernels by name when both runs ran on
the same device. Each side's device, peaks, roofline % of the ops both have, what exists on one
side only (compiled regions, graph replays, fused kernels), and per-metric noise verdicts."""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from ...trace import Trace
from ...trace.schema import DEVICE_TIME_SQL
from .. import figures
from ..advice.roofline import ALL_ROWS, Peaks, device_peaks, roofline
from ..compiled import compiled_regions
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
    modules: list[DiffRow] = field(default_factory=list)
    kernels: list[DiffRow] = field(default_factory=list)
    roofline: list[RooflinePair] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        """A's device time over B's (0 when B has none): above 1, B is faster."""
        return self.a.device_us / self.b.device_us if self.b.device_us else 0.0

    @property
    def kernels_removed(self) -> list[DiffRow]:
        """Kernels run A launched and run B did not."""
        return [k for k in self.kernels if k.b_calls == 0]

    @property
    def kernels_added(self) -> list[DiffRow]:
        """Kernels run B launched and run A did not."""
        return [k for k in self.kernels if k.a_calls == 0]

    def matched_device_pct(self, side: str) -> float:
        """Share of a side's device time spent in ops both runs have, in percent."""
        s = self.a if side == "a" else self.b
        t = sum((o.a_us if side == "a" else o.b_us) for o in self.ops if o.matched)
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


def _op_keys(t: Trace) -> dict[tuple[str, str, str], tuple[int, float]]:
    """(op name, input shapes, module instance) -> (calls, self device µs) of every op and annotation
    (the CPU's self time on a CPU-only trace), ProfilerStep#N counted as one name. Runtime calls are
    left out: their names are the vendor's (cudaLaunchKernel, hipLaunchKernel), so never match."""
    own = "self_cpu" if t.cpu_only else "self_device"
    rows = t.con.execute(f"""
        SELECT regexp_replace(e.name, '^ProfilerStep#[0-9]+$', 'ProfilerStep#*'), coalesce(s.input_dims, ''),
               coalesce(m.label, ''), count(*), sum(e.{own})
        FROM events e LEFT JOIN shapes s USING (id) LEFT JOIN scopes m ON m.id = e.module
        WHERE e.kind IN ('cpu_op', 'annotation') AND e.depth IS NOT NULL
        GROUP BY 1, 2, 3""").fetchall()
    return {(n, sh, _LABEL.sub("", mod)): (int(c), (ns or 0) / 1e3) for n, sh, mod, c, ns in rows}


def _op_pairs(a: Trace, b: Trace) -> list[OpPair]:
    ka, kb = _op_keys(a), _op_keys(b)
    out = []
    for key in ka.keys() | kb.keys():
        (ca, ua), (cb, ub) = ka.get(key, (0, 0.0)), kb.get(key, (0, 0.0))
        out.append(op_pair(key, ca, cb, ua, ub))
    out.sort(key=lambda r: (-max(r.a_us, r.b_us), r.name, r.shape, r.module))
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
    d.ops = _op_pairs(a, b)
    d.modules = _rows(a, b, "module", "device_total_us")
    if same and not a.cpu_only and not b.cpu_only:
        d.kernels = _rows(a, b, "kernel", "self_device_us")
    d.roofline = _roofline_pairs(a, b, sa.peaks, sb.peaks)
    names = list(dict.fromkeys((*metrics, *((gate_metric,) if gate_metric else ()))))
    d.verdicts = [compare(m, samples(a, m), samples(b, m),
                          threshold_pct=threshold_pct if m == gate_metric else None) for m in names]
    return d

