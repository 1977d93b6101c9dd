"""Console output at 80 columns (issue 46): no line of ``report`` or ``study`` longer than the terminal, no
table cell folded over two lines, names shortened in the middle (whole in JSON), columns left out said.

The width is ``COLUMNS`` (set here as a user's shell sets it; the output is captured, so not a tty).
Widths are counted in terminal cells (``rich.cells.cell_len``), as the terminal shows them.
"""
from __future__ import annotations

import json
import re

import pytest
from conftest import ALL_TRACES, TRACES, trace_id
from rich.cells import cell_len

from profuse.cli import main
from profuse.report.fit import ELLIPSIS, Column, fitted_table, shorten_middle


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def _too_long(text: str, width: int) -> list[str]:
    return [ln for ln in text.splitlines() if cell_len(ln) > width]


@pytest.mark.parametrize("width", [80, 100])
@pytest.mark.parametrize("path", ALL_TRACES, ids=trace_id)
def test_every_report_line_fits(path, width, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", str(width))
    code, text = _run(capsys, "report", str(path))
    assert code == 0, text
    assert not _too_long(text, width), "\n".join(_too_long(text, width))


@pytest.mark.parametrize("group", ["shape", "module", "kernel"])
def test_grouped_reports_fit(group, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    for path in (TRACES / "h100_bert_small.json.gz", TRACES / "mi300_torch_compile_triton.json.gz"):
        code, text = _run(capsys, "report", str(path), "--group-by", group)
        assert code == 0, text
        assert not _too_long(text, 80), "\n".join(_too_long(text, 80))


def _table_lines(text: str) -> list[str]:
    """The op table's body rows: the lines after its ``━`` rule, up to the first line without ``│``."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("━"))
    out = []
    for ln in lines[start + 1:]:
        if "│" not in ln:
            break
        out.append(ln)
    return out


def test_op_table_rows_never_wrap_and_names_shorten_in_the_middle(monkeypatch, capsys):
    path = TRACES / "h100_bert_small.json.gz"
    monkeypatch.setenv("COLUMNS", "200")
    _, wide = _run(capsys, "report", str(path), "--format", "json", "--top", "0")
    names = [r["name"] for r in json.loads(wide)["ops"]]
    monkeypatch.setenv("COLUMNS", "80")
    code, text = _run(capsys, "report", str(path), "--top", "0")
    assert code == 0
    rows = _table_lines(text)
    assert len(rows) == len(names)             # one line per op: no cell folded over two
    shown = [r.split("│")[0].strip() for r in rows]
    short = [s for s in shown if ELLIPSIS in s]
    assert short, "no name needed shortening at 80 columns: the test proves nothing"
    for s in short:
        head, tail = s.split(ELLIPSIS)
        # the JSON keeps the whole name, and exactly one whole name has this head and tail
        assert sum(n.startswith(head) and n.endswith(tail) and len(n) > len(s) for n in names) >= 1, s
    assert set(shown) - set(short) <= set(names)
    m = re.search(r"columns left out at this width: ([^(]+)\(", text.replace("\n", " "))
    assert m and "CPU total" in m.group(1), text


def test_wide_terminal_shows_every_column_and_whole_names(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "250")
    code, text = _run(capsys, "report", str(TRACES / "h100_bert_small.json.gz"), "--top", "0")
    assert code == 0 and "columns left out" not in text
    assert "aten::_scaled_dot_product_flash_attention" in text and ELLIPSIS not in "".join(_table_lines(text))


def test_compiled_kernel_names_shorten_to_one_line(monkeypatch, capsys):
    # GIVEN a compiled ROCm trace whose Tensile GEMM kernels have names of about 500 characters
    from profuse.report.console import ADVICE_ROWS
    from profuse.units import fmt_us

    path = str(TRACES / "mi300_torch_compile_triton.json.gz")
    code, out = _run(capsys, "report", path, "--format", "json")
    assert code == 0
    kernels = [k for r in json.loads(out)["compiled"]["regions"] for k in r["kernels"][:ADVICE_ROWS]]
    assert max(len(k["name"]) for k in kernels) > 300
    monkeypatch.setenv("COLUMNS", "100")
    code, out = _run(capsys, "report", path)
    lines = out.splitlines()
    # THEN each kernel's line starts with its name shortened in the middle (whole in JSON) and ends its
    # figure on that line: no name wraps over several
    for k in kernels:
        short = shorten_middle(k["name"], 50)
        assert any(ln.startswith(f"    {short}  {fmt_us(k['device_us'])}") for ln in lines), short


def test_fitted_table_drops_lowest_keep_first_and_never_the_kept():
    from rich.console import Console

    cols = [Column("Name", name=True), Column("A", keep=3), Column("B", keep=1), Column("C", keep=None),
            Column("D", keep=1)]
    rows = [["x" * 60, "1" * 10, "2" * 10, "3" * 10, "4" * 10]]
    # 70 columns: four 10-wide figures and their separators leave 18 for the name (< 24): D goes (keep 1, the
    # right-most of the two); 60: B goes too; A (keep 3) and C (never) stay
    for width, gone in ((70, ["D"]), (60, ["B", "D"])):
        con = Console(width=width, color_system=None)
        table, dropped = fitted_table(con, cols, rows)
        assert dropped == gone
        with con.capture() as cap:
            con.print(table)
        lines = cap.get().splitlines()
        assert all(cell_len(ln) <= width for ln in lines) and len(lines) == 3   # header, rule, one row
    # with no room even for the shortest name, the never-dropped columns stay and nothing is lost silently
    tight = Console(width=20, color_system=None)
    _, dropped = fitted_table(tight, cols, rows)
    assert "C" not in dropped and set(dropped) == {"A", "B", "D"}


@pytest.mark.parametrize("s,width", [("aten::_scaled_dot_product_flash_attention", 20), ("ab", 5),
                                      ("模型模型模型模型", 9), ("abcdef", 1)])
def test_shorten_middle(s, width):
    out = shorten_middle(s, width)
    assert cell_len(out) <= width
    if cell_len(s) <= width:
        assert out == s
    elif width > 1:
        head, tail = out.split(ELLIPSIS)
        assert s.startswith(head) and s.endswith(tail) and len(head) >= len(tail)


def test_study_fits_80_columns(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "a-rather-long-folder-name-for-the-study-bundles" / "rmsnorm"
    code, text = _run(capsys, "study", "rmsnorm", "--device", "cpu", "--shape", "2,8,64", "--iters", "3",
                      "--out", str(out))
    assert code == 0, text
    assert "op_by_op" in text and "torch.rms_norm" in text
    assert not _too_long(text, 80), "\n".join(_too_long(text, 80))


def test_ranks_report_fits_80_columns(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    code, text = _run(capsys, "report", str(TRACES / "multirank"))
    assert code == 0, text
    assert "Ranks" in text
    assert not _too_long(text, 80), "\n".join(_too_long(text, 80))


def test_a_shortened_cell_keeps_its_styles():
    # the call tree's bold function and dim location kept their styles only where nothing was shortened
    from rich.text import Text

    from profuse.report.fit import _fit_cell

    cell = Text.assemble(("forward", "bold"), "  ", ("modeling_bert.py:1306", "dim"))
    out = _fit_cell(cell, 20)
    assert cell_len(out.plain) <= 20 and out.plain.startswith("forward") and out.plain.endswith(":1306")
    styles = {str(s.style) for s in out.spans}
    assert {"bold", "dim"} <= styles
    assert out.plain[:7] == "forward" and any(s.start == 0 and s.end == 7 and str(s.style) == "bold" for s in out.spans)


def test_hotspot_names_keep_head_and_tail(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN the ROCm trace whose two hottest GEMMs are Tensile kernels of 371-375 characters
    from conftest import trace_path

    code, out = _run(capsys, "report", str(trace_path("mi250_rocm_toy_train.json.gz")), "--format", "json")
    assert code == 0
    names = [h["name"] for h in json.loads(out)["hotspots"] if h["kind"] == "kernel"][:5]
    long = [n for n in names if len(n) > 60 and " " not in n]  # the Tensile names (no space the line may wrap at)
    assert len(long) >= 2
    # WHEN the console prints its Hotspots
    code, text = _run(capsys, "report", str(trace_path("mi250_rocm_toy_train.json.gz")))
    assert code == 0
    kernels = text[text.index("\nHotspots"):].split("kernels: ", 1)[1]
    # THEN each long name shows its head and its tail around the ellipsis (as every name the console shortens),
    # never its first 60 characters cut without a mark
    for name in long:
        shown = shorten_middle(name, 60)
        assert ELLIPSIS in shown and shown.endswith(name[-10:])
        assert shown in kernels.replace("\n", "")
        assert name[:60] + " " not in kernels


def test_hotspot_names_that_would_read_the_same_are_shown_apart(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN sglang's decode on an MI300X, whose hottest kernels include Tensile GEMMs that differ only in the
    # middle of their names (macro tile MT32x32x256 against MT64x32x256, both ending ..._WS64_WG16_4_4)
    from conftest import trace_path

    from profuse.report.fit import shorten_apart

    path = str(trace_path("mi300_sglang_decode_cudagraph.json.gz"))
    code, out = _run(capsys, "report", path, "--format", "json")
    assert code == 0
    names = [h["name"] for h in json.loads(out)["hotspots"] if h["kind"] == "kernel"][:5]
    assert len({shorten_middle(n, 60) for n in names}) < len(set(names))   # the old cut made two of them one
    # WHEN the console prints its Hotspots
    code, text = _run(capsys, "report", path)
    kernels = text[text.index("\nHotspots"):].split("kernels: ", 1)[1].replace("\n", "")
    # THEN every kernel reads apart from the others, each shown as its head and tail around the ellipsis
    shown = shorten_apart(names, 60)
    assert len(set(shown)) == len(set(names))
    for name, s in zip(names, shown):
        assert s in kernels and (s == name or (ELLIPSIS in s and name.endswith(s.split(ELLIPSIS)[1])))
    # AND names that read apart keep the 60-cell cut
    assert shorten_apart(["a" * 70, "b" * 70], 60) == [shorten_middle("a" * 70, 60), shorten_middle("b" * 70, 60)]
