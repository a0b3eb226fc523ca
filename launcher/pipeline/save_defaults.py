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


def saves_torch_dist(megatron: Mapping[str, Any]) -> bool:
    """Whether the job writes Megatron's torch_dist format (its default) somewhere."""
    return bool(megatron.get("save")) and (megatron.get("ckpt_format") or "torch_dist") == "torch_dist"


def save_defaults(megatron: Mapping[str, Any]) -> dict[str, Any]:
    """SAVE_DEFAULTS where the job saves torch_dist checkpoints and the preset does not set them itself."""
    if not saves_torch_dist(megatron):
        return {}
    return {dest: value for dest, value in SAVE_DEFAULTS.items() if megatron.get(dest) is None}


def save_notes(added: Mapping[str, Any]) -> list[str]:
    if added.get("ckpt_assume_constant_structure"):
        return ["ckpt_assume_constant_structure (the launcher's default for torch_dist saves): every save after "
                "the first reuses the first one's save plan and metadata instead of rebuilding them with the "
                "training loop stopped; --set ckpt_assume_constant_structure=false to rebuild them each time"]
    return []
