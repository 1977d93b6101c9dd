"""No import cycle anywhere in src: every import of a profuse module, at module level or inside a
function (a lazy import hides a cycle, it does not remove it), read with ast. Imports under
``if TYPE_CHECKING:`` never run and are left out; so is an import of a module's own ancestor package
(``from .. import __version__``), which Python has always initialised before the module itself."""
from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

SRC = REPO / "src" / "profuse"


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        test = getattr(node, "test", None)
        if isinstance(node, ast.If) and (getattr(test, "id", None) == "TYPE_CHECKING"
                                         or getattr(test, "attr", None) == "TYPE_CHECKING"):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def _targets(node: ast.AST, package: str, modules: set[str]) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if not isinstance(node, ast.ImportFrom):
        return set()
    if node.level:
        base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    return {f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names}


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Module -> the profuse modules it imports (see the module docstring for what is left out)."""
    files = {_module_name(p, src): p for p in src.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking_nodes(tree)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found: set[str] = set()
        for node in ast.walk(tree):
            if id(node) not in skip:
                found |= _targets(node, package, set(files))
        graph[name] = {m for m in found if m in files and m != name and not name.startswith(m + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_src_has_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_the_check_finds_a_cycle_behind_a_lazy_import(tmp_path: Path) -> None:
    # GIVEN a package whose a imports b at module level and b imports a inside a function
    pkg = tmp_path / "profuse"
    (pkg / "analysis").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "analysis" / "__init__.py").write_text("")
    (pkg / "analysis" / "a.py").write_text("from .b import f\n")
    (pkg / "analysis" / "b.py").write_text("def f():\n    from .a import g\n    from .. import __version__\n")
    (pkg / "analysis" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import g\n")
    # THEN the lazy import's cycle is found; the ancestor package and the TYPE_CHECKING import are not edges
    graph = import_graph(pkg)
    assert cycles(graph) == [["profuse.analysis.a", "profuse.analysis.b"]]
    assert graph["profuse.analysis.c"] == set()
