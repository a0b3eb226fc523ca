"""An explicit local_rank reaches every rank alike: Megatron sets each process's GPU from it, so the ranks of a
node would share one GPU. The launcher gives each process its own LOCAL_RANK, which Megatron reads by default."""

from __future__ import annotations

import pytest

from launcher.errors import UserError
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve


def test_a_local_rank_for_several_gpus_a_node_is_refused_with_the_way_out() -> None:
    with pytest.raises(UserError) as refused:
        resolve(load_preset("345m", ["local_rank=0", "global_batch_size=64"]), 1, 2)
    (problem,) = [p for p in refused.value.problems if "local_rank" in p.message]
    assert "the 2 ranks of a node would all take GPU 0" in problem.message
    assert "--set local_rank=null" in problem.hint


def test_a_local_rank_of_another_gpu_is_refused_on_one_gpu_a_node() -> None:
    with pytest.raises(UserError, match="would take GPU 3"):
        resolve(load_preset("345m", ["local_rank=3"]), 1, 1)


def test_the_one_rank_of_a_one_gpu_node_may_say_local_rank_0() -> None:
    resolve(load_preset("345m", ["local_rank=0"]), 1, 1)
    resolve(load_preset("345m", ["global_batch_size=64"]), 1, 2)  # unset: LOCAL_RANK per process
