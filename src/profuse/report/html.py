"""``profuse report --format html``: one self-contained file (no network when opened) with the
explorer's overview, ops (openable to their kernels), modules and a decimated timeline, built from
the payloads ``profuse report`` computed and the shared front end; and the cross-rank report, the same
front end opened on its Ranks view."""
from __future__ import annotations

import msgspec

from ..frontend import STATIC, inline_script, payload_json, script_tags
from ..payloads.build import ReportPayloads
from ..payloads.ranks import RanksDocument
from ..payloads.views import RunInfo

CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
       "base-uri 'none'; form-action 'none'")


def embedded(p: ReportPayloads) -> dict[str, object]:
    """The payloads under the API paths the front end asks for (``/api/0/ops`` -> ``0/ops``)."""
    return {"runs": p.runs, "0/overview": p.overview, "0/ops": p.ops, "0/op_kernels": p.op_kernels,
            "0/lanes": p.lanes, "0/timeline": p.timeline, "0/modules": p.modules,
            **({"0/memory": p.memory} if p.memory is not None else {}),
            **({"0/compiled": p.compiled} if p.compiled is not None else {}),
            **({"0/calltree": p.calltree} if p.calltree is not None else {}),
            **({"0/kernel_launches": p.kernel_launches} if p.kernel_launches is not None else {})}


def render_html(payloads: ReportPayloads) -> str:
    """The page: the front end's HTML with its CSS, data and script inlined, under a no-network CSP."""
    return _page(embedded(payloads), "profuse report")


def ranks_embedded(doc: RanksDocument) -> dict[str, object]:
    """A cross-rank report's payloads under the API paths the Ranks view asks for: the document and the
    runs (one per rank; the page holds no rank's own views, so it opens on the Ranks view only)."""
    runs = [RunInfo(run=i, path=r.path, device_label=r.device_kind, events=r.events, rank=r.rank)
            for i, r in enumerate(doc.ranks)]
    return {"runs": runs, "ranks": doc}


def render_ranks_html(doc: RanksDocument) -> str:
    """The cross-rank report as one self-contained page: the explorer's Ranks view over the embedded
    document (the same front end and CSP as :func:`render_html`)."""
    return _page(ranks_embedded(doc), "profuse ranks report")


def _page(data_by_path: dict[str, object], title: str) -> str:
    page = (STATIC / "index.html").read_text()
    css = (STATIC / "style.css").read_text().replace("</style", "<\\/style")
    page = page.replace('<link rel="stylesheet" href="/assets/style.css">', f"<style>{css}</style>")
    page = page.replace("<head>", f'<head>\n<meta http-equiv="Content-Security-Policy" content="{CSP}">', 1)
    data = payload_json(msgspec.to_builtins(data_by_path))
    script = (f'<script type="application/json" id="profuse-data">{data}</script>\n'
              f"<script>{inline_script()}</script>\n")
    page = page.replace(script_tags(), script)
    return page.replace("<title>profuse explorer</title>", f"<title>{title}</title>")
