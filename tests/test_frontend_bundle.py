"""The front end's two ways onto a page: script by script (explorer) and one inline script (report)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import trace_path

import profuse.frontend as frontend
from profuse.cli import main


def test_the_explorer_page_loads_the_modules_then_its_start_script():
    page = (frontend.STATIC / "index.html").read_text()
    assert page.count(frontend.script_tags()) == 1
    srcs = re.findall(r'<script src="/assets/([^"]+)"></script>', page)
    assert srcs == [*frontend.MODULES, frontend.EXPLORER_START]
    assert "type=\"module\"" not in page


def test_inline_script_is_the_files_joined_as_they_are():
    js = frontend.inline_script()
    pos = 0
    for name in (*frontend.MODULES, frontend.REPORT_START):
        src = (frontend.STATIC / name).read_text()
        found = js.index(src, pos)  # each file whole and in order: nothing rewritten
        pos = found + len(src)
    assert (frontend.STATIC / frontend.EXPLORER_START).read_text() not in js
    assert js.count("profuse.app.start(") == 1, "started once, over the embedded data"
    assert not re.search(r"^\s*(import|export)\b", js, re.MULTILINE), "classic scripts: no module syntax"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_inline_script_parses_as_one_classic_script(tmp_path):
    f = tmp_path / "inline.js"
    f.write_text(frontend.inline_script())
    r = subprocess.run(["node", "--check", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_inline_script_refuses_a_file_that_would_end_the_script_element(tmp_path, monkeypatch):
    static = tmp_path / "static"
    shutil.copytree(frontend.STATIC, static)
    views = static / "views.js"
    views.write_text(views.read_text() + "\n// a note: </SCRIPT> ends an inline script\n")
    monkeypatch.setattr(frontend, "STATIC", static)
    with pytest.raises(ValueError, match=r"views\.js: holds '</script'"):
        frontend.inline_script()


def test_the_report_holds_one_inline_script_and_a_strict_policy(tmp_path: Path):
    out = tmp_path / "report.html"
    assert main(["report", str(trace_path("a100_event_sync.json.gz")), "--format", "html", "-o", str(out)]) == 0
    html = out.read_text()
    scripts = re.findall(r"<script([^>]*)>", html)
    assert scripts == [' type="application/json" id="profuse-data"', ""]
    assert "/assets/" not in html
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    assert "script-src 'unsafe-inline'" in csp and "default-src 'none'" in csp and "'self'" not in csp
    assert html.count(frontend.inline_script()) == 1
