"""A module imported on first use: the names a report's records need load without numpy or DuckDB.

``np = lazy_module("numpy", globals(), "np")`` binds a stand-in; the first attribute read through it
imports the module and puts the module itself in the stand-in's place, so later reads cost nothing.
"""
from __future__ import annotations

import importlib
from typing import Any


class _Lazy:
    """Stands in for a module until first use (see the module docstring)."""

    def __init__(self, name: str, namespace: dict[str, Any], alias: str) -> None:
        self._name, self._namespace, self._alias = name, namespace, alias

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self._name)
        if self._namespace.get(self._alias) is self:
            self._namespace[self._alias] = module
        return getattr(module, attr)


def lazy_module(name: str, namespace: dict[str, Any], alias: str) -> Any:
    """A stand-in for module ``name``, bound as ``alias`` in ``namespace`` (a module's ``globals()``)."""
    return _Lazy(name, namespace, alias)
