"""CUPTI's device-side synchronisation records (Kineto's ``cuda_sync`` category: ``Context Sync``, ``Event
Sync``, ``Stream Sync``, ``Stream Wait Event``) lie on the device's rows, not on a host thread: no op-table row
and no CPU time for them, even where a record sits on a row of its own (``Context Sync`` on tid -1, a row that
holds no kernel). The host's own synchronising calls (``cudaDeviceSynchronize``...) stay op-table rows."""
from __future__ import annotations

import oracle
import pytest
from conftest import trace_path

import profuse
from profuse.analysis.optable import op_table

CASES = ["a100_alexnet", "a100_event_sync", "a100_event_sync_multistream"]


@pytest.mark.parametrize("name", CASES)
def test_device_side_sync_records_are_no_op_rows(name: str) -> None:
    # GIVEN a real A100 trace whose cuda_sync records all lie in a process that carries the device's kernels
    path = trace_path(f"{name}.json.gz")
    events = oracle.complete_events(path)
    device_pids = {e["pid"] for e in events if oracle.is_device_time(e)}
    records = [e for e in events if e.get("cat") == "cuda_sync"]
    assert records and {e["pid"] for e in records} <= device_pids
    host_syncs = {e["name"] for e in events if e.get("cat") == "cuda_runtime" and "Synchronize" in e["name"]}
    with profuse.load(path) as t:
        rows = {r.name: r for r in op_table(t).rows}
    # THEN none of them is an op-table row, while the host's synchronising calls are, with their calls counted
    assert not {e["name"] for e in records} & set(rows)
    assert host_syncs and host_syncs <= set(rows)
    for n in host_syncs:
        assert rows[n].calls == oracle.calls_by_name(path, n, frozenset({"cuda_runtime"}))
