"""The README's Python snippets, run as notebook cells (one cell per paragraph) by nbclient on a real
IPython kernel with a real torch model: what each cell shows (the op table once and without CLI flags,
the report inline, the trace, a DataFrame, the advisor's summary and its progress), that ``Trace.sql``
gives an Arrow table whose rows a plain gzip + json reading of the bundle's trace agrees with, and that
the two-line torch.profiler drop-in never overwrites the bundle the cell before it wrote."""
from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import REPO
from nbkernel import errors, execute, kernel_stderr, result, stderr
from oracle import category, complete_events

pytest.importorskip("torch")
pytest.importorskip("pyarrow")

SECTION = "From Python, or a notebook"
# what the README's snippets leave to the reader: a model (one hand-written SiLU, so the advisor has a
# candidate to fix), its batches and an example input
SETUP = """\
import torch
torch.manual_seed(0)
torch.set_num_threads(1)

class HandSiLU(torch.nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 64)
        self.act = HandSiLU()

    def forward(self, x):
        return self.act(self.fc(x))

model = Net().eval()
batches = [torch.randn(8, 64) for _ in range(8)]
batch = example_input = batches[0]
"""
CHECK = """\
import json, pyarrow
table = ops.arrow()
print(json.dumps({"arrow": isinstance(table, pyarrow.Table), "df": type(ops.df()).__module__.split(".")[0],
                  "rows": table.to_pylist(), "bundle": str(p.bundle)}))
"""
DATA = re.compile(r'<script type="application/json" id="profuse-data">(.*?)</script>', re.S)


def readme_cells() -> list[str]:
    """The README's notebook snippet, split at blank lines: one cell per paragraph."""
    text = (REPO / "README.md").read_text()
    block = re.search(re.escape(SECTION) + r".*?```python\n(.*?)```", text, re.S)
    assert block, f"README.md has no python block after {SECTION!r}"
    return [c.strip("\n") for c in re.split(r"\n\s*\n", block.group(1)) if c.strip()]


def _files(folder: Path) -> dict[str, str]:
    return {str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(folder.rglob("*")) if f.is_file()}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The README's cells after a real kernel ran them, named by what they start with."""
    cells = readme_cells()
    tmp = tmp_path_factory.mktemp("nb")
    cwd = tmp / "work"
    cwd.mkdir()
    named = {"setup": 0, **{_name(c): i + 1 for i, c in enumerate(cells)}, "check": len(cells) + 1}
    snapshots: dict[str, dict[str, str]] = {}

    def before(i: int) -> None:  # the bundle as it was before the drop-in cell ran, and a copy of it
        if i == named["drop-in"]:
            snapshots["before"] = _files(cwd / "prof")
            shutil.copytree(cwd / "prof", tmp / "profiled")

    out = execute([SETUP, *cells, CHECK], tmp, cwd, timeout=400, before=before)
    return {"cells": {k: out[i] for k, i in named.items()}, "cwd": cwd, "snapshot": snapshots["before"],
            "stderr": kernel_stderr(tmp),
            "profiled": tmp / "profiled" / "trace.json.gz"}


def _name(cell: str) -> str:
    first = next(ln for ln in cell.splitlines() if not ln.startswith("#"))
    for key, start in (("profile", "cfg = "), ("report", "profuse.report("), ("trace", "trace = "), ("sql", "ops = "),
                       ("drop-in", "with torch.profiler"), ("advise", "res = "), ("best", "if res.best"),
                       ("import", "import ")):
        if first.startswith(start):
            return key
    raise AssertionError(f"a README cell this test does not know: {first!r}")


def test_every_readme_cell_runs(run) -> None:
    assert set(run["cells"]) == {"setup", "import", "profile", "report", "trace", "sql", "drop-in", "advise",
                                 "best", "check"}
    for name, cell in run["cells"].items():
        if name != "drop-in":  # the drop-in may refuse to overwrite: test_the_drop_in_never_overwrites...
            assert errors(cell) == [], name


def test_the_table_is_shown_once_with_the_python_api_s_words(run) -> None:
    cell = run["cells"]["profile"]
    # one output: the table itself (no printed copy, no second HTML report)
    assert [o.output_type for o in cell.outputs if o.output_type != "stream"] == ["execute_result"]
    data = result(cell)
    text, page = data["text/plain"], data["text/html"]
    assert page.startswith('<pre class="profuse-table"') and "<iframe" not in page
    assert html.unescape(re.sub(r"<[^>]+>", "", page)).strip() == text.strip()
    raw = complete_events(run["profiled"])
    ops = {e["name"] for e in raw if category(e) == "cpu_op"}
    assert {"aten::sigmoid", "aten::mul", "aten::linear"} <= ops
    for name in ("aten::sigmoid", "aten::mul", "aten::linear"):
        assert name in text
    assert not re.search(r"--[a-z]", text), "a command-line flag in the Python API's table"


def test_the_report_is_inline_with_its_advice(run) -> None:
    data = result(run["cells"]["report"])
    frame = data["text/html"]
    assert frame.startswith('<iframe class="profuse-report" sandbox="allow-scripts" srcdoc="')
    page = html.unescape(frame.split('srcdoc="', 1)[1].rsplit('"', 1)[0])
    m = DATA.search(page)
    assert m and json.loads(m.group(1))["0/overview"]["advice"] is not None
    assert "\n" not in data["text/plain"]


def test_the_trace_shows_what_it_holds(run) -> None:
    data = result(run["cells"]["trace"])
    raw = complete_events(run["profiled"])
    assert data["text/plain"].startswith("<Trace trace.json.gz: ") and data["text/plain"].endswith(", CPU>")
    page = data["text/html"]
    assert page.startswith('<table class="profuse-trace">')
    assert f"cpu_op {sum(1 for e in raw if category(e) == 'cpu_op'):,}" in page
    for table in ("events", "scopes", "threads", "links"):
        assert re.search(rf"\b{table}\b", page)


def test_sql_gives_an_arrow_table_and_a_dataframe(run) -> None:
    # the cell's DataFrame: pandas is installed here, so pandas draws it
    assert 'class="dataframe"' in result(run["cells"]["sql"])["text/html"]
    [line] = [o.text for o in run["cells"]["check"].outputs if o.output_type == "stream" and o.name == "stdout"]
    got = json.loads(line)
    assert got["arrow"] is True and got["df"] == "pandas"
    # the rows as a plain reading of the bundle's trace file gives them: calls and µs per cpu_op name
    want: dict[str, list[float]] = {}
    assert got["bundle"] == "prof"
    for e in complete_events(run["profiled"]):
        if category(e) == "cpu_op":
            calls_us = want.setdefault(e["name"], [0, 0.0])
            calls_us[0] += 1
            calls_us[1] += e["dur"]
    rows = {r["name"]: r for r in got["rows"]}
    assert rows.keys() == want.keys()
    for name, (calls, us) in want.items():
        assert rows[name]["calls"] == calls and rows[name]["us"] == pytest.approx(us, abs=0.01), name
    assert [r["us"] for r in got["rows"]] == sorted((r["us"] for r in got["rows"]), reverse=True)


def test_the_drop_in_never_overwrites_the_bundle_before_it(run) -> None:
    cwd, cell = run["cwd"], run["cells"]["drop-in"]
    # the bundle profuse.profile wrote is as it was, byte for byte
    assert _files(cwd / "prof") == run["snapshot"]
    # and the drop-in either wrote its own, new folder or said in one line why it did not
    new = [d for d in cwd.iterdir() if d.is_dir() and d.name != "prof" and (d / "meta.json").exists()]
    refused = errors(cell)
    assert (len(new) == 1 and not refused) or (not new and len(refused) == 1 and "prof" in refused[0]), \
        (new, refused)


def test_no_cell_prints_profiler_marker_lines(run) -> None:
    # torch's own "USDT: ... profiler_start" lines, which a notebook draws as errors: in no cell's stderr,
    # nor in what the kernel wrote to its file descriptor 2 (where they are kept even when a cell's
    # stream missed them)
    for name, cell in run["cells"].items():
        assert "USDT" not in stderr(cell), name
    # torch prints one start and one stop line per profiler session to fd 2: the drop-in's session is the
    # user's own torch.profiler (profuse runs no code before it starts, and silencing Kineto's log would
    # hide its errors too), so its pair is the only one; profuse.profile and advise filter theirs
    usdt = [ln.split("]")[-1].strip() for ln in run["stderr"].splitlines() if "USDT" in ln]
    assert usdt == ["profiler_start", "profiler_stop"], usdt


def test_advise_shows_its_progress_and_a_summary(run) -> None:
    cell = run["cells"]["advise"]
    # progress: one text display updated in place (no stderr, which a notebook draws red), each phase a line
    shown = [o for o in cell.outputs if o.output_type in ("display_data", "update_display_data")]
    assert shown and "profuse.advise" not in stderr(cell)
    phases = shown[-1].data["text/plain"].splitlines()
    assert phases[0].startswith("profuse.advise [") and "find fusion candidates" in phases[0]
    assert any("[1/1] SiLU (x * sigmoid(x)) in nn.Module: HandSiLU" in ln for ln in phases)
    assert phases[-1].endswith("verified faster") and "done:" in phases[-1]
    # the result: a summary of a few lines, not a dump of its fields
    data = result(cell)
    text = data["text/plain"]
    lines = text.splitlines()
    assert lines[0].startswith("profuse.advise on CPU: ") and len(lines) < 30
    assert "AdviseResult(" not in text and "Candidate(" not in text
    fixes = [ln for ln in lines if ln.startswith(("swap in torch.nn.functional.silu", "torch.compile the module"))]
    assert len(fixes) == 2 and all("nn.Module: HandSiLU" in ln for ln in fixes)
    assert any(ln.startswith(".best: ") for ln in lines)
    page = data["text/html"]
    assert '<table class="profuse-advise-fixes">' in page and page.count("<tr>") >= 3
