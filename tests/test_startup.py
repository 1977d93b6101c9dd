"""Start-up cost: `--help`, argument errors and a cached `sql` import none of the heavy modules.

Each case runs the real command line in a fresh interpreter and lists what it imported; the
decoder (numpy, the scanner, msgspec decoding, correlation) and rich must stay out of these paths.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import trace_path

HEAVY = ("numpy", "rich", "profuse.trace.build", "profuse.trace._decode", "profuse.trace._columns",
         "profuse.trace._native", "profuse.trace.correlate", "pandas")

PROBE = """
import json, sys
from profuse.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code
print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _run(*args: str, env_cache: Path | None = None) -> tuple[int, set[str], str]:
    import os

    env = dict(os.environ)
    if env_cache is not None:
        env["PROFUSE_CACHE_DIR"] = str(env_cache)
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=120)
    probe = json.loads(out.stderr.strip().splitlines()[-1])
    return probe["rc"], set(probe["modules"]), out.stdout


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("args", [["--help"], ["report", "--help"], ["sql", "--help"], ["report"],
                                  ["sql", "only-a-path"], ["report", "x.json", "--top", "many"]])
def test_help_and_argument_errors_import_nothing_heavy(args: list[str]):
    rc, modules, _ = _run(*args)
    assert rc in (0, 2)
    assert _heavy(modules) == []
    assert "duckdb" not in modules


def test_cached_sql_imports_no_decoder(tmp_path: Path):
    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path("h100_bert_small.json.gz"), src)
    cache = tmp_path / "cache"
    query = "SELECT count(*) AS n FROM events WHERE kind = 'kernel'"
    rc, first, _ = _run("sql", str(src), query, "--format", "csv", env_cache=cache)  # builds the cache
    assert rc == 0 and "numpy" in first  # the first load decodes
    rc, modules, out = _run("sql", str(src), query, "--format", "csv", env_cache=cache)
    assert rc == 0
    assert _heavy(modules) == []
    import gzip

    kernels = sum(1 for e in json.loads(gzip.decompress(src.read_bytes()))["traceEvents"]
                  if e.get("ph") == "X" and e.get("cat") == "kernel")
    assert out.splitlines() == ["n", str(kernels)]


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_cached_report_imports_only_its_own_renderer(tmp_path: Path, fmt: str):
    """A cached `report` decodes nothing, reads no NEFF, starts no rank engine, and imports the
    renderer of its own format only (rich for the table, the JSON report for JSON)."""
    src = tmp_path / "t.json.gz"
    shutil.copy(trace_path("h100_bert_small.json.gz"), src)
    cache = tmp_path / "cache"
    rc, first, _ = _run("report", str(src), "--format", fmt, env_cache=cache)  # builds the cache
    assert rc == 0 and "profuse.trace.build" in first
    rc, modules, out = _run("report", str(src), "--format", fmt, env_cache=cache)
    assert rc == 0
    not_wanted = [*HEAVY[2:], "profuse.neuron.neff", "profuse.ranks.coordinator", "profuse.ranks.engine",
                  "profuse.ranks.maptask"]
    # msgspec is the record library (op-table rows are msgspec records), not only the JSON encoder
    # both formats render the same payload records (payloads/report.py); neither builds the HTML's views
    not_wanted += ["profuse.payloads.build", "profuse.payloads.timeline", "profuse.payloads.views"]
    not_wanted += ["rich"] if fmt == "json" else ["profuse.report.json_report"]
    assert sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in not_wanted)) == []
    # it did give advice, from the cache: the report's document kept beside the tables (cli/report_cached.py),
    # so no table is opened and no analysis runs
    assert [m for m in ("duckdb", "numpy", "profuse.analysis.advice.fusion", "profuse.analysis.advice.findings")
            if m in modules] == []
    if fmt == "json":
        assert {"hotspots", "interruptions", "fusion_candidates", "roofline"} <= json.loads(out).keys()
    else:
        assert "Hotspots" in out and "from cache" in out
