"""The profiler's own lines kept off the user's terminal (profuse/capture/_quiet.py), on the real fd 2."""
from __future__ import annotations

import os
import subprocess
import sys

from profuse.capture._quiet import CANCELLED, drop_markers

WARNING = (b"[W1204 19:58:47.813263532 profiler_kineto.cpp:942] disableProfiler called but no active profiling "
           b"session found. This can happen if profiling was cancelled during warmup.\n")


def test_markers_always_and_the_cancelled_warning_only_when_asked_are_dropped():
    data = b"  USDT: profiler_start\nreal line\n" + WARNING
    assert drop_markers(data) == b"real line\n" + WARNING
    assert drop_markers(data, (CANCELLED,)) == b"real line\n"


def test_a_line_written_to_fd_2_inside_the_block_is_filtered_and_the_rest_kept():
    # GIVEN a child that writes, straight to fd 2 (as torch's C++ side does), a marker, the warning an
    # interrupted warm-up gives, and a line of its own, inside the block that drops the warning
    code = ("import os\nfrom profuse.capture._quiet import CANCELLED, quiet_profiler_markers\n"
            "with quiet_profiler_markers(also=(CANCELLED,)):\n"
            f"    os.write(2, b'USDT: stop\\n' + {WARNING!r} + b'mine\\n')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=dict(os.environ), check=True)
    # THEN only its own line reaches stderr
    assert out.stderr == b"mine\n"
