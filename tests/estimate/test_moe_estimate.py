"""MoE in the estimate: parameters against the GPTModel Megatron builds on CPU, FLOPs against Megatron's own
num_floating_point_operations, and the expert sharding of memory and time over EP (issue 27)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from launcher.estimate import formulas as est
from launcher.estimate import steptime
from tests.estimate.test_parameter_count_megatron import model_parallel  # noqa: F401 - the fixture

# Qwen3-30B-A3B as Megatron-MoE-ModelZoo's model_configs/benchmarking/Qwen3-30B-A3B.yaml states it
QWEN3_30B = dict(num_layers=48, hidden_size=2048, ffn_hidden_size=6144, num_attention_heads=32,
                 group_query_attention=True, num_query_groups=4, kv_channels=128, swiglu=True,
                 normalization="RMSNorm", untie_embeddings_and_output_weights=True, position_embedding_type="rope",
                 add_bias_linear=False, vocab_size=151936, make_vocab_size_divisible_by=1187, seq_length=4096,
                 max_position_embeddings=40960, num_experts=128, moe_ffn_hidden_size=768, moe_router_topk=8)
TINY_MOE = dict(num_layers=4, hidden_size=64, num_attention_heads=4, swiglu=True, normalization="RMSNorm",
                add_bias_linear=False, position_embedding_type="rope", seq_length=32, max_position_embeddings=32,
                vocab_size=500, num_experts=4, moe_ffn_hidden_size=48, moe_router_topk=2,
                moe_shared_expert_intermediate_size=96, moe_layer_freq=2)


def test_qwen3_30b_a3b_has_its_published_30_5b_parameters() -> None:
    assert est.human(est.parameter_count(QWEN3_30B)) == "30.53B"


def test_moe_layer_freq_counts_every_nth_layer_as_moe() -> None:
    m = est.model_shape(TINY_MOE)
    assert (m.num_experts, m.moe_layers, m.moe_topk, m.shared_expert_size) == (4, 2, 2, 96)


def test_experts_shard_over_ep_and_their_optimizer_state_over_expert_dp() -> None:
    m = est.model_shape(QWEN3_30B)
    one = est.Training(world_size=16, pp=2, micro_batch_size=2, global_batch_size=512, distributed_optimizer=True)
    eight = replace(one, ep=8)
    p1, p8 = est.stage_parameters(m, one)[0], est.stage_parameters(m, eight)[0]
    assert p8.expert_params == pytest.approx(p1.expert_params / 8)
    assert p1.params - p8.params == pytest.approx(p1.expert_params * 7 / 8)
    assert (one.expert_dp, eight.expert_dp) == (8, 1)
    assert est.complete_memory(m, eight).total < est.complete_memory(m, one).total


def test_moe_step_time_counts_the_dispatch_only_with_expert_parallelism() -> None:
    m = est.model_shape(QWEN3_30B)
    t = est.Training(world_size=16, pp=2, micro_batch_size=2, global_batch_size=512, distributed_optimizer=True,
                     moe_dispatcher="alltoall")
    gpu = est.GPUS["h100-80gb"]
    no_ep = steptime.step_time(m, t, gpu)
    ep8 = steptime.step_time(m, replace(t, ep=8), gpu)
    assert no_ep.tensor_comm == 0 and ep8.tensor_comm > 0
    # the routed experts' FLOPs are the same whatever EP: compute differs only by GEMM shape efficiency
    assert ep8.compute < no_ep.compute


@pytest.mark.megatron
def test_moe_flops_equal_megatrons_num_floating_point_operations() -> None:
    from tests.estimate.test_estimate_megatron import megatron_args, training_mod

    for args in (QWEN3_30B | {"num_layers": 4}, TINY_MOE):
        ns = megatron_args({**args, "micro_batch_size": 1, "global_batch_size": 8}, 1)
        expected = training_mod.num_floating_point_operations(ns, 8)
        m = est.model_shape({**args, "padded_vocab_size": ns.padded_vocab_size})
        assert est.flops_per_iteration(m, 8) == pytest.approx(expected, rel=1e-9)


@pytest.mark.megatron
def test_moe_weight_and_optimizer_memory_equal_megatrons_report() -> None:
    from tests.estimate.test_estimate_megatron import megatron_args, tmu

    for ep, dist_opt in ((1, False), (4, True), (8, True)):
        args = {**QWEN3_30B, "num_layers": 8, "expert_model_parallel_size": ep, "micro_batch_size": 1,
                "global_batch_size": 16, "use_distributed_optimizer": dist_opt}
        ns = megatron_args(args, 16)
        t = est.training_of(args, 16)
        m = est.model_shape({**args, "padded_vocab_size": ns.padded_vocab_size})
        expected = tmu.compute_weight_and_optimizer_memory(ns)
        assert est.megatron_memory(m, t).weights_and_optimizer == pytest.approx(expected, rel=1e-9), (ep, dist_opt)


@pytest.mark.megatron
@pytest.mark.usefixtures("model_parallel")
def test_moe_parameter_count_equals_the_model_megatron_builds() -> None:
    pytest.importorskip("torch")
    import torch.nn.functional as F
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer import TransformerConfig

    a = TINY_MOE
    config = TransformerConfig(
        num_layers=a["num_layers"], hidden_size=a["hidden_size"], num_attention_heads=a["num_attention_heads"],
        ffn_hidden_size=est.ffn_hidden_size(a), gated_linear_unit=True, activation_func=F.silu,
        normalization="RMSNorm", add_bias_linear=False, use_cpu_initialization=True,
        num_moe_experts=a["num_experts"], moe_ffn_hidden_size=a["moe_ffn_hidden_size"],
        moe_router_topk=a["moe_router_topk"], moe_shared_expert_intermediate_size=96,
        moe_layer_freq=a["moe_layer_freq"])
    spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False)
    model = GPTModel(config=config, transformer_layer_spec=spec,
                     vocab_size=est.padded_vocab_size(a, 1), max_sequence_length=a["max_position_embeddings"],
                     position_embedding_type="rope", share_embeddings_and_output_weights=True)
    assert est.parameter_count(a) == sum(p.numel() for p in model.parameters())


MIXTRAL_LIKE = dict(num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                    group_query_attention=True, num_query_groups=8, swiglu=True, normalization="RMSNorm",
                    add_bias_linear=False, position_embedding_type="rope", untie_embeddings_and_output_weights=True,
                    seq_length=4096, max_position_embeddings=4096, vocab_size=32000, num_experts=8,
                    moe_router_topk=2, moe_grouped_gemm=True, bf16=True, micro_batch_size=1, global_batch_size=256,
                    expert_model_parallel_size=8, moe_token_dispatcher_type="alltoall")


def _expert_seconds(args: dict, fp8: bool = False, kernels: steptime.Kernels | None = None) -> tuple[float, float]:
    """(expert GEMM seconds of one MoE layer and microbatch, the same FLOPs at the dense large-GEMM rate)."""
    m = est.model_shape(args)
    t = replace(est.training_of(args, 64), fp8=fp8)
    gpu = est.GPUS["h100-80gb"]
    k = kernels or steptime.KERNELS[gpu.family]
    tokens = t.micro_batch_size * m.seq_length
    seconds = steptime._moe_time(replace(m, shared_expert_size=0), t, gpu, k, tokens, None, False).compute
    pairs = tokens * m.moe_topk
    width = min(m.moe_ffn_hidden_size, m.hidden_size)
    dense_rate = gpu.peak_tflops * 1e12 * k.gemm * width / (width + k.gemm_width)
    permute = 8 * 2 * pairs * m.hidden_size / (gpu.hbm_tbps * 1e12)
    return seconds - permute, 6 * pairs * m.hidden_size * m.moe_ffn_hidden_size * 3 / dense_rate


def test_few_large_experts_run_near_dense_gemm_rate_and_small_ones_below_it() -> None:
    large, large_dense = _expert_seconds(MIXTRAL_LIKE)
    assert large < 1.05 * large_dense  # 8 experts of 14336: one expert's GEMM is ~10^12 FLOPs
    small, small_dense = _expert_seconds(dict(QWEN3_30B, micro_batch_size=1, expert_model_parallel_size=8))
    assert small > 1.5 * small_dense  # 128 experts of 768, 2,048 tokens each: grouped-GEMM overhead dominates


def test_fp8_speeds_grouped_gemms_by_their_own_gain_and_their_shape() -> None:
    """FP8 divides the expert GEMMs' large-GEMM part by `grouped_fp8_gain` (a fitted constant), not their
    small-GEMM overhead: large experts get nearly all of it, small ones less."""
    gain = 1.6
    k = replace(steptime.KERNELS["hopper"], grouped_fp8_gain=gain)
    bf16, _ = _expert_seconds(MIXTRAL_LIKE, kernels=k)
    fp8, _ = _expert_seconds(MIXTRAL_LIKE, fp8=True, kernels=k)
    assert fp8 == pytest.approx(bf16 / gain, rel=0.05)  # large experts: nearly the whole gain
    small = dict(QWEN3_30B, micro_batch_size=1, expert_model_parallel_size=8)
    small_bf16, _ = _expert_seconds(small, kernels=k)
    small_fp8, _ = _expert_seconds(small, fp8=True, kernels=k)
    assert small_bf16 / gain < small_fp8 < small_bf16  # faster, but the overhead is not cut


def test_shipped_grouped_fp8_gain_is_the_fitted_one() -> None:
    """Hopper's published FP8 MoE runs (Qwen3) show no FP8 gain on the expert GEMMs: the fit keeps 1.0, so an
    FP8 MoE layer's expert GEMMs cost what BF16 ones do (tests/estimate/test_calibration_parts.py refits it)."""
    assert steptime.KERNELS["hopper"].grouped_fp8_gain == 1.0
    bf16, _ = _expert_seconds(MIXTRAL_LIKE)
    assert _expert_seconds(MIXTRAL_LIKE, fp8=True)[0] == pytest.approx(bf16)
