"""``profuse report snapshot.pickle``: a torch.cuda.memory._dump_snapshot file, read without running it.

No public snapshot with a license that allows shipping it was found, and no GPU is lent here, so the
snapshot is built in the test with the structure torch writes (torch/cuda/memory.py ``_snapshot()``:
segments with blocks and frames, device_traces of alloc / free_requested / free_completed entries),
pickled the way ``_dump_snapshot`` does (``pickle.dump`` of the dict).
"""
from __future__ import annotations

import json
import pickle

import pytest

from profuse.cli import main

A = 0x7F00_0000_0000
SEG = 2 << 20
TORCH_FRAME = {"filename": "/usr/lib/python3/site-packages/torch/nn/modules/linear.py", "line": 125,
               "name": "forward"}


def _frames(name: str, line: int) -> list[dict[str, object]]:
    # innermost first, as torch records them: torch's own frame, then the user's
    return [TORCH_FRAME, {"filename": "/home/u/model.py", "line": line, "name": name},
            {"filename": "/home/u/train.py", "line": 3, "name": "<module>"}]


def _entry(action: str, addr: int, size: int, t: int, frames: list[dict[str, object]]) -> dict[str, object]:
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": frames,
            "pool_id": (0, 0), "compile_context": "N/A", "user_metadata": ""}


def snapshot() -> dict[str, object]:
    """512 B allocated before the history began (still live), then X (1 KiB), Y (4 KiB, freed), Z (2 KiB)."""
    x, y, z = _frames("fwd", 10), _frames("attn", 20), _frames("mlp", 30)
    blocks = [
        {"address": A, "size": 512, "requested_size": 500, "state": "active_allocated", "frames": []},
        {"address": A + 512, "size": 1024, "requested_size": 1024, "state": "active_allocated", "frames": x},
        {"address": A + 1536, "size": 2048, "requested_size": 2048, "state": "active_allocated", "frames": z},
        {"address": A + 3584, "size": SEG - 3584, "requested_size": 0, "state": "inactive", "frames": []},
    ]
    return {
        "segments": [{"device": 0, "address": A, "total_size": SEG, "stream": 0, "segment_type": "large",
                      "segment_pool_id": (0, 0), "allocated_size": 3584, "active_size": 3584,
                      "requested_size": 3572, "is_expandable": False, "frames": [], "blocks": blocks}],
        "device_traces": [[
            _entry("alloc", A + 512, 1024, 1000, x),
            _entry("alloc", A + 1536, 4096, 2000, y),
            _entry("free_requested", A + 1536, 4096, 3000, y),
            _entry("free_completed", A + 1536, 4096, 3001, y),
            _entry("alloc", A + 1536, 2048, 4000, z),
        ]],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1},
    }


def test_snapshot_peak_and_what_is_live_by_frame(tmp_path, capsys) -> None:
    # GIVEN a snapshot pickled as _dump_snapshot does
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(snapshot()))
    # WHEN profuse reports it as JSON
    assert main(["report", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (dev,) = doc["memory"]["devices"]
    # THEN the peak is 512 (before) + 1 KiB + 4 KiB, at Y's allocation, grouped by the user's frame
    assert doc["schema"] == "profuse.memory_snapshot/1"
    assert doc["counts"] == {"segments": 1, "blocks": 4, "entries": 4, "frames": 12}
    assert dev["device"] == "CUDA 0" and dev["peak_allocated_bytes"] == 512 + 1024 + 4096
    assert dev["peak_reserved_bytes"] == SEG and dev["gap_bytes"] == SEG - (512 + 1024 + 4096)
    assert dev["peak_at"]["frame"] == "attn (/home/u/model.py:20)"
    assert dev["peak_at"]["ts_ns"] == 1_000_000  # 1000 µs after the first entry
    live = {(g["op"], g["bytes"]) for g in dev["live_at_peak"]}
    assert live == {("attn (/home/u/model.py:20)", 4096), ("fwd (/home/u/model.py:10)", 1024),
                    ("(allocated before the trace)", 512)}
    # AND the timeline holds allocated and reserved after each entry, from where the history began
    (lane,) = doc["timeline"]
    assert [p[1] for p in lane["points"]] == [512 + 1024, 512 + 1024 + 4096, 512 + 1024, 512 + 1024 + 2048]
    assert {p[2] for p in lane["points"]} == {SEG}
    # AND the console says the same in words
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "peak allocated 5.50 KiB" in out and "attn (/home/u/model.py:20)" in out


MARKER_CODE = "open({path!r}, 'w').write('ran')"


class Hostile:
    """Unpickling this would run code: ``__reduce__`` names exec with a payload that writes a file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (MARKER_CODE.format(path=self.marker),))


def test_hostile_pickle_is_refused_and_runs_nothing(tmp_path, capsys) -> None:
    # GIVEN a snapshot-shaped pickle with an object whose __reduce__ would write a marker file
    marker = tmp_path / "ran.txt"
    doc = snapshot()
    doc["allocator_settings"] = Hostile(str(marker))
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(doc))
    with open(path, "rb") as fh:  # the file is truly hostile: plain pickle.load runs the payload
        pickle.load(fh)
    assert marker.read_text() == "ran"
    marker.unlink()
    # WHEN profuse reads it
    code = main(["report", str(path)])
    err = capsys.readouterr().err
    # THEN one line, exit 2, and nothing ran
    assert code == 2
    assert err.count("\n") == 1 and str(path) in err and "builtins.exec" in err and "refused" in err
    assert not marker.exists()


@pytest.mark.parametrize("make,problem", [
    (lambda: b"not a pickle at all", "not a memory snapshot"),
    (lambda: pickle.dumps({"segments": 3}), "not a torch memory snapshot"),
    (lambda: pickle.dumps(_nested(40)), "nested deeper"),
    (lambda: pickle.dumps(snapshot())[:-20], "not a readable pickle"),
    (lambda: pickle.dumps({"segments": [], "device_traces": _fan_out()}), "more than"),
])
def test_bad_snapshots_are_one_line_errors(tmp_path, capsys, make, problem) -> None:
    path = tmp_path / "bad.pickle"
    path.write_bytes(make())
    assert main(["report", str(path), "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert problem in captured.err and str(path) in captured.err


def test_snapshot_over_the_size_limit_is_refused(tmp_path, capsys, monkeypatch) -> None:
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(snapshot()))
    monkeypatch.setenv("PROFUSE_MAX_SNAPSHOT_BYTES", "100")
    assert main(["report", str(path)]) == 2
    assert "over the snapshot limit" in capsys.readouterr().err


def _nested(depth: int) -> object:
    out: object = {"segments": []}
    for _ in range(depth):
        out = [out]
    return {"segments": [out]}


def _fan_out() -> list[object]:
    """A small pickle that stands for 200 million entries through shared references."""
    return [[{"action": "alloc", "addr": 1, "size": 1, "frames": []}] * 1000] * 200_000


def test_snapshot_without_history_says_so_and_html_is_refused(tmp_path, capsys) -> None:
    doc = snapshot()
    doc["device_traces"] = [[]]  # _record_memory_history was never on: the state only
    path = tmp_path / "state.pickle"
    path.write_bytes(pickle.dumps(doc))
    assert main(["report", str(path), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["memory"] == {"devices": []} and out["counts"]["blocks"] == 4 and out["counts"]["entries"] == 0
    assert main(["report", str(path)]) == 0
    assert "No alloc/free history" in capsys.readouterr().out
    assert main(["report", str(path), "--format", "html", "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not available for a memory snapshot" in err
    assert not (tmp_path / "r.html").exists()


def test_snapshot_text_fields_that_are_not_text_are_not_printed(tmp_path, capsys) -> None:
    # a field torch writes as text, holding a list that stands for 8**20 values through shared references
    # (20 deep: within the depth cap)
    huge: list[object] = ["x"]
    for _ in range(20):
        huge = [huge] * 8
    doc = snapshot()
    doc["device_traces"][0][0]["action"] = huge  # type: ignore[index]
    doc["segments"][0]["segment_type"] = huge  # type: ignore[index]
    path = tmp_path / "odd.pickle"
    path.write_bytes(pickle.dumps(doc))
    assert main(["report", str(path), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["counts"]["entries"] == 3, "the entry whose action is not text is no alloc/free"
