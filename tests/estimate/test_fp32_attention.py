"""Which attention keeps its [b, heads, s, s] scores. Upstream's local attention always; Transformer Engine's in fp32
(its flash and fused attention take half precision only, so it runs its unfused attention); the launcher's SDPA spec
never (flash or cuDNN attention in half precision, the memory-efficient kernel in fp32, grouped key/value heads
repeated to the query heads first: tests/inside/test_sdpa_grouped_heads.py)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from launcher.estimate import formulas as est
from launcher.estimate import summary

FAST_SPEC = ["launcher.inside.megatron_ext.sdpa_spec_fast", "layer_spec"]
# the zb preset's fp32 job at 4 layers: --group-query-attention with Megatron's default of one query group
ZB_FP32 = {"num_layers": 4, "hidden_size": 8192, "num_attention_heads": 64, "group_query_attention": True,
           "seq_length": 4096, "max_position_embeddings": 8192, "vocab_size": 50257,
           "untie_embeddings_and_output_weights": True, "micro_batch_size": 1, "global_batch_size": 1,
           "use_distributed_optimizer": True, "transformer_impl": "local", "spec": FAST_SPEC,
           "masked_softmax_fusion": False, "create_attention_mask_in_dataloader": False}
TE = {"transformer_impl": "transformer_engine", "spec": None}
LOCAL = {"transformer_impl": "local", "spec": None}
SCORES = 64 * 4096 * 4096  # per layer, micro batch 1


def activations(args: dict) -> float:
    return est.complete_memory(est.model_shape(args), est.training_of(args, 1)).activations


@pytest.mark.parametrize("precision", [{}, {"bf16": True}, {"fp16": True}])
@pytest.mark.parametrize("heads", [{}, {"num_query_groups": 8}, {"group_query_attention": False}])
def test_the_sdpa_spec_keeps_no_scores_in_any_precision(precision: dict, heads: dict) -> None:
    args = {**ZB_FP32, **precision, **heads}
    assert est.training_of(args, 1).fused_attention
    assert activations(args) < 4 * 9 * SCORES  # what four layers of kept scores alone would take


@pytest.mark.parametrize("impl", [TE, LOCAL])
def test_fp32_attention_of_transformer_engine_and_upstream_stores_its_scores(impl: dict) -> None:
    args = {**ZB_FP32, **impl}
    assert not est.training_of(args, 1).fused_attention
    # four layers' fp32 probabilities, dropped probabilities (4 B each) and dropout mask (1 B), and the working set
    assert activations(args) > 4 * 9 * SCORES + 8 * SCORES


@pytest.mark.parametrize("precision", [{"bf16": True}, {"fp16": True}])
def test_half_precision_transformer_engine_attention_is_fused(precision: dict) -> None:
    assert est.training_of({**ZB_FP32, **TE, **precision}, 1).fused_attention
    assert not est.training_of({**ZB_FP32, **LOCAL, **precision}, 1).fused_attention


@pytest.mark.parametrize("transformer_engine", [True, False])
def test_the_dry_run_header_prices_the_same_attention(transformer_engine: bool) -> None:
    # the header's training (summary.layout_training) where it is told whether TE's attention runs
    layout = SimpleNamespace(world_size=1, tp=1, pp=1, cp=1, vpp=1, micro_batch_size=1, global_batch_size=1,
                             sequence_parallel=False)
    args = {**ZB_FP32, **TE}
    assert not summary.layout_training(args, layout, transformer_engine=transformer_engine).fused_attention
    bf16 = summary.layout_training({**args, "bf16": True}, layout, transformer_engine=transformer_engine)
    assert bf16.fused_attention is transformer_engine


def test_fp32_grouped_heads_are_kept_repeated_for_the_sdpa_backward() -> None:
    grouped = est.training_of(ZB_FP32, 1)
    assert grouped.repeated_kv
    assert not est.training_of({**ZB_FP32, "bf16": True}, 1).repeated_kv  # flash takes them as they are
    # flash takes no explicit mask (the dataloader's, Megatron's default) and no head dim above 256
    assert est.training_of({**ZB_FP32, "bf16": True, "create_attention_mask_in_dataloader": True}, 1).repeated_kv
    assert est.training_of({**ZB_FP32, "bf16": True, "kv_channels": 320}, 1).repeated_kv
    assert not est.training_of({**ZB_FP32, "group_query_attention": False}, 1).repeated_kv
    assert not est.training_of({**ZB_FP32, **TE}, 1).repeated_kv
    alone = est.layer_activation_bytes(est.model_shape(ZB_FP32), grouped)
    unrepeated = est.layer_activation_bytes(est.model_shape(ZB_FP32), replace(grouped, repeated_kv=False))
    assert alone - unrepeated == 2 * 4096 * 4 * 8192  # keys and values at the queries' 64 heads × 128, fp32
