"""profuse's bytecode brought up to date before a benchmark times a process.

A wheel install writes every module's bytecode, and ``make venv`` does the same for the editable install
(``compileall``). A module edited since then has stale bytecode, and where ``PYTHONDONTWRITEBYTECODE`` is set
(these machines) Python compiles it again in every process that imports it: a whole-process figure (a cold
report) then pays for compiling what a user's install never compiles, while a figure with its imports outside
the clock (a cold load) does not. A benchmark run directly, not through ``make bench``, calls
:func:`current_bytecode` first.
"""
from __future__ import annotations

import compileall
import importlib.util
import sys
from pathlib import Path


def stale_modules(folder: Path) -> list[Path]:
    """The modules under ``folder`` whose bytecode is missing or was compiled from another version of the source
    (the modification time and size the bytecode's header records, as the import system checks them)."""
    out = []
    for src in sorted(folder.rglob("*.py")):
        cached = Path(importlib.util.cache_from_source(str(src)))
        try:
            header = cached.read_bytes()[:16]
        except OSError:
            out.append(src)
            continue
        st = src.stat()
        flags = int.from_bytes(header[4:8], "little")
        recorded = (int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little"))
        if flags == 0 and recorded != (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF):
            out.append(src)
    return out


def current_bytecode() -> int:
    """Compile profuse's modules whose bytecode is stale (see the module docstring); how many there were."""
    import profuse

    folder = Path(profuse.__file__).resolve().parent
    stale = stale_modules(folder)
    if stale:
        compileall.compile_dir(str(folder), quiet=2)
        print(f"profuse's bytecode: {len(stale)} stale module(s) compiled before timing", file=sys.stderr)
    return len(stale)
