"""The report's opening lines: where the step's time went and the levers that buy it back.

Renders a :class:`~profuse.payloads.diagnosis.DiagnosisPayload` and computes nothing: every figure
printed is one of the record's (the JSON, the HTML report and the explorer show the same ones).
"""
from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from ..analysis.diagnosis.records import GRADE_MEANINGS, Leaf
from ..payloads.diagnosis import BudgetDiff, DiagnosisPayload, StepGroup
from ..units import fmt_us
from ._text import safe, signed_us, text
from .terminal import renders_printable

BAR = 60
STYLE = {"busy": "green", "idle": "red", "cpu": "green", "unrecorded": "magenta"}
SHOWN_LEVERS = 5


def _part(leaves: Sequence[Leaf], prefix: str) -> tuple[float, str]:
    mine = [lf for lf in leaves if lf.key.startswith(prefix)]
    total = round(sum(lf.pct for lf in mine), 2)
    inner = ", ".join(f"{lf.key.partition('/')[2]} {lf.pct:.0f}%" for lf in sorted(mine, key=lambda x: -x.us)[:3]
                      if lf.pct >= 0.5 and "/" in lf.key)
    return total, inner


def budget_line(label: str, leaves: Sequence[Leaf], device: bool) -> Text:
    """``decode x5: busy 96% (gemm 66%, attention 5%) idle 4% (launch_overhead 3%)``."""
    t = Text()
    t.append(safe(label), style="bold")
    t.append(": ")
    groups = (("busy/", "busy"), ("idle/", "idle"), ("unrecorded/", "unrecorded")) if device else (
        ("cpu/", "cpu"), ("idle", "idle"))
    for prefix, word in groups:
        total, inner = _part(leaves, prefix)
        if not total and word != groups[0][1]:
            continue
        t.append(f"{word} {total:.0f}%", style=STYLE[word])
        t.append(f" ({inner}) " if inner else " ")
    return t


def _letters(leaves: Sequence[Leaf]) -> dict[str, str]:
    """A distinct letter per leaf: the first of its name not taken by a larger leaf."""
    out: dict[str, str] = {}
    for lf in sorted(leaves, key=lambda x: -x.us):
        name = lf.key.partition("/")[2] or lf.key
        free = [c for c in name.replace("_", "") + "abcdefghijklmnopqrstuvwxyz" if c not in out.values()]
        out[lf.key] = free[0] if free else "?"
    return out


def bar(leaves: Sequence[Leaf]) -> Text:
    """The budget as one bar of BAR cells, busy green and idle red, a letter per leaf, and the letters' legend."""
    t = Text("  ")
    letters = _letters([lf for lf in leaves if round(lf.pct / 100 * BAR)])
    for lf in leaves:
        n = round(lf.pct / 100 * BAR)
        if n:
            kind = lf.key.partition("/")[0]
            t.append(letters[lf.key] * n, style=f"black on {STYLE.get(kind, 'red')}")
    t.append("  " + " · ".join(f"{c} {k}" for k, c in letters.items()), style="dim")
    return t


def _group_label(g: StepGroup) -> str:
    figures = (("batch", g.batch), ("tokens", g.tokens), ("KV tokens", g.kv_tokens))
    serving = ", ".join(f"{word} {v:,.0f}" if v == int(v) else f"{word} {v:,.1f}" for word, v in figures
                        if v is not None)
    return f"{g.kind} x{g.count} ({fmt_us(g.span_us)}{', ' + serving + ' per step' if serving else ''})"


def _base(d: DiagnosisPayload) -> str:
    """What the levers' shares are of: the device window where an unrecorded wait sits in the span, else the span."""
    return f"the device window ({fmt_us(d.window_us)})" if d.window_us < d.span_us else "the span"


def _outside(us: float) -> str:
    """The levers' heading's words for the part of the combined gain that levers graded outside the trace take."""
    return f"; {fmt_us(us)} of it outside the trace" if us > 0 else ""


@renders_printable
def render_diagnosis(console: Console, d: DiagnosisPayload) -> None:
    """Print the budget (one line per kind of step, and its bar) and the top levers with gain and how."""
    what = "steady steps" if d.scope == "steps" else "active window"
    console.print(Text(f"Where the time went ({what}, {fmt_us(d.span_us)})", style="bold underline"))
    if d.groups:
        for g in d.groups:
            console.print(budget_line(_group_label(g), g.budget, d.device))
            console.print(bar(g.budget))
    else:
        console.print(budget_line("active window", d.budget, d.device))
        console.print(bar(d.budget))
    for s in d.steps:
        if s.warmup:
            console.print(budget_line(f"warm-up {s.name} ({fmt_us(s.span_us)})", s.budget, d.device), style="dim")
    for note in d.notes:
        console.print(text(f"  {note}", style="yellow"))
    if not d.levers:
        console.print(Text(f"No lever above 1% of {_base(d)}.", style="dim"))
        return
    console.print(Text(f"Levers (pulling all: {fmt_us(d.combined_gain_us)} of {fmt_us(d.span_us)}, "
                       f"no time counted twice{_outside(d.combined_outside_us)})", style="bold underline"))
    grades = dict.fromkeys(lv.grade for lv in d.levers[:SHOWN_LEVERS])
    console.print(Text("  [confidence, grade] " + "; ".join(f"{g}: {GRADE_MEANINGS.get(g, g)}" for g in grades),
                       style="dim"))
    for i, lv in enumerate(d.levers[:SHOWN_LEVERS], 1):
        line = Text(f"  {i}. ")
        line.append(safe(lv.kind), style="bold cyan")
        line.append(" ")
        line.append(text(lv.target))
        of = f" of {lv.share_of}" if lv.share_of else ""
        line.append(f"  save up to {fmt_us(lv.gain_us)} ({lv.share_pct:.0f}%{of}) [{lv.confidence}, {lv.grade}]",
                    style="bold")
        console.print(line)
        console.print(text(f"     {lv.evidence}", style="dim"))
        console.print(text(f"     how: {lv.how}"))
    rest = len(d.levers) - SHOWN_LEVERS
    if rest > 0:
        console.print(Text(f"  {rest} more lever(s): --format json lists them all", style="dim"))
    if d.small_items.count:
        console.print(text(f"  small items: {d.small_items.count} lever(s) under 1% of {_base(d)}, "
                           f"{fmt_us(d.small_items.gain_us)} together ({', '.join(d.small_items.kinds)})",
                           style="dim"))


@renders_printable
def render_budget_diff(console: Console, d: BudgetDiff) -> None:
    """``profuse diff``: the two budgets leaf by leaf, largest change first."""
    from .fit import Column, print_fitted

    console.print(text(f"Budget ({d.a_scope} {fmt_us(d.a_span_us)} -> {d.b_scope} {fmt_us(d.b_span_us)})",
                       style="bold underline"))
    cols = [Column("Leaf", name=True), Column("A", keep=3), Column("A %", keep=1), Column("B", keep=3),
            Column("B %", keep=1), Column("Delta", keep=4)]
    print_fitted(console, cols, [
        [text(r.key), fmt_us(r.a_us), f"{r.a_pct:.1f}%", fmt_us(r.b_us), f"{r.b_pct:.1f}%",
         Text(signed_us(r.delta_us), style="green" if r.delta_us < 0 else "red" if r.delta_us > 0 else "")]
        for r in d.rows])
