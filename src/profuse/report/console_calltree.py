"""The console's Python call tree: the largest call paths, indented, with total, self and Python time.

A frame that only passes the time on (one child shown, little self time: ``_call_impl`` around each
``forward``, a decorator's wrapper) is not given a row of its own; the next row says how many such
frames it stands for (``+3``), so deep stacks fit the terminal. Names come from the trace: text only.
"""
from __future__ import annotations

from rich.console import Console
from rich.text import Text

from ..analysis.calltree import CallNode, CallTree
from ..units import fmt_us
from ._text import safe
from .fit import Column, print_fitted
from .terminal import renders_printable

MODULE_PREFIX = "nn.Module: "
MAX_ROWS = 40          # rows the section prints at most (the JSON report and the explorer hold the whole tree)
MIN_ROW_PCT = 1.0      # a node under this share of all Python time gets no row
PASS_SELF_PCT = 1.0    # a single-child node whose self time is under this share passes the time on
INDENT_CAP = 12        # levels of indentation at most: deeper rows say their depth instead


def _passes_on(node: CallNode, shown_children: int, total_us: float) -> bool:
    return shown_children == 1 and node.folded == 0 and node.self_us < total_us * PASS_SELF_PCT / 100


Row = tuple[CallNode, int, int, str]


def _rows(tree: CallTree) -> tuple[list[Row], int]:
    """(node, indentation, frames passed through right above it, the nn.Module among them) per row, and
    how many nodes got no row for their size."""
    floor = tree.total_us * MIN_ROW_PCT / 100
    nodes = tree.nodes
    visible = [False] * len(nodes)
    kids = [0] * len(nodes)
    for n in nodes:                  # depth first: a parent comes before its children
        visible[n.id] = n.total_us >= floor and (n.parent < 0 or visible[n.parent])
        if visible[n.id] and n.parent >= 0:
            kids[n.parent] += 1
    child_depth, carry, module = [0] * len(nodes), [0] * len(nodes), [""] * len(nodes)
    rows: list[Row] = []
    for n in nodes:
        if not visible[n.id]:
            continue
        up = n.parent
        base, pre, mod = (child_depth[up], carry[up], module[up]) if up >= 0 else (0, 0, "")
        if _passes_on(n, kids[n.id], tree.total_us):
            child_depth[n.id], carry[n.id] = base, pre + 1
            module[n.id] = n.name[len(MODULE_PREFIX):] if n.name.startswith(MODULE_PREFIX) else mod
            continue
        rows.append((n, base, pre, mod))
        child_depth[n.id] = base + 1
    return rows, visible.count(False)


def _name(node: CallNode, depth: int, passed: int, module: str) -> Text:
    indent = min(depth, INDENT_CAP)
    out = Text("  " * indent)
    if depth > INDENT_CAP:
        out.append(f"[{depth}] ", style="dim")
    if passed:
        out.append(f"+{passed} ", style="dim")
    if node.folded:
        out.append(f"other ({node.folded:,} paths)", style="dim italic")
        return out
    out.append(safe(node.function), style="bold" if node.depth == 0 else "")
    if module:
        out.append(f" [{safe(module)}]", style="cyan")
    if node.location:  # the file's own name: its folders rarely tell functions apart
        out.append(f"  {safe(node.location.rsplit('/', 1)[-1])}", style="dim")
    return out


@renders_printable
def render_calltree(console: Console, tree: CallTree | None) -> None:
    """Print the call tree section (nothing for a trace without Python frames)."""
    if tree is None or not tree.nodes:
        return
    console.print(Text("\nPython call tree (python_function events)", style="bold underline"))
    waiting = (f";\n{fmt_us(tree.waiting_us)} of it waiting (in a frame that waits: a lock, a wait, a sleep, a "
               "select, autograd's backward; not Python time)" if tree.waiting_us else "")
    console.print(Text(f"{fmt_us(tree.total_us)} in {tree.frames:,} frames on {tree.threads} thread(s), "
                       f"{tree.paths:,} call paths;\n{fmt_us(tree.python_us)} of it in Python itself "
                       f"(Python column: in no op or runtime call){waiting}", style="dim"))
    rows, left = _rows(tree)
    shown = rows[:MAX_ROWS]
    cols = [Column("Total", keep=None), Column("Self", keep=None), Column("Python", keep=1),
            Column("Calls", keep=0), Column("Function  (+N: frames passed through)", name=True, left=True)]
    print_fitted(console, cols, [[fmt_us(n.total_us), fmt_us(n.self_us), fmt_us(n.python_us), f"{n.calls:,}",
                                  _name(n, d, p, m)] for n, d, p, m in shown])
    more = len(rows) - len(shown) + left
    if more:
        console.print(Text(f"{more:,} smaller nodes not shown (under {MIN_ROW_PCT:g}% or past {MAX_ROWS} rows): "
                           "--format json or profuse explore has the whole tree", style="dim"))
