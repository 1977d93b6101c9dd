"""The nn.Module tree of a trace, aggregated by path of class names, with calls and times per node."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .scopes import scope_instances

if TYPE_CHECKING:
    from ..trace import Trace


@dataclass
class ModuleNode:
    """All instances of one path of module classes (``BertModel/BertEncoder/BertLayer``)."""

    path: str
    name: str
    depth: int
    calls: int
    device_us: float    # device time under the instances (CPU-only traces: their CPU time)
    cpu_us: float       # wall time of the instances on the CPU


def module_tree(trace: Trace) -> list[ModuleNode]:
    """Every module path with its calls and times, sorted by path (a depth-first order)."""
    insts = scope_instances(trace)
    nodes: dict[str, ModuleNode] = {}
    for inst in insts.values():
        if inst.kind != "module":
            continue
        path, p = [inst.name], inst.parent
        while p is not None and p in insts:
            if insts[p].kind == "module":
                path.append(insts[p].name)
            p = insts[p].parent
        key = "/".join(reversed(path))
        n = nodes.setdefault(key, ModuleNode(path=key, name=inst.name, depth=len(path) - 1, calls=0,
                                             device_us=0.0, cpu_us=0.0))
        n.calls += 1
        n.device_us += inst.device_ns / 1e3
        n.cpu_us += inst.dur / 1e3
    return sorted(nodes.values(), key=lambda n: n.path)
