"""Two runs compared (``profuse diff``, the explorer's Compare view): schema ``profuse.diff/2``.

Version 2 added the devices of each side, op pairs matched by (name, shapes, module instance) with
their ratio, what exists on one side only, each side's peaks and rooflines, and noise verdicts; then (no
field removed or changed) ``op_groups``: the ops grouped by (name, shapes) over module instances, each
with its instances as a drill-down, ops a backend names its own way matched by class.
"""
from __future__ import annotations

from msgspec import UNSET, Struct, UnsetType

from ..analysis import figures
from ..analysis.compare.diff import Diff, DiffRow, OpGroup, OpPair, RooflinePair, Side
from ..analysis.compare.memory_diff import MemoryDiff
from ..analysis.compare.significance import TEST, Verdict
from .diagnosis import BudgetDiff

DIFF_SCHEMA = "profuse.diff/2"


class AB(Struct):
    """One figure for each side."""

    a: float
    b: float


class DeviceNames(Struct):
    """The device name each trace records (null where it records none)."""

    a: str | None
    b: str | None


class OneSide(Struct):
    """What one run has and the other does not: ``ops`` counts (name, shapes, module instance) rows,
    ``op_groups`` the (name, shapes) groups matched neither by name nor by class."""

    ops: int
    op_groups: int
    compiled_regions: list[str]
    fused_kernels: list[str]
    graph_replay_kernels: int


class DiffPayload(Struct, kw_only=True):
    """What changed from run A to run B, each list largest first."""

    schema: str = DIFF_SCHEMA
    a: str
    b: str
    devices: DeviceNames
    same_device: bool
    sides: dict[str, Side]
    a_device_us: float
    b_device_us: float
    speedup: float
    matched_device_pct: AB
    only_in: dict[str, OneSide]
    op_groups: list[OpGroup]       # by (name, shapes) over module instances: what the console and Compare show
    ops: list[OpPair]              # by (name, shapes, module instance)
    modules: list[DiffRow]
    kernels_removed: list[DiffRow]
    kernels_added: list[DiffRow]
    kernels: list[DiffRow]
    roofline: list[RooflinePair]
    test: str
    verdicts: list[Verdict]
    memory: MemoryDiff | UnsetType = UNSET  # when either run recorded memory (analysis.compare.memory_diff)
    budget: BudgetDiff | None = None   # the two diagnoses' budgets, leaf by leaf
    totals_note: str = ""   # where the runs recorded unequal numbers of steps (Diff.totals_note): every headline says it


def _only(d: Diff, side: str) -> OneSide:
    me, other = (d.a, d.b) if side == "a" else (d.b, d.a)
    ops = sum(1 for o in d.ops if (o.a_calls if side == "a" else o.b_calls) and not o.matched)
    groups = sum(1 for g in d.groups if (g.a_calls if side == "a" else g.b_calls) and not g.matched_by)
    return OneSide(ops=ops, op_groups=groups,
                   compiled_regions=sorted(set(me.compiled_regions) - set(other.compiled_regions)),
                   fused_kernels=sorted(set(me.fused_kernels) - set(other.fused_kernels)),
                   graph_replay_kernels=me.graph_replay_kernels if not other.graph_replay_kernels else 0)


def diff_payload(d: Diff) -> DiffPayload:
    """The diff as sent: the analysis records themselves (their figures rounded when made)."""
    return DiffPayload(a=d.a_label, b=d.b_label, devices=DeviceNames(d.a.device, d.b.device), same_device=d.same_device,
                       sides={"a": d.a, "b": d.b}, a_device_us=d.a.device_us, b_device_us=d.b.device_us,
                       speedup=round(d.speedup, 3),
                       matched_device_pct=AB(figures.pct(d.matched_device_pct("a")), figures.pct(d.matched_device_pct("b"))),
                       only_in={"a": _only(d, "a"), "b": _only(d, "b")}, op_groups=d.groups, ops=d.ops,
                       modules=d.modules,
                       kernels_removed=d.kernels_removed, kernels_added=d.kernels_added, kernels=d.kernels,
                       roofline=d.roofline, test=TEST, verdicts=d.verdicts, totals_note=d.totals_note)
