"""Datasheet peaks of the devices profuse recognises, each with its source: the ``datasheets`` of the
device vocabulary's entries (:mod:`profuse.trace.vocabulary`).

Dense figures throughout: a datasheet that quotes "with sparsity" is halved. Where a GeForce part
quotes a tensor rate with FP16 and with FP32 accumulation, the higher is kept (a roofline's peak is the
fastest the device can go). ``fp8`` is 0 where the device has no FP8 math.

Each record also says which formats its figures are, so nothing quotes or advises a format the device
lacks: ``half_format`` is the 16-bit format ``half`` is the rate of (``"BF16"``; ``"FP16"`` on Volta and
Turing, whose tensor cores have no BF16), and ``tf32_kind`` what ``tf32`` is: ``"TF32"`` (FP32 matmuls
may run as TF32, a setting), ``"FP32 matrix"`` (AMD CDNA2, which has no TF32: its FP32 GEMMs run on the
matrix cores as they are, at this rate) or ``""`` (neither: ``tf32`` repeats the FP32 rate).

A device is recognised by the longest fragment of its name that an entry lists (``L40S`` before
``L4``), among entries whose memory range holds the device's ``totalGlobalMem`` where the trace lists
it (an A100 40GB and 80GB share a name); a device whose name says nothing (``AMD Radeon Graphics``) by
its properties: compute capability (gfx major/minor) and SM/CU count.
"""
from __future__ import annotations

from dataclasses import dataclass

HALF_FORMATS = ("BF16", "FP16")
TF32_KINDS = ("TF32", "FP32 matrix", "")


@dataclass(frozen=True)
class Datasheet:
    """One device model's dense peaks and where they come from."""

    model: str                        # the name a report quotes ("A100 80GB")
    names: tuple[str, ...]            # fragments of the device's name that recognise it (any case)
    half: float                       # dense 16-bit tensor TFLOP/s, in ``half_format``
    fp32: float                       # FP32 (non-tensor) TFLOP/s
    gbps: float                       # memory bandwidth, GB/s
    tf32: float                       # dense TF32 tensor TFLOP/s, or what ``tf32_kind`` says
    fp8: float                        # dense FP8 TFLOP/s, 0 where the device has none
    source: str                       # where the figures come from
    memory_gib: tuple[float, float] | None = None   # totalGlobalMem range that tells variants apart
    arch: tuple[int, int] | None = None             # (computeMajor, computeMinor) recognising it by properties
    units: int | None = None                        # SMs / CUs, with ``arch``
    half_format: str = "BF16"                       # the 16-bit format ``half`` is: "BF16", or "FP16" where none
    tf32_kind: str = "TF32"                         # what ``tf32`` is: "TF32", "FP32 matrix" or "" (FP32 again)

    def __post_init__(self) -> None:
        if self.half_format not in HALF_FORMATS or self.tf32_kind not in TF32_KINDS:
            raise ValueError(f"{self.model}: half_format {self.half_format!r} is not one of {HALF_FORMATS}, or "
                             f"tf32_kind {self.tf32_kind!r} not one of {TF32_KINDS}")


_NV = "nvidia.com/en-us/data-center/"
NVIDIA: tuple[Datasheet, ...] = (
    # V100 datasheet (SXM2): single precision 15.7 TFLOPS, "Tensor Performance" 125 TFLOPS, which is Volta's
    # FP16 tensor-core rate (Volta whitepaper: FP16 multiply, FP32 accumulate); Volta has no BF16 or TF32
    Datasheet("V100", ("V100",), 125.0, 15.7, 900.0, 15.7, 0.0, _NV + "v100/ (SXM2)", half_format="FP16",
              tf32_kind=""),
    Datasheet("A100 80GB", ("A100", "PG509-210"), 312.0, 19.5, 2039.0, 156.0, 0.0, _NV + "a100/ (SXM 80GB)",
              memory_gib=(60.0, 1e9)),
    # PG509-200 is the A100 SXM4 40GB board: HBM2 at 1,555 GB/s
    Datasheet("A100 40GB", ("A100", "PG509-200"), 312.0, 19.5, 1555.0, 156.0, 0.0, _NV + "a100/ (SXM 40GB)",
              memory_gib=(0.0, 60.0)),
    # a name that says which board wins over the memory size (a MIG slice of an 80GB board lists less memory)
    Datasheet("A100 80GB SXM4", ("A100-SXM4-80GB", "A100 80GB SXM"), 312.0, 19.5, 2039.0, 156.0, 0.0,
              _NV + "a100/ (SXM 80GB)"),
    Datasheet("A100 80GB PCIe", ("A100-PCIE-80GB", "A100 80GB PCIe"), 312.0, 19.5, 1935.0, 156.0, 0.0,
              _NV + "a100/ (PCIe 80GB)"),
    Datasheet("H100", ("H100",), 989.0, 67.0, 3350.0, 494.7, 1979.0, _NV + "h100/ (SXM)"),
    Datasheet("H100 PCIe", ("H100 PCIe", "H100-PCIE"), 756.0, 51.0, 2000.0, 378.0, 1513.0, _NV + "h100/ (PCIe)"),
    Datasheet("H200", ("H200",), 989.0, 67.0, 4800.0, 494.7, 1979.0, _NV + "h200/ (SXM: H100's compute, HBM3e)"),
    Datasheet("B200", ("B200",), 2250.0, 80.0, 8000.0, 1100.0, 4500.0, _NV + "hgx/ (HGX B200, per GPU)"),
    Datasheet("B300", ("B300",), 2250.0, 75.0, 8000.0, 1100.0, 4500.0, _NV + "hgx/ (HGX B300, per GPU)"),
    # DGX Spark datasheet: 1 PFLOP FP4 with sparsity, 128 GB LPDDR5x at 273 GB/s; Hot Chips 2025: 31 TFLOPS
    # FP32. 8-, 16-bit and TF32 rates: FP4's dense 500 halved per doubling of width, as on every Blackwell
    Datasheet("GB10", ("GB10",), 125.0, 31.0, 273.0, 62.5, 250.0,
              "nvidia.com/en-us/products/workstations/dgx-spark/ and Hot Chips 2025"),
    Datasheet("L4", ("L4",), 121.0, 30.3, 300.0, 60.0, 242.0, _NV + "l4/"),
    Datasheet("L40S", ("L40S",), 362.05, 91.6, 864.0, 183.0, 733.0, _NV + "l40s/"),
    Datasheet("L40", ("L40",), 181.0, 90.5, 864.0, 90.5, 362.0, _NV + "l40/"),
    Datasheet("A10G", ("A10G",), 70.0, 31.2, 600.0, 35.0, 0.0, "aws.amazon.com/ec2/instance-types/g5/, A10 datasheet"),
    Datasheet("RTX 4090", ("RTX 4090",), 330.3, 82.6, 1008.0, 82.6, 660.6, "NVIDIA Ada architecture whitepaper"),
    Datasheet("RTX 4080", ("RTX 4080",), 194.9, 48.7, 716.8, 48.7, 389.9, "NVIDIA Ada architecture whitepaper"),
    Datasheet("RTX 3090", ("RTX 3090",), 142.0, 35.6, 936.0, 35.6, 0.0, "NVIDIA Ampere GA102 whitepaper"),
    Datasheet("RTX 3080", ("RTX 3080",), 119.0, 29.8, 760.0, 29.8, 0.0, "NVIDIA Ampere GA102 whitepaper"),
    # Turing's tensor cores take FP16 (and INT8/INT4), no BF16 or TF32: the Turing whitepaper's 107.6 TFLOPS FP16
    # tensor rate (FP16 accumulate) on the 2080 Ti; the T4 datasheet's "Mixed-Precision (FP16/FP32) 65 TFLOPS"
    # beside single precision 8.1 TFLOPS. Their FP32 rate stands in for TF32
    Datasheet("RTX 2080 Ti", ("RTX 2080 Ti",), 107.6, 13.4, 616.0, 13.4, 0.0, "NVIDIA Turing whitepaper",
              half_format="FP16", tf32_kind=""),
    Datasheet("T4", ("Tesla T4",), 65.0, 8.1, 320.0, 8.1, 0.0, _NV + "tesla-t4/", half_format="FP16", tf32_kind=""),
)

_AMD = "amd.com/en/products/accelerators/instinct/"
AMD: tuple[Datasheet, ...] = (
    # CDNA2 (MI210, MI250, MI250X) has BF16 and FP16 matrix math but no TF32: the datasheets give FP32 vector
    # and FP32 matrix rates (MI210: 22.6 and 45.3 TFLOPs, FP16/BF16 181), and its FP32 GEMMs run on the
    # matrix cores as they are (rocBLAS's Tensile kernels for FP32 are MFMA ones, "_MI16x16x1_" in their names)
    Datasheet("MI210", ("MI210",), 181.0, 22.6, 1638.0, 45.3, 0.0, _AMD + "mi200/mi210.html",
              tf32_kind="FP32 matrix"),
    # torch sees each of an MI250's two dies (GCDs) as one device: half the card's figures
    Datasheet("MI250 (one GCD)", ("MI250",), 181.05, 22.65, 1638.4, 45.25, 0.0, _AMD + "mi200/mi250.html (per GCD)",
              tf32_kind="FP32 matrix"),
    Datasheet("MI250X (one GCD)", ("MI250X",), 191.5, 23.95, 1638.4, 47.85, 0.0, _AMD + "mi200/mi250x.html (per GCD)",
              tf32_kind="FP32 matrix"),
    # CDNA3 has TF32 (xf32: 653.7 TFLOPs dense on the MI300X datasheet, beside FP32 matrix 163.4)
    Datasheet("MI300X", ("MI300X",), 1307.0, 163.4, 5300.0, 653.7, 2614.9, _AMD + "mi300/mi300x.html"),
    Datasheet("MI325X", ("MI325X",), 1307.0, 163.4, 6000.0, 653.7, 2614.9, _AMD + "mi300/mi325x.html"),
    # CDNA4 dropped TF32 (the xf32 MFMAs are gfx942's only): FP32 matrix and vector are both 157.3 TFLOPs
    Datasheet("MI355X", ("MI355X",), 2516.6, 157.3, 8000.0, 157.3, 5033.2, _AMD + "mi350/mi355x.html", tf32_kind=""),
    # by properties where the name says nothing: gfx90a with 104 CUs is an MI210 or one MI250 GCD (the
    # same figures); gfx942 with 304 CUs an MI300X
    Datasheet("MI210 / MI250 GCD (gfx90a, 104 CUs)", (), 181.0, 22.6, 1638.0, 45.3, 0.0,
              _AMD + "mi200/mi210.html", arch=(9, 0), units=104, tf32_kind="FP32 matrix"),
    Datasheet("MI300X (gfx942, 304 CUs)", (), 1307.0, 163.4, 5300.0, 653.7, 2614.9, _AMD + "mi300/mi300x.html",
              arch=(9, 4), units=304),
)


MTIA: tuple[Datasheet, ...] = (
    # ai.meta.com/blog/next-generation-meta-training-inference-accelerator-AI-MTIA/ (April 2024): MTIA v2
    # (codenamed Artemis, the name its traces' deviceProperties give): dense GEMM 177 TFLOP/s FP16/BF16, SIMD
    # FP32 2.76 TFLOP/s, LPDDR5 204.8 GB/s; no TF32 or FP8 listed
    Datasheet("MTIA v2 (Artemis)", ("ARTEMIS", "MTIA v2"), 177.0, 2.76, 204.8, 2.76, 0.0,
              "ai.meta.com/blog/next-generation-meta-training-inference-accelerator-AI-MTIA/", tf32_kind=""),
)


def _number(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def recognise(sheets: tuple[Datasheet, ...], name: str | None, props: dict[str, object] | None
              ) -> Datasheet | None:
    """The datasheet of the device ``name`` / ``props`` (a ``deviceProperties`` entry) describe: the
    longest name fragment whose memory range holds the device's memory, else its properties."""
    props = props or {}
    mem = _number(props.get("totalGlobalMem"))
    gib = mem / 2**30 if mem is not None else None
    low = (name or "").lower()
    best: tuple[int, Datasheet] | None = None
    for sheet in sheets:
        if sheet.memory_gib is not None and gib is not None and not sheet.memory_gib[0] <= gib < sheet.memory_gib[1]:
            continue
        for frag in sheet.names:
            if frag.lower() in low and (best is None or len(frag) > best[0]):
                best = (len(frag), sheet)
    if best is not None:
        return best[1]
    arch = (_number(props.get("computeMajor")), _number(props.get("computeMinor")))
    units = _number(props.get("numSms"))
    return next((s for s in sheets if s.arch is not None and s.arch == arch and s.units == units), None)
