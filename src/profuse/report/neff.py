"""Terminal rendering of a NEFF read by :mod:`profuse.neuron.neff`.

Every string here comes from the NEFF (graph, engine, tensor and HLO names, the compiler's JSON), so
each goes through :func:`._text.text`: never parsed as markup, control characters shown as escapes.
"""
from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..neuron.neff import Neff, Subgraph
from ._text import safe, text
from .terminal import renders_printable


def number(v: Any, unit: str = "") -> str:
    """A statistic as the compiler wrote it: ``unknown`` when absent, not a number, or not finite."""
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return "unknown" if v is None else f"unknown (not a number: {safe(repr(v))[:40]})"
    if isinstance(v, float) and not math.isfinite(v):
        return f"unknown ({v})"
    return (f"{v:,}" if isinstance(v, int) else f"{v:,.2f}") + unit


@renders_printable
def print_neff(con: Console, neff: Neff, *, top: int | None = 20) -> None:
    """Header, HLO statistics, then per subgraph: engines, tensors and where instructions came from."""
    h = neff.header
    t = Text()
    t.append(f"{safe(neff.path)}\n", style="bold")
    t.append(f"NEFF {safe(h.version)} · {safe(h.packaging)} · name {safe(h.name or 'unknown')} · "
             f"{h.data_size:,} payload bytes, {neff.members} archive members\n")
    check = {True: "matches the payload", False: "does not match the payload", None: "not recorded"}[h.checksum_ok]
    t.append(f"checksum {safe(h.checksum or '-')} ({check}) · uuid {safe(h.uuid)}\n", style="dim")
    t.append(f"compiler {safe(neff.compiler_version or 'unknown')} · target {safe(neff.target or 'unknown')} · "
             f"NeuronCores {h.num_tpb} (requested {h.requested_tpb_count})")
    con.print(t)
    s = neff.hlo_stats
    if s:
        con.print(Text(f"HLO statistics (as the compiler recorded them): MACs {number(s.get('macs'))} · "
                       f"traffic {number(s.get('traffic'))} · "
                       f"arithmetic intensity {number(s.get('arithmetic_intensity'))}"))
    for sg in neff.subgraphs:
        _print_subgraph(con, sg, top)
    for note in neff.notes:
        con.print(text(note, style="yellow"))


def _print_subgraph(con: Console, sg: Subgraph, top: int | None) -> None:
    name = safe(sg.name)
    eng = Table(title=Text(f"subgraph {name}: engines"), title_justify="left")
    eng.add_column("Engine")
    eng.add_column("Instructions", justify="right")
    eng.add_column("Bytes", justify="right")
    eng.add_column("Stream")
    for e in sg.engines:
        eng.add_row(text(e.name), number(e.instructions), number(e.bytes), text(e.file))
    con.print(eng)
    if sg.dma_queues:
        con.print(text("DMA queues: " + ", ".join(f"{k} {v}" for k, v in sg.dma_queues.items())))
    ten = Table(title=Text(f"subgraph {name}: tensors"), title_justify="left")
    for c, j in (("Tensor", "left"), ("Kind", "left"), ("Dtype", "left"), ("Shape", "left"), ("Bytes", "right")):
        ten.add_column(c, justify=j)  # type: ignore[arg-type]
    for tn in sg.tensors:
        shape = "×".join(map(str, tn.shape)) if tn.shape is not None else "unknown"
        ten.add_row(text(tn.name), text(tn.kind), text(tn.dtype or "unknown"), shape, number(tn.bytes))
    con.print(ten)
    if sg.mapping or sg.unmapped:
        m = Table(title=Text(f"subgraph {name}: instructions by source (debug info)"), title_justify="left")
        for c in ("Engine", "Instructions", "HLO", "Framework", "Source", "BIR"):
            m.add_column(c, justify="right" if c == "Instructions" else "left")
        rows = sorted(sg.mapping, key=lambda r: (r.engine, -r.instructions))
        for r in rows[:top] if top else rows:
            bir = ", ".join(r.bir[:3]) + (f" +{len(r.bir) - 3}" if len(r.bir) > 3 else "")
            m.add_row(text(r.engine), f"{r.instructions:,}", text(r.hlo or "-"), text(r.framework or "-"),
                      text(r.source or "-"), text(bir))
        for engine, n in sg.unmapped.items():
            m.add_row(text(engine), f"{n:,}", Text("(no source in the debug info)", style="dim"), "", "", "")
        con.print(m)
        if top and len(rows) > top:
            con.print(Text(f"{len(rows) - top:,} more rows: --top 0 shows all", style="dim"))
