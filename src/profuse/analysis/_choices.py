"""The op table's grouping and sort choices, apart from the analysis code so `--help` stays light."""
from __future__ import annotations

from ..errors import UserError

GROUPS = ("op", "shape", "module", "kernel")
SORT_KEYS = ("self_device", "device_total", "self_cpu", "cpu_total", "calls", "kernels", "name")

# The columns (by sort key) a grouping's rows have no figure for, and why: their records hold None (JSON null,
# shown "-") and ``--sort`` by them is refused. A module class's time is its instances' wall time, which holds
# its child modules' and its ops' time: no self time in the op table's sense (an op's time less its op-table
# children's). A kernel runs on the device: no CPU time (on a CPU-only trace the kernel rows are the ops, whose
# CPU columns are their own; the sort is refused there too, as it is checked before the trace is read:
# self_device sorts them by self CPU time).
NOT_APPLICABLE: dict[str, dict[str, str]] = {
    "module": {"self_cpu": "a module class has no self CPU time (its instances' time holds their child modules' "
                           "and ops'); sort by cpu_total"},
    "kernel": {"self_cpu": "a kernel has no CPU time; sort by self_device",
               "cpu_total": "a kernel has no CPU time; sort by self_device"},
}


def check_choices(group_by: str, sort: str) -> None:
    """A user error unless ``group_by`` and ``sort`` are among the op table's groupings and sort keys, and the
    sort key's column applies to the grouping (:data:`NOT_APPLICABLE`). Needs no trace: asked before any work."""
    if group_by not in GROUPS:
        raise UserError(f"--group-by must be one of {', '.join(GROUPS)} (got {group_by!r})")
    if sort not in SORT_KEYS:
        raise UserError(f"--sort must be one of {', '.join(SORT_KEYS)} (got {sort!r})")
    why = NOT_APPLICABLE.get(group_by, {}).get(sort)
    if why is not None:
        raise UserError(f"--sort {sort} does not apply to --group-by {group_by}: {why}")
