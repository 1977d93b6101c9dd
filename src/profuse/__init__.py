"""profuse: where PyTorch inference spends its time, on any device, and proof of the fix."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ProfuseError, TraceError, UserError

if TYPE_CHECKING:
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
    "profile",
    "read_neff",
    "table",
]

_CAPTURE = {"ProfileConfig", "Exporter", "profile"}


def table(source: Any, *, top: int = 20, group_by: str = "op") -> None:
    """Print the correlated op table of a trace or bundle: a path, or a ``profuse.profile`` block once it ended.

    ``top=0`` prints every row; ``group_by`` is op, shape, module or kernel (as ``profuse report``).
    """
    from .analysis import op_table, summarize
    from .payloads.report import report_view
    from .report.console import make_console, print_report
    from .trace import load

    path = getattr(source, "bundle", source)
    if path is None:
        raise UserError("no bundle yet: the profiled block recorded no complete step")
    with load(path) as trace:
        print_report(make_console(), report_view(summarize(trace), op_table(trace, group_by=group_by), top=top))


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
    if name == "advise":
        from .fixes.verify import advise

        return advise
    raise AttributeError(name)
