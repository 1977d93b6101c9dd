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
]

_CAPTURE = {"ProfileConfig", "Exporter", "profile"}


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
