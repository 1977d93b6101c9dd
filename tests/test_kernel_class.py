"""The kernel classifier on real kernel names from every vendor in tests/data/traces (each name is
checked to be in its trace first, with plain JSON): cuBLAS/cuDNN/CUTLASS/flash on NVIDIA,
Tensile/MIOpen/aiter/paged attention on AMD, NCCL, Triton, MTIA command-processor events."""
from __future__ import annotations

import oracle
import pytest
from conftest import SHARED

import profuse
from profuse.analysis.kernel_class import KERNEL_CLASSES, fp32_matrix, kernel_class

CASES = [  # trace, kind, start of a kernel name in it, launching op (None: by name only), class
    ("a100_alexnet", "kernel", "ampere_sgemm_32x32_sliced1x4_tn", "aten::addmm", "gemm"),
    ("a100_alexnet", "kernel", "cudnn_ampere_scudnn_128x64_relu", "aten::cudnn_convolution", "conv"),
    ("a100_alexnet", "kernel", "sm80_xmma_fprop_implicit_gemm", "aten::cudnn_convolution", "conv"),
    ("a100_alexnet", "kernel", "void at::native::(anonymous namespace)::max_pool_forward_nchw", None, "reduction"),
    ("a100_alexnet", "memcpy", "Memcpy HtoD (Pageable -> Device)", "aten::copy_", "memcpy_h2d"),
    ("a100_event_sync", "memcpy", "Memcpy DtoH (Device -> Pageable)", "aten::copy_", "memcpy_d2h"),
    ("a100_nccl_rank0_of2", "kernel", "ncclKernel_AllReduce_RING_LL_Sum_float", None, "communication"),
    ("a100_nccl_rank0_of2", "kernel", "void cudnn::bn_bw_1C11_kernel_new", "aten::cudnn_batch_norm_backward", "norm"),
    ("a100_nccl_rank0_of2", "kernel", "void cutlass::Kernel", "aten::cudnn_convolution", "conv"),
    ("a100_nccl_rank0_of2", "memcpy", "Memcpy DtoD (Device -> Device)", None, "memcpy_d2d"),
    ("a100_triton_kernel", "kernel", "triton_poi_fused_add_cos_sin_0", None, "elementwise"),
    ("h100_bert_small", "kernel", "void pytorch_flash::flash_fwd_kernel", None, "attention"),
    ("h100_bert_small", "kernel", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "aten::addmm", "gemm"),
    ("h100_bert_small", "kernel", "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel", None, "norm"),
    ("h100_vit_falconsai", "kernel", "void cutlass::Kernel2", "aten::addmm", "gemm"),
    ("mi300_bert_small", "kernel", "attn_fwd", None, "attention"),
    ("mi300_bert_small", "kernel", "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV", "aten::addmm", "gemm"),
    ("mi300_sglang_decode_cudagraph", "kernel", "void paged_attention_ll4mi_QKV_mfma16_kernel", None, "attention"),
    ("mi300_sglang_decode_cudagraph", "kernel", "_ZN5aiter24add_rmsnorm_quant_kernel", None, "norm"),
    ("mi300_sglang_decode_cudagraph", "kernel", "_ZN7sgl_hip10activation18act_and_mul_kernel", None, "elementwise"),
    ("mi300_sglang_decode_cudagraph", "kernel", "void rotary_embedding_kernel", None, "elementwise"),
    ("mi300_sglang_decode_cudagraph", "kernel", "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV", None, "gemm"),
    ("mi300_torch_compile_triton", "kernel", "triton_red_fused_add_mean_mul_pow_rsqrt_0", None, "norm"),
    ("mi300_torch_compile_triton", "kernel", "triton_poi_fused__unsafe_view_mul_silu_2", None, "elementwise"),
    ("mi300_normalization_layers", "kernel", "MIOpenBatchNormFwdTrainSpatialMeanVariance", None, "norm"),
    ("mi210_gpu_only", "kernel", "igemm_fwd_gtcx2_nhwc_bf16", None, "conv"),
    ("mi210_gpu_only", "kernel", "void at::native::batch_norm_backward_kernel", None, "norm"),
    ("mi250_rocm_toy_train", "kernel", "Cijk_Alik_Bljk_SB_Bias_AS_SAV", "aten::addmm", "gemm"),
    ("v100_ns_timestamps", "kernel", "void cudnn::detail::dgrad_engine", None, "conv"),
    ("v100_ns_timestamps", "kernel", "void wgrad_alg0_engine", None, "conv"),
    ("v100_ns_timestamps", "kernel", "volta_sgemm_64x64_nt", None, "gemm"),
    ("legacy_capitalized_categories", "kernel", "void gemmk1_kernel", None, "gemm"),
    ("mtia_inference", "kernel", "pe_exe", None, "other"),
]


@pytest.mark.parametrize(("trace", "kind", "name", "op", "cls"), CASES)
def test_real_kernel_names_get_their_class(trace, kind, name, op, cls):
    names = {e["name"] for e in oracle.complete_events(SHARED / "traces" / f"{trace}.json.gz")
             if oracle.is_device_time(e)}
    full = next((n for n in names if n.startswith(name)), None)
    assert full is not None, f"{name} is not in {trace}"
    assert kernel_class(kind, full, op) == cls
    assert cls in KERNEL_CLASSES


def test_mtia_dma_takes_its_direction_from_the_launch_call():
    assert kernel_class("memcpy", "dma_request", None, "enqueueCommand memcpyHtoDAsync") == "memcpy_h2d"
    assert kernel_class("memcpy", "dma_request", None, "enqueueCommand memcpyDtoHAsync") == "memcpy_d2h"


def test_a_copy_takes_the_direction_it_records_first_and_is_never_guessed_device_to_device():
    # the DMA's own args.direction decides, before its launch call's name
    assert kernel_class("memcpy", "dma_request", None, None, "HOST_TO_DEVICE") == "memcpy_h2d"
    assert kernel_class("memcpy", "dma_request", None, "enqueueCommand memcpyHtoDAsync", "DEVICE_TO_HOST") == "memcpy_d2h"
    assert kernel_class("memcpy", "dma_request", None, None, "DEVICE_TO_DEVICE") == "memcpy_d2d"
    # a copy that names no direction anywhere is of unknown direction, whatever launched it
    assert kernel_class("memcpy", "dma_request", None, None) == "memcpy_unknown"
    assert kernel_class("memcpy", "Memcpy", "aten::copy_", "cudaMemcpyAsync") == "memcpy_unknown"
    # names that say device to device still are (CUDA peer-to-peer copies too)
    assert kernel_class("memcpy", "Memcpy PtoP (Device -> Device)", None, "cudaMemcpyPeerAsync") == "memcpy_d2d"
    assert "memcpy_unknown" in KERNEL_CLASSES


MTIA = SHARED / "traces" / "mtia_inference.json.gz"


def test_mtia_copy_leaves_are_the_directions_its_dma_requests_record():
    # GIVEN the MTIA trace, whose 877 dma_request copies each record args.direction (HOST_TO_DEVICE or
    # DEVICE_TO_HOST), 220 of them with no correlation id, so no launch call whose name says the direction
    from profuse.analysis.diagnosis import diagnose

    # WHEN it is diagnosed
    with profuse.load(MTIA, cache=False) as t:
        leaves = {lf.key: lf.us for lf in diagnose(t).budget}
    # THEN the budget's copy leaves are the copies of each recorded direction not under compute (the oracle
    # reads args.direction from the JSON), none of them device to device nor of unknown direction
    expected = oracle.exposed_copy_us(MTIA)
    assert expected["d2d"] == expected["unknown"] == 0 and expected["h2d"] > 7000
    got = {way: leaves.get(f"busy/memcpy_{way}", 0.0) for way in oracle.COPY_ORDER}
    assert got == pytest.approx(expected, abs=0.001)


def test_the_directions_table_holds_each_events_recorded_direction():
    recorded = [(i, e["args"]["direction"]) for i, e in enumerate(oracle.complete_events(MTIA))
                if isinstance((e.get("args") or {}).get("direction"), str)]
    with profuse.load(MTIA, cache=False) as t:
        table = t.con.execute("SELECT id, direction FROM directions ORDER BY id").fetchall()
    assert table == recorded and len(table) == 877


def test_fp32_matrix_kernels():
    assert fp32_matrix("volta_sgemm_64x64_nt", None)
    assert fp32_matrix("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs", None)
    assert not fp32_matrix("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32", None)
    assert not fp32_matrix("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV", None)
    assert fp32_matrix("cutlass::Kernel", '["float", "float"]')
    assert not fp32_matrix("cutlass::Kernel", '["c10::BFloat16", "c10::BFloat16"]')


@pytest.mark.parametrize(("name", "cls"), [
    # inductor names a pointwise or reduction kernel after the addmm whose bias it adds: not a GEMM (the
    # matmul itself is the extern cuBLAS kernel beside it; names from the H200 compiled BERT fixture)
    ("triton_per_fused_add_addmm_native_layer_norm_view_6", "norm"),
    ("triton_poi_fused_addmm_gelu_view_7", "elementwise"),
    ("triton_poi_fused_addmm_clone_mul_transpose_view_2", "elementwise"),
    # inductor's GEMM templates are GEMMs
    ("triton_tem_fused_addmm_0", "gemm"), ("triton_tem_fused_mm_1", "gemm"),
])
def test_inductor_kernels_named_after_a_matmul_are_gemms_only_as_templates(name, cls):
    assert kernel_class("kernel", name, "## Call CompiledFxGraph abc ##") == cls


@pytest.mark.parametrize(("name", "cls", "fp32"), [
    # vLLM's fused residual + RMSNorm kernel: "typeConvert" in its template arguments is no convolution
    ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(vllm::_typeConvert<c10::BFloat16>::packed_t*)",
     "norm", False),
    # A100 tensor-op s1688 kernels run FP32 inputs as TF32; a cuDNN "sgemm" over bf16 is 16-bit math
    ("cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4", "gemm", False),
    ("void precomputed_convolve_sgemm<__nv_bfloat16, 1024, 5, 5, 4, 3, 3, 1, false>(int, int)", "conv", False),
    ("volta_sgemm_64x64_nt", "gemm", True),
])
def test_kernel_names_that_do_not_say_fp32_or_conv(name, cls, fp32):
    from profuse.analysis.kernel_class import fp32_matrix

    assert kernel_class("kernel", name, None) == cls
    assert fp32_matrix(name, '["float", "float"]' if "s1688" in name else None) is fp32
