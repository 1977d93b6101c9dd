"""Tables that fit the terminal: names shortened in the middle, columns dropped before anything wraps.

A table is laid out for ``console.width`` (the terminal's width; ``COLUMNS`` where set; 200 when piped).
Every figure column keeps its natural width (its longest cell; a header may break between words), so
no number is ever folded. The name columns (op, kernel, module, scope) take what is left, each name
shortened in the middle (``aten::_scaled_dot…_attention``: the head and the tail say the most); the
JSON report keeps the whole name. Where even the shortest names do not fit, the figure columns with
the lowest ``keep`` go first (the right-most of equals), and the caller says which were left out.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ._text import text

ELLIPSIS = "…"
SEPARATOR = 3   # " │ " between two columns (no edge, no edge padding)
MIN_NAME = 24   # a name column narrower than this is no longer readable: drop a figure column instead
Cell = Text | str


@dataclass(frozen=True)
class Column:
    """One column: its header, whether it is a name (shortened to fit), left-aligned, and how long it is kept
    (higher: kept longer; ``None``: never dropped)."""

    header: str
    name: bool = False
    left: bool = False
    keep: int | None = 0


def shorten_middle(s: str, width: int) -> str:
    """``s`` in at most ``width`` cells: its head and tail around ``…`` (the head a little longer)."""
    if cell_len(s) <= width:
        return s
    if width <= 1:
        return ELLIPSIS[:width]
    head = (width - 1) * 3 // 5
    tail = width - 1 - head
    out_head, out_tail = _take(s, head), _take(s[::-1], tail)[::-1]
    return f"{out_head}{ELLIPSIS}{out_tail}"


def shorten_apart(names: list[str], width: int) -> list[str]:
    """Each of ``names`` shortened by :func:`shorten_middle` to ``width`` cells, wider where two different names
    would read the same (kernels that differ only in the middle: Tensile's ``Cijk_..._WG16_4_4``): those are
    given 20 cells more at a time until they read apart or whole."""
    out = [shorten_middle(n, width) for n in names]
    wide = width
    while True:
        seen: dict[str, set[str]] = {}
        for n, o in zip(names, out):
            seen.setdefault(o, set()).add(n)
        clash = {o for o, full in seen.items() if len(full) > 1}
        if not clash or wide >= max(cell_len(n) for n in names):
            return out
        wide += 20
        out = [shorten_middle(n, wide) if o in clash else o for n, o in zip(names, out)]


def _take(s: str, cells: int) -> str:
    """The longest prefix of ``s`` at most ``cells`` wide (wide characters count twice)."""
    out, used = [], 0
    for ch in s:
        w = cell_len(ch)
        if used + w > cells:
            break
        out.append(ch)
        used += w
    return "".join(out)


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _natural(col: Column, cells: Sequence[Cell]) -> int:
    """A column's width when nothing is shortened: its widest cell, and its header's longest word."""
    header = max((cell_len(w) for w in col.header.split()), default=0)
    return max([header, *(cell_len(_plain(c)) for c in cells)])


def _layout(width: int, cols: Sequence[Column], natural: Sequence[int]) -> tuple[list[int], dict[int, int]]:
    """The columns kept (indexes) and each name column's width."""
    kept = list(range(len(cols)))
    while True:
        names = [i for i in kept if cols[i].name]
        fixed = sum(natural[i] for i in kept if not cols[i].name) + SEPARATOR * (len(kept) - 1)
        room = width - fixed
        floor = sum(min(natural[i], MIN_NAME) for i in names)
        droppable = [i for i in kept if not cols[i].name and cols[i].keep is not None]
        if room >= floor or not droppable:
            return kept, _share(max(room, floor), names, natural)
        lowest = min(cols[i].keep or 0 for i in droppable)
        kept.remove(max(i for i in droppable if (cols[i].keep or 0) == lowest))


def _share(room: int, names: list[int], natural: Sequence[int]) -> dict[int, int]:
    """Split ``room`` among the name columns: each its natural width where all fit, else in proportion
    (at least its share of the minimum)."""
    want = sum(natural[i] for i in names)
    if want <= room or not names:
        return {i: natural[i] for i in names}
    out = {i: max(min(natural[i], MIN_NAME), room * natural[i] // want) for i in names}
    over = sum(out.values()) - room
    for i in sorted(names, key=lambda i: -out[i]):   # the widest give back what the minimums took
        give = min(over, out[i] - min(natural[i], MIN_NAME))
        out[i] -= max(give, 0)
        over -= max(give, 0)
    return out


def fitted_table(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[Cell]],
                 *, title: str | None = None) -> tuple[Table, list[str]]:
    """A rich Table of ``rows`` that fits ``console.width``, and the headers of the columns left out."""
    natural = [_natural(c, [r[i] for r in rows]) for i, c in enumerate(columns)]
    kept, name_width = _layout(console.width, columns, natural)
    widths = _widen_headers(console.width, columns, kept, natural, name_width)
    t = Table(show_edge=False, header_style="bold", pad_edge=False, title=title,
              title_justify="left" if title else "center")
    for i in kept:
        col = columns[i]
        t.add_column(col.header, justify="left" if col.left or col.name else "right", no_wrap=False,
                     width=widths[i], overflow="ellipsis")
    for r in rows:
        t.add_row(*(_fit_cell(r[i], name_width.get(i)) for i in kept))
    return t, [columns[i].header for i in range(len(columns)) if i not in kept]


def _widen_headers(width: int, cols: Sequence[Column], kept: list[int], natural: Sequence[int],
                   name_width: dict[int, int]) -> dict[int, int]:
    """Each kept column's width: a figure column as wide as its header on one line where the room left
    after the names allows (left to right), else as wide as its longest word."""
    out = {i: name_width.get(i, natural[i]) for i in kept}
    slack = width - sum(out.values()) - SEPARATOR * (len(kept) - 1)
    for i in kept:
        grow = cell_len(cols[i].header) - out[i]
        if not cols[i].name and 0 < grow <= slack:
            out[i] += grow
            slack -= grow
    return out


def _fit_cell(cell: Cell, width: int | None) -> Cell:
    if width is None or cell_len(_plain(cell)) <= width:
        return cell
    plain = _plain(cell)
    short = shorten_middle(plain, width)
    if not isinstance(cell, Text):
        return text(short)
    if ELLIPSIS not in short:   # too narrow for a head and a tail
        return Text(short, style=cell.style)
    head, tail = short.split(ELLIPSIS, 1)
    # the head and tail keep their own styles (a call tree's bold name, dim location)
    return Text.assemble(cell[:len(head)], ELLIPSIS, cell[len(plain) - len(tail):], style=cell.style)


def left_out_note(dropped: Sequence[str], what: str = "--format json") -> Text | None:
    """The line that says which columns did not fit, or None."""
    if not dropped:
        return None
    return Text(f"columns left out at this width: {', '.join(dropped)} (a wider terminal or {what} shows them)",
                style="dim")


def print_fitted(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[Cell]],
                 *, title: str | None = None, what: str = "--format json") -> None:
    """Print a fitted table and, where columns did not fit, the line that says which."""
    table, dropped = fitted_table(console, columns, rows, title=title)
    console.print(table)
    note = left_out_note(dropped, what)
    if note is not None:
        console.print(note)
