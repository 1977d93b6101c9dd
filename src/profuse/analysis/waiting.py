"""Python frames that wait rather than work: the thread sleeps in the kernel (an event loop's ``epoll`` or
``select``, a ``sleep``, a lock's ``acquire``, a condition's or an event's ``wait``, a queue's ``get``, a
socket's ``recv`` or ``accept``), or waits in autograd's ``run_backward`` while the engine's threads run the
backward (its ops on a device's thread: what runs on this thread inside it is an op, which works; a CPU
backward runs its ops on this thread, and the engine's own time between them then reads as waiting too), as
torch's Python tracer names them. One rule for every view that
splits Python time: the CPU budget's ``idle/wait`` (diagnosis/cpu_budget.py) and the call tree's waiting
column (calltree.py), which is then not Python time."""
from __future__ import annotations

import re

# as cProfile names a built-in ("<method 'acquire' of '_thread.lock' objects>") and as torch's tracer does
# ("<built-in method acquire of _thread.lock object at 0x7f...>", "<built-in function sleep>")
WAITING = re.compile(r"epoll|select\.(?:poll|select)|selectors\.py\(\d+\): select|time\.sleep|function sleep>|"
                     r"'acquire' of '_thread|built-in method acquire of _thread|threading\.py\(\d+\): wait|"
                     r"queue\.py\(\d+\): get|method 'recv|built-in method recv(?:_into|from)? of|'accept' of|"
                     r"built-in method accept of|built-in method run_backward of", re.I)


def waits(name: str) -> bool:
    """Whether a Python frame of this name waits rather than works (:data:`WAITING`)."""
    return WAITING.search(name) is not None
