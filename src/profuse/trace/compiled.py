"""The compiled parts of the load after the scan (trace/_accel.c), or None on a pure-Python install.

Each function there has a Python or numpy twin that runs where the extension is not built, and that
``PROFUSE_SCANNER=0`` (the switch that turns the compiled scanner off) selects too; tests compare the
two (tests/test_accel.py). ``PROFUSE_ACCEL_LIB`` loads another build of it (`make sanitize`).
"""
from __future__ import annotations

import os
from typing import Any


def _load() -> Any:
    lib = os.environ.get("PROFUSE_ACCEL_LIB")
    if lib:
        import importlib.util

        spec = importlib.util.spec_from_file_location(f"{__package__}._accel", lib)
        if spec is None or spec.loader is None:
            raise ImportError(f"PROFUSE_ACCEL_LIB={lib} is not an extension module")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    try:
        from . import _accel
    except ImportError:  # pure-Python install: the twins do the work
        return None
    return _accel


accel = _load()


def enabled() -> bool:
    """Whether loads use the extension (built, and not turned off with ``PROFUSE_SCANNER=0``)."""
    return accel is not None and os.environ.get("PROFUSE_SCANNER", "1") != "0"
