"""Pure tests of launcher.estimate.formulas: vocab padding, parameters, FLOPs, memory, fit and time."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_shapes import GPT_175B, GPT_345M, LLAMA_LIKE, TOY

from launcher.errors import UserError
from launcher.estimate import formulas as est
from launcher.estimate import steptime, summary
from launcher.pipeline.divisors import divisors


@pytest.mark.parametrize(("tp", "padded"), [(1, 50304), (2, 50432), (4, 50688), (8, 51200)])
def test_gpt2_vocab_padding_matches_megatron_log(tp: int, padded: int) -> None:
    # Figures from Megatron's "> padded vocab (size: 50257) with K dummy tokens" log lines (reference §1.5).
    assert est.pad_vocab(50257, tp) == padded


@given(st.integers(1, 300_000), st.sampled_from([1, 2, 3, 4, 8, 16]), st.sampled_from([1, 64, 128]))
def test_padding_is_the_smallest_multiple_not_below_vocab(vocab: int, tp: int, div: int) -> None:
    padded = est.pad_vocab(vocab, tp, div)
    assert padded % (tp * div) == 0 and vocab <= padded < vocab + tp * div


def test_padded_vocab_override_and_no_padding() -> None:
    assert est.model_shape({**TOY, "padded_vocab_size": 128}).padded_vocab_size == 128
    assert est.model_shape({**TOY, "pad_vocab_size": False}).padded_vocab_size == 100
    assert est.model_shape(TOY).padded_vocab_size == 256  # 100 → multiple of 128·TP2


def test_345m_flops_per_sample() -> None:
    m = est.model_shape(GPT_345M)
    assert est.flops_per_iteration(m, 1) == pytest.approx(2.3265e12, rel=1e-4)
    assert est.flops_per_iteration(m, 32) == pytest.approx(32 * est.flops_per_iteration(m, 1))


def test_175b_flops_per_token() -> None:
    m = est.model_shape(GPT_175B)
    assert m.padded_vocab_size == 51200
    assert est.flops_per_iteration(m, 1) / m.seq_length == pytest.approx(1.062e12, rel=1e-3)


@given(layers=st.integers(1, 128), heads=st.sampled_from([1, 2, 4, 8, 16, 32, 96]),
       head_dim=st.sampled_from([8, 64, 128]), seq=st.sampled_from([128, 1024, 4096]),
       vocab=st.integers(100, 200_000), batch=st.integers(1, 4096))
def test_classic_gpt_closed_form(layers: int, heads: int, head_dim: int, seq: int, vocab: int, batch: int) -> None:
    """72·B·s·L·h²·(1 + s/(12h) + V/(12·L·h)) for F=4h, no GQA, no SwiGLU (reference §3.1)."""
    h = heads * head_dim
    m = est.model_shape(dict(num_layers=layers, hidden_size=h, num_attention_heads=heads, seq_length=seq,
                             vocab_size=vocab, tensor_model_parallel_size=1))
    V = m.padded_vocab_size
    closed = 72 * batch * seq * layers * h * h * (1 + seq / (12 * h) + V / (12 * layers * h))
    assert est.flops_per_iteration(m, batch) == pytest.approx(closed, rel=1e-9)


def test_gqa_and_swiglu_reduce_attention_and_widen_mlp() -> None:
    mha = est.model_shape({**LLAMA_LIKE, "group_query_attention": False})
    gqa = est.model_shape(LLAMA_LIKE)
    assert gqa.num_query_groups == 8 and mha.num_query_groups == 32
    assert est.flops_per_iteration(gqa, 1) < est.flops_per_iteration(mha, 1)
    # The difference is exactly the K and V projections of the 24 dropped groups, ×6 per token per layer.
    diff = est.flops_per_iteration(mha, 1) - est.flops_per_iteration(gqa, 1)
    assert diff == 6 * 4096 * 2 * 128 * (32 - 8) * 32 * gqa.seq_length
    assert est.model_shape({**TOY, "swiglu": True, "hidden_size": 96}).ffn_hidden_size == 256  # int(8·96/3/64)·64


def test_345m_parameter_count() -> None:
    # 24·(12h² + 13h) + V·h + s·h + 2h with h=1024, V=50304, s=1024 (GPT-2 medium, reference §7: ≈354.87M).
    h, V, s = 1024, 50304, 1024
    assert est.parameter_count(GPT_345M) == 24 * (12 * h * h + 13 * h) + V * h + s * h + 2 * h
    assert est.parameter_count(GPT_345M) / 1e6 == pytest.approx(354.87, abs=0.01)


def test_megatron_count_leaves_out_biases_and_position_embeddings() -> None:
    m = est.model_shape(GPT_345M)
    t = est.training_of(GPT_345M, 1)
    meg = est.megatron_parameters(m, t)
    h = m.hidden_size
    biases = m.num_layers * (3 * h + h + 4 * h + h)  # qkv, proj, fc1, fc2
    assert est.parameter_count(GPT_345M) - meg.total == biases + m.position_embeddings * h


def test_untied_and_rmsnorm_without_bias() -> None:
    m = est.model_shape(LLAMA_LIKE)
    assert m.norm_size == 1 and m.position_embeddings == 0 and not m.linear_bias
    meg = est.megatron_parameters(m, est.training_of(LLAMA_LIKE, 1))
    # No biases and no position table: Megatron's count is exact here.
    assert est.parameter_count(LLAMA_LIKE) == meg.total
    assert meg.embedding == 2 * m.padded_vocab_size * m.hidden_size


def test_stage_parameters_sum_to_the_model_at_tp1() -> None:
    args = {**GPT_175B, "tensor_model_parallel_size": 1}
    m = est.model_shape(args)
    stages = est.stage_parameters(m, est.Training(world_size=16, pp=16))
    word = m.padded_vocab_size * m.hidden_size
    # Every parameter once, plus the last stage's copy of the tied word embedding.
    assert sum(s.params for s in stages) == est.parameter_count(args) + word
    assert stages[0].params > stages[1].params and stages[-1].params > stages[1].params


def test_megatron_bytes_per_parameter() -> None:
    m = est.model_shape(GPT_175B)
    t = est.training_of(GPT_175B, 1536)
    shard = est.megatron_parameters(m, t).most_loaded_shard
    with_dist = est.megatron_memory(m, t)
    without = est.megatron_memory(m, replace(t, distributed_optimizer=False))
    assert with_dist.weights_and_optimizer == pytest.approx(shard * (6 + 12 / t.dp))
    assert without.weights_and_optimizer == pytest.approx(shard * 18)
    assert (with_dist.weights, with_dist.gradients) == (2 * shard, 4 * shard)


def test_fp32_training_has_no_separate_master_copy() -> None:
    t = est.training_of(TOY, 2)
    assert t.precision == "fp32"
    assert est.bytes_per_parameter(t) == (4, 4, 8)
    assert est.bytes_per_parameter(replace(t, precision="bf16")) == (2, 4, 12)
    assert est.bytes_per_parameter(replace(t, precision="bf16", distributed_optimizer=True,
                                           world_size=8, tp=1)) == (2, 4, 1.5)


def test_megatron_activation_factors() -> None:
    m = est.model_shape(GPT_175B)
    t = replace(est.training_of(GPT_175B, 1536), recompute="selective")
    plain = est.megatron_activation_bytes(m, t)
    interleaved = est.megatron_activation_bytes(m, replace(t, vpp=3))
    assert interleaved == pytest.approx(plain * (1 + 15 / (16 * 3)))
    # Fewer microbatches (4) than pipeline stages (16): scaled by M/PP.
    few = replace(t, global_batch_size=4 * t.dp)
    assert est.megatron_activation_bytes(m, few) == pytest.approx(plain * 4 / 16)
    # SP + selective uses Korthikanti's formula, the others "without SP" (×1.05, 10 + 24/TP).
    assert est.megatron_activation_bytes(m, replace(t, sequence_parallel=False)) > plain


def test_complete_activations_follow_recompute_and_sequence_parallel() -> None:
    args = {**GPT_345M, "tensor_model_parallel_size": 2, "transformer_impl": "local"}
    m = est.model_shape(args)
    t = est.training_of(args, 2)
    none = est.complete_memory(m, t).activations
    selective = est.complete_memory(m, replace(t, recompute="selective")).activations
    full = est.complete_memory(m, replace(t, recompute="full")).activations
    sp = est.complete_memory(m, replace(t, sequence_parallel=True)).activations
    assert full < selective < none and sp < none
    # Unfused attention stores 5·a·s²·b per layer, and works on one layer's scores at 6 B an element (fused
    # softmax); fused attention does neither. The working set is never live with the loss's (fp32 logits and
    # their gradient, the output layer's input): the peak holds the larger of the two.
    fused = est.complete_memory(m, replace(t, fused_attention=True)).activations
    score = est.UNFUSED_ATTENTION_BYTES["fused softmax"]  # GPT_345M leaves masked_softmax_fusion on
    elements = 16 * 1024**2 * 4 / 2  # heads · s² · b / TP
    loss = 2 * 4 * 1024 * 4 * m.padded_vocab_size / 2 + 2 * 1024 * 4 * m.hidden_size
    assert none - fused == pytest.approx(24 * 5 * elements + max(score * elements, loss) - loss)


def test_complete_memory_picks_the_last_stage_when_logits_dominate() -> None:
    # A large vocabulary, short layers: the last stage (tied embedding copy + fp32 logits) is the peak.
    args = dict(num_layers=4, hidden_size=256, num_attention_heads=4, seq_length=2048, vocab_size=256_000,
                micro_batch_size=4, global_batch_size=64, bf16=True, pipeline_model_parallel_size=4)
    m = est.model_shape(args)
    mem = est.complete_memory(m, est.training_of(args, 4))
    assert mem.stage == 3


# Peak allocated memory measured on H200 (reference/gpu-measurements.md), bf16 + distributed optimizer.
MEASURED_PEAKS = [
    ("345m local impl, micro batch 8", {**GPT_345M, "micro_batch_size": 8, "transformer_impl": "local"}, 1, 30.7),
    ("345m SDPA attention, micro batch 8", {**GPT_345M, "micro_batch_size": 8}, 1, 15.1),
    ("345m SDPA attention, micro batch 16", {**GPT_345M, "micro_batch_size": 16}, 1, 24.1),
    ("175b layer shape, 2 layers, TP2, GBS 16",
     {**GPT_175B, "num_layers": 2, "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1,
      "sequence_parallel": False, "global_batch_size": 16}, 2, 45.0),
    # Megatron's examples/gptoss/02_train.sh moved to one GPU without TE (docs/data/h200-examples-one-gpu.md): the
    # local spec (window attention, learnable softmax), 64 heads at sequence 8192; 77,329 MB allocated at the peak
    ("gpt-oss example, 4 layers, local attention at sequence 8192",
     dict(num_layers=4, hidden_size=512, num_attention_heads=64, kv_channels=8, group_query_attention=True,
          num_query_groups=8, ffn_hidden_size=2048, num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=2048,
          moe_grouped_gemm=True, seq_length=8192, max_position_embeddings=8192, vocab_size=128256,
          normalization="RMSNorm", position_embedding_type="rope", untie_embeddings_and_output_weights=True,
          add_bias_linear=False, bf16=True, use_distributed_optimizer=True, recompute_granularity="selective",
          micro_batch_size=1, global_batch_size=128, transformer_impl="local", masked_softmax_fusion=False), 1, 77.3),
]


@pytest.mark.parametrize(("label", "args", "world", "gb"), MEASURED_PEAKS, ids=[m[0] for m in MEASURED_PEAKS])
def test_complete_estimate_is_within_20_percent_of_measured_peaks(label: str, args: dict, world: int,
                                                                  gb: float) -> None:
    mem = est.complete_memory(est.model_shape(args), est.training_of(args, world))
    assert mem.total / 1e9 == pytest.approx(gb, rel=0.20)


def test_megatron_formula_misses_unfused_attention_scores() -> None:
    """Why the complete model exists: with --transformer-impl local, Megatron's report is less than half."""
    label, args, world, gb = MEASURED_PEAKS[0]
    meg = est.megatron_memory(est.model_shape(args), est.training_of(args, world))
    assert meg.total / 1e9 < 0.5 * gb


def test_fit_status_and_catalogue() -> None:
    gpu = est.GPUS["h100-80gb"]
    assert est.fit_status(0.5 * gpu.memory_bytes, gpu) == "fits"
    assert est.fit_status(0.95 * gpu.memory_bytes, gpu) == "tight"
    assert est.fit_status(1.01 * gpu.memory_bytes, gpu) == "does not fit"
    assert {"h100-80gb", "h200-141gb", "a100-80gb", "a100-40gb", "b200-180gb"} <= set(est.GPUS)
    for g in est.GPUS.values():
        assert g.peak_tflops > 0 and g.hbm_tbps > 0 and g.network_gbps <= g.nvlink_gbps


def test_unknown_gpu_lists_the_known_ones() -> None:
    with pytest.raises(UserError) as err:
        est.gpu_by_name("h900")
    text = err.value.render()
    assert "unknown GPU 'h900'" in text and all(name in text for name in est.GPUS)
    assert est.gpu_by_name(" H200-141GB ").name == "h200-141gb"


def test_step_time_parts() -> None:
    m = est.model_shape(GPT_175B)
    t = est.training_of(GPT_175B, 1536)
    gpu = est.GPUS["h100-80gb"]
    step = steptime.step_time(m, t, gpu)
    # Even stages: the fill and drain are (PP−1)/(VPP·M) of the slowest rank's work.
    work = step.compute + step.recompute + step.tensor_comm + step.context_comm
    assert step.bubble == pytest.approx(work * 15 / t.num_microbatches, rel=0.05)  # first/last ranks differ
    assert steptime.step_time(m, replace(t, vpp=2), gpu).bubble == pytest.approx(step.bubble / 2, rel=1e-3)
    assert steptime.step_time(m, replace(t, recompute="full"), gpu).recompute > step.recompute == 0
    assert step.total == pytest.approx(sum(v for k, v in step.as_dict().items()
                                           if k not in ("total", "model_tflops")))
    measured = steptime.step_time(m, t, gpu, tflops=400)
    assert measured.compute < steptime.step_time(m, t, gpu, tflops=200).compute


def test_time_to_tokens() -> None:
    # 300B tokens at 1536·2048 tokens per iteration, 10 s each.
    assert est.time_to_tokens(10.0, 1536, 2048, 300e9) == pytest.approx(300e9 / (1536 * 2048) * 10)


def test_summary_for_the_dry_run_header() -> None:
    layout = SimpleNamespace(world_size=1536, tp=8, pp=16, cp=1, vpp=None, micro_batch_size=1,
                             global_batch_size=1536)
    s = summary.summary(GPT_175B, layout, "h100-80gb")
    assert s["fits"] == "fits" and s["gpu"] == "h100-80gb"
    assert s["parameters"] == est.parameter_count(GPT_175B, tp=8)
    assert 0 < s["memory_per_gpu_gib"] < s["gpu_memory_gib"]
    assert summary.summary_line(s).startswith(f"~{s['memory_per_gpu_gib']:.1f} GiB per GPU of 79.1 on h100-80gb: fits")
    one_gpu = SimpleNamespace(world_size=8, tp=8, pp=1, cp=1, vpp=None, micro_batch_size=1, global_batch_size=8)
    assert summary.summary(GPT_175B, one_gpu, est.GPUS["a100-40gb"])["fits"] == "does not fit"


@settings(max_examples=50)
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4, 8]), mbs=st.sampled_from([1, 2, 4]),
       recompute=st.sampled_from(["none", "selective", "full"]), sp=st.booleans(), dist=st.booleans())
def test_memory_is_positive_and_sharding_helps(tp: int, pp: int, mbs: int, recompute: str, sp: bool,
                                               dist: bool) -> None:
    args = {**GPT_175B, "tensor_model_parallel_size": tp}
    m = est.model_shape(args)
    t = est.Training(world_size=tp * pp * 4, tp=tp, pp=pp, micro_batch_size=mbs, global_batch_size=64,
                     recompute=recompute, sequence_parallel=sp and tp > 1, distributed_optimizer=dist)
    mem = est.complete_memory(m, t)
    assert mem.total > 0 and mem.weights > 0 and mem.activations > 0
    more_tp = est.complete_memory(est.model_shape({**args, "tensor_model_parallel_size": 2 * tp}),
                                  replace(t, tp=2 * tp, world_size=2 * t.world_size))
    assert more_tp.weights < mem.weights


@given(st.integers(min_value=1, max_value=5000))
def test_divisors_are_every_divisor_in_order(n):
    assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


def test_divisors_of_a_huge_setting_need_only_its_square_root():
    # A walk over every integer up to 10^9 would not finish; pairs up to √n do.
    assert divisors(1_000_000_000)[:4] == [1, 2, 4, 5] and divisors(999_999_937) == [1, 999_999_937]


def test_one_default_ffn_width():
    assert est.ffn_hidden_size({"hidden_size": 1024}) == 4096
    assert est.ffn_hidden_size({"hidden_size": 4096, "swiglu": True}) == 10880  # int(8·4096/3/64)·64
    assert est.human(354_871_296) == "354.87M" and est.human(999) == "999"
