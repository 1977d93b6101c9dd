"""The meta table's whole-column figures (span, kinds, unlinked reasons) summed a piece at a time
(build.META_CHUNK): the same as the events table gives them in SQL, at any piece size."""
from __future__ import annotations

import json

import pytest
from conftest import trace_path

import profuse
from profuse.trace import build


def _meta_and_sql(name: str) -> tuple[dict, dict]:
    with profuse.load(str(trace_path(name)), cache=False) as t:
        meta = {k: json.loads(v) for k, v in t.con.sql("SELECT key, value FROM meta").fetchall()}
        (span_ns,), = t.con.sql("SELECT max(ts + dur) - min(ts) FROM events").fetchall()
        kinds = dict(t.con.sql("SELECT kind, count(*) FROM events GROUP BY kind").fetchall())
        unlinked = dict(t.con.sql("SELECT unlinked, count(*) FROM events WHERE unlinked IS NOT NULL "
                                  "GROUP BY unlinked").fetchall())
    return meta, {"span_us": span_ns / 1000, "kinds": kinds, "unlinked": unlinked}


@pytest.mark.parametrize("chunk", [build.META_CHUNK, 1000, 7])
@pytest.mark.parametrize("name", ["v100_rank1_of2_216k_events.json.gz", "mi300_sglang_decode_cudagraph.json.gz"])
def test_meta_figures_a_piece_at_a_time_are_the_tables_figures(name: str, chunk: int,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN pieces of `chunk` events (the 216k-event trace: hundreds of pieces at 1000, one at the default)
    monkeypatch.setattr(build, "META_CHUNK", chunk)
    # WHEN the trace loads
    meta, sql = _meta_and_sql(name)
    # THEN the span, the count of each kind and of each unlinked reason are what SQL counts in the events
    assert meta["span_us"] == sql["span_us"]
    assert meta["kinds"] == sql["kinds"]
    assert meta["unlinked"] == sql["unlinked"]
