"""The device vocabulary (trace/vocabulary.py): one entry per device family, read by the loader and every
analysis. A device it does not know is added as one entry, and its trace then loads and reads as any
other's: its calls are runtime calls, its kernels link to their launch and op, its launch work is in the
budget, and the report names it."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import profuse
from profuse.analysis.advice.roofline import device_peaks
from profuse.analysis.busy import launch_calls
from profuse.analysis.diagnosis import diagnose
from profuse.analysis.kernel_class import fp32_matrix, kernel_class
from profuse.trace import vocabulary
from profuse.trace.datasheets import Datasheet
from profuse.trace.vocabulary import Device, KernelNames


def _x(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args: object) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _xyz_trace(tmp_path: Path) -> Path:
    """A step of 20 ops on an unknown accelerator: each op's runtime call (category xyz_runtime, named
    submitWork: no word of any known family's launches) puts a 2 µs kernel on the device; the last
    four are its vendor's FP32 matrix kernels (``xyzblas_f32``), named by no known family."""
    ev = [_x("user_annotation", "ProfilerStep#1", 0, 1000)]
    for i in range(20):
        t = 10 + 40 * i
        kernel = "xyzblas_f32_tile" if i >= 16 else "xyz_add_kernel"
        ev += [_x("cpu_op", "aten::add", t, 30), _x("xyz_runtime", "submitWork", t + 20, 8, correlation=i + 1),
               _x("kernel", kernel, t + 32, 2, pid=0, tid=3, correlation=i + 1, stream=3, device=0)]
    p = tmp_path / "xyz.json"
    p.write_text(json.dumps({"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "XYZ Accel 9"}]}))
    return p


@pytest.fixture
def own_vocabulary() -> Iterator[None]:
    """The vocabulary as shipped, restored in place after the test (a registered entry stays in this test)."""
    shipped = list(vocabulary.DEVICES)
    yield
    vocabulary.DEVICES[:] = shipped
    vocabulary._rules.cache_clear()
    vocabulary._generation += 1   # rules cached by generation (kernel names) are built again


def test_a_device_is_one_vocabulary_entry(tmp_path: Path, own_vocabulary: None) -> None:
    path = _xyz_trace(tmp_path)
    # GIVEN the vocabulary as shipped: the calls are not runtime calls, so nothing links or launches
    with profuse.load(path, cache=False) as t:
        kinds = dict(t.con.execute("SELECT name, kind FROM events WHERE name = 'submitWork' LIMIT 1").fetchall())
        linked = t.con.execute("SELECT count(op) FROM events WHERE kind = 'kernel'").fetchall()[0][0]
    assert kinds == {"submitWork": "other"} and linked == 0
    # WHEN the family is added as one entry
    sheet = Datasheet("XYZ-9", ("XYZ Accel 9",), 100.0, 10.0, 1000.0, 50.0, 0.0, "the XYZ-9 datasheet")
    vocabulary.register(Device("XYZ", runtime_categories=("xyz_runtime",), launch_parts=("submitwork",),
                               marker_categories=("xyz_runtime",),
                               kernels=KernelNames(gemm=("xyzblas",), fp32=("xyzblas_f32",)), datasheets=(sheet,)))
    # THEN its calls are runtime calls, each kernel links to its launch and op, the report names the device,
    # and the launch work is the budget's launch overhead and the cuda_graphs lever's evidence
    with profuse.load(path, cache=False) as t:
        rows = t.con.execute("""SELECT l.name, o.name FROM events k JOIN events l ON l.id = k.launch
                                JOIN events o ON o.id = k.op WHERE k.kind = 'kernel'""").fetchall()
        starts, _ends = launch_calls(t)
        label = t.device_label
        d = diagnose(t)
        peaks = device_peaks(t)
    assert rows == [("submitWork", "aten::add")] * 20
    assert label == "XYZ" and starts.size == 20
    # its kernel names are a class, with the dtype they prove, and its datasheet gives the peaks
    leaves = {lf.key: lf.us for lf in d.budget}
    assert leaves["idle/launch_overhead"] > 0 and leaves["busy/elementwise"] == pytest.approx(32.0)
    assert leaves["busy/gemm"] == pytest.approx(8.0)
    assert kernel_class("kernel", "xyzblas_f32_tile") == "gemm" and fp32_matrix("xyzblas_f32_tile", None)
    assert peaks is not None and peaks.source == "datasheet: XYZ-9" and peaks.gbps == 1000.0
    assert d.levers and d.levers[0].kind == "cuda_graphs"


def test_the_rules_are_the_union_of_the_entries() -> None:
    # every family's calls, as the loader and the analyses test them
    assert vocabulary.is_launch("cudaLaunchKernel") and vocabulary.is_launch("hipMemcpyAsync")
    assert vocabulary.is_launch("runFunction") and vocabulary.is_launch("nrt_execute")
    assert not vocabulary.is_launch("cudaStreamSynchronize") and not vocabulary.is_launch("cudaMemcpy")
    assert vocabulary.moves_work("cudaMemcpy") and not vocabulary.moves_work("cudaGetDevice")
    assert vocabulary.is_graph_launch("cudaGraphLaunch_v10000") and vocabulary.is_graph_launch("hipGraphLaunch")
    assert {"cuda_runtime", "hip_runtime", "mtia_runtime", "privateuse1_driver"} <= vocabulary.runtime_categories()
    assert vocabulary.device_of_calls(["nrt_execute"]) == "Neuron" and vocabulary.device_of_calls(["x"]) is None


@pytest.mark.parametrize(("kind", "name", "props", "model"), [
    ("CUDA", "NVIDIA A100-SXM4-80GB", {"totalGlobalMem": 85_000_000_000}, "A100 80GB SXM4"),
    ("CUDA", "NVIDIA A100 (no board named)", {"totalGlobalMem": 85_000_000_000}, "A100 80GB"),
    ("CUDA", "NVIDIA A100-PG509-200", {"totalGlobalMem": 42_297_524_224}, "A100 40GB"),  # a100_alexnet's
    ("CUDA", "NVIDIA PG509-210", None, "A100 80GB"),
    ("CUDA", "NVIDIA GB10", None, "GB10"),
    ("CUDA", "NVIDIA L40S", None, "L40S"),                      # the longest fragment: not L4
    ("ROCm", "AMD Instinct MI250X", None, "MI250X (one GCD)"),
    ("ROCm", "AMD Radeon Graphics", {"computeMajor": 9, "computeMinor": 0, "numSms": 104},
     "MI210 / MI250 GCD (gfx90a, 104 CUs)"),                   # mi250_rocm_toy_train's: named by properties
    ("CUDA", "NVIDIA H100", {"computeMajor": 9, "computeMinor": 0, "numSms": 132}, "H100"),
    ("CUDA", "Some GPU", {"computeMajor": 9, "computeMinor": 0, "numSms": 104}, None),  # AMD's properties, not AMD
    ("CUDA", "Some GPU", None, None),
    ("MTIA", "ARTEMIS", None, "MTIA v2 (Artemis)"),                  # mtia_inference's deviceProperties
    ("CUDA", "NVIDIA L40", None, "L40"),                              # not the L4
    ("CUDA", "NVIDIA H100 PCIe", None, "H100 PCIe"),                  # not the SXM board
    ("CUDA", "NVIDIA A100-SXM4-80GB MIG 3g.40gb", {"totalGlobalMem": 42_000_000_000}, "A100 80GB SXM4"),
])
def test_a_device_model_is_recognised_by_name_memory_or_properties(
        kind: str, name: str, props: dict[str, object] | None, model: str | None) -> None:
    sheet = vocabulary.datasheet(kind, name, props)
    assert (sheet.model if sheet else None) == model
    assert sheet is None or sheet.source  # every figure says where it comes from
