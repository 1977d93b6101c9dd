"""The cross-rank report (``profuse.ranks/1``) as JSON and console tables (its HTML page is the shared
front end's Ranks view: report/html.py ``render_ranks_html``). Names from the traces are shown through
:func:`._text.text`, and printed through :func:`.terminal.printable_on`."""
from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.text import Text

from ..payloads.ranks import MergedCandidate, RanksDiff, RanksDocument, StepTimes
from ..units import fmt_us, fmt_us_or_dash
from ._text import safe, text
from .fit import Column, print_fitted
from .terminal import renders_printable

SHOW = 10


def render_ranks_json(doc: RanksDocument | RanksDiff) -> str:
    """A cross-rank document (``profuse.ranks/1``) or a ranks diff (``profuse.ranks-diff/1``) as indented JSON."""
    from .json_report import render_json

    return render_json(doc)


def _us(v: float | None) -> str:
    return "unknown" if v is None else fmt_us(v)


def _name(path: str) -> str:
    p = Path(path)
    return p.parent.name if p.name in ("trace.json.gz", "trace.json") else p.name


def _bytes(b: int | None) -> str:
    if b is None:
        return "unknown"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b} B"


def _print_head(con: Console, doc: RanksDocument, top: int | None) -> None:
    kinds = sorted({r.device_kind for r in doc.ranks})
    con.print(text(doc.source, style="bold"))
    con.print(text(f"{doc.ranks_found} ranks (named by {doc.rank_source}) · {', '.join(kinds)} · "
                   f"clock reference: rank {doc.clock.reference_rank}"))


def _print_rank_table(con: Console, doc: RanksDocument, top: int | None) -> None:
    ranks = doc.ranks
    # the report's unrecorded waits, where a rank's device window holds any: never called idle
    waits = any(r.unrecorded_us for r in ranks)
    cols = [Column("Rank", keep=None), Column("Trace", name=True), Column("Device", keep=6), Column("Compute", keep=5),
            Column("Comm", keep=5), Column("Overlap", keep=2), Column("Memory", keep=1), Column("Idle", keep=4),
            *([Column("Unrecorded", keep=4)] if waits else []), Column("Step median", keep=6),
            Column("Clock offset", keep=0)]
    shown = ranks if not top else ranks[:top]
    print_fitted(con, cols, [
        [str(r.rank), text(_name(r.path)), _us(r.device_us), _us(r.compute_us), _us(r.comm_us),
         "-" if r.overlap_pct is None else f"{r.overlap_pct:.0f}%", _us(r.memory_us), _us(r.idle_us),
         *([_us(r.unrecorded_us)] if waits else []),
         _us(r.step_median_us), "unknown" if r.clock_offset_us is None else fmt_us(r.clock_offset_us)]
        for r in shown], title="Ranks")
    skipped = [r for r in ranks if r.skipped_events]
    if skipped:
        con.print(Text(f"--lenient skipped {sum(r.skipped_events for r in skipped):,} bad events on "
                       f"{len(skipped)} rank(s): " + ", ".join(f"rank {r.rank}: {r.skipped_events:,}"
                                                             for r in skipped[:8]), style="red"))
    if len(shown) < len(ranks):
        con.print(Text(f"... {len(ranks) - len(shown)} more ranks (--top 0 shows all)", style="dim"))


def _print_stragglers(con: Console, doc: RanksDocument, top: int | None) -> None:
    late = [s for s in doc.stragglers if s.late_collectives]
    if late:
        print_fitted(con, [Column("Rank"), Column("Late collectives"), Column("Wait caused (all other ranks)")],
                     [[str(s.rank), str(s.late_collectives), fmt_us(s.wait_caused_us)] for s in late[:SHOW]],
                     title="Stragglers: ranks that arrived last at collectives, by the wait they caused")
    elif doc.collectives:
        con.print("No rank arrived late at any matched collective.")
    else:
        con.print(Text("No collective call was found on every rank: stragglers and clock offsets unknown.",
                       style="yellow"))
    if doc.unmatched_rank_events:
        con.print(Text(f"{doc.unmatched_rank_events:,} collective kernels are not on every rank and were not "
                       "matched (subgroups, or a trace window that cut a call).", style="yellow"))


def _print_skew(con: Console, doc: RanksDocument, top: int | None) -> None:
    skewed = sorted(doc.collectives, key=lambda c: -c.skew_us)[:SHOW]
    if skewed and skewed[0].skew_us > 0:
        print_fitted(con, [Column("Collective", name=True), Column("Bytes", keep=1), Column("Skew", keep=None),
                           Column("Last arriver", keep=None)],
                     [[text(f"{c.name} #{c.seq}"), _bytes(c.bytes), fmt_us(c.skew_us),
                       "-" if c.last_arriver is None else str(c.last_arriver)] for c in skewed],
                     title="Collective skew (largest): last arrival minus first, clocks aligned")


def _print_steps(con: Console, doc: RanksDocument, top: int | None) -> None:
    _print_heat(con, doc.steps, top)


def _print_varying(con: Console, doc: RanksDocument, top: int | None) -> None:
    if doc.varying_ops:
        # a varying op ran on two ranks at least, so its figures are known: _us prints them as fmt_us does
        print_fitted(con, [Column("Op", name=True), Column("Ranks", keep=1), Column("Min", keep=2), Column("Max", keep=2),
                           Column("Spread", keep=None), Column("Slowest rank", keep=3)],
                     [[text(o.name), str(o.ranks), _us(o.min_us), _us(o.max_us), _us(o.spread_us), str(o.max_rank)]
                      for o in doc.varying_ops[:SHOW]],
                     title="Ops whose device time varies most across ranks")


def _print_fusion(con: Console, doc: RanksDocument, top: int | None) -> None:
    if doc.fusion:
        cols = [Column("Pattern", name=True), Column("Scope", name=True), Column("Ranks", keep=1),
                Column("Instances", keep=2), *(Column(c, keep=4) for c in SAVINGS), Column("Do", name=True)]
        print_fitted(con, cols, [[text(f.pattern), text(f.scope), str(f.ranks), str(f.instances), *_savings(f),
                                  text(f.recommendation)] for f in doc.fusion[:SHOW]],
                     title="Fusion candidates, merged over ranks")


# The rank report's sections in print order, each one function over the cross-rank document.
RANK_SECTIONS: list[Callable[[Console, RanksDocument, int | None], None]] = [
    _print_head, _print_rank_table, _print_stragglers, _print_skew, _print_steps, _print_varying, _print_fusion]


@renders_printable
def print_ranks(con: Console, doc: RanksDocument, top: int | None = 25) -> None:
    """Print the rank report: per-rank rows, stragglers and cross-rank findings."""
    for section in RANK_SECTIONS:
        section(con, doc, top)


# ranks run in parallel: a saving is per rank (the median) and per step, never summed over ranks
SAVINGS = ("Saving per rank (median)", "Step-time saving")


def _savings(f: MergedCandidate) -> list[str]:
    return [fmt_us_or_dash(v) for v in (f.saving_per_rank_us, f.step_saving_us)]


def _print_heat(con: Console, steps: StepTimes, top: int | None) -> None:
    if not steps.steps:
        return
    cols = steps.steps[:12]
    vals = [v for row in steps.dur_us for v in row[:12] if v is not None]
    med = statistics.median(vals) if vals else 0.0
    columns = [Column("Rank", keep=None), *(Column(f"#{s}", keep=12 - i) for i, s in enumerate(cols))]
    pairs = list(zip(steps.ranks, steps.dur_us))
    rows: list[list[Text | str]] = []
    for rank, row in pairs[:top] if top else pairs:
        cells: list[Text | str] = [str(rank)]
        for v in row[:12]:
            if v is None:
                cells.append(Text("-"))
                continue
            ratio = v / med if med else 1.0
            cells.append(Text(fmt_us(v), style="bold red" if ratio > 1.1 else "yellow" if ratio > 1.02 else ""))
        rows.append(cells)
    print_fitted(con, columns, rows, title="Step time per rank (red: slower than the median step)")


@renders_printable
def print_ranks_diff(con: Console, d: RanksDiff, top: int | None = 15) -> None:
    """``profuse diff DIR_A DIR_B`` on the console."""
    a, b = d.a, d.b
    con.print(Text(f"A: {safe(a.source)} ({a.ranks} ranks)\nB: {safe(b.source)} ({b.ranks} ranks)", style="bold"))
    speed = "unknown" if d.step_speedup is None else f"{d.step_speedup:.2f}x"
    con.print(f"median step {_us(a.step_median_us)} -> {_us(b.step_median_us)}: {speed}; slowest rank's "
              f"step {_us(a.slowest_step_median_us)} -> {_us(b.slowest_step_median_us)}; wait at collectives "
              f"{_us(a.wait_us_total)} -> {_us(b.wait_us_total)}")
    for side, only in (("A", d.ranks_only_in_a), ("B", d.ranks_only_in_b)):
        if only:
            con.print(Text(f"ranks only in {side}: {', '.join(map(str, only[:20]))}"
                           + (" ..." if len(only) > 20 else ""), style="yellow"))
    rows = sorted(d.per_rank, key=lambda r: -abs(r.delta_step_median_us or 0.0))
    cols = [Column("Rank", keep=None), Column("Step A", keep=None), Column("Step B", keep=None),
            Column("Delta", keep=None), Column("Comm A", keep=3), Column("Comm B", keep=3), Column("Idle A", keep=2),
            Column("Idle B", keep=2), Column("Wait caused A", keep=1), Column("Wait caused B", keep=1)]
    out: list[list[Text | str]] = []
    for r in rows[:top] if top else rows:
        delta = r.delta_step_median_us
        out.append([str(r.rank), _us(r.a_step_median_us), _us(r.b_step_median_us),
                    Text("unknown" if delta is None else f"{delta:+.1f} µs",
                         style="" if delta is None else "green" if delta < 0 else "red"),
                    _us(r.a_comm_us), _us(r.b_comm_us), _us(r.a_idle_us), _us(r.b_idle_us),
                    _us(r.a_wait_caused_us), _us(r.b_wait_caused_us)])
    print_fitted(con, cols, out, title="Ranks, largest step-time change first")
