"""glibc's malloc through ctypes: the one place profuse reaches it (mallopt, malloc_trim).

:class:`profuse.trace.build._GlibcHeap` keeps big numpy temporaries on the heap while a load's passes
run; :func:`one_arena` has the threads a command starts allocate from the main arena, where that
reuse works (see its docstring). Elsewhere than glibc (musl, macOS, Windows) both do nothing.
"""
from __future__ import annotations

import contextlib
import functools
import sys
import threading
from typing import Any

M_ARENA_MAX = -8


@functools.cache
def libc() -> Any:
    """glibc (a ctypes handle with mallopt and malloc_trim), or None where the C library is another."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            lib = ctypes.CDLL(None)
            if lib.gnu_get_libc_version and lib.mallopt and lib.malloc_trim:  # glibc, not musl
                return lib
    return None


def one_arena() -> bool:
    """Every thread's allocations from glibc's main arena, from now on (``mallopt(M_ARENA_MAX, 1)``): called
    before a command starts its first thread (trace/early.py starts a load on one). True where it was set.

    glibc gives each new thread an arena of its own, whose heaps are at most 64 MiB: a block over that (a
    column of 9 M int64 is 75 MB) comes from mmap whatever the mmap threshold, and is faulted in anew each
    time, so the heap reuse of a load (build._GlibcHeap) held only on the main thread. A 3 GB trace loaded
    on a thread faulted 2.05 M times against 1.35 M on the main thread. glibc fixes the number of arenas
    when the first thread allocates, so this does nothing once another thread has started."""
    lib = libc()
    if lib is None or threading.active_count() > 1:
        return False
    return bool(lib.mallopt(M_ARENA_MAX, 1))
