"""Terminal rendering of a NEFF read by :mod:`profuse.neuron.neff`."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..neuron.neff import Neff


def _n(v: int | float | None, unit: str = "") -> str:
    if v is None:
        return "unknown"
    return (f"{v:,}" if isinstance(v, int) else f"{v:,.2f}") + unit


def print_neff(con: Console, neff: Neff, *, top: int | None = 20) -> None:
    """Header, HLO statistics, then per subgraph: engines, tensors and where instructions came from."""
    h = neff.header
    t = Text()
    t.append(f"{neff.path}\n", style="bold")
    t.append(f"NEFF {h.version} · {h.packaging} · name {h.name or 'unknown'} · {h.data_size:,} payload bytes, "
             f"{neff.members} archive members\n")
    check = {True: "matches the payload", False: "does not match the payload", None: "not recorded"}[h.checksum_ok]
    t.append(f"checksum {h.checksum or '-'} ({check}) · uuid {h.uuid}\n", style="dim")
    t.append(f"compiler {neff.compiler_version or 'unknown'} · target {neff.target or 'unknown'} · "
             f"NeuronCores {h.num_tpb} (requested {h.requested_tpb_count})")
    con.print(t)
    s = neff.hlo_stats
    if s:
        con.print(f"HLO statistics (as the compiler recorded them): MACs {_n(s.get('macs'))} · "
                  f"traffic {_n(s.get('traffic'))} · arithmetic intensity {_n(s.get('arithmetic_intensity'))}")
    for sg in neff.subgraphs:
        _print_subgraph(con, sg, top)
    for note in neff.notes:
        con.print(Text(note, style="yellow"))


def _print_subgraph(con: Console, sg, top: int | None) -> None:
    eng = Table(title=f"subgraph {sg.name}: engines", title_justify="left")
    eng.add_column("Engine")
    eng.add_column("Instructions", justify="right")
    eng.add_column("Bytes", justify="right")
    eng.add_column("Stream")
    for e in sg.engines:
        eng.add_row(e.name, _n(e.instructions), _n(e.bytes), e.file)
    con.print(eng)
    if sg.dma_queues:
        con.print("DMA queues: " + ", ".join(f"{k} {v}" for k, v in sg.dma_queues.items()))
    ten = Table(title=f"subgraph {sg.name}: tensors", title_justify="left")
    for c, j in (("Tensor", "left"), ("Kind", "left"), ("Dtype", "left"), ("Shape", "left"), ("Bytes", "right")):
        ten.add_column(c, justify=j)  # type: ignore[arg-type]
    for tn in sg.tensors:
        shape = "×".join(map(str, tn.shape)) if tn.shape is not None else "unknown"
        ten.add_row(Text(tn.name), tn.kind, tn.dtype or "unknown", shape, _n(tn.bytes))
    con.print(ten)
    if sg.mapping or sg.unmapped:
        m = Table(title=f"subgraph {sg.name}: instructions by source (debug info)", title_justify="left")
        for c in ("Engine", "Instructions", "HLO", "Framework", "Source", "BIR"):
            m.add_column(c, justify="right" if c == "Instructions" else "left")
        rows = sorted(sg.mapping, key=lambda r: (r.engine, -r.instructions))
        for r in rows[:top] if top else rows:
            bir = ", ".join(r.bir[:3]) + (f" +{len(r.bir) - 3}" if len(r.bir) > 3 else "")
            m.add_row(r.engine, f"{r.instructions:,}", Text(r.hlo or "-"), Text(r.framework or "-"),
                      Text(r.source or "-"), Text(bir))
        for engine, n in sg.unmapped.items():
            m.add_row(engine, f"{n:,}", Text("(no source in the debug info)", style="dim"), "", "", "")
        con.print(m)
        if top and len(rows) > top:
            con.print(Text(f"{len(rows) - top:,} more rows: --top 0 shows all", style="dim"))
