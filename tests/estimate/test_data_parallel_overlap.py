"""The data-parallel gradient reduction and parameter all-gather overlap chunk by chunk under the interleaved
schedule: each model chunk is its own DDP instance, and Megatron launches a chunk's reduction when its last
backward starts (its parameters' all-gather PP chunk-steps before its first forward), so with VPP chunks only the
last chunk's share has a single chunk's backward to hide behind."""

from __future__ import annotations

from dataclasses import replace

import pytest
from plan_shapes import GPT_175B

from launcher.estimate import formulas as est
from launcher.estimate.steptime import _staggered, step_time

H100 = est.GPUS["h100-80gb"]
# TP 8 · PP 8 on 1536 GPUs: DP 24 across nodes, the distributed optimizer with both overlaps on
ARGS = {**GPT_175B, "pipeline_model_parallel_size": 8, "overlap_grad_reduce": True, "overlap_param_gather": True}


def _dp(gpu: est.Gpu = H100, **changes) -> float:
    args = {**ARGS, **changes}
    return step_time(est.model_shape(args), est.training_of(args, 1536), gpu).data_comm


def test_one_chunk_hides_behind_one_microbatch() -> None:
    assert _staggered(10.0, 2.0, 1, 8) == pytest.approx(8.0)
    assert _staggered(1.0, 2.0, 1, 8) == 0.0


def test_chunks_reduce_while_the_other_chunks_run_their_backward() -> None:
    # 4 chunks of 0.5 s backward each: the last chunk's share (2.5 s) has 0.5 s to hide behind
    assert _staggered(10.0, 2.0, 4, 8) == pytest.approx(2.0)
    # a link far too slow for the chunks' compute: what the whole cool-down cannot hide stays exposed
    assert _staggered(100.0, 2.0, 4, 8) == pytest.approx(100.0 - (3 * 8 + 1) * 0.5)


def test_interleaving_hides_more_of_the_data_parallel_communication() -> None:
    slow = replace(H100, network_gbps=20.0)  # a reduction longer than one microbatch's backward
    one = _dp(slow)
    interleaved = _dp(slow, num_virtual_stages_per_pipeline_rank=4)
    assert 0 < interleaved < one / 2
    # without the overlap nothing hides, interleaved or not
    waited = _dp(slow, overlap_grad_reduce=False, overlap_param_gather=False)
    assert waited == _dp(slow, overlap_grad_reduce=False, overlap_param_gather=False,
                         num_virtual_stages_per_pipeline_rank=4)
    assert waited > one


def test_routed_experts_reduce_over_expert_data_parallel_only() -> None:
    from launcher.estimate.formulas import StageParams
    from launcher.estimate.steptime import _dp_share

    stage = StageParams(stage=0, layers=1, params=10e9, expert_params=9e9)
    # the dense 1e9 over DP 16, the experts over expert DP 2; none of the experts move when expert DP is 1
    assert _dp_share([stage], 16, 2) == pytest.approx(15 / 16 * 1e9 + 1 / 2 * 9e9)
    assert _dp_share([stage], 16, 1) == pytest.approx(15 / 16 * 1e9)
    moe = dict(num_experts=48, moe_router_topk=2, moe_grouped_gemm=True, moe_ffn_hidden_size=4 * 12288,
               overlap_grad_reduce=False, overlap_param_gather=False)
    wide = _dp(**moe, expert_model_parallel_size=24)  # expert DP 1
    narrow = _dp(**moe, expert_model_parallel_size=8)  # expert DP 3
    assert 0 < wide < narrow
