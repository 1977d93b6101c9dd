"""``profuse mcp``: profuse's reports served to coding agents, a Model Context Protocol server on stdio."""
from __future__ import annotations

import argparse

from ..errors import UserError
from ._common import add_load_args

HELP = """register it with an agent, in its MCP settings (.mcp.json, .cursor/mcp.json):
  {"mcpServers": {"profuse": {"command": "profuse", "args": ["mcp"]}}}
the agent starts `profuse mcp` and talks to it on stdin/stdout.

tools (docs/agents.md), each answering compact JSON, lists capped:
  report(path)        budget, first levers with evidence, trace health
  sql(path, query)    one read-only SELECT on the trace's tables
  diff(a, b)          verdicts, speedup, ops and kernels that changed most
  op(path, name)      an op's row, the kernels it launched, its shapes
  kernel(path, name)  a kernel and the ops and modules that launched it
  module(path, name)  an nn.Module's paths, row, kernels and children
secrets in traces are shown as [redacted]; bad input is a one-line error.

examples:
  profuse mcp                              serve on stdin/stdout
  profuse mcp --cache-dir /tmp/cache       keep table caches there
  claude mcp add profuse -- profuse mcp    register with Claude Code

needs the MCP SDK: pip install 'profuse[mcp]'
"""


def add_parser(subs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``profuse mcp``."""
    p = subs.add_parser("mcp", help="serve reports to coding agents (MCP, stdio)", epilog=HELP,
                        description="A Model Context Protocol server on stdin/stdout whose tools answer\n"
                                    "a coding agent from profuse's reports of the traces it names.",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_load_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve the tools until the agent closes stdin; without the MCP SDK, one line and exit 2."""
    try:
        import mcp.server.mcpserver  # noqa: F401  (the SDK is an optional extra)
    except ImportError:
        raise UserError("profuse mcp needs the MCP SDK: pip install 'profuse[mcp]'") from None
    from ..agents.mcp import serve

    serve(lenient=args.lenient, cache=not args.no_cache, cache_dir=args.cache_dir)
    return 0
