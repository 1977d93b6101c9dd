"""A real IPython kernel of this interpreter for the notebook tests, with everything it writes in a
temporary folder: its kernelspec, connection file, IPython profile and profuse's cache (nothing in the
user's home, whatever kernels the user has installed). Cells run one at a time, so a test can look at
the files between two cells."""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

KERNEL = "profuse-test"


def _kernelspec(tmp: Path) -> Path:
    kernels = tmp / "kernels"
    spec = kernels / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "profuse test", "language": "python"}))
    return kernels


def execute(sources: list[str], tmp: Path, cwd: Path, *, timeout: int = 300,
            before: Callable[[int], None] | None = None) -> list:
    """Run ``sources`` as the cells of one notebook on a fresh kernel started in ``cwd``; returns the cells
    with their outputs (an error is an output: ``allow_errors``). ``before(i)`` runs here before cell i.

    Everything the kernel process writes to its file descriptor 2 is also kept in ``tmp/kernel-stderr``
    (:func:`kernel_stderr`): ipykernel forwards what C++ code writes there to the cell's stderr stream from
    a thread, which can come after the cell has ended (then nbclient drops it), and echoes it to the
    kernel's own stderr, in full."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "PROFUSE_CACHE_DIR": str(tmp / "cache"),
           "IPYTHONDIR": str(tmp / "ipython"), "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
           "JUPYTER_DATA_DIR": str(tmp / "data"), "JUPYTER_CONFIG_DIR": str(tmp / "config"),
           "JUPYTER_PLATFORM_DIRS": "1"}
    with pytest.MonkeyPatch.context() as mp:  # the kernel (a child process) inherits them
        for k, v in env.items():
            mp.setenv(k, v)
        km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(_kernelspec(tmp))]))
        client = nbclient.NotebookClient(nb, km=km, timeout=timeout, allow_errors=True,
                                         resources={"metadata": {"path": str(cwd)}})
        with open(tmp / "kernel-stderr", "wb") as err, client.setup_kernel(stderr=err):
            for i, cell in enumerate(nb.cells):
                if before is not None:
                    before(i)
                client.execute_cell(cell, i)
    return nb.cells


def kernel_stderr(tmp: Path) -> str:
    """What the kernel process wrote to its stderr (file descriptor 2), all cells together."""
    return (tmp / "kernel-stderr").read_text(errors="replace")


def errors(cell) -> list[str]:
    """The cell's error outputs, one line each."""
    return [f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"]


def stderr(cell) -> str:
    """What the cell wrote to stderr."""
    return "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stderr")


def result(cell) -> dict:
    """The cell's one execute_result's data (mime type -> content)."""
    found = [o for o in cell.outputs if o.output_type == "execute_result"]
    assert len(found) == 1, f"{len(found)} results: {cell.outputs}"
    return dict(found[0].data)
