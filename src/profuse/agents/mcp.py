"""``profuse mcp``: profuse's records answered to coding agents over the Model Context Protocol (stdio).

Each tool answers from the records the report, the diff and the explorer send (``payloads``), cut to
what an agent reads at once: the first few items of each list and how many were left out
(``<list>_left_out``). Every string of every answer (each cell of a query's rows) and every error is
redacted once (:func:`profuse.redact.redacted`, :func:`profuse.redact.redact_text`) before it is
encoded; bad input (a missing file, a trace that cannot be read, a query that writes, a name the trace
does not hold) is a tool error of one line. Traces load as the command line
loads them (the table cache included) and the last few stay open, so a second question costs no load.

:class:`Answers` holds the tools as plain methods returning JSON text (no SDK needed to call them);
:func:`build_server` registers them on the SDK's ``MCPServer``, :func:`serve` runs it on stdio.
"""
from __future__ import annotations

import difflib
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import msgspec
from msgspec import UnsetType
from pydantic import Field

from ..errors import TraceError, UserError, printable
from ..redact import redact_text, redacted

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from ..analysis.module_tree import ModuleNode
    from ..payloads.diff import DiffPayload
    from ..payloads.ops import Ops, OpsRow
    from ..payloads.report import ReportDocument
    from ..trace import Trace

T = TypeVar("T")

LEVERS = 5             # levers and op-table rows `report` gives unless asked for more
LIST_CAP = 10          # items of each list the drill-downs and `diff` give unless asked for more
MAX_ROWS = 200         # rows `sql` gives unless asked ...
MAX_ROWS_LIMIT = 5000  # ... and at most
CELL_CHARS = 2000      # a longer string value of `sql` is cut here (after it is redacted)
KEEP_OPEN = 4          # traces kept open between calls

INSTRUCTIONS = """profuse reads PyTorch profiler (Kineto) traces and profuse bundle folders.
Start with report(path): where the steady steps' time went (the budget) and the levers that buy it
back, each with its evidence and evidence grade, and what the trace lacks (health). Drill down with
op, kernel and module (a unique part of a name is enough); ask anything else with sql (one read-only
SELECT on the tables events, links, scopes, shapes, threads, flows, instants, meta; `DESCRIBE events`
lists the columns; times in the tables are ns). diff(a, b) compares two runs. Answers are compact
JSON with times in µs; each list gives its first items and `<list>_left_out` counts the rest;
secrets in the trace show as [redacted]."""

PathArg = Annotated[str, Field(description="a Kineto trace (.json, .json.gz) or a profuse bundle folder; "
                                           "a relative path is from the server's working folder")]
NameArg = Annotated[str, Field(description="the name as the report shows it, or a part of it that only "
                                           "one name holds")]
LimitArg = Annotated[int, Field(ge=1, le=100, description="items of each list to give; the rest are counted")]


@dataclass
class _Open:
    """One trace kept open, the file's identity when it was loaded, and what was worked out from it."""

    trace: Trace
    stamp: tuple[int, ...]
    memo: dict[str, Any] = field(default_factory=dict)

    def once(self, key: str, compute: Callable[[], T]) -> T:
        """``compute()``, worked out on the first call for ``key`` and kept with the trace."""
        if key not in self.memo:
            self.memo[key] = compute()
        return cast(T, self.memo[key])


def _identity(path: str) -> tuple[str, tuple[int, ...]]:
    """The file ``path`` names (the trace in a bundle folder) and its stat: a changed file is loaded again."""
    from ..trace import resolve

    p = Path(path)
    try:
        src = resolve(p)
    except TraceError:
        if not p.is_dir():
            raise
        src = p  # a folder load() reads otherwise (neuron-explorer Parquet), or says what is wrong with
    st = src.stat()
    return str(src.resolve()), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class Traces:
    """The traces last asked about, at most ``keep`` kept open; loaded as the command line loads them
    (``profuse.trace.load``: the table cache, ``--lenient``, ``--no-cache``, ``--cache-dir``)."""

    def __init__(self, *, keep: int = KEEP_OPEN, lenient: bool = False, cache: bool = True,
                 cache_dir: str | None = None) -> None:
        self.keep = max(2, keep)  # a diff holds two
        self.lenient, self.cache, self.cache_dir = lenient, cache, cache_dir
        self._open: OrderedDict[str, _Open] = OrderedDict()

    def get(self, path: str) -> _Open:
        """The trace at ``path``, loaded unless it is open and its file unchanged; the least recently
        asked about beyond ``keep`` is closed."""
        from ..trace import load

        key, stamp = _identity(path)
        entry = self._open.pop(key, None)
        if entry is not None and entry.stamp != stamp:
            entry.trace.close()
            entry = None
        if entry is None:
            entry = _Open(load(path, lenient=self.lenient, cache=self.cache, cache_dir=self.cache_dir), stamp)
        self._open[key] = entry
        while len(self._open) > self.keep:
            self._open.popitem(last=False)[1].trace.close()
        return entry

    def close(self) -> None:
        """Close every open trace (waiting for cache writes)."""
        while self._open:
            self._open.popitem()[1].trace.close()


def _json(obj: Any) -> str:
    """``obj`` as compact JSON, every string in it redacted once (:func:`profuse.redact.redacted`; a value
    JSON has no type for, written as its ``str``, too)."""
    return _encoded(redacted(obj))


def _encoded(obj: Any) -> str:
    """``obj``, redacted already, as compact JSON (a value JSON has no type for as its ``str``, redacted)."""
    return msgspec.json.encode(obj, enc_hook=lambda v: redact_text(str(v))).decode()


def _cap(out: dict[str, Any], name: str, items: Sequence[Any], limit: int) -> None:
    """``out[name]``: the first ``limit`` items; ``out[name + "_left_out"]``: how many more there are."""
    out[name] = list(items[:limit])
    out[f"{name}_left_out"] = max(0, len(items) - limit)


def _short(name: str) -> str:
    return name if len(name) <= 80 else name[:77] + "..."


def _listed(names: Sequence[str]) -> str:
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return ", ".join(repr(_short(n)) for n in names[:5]) + more


def _pick(names: Sequence[str], wanted: str, what: str, path: str) -> str:
    """The one name ``wanted`` means: itself, else the only name holding it (as given or as shown
    redacted, then in any case); otherwise a user error listing the names that hold it, or those near it."""
    if wanted in names:
        return wanted
    holding = [n for n in names if wanted in n or wanted in redact_text(n)]
    if not holding:
        holding = [n for n in names if wanted.lower() in n.lower()]
    if len(holding) == 1:
        return holding[0]
    if holding:
        raise UserError(f"{path}: {len(holding)} {what} names hold {wanted!r}: {_listed(holding)}; "
                        "give more of the name")
    near = difflib.get_close_matches(wanted, names, n=3, cutoff=0.5)
    raise UserError(f"{path}: no {what} named {wanted!r}" + (f"; near: {_listed(near)}" if near else ""))


def _ops(entry: _Open, group_by: str) -> Ops:
    """The trace's op table grouped by op, shape, module or kernel (every row), once per open trace."""
    from ..payloads.build import ops_of

    return entry.once(f"ops:{group_by}", lambda: ops_of(entry.trace, group_by=group_by))


def _row(ops: Ops, wanted: str, what: str, path: str) -> OpsRow:
    chosen = _pick(list(dict.fromkeys(r.name for r in ops.rows)), wanted, what, path)
    return next(r for r in ops.rows if r.name == chosen)


def _kernels_under(entry: _Open, ops: Ops, row: OpsRow) -> list[Any]:
    """The kernels under one op-table row (summing to its device total; each with the part the row launched
    itself), most device time first."""
    from ..payloads.build import op_kernels_of

    return list(op_kernels_of(entry.trace, msgspec.structs.replace(ops, rows=[row]))[row.key].kernels)


def _launchers(entry: _Open, group_by: str, kernel: str) -> list[dict[str, Any]]:
    """The rows of the op table grouped by ``group_by`` (op, module) that launched ``kernel`` themselves (the
    innermost op or module: their self parts)."""
    from ..payloads.build import op_kernels_of

    ops = _ops(entry, group_by)
    under = entry.once(f"kernels:{group_by}", lambda: op_kernels_of(entry.trace, ops))
    found = [{group_by: key, "calls": k.self_calls, "device_us": k.self_device_us}
             for key, row in under.items() for k in row.kernels if k.name == kernel and k.self_calls]
    return sorted(found, key=lambda f: (-f["device_us"], f[group_by]))


def _report_document(trace: Trace) -> ReportDocument:
    """The ``profuse report --format json`` document of the trace (every section, all rows)."""
    from ..payloads.report import analyse, report_view

    return report_view(analyse(trace), keep_metadata=True).document  # as it is: each answer is redacted


def report_answer(doc: ReportDocument, levers: int) -> dict[str, Any]:
    """The report cut for an agent: the header, the budget, the first ``levers`` levers and op-table rows,
    the trace's health."""
    from ..payloads.diagnosis import DiagnosisPayload

    out: dict[str, Any] = {"trace": doc.trace, "totals": doc.totals, "device_label": doc.device_label}
    diag = doc.diagnosis
    if isinstance(diag, DiagnosisPayload):
        d: dict[str, Any] = {"scope": diag.scope, "device": diag.device, "span_us": diag.span_us,
                             "window_us": diag.window_us, "budget": diag.budget}
        _cap(d, "levers", diag.levers, levers)
        d.update(small_items=diag.small_items, combined_gain_us=diag.combined_gain_us,
                 combined_outside_us=diag.combined_outside_us, notes=diag.notes)
        out["diagnosis"] = d
    if not isinstance(doc.health, UnsetType):
        out["health"] = doc.health
    _cap(out, "ops", doc.ops, levers)
    return out


def _by_change(rows: Sequence[Any]) -> list[Any]:
    return sorted(rows, key=lambda r: (-abs(r.delta_us), r.name))


def diff_answer(d: DiffPayload, limit: int) -> dict[str, Any]:
    """The diff cut for an agent: devices, speedup, noise verdicts, the budgets side by side, and the ops,
    kernels and modules that changed most (by |delta|)."""
    out: dict[str, Any] = {"a": d.a, "b": d.b, "devices": d.devices, "same_device": d.same_device,
                           "a_device_us": d.a_device_us, "b_device_us": d.b_device_us, "speedup": d.speedup,
                           "totals_note": d.totals_note, "test": d.test, "verdicts": d.verdicts}
    for name in ("op_groups", "ops", "kernels", "modules"):
        _cap(out, name, _by_change(getattr(d, name)), limit)
    _cap(out, "kernels_added", d.kernels_added, limit)
    _cap(out, "kernels_removed", d.kernels_removed, limit)
    out["only_in"] = {side: {"ops": o.ops, "compiled_regions": len(o.compiled_regions),
                             "fused_kernels": len(o.fused_kernels), "graph_replay_kernels": o.graph_replay_kernels}
                      for side, o in d.only_in.items()}
    if d.budget is not None:
        budget = msgspec.structs.asdict(d.budget)
        _cap(budget, "rows", d.budget.rows, limit)
        out["budget"] = budget
    return out


def _one_select(query: str) -> None:
    """A user error unless ``query`` is one SELECT (WITH ... SELECT, DESCRIBE, SHOW and FROM ... count);
    what DuckDB cannot parse, or several statements, are left to ``Trace.sql`` to say, as ``profuse sql`` does."""
    import duckdb

    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error:
        return
    if len(statements) == 1 and (kind := statements[0].type.name) != "SELECT":
        raise UserError(f"SQL error: the sql tool runs one read-only SELECT (or WITH ... SELECT) query, not {kind}")


def _cell(value: Any) -> Any:
    """One value of a query's row, redacted (a string, or the strings in a list or a struct); a string then
    cut to CELL_CHARS."""
    value = redacted(value)
    if not isinstance(value, str):
        return value
    return value if len(value) <= CELL_CHARS else f"{value[:CELL_CHARS]}... [{len(value) - CELL_CHARS} more characters]"


def _module_nodes(nodes: list[ModuleNode], wanted: str, path: str) -> list[ModuleNode]:
    """The module tree's nodes ``wanted`` names: a class name (each path it runs at), or a path of class
    names (whole, or its end)."""
    if "/" in wanted:
        found = [n for n in nodes if n.path == wanted or n.path.endswith("/" + wanted)]
        if not found:
            chosen = _pick([n.path for n in nodes], wanted, "module path", path)
            found = [n for n in nodes if n.path == chosen]
        return found
    chosen = _pick(list(dict.fromkeys(n.name for n in nodes)), wanted, "module", path)
    return [n for n in nodes if n.name == chosen]


class Answers:
    """The tools, as methods returning compact JSON text, redacted; bad input raises a :class:`UserError`."""

    def __init__(self, traces: Traces) -> None:
        self.traces = traces

    def report(self, path: PathArg,
               levers: Annotated[int, Field(ge=1, le=50, description="levers and op-table rows to give")] = LEVERS,
               ) -> str:
        """Where a trace's time went and what buys it back: the trace (path, device kind and name, span),
        its totals (device µs, kernels), the diagnosis (the steady steps' time budget as leaves with µs and
        %; the levers ranked by gain: kind, target, gain_us, confidence, grade, evidence, how, draws), the
        op table's first rows by self device time, and the trace's health (counts and findings)."""
        entry = self.traces.get(path)
        return _json(report_answer(entry.once("report", lambda: _report_document(entry.trace)), levers))

    def sql(self, path: PathArg,
            query: Annotated[str, Field(description="one SELECT (or WITH ... SELECT) in DuckDB's dialect")],
            max_rows: Annotated[int, Field(ge=1, le=MAX_ROWS_LIMIT, description="rows to give")] = MAX_ROWS,
            ) -> str:
        """Run one read-only SELECT on the trace's DuckDB tables: events (every event, with its op, module,
        launch and device time; times in ns), links (view), scopes, shapes, threads, flows, instants, meta.
        `DESCRIBE events` lists the columns. Gives columns, the first max_rows rows, row_count and
        rows_left_out; a query that would write is refused."""
        _one_select(query)
        columns, rows = self.traces.get(path).trace.sql_rows(query)
        shown = [[_cell(v) for v in row] for row in rows[:max_rows]]  # each cell redacted once, here
        return _encoded({"columns": redacted(columns), "rows": shown, "row_count": len(rows),
                         "rows_left_out": len(rows) - len(shown)})

    def diff(self, a: PathArg, b: PathArg, limit: LimitArg = LIST_CAP) -> str:
        """Compare run A with run B: the devices, speedup (A's device time over B's: above 1, B is faster),
        the noise verdicts (per-step medians, Mann-Whitney), the two time budgets side by side, and the ops,
        kernels and modules that changed most, with kernels only one run launched."""
        from ..payloads.build import compare_of

        ta, tb = self.traces.get(a).trace, self.traces.get(b).trace
        return _json(diff_answer(compare_of(ta, tb), limit))

    def op(self, path: PathArg, name: NameArg, limit: LimitArg = LIST_CAP) -> str:
        """One op of the op table (e.g. aten::addmm): its row (calls, self and total CPU and device µs,
        kernels launched), the kernels under it (calls and µs under it, summing to its device total; self_calls
        and self_device_us: the part it launched itself), and its rows by input shapes, most device time first."""
        entry = self.traces.get(path)
        ops = _ops(entry, "op")
        row = _row(ops, name, "op", path)
        out: dict[str, Any] = {"device_label": ops.device_label, "op": row}
        _cap(out, "kernels", _kernels_under(entry, ops, row), limit)
        _cap(out, "shapes", [r for r in _ops(entry, "shape").rows if r.name == row.name], limit)
        return _json(out)

    def kernel(self, path: PathArg, name: NameArg, limit: LimitArg = LIST_CAP) -> str:
        """One device kernel (copies and memsets too): its calls and device µs, and the ops and nn.Modules
        (innermost) that launched it, most device time first."""
        entry = self.traces.get(path)
        kernels = _ops(entry, "kernel")
        row = _row(kernels, name, "kernel", path)
        out: dict[str, Any] = {"device_label": kernels.device_label, "kernel": row}
        _cap(out, "ops", _launchers(entry, "op", row.name), limit)
        _cap(out, "modules", _launchers(entry, "module", row.name), limit)
        return _json(out)

    def module(self, path: PathArg,
               name: Annotated[str, Field(description="a class name (BertLayer) or a path of class names "
                                                      "(BertEncoder/BertLayer)")],
               limit: LimitArg = LIST_CAP) -> str:
        """One nn.Module: each path of class names it runs at (calls, device and CPU µs under it), its row of
        the op table grouped by module (every path of the class together; self device µs: the kernels whose
        innermost module it is) with the kernels under it (summing to its device total, each with that self
        part), and the modules directly under it."""
        from ..payloads.build import modules_of

        entry = self.traces.get(path)
        tree = entry.once("modules", lambda: modules_of(entry.trace))
        nodes = _module_nodes(tree.nodes, name, path)
        out: dict[str, Any] = {"device_label": tree.device_label, "module": nodes[0].name}
        _cap(out, "paths", nodes, limit)
        mods = _ops(entry, "module")
        row = next((r for r in mods.rows if r.name == nodes[0].name), None)
        if row is not None:
            out["row"] = row
            _cap(out, "kernels", _kernels_under(entry, mods, row), limit)
        under = [n for n in tree.nodes for p in nodes if n.depth == p.depth + 1 and n.path.startswith(p.path + "/")]
        _cap(out, "children", under, limit)
        return _json(out)


def _one_line(message: str) -> str:
    return printable(redact_text(message))


def _tool(method: Callable[..., str], lock: threading.Lock, tool_error: type[Exception]) -> Callable[..., str]:
    """``method`` as a tool: one call at a time (a trace's connection is not shared between threads), a
    user error or an OS error raised as ``tool_error`` with one redacted line, never a traceback."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> str:
        try:
            with lock:
                return method(*args, **kwargs)
        except UserError as err:
            raise tool_error(_one_line(str(err))) from None
        except OSError as err:
            where = err.filename if err.filename is not None else "profuse"
            raise tool_error(_one_line(f"{where}: {err.strerror or err}")) from None

    return call


def build_server(answers: Answers) -> MCPServer[Any]:
    """The MCP server with one read-only tool per method of ``answers``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    from .. import __version__

    server: MCPServer[Any] = MCPServer("profuse", instructions=INSTRUCTIONS, version=__version__,
                                       log_level="WARNING")
    lock = threading.Lock()
    hints = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
    for method in (answers.report, answers.sql, answers.diff, answers.op, answers.kernel, answers.module):
        server.add_tool(_tool(method, lock, ToolError), annotations=hints, structured_output=False)
    return server


def serve(*, lenient: bool = False, cache: bool = True, cache_dir: str | None = None) -> None:
    """Serve the tools on stdin/stdout until the client closes stdin."""
    traces = Traces(lenient=lenient, cache=cache, cache_dir=cache_dir)
    try:
        build_server(Answers(traces)).run("stdio")
    finally:
        traces.close()
