from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PROFUSE_SHARED", REPO / "tests" / "data"))
TRACES = SHARED / "traces"
FIXTURES = REPO / "tests" / "fixtures"
# real bundles recorded on an H200 (tests/fixtures/h200/README.md): eager, CUDA graph, compiled, both
H200_TRACES = sorted((FIXTURES / "h200").glob("*/trace.json.gz")) + sorted((FIXTURES / "h200").glob("*/*/trace.json.gz"))
ALL_TRACES = sorted(TRACES.glob("*.json.gz")) + sorted((TRACES / "multirank").glob("*.json.gz")) + H200_TRACES


def trace_id(path: Path) -> str:
    """A test id for a trace: its file name, or for a recorded fixture its folder under tests/fixtures."""
    return str(path.parent.relative_to(FIXTURES)) if path.is_relative_to(FIXTURES) else path.name


def _shared_listing() -> dict[str, tuple[int, int]]:
    """Every path under shared/ with its size and modification time (what a stray write would change)."""
    out = {}
    for root, dirs, files in os.walk(SHARED):
        for name in dirs + files:
            p = os.path.join(root, name)
            st = os.lstat(p)
            out[os.path.relpath(p, SHARED)] = (st.st_size, st.st_mtime_ns)
    return out


_SHARED_BEFORE: dict[str, tuple[int, int]] = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    # The engine's tests read the real traces in tests/data/traces (copies of other projects' traces,
    # tests/data/README.md); without them most would be skipped and a green run would prove nothing.
    if not ALL_TRACES:
        pytest.exit(f"no real traces under {TRACES}: restore tests/data from git, or set PROFUSE_SHARED "
                    "to a folder holding traces/ and neuron/", 2)
    _SHARED_BEFORE.update(_shared_listing())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Tests read the real traces and never write beside them (a test's cache lives in its own folder).
    after = _shared_listing()
    changed = sorted(k for k in after.keys() | _SHARED_BEFORE.keys() if after.get(k) != _SHARED_BEFORE.get(k))
    if changed:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nFAILED: the tests changed {len(changed)} path(s) under {SHARED}: {', '.join(changed[:10])}")


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own user cache folder; the real traces' folder must stay untouched."""
    d = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("PROFUSE_CACHE_DIR", str(d))
    return d


def trace_path(name: str) -> Path:
    p = TRACES / name
    assert p.exists(), f"real trace {name} is missing from {TRACES}"
    return p


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    # lets fixtures see whether the test failed (browser tests save a screenshot then)
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
    return rep


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by Playwright's client, one per test module (a module may define its own)."""
    chromium = "/usr/bin/chromium"
    if not os.path.exists(chromium):
        pytest.skip("Debian chromium not installed (make test installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
        yield b
        b.close()
