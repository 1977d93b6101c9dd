"""``python -m profuse`` (and the ``profuse`` script) runs the command line."""
from __future__ import annotations

from typing import NoReturn

from . import _interrupt


def entry() -> NoReturn:
    """The command line as a program: a Ctrl-C at any moment, imports and exit too, is one line, exit 130."""
    import atexit
    import contextlib
    import gc
    import os
    import signal
    import sys
    import threading

    _interrupt.exit_on_sigint()  # while the command line's modules import
    from .cli import main

    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = main()
    # The work is done. A Ctrl-C from here cuts the exit short in one line (none more if the command
    # already said it was interrupted). The exit is made here, not by the interpreter's teardown: that
    # restores the default SIGINT action (the process would die of the signal, exit -2, saying nothing)
    # and stops daemon threads inside DuckDB's C++ ("FATAL: exception not rethrown", abort).
    _interrupt.exit_on_sigint(quiet=code == 130)
    # What the interpreter's own exit does first: threading's exit hooks (an idle ThreadPoolExecutor's
    # workers, such as torch.compile's, are told to stop; joined without that, they never end), then every
    # non-daemon thread joined.
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    else:  # not CPython
        for t in threading.enumerate():
            if t is not threading.current_thread() and not t.daemon:
                t.join()
    atexit._run_exitfuncs()  # cache writes finishing, logging flushed
    gc.collect()  # files left in garbage cycles (a profiled script's) are closed, so flushed
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more can reach it
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
