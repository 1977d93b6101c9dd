"""One report over a whole distributed run: map each rank's trace to Parquet, reduce with DuckDB.

    result = run_ranks("traces/")                  # a folder (or glob) of rank traces
    result = run_ranks("run/*.json.gz", engine="ray", ray_address="head-node:6379")
    result.doc                                     # the profuse.ranks/1 document

The coordinator lives in :mod:`profuse.ranks.coordinator`; its names are imported from there on first
use, so that ``profuse.ranks.discover`` (which every ``profuse report`` asks whether its path is a set
of ranks) costs no DuckDB, numpy or engine import.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .coordinator import (
        ENGINES,
        SCHEMA,
        RanksResult,
        candidates,
        discover,
        open_tables,
        reduce,
        run_ranks,
        set_folder,
    )

__all__ = ["ENGINES", "SCHEMA", "RanksResult", "candidates", "discover", "open_tables", "reduce", "run_ranks",
           "set_folder"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import coordinator

        return getattr(coordinator, name)
    raise AttributeError(name)
