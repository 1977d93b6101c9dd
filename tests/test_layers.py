"""Imports go one way: capture -> trace -> analysis -> payloads -> report / explorer (read from the
source with ast, lazy imports inside functions included)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO

SRC = REPO / "src" / "profuse"
# package -> the packages (and outside modules) it must never import
FORBIDDEN = {
    "capture": {"payloads", "report", "explorer", "agents", "frontend", "cli", "fixes", "studies"},
    "trace": {"analysis", "payloads", "report", "explorer", "agents", "frontend", "capture", "fixes", "studies", "torch",
              "emu"},
    "analysis": {"payloads", "report", "explorer", "agents", "frontend", "capture", "fixes", "studies", "torch", "emu"},
    "payloads": {"report", "explorer", "agents", "frontend", "cli", "capture", "torch", "emu"},
    "report": {"explorer", "agents", "cli", "capture", "torch", "emu"},
    "explorer": {"report", "agents", "cli", "capture", "torch", "emu"},
    "agents": {"report", "explorer", "cli", "capture", "torch", "emu"},  # profuse mcp: a renderer beside them
    "frontend": {"trace", "analysis", "payloads", "report", "explorer", "agents", "cli", "capture", "torch", "emu"},
}


def _facade() -> dict[str, set[str]]:
    """Each public function of the package facade (``profuse/__init__.py``) -> the packages it reaches:
    what it imports, and what the facade functions it calls reach; ``__getattr__``'s lazy names (e.g.
    ``profile`` -> capture) by the package its branch imports."""
    tree = ast.parse((SRC / "__init__.py").read_text())
    own: dict[str, set[str]] = {}
    calls: dict[str, set[str]] = {}
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef):
            own[fn.name] = _imports_in(fn, ("__init__.py",))
            calls[fn.name] = {c.func.id for c in ast.walk(fn) if isinstance(c, ast.Call)
                              and isinstance(c.func, ast.Name)}
    reach = {name: set(found) for name, found in own.items()}
    for _ in range(len(reach)):  # follow calls between facade functions to a fixed point
        for name in reach:
            for callee in calls[name] & reach.keys():
                reach[name] |= reach[callee]
    lazy = reach.pop("__getattr__", set())
    reach.update({n: lazy for n in ("ProfileConfig", "Exporter", "profile", "read_neff", "advise")})
    return reach


def _imports_in(tree: ast.AST, rel: tuple[str, ...]) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        names = _names(node, rel)
        for name in names:
            parts = name.split(".")
            out.add(parts[1] if parts[0] == "profuse" and len(parts) > 1 else parts[0])
    return out


def _names(node: ast.AST, rel: tuple[str, ...]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:  # relative: resolve against this file's package
            base = list(rel[:-1])[: len(rel) - node.level] if node.level > 1 else list(rel[:-1])
            names = [".".join(["profuse", *base, *(node.module.split(".") if node.module else [])])]
            return [f"{names[0]}.{a.name}" for a in node.names] if not node.module else names
        if node.module == "profuse":
            return [f"profuse.{a.name}" for a in node.names]
        return [node.module or ""]
    return []


def imported(path: Path, *, through_facade: bool = True) -> set[str]:
    """Top-level names a module imports: ``profuse.X`` as ``X``, anything else by its first part; a name
    taken from the package facade (``from .. import table``) also counts the packages it reaches."""
    rel = path.relative_to(SRC).parts
    facade = _facade() if through_facade else {}
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if through_facade and isinstance(node, (ast.Import, ast.ImportFrom)):
            for name in _names(node, rel):
                parts = name.split(".")
                if parts[0] == "profuse" and len(parts) == 2:
                    out |= facade.get(parts[1], set())
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this file's package
                base = list(rel[:-1])[: len(rel) - node.level] if node.level > 1 else list(rel[:-1])
                names = [".".join(["profuse", *base, *(node.module.split(".") if node.module else [])])]
                if not node.module:
                    names = [f"{names[0]}.{a.name}" for a in node.names]
            else:
                names = [node.module or ""]
        else:
            continue
        for name in names:
            parts = name.split(".")
            out.add(parts[1] if parts[0] == "profuse" and len(parts) > 1 else parts[0])
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_go_one_way(package: str):
    files = sorted((SRC / package).rglob("*.py"))
    assert files
    wrong = {str(f.relative_to(SRC)): sorted(imported(f) & FORBIDDEN[package]) for f in files}
    wrong = {f: w for f, w in wrong.items() if w}
    assert not wrong, f"{package}/ imports against the pipeline: {wrong}"


def test_the_check_sees_imports():
    # the resolver itself: a relative import two levels up and a plain one are both found
    assert {"payloads", "frontend", "msgspec"} <= imported(SRC / "report" / "html.py")
    assert "analysis" in imported(SRC / "payloads" / "ops.py")
    assert "torch" in imported(SRC / "capture" / "profiler.py")
    # a name taken from the facade counts what it reaches: table -> report, payloads (whose analyse() runs
    # the analyses), trace
    assert {"report", "payloads", "trace"} <= _facade()["table"]
    assert "capture" in _facade()["profile"]
