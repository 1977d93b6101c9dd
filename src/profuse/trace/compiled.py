"""The compiled parts of the load after the scan (trace/_accel.c), or None on a pure-Python install.

Each function there has a Python or numpy twin that runs where the extension is not built, and that
``PROFUSE_SCANNER=0`` (the switch that turns the compiled scanner off) selects too; tests compare the
two (tests/test_accel.py). ``PROFUSE_ACCEL_LIB`` loads another build of it (`make sanitize`).
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from typing import Any


def load_extension(name: str, env: str) -> Any:
    """The compiled module ``name`` of this package, or the build the environment variable ``env`` names
    (`make sanitize` loads an instrumented one), or None on a pure-Python install."""
    lib = os.environ.get(env)
    if lib:
        spec = importlib.util.spec_from_file_location(f"{__package__}.{name}", lib)
        if spec is None or spec.loader is None:
            raise ImportError(f"{env}={lib} is not an extension module")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError:  # pure-Python install: the Python twins do the work
        return None


accel = load_extension("_accel", "PROFUSE_ACCEL_LIB")


def enabled() -> bool:
    """Whether loads use the extension (built, and not turned off with ``PROFUSE_SCANNER=0``)."""
    return accel is not None and os.environ.get("PROFUSE_SCANNER", "1") != "0"
