"""``profuse diff A B``: what changed between two runs."""
from __future__ import annotations

import argparse

from ..errors import UserError
from ._common import add_load_args, console, count, emit, load_trace
from .ranks import add_rank_args, diff_rank_sets

HELP = """examples:
  profuse diff before/ after/                   two bundles
  profuse diff base.json.gz test.json.gz --format json
  profuse diff run_a/ run_b/                    two folders of rank traces: rank by rank
Ops and modules are matched by name, so a CUDA run and a ROCm run compare; kernels are matched by
name only between runs on the same kind of device. Two rank folders are compared rank by rank
(matched by rank number): step time, device, communication and idle time, wait caused.
Names longer than 72 characters are cut in the middle ("…") in the table; --format json gives them whole.
"""


def add_parser(subs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``profuse diff``."""
    p = subs.add_parser("diff", help="compare two runs: time deltas, kernels removed/added, speedup",
                        epilog=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", help="the baseline trace or bundle")
    p.add_argument("b", help="the trace or bundle to compare with it")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--top", type=count, default=15)
    add_load_args(p)
    add_rank_args(p)
    p.set_defaults(func=run)


def _middle(name: str, width: int = 72) -> str:
    """One line for a long C++ template kernel name: its start and its end (where kernels differ), cut
    in the middle; --format json gives the whole name."""
    return name if len(name) <= width else name[: width * 3 // 5] + "…" + name[-(width * 2 // 5 - 1):]


def run(args: argparse.Namespace) -> int:
    """Compare two traces, bundles or folders of rank traces and print or write the differences."""
    from ..ranks.discover import candidates

    files_a, files_b = candidates(args.a), candidates(args.b)
    if files_a is not None or files_b is not None:
        if files_a is None or files_b is None:
            one, many = (args.a, args.b) if files_a is None else (args.b, args.a)
            raise UserError(f"{many} holds several rank traces but {one} is one trace: "
                            "compare two folders of rank traces, or two traces")
        return diff_rank_sets(args, files_a, files_b)
    from rich.table import Table
    from rich.text import Text

    from ..payloads.build import compare_of
    from ..report._text import safe, text
    from ..report.console import fmt_us

    with load_trace(args.a, args) as a, load_trace(args.b, args) as b:
        d = compare_of(a, b)
    if args.format == "json":
        from ..report.json_report import render_json

        return emit(render_json(d), None)
    con = console()
    con.print(Text(f"A: {safe(d.a)}\nB: {safe(d.b)}", style="bold"))
    con.print(Text(f"device time {fmt_us(d.a_device_us)} -> {fmt_us(d.b_device_us)}: "
                   f"{d.speedup:.2f}x" + ("" if d.same_device else "  (different device kinds: kernels not matched)")))
    if d.budget is not None:
        from ..report.console_diagnosis import render_budget_diff

        render_budget_diff(con, d.budget)
    for title, rows in (("Ops", d.ops), ("Modules", d.modules), ("Kernels", d.kernels)):
        if not rows:
            continue
        t = Table(title=title, show_edge=False, header_style="bold", title_justify="left")
        for c in ("Name", "Calls A", "Calls B", "Time A", "Time B", "Delta"):
            t.add_column(c, justify="left" if c == "Name" else "right", no_wrap=True)
        for r in rows[:args.top]:
            t.add_row(text(_middle(r.name)), str(r.a_calls), str(r.b_calls), fmt_us(r.a_us), fmt_us(r.b_us),
                      Text(f"{r.delta_us:+.1f} µs", style="green" if r.delta_us < 0 else "red"))
        con.print(t)
    if d.kernels:
        con.print(Text(f"{len(d.kernels_removed)} kernel name(s) removed, {len(d.kernels_added)} added"))
    return 0
