"""The step model's reader (analysis/steps.py) against a plain gzip+json reading of real traces."""
from __future__ import annotations

import gzip
import json

import pytest
from conftest import TRACES, trace_path

import profuse
from profuse.analysis.steps import find_steps


@pytest.mark.parametrize("path", [trace_path("a100_nccl_rank0_of2.json.gz"), TRACES / "multirank" / "sampled_rank-0.json.gz",
                                  trace_path("a100_alexnet.json.gz")])
def test_steps_are_the_profiler_step_annotations(path) -> None:
    with gzip.open(path) as fh:
        raw = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"
               and str(e.get("name", "")).startswith("ProfilerStep#")
               and str(e.get("cat", "")).lower() == "user_annotation"]
    raw.sort(key=lambda e: e["ts"])
    with profuse.load(path) as t:
        steps = find_steps(t.con)
    assert [s.number for s in steps] == [int(e["name"].split("#")[1]) for e in raw]
    assert [(s.end - s.ts) / 1000 for s in steps] == pytest.approx([e["dur"] for e in raw], abs=0.001)
    assert [b.ts - a.ts for a, b in zip(steps, steps[1:])] == pytest.approx(
        [(b["ts"] - a["ts"]) * 1000 for a, b in zip(raw, raw[1:])], abs=1)
