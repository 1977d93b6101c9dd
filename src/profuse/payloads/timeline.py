"""The timeline's records: lanes (with their kind and whole label), windows of decimated events as
columns with interned strings, and one event's links. The analysis records are already the shape
sent, so they are the payloads; this module names them for the renderers."""
from __future__ import annotations

from ..analysis.timeline import (
                                 ChainOp,
                                 EventLinks,
                                 EventRef,
                                 FirstView,
                                 KernelRef,
                                 Lane,
                                 LaunchRef,
                                 ModuleRef,
                                 Replay,
                                 TimelineWindow,
)

__all__ = ["ChainOp", "EventLinks", "EventRef", "FirstView", "KernelRef", "Lane", "LaunchRef", "ModuleRef", "Replay",
           "TimelineWindow"]
