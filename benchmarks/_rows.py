"""The rows every benchmark reports to ``make bench`` (benchmarks/bench_all.py prints them as one table).

A row is one measure of issue 23's table: what was measured, the figure, the target and whether it holds
(None where it could not be measured, with the reason as the figure). A benchmark run with ``--rows FILE``
writes its rows there as JSON; bench_all.py runs each benchmark so and reads them back.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Row:
    """One measure: ``figure`` as printed (``"0.21 s"``, ``"212 MB/s"``), ``holds`` against ``target``."""

    measure: str
    figure: str
    target: str
    holds: bool | None
    baseline: str = ""  # what it was measured against in the same run (HTA, the scanner alone), if anything


def write_rows(rows: list[Row], path: str | Path | None) -> None:
    """``rows`` as JSON in ``path`` (nothing when ``path`` is None)."""
    if path:
        Path(path).write_text(json.dumps([asdict(r) for r in rows], indent=2))


def read_rows(path: str | Path) -> list[Row]:
    """The rows a benchmark wrote with :func:`write_rows`."""
    return [Row(**r) for r in json.loads(Path(path).read_text())]
