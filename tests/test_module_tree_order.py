"""The module tree's order: depth first, siblings by device time (largest first), on a real trace."""
from __future__ import annotations

from conftest import trace_path

import profuse
from profuse.analysis.module_tree import ModuleNode, by_device_time, module_tree


def test_siblings_by_device_time_depth_first():
    with profuse.load(trace_path("h100_bert_small.json.gz")) as t:
        nodes = module_tree(t)
    paths = [n.path for n in nodes]
    assert len(set(paths)) == len(paths)
    seen: set[str] = set()
    siblings: dict[str, list[float]] = {}
    for n in nodes:
        parent = n.path.rsplit("/", 1)[0] if "/" in n.path else ""
        assert not parent or parent in seen, "a parent comes before its children"
        seen.add(n.path)
        siblings.setdefault(parent, []).append(n.device_us)
    assert all(v == sorted(v, reverse=True) for v in siblings.values())
    # a node's subtree is contiguous: everything between it and its next sibling lies under it
    for i, n in enumerate(nodes):
        j = i + 1
        while j < len(nodes) and nodes[j].path.startswith(n.path + "/"):
            j += 1
        assert all(not m.path.startswith(n.path + "/") for m in nodes[j:])


def test_ties_go_by_path_and_orphans_are_roots():
    def node(path, us):
        return ModuleNode(path=path, name=path.rsplit("/", 1)[-1], depth=path.count("/"), calls=1,
                          device_us=us, cpu_us=0.0)

    got = by_device_time([node("A", 1.0), node("A/b", 2.0), node("A/a", 2.0), node("A/c", 5.0),
                          node("X/y", 9.0), node("B", 3.0)])
    assert [n.path for n in got] == ["X/y", "B", "A", "A/c", "A/a", "A/b"]
