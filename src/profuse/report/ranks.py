"""The cross-rank report (``profuse.ranks/1``) as JSON, console tables and one self-contained HTML page."""
from __future__ import annotations

import html
import statistics
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..payloads.ranks import RANKS_SCHEMA, ranks_payload
from .console import fmt_us

SHOW = 10


def render_ranks_json(doc: dict[str, Any]) -> str:
    """A cross-rank document as indented JSON; ``profuse.ranks/1`` is checked against its record first
    (the ranks diff, ``profuse.ranks-diff/1``, is written as it is)."""
    from .json_report import render_json

    return render_json(ranks_payload(doc) if doc.get("schema") == RANKS_SCHEMA else doc)


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


def print_ranks(con: Console, doc: dict[str, Any], top: int | None = 25) -> None:
    """Print the rank report: per-rank rows, stragglers and cross-rank findings."""
    ranks = doc["ranks"]
    kinds = sorted({r["device_kind"] for r in ranks})
    con.print(Text(f"{doc['source']}", style="bold"))
    con.print(f"{doc['ranks_found']} ranks (named by {doc['rank_source']}) · {', '.join(kinds)} · "
              f"clock reference: rank {doc['clock']['reference_rank']}")
    t = Table(title="Ranks", title_justify="left")
    for col in ("Rank", "Trace", "Device", "Compute", "Comm", "Overlap", "Memory", "Idle", "Step median",
                "Clock offset"):
        t.add_column(col, justify="left" if col == "Trace" else "right")
    shown = ranks if not top else ranks[:top]
    for r in shown:
        t.add_row(str(r["rank"]), Text(_name(r["path"])), _us(r["device_us"]), _us(r["compute_us"]), _us(r["comm_us"]),
                  "-" if r["overlap_pct"] is None else f"{r['overlap_pct']:.0f}%", _us(r["memory_us"]),
                  _us(r["idle_us"]), _us(r["step_median_us"]),
                  "unknown" if r["clock_offset_us"] is None else fmt_us(r["clock_offset_us"]))
    con.print(t)
    skipped = [r for r in ranks if r.get("skipped_events")]
    if skipped:
        con.print(Text(f"--lenient skipped {sum(r['skipped_events'] for r in skipped):,} bad events on "
                       f"{len(skipped)} rank(s): " + ", ".join(f"rank {r['rank']}: {r['skipped_events']:,}"
                                                             for r in skipped[:8]), style="red"))
    if len(shown) < len(ranks):
        con.print(Text(f"... {len(ranks) - len(shown)} more ranks (--top 0 shows all)", style="dim"))
    late = [s for s in doc["stragglers"] if s["late_collectives"]]
    if late:
        t = Table(title="Stragglers: ranks that arrived last at collectives, by the wait they caused",
                  title_justify="left")
        for col in ("Rank", "Late collectives", "Wait caused (all other ranks)"):
            t.add_column(col, justify="right")
        for s in late[:SHOW]:
            t.add_row(str(s["rank"]), str(s["late_collectives"]), fmt_us(s["wait_caused_us"]))
        con.print(t)
    elif doc["collectives"]:
        con.print("No rank arrived late at any matched collective.")
    else:
        con.print(Text("No collective call was found on every rank: stragglers and clock offsets unknown.",
                       style="yellow"))
    if doc["unmatched_rank_events"]:
        con.print(Text(f"{doc['unmatched_rank_events']:,} collective kernels are not on every rank and were not "
                       "matched (subgroups, or a trace window that cut a call).", style="yellow"))
    skewed = sorted(doc["collectives"], key=lambda c: -c["skew_us"])[:SHOW]
    if skewed and skewed[0]["skew_us"] > 0:
        t = Table(title="Collective skew (largest): last arrival minus first, clocks aligned", title_justify="left")
        for col in ("Collective", "Bytes", "Skew", "Last arriver"):
            t.add_column(col, justify="left" if col == "Collective" else "right")
        for c in skewed:
            t.add_row(Text(f"{c['name']} #{c['seq']}"), _bytes(c["bytes"]), fmt_us(c["skew_us"]),
                      "-" if c["last_arriver"] is None else str(c["last_arriver"]))
        con.print(t)
    _print_heat(con, doc["steps"], top)
    if doc["varying_ops"]:
        t = Table(title="Ops whose device time varies most across ranks", title_justify="left")
        for col in ("Op", "Ranks", "Min", "Max", "Spread", "Slowest rank"):
            t.add_column(col, justify="left" if col == "Op" else "right")
        for o in doc["varying_ops"][:SHOW]:
            t.add_row(Text(o["name"]), str(o["ranks"]), fmt_us(o["min_us"]), fmt_us(o["max_us"]), fmt_us(o["spread_us"]),
                      str(o["max_rank"]))
        con.print(t)
    if doc["fusion"]:
        t = Table(title="Fusion candidates, merged over ranks", title_justify="left")
        for col in ("Pattern", "Scope", "Ranks", "Instances", *SAVINGS, "Do"):
            t.add_column(col, justify="right" if col in ("Ranks", "Instances", *SAVINGS) else "left")
        for f in doc["fusion"][:SHOW]:
            t.add_row(Text(f["pattern"]), Text(f["scope"]), str(f["ranks"]), str(f["instances"]),
                      *_savings(f), Text(f["recommendation"]))
        con.print(t)


# ranks run in parallel: a saving is per rank (the median) and per step, never summed over ranks
SAVINGS = ("Saving per rank (median)", "Step-time saving")


def _savings(f: dict[str, Any]) -> list[str]:
    return ["-" if f[k] is None else fmt_us(f[k]) for k in ("saving_per_rank_us", "step_saving_us")]


def _print_heat(con: Console, steps: dict[str, Any], top: int | None) -> None:
    if not steps["steps"]:
        return
    cols = steps["steps"][:12]
    vals = [v for row in steps["dur_us"] for v in row[:12] if v is not None]
    med = statistics.median(vals) if vals else 0.0
    t = Table(title="Step time per rank (red: slower than the median step)", title_justify="left")
    t.add_column("Rank", justify="right")
    for s in cols:
        t.add_column(f"#{s}", justify="right")
    pairs = list(zip(steps["ranks"], steps["dur_us"]))
    for rank, row in pairs[:top] if top else pairs:
        cells = []
        for v in row[:12]:
            if v is None:
                cells.append(Text("-"))
                continue
            ratio = v / med if med else 1.0
            style = "bold red" if ratio > 1.1 else "yellow" if ratio > 1.02 else ""
            cells.append(Text(fmt_us(v), style=style))
        t.add_row(str(rank), *cells)
    con.print(t)


# --- HTML ----------------------------------------------------------------------------------------

CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
STYLE = """
body{font:13px system-ui,sans-serif;margin:24px;color:#222}h1{font-size:18px}h2{font-size:15px;margin-top:28px}
table{border-collapse:collapse}td,th{padding:3px 8px;border-bottom:1px solid #eee;text-align:right}
th{background:#f6f6f6}td.l,th.l{text-align:left}.bar{background:#c0392b;height:10px}.note{color:#666}
.heat td{border:1px solid #fff;min-width:52px;font-size:11px}
"""


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _table(headers: list[str], rows: list[list[str]], left: tuple[int, ...] = (), cls: str = "") -> str:
    head = "".join(f'<th class="{"l" if i in left else ""}">{_e(h)}</th>' for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i in left else ""}">{c}</td>' for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _heat_color(ratio: float) -> str:
    """White at the median step, deeper red the slower, blue the faster."""
    if ratio >= 1:
        a = min((ratio - 1) / 0.5, 1.0)
        return f"rgba(192,57,43,{a:.2f})"
    a = min((1 - ratio) / 0.5, 1.0)
    return f"rgba(41,128,185,{a:.2f})"


def render_ranks_html(doc: dict[str, Any]) -> str:
    """The rank report as one self-contained HTML page, every string from a trace escaped."""
    ranks = doc["ranks"]
    parts = [f"<h1>profuse: {doc['ranks_found']} ranks · {_e(doc['source'])}</h1>",
             f'<p class="note">Ranks named by {_e(doc["rank_source"])}; clocks aligned to rank '
             f'{_e(doc["clock"]["reference_rank"])} from collective end times.</p>', "<h2>Ranks</h2>"]
    parts.append(_table(
        ["Rank", "Trace", "Device", "Compute", "Comm", "Overlap", "Memory", "Idle", "Step median", "Clock offset"],
        [[_e(r["rank"]), _e(_name(r["path"])), _e(_us(r["device_us"])), _e(_us(r["compute_us"])),
          _e(_us(r["comm_us"])), "-" if r["overlap_pct"] is None else f"{r['overlap_pct']:.0f}%",
          _e(_us(r["memory_us"])), _e(_us(r["idle_us"])), _e(_us(r["step_median_us"])),
          _e("unknown" if r["clock_offset_us"] is None else fmt_us(r["clock_offset_us"]))] for r in ranks],
        left=(1,)))
    parts.append("<h2>Stragglers</h2>")
    late = [s for s in doc["stragglers"] if s["late_collectives"]]
    if late:
        parts.append(_table(["Rank", "Late collectives", "Wait caused (all other ranks)"],
                            [[_e(s["rank"]), _e(s["late_collectives"]), _e(fmt_us(s["wait_caused_us"]))]
                             for s in late[:SHOW * 2]]))
    else:
        parts.append('<p class="note">No rank arrived late at a matched collective (or none was matched).</p>')
    steps = doc["steps"]
    if steps["steps"]:
        vals = [v for row in steps["dur_us"] for v in row if v is not None]
        med = statistics.median(vals) if vals else 0.0
        parts.append("<h2>Step time, rank × step</h2>")
        rows = []
        for rank, row in zip(steps["ranks"], steps["dur_us"]):
            cells = [_e(rank)]
            for v in row:
                if v is None:
                    cells.append("-")
                else:
                    color = _heat_color(v / med if med else 1.0)
                    cells.append(f'<span title="{_e(fmt_us(v))}" style="display:block;background:{color}">'
                                 f"{_e(fmt_us(v))}</span>")
            rows.append(cells)
        parts.append(_table(["Rank"] + [f"#{s}" for s in steps["steps"]], rows, cls="heat"))
    calls = doc["collectives"]
    if calls:
        worst = max(c["skew_us"] for c in calls) or 1.0
        parts.append("<h2>Collective skew</h2>"
                     '<p class="note">Per matched call: last arrival minus first (kernel start, clocks aligned).</p>')
        rows = [[_e(f"{c['name']} #{c['seq']}"), _e(_bytes(c["bytes"])), _e(fmt_us(c["skew_us"])),
                 f'<div class="bar" style="width:{200 * c["skew_us"] / worst:.0f}px"></div>',
                 _e("-" if c["last_arriver"] is None else c["last_arriver"])] for c in calls[:500]]
        parts.append(_table(["Collective", "Bytes", "Skew", "", "Last arriver"], rows, left=(0, 3)))
        if len(calls) > 500:
            parts.append(f'<p class="note">{len(calls) - 500} more calls in the JSON report.</p>')
    if doc["varying_ops"]:
        parts.append("<h2>Ops varying most across ranks</h2>")
        parts.append(_table(["Op", "Ranks", "Min", "Max", "Spread", "Slowest rank"],
                            [[_e(o["name"]), _e(o["ranks"]), _e(fmt_us(o["min_us"])), _e(fmt_us(o["max_us"])),
                              _e(fmt_us(o["spread_us"])), _e(o["max_rank"])] for o in doc["varying_ops"]], left=(0,)))
    if doc["fusion"]:
        parts.append("<h2>Fusion candidates, merged over ranks</h2>")
        parts.append(_table(["Pattern", "Scope", "Ranks", "Instances", *SAVINGS, "Do"],
                            [[_e(f["pattern"]), _e(f["scope"]), _e(f["ranks"]), _e(f["instances"]),
                              *(_e(v) for v in _savings(f)), _e(f["recommendation"])] for f in doc["fusion"]],
                            left=(0, 1, 6)))
    return (f'<!doctype html><html><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f"<title>profuse ranks report</title><style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n")


def print_ranks_diff(con: Console, d: dict[str, Any], top: int | None = 15) -> None:
    """``profuse diff DIR_A DIR_B`` on the console."""
    a, b = d["a"], d["b"]
    con.print(Text(f"A: {a['source']} ({a['ranks']} ranks)\nB: {b['source']} ({b['ranks']} ranks)", style="bold"))
    speed = "unknown" if d["step_speedup"] is None else f"{d['step_speedup']:.2f}x"
    con.print(f"median step {_us(a['step_median_us'])} -> {_us(b['step_median_us'])}: {speed}; slowest rank's "
              f"step {_us(a['slowest_step_median_us'])} -> {_us(b['slowest_step_median_us'])}; wait at collectives "
              f"{_us(a['wait_us_total'])} -> {_us(b['wait_us_total'])}")
    for side, only in (("A", d["ranks_only_in_a"]), ("B", d["ranks_only_in_b"])):
        if only:
            con.print(Text(f"ranks only in {side}: {', '.join(map(str, only[:20]))}"
                           + (" ..." if len(only) > 20 else ""), style="yellow"))
    rows = sorted(d["per_rank"], key=lambda r: -abs(r["delta_step_median_us"] or 0.0))
    t = Table(title="Ranks, largest step-time change first", title_justify="left")
    for col in ("Rank", "Step A", "Step B", "Delta", "Comm A", "Comm B", "Idle A", "Idle B", "Wait caused A",
                "Wait caused B"):
        t.add_column(col, justify="right")
    for r in rows[:top] if top else rows:
        delta = r["delta_step_median_us"]
        t.add_row(str(r["rank"]), _us(r["a_step_median_us"]), _us(r["b_step_median_us"]),
                  Text("unknown" if delta is None else f"{delta:+.1f} µs",
                       style="" if delta is None else "green" if delta < 0 else "red"),
                  _us(r["a_comm_us"]), _us(r["b_comm_us"]), _us(r["a_idle_us"]), _us(r["b_idle_us"]),
                  _us(r["a_wait_caused_us"]), _us(r["b_wait_caused_us"]))
    con.print(t)
