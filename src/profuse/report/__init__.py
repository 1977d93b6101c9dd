"""Renderers: they read payload records and write text, JSON or HTML; they compute nothing.

The package is also callable: ``profuse.report(path)`` is :func:`profuse.notebook_report` (a function
named ``report`` on the top-level package would be replaced by this package the first time it is
imported, so the package itself takes the call).
"""
from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, source: Any, **options: Any) -> Any:
        from .. import notebook_report

        return notebook_report(source, **options)


sys.modules[__name__].__class__ = _CallableModule
