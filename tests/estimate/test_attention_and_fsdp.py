"""Settings that change the cost and that the estimate models: sliding-window attention (core attention's time,
not Megatron's logged FLOPs), Megatron-FSDP / torch FSDP2 (sharded state, per-microbatch collectives)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from plan_shapes import LLAMA_LIKE

from launcher.estimate import formulas as est
from launcher.estimate.steptime import step_time

H100 = est.GPUS["h100-80gb"]
LLAMA_8B = dict(LLAMA_LIKE, num_layers=32, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=14336,
                num_query_groups=8, seq_length=8192, max_position_embeddings=8192, vocab_size=128256,
                micro_batch_size=1, global_batch_size=64, bf16=True)


def test_window_is_a_share_of_causal_attention() -> None:
    full = est.model_shape(LLAMA_8B)
    assert full.window_fraction == 1.0
    windowed = est.model_shape(dict(LLAMA_8B, window_size="(1024, 0)"))
    s, w = 8192, 1024
    expected = (w * (w + 1) / 2 + (s - w) * (w + 1)) / (s * (s + 1) / 2)
    assert windowed.window_layers == 32
    assert windowed.window_fraction == pytest.approx(expected)
    # window_attn_skip_freq 4: layers 4, 8, ... stay full (Megatron's is_layer_window_attention, 1-indexed)
    skipping = est.model_shape(dict(LLAMA_8B, window_size="1024,0", window_attn_skip_freq=4))
    assert skipping.window_layers == 24
    assert skipping.window_fraction == pytest.approx(0.25 + 0.75 * expected)
    # a 0/1 list names the windowed layers
    listed = est.model_shape(dict(LLAMA_8B, window_size=[1024, 0], window_attn_skip_freq="([1]*8+[0]*24)"))
    assert listed.window_layers == 8
    # a window as long as the sequence is full attention
    assert est.model_shape(dict(LLAMA_8B, window_size="(8192, 0)")).window_fraction == 1.0


def test_window_saves_attention_time_but_not_megatrons_flops() -> None:
    full, windowed = est.model_shape(LLAMA_8B), est.model_shape(dict(LLAMA_8B, window_size="(1024, 0)"))
    t = est.training_of(LLAMA_8B, 8)
    assert est.flops_per_iteration(windowed, 64) == est.flops_per_iteration(full, 64)  # Megatron ignores it
    fast, slow = step_time(windowed, t, H100), step_time(full, t, H100)
    assert fast.compute < slow.compute * 0.9  # at 8K tokens attention is a large share; the window cuts it


@pytest.mark.parametrize("flags", [{"use_torch_fsdp2": True}, {"use_megatron_fsdp": True},
                                   {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads"},
                                   {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim"}])
def test_fsdp_shards_the_state_over_data_parallel(flags: dict[str, object]) -> None:
    m = est.model_shape(LLAMA_8B)
    ddp = est.training_of(LLAMA_8B, 64)
    fsdp = est.training_of(dict(LLAMA_8B, **flags), 64)
    strategy = fsdp.fsdp
    assert strategy in est.FSDP_STRATEGIES
    plain, sharded = est.complete_memory(m, ddp), est.complete_memory(m, fsdp)
    assert sharded.optimizer == pytest.approx(plain.optimizer / 64)
    assert sharded.gradients == pytest.approx(plain.gradients / (64 if strategy != "optim" else 1))
    assert sharded.weights == pytest.approx(plain.weights / (64 if strategy == "optim_grads_params" else 1))
    # the gathered layers FSDP works on are memory too
    extra = sharded.activations - plain.activations
    assert (extra > 0) == (strategy != "optim")


def test_fsdp_collectives_run_every_microbatch_and_hide_behind_it() -> None:
    m = est.model_shape(LLAMA_8B)
    fsdp = est.training_of(dict(LLAMA_8B, use_torch_fsdp2=True), 64)
    one = step_time(m, fsdp, H100)
    # more microbatches: the per-layer gathers and reduce-scatters repeat in each
    many = step_time(m, replace(fsdp, global_batch_size=64 * 8), H100)
    assert many.data_comm > one.data_comm
    # a slow network cannot hide behind the same compute
    slow = replace(H100, network_gbps=H100.network_gbps / 20)
    assert step_time(m, fsdp, slow).data_comm > one.data_comm
    # without resharding after the forward, the backward needs no second gather
    kept = replace(fsdp, fsdp_reshard=False)
    assert step_time(m, kept, slow).data_comm < step_time(m, fsdp, slow).data_comm
