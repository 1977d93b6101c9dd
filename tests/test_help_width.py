"""Every ``--help`` fits an 80-column terminal and keeps every example it gave (issue 46).

Each case runs ``python -m profuse [COMMAND] --help`` in a fresh process with ``COLUMNS=80``. The
examples are read back from the help as commands: a line starting ``  profuse`` (or ``  claude``),
cut where its comment starts (two spaces), joined with the lines that continue it (an open quote, a
trailing backslash), so an example may wrap but not change.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from profuse.cli import COMMANDS, build_parser

EXAMPLES: dict[str, list[str]] = {
    "": ["profuse report trace.json.gz",
         "profuse report trace.json.gz --group-by module --top 20",
         """profuse sql trace.json.gz "SELECT name, sum(dur)/1e3 AS us FROM events WHERE kind='kernel' GROUP BY 1\"""",
         "profuse run --out prof -- python my_script.py --batch 8",
         "profuse study rmsnorm",
         "profuse neff model.neff"],
    "report": ["profuse report trace.json.gz",
               "profuse report trace.json.gz --group-by kernel --top 10",
               "profuse report prof/ --format json > report.json",
               "profuse report prof/ --format html -o report.html",
               "profuse report snapshot.pickle",
               "profuse report explorer_out/",
               "profuse report run/",
               "profuse report 'run/*rank*.json.gz' --format json",
               "profuse report run/ --engine ray",
               "profuse report run/ --engine ray --ray-address head-node:6379"],
    "sql": ['profuse sql trace.json.gz "SELECT kind, count(*), sum(dur)/1e3 AS us FROM events GROUP BY kind"',
            """profuse sql trace.json.gz "SELECT name, device_total/1e3 AS us FROM events WHERE kind='cpu_op' """
            """ORDER BY us DESC LIMIT 10\"""",
            'profuse sql trace.json.gz "SELECT * FROM links WHERE unlinked IS NOT NULL" --format csv'],
    "run": ["profuse run -- python infer.py --batch 8",
            "profuse run --out prof --warmup 2 --steps 10 -- python -m mypkg.serve",
            "profuse run --streams ops,device,runtime -- python infer.py"],
    "study": ["profuse study rmsnorm",
              "profuse study rmsnorm --device cuda --shape 8,2048,4096 --dtype bfloat16",
              "profuse study rmsnorm --format json > rmsnorm.json",
              "profuse study llama",
              "profuse study llama --size small --all-patterns",
              "profuse study llama --size small --threads 1"],
    "diff": ["profuse diff before/ after/",
             "profuse diff base.json.gz test.json.gz --format json",
             "profuse diff base/ new/ --fail-if-slower 5%",
             "profuse diff base/ new/ --fail-if-slower 5% --metric aten::addmm --format junit -o diff.xml",
             "profuse diff run_a/ run_b/"],
    "explore": ["profuse explore prof/",
                "profuse explore before/ after/",
                "profuse explore trace.json.gz --no-browser --port 8765",
                "profuse explore run/"],
    "peaks": ["profuse peaks",
              "profuse peaks --device cuda --refresh"],
    "neff": ["profuse neff model.neff",
             "profuse neff model.neff --format json",
             "profuse neff prof/neff_1234.neff --top 0",
             "profuse neff model.neff -o model.txt"],
    "mcp": ["profuse mcp",
            "profuse mcp --cache-dir /tmp/cache",
            "claude mcp add profuse -- profuse mcp"],
}


def _help(command: str, columns: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns)}
    args = [sys.executable, "-m", "profuse", *([command] if command else []), "--help"]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)


def _examples(text: str) -> list[str]:
    """The example commands of a help text, each on one line however the help wraps it."""
    lines, found = text.splitlines(), []
    i = 0
    while i < len(lines):
        if lines[i].startswith(("  profuse ", "  claude ")):
            parts = [lines[i].strip().split("  ")[0]]
            # continued: a quote left open (a long SQL query), or a shell line continuation
            while (sum(p.count('"') for p in parts) % 2 or parts[-1].endswith(" \\")) and i + 1 < len(lines):
                parts[-1] = parts[-1].removesuffix(" \\")
                i += 1
                parts.append(lines[i].strip().split("  ")[0])
            found.append(" ".join(parts))
        i += 1
    return found


def test_every_command_is_checked():
    assert set(EXAMPLES) == {"", *COMMANDS}


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_fits_80_columns_and_keeps_its_examples(command: str):
    out = _help(command, 80)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    wide = [line for line in out.stdout.splitlines() if len(line) > 80]
    assert wide == [], f"profuse {command} --help: {len(wide)} line(s) over 80 columns"
    assert _examples(out.stdout) == EXAMPLES[command]


@pytest.mark.parametrize("columns", [60, 200])
def test_help_at_other_widths(columns: int, monkeypatch: pytest.MonkeyPatch):
    # in-process (the subprocess cases above cover the real start-up): narrow and wide terminals both work
    monkeypatch.setenv("COLUMNS", str(columns))
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for p in [parser, *(subs.choices[c] for c in COMMANDS)]:
        text = p.format_help()
        assert "examples:" in text
        assert _examples(text) == EXAMPLES[p.prog.removeprefix("profuse").strip()]
        if columns == 200:  # nothing wider than the terminal, and argparse wraps nothing it need not
            assert max(len(line) for line in text.splitlines()) <= 200
