"""Exposed pipeline transfers follow Megatron's schedules: 1F1B waits for every send/receive; the interleaved
schedule with overlap_p2p_comm (on by default for VPP > 1) hides the steady-state ones behind the chunks' compute
and exposes the warm-up and flush ones, whose number does not grow with the microbatches."""

from __future__ import annotations

from dataclasses import replace

from plan_shapes import GPT_175B

from launcher.estimate import formulas as est
from launcher.estimate.steptime import P2P_LATENCY_S, step_time

H100 = est.GPUS["h100-80gb"]


def _pp_comm(**changes) -> float:
    args = {**GPT_175B, **changes}
    return step_time(est.model_shape(args), est.training_of(args, 1536), H100).pipeline_comm


def test_interleaved_overlap_exposes_only_warm_up_and_flush() -> None:
    t = est.training_of({**GPT_175B, "num_virtual_stages_per_pipeline_rank": 2}, 1536)
    assert t.overlap_p2p_comm and not t.overlap_p2p_comm_warmup_flush  # Megatron's defaults
    shown = _pp_comm(num_virtual_stages_per_pipeline_rank=2)
    waited = _pp_comm(num_virtual_stages_per_pipeline_rank=2, overlap_p2p_comm=False)
    assert 0 < shown < waited
    edge = 2 * (t.pp - 1) + (t.vpp - 1) * t.pp  # Megatron's warm-up chunks on the first rank
    assert shown <= 2 * edge * waited / (2 * t.vpp * t.num_microbatches) * (1 + 1e-9)
    # more microbatches add steady-state transfers, which the compute hides: the exposed time stays
    more = _pp_comm(num_virtual_stages_per_pipeline_rank=2, global_batch_size=2 * 1536)
    assert more == shown


def test_warm_up_overlap_and_1f1b() -> None:
    assert _pp_comm(num_virtual_stages_per_pipeline_rank=2, overlap_p2p_comm_warmup_flush=True) == 0.0
    # 1F1B: Megatron turns overlap_p2p_comm off; every transfer is waited for, as many as microbatches × 2
    one = _pp_comm()
    twice = _pp_comm(global_batch_size=2 * 1536)
    assert twice == 2 * one and one >= 2 * est.training_of(GPT_175B, 1536).num_microbatches * P2P_LATENCY_S
    assert _pp_comm(overlap_p2p_comm=False) == one


def test_a_transfer_longer_than_half_a_chunk_shows_its_excess() -> None:
    slow = replace(H100, network_gbps=0.01)  # transfers far longer than any chunk's compute
    args = {**GPT_175B, "num_virtual_stages_per_pipeline_rank": 2}
    t = est.training_of(args, 1536)
    m = est.model_shape(args)
    hidden = step_time(m, t, H100).pipeline_comm
    shown = step_time(m, t, slow).pipeline_comm
    assert shown > 100 * hidden
