"""How an :class:`~profuse.fixes.verify.AdviseResult` shows itself: a few lines, not its fields.

The baseline, each fix tried (its verdict, measured saving with the noise around it, numerics), the
first candidates, the notes and what ``best`` holds; as text (``repr``) and as HTML (a notebook), the
same lines in both, redacted as profuse's other outputs are (module and class names come from the model).
"""
from __future__ import annotations

import html
from typing import TYPE_CHECKING

from ..redact import redact_text, redacted
from ..trace.sql_result import html_table, text_table

if TYPE_CHECKING:
    from .verify import AdviseResult

SHOWN_CANDIDATES = 5
FIX_COLUMNS = ["fix", "scope", "verdict", "saving µs/step", "noise µs", "predicted µs", "max abs err"]
CANDIDATE_COLUMNS = ["pattern", "scope", "instances", "device µs", "predicted saving µs"]


def _head(res: AdviseResult) -> str:
    verified = len(res.applied)
    return (f"profuse.advise on {res.device_kind}: {res.before_us:,.1f} µs device time per step before; "
            f"{len(res.candidates)} candidate(s), {len(res.fixes)} fix(es) tried, {verified} verified faster")


def _fix_rows(res: AdviseResult) -> list[list[str]]:
    return [[f.fix, f.scope, f.verdict, f"{f.measured_saving_us:,.2f}",
             f"{max(f.scope_before_spread_us, f.scope_after_spread_us):,.2f}", f"{f.predicted_saving_us:,.2f}",
             f"{f.max_abs_err:.3g}"] for f in res.fixes]


def _candidate_rows(res: AdviseResult) -> list[list[str]]:
    return [[c.pattern, c.scope, f"{c.instances:,}", f"{c.device_us:,.1f}", f"{c.predicted_saving_us:,.1f}"]
            for c in res.candidates[:SHOWN_CANDIDATES]]


def _tail(res: AdviseResult) -> list[str]:
    out = []
    left = len(res.candidates) - SHOWN_CANDIDATES
    if left > 0:
        out.append(f"... {left} more candidate(s) in .candidates")
    out += [f"note: {n}" for n in res.notes]
    if res.best is not None:
        out.append(f".best: a copy of the model with the {len(res.applied)} verified fix(es) applied")
    else:
        out.append(".best: None (no fix verified faster: keep the model as it is)")
    out.append(f"bundles: {res.bundle}")
    return out


def summary_text(res: AdviseResult) -> str:
    """The result as lines of text: what a terminal or ``print`` shows."""
    fixes, cands = redacted((_fix_rows(res), _candidate_rows(res)))
    parts = [redact_text(_head(res))]
    if fixes:
        parts += ["", "fixes tried (saving: median before - after, in the candidate's scope):",
                  text_table(FIX_COLUMNS, fixes)]
    if cands:
        parts += ["", "candidates (device time and predicted saving over the analysis profile):",
                  text_table(CANDIDATE_COLUMNS, cands)]
    return "\n".join([*parts, "", *(redact_text(t) for t in _tail(res))])


def summary_html(res: AdviseResult) -> str:
    """The result as HTML: what a notebook shows (the same lines as :func:`summary_text`)."""
    fixes, cands = redacted((_fix_rows(res), _candidate_rows(res)))
    parts = [f"<p><b>{html.escape(redact_text(_head(res)))}</b></p>"]
    if fixes:
        parts.append(html_table(FIX_COLUMNS, fixes, "profuse-advise-fixes"))
    if cands:
        parts += ["<p>candidates (device time and predicted saving over the analysis profile):</p>",
                  html_table(CANDIDATE_COLUMNS, cands, "profuse-advise-candidates")]
    parts += [f"<p><small>{html.escape(redact_text(t))}</small></p>" for t in _tail(res)]
    return "".join(parts)
