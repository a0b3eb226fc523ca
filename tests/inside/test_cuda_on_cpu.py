"""The rehearsal's CUDA stand-ins (launcher/inside/rehearse_worker.CudaOnCpu): what Megatron's MoE all-to-all
dispatcher with its overlap does with streams, events and host copies runs on the CPU as on a GPU, and everything
is put back afterwards. Found on gpt3_mcore_te_tp2_pp1_te_a2a_ovlp_8experts_etp1_ep4 at EP 4 on CPU ranks."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.megatron


def test_the_moe_all_to_all_overlap_finds_its_streams_events_and_host_copies():
    import numpy as np
    import torch
    from megatron.core.transformer.moe import moe_utils, token_dispatcher

    from launcher.inside.rehearse_worker import CudaOnCpu

    with CudaOnCpu():
        # split sizes "copied to the host": numpy arrays, which all_to_all_single takes (a tensor it refuses)
        splits = token_dispatcher.maybe_move_tensor_to_cpu(torch.tensor([1, 2]), as_numpy=True, record_stream=True)
        assert isinstance(splits, np.ndarray) and splits.tolist() == [1, 2]
        counts = torch.tensor([3])
        assert token_dispatcher.maybe_move_tensor_to_cpu(counts) is counts
        torch.ones(2).record_stream(torch.cuda.current_stream())  # pipeline_parallel/utils.py:230
        event = torch.cuda.Stream().record_event()
        event.wait()  # moe utils.py:291
        event.synchronize()
    assert token_dispatcher.maybe_move_tensor_to_cpu is moe_utils.maybe_move_tensor_to_cpu
    with pytest.raises((TypeError, RuntimeError)):  # torch's own again: a stand-in stream is no stream
        torch.ones(2).record_stream(object())  # type: ignore[arg-type]


def test_tensors_of_different_lengths_are_gathered_over_gloo_as_nccl_gathers_them():
    """moe/gpt3_moe_mcore_te_tp4_ep2_etp2_pp2_scoped_cudagraph at expert TP 2 failed at its first step: the all-to-all
    dispatcher gathers each expert-TP rank's tokens (mappings.py:150) and gloo refuses tensors of two lengths."""
    import torch

    from launcher.inside.rehearse_worker import CudaOnCpu, uneven_all_gather

    rank_1 = torch.full((3, 2), 2.0)  # the other rank's 3 tokens; this rank has 2

    def gloo(tensor_list, tensor, group=None, async_op=False):
        if any(t.shape != tensor.shape for t in tensor_list):
            raise RuntimeError("ProcessGroupGloo::allgather: invalid tensor size")
        tensor_list[0].copy_(tensor)
        tensor_list[1].copy_(torch.cat([rank_1, torch.zeros(tensor.shape[0] - 3, 2)]))

    with pytest.raises(RuntimeError):
        gloo(list(torch.split(torch.empty(5, 2), [2, 3])), torch.ones(2, 2))
    out = torch.empty(5, 2)
    assert uneven_all_gather(gloo)(list(torch.split(out, [2, 3])), torch.ones(2, 2)) is None
    assert out.tolist() == [[1.0, 1.0]] * 2 + [[2.0, 2.0]] * 3
    calls = []  # tensors of one length: gloo's own call, as it was
    uneven_all_gather(lambda *a, **k: calls.append((a, k)))([torch.empty(2, 2)] * 2, torch.ones(2, 2), group="g")
    assert len(calls) == 1 and calls[0][1] == {"group": "g", "async_op": False}
    original = torch.distributed.all_gather
    with CudaOnCpu():
        assert torch.distributed.all_gather is not original
    assert torch.distributed.all_gather is original
