"""The ops view's kernel list says what the table row says (real Chromium, the explorer's real server): the
kernels under a row sum to its device total, and the device events under no row are told by reason in the
console's words."""
from __future__ import annotations

import json
import urllib.parse

import oracle
import pytest
import test_explorer_browser as explorer_browser
from conftest import trace_path
from explorer_util import running
from test_explorer_browser import open_view

import profuse
from profuse.cli import main
from profuse.units import fmt_us

browser, page, pytestmark = explorer_browser.browser, explorer_browser.page, explorer_browser.pytestmark


def _listed(page) -> dict[str, tuple[int, str]]:
    """The opened row's kernel list: name -> (calls, device time as shown)."""
    page.wait_for_selector("#op-kernels tbody tr")
    cells = page.locator("#op-kernels tbody tr").evaluate_all(
        "rows => rows.map(r => [r.cells[0].textContent, r.cells[1].textContent, r.cells[2].textContent])")
    return {n: (int(c), t) for n, c, t in cells}


def _row_cell(page, name: str, column: str) -> str:
    """The text of the ops table's ``column`` (its heading) in the row named ``name``."""
    table = page.locator("main table").first
    heads = table.locator("thead th").all_inner_texts()
    row = table.locator("tbody tr", has=page.locator("td.name", has_text=name)).first
    return row.locator("td").nth(heads.index(column)).inner_text()


@pytest.mark.parametrize(("name", "group", "row", "expected"), [
    # a compiled region: its 12 kernels (8 names) run under it, none launched by the region's own call
    ("mi300_torch_compile_triton.json.gz", "op", "Torch-Compiled Region: 0/0", oracle.kernels_under_op),
    # aten::linear launches nothing itself: its kernels are aten::addmm's under it
    ("h100_bert_small.json.gz", "op", "aten::linear", oracle.kernels_under_op),
    # a module class whose kernels all run in modules inside it
    ("h100_bert_small.json.gz", "module", "BertLayer", oracle.kernels_under_module_class),
])
def test_a_row_lists_the_kernels_of_its_device_total(page, name, group, row, expected):
    # GIVEN a row with device time under it and none of its own (self 0)
    path = trace_path(name)
    want = expected(path, row)
    total = float(sum(us for _, us in want.values()))
    assert want and total > 0
    with profuse.load(path) as t, running([t]) as url:
        dev = t.device_label
        open_view(page, url, "ops", f"&group={group}&op={urllib.parse.quote(row)}")
        listed = _listed(page)
        text = page.inner_text("#op-kernels")
        shown_total = _row_cell(page, row, f"{dev} total")
    # THEN the list holds every kernel under it (raw JSON: launched inside its calls or modules), with the calls and
    # time under it, and says they sum to the device total the table row shows
    assert listed == {k: (n, fmt_us(float(us))) for k, (n, us) in want.items()}
    assert shown_total == fmt_us(total)
    assert f"{dev} total {fmt_us(total)}: the {len(want)} kernel name(s)" in page.inner_text("#kernels-sum")
    assert "no device work" not in text and f"Kernels under {row}" in text


def test_events_under_no_row_are_told_by_reason_as_the_report_does(page, monkeypatch, capsys):
    # GIVEN the MTIA trace: 974 device events no op launched, 730 of them with a launch call outside any op and
    # 244 with no correlation (the report's JSON totals and its console notes)
    name = "mtia_inference.json.gz"
    assert main(["report", str(trace_path(name)), "--format", "json", "--no-cache"]) == 0
    unlinked = json.loads(capsys.readouterr().out)["totals"]["unlinked"]
    assert unlinked == {"launch_outside_op": 730, "no_correlation": 244}
    monkeypatch.setenv("COLUMNS", "240")
    assert main(["report", str(trace_path(name)), "--no-cache"]) == 0
    console = [line.strip() for line in capsys.readouterr().out.splitlines() if " not linked: " in line]
    assert len(console) == 2
    with profuse.load(trace_path(name)) as t, running([t]) as url:
        ops = json.loads(_get(url, "/api/0/ops?group_by=op"))["rows"]
        open_view(page, url, "ops", f"&op={urllib.parse.quote(ops[0]['key'])}")
        page.wait_for_selector("#under-no-row li")
        said = page.locator("#under-no-row li").all_inner_texts()
        head = page.inner_text("#under-no-row p")
    # THEN the opened row says the same reasons, with the same counts and words as the console
    assert said == console
    assert head.startswith(f"{sum(unlinked.values()):,} device event(s) of this trace are under no row")
    assert "have no op (not linked to a launch)" not in page.inner_text("#op-kernels")


def _get(url, path: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url.at(path)) as r:
        return r.read().decode()
