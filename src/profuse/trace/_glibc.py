"""glibc's malloc through ctypes: the one place profuse reaches it (mallopt, malloc_trim).

:class:`profuse.trace.build._GlibcHeap` keeps big numpy temporaries on the heap while a load's passes
run; :func:`one_arena` has the threads a command starts allocate from the main arena, where that
reuse works (see its docstring); :func:`keeping` leaves what a load freed to the analysis after it. Elsewhere
than glibc (musl, macOS, Windows) they do nothing.
"""
from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Iterator
from typing import Any

M_ARENA_MAX = -8
M_TRIM_THRESHOLD = -1
DYNAMIC_MAX = 32 << 20         # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems
TRIM_AFTER = 2 * DYNAMIC_MAX   # glibc's trim threshold once a numpy process has its mmap threshold at the most
_keepers = 0
_keep_lock = threading.Lock()


@contextlib.contextmanager
def keeping() -> Iterator[None]:
    """Around a load and the analysis that follows it in the same process (a report), entered before the load
    starts: what the load frees stays with the process for the analysis, which would otherwise fault every page
    of its temporaries in again. The big build's last step does not hand DuckDB's allocator pages back (which
    trims glibc's heap too: build._hand_back_freed), the heap is not trimmed when a pass's reuse ends nor when
    the analysis ends (build._GlibcHeap, build.bulk_settings); the load's own trims while its events go in stay.
    bert1g (1.01 GB) cold report, 2 cores, interleaved with the code before: 6.01-6.16 -> 5.50-5.67 s, page
    faults 0.69-0.70 M -> 0.54-0.57 M, peak RSS 0.91-0.94 GB either way (the load's peak is the process's).
    On leaving (the last one), glibc trims the heap's top again as blocks are freed (:data:`TRIM_AFTER`)."""
    global _keepers
    with _keep_lock:
        _keepers += 1
    try:
        yield
    finally:
        with _keep_lock:
            _keepers -= 1
            last = _keepers == 0
        lib = libc()
        if last and lib is not None:
            lib.mallopt(M_TRIM_THRESHOLD, TRIM_AFTER)


def keeps() -> bool:
    """Whether a :func:`keeping` block is open."""
    return _keepers > 0


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
