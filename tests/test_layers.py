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
    "capture": {"payloads", "report", "explorer", "frontend", "cli", "fixes", "studies"},
    "trace": {"analysis", "payloads", "report", "explorer", "frontend", "capture", "fixes", "studies", "torch"},
    "analysis": {"payloads", "report", "explorer", "frontend", "capture", "fixes", "studies", "torch"},
    "payloads": {"report", "explorer", "frontend", "cli", "capture", "torch"},
    "report": {"explorer", "cli", "capture", "torch"},
    "explorer": {"report", "cli", "capture", "torch"},
    "frontend": {"trace", "analysis", "payloads", "report", "explorer", "cli", "capture", "torch"},
}


def imported(path: Path) -> set[str]:
    """Top-level names a module imports: ``profuse.X`` as ``X``, anything else by its first part."""
    rel = path.relative_to(SRC).parts
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
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
