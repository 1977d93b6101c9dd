"""The Python call tree, one event's details (shapes, launch configuration, Python stack), kernels'
launch configurations and timeline search matches, as sent to every renderer. The analysis records
are already the shape sent, so they are the payloads; this module names them and builds them from a
loaded trace (the explorer's routes and the report call these)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .._progress import timed
from ..analysis.calltree import CallNode, CallTree
from ..analysis.event_detail import EventDetail, KernelLaunches, LaunchConfig, StackFrame
from ..analysis.timeline_search import Match, TimelineMatches

if TYPE_CHECKING:
    from ..analysis.timeline import TimelineModel
    from ..trace import Trace

__all__ = ["CallNode", "CallTree", "EventDetail", "KernelLaunches", "LaunchConfig", "Match", "StackFrame",
           "TimelineMatches", "call_tree_of", "event_detail_of", "kernel_launches_of", "search_of"]


@timed("call tree")
def call_tree_of(trace: Trace) -> CallTree | None:
    """The trace's Python call tree, or None where it has no ``python_function`` events."""
    from ..analysis.calltree import call_tree

    tree = call_tree(trace)
    return tree if tree.nodes else None


def event_detail_of(trace: Trace, eid: int) -> EventDetail | None:
    """Event ``eid``'s shapes, launch configuration and Python stack (None: no such event, nor an id that
    fits the table's 64 bits)."""
    from ..analysis.event_detail import event_detail

    if not -(2**63) <= eid < 2**63:
        return None
    return event_detail(trace, eid)


def kernel_launches_of(trace: Trace) -> KernelLaunches:
    """Every kernel name's launch configurations (empty where the trace records none)."""
    from ..analysis.event_detail import kernel_launches

    return kernel_launches(trace)


def search_of(model: TimelineModel, query: str) -> TimelineMatches:
    """The timeline's events whose name holds ``query``, in time order."""
    from ..analysis.timeline_search import search_timeline

    return search_timeline(model, query)
