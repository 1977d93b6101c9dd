from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PROFUSE_SHARED", REPO.parent / "shared"))
TRACES = SHARED / "traces"
ALL_TRACES = sorted(TRACES.glob("*.json.gz")) + sorted((TRACES / "multirank").glob("*.json.gz"))
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own user cache folder; shared/ is read-only and must stay untouched."""
    d = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("PROFUSE_CACHE_DIR", str(d))
    return d


def trace_path(name: str) -> Path:
    p = TRACES / name
    if not p.exists():
        pytest.skip(f"shared trace {name} not present")
    return p
