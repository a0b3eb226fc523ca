"""The estimate's peak: what is live at the same time. The optimizer step's fp32 copy of 16-bit gradients (after the
activations are freed) and, within the forward/backward, one layer's working set or the loss's logits, whichever is
larger. Shapes from jobs run on one H200 (139.8 GiB): the 175B shape at 4 layers in fp16 ran out of memory at its
first step; a 1-layer model at sequence 262144 with full recompute trained."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from plan_shapes import GPT_175B

from launcher.estimate import formulas as est
from launcher.estimate import summary

H200 = est.GPUS["h200-141gb"]
# Megatron-DeepSpeed's 175B script moved to one GPU: fp16, full recompute, micro batch 4 at sequence 1024
FP16_175B_4_LAYERS = {**GPT_175B, "num_layers": 4, "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
                      "sequence_parallel": False, "use_distributed_optimizer": False, "bf16": False, "fp16": True,
                      "seq_length": 1024, "max_position_embeddings": 1024, "micro_batch_size": 4,
                      "global_batch_size": 4, "recompute_granularity": "full", "recompute_method": "uniform",
                      "recompute_num_layers": 1}
# an FPDT script moved to one GPU: 1 layer of a 6.7B model at sequence 262144, fp16, full recompute
LONG_SEQUENCE_1_LAYER = {"num_layers": 1, "hidden_size": 4096, "num_attention_heads": 32, "seq_length": 262144,
                         "max_position_embeddings": 262144, "vocab_size": 50257, "micro_batch_size": 2,
                         "global_batch_size": 2, "fp16": True, "recompute_granularity": "full",
                         "recompute_method": "uniform", "recompute_num_layers": 1}


def one_gpu(args: dict) -> tuple[est.ModelShape, est.Training]:
    # the launcher's compiled TP=1 cross entropy (its fast SDPA spec) keeps the logits and their gradient in 16 bits
    return est.model_shape(args), replace(est.training_of(args, 1), fused_cross_entropy=True)


@pytest.mark.parametrize(("args", "grad_bytes"), [
    ({"fp16": True}, 2),  # Megatron keeps fp16 gradients in fp16 unless told otherwise
    ({"fp16": True, "accumulate_allreduce_grads_in_fp32": True}, 4),
    ({"bf16": True}, 4),
    ({"bf16": True, "grad_reduce_in_bf16": True}, 2),
    ({}, 4),  # fp32
])
def test_the_gradient_buffer_is_what_megatron_accumulates_in(args: dict, grad_bytes: int) -> None:
    t = est.training_of({**FP16_175B_4_LAYERS, "fp16": False, **args}, 1)
    assert t.main_grad_bytes == grad_bytes
    assert est.bytes_per_parameter(t)[1] == grad_bytes


def test_16_bit_gradients_get_an_fp32_copy_for_the_optimizer_step() -> None:
    m, t = one_gpu(FP16_175B_4_LAYERS)
    mem = est.complete_memory(m, t)
    params = mem.weights / 2
    assert mem.optimizer_step == pytest.approx(4 * params)
    # 2 B weights + 2 B gradients + 12 B master and Adam, and in the step 4 B more: 20 B per parameter, above the
    # few GiB of activations a full recompute keeps
    assert mem.total == pytest.approx(20 * params)
    assert mem.total > mem.weights_and_optimizer + mem.activations
    assert not est.memory_fit(mem.total, H200.memory_bytes)
    # fp32 gradient buffers are the step's gradients themselves: no copy
    fp32_grads = replace(t, fp16_grads_in_fp32=True)
    assert est.complete_memory(m, fp32_grads).optimizer_step == 0
    assert est.complete_memory(m, replace(t, precision="bf16")).optimizer_step == 0


def test_the_step_copy_is_the_shard_the_distributed_optimizer_updates() -> None:
    args = {**FP16_175B_4_LAYERS, "use_distributed_optimizer": True}
    m = est.model_shape(args)
    t = est.training_of(args, 4)
    mem = est.complete_memory(m, t)
    assert t.dp_cp == 4
    assert mem.optimizer_step == pytest.approx(4 * mem.weights / 2 / 4)


def test_the_step_copy_stays_below_the_activations_of_a_large_micro_batch() -> None:
    m, t = one_gpu({**FP16_175B_4_LAYERS, "num_layers": 1, "recompute_granularity": None,
                    "micro_batch_size": 16, "global_batch_size": 16})
    mem = est.complete_memory(m, t)
    assert mem.activations > mem.optimizer_step > 0
    assert mem.total == pytest.approx(mem.weights_and_optimizer + mem.activations)


def test_full_recompute_holds_the_larger_of_one_layer_and_the_logits() -> None:
    m, t = one_gpu(LONG_SEQUENCE_1_LAYER)
    s, b, h = m.seq_length, t.micro_batch_size, m.hidden_size
    layer = est.layer_activation_bytes(m, t)
    loss = 2 * 2 * s * b * m.padded_vocab_size + 2 * s * b * h  # fp16 logits and their gradient, the layer's input
    kept = 2 * s * b * h  # the one layer's input
    embedding = s * b * h + 8 * s * b
    act = est.stage_activation_bytes(m, t, 0)
    assert loss > layer
    assert act == pytest.approx(kept + embedding + loss)
    assert est.memory_fit(est.complete_memory(m, t).total, H200.memory_bytes)
    # a small vocabulary: the recomputed layer is the larger
    small = est.model_shape({**LONG_SEQUENCE_1_LAYER, "vocab_size": 1000})
    assert est.stage_activation_bytes(small, t, 0) == pytest.approx(
        kept + embedding + est.layer_activation_bytes(small, t))


def test_without_recompute_the_kept_layers_are_live_with_the_logits() -> None:
    args = {**LONG_SEQUENCE_1_LAYER, "recompute_granularity": None, "seq_length": 8192,
            "max_position_embeddings": 8192}
    m, t = one_gpu(args)
    s, b, h = m.seq_length, t.micro_batch_size, m.hidden_size
    loss = 2 * 2 * s * b * m.padded_vocab_size + 2 * s * b * h
    embedding = s * b * h + 8 * s * b
    assert est.stage_activation_bytes(m, t, 0) == pytest.approx(est.layer_activation_bytes(m, t) + loss + embedding)


def test_the_difference_from_megatrons_report_still_adds_up_with_the_step_copy() -> None:
    m, t = one_gpu(FP16_175B_4_LAYERS)
    terms = {d.what: d.bytes for d in est.memory_difference(m, t)}
    assert terms["optimizer step"] > 0 and terms["gradients in 16 bits"] < 0
    assert sum(terms.values()) == pytest.approx(est.complete_memory(m, t).total - est.megatron_memory(m, t).total)


def test_torch_adam_adds_its_square_root_temporary_to_the_step() -> None:
    fast = {**FP16_175B_4_LAYERS, "spec": ["launcher.inside.megatron_ext.sdpa_spec_fast", "layer_spec"]}
    assert est.uses_torch_adam(FP16_175B_4_LAYERS, transformer_engine=False, apex=False)
    assert not est.uses_torch_adam(fast, transformer_engine=False, apex=False)  # the fast spec's fused AdamW
    assert not est.uses_torch_adam(FP16_175B_4_LAYERS, transformer_engine=True, apex=False)
    assert not est.uses_torch_adam(FP16_175B_4_LAYERS, transformer_engine=False, apex=True)
    m, t = one_gpu(FP16_175B_4_LAYERS)
    params = est.complete_memory(m, t).weights / 2
    assert est.optimizer_step_bytes(replace(t, torch_adam=True), params) == pytest.approx(8 * params)
    assert est.optimizer_step_bytes(replace(t, torch_adam=True, precision="bf16"), params) == pytest.approx(
        4 * params)
    assert est.optimizer_step_bytes(replace(t, torch_adam=True, precision="fp32"), params) == pytest.approx(
        4 * params)


def test_the_dry_runs_estimate_prices_the_adam_its_kernels_give() -> None:
    layout = SimpleNamespace(world_size=1, tp=1, pp=1, cp=1, vpp=None, micro_batch_size=4, global_batch_size=4)
    bare = summary.summary(FP16_175B_4_LAYERS, layout, "h200-141gb",
                           kernels=SimpleNamespace(transformer_engine=False, apex=False))
    te = summary.summary(FP16_175B_4_LAYERS, layout, "h200-141gb",
                         kernels=SimpleNamespace(transformer_engine=True, apex=False))
    params = te["parameters_per_gpu"]
    assert bare["memory_per_gpu_bytes"] - te["memory_per_gpu_bytes"] == pytest.approx(4 * params, rel=1e-6)
