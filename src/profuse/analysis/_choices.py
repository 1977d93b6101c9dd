"""The op table's grouping and sort choices, apart from the analysis code so `--help` stays light."""
from __future__ import annotations

GROUPS = ("op", "shape", "module", "kernel")
SORT_KEYS = ("self_device", "device_total", "self_cpu", "cpu_total", "calls", "kernels", "name")
