"""The explorer over a folder of rank traces, in a real browser: the Ranks view, then one rank's views."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import REPO, TRACES
from explorer_util import running

import profuse
from profuse.explorer.server import RankRuns
from profuse.ranks import run_ranks

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM) and not os.environ.get("CI"),
                                reason="Debian chromium not installed (make test installs it)")


@pytest.fixture
def page(request):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run",
                                                                "--disable-background-networking"])
        pg = b.new_page(viewport={"width": 1400, "height": 900})
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        yield pg
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            (REPO / "test-artifacts").mkdir(exist_ok=True)
            pg.screenshot(path=str(REPO / "test-artifacts" / f"{request.node.name}.png"), full_page=True)
        b.close()
        assert not errors, errors


def test_ranks_view_then_click_a_rank(page, tmp_path: Path) -> None:
    folder = TRACES / "multirank"
    doc = run_ranks(str(folder), workers=1, work_dir=tmp_path).doc
    loaded: list[str] = []

    def load(path: str):
        loaded.append(Path(path).name)
        return profuse.load(path)

    rr = RankRuns(doc, load)
    try:
        with running([], ranks=rr) as url:
            page.goto(url.at("/"))
            page.wait_for_selector("body[data-ready=ranks]", timeout=15000)
            n_ranks = len(list(folder.glob("*.json.gz")))  # one row per rank trace in the folder
            assert n_ranks > 1
            assert page.locator("#ranks-table tbody tr").count() == n_ranks
            assert page.locator("#heat tbody tr").count() == n_ranks
            assert page.locator("#skew tbody tr").count() == len(doc.collectives)
            assert loaded == []  # the Ranks view needs no rank's events
            page.locator("#ranks-table tbody tr", has_text="sampled_rank-1").click()
            page.wait_for_selector("body[data-ready=overview]", timeout=30000)
            assert "sampled_rank-1.json.gz" in page.inner_text("main h2")
            assert loaded == ["sampled_rank-1.json.gz"]
            assert not page.locator('#nav a[data-view="compare"]').is_visible()
    finally:
        for r in rr.runs:
            r.unload()


def test_ranks_report_page_is_the_ranks_view_offline(page, tmp_path: Path) -> None:
    """``profuse report DIR --format html``: the shared front end's Ranks view over the embedded document,
    with no rank's own views (they are not in the file) and no network."""
    import json

    from profuse.cli import main

    work = ["--work-dir", str(tmp_path / "work"), "--workers", "1"]
    out = tmp_path / "ranks.html"
    assert main(["report", str(TRACES / "multirank"), "--format", "html", "-o", str(out), *work]) == 0
    assert main(["report", str(TRACES / "multirank"), "--format", "json", "-o", str(tmp_path / "r.json"), *work]) == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(out.as_uri() + "#view=overview")  # a rank's view asked for: the page has only the Ranks view
    page.wait_for_selector("body[data-ready=ranks], body[data-ready=error]", timeout=15000)
    assert page.get_attribute("body", "data-ready") == "ranks", page.get_attribute("body", "data-error")
    assert page.locator("#ranks-table tbody tr").count() == len(doc["ranks"]) > 1
    assert page.locator("#heat tbody tr").count() == len(doc["steps"]["ranks"])
    assert page.locator("#skew tbody tr").count() == min(50, len(doc["collectives"]))
    for v in ("overview", "ops", "timeline", "modules", "compiled", "compare"):
        assert not page.locator(f'#nav a[data-view="{v}"]').is_visible()
    fusion = page.locator("table", has=page.locator("th", has_text="Saving per rank (median)"))
    assert fusion.locator("tbody tr").count() == len(doc["fusion"]) > 0
    page.locator("#ranks-table tbody tr").first.click()  # opens nothing: the rank's tables are not here
    assert page.get_attribute("body", "data-ready") == "ranks"
    assert [u for u in requests if not u.startswith("file:")] == []
