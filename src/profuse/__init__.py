"""profuse: where PyTorch inference spends its time, on any device, and proof of the fix."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ProfuseError, TraceError, UserError

if TYPE_CHECKING:
    from .payloads.report import ReportView
    from .report.notebook import NotebookReport, NotebookTable
    from .trace import Trace, load

__version__ = "0.1.0"
__all__ = [
    "Exporter",
    "ProfileConfig",
    "ProfuseError",
    "Trace",
    "TraceError",
    "UserError",
    "__version__",
    "advise",
    "load",
    "notebook_report",
    "profile",
    "read_neff",
    "report",
    "table",
]

_CAPTURE = {"ProfileConfig", "Exporter", "profile"}


def _source_path(source: Any) -> Any:
    path = getattr(source, "bundle", source)
    if path is None:
        raise UserError("no bundle yet: the profiled block recorded no complete step")
    return path


def _view(source: Any, *, top: int, group_by: str, advice: bool, keep_metadata: bool) -> ReportView:
    """The report's records of a trace or bundle, as ``profuse report`` builds them."""
    from .payloads.report import analyse, report_view
    from .trace import load

    with load(_source_path(source)) as trace:
        analysed = analyse(trace, group_by=group_by, advice=advice)
    return report_view(analysed, top=top, keep_metadata=keep_metadata)


def notebook_report(source: Any, *, top: int = 25, group_by: str = "op", advice: bool = True,
                    keep_metadata: bool = False) -> NotebookReport:
    """The report of a trace or bundle (a path, or a ``profuse.profile`` block once it ended), as the
    object a notebook shows: the HTML report inline (offline, no server); ``.view`` holds its records.
    ``profuse.report(path)`` calls this (the ``profuse.report`` package is callable: report/__init__.py).

    ``top`` rows of the op table (0: all), ``group_by`` op, shape, module or kernel, ``advice`` the
    advisor's sections (as ``profuse report``; ``--no-advice`` is ``advice=False``).
    """
    from .payloads.build import ReportPayloads, report_payloads
    from .payloads.report import analyse
    from .report.notebook import NotebookReport
    from .trace import load

    path = _source_path(source)

    def payloads() -> ReportPayloads:  # the HTML's payloads, from the (now cached) tables, when shown
        with load(path) as trace:
            return report_payloads(trace, analyse(trace, group_by=group_by, advice=advice), top=top or None,
                                   keep_metadata=keep_metadata)

    view = _view(path, top=top, group_by=group_by, advice=advice, keep_metadata=keep_metadata)
    return NotebookReport(view, payloads, keep_metadata=keep_metadata)


def table(source: Any, *, top: int = 20, group_by: str = "op", keep_metadata: bool = False) -> NotebookTable:
    """The correlated op table of a trace or bundle (a path, or a ``profuse.profile`` block once it ended),
    as ``profuse report --no-advice`` prints it: its first ``top`` rows (0: all), grouped by op, shape,
    module or kernel (``group_by``).

    Nothing is printed: a notebook shows the returned table, as a REPL does its ``repr``; a script
    prints it (``print(profuse.table(p))``). Secrets are redacted unless ``keep_metadata``.
    """
    from .report.notebook import NotebookTable

    view = _view(source, top=top, group_by=group_by, advice=False, keep_metadata=keep_metadata)
    return NotebookTable(view, keep_metadata=keep_metadata)


def __getattr__(name: str) -> Any:
    # Capture needs torch; importing profuse for reading traces must not.
    if name in _CAPTURE:
        from . import capture

        return getattr(capture, name)
    if name == "read_neff":  # a compiled Neuron executable, read offline (docs/neuron.md)
        from .neuron.neff import read_neff

        return read_neff
    if name in ("Trace", "load"):
        from . import trace

        return getattr(trace, name)
    if name == "report":  # the renderers' package, callable as profuse.report(path): notebook_report
        import importlib

        return importlib.import_module(".report", __name__)
    if name == "advise":
        from .fixes.verify import advise

        return advise
    raise AttributeError(name)
