"""Settings that only another Megatron model reads: a configuration made for a Mamba/hybrid, T5, BERT or
vision-language model. pretrain_gpt.py parses them (they are in Megatron's shared argument parser) and builds a GPT
model that ignores them, so such a configuration would train something else than it describes.

Each setting here is read at the pin (432d76b2b8bf) only by that family's code, or by nothing: the hybrid pattern by
megatron/training/models/hybrid.py (and training.py's FLOP count, which then counts hybrid layers), the Mamba sizes
by megatron/core/ssm, `--decoder-num-layers` by nothing, `--bert-no-binary-head` by core/models/bert, the image
sizes by core/models/vision. None appears in Megatron's gpt, moe or mixtral functional-test configurations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

FAMILY_SETTINGS: dict[str, tuple[str, ...]] = {
    "a Mamba/hybrid model (pretrain_hybrid.py, pretrain_mamba.py)": (
        "is_hybrid_model", "hybrid_layer_pattern", "hybrid_override_pattern", "mamba_num_heads", "mamba_head_dim",
        "mamba_state_dim", "mamba_num_groups"),
    "a T5 encoder-decoder model": ("decoder_num_layers", "decoder_seq_length"),
    "a BERT model": ("bert_binary_head", "bert_load"),
    "a vision-language model (pretrain_vlm.py, examples/multimodal)": ("img_h", "img_w", "patch_dim"),
    # pretrain_gpt.py parses it, and training.py then expects the RL environments train_rl.py sets up
    "a reinforcement-learning run (train_rl.py)": ("perform_rl_step",),
}


def other_families(given: Mapping[str, Any], default: Callable[[str], Any]) -> dict[str, list[str]]:
    """family → the settings of `given` (the job's own, not Megatron's defaults) that only that family reads,
    where the value differs from Megatron's default (the default changes nothing)."""
    found: dict[str, list[str]] = {}
    for family, names in FAMILY_SETTINGS.items():
        hits = [name for name in names if given.get(name) is not None and given[name] != default(name)]
        if hits:
            found[family] = hits
    return found
