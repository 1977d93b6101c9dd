"""Fail when a function in the given folders is longer than the limit (``make lint``).

    python tools/check_function_length.py [--max 60] src/profuse/ranks src/profuse/report src/profuse/payloads

A function's length is its lines from ``def`` (decorators included) to its last line, nested functions
counted in their parent as well; prints ``path:line: name is N lines (> MAX)`` for each and exits 1.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def long_functions(path: Path, limit: int) -> list[str]:
    """``path:line: name is N lines`` for every function of ``path`` over ``limit`` lines."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            n = (node.end_lineno or node.lineno) - first + 1
            if n > limit:
                out.append(f"{path}:{node.lineno}: {node.name} is {n} lines (> {limit})")
    return out


def main(argv: list[str] | None = None) -> int:
    """Check every ``.py`` file under the folders named."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max", type=int, default=60)
    p.add_argument("folders", nargs="+", type=Path)
    args = p.parse_args(argv)
    found = [line for folder in args.folders for f in sorted(folder.rglob("*.py"))
             for line in long_functions(f, args.max)]
    print("\n".join(found) or f"no function over {args.max} lines", file=sys.stderr if found else sys.stdout)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
