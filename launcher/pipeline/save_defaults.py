"""Megatron checkpoint settings the launcher turns on where the preset leaves them open, and the header notes that
say so. No torch imported.

Megatron rebuilds the whole save plan at every save of a torch_dist checkpoint (each tensor's metadata, the plan
exchanged between ranks, the sharding checked again): work on the training thread, the loop stopped. With
``--ckpt-assume-constant-structure`` it keeps the plan and the global metadata of the first save and reuses them
while the structure stays the same (checkpointing.py: ``use_cached_ckpt_structure``; fully_parallel.py caches the
distribution of the writes over the data-parallel ranks). A pretraining job saves the same model and optimizer
every time, which is what the flag assumes; the rerun state machine keeps its part of the state constant for it
(rerun_state_machine.py, NVIDIA/Megatron-LM#4378).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SAVE_DEFAULTS: dict[str, Any] = {"ckpt_assume_constant_structure": True}
# Megatron's fully parallel save spreads the writes over the data-parallel (× context-parallel) group. Where that
# group is one rank there is nothing to spread, but the wrapper still checks the whole sharding again at every save:
# its distribution is None for a one-rank group, so the "first time" branch that validates never caches
# (fully_parallel.py apply_saving_parallelization, exchange_utils.py determine_main_replica_uniform_distribution),
# with or without --ckpt-assume-constant-structure. The same files are written without it.
ONE_RANK_GROUP_DEFAULTS: dict[str, Any] = {"ckpt_fully_parallel_save": False}


def saves_torch_dist(megatron: Mapping[str, Any]) -> bool:
    """Whether the job writes Megatron's torch_dist format (its default) somewhere."""
    return bool(megatron.get("save")) and (megatron.get("ckpt_format") or "torch_dist") == "torch_dist"


def data_parallel_with_context(megatron: Mapping[str, Any], world_size: int) -> int:
    """The size of the group the fully parallel save spreads over (its default, dp): world / (TP·PP)."""
    tp = int(megatron.get("tensor_model_parallel_size") or 1)
    pp = int(megatron.get("pipeline_model_parallel_size") or 1)
    return max(world_size // max(tp * pp, 1), 1)


def save_defaults(megatron: Mapping[str, Any], world_size: int) -> dict[str, Any]:
    """SAVE_DEFAULTS (and, where the save's parallel group is one rank, ONE_RANK_GROUP_DEFAULTS) where the job saves
    torch_dist checkpoints and the preset does not set them itself."""
    if not saves_torch_dist(megatron):
        return {}
    wanted = dict(SAVE_DEFAULTS)
    # (not with the distributed optimizer: there validate_args warns, after an older format, that such a checkpoint
    # cannot resume at another parallelism)
    if (megatron.get("ckpt_fully_parallel_save_process_group") or "dp") == "dp" \
            and data_parallel_with_context(megatron, world_size) == 1 and not megatron.get("use_distributed_optimizer"):
        wanted.update(ONE_RANK_GROUP_DEFAULTS)
    return {dest: value for dest, value in wanted.items() if megatron.get(dest) is None}


def save_notes(added: Mapping[str, Any]) -> list[str]:
    notes = []
    if added.get("ckpt_assume_constant_structure"):
        notes += ["ckpt_assume_constant_structure (the launcher's default for torch_dist saves): every save after "
                "the first reuses the first one's save plan and metadata instead of rebuilding them with the "
                "training loop stopped; --set ckpt_assume_constant_structure=false to rebuild them each time"]
    if added.get("ckpt_fully_parallel_save") is False:
        notes += ["ckpt_fully_parallel_save off (the launcher's default where the data-parallel group is one rank): "
                  "nothing to spread the writes over, and Megatron's wrapper would check the whole sharding again "
                  "at every save; --set ckpt_fully_parallel_save=true to keep it"]
    return notes
