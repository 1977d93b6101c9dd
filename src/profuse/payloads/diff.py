"""Two runs compared (``profuse diff``, the explorer's Compare view): schema ``profuse.diff/2``.

Version 2 added the devices of each side, op pairs matched by (name, shapes, module instance) with
their ratio, what exists on one side only, each side's peaks and rooflines, and noise verdicts.
"""
from __future__ import annotations

from msgspec import UNSET, Struct, UnsetType

from ..analysis.advice.roofline import Peaks
from ..analysis.compare.diff import Diff, DiffRow, OpPair, Side
from ..analysis.compare.memory_diff import MemoryDiff
from ..analysis.compare.significance import TEST, Verdict
from .diagnosis import BudgetDiff

DIFF_SCHEMA = "profuse.diff/2"


class DiffEntry(Struct):
    """One module or kernel name in both runs; ``delta_us = b_us - a_us``, ``ratio = b_us / a_us``."""

    name: str
    a_calls: int
    b_calls: int
    a_us: float
    b_us: float
    delta_us: float
    ratio: float | None


class OpEntry(Struct):
    """One op in both runs, matched by name, recorded input shapes and nn.Module instance;
    ``matched`` is false when only one side has it (its calls on the other side are 0)."""

    name: str
    shape: str
    module: str
    a_calls: int
    b_calls: int
    a_us: float
    b_us: float
    delta_us: float
    ratio: float | None
    matched: bool


class AB(Struct):
    """One figure for each side."""

    a: float
    b: float


class DeviceNames(Struct):
    """The device name each trace records (null where it records none)."""

    a: str | None
    b: str | None


class SideEntry(Struct):
    """One run: its device, peaks, steps, and what torch.compile and CUDA graphs did in it."""

    kind: str
    device: str | None
    peaks: Peaks | None   # the analysis record, as the report's JSON sends it
    device_us: float
    steps: int
    step_median_us: float
    compiled_regions: list[str]
    graph_replay_kernels: int
    graph_replay_us: float
    fused_kernels: list[str]


class OneSide(Struct):
    """What one run has and the other does not."""

    ops: int
    compiled_regions: list[str]
    fused_kernels: list[str]
    graph_replay_kernels: int


class RooflineEntry(Struct):
    """An op name both runs have: time and % of roofline on each side's own peaks (null: unknown)."""

    name: str
    a_us: float
    b_us: float
    a_pct: float | None
    b_pct: float | None


class VerdictEntry(Struct):
    """One metric: per-step medians, ratio b/a, the test's p-value and verdict, and the gate."""

    metric: str
    a_steps: int
    b_steps: int
    a_median_us: float
    b_median_us: float
    ratio: float | None
    p_value: float | None
    verdict: str
    threshold_pct: float | None
    p_beyond_threshold: float | None
    fails: bool


class DiffPayload(Struct, kw_only=True):
    """What changed from run A to run B, each list largest first."""

    schema: str = DIFF_SCHEMA
    a: str
    b: str
    devices: DeviceNames
    same_device: bool
    sides: dict[str, SideEntry]
    a_device_us: float
    b_device_us: float
    speedup: float
    matched_device_pct: AB
    only_in: dict[str, OneSide]
    ops: list[OpEntry]
    modules: list[DiffEntry]
    kernels_removed: list[DiffEntry]
    kernels_added: list[DiffEntry]
    kernels: list[DiffEntry]
    roofline: list[RooflineEntry]
    test: str
    verdicts: list[VerdictEntry]
    memory: MemoryDiff | UnsetType = UNSET  # when either run recorded memory (analysis.compare.memory_diff)
    budget: BudgetDiff | None = None   # the two diagnoses' budgets, leaf by leaf


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def _entries(rows: list[DiffRow]) -> list[DiffEntry]:
    return [DiffEntry(name=r.name, a_calls=r.a_calls, b_calls=r.b_calls, a_us=round(r.a_us, 3),
                      b_us=round(r.b_us, 3), delta_us=round(r.delta_us, 3), ratio=_r(r.ratio, 4)) for r in rows]


def _ops(rows: list[OpPair]) -> list[OpEntry]:
    return [OpEntry(name=r.name, shape=r.shape, module=r.module, a_calls=r.a_calls, b_calls=r.b_calls,
                    a_us=round(r.a_us, 3), b_us=round(r.b_us, 3), delta_us=round(r.delta_us, 3),
                    ratio=_r(r.ratio, 4), matched=r.matched) for r in rows]


def _side(s: Side) -> SideEntry:
    return SideEntry(kind=s.kind, device=s.device, peaks=s.peaks, device_us=round(s.device_us, 3),
                     steps=s.steps, step_median_us=round(s.step_median_us, 3), compiled_regions=s.compiled_regions,
                     graph_replay_kernels=s.graph_replay_kernels, graph_replay_us=round(s.graph_replay_us, 3),
                     fused_kernels=s.fused_kernels)


def _only(d: Diff, side: str) -> OneSide:
    me, other = (d.a, d.b) if side == "a" else (d.b, d.a)
    ops = sum(1 for o in d.ops if (o.a_calls if side == "a" else o.b_calls) and not o.matched)
    return OneSide(ops=ops, compiled_regions=sorted(set(me.compiled_regions) - set(other.compiled_regions)),
                   fused_kernels=sorted(set(me.fused_kernels) - set(other.fused_kernels)),
                   graph_replay_kernels=me.graph_replay_kernels if not other.graph_replay_kernels else 0)


def verdict_entry(v: Verdict) -> VerdictEntry:
    """One verdict, times rounded to ns."""
    return VerdictEntry(metric=v.metric, a_steps=v.a_n, b_steps=v.b_n, a_median_us=round(v.a_median_us, 3),
                        b_median_us=round(v.b_median_us, 3), ratio=_r(v.ratio, 4), p_value=_r(v.p_value, 6),
                        verdict=v.verdict, threshold_pct=v.threshold_pct, p_beyond_threshold=_r(v.p_beyond_threshold, 6),
                        fails=v.fails)


def diff_payload(d: Diff) -> DiffPayload:
    """The diff with times rounded to ns."""
    return DiffPayload(a=d.a_label, b=d.b_label, devices=DeviceNames(d.a.device, d.b.device), same_device=d.same_device,
                       sides={"a": _side(d.a), "b": _side(d.b)}, a_device_us=round(d.a.device_us, 3),
                       b_device_us=round(d.b.device_us, 3), speedup=round(d.speedup, 3),
                       matched_device_pct=AB(round(d.matched_device_pct("a"), 2), round(d.matched_device_pct("b"), 2)),
                       only_in={"a": _only(d, "a"), "b": _only(d, "b")}, ops=_ops(d.ops),
                       modules=_entries(d.modules), kernels_removed=_entries(d.kernels_removed),
                       kernels_added=_entries(d.kernels_added), kernels=_entries(d.kernels),
                       roofline=[RooflineEntry(r.name, r.a_us, r.b_us, r.a_pct, r.b_pct) for r in d.roofline],
                       test=TEST, verdicts=[verdict_entry(v) for v in d.verdicts])
