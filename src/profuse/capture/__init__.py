"""Capture: ProfileConfig, profile(), Exporter, `profuse run`, bundles, peaks. Needs torch."""
from __future__ import annotations

from .bundle import is_bundle, read_meta, write_bundle
from .config import STREAMS, ProfileConfig
from .peaks import peaks
from .profiler import Exporter, Profile, profile, profile_calls
from .runner import RunResult, run_script

__all__ = ["STREAMS", "Exporter", "Profile", "ProfileConfig", "RunResult", "is_bundle", "peaks", "profile", "profile_calls",
           "read_meta", "run_script", "write_bundle"]
