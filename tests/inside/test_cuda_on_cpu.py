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
