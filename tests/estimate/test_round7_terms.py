"""Step-time terms that follow what Megatron runs: full recompute repeats the whole layer, MoE block included
(transformer_block.checkpointed_forward); the output layer is a plain ColumnParallelLinear outside the FP8
context; the `flex` dispatcher (DeepEP / HybridEP) sends a token across the network once per remote node; and a
published run's unstated knobs are chosen among those that fit its GPU (it ran)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from launcher.estimate import calibration as cal
from launcher.estimate import formulas as est
from launcher.estimate import steptime

H100 = est.GPUS["h100-80gb"]
# An MoE model whose expert layers dominate: 64 experts, top 4, 16 GPUs with EP 16 (two nodes)
MOE = dict(num_layers=8, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=8192, seq_length=4096,
           max_position_embeddings=4096, vocab_size=32000, bf16=True, swiglu=True, num_experts=64,
           moe_router_topk=4, moe_ffn_hidden_size=1024, moe_grouped_gemm=True, expert_model_parallel_size=16,
           expert_tensor_parallel_size=1, moe_token_dispatcher_type="alltoall", micro_batch_size=1,
           global_batch_size=64, use_distributed_optimizer=True)


def _step(args: dict, world: int = 16, kernels: steptime.Kernels | None = None) -> steptime.StepTime:
    return steptime.step_time(est.model_shape(args), est.training_of(args, world), H100, kernels=kernels)


def _full(args: dict) -> dict:
    return {**args, "recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}


def test_full_recompute_repeats_the_moe_block_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    args = _full(MOE)
    m, t = est.model_shape(args), est.training_of(args, 16)
    moe = steptime._moe_time(m, t, H100, steptime.KERNELS["hopper"], t.micro_batch_size * m.seq_length, None,
                             True, 8)
    # the forward of the expert GEMMs (a third of their time) and of the permutation (half)
    assert moe.compute / 3 < moe.forward < moe.compute / 2
    with_moe = _step(args).recompute
    original = steptime._moe_time
    monkeypatch.setattr(steptime, "_moe_time", lambda *a, **k: replace(original(*a, **k), forward=0.0))
    without = _step(args).recompute
    assert with_moe - without == pytest.approx(t.num_microbatches * m.num_layers * moe.forward)
    # selective recompute (core attention) does not touch the MoE block
    monkeypatch.setattr(steptime, "_moe_time", original)
    selective = {**MOE, "recompute_granularity": "selective"}
    assert _step(selective).recompute < without


def test_full_recompute_repeats_the_token_dispatch_forward() -> None:
    plain = _step(MOE).tensor_comm
    full = _step(_full(MOE)).tensor_comm
    assert full == pytest.approx(1.5 * plain)  # dispatch + combine forward again: 2 of the 4 all-to-alls


FP8_DENSE = dict(num_layers=4, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=16384, seq_length=4096,
                 max_position_embeddings=4096, vocab_size=128000, bf16=True, fp8="hybrid", micro_batch_size=1,
                 global_batch_size=8, pipeline_model_parallel_size=2, use_distributed_optimizer=True)


def _loss_stage(args: dict, kernels: steptime.Kernels) -> float:
    t = est.training_of(args, 16)
    m = est.model_shape(args)
    place = steptime.placement(t, 8)
    with_loss = steptime._rank_time(m, t, H100, kernels, 2, False, True, place, None).compute
    without = steptime._rank_time(m, t, H100, kernels, 2, False, False, place, None).compute
    return with_loss - without


def test_fp8_does_not_speed_the_output_layer() -> None:
    k = steptime.KERNELS["hopper"]
    # the output layer and cross entropy take the same time whatever FP8 gains inside the transformer layers
    assert _loss_stage(FP8_DENSE, replace(k, fp8_gain=3.0)) == pytest.approx(_loss_stage(FP8_DENSE, k))
    bf16 = {**FP8_DENSE, "fp8": None}
    assert _loss_stage(FP8_DENSE, k) == pytest.approx(_loss_stage(bf16, k))
    # the layers themselves do speed up
    t = est.training_of(FP8_DENSE, 16)
    place = steptime.placement(t, 8)
    m = est.model_shape(FP8_DENSE)
    slow = steptime._rank_time(m, t, H100, k, 2, False, False, place, None).compute
    fast = steptime._rank_time(m, t, H100, replace(k, fp8_gain=3.0), 2, False, False, place, None).compute
    assert fast < slow


def _dispatch(dispatcher: str, ep: int, tp: int = 1) -> float:
    args = {**MOE, "moe_token_dispatcher_type": dispatcher, "expert_model_parallel_size": ep,
            "tensor_model_parallel_size": tp, "sequence_parallel": tp > 1}
    m, t = est.model_shape(args, tp), est.training_of(args, 16)
    place = steptime.placement(t, 8)
    return steptime._moe_time(m, t, H100, steptime.KERNELS["hopper"], t.micro_batch_size * m.seq_length, None,
                              place.ep, place.ep_per_node).dispatch


def test_flex_dispatch_sends_a_token_once_per_remote_node() -> None:
    # inside one node (EP 8) the two dispatchers move the same bytes over NVLink
    assert _dispatch("flex", 8) == pytest.approx(_dispatch("alltoall", 8))
    # EP 16 over two nodes: all-to-all sends each of the 4 token-expert pairs, half of them to the other node;
    # DeepEP sends the token once to the other node when one of its 4 experts is there, 1 − (1/2)^4 of the time
    a2a, flex = _dispatch("alltoall", 16), _dispatch("flex", 16)
    pairs_off = 4 * 15 / 16
    network = H100.network_gbps
    nvlink = H100.nvlink_gbps
    expected = max((1 - 0.5**4) / network, pairs_off / nvlink) / (pairs_off / network)
    assert flex / a2a == pytest.approx(expected)
    assert flex < a2a


def test_placement_counts_expert_parallel_members_per_node() -> None:
    t = est.training_of({**MOE, "tensor_model_parallel_size": 2, "sequence_parallel": True}, 16)
    assert steptime.placement(t, 8).ep_per_node == 4  # stride TP·CP = 2: 4 members of the EP group per node


def test_unstated_knobs_are_chosen_among_those_that_fit_the_gpu() -> None:
    """A published run ran: its unstated recompute is the fastest whose estimate is within the GPU's memory,
    also above the plan's 90 % margin (which only keeps recommendations clear of what the estimate leaves out)."""
    run = next(r for r in cal.RUNS if r.name == "Bridge B200 25.11 Qwen3 235B-A22B")
    pick = cal.chosen(run)
    gpu = est.GPUS[run.gpu]
    assert pick.memory.total <= gpu.memory_bytes
    for recompute in ("none", "selective", "full"):
        t = replace(pick.training, recompute=recompute)
        m = est.model_shape(run.args, t.tp)
        other = steptime.step_time(m, t, gpu).total
        if est.complete_memory(m, t).total <= gpu.memory_bytes:
            assert pick.seconds <= other * (1 + 1e-12)


def test_all_to_all_overlap_hides_the_dispatch_behind_the_other_microbatch() -> None:
    args = {**MOE, "num_layers": 16, "pipeline_model_parallel_size": 2, "num_virtual_stages_per_pipeline_rank": 2,
            "expert_model_parallel_size": 8,  # inside a node: the all-to-alls are shorter than the compute
            "global_batch_size": 128}
    plain = _step(args, world=32)
    overlapped = _step({**args, "overlap_moe_expert_parallel_comm": True}, world=32)
    assert overlapped.tensor_comm < plain.tensor_comm
    t = est.training_of(args, 32)
    edge = 2 * (t.pp - 1) + (t.vpp - 1) * t.pp  # the warm-up's chunks: no partner to hide behind
    # the dispatch's compute partner is longer than the all-to-alls here: only the warm-up and flush chunks show
    assert overlapped.tensor_comm == pytest.approx(plain.tensor_comm * edge / (t.vpp * t.num_microbatches))


def test_the_search_offers_no_full_recompute_with_all_to_all_overlap() -> None:
    from launcher.estimate import search

    t = est.training_of({**MOE, "overlap_moe_expert_parallel_comm": True}, 16)
    assert "full" not in search.recompute_choices(t)
    assert {v.recompute for v in search.knob_variants(t, True)} == {"none", "selective"}
    assert "full" in search.recompute_choices(est.training_of(MOE, 16))


def test_flex_dispatch_counts_a_part_filled_node() -> None:
    # EP 12 at TP 1 on 8-GPU nodes: 8 members in one node, 4 in the next; tokens still cross to the second node
    assert _dispatch("flex", 12) > 0
    args = {**MOE, "moe_token_dispatcher_type": "flex", "expert_model_parallel_size": 12, "num_experts": 48}
    m, t = est.model_shape(args), est.training_of(args, 24)
    place = steptime.placement(t, 8)
    assert place.ep and place.ep_per_node == 8
    one = steptime._moe_time(m, t, H100, steptime.KERNELS["hopper"], t.micro_batch_size * m.seq_length, None,
                             place.ep, place.ep_per_node).dispatch
    nvlink_only = steptime._moe_time(m, t, H100, steptime.KERNELS["hopper"], t.micro_batch_size * m.seq_length,
                                     None, False, place.ep_per_node).dispatch
    assert one > nvlink_only


# TP 4 · PP 4 on 32 GPUs, 16 microbatches: a large vocabulary on the last stage
DEFER = dict(num_layers=8, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=16384, seq_length=4096,
             max_position_embeddings=4096, vocab_size=128000, bf16=True, micro_batch_size=1, global_batch_size=32,
             tensor_model_parallel_size=4, pipeline_model_parallel_size=4, sequence_parallel=True,
             use_distributed_optimizer=True)


def test_deferred_embedding_wgrad_keeps_its_buffers_on_the_last_stage() -> None:
    on = {**DEFER, "defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": 5}
    m, t = est.model_shape(on, 4), est.training_of(on, 32)
    assert t.num_microbatches == 16 and t.deferred_embedding_wgrads == 5
    s, h = m.seq_length, m.hidden_size
    kept = 2 * s * (m.padded_vocab_size / 4 + h / 4)  # bf16 output gradient and the SP-sharded input
    last = t.pp - 1
    grown = est.stage_activation_bytes(m, t, last) - est.stage_activation_bytes(
        m, est.training_of(DEFER, 32), last)
    assert grown == pytest.approx(5 * kept)
    # limit 0 defers every microbatch; without pipeline parallelism there is no flush to defer to
    assert est.training_of({**on, "wgrad_deferral_limit": 0}, 32).deferred_embedding_wgrads == 16
    assert est.training_of({**on, "pipeline_model_parallel_size": 1}, 32).deferred_embedding_wgrads == 0


def test_deferred_embedding_wgrad_leaves_the_last_stage_and_shows_beyond_the_drain() -> None:
    base = _step(DEFER, world=32)
    few = _step({**DEFER, "defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": 1}, world=32)
    every = _step({**DEFER, "defer_embedding_wgrad_compute": True}, world=32)
    # one deferred GEMM hides in the drain: the step gets shorter by it; all 16 run after the schedule and only the
    # drain's worth of them hides, which saves more than one but less than all of them
    assert few.total < base.total
    assert every.total < few.total
    t = est.training_of(DEFER, 32)
    m = est.model_shape(DEFER, 4)
    k = steptime.KERNELS["hopper"]
    tokens = m.seq_length
    width = min(m.hidden_size, m.padded_vocab_size / 4)  # the narrow side of the output layer's h × V/TP shard
    rate = H100.peak_tflops * 1e12 * k.gemm * width / (width + k.gemm_width) * tokens / (tokens + k.gemm_tokens)
    one = steptime._output_wgrad(m, t, tokens, rate)
    assert 16 * one > 2 / 3 * every.bubble  # more than the drain hides
    assert every.compute == pytest.approx(base.compute - 2 / 3 * every.bubble, rel=1e-6)
    assert few.compute == pytest.approx(base.compute - one, rel=1e-6)
