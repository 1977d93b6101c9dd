"""Builds the optional compiled scanner; everything else is configured in pyproject.toml.

The extension is optional: where no C compiler is found the package installs without it and
profuse decodes traces with the msgspec reference path instead.
"""
from __future__ import annotations

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Build extensions, but let an install without a compiler go on (pure-Python fallback)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as err:  # noqa: BLE001 - any compiler failure leaves the fallback in place
            if os.environ.get("PROFUSE_REQUIRE_SCANNER"):
                raise
            print(f"profuse: compiled scanner not built ({err}); using the msgspec decoder")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as err:  # noqa: BLE001
            if os.environ.get("PROFUSE_REQUIRE_SCANNER"):
                raise
            print(f"profuse: compiled scanner not built ({err}); using the msgspec decoder")


# PROFUSE_SCAN_CFLAGS / PROFUSE_SCAN_LDFLAGS: e.g. the sanitizer build of `make sanitize`
CFLAGS = os.environ.get("PROFUSE_SCAN_CFLAGS")
extra = CFLAGS.split() if CFLAGS else (["/O2"] if os.name == "nt" else ["-O3", "-Wall", "-Wextra"])

# -pthread: the scanner's join copies on a second thread (older glibcs keep pthread_create in libpthread)
LDFLAGS = os.environ.get("PROFUSE_SCAN_LDFLAGS", "").split() + ([] if os.name == "nt" else ["-pthread"])

setup(
    ext_modules=[Extension("profuse.trace._scan", ["src/profuse/trace/_scan.c"], extra_compile_args=extra,
                           extra_link_args=LDFLAGS),
                 Extension("profuse.trace._accel", ["src/profuse/trace/_accel.c"], extra_compile_args=extra,
                           extra_link_args=LDFLAGS)],
    cmdclass={"build_ext": OptionalBuildExt},
)
