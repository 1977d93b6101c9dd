"""Build the emulated PrivateUse1 device (src/profuse/emu/_emu.cpp) against the installed torch.

One translation unit, compiled with g++ and torch's own include and library paths, linked against
libtorch/libtorch_cpu/libc10 with their folder as the run path. The library is written beside its
source, to a temporary name first, so an interrupted build leaves no half-written ``_emu.so``.
``EMU_CXXFLAGS`` overrides the optimisation flags (default ``-O2``: the fused RMSNorm
kernel's loops are vectorised).

    python tools/build_emu.py          # what `make venv` runs when the source or torch changed
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "profuse" / "emu" / "_emu.cpp"
TARGET = SOURCE.with_name("_emu.so")


def command(out: Path) -> list[str]:
    """The g++ line building ``out`` from :data:`SOURCE` with the running interpreter's torch."""
    import torch
    from torch.utils import cpp_extension

    includes = cpp_extension.include_paths()
    kineto = Path(torch.__file__).parent / "include" / "kineto"
    libdir = str(Path(torch.__file__).parent / "lib")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    flags = shlex.split(os.environ.get("EMU_CXXFLAGS", "-O2"))
    return ["g++", "-std=c++17", "-shared", "-fPIC", *flags, "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            "-DUSE_KINETO", "-DKINETO_NAMESPACE=libkineto", "-DFMT_HEADER_ONLY", "-DTORCH_EXTENSION_NAME=_emu",
            *[f"-I{p}" for p in [*includes, str(kineto)]], str(SOURCE), "-o", str(out),
            f"-L{libdir}", f"-Wl,-rpath,{libdir}", "-ltorch", "-ltorch_cpu", "-lc10"]


def main() -> int:
    """Compile; exit status 0 on success, g++'s own on failure (its messages on stderr)."""
    tmp = TARGET.with_name(f".{TARGET.name}.{os.getpid()}.tmp")
    try:
        done = subprocess.run(command(tmp), check=False)
        if done.returncode != 0:
            print(f"build_emu: g++ failed building {SOURCE.relative_to(ROOT)}", file=sys.stderr)
            return done.returncode
        os.replace(tmp, TARGET)
    finally:
        tmp.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
