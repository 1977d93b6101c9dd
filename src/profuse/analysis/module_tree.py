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
    """Every module path with its calls and times in depth-first order, the children of each node
    (and the roots) by device time, largest first (ties by path)."""
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
    for n in nodes.values():  # rounded once, to the ns: the record every renderer sends
        n.device_us, n.cpu_us = round(n.device_us, 3), round(n.cpu_us, 3)
    return by_device_time(list(nodes.values()))


def by_device_time(nodes: list[ModuleNode]) -> list[ModuleNode]:
    """Nodes in depth-first order, siblings by device time (largest first, then path); a node whose
    parent path is not among them is a root."""
    known = {n.path for n in nodes}
    children: dict[str | None, list[ModuleNode]] = {}
    for n in nodes:
        parent = n.path.rsplit("/", 1)[0] if "/" in n.path else None
        children.setdefault(parent if parent in known else None, []).append(n)

    def order(ns: list[ModuleNode]) -> list[ModuleNode]:  # reversed: a stack pops the largest first
        return sorted(ns, key=lambda n: (-n.device_us, n.path))[::-1]

    out: list[ModuleNode] = []
    stack = order(children.get(None, []))
    while stack:
        n = stack.pop()
        out.append(n)
        stack += order(children.get(n.path, []))
    return out
