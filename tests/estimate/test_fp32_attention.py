"""Which attention keeps its [b, heads, s, s] scores in fp32. Transformer Engine's flash and fused attention take
half precision only (in fp32 it runs its unfused attention); torch's SDPA (the launcher's SDPA spec) has, in fp32,
only the memory-efficient kernel, which takes no grouped query heads, so fp32 with GQA/MQA runs the math kernel and
stores the scores. Measured on one H200: the zb preset at 4 layers (hidden 8192, 64 heads, one query group,
sequence 4096, micro batch 1, attention dropout 0.1, the fast spec, the distributed optimizer) peaked at 102.9 GB
`max allocated` where the estimate without the scores said 62.4 GiB."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from launcher.estimate import formulas as est
from launcher.estimate import summary

H200 = est.GPUS["h200-141gb"]
FAST_SPEC = ["launcher.inside.megatron_ext.sdpa_spec_fast", "layer_spec"]
# --group-query-attention without --num-query-groups: Megatron's default of one group (multi-query attention)
ZB_FP32 = {"num_layers": 4, "hidden_size": 8192, "num_attention_heads": 64, "group_query_attention": True,
           "seq_length": 4096, "max_position_embeddings": 8192, "vocab_size": 50257,
           "untie_embeddings_and_output_weights": True, "micro_batch_size": 1, "global_batch_size": 1,
           "use_distributed_optimizer": True, "transformer_impl": "local", "spec": FAST_SPEC,
           "masked_softmax_fusion": False}
MEASURED_PEAK_BYTES = 102.9e9
MULTI_HEAD = {"group_query_attention": False}


@pytest.mark.parametrize("args", [
    {"spec": FAST_SPEC},
    {"spec": ["launcher.inside.megatron_ext.sdpa_spec", "layer_spec"]},
    {"spec": FAST_SPEC, "num_query_groups": 8},
    {"transformer_impl": "transformer_engine", "spec": None, **MULTI_HEAD},
    {"transformer_impl": "local", "spec": None, **MULTI_HEAD},
])
def test_fp32_attention_stores_its_scores_where_no_kernel_takes_it(args: dict) -> None:
    assert not est.training_of({**ZB_FP32, **args}, 1).fused_attention


def test_fp32_sdpa_with_as_many_key_value_heads_as_queries_keeps_no_scores() -> None:
    # the memory-efficient kernel: fp32, no grouped heads
    assert est.training_of({**ZB_FP32, **MULTI_HEAD}, 1).fused_attention
    assert est.training_of({**ZB_FP32, "num_query_groups": 64}, 1).fused_attention


@pytest.mark.parametrize("precision", [{"bf16": True}, {"fp16": True}])
def test_half_precision_keeps_the_fused_kernels_with_grouped_heads(precision: dict) -> None:
    assert est.training_of({**ZB_FP32, **precision}, 1).fused_attention
    assert est.fused_attention_of({**ZB_FP32, **precision, "spec": None}, transformer_engine=True)
    assert not est.fused_attention_of({**ZB_FP32, **precision, "spec": None}, transformer_engine=False)
    assert not est.fused_attention_of({**ZB_FP32, "spec": None}, transformer_engine=True)


def test_the_fp32_mqa_sdpa_job_is_estimated_at_its_measured_peak() -> None:
    m, t = est.model_shape(ZB_FP32), est.training_of(ZB_FP32, 1)
    mem = est.complete_memory(m, t)
    scores = 64 * 4096 * 4096  # per layer, micro batch 1
    # four layers' fp32 probabilities, dropped probabilities (4 B each) and dropout mask (1 B) are kept
    assert mem.activations > 4 * 9 * scores
    assert MEASURED_PEAK_BYTES <= mem.total <= 1.2 * MEASURED_PEAK_BYTES
    assert est.memory_fit(mem.total, H200.memory_bytes)


@pytest.mark.parametrize("transformer_engine", [True, False, None])
def test_the_dry_run_header_prices_the_same_scores(transformer_engine: bool | None) -> None:
    # the header's training (summary.layout_training), whether or not it is told that TE is there
    layout = SimpleNamespace(world_size=1, tp=1, pp=1, cp=1, vpp=1, micro_batch_size=1, global_batch_size=1,
                             sequence_parallel=False)
    t = summary.layout_training(ZB_FP32, layout, transformer_engine=transformer_engine)
    assert not t.fused_attention
    bf16 = summary.layout_training({**ZB_FP32, "bf16": True}, layout, transformer_engine=transformer_engine)
    assert bf16.fused_attention is (transformer_engine is not False)
