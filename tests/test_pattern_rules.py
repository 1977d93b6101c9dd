"""Pattern rules on small hand-built device traces: attention across a zero-kernel child scope,
and inductor kernel names split with a real op vocabulary."""
from __future__ import annotations

import json

import oracle

import profuse
from profuse.analysis.advice.fusion import fusion_candidates
from profuse.analysis.compiled import source_ops

ATTN = "attention (matmul-softmax-matmul)"


def _x(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _op_with_kernel(name, ts, corr, dims, types):
    return [_x("cpu_op", name, ts, 8, **{"Input Dims": dims, "Input type": types}),
            _x("cuda_runtime", "cudaLaunchKernel", ts + 2, 3, correlation=corr),
            _x("kernel", f"k_{corr}", ts + 10, 5, pid=0, tid=7, correlation=corr, stream=7, device=0)]


def _attention_trace(tmp_path, child_kernels: bool):
    """bmm -> softmax -> (child module: zero kernels, or one) -> bmm inside one module."""
    s = [[2, 4, 16, 16]]
    t = ["float"]
    ev = [_x("python_function", "nn.Module: Attn_0", 0, 200)]
    ev += _op_with_kernel("aten::bmm", 10, 1, [[8, 16, 32], [8, 32, 16]], ["float", "float"])
    ev += _op_with_kernel("aten::_softmax", 30, 2, [*s, [], []], [*t, "Scalar", "Scalar"])
    ev += [_x("python_function", "nn.Module: Skip_0", 50, 20),
           _x("cpu_op", "aten::dropout", 52, 4, **{"Input Dims": [*s, [], []], "Input type": [*t, "Scalar", "Scalar"]})]
    if child_kernels:
        ev += [_x("cuda_runtime", "cudaLaunchKernel", 53, 2, correlation=9),
               _x("kernel", "mask_kernel", 60, 5, pid=0, tid=7, correlation=9, stream=7, device=0)]
    ev += _op_with_kernel("aten::bmm", 80, 3, [[8, 16, 16], [8, 16, 32]], ["float", "float"])
    p = tmp_path / f"attn{int(child_kernels)}.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


def test_attention_found_across_a_zero_kernel_child_scope(tmp_path):
    with profuse.load(_attention_trace(tmp_path, child_kernels=False)) as t:
        cands = fusion_candidates(t)
    hits = [c for c in cands if c.pattern == ATTN and c.scope == "nn.Module: Attn"]
    assert hits and hits[0].ops[0] == "aten::bmm" and hits[0].ops[-1] == "aten::bmm"
    assert 0 < hits[0].predicted_saving_us <= hits[0].device_us


def test_a_child_scope_doing_work_breaks_the_attention_window(tmp_path):
    with profuse.load(_attention_trace(tmp_path, child_kernels=True)) as t:
        cands = fusion_candidates(t)
    assert not [c for c in cands if c.pattern == ATTN]


def test_inductor_names_keep_multi_word_ops_whole():
    assert source_ops("triton_poi_fused_bitwise_and_ge_lt_3") == ["bitwise_and", "ge", "lt"]
    assert source_ops("triton_poi_fused__scaled_dot_product_flash_attention_add_0") == [
        "_scaled_dot_product_flash_attention", "add"]
    assert source_ops("triton_red_fused__to_copy_add_embedding_native_layer_norm_1") == [
        "_to_copy", "add", "embedding", "native_layer_norm"]
    assert source_ops("triton_poi_fused__native_batch_norm_legit_no_training_relu_0") == [
        "_native_batch_norm_legit_no_training", "relu"]
    # a name outside the vocabulary stays one op up to the next known op, never split into words
    assert source_ops("triton_poi_fused_my_custom_thing_mul_5") == ["my_custom_thing", "mul"]


def _plain_op(name, ts, corr, dur=5):
    """An op without recorded shapes (record_shapes off) and its kernel."""
    return [_x("cpu_op", name, ts, 8), _x("cuda_runtime", "cudaLaunchKernel", ts + 2, 3, correlation=corr),
            _x("kernel", f"k_{corr}", ts + 10, dur, pid=0, tid=7, correlation=corr, stream=7, device=0)]


def test_a_counter_increment_is_not_a_residual_add(tmp_path):
    # GIVEN a ResNet block's tail without shapes: BatchNorm's num_batches_tracked add_ (before its norm),
    # the batch_norm, the residual add_ (out += identity) and the relu_
    ev = [_x("python_function", "nn.Module: Bottleneck_0", 0, 200)]
    for i, (name, dur) in enumerate((("aten::add_", 2), ("aten::batch_norm", 20), ("aten::add_", 10), ("aten::relu_", 10))):
        ev += _plain_op(name, 10 + 40 * i, i + 1, dur)
    p = tmp_path / "resnet_tail.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    with profuse.load(p) as t:
        cands = fusion_candidates(t)
    # THEN the chain follows the data: norm -> residual add -> activation, without the counter (its sum
    # flows nowhere), and nothing is called a residual add before a norm
    assert [c.pattern for c in cands] == ["norm + residual add + activation"]
    assert cands[0].ops == ["aten::batch_norm", "aten::add_", "aten::relu_"]
    assert cands[0].device_us == 20 + 10 + 10
    assert cands[0].device_us == oracle.kernel_us_of_ops(p, ["aten::batch_norm", "aten::add_", "aten::relu_"],
                                                         skip_first_of="aten::add_")


def test_a_pre_norm_residual_is_still_one(tmp_path):
    # GIVEN x + attn_out (out of place, full-size tensors) then layer_norm, with shapes
    s, t = [[4, 128, 256], [4, 128, 256]], ["float", "float"]
    ev = [_x("python_function", "nn.Module: Block_0", 0, 200)]
    ev += _op_with_kernel("aten::add", 10, 1, s, t)
    ev += _op_with_kernel("aten::layer_norm", 40, 2, [[4, 128, 256], [], [256], [256], []],
                          ["float", "Scalar", "float", "float", "Scalar"])
    p = tmp_path / "prenorm.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    with profuse.load(p) as t:
        cands = fusion_candidates(t)
    assert [c.pattern for c in cands] == ["residual add + norm"]
