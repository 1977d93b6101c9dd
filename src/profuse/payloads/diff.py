"""Two runs compared (``profuse diff``, the explorer's Compare view): schema ``profuse.diff/1``."""
from __future__ import annotations

from msgspec import Struct

from ..analysis.diff import Diff, DiffRow
from .diagnosis import BudgetDiff

DIFF_SCHEMA = "profuse.diff/1"


class DiffEntry(Struct):
    """One op, module or kernel name in both runs; ``delta_us = b_us - a_us``."""

    name: str
    a_calls: int
    b_calls: int
    a_us: float
    b_us: float
    delta_us: float


class DiffPayload(Struct, kw_only=True):
    """What changed from run A to run B, each list largest change first."""

    schema: str = DIFF_SCHEMA
    a: str
    b: str
    a_device_us: float
    b_device_us: float
    speedup: float
    same_device: bool
    ops: list[DiffEntry]
    modules: list[DiffEntry]
    kernels_removed: list[DiffEntry]
    kernels_added: list[DiffEntry]
    kernels: list[DiffEntry]
    budget: BudgetDiff | None = None   # the two diagnoses' budgets, leaf by leaf


def _entries(rows: list[DiffRow]) -> list[DiffEntry]:
    return [DiffEntry(name=r.name, a_calls=r.a_calls, b_calls=r.b_calls, a_us=round(r.a_us, 3),
                      b_us=round(r.b_us, 3), delta_us=round(r.delta_us, 3)) for r in rows]


def diff_payload(d: Diff) -> DiffPayload:
    """The diff with times rounded to ns."""
    return DiffPayload(a=d.a_label, b=d.b_label, a_device_us=round(d.a_device_us, 3),
                       b_device_us=round(d.b_device_us, 3), speedup=round(d.speedup, 3), same_device=d.same_device,
                       ops=_entries(d.ops), modules=_entries(d.modules), kernels_removed=_entries(d.kernels_removed),
                       kernels_added=_entries(d.kernels_added), kernels=_entries(d.kernels))
