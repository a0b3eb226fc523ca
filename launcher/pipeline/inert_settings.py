"""Settings Megatron reads only under another setting: set while that one is off, they change nothing.

Megatron accepts them without a word (`--num-query-groups 8` without `--group-query-attention` trains plain
multi-head attention), so the job that runs is not the one the user wrote. Each rule names where Megatron at the
pin decides it; only what the user set away from Megatron's default is judged, never what the launcher added.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from launcher.megatron import args as megatron_args

Arg = Callable[[str], Any]  # a setting's value as Megatron sees it (the job's, else Megatron's default)
_NO_POSITION_ROTATION = ("learned_absolute", "relative", "none")


@dataclass(frozen=True)
class Dependence:
    names: tuple[str, ...]  # read by Megatron only while `takes_effect` holds
    takes_effect: Callable[[Arg], bool]
    condition: str  # the setting that makes them count, as the user sets it
    where: str  # where Megatron at 432d76b2b8bf decides it
    effect: str = "no effect"  # what setting them changes while the condition does not hold
    # Any value written is a request, Megatron's default included (`--num-query-groups 1`, multi-query attention,
    # is the default's value, yet without the flag the job has a group per head)
    any_value: bool = False


@functools.cache
def dependences() -> tuple[Dependence, ...]:
    moe = tuple(sorted(name for name in megatron_args.catalog() if name.startswith("moe_")))
    return (
        Dependence(("num_query_groups",),
                   lambda arg: bool(arg("group_query_attention") or arg("heterogeneous_layers_config_path")
                                    or arg("num_query_groups") == arg("num_attention_heads")),  # a group per head
                   "group_query_attention=true",
                   "training/argument_utils.py: num_query_groups is None without group_query_attention, so every "
                   "head has its own key and value", any_value=True),
        Dependence(("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"),
                   lambda arg: bool(arg("multi_latent_attention")), "multi_latent_attention=true",
                   "training/argument_utils.py: only MLATransformerConfig has these fields"),
        Dependence(("rotary_base", "rotary_percent", "rotary_interleaved", "rotary_seq_len_interpolation_factor",
                    "use_rope_scaling", "rope_scaling_factor"),
                   lambda arg: bool(arg("multi_latent_attention"))
                   or arg("position_embedding_type") not in _NO_POSITION_ROTATION,
                   "position_embedding_type=rope",
                   "core/models/gpt/gpt_model.py: the rotary embedding is built only for rope, yarn and mrope"),
        Dependence(moe, lambda arg: arg("num_experts") is not None, "num_experts=N",
                   "gpt_builders.py: without num_experts every layer gets the dense layer spec"),
        Dependence(("window_attn_skip_freq",), lambda arg: bool(arg("window_size")), "window_size",
                   "core/transformer/utils.py is_layer_window_attention: no window, no windowed layer"),
        Dependence(("mtp_loss_scaling_factor",), lambda arg: bool(arg("mtp_num_layers")), "mtp_num_layers=N",
                   "core/transformer/multi_token_prediction.py: the factor scales the MTP layers' loss"),
        Dependence(("fp8_recipe", "fp8_margin", "fp8_amax_history_len", "fp8_amax_compute_algo"),
                   lambda arg: arg("fp8") is not None, "fp8_format=hybrid (or e4m3)",
                   "core/fp8_utils.py: the recipe is made only when fp8 is set"),
        Dependence(("initial_loss_scale", "min_loss_scale", "loss_scale_window", "hysteresis"),
                   lambda arg: bool(arg("fp16")), "fp16=true",
                   "core/optimizer/__init__.py: the dynamic loss scaler exists only in fp16 (bf16 scales no loss)"),
        Dependence(("recompute_method", "recompute_num_layers"),
                   lambda arg: arg("recompute_granularity") is not None, "recompute_granularity=full",
                   "core/transformer/transformer_config.py: read only with a recompute granularity"),
        Dependence(("recompute_modules",), lambda arg: arg("recompute_granularity") == "selective",
                   "recompute_granularity=selective",
                   "core/transformer/transformer_layer.py and attention.py: the modules are recomputed only in "
                   "selective recomputation (full recomputes whole layers)"),
        Dependence(("tensorboard_log_interval", "tensorboard_queue_size", "log_timers_to_tensorboard",
                    "log_memory_to_tensorboard", "log_validation_ppl_to_tensorboard", "log_world_size_to_tensorboard",
                    "log_loss_scale_to_tensorboard"),
                   lambda arg: bool(arg("tensorboard_dir")), "tensorboard_dir",
                   "training/global_vars.py: the TensorBoard writer is made only for a tensorboard_dir"),
        Dependence(("wandb_project",), lambda arg: bool(arg("tensorboard_dir")), "tensorboard_dir",
                   "training/training.py training_log: every W&B metric is logged inside `if writer`, the "
                   "TensorBoard writer", effect="no metric logged"),
        Dependence(("wandb_exp_name", "wandb_save_dir", "wandb_entity"), lambda arg: bool(arg("wandb_project")),
                   "wandb_project", "training/global_vars.py: the W&B writer is made only for a wandb_project"),
    )


def inert_settings(user: Mapping[str, Any], arg: Arg) -> list[str]:
    """A warning for each group of settings the user set that Megatron will not read for this job."""
    catalog = megatron_args.catalog()
    warnings = []
    for rule in dependences():
        if rule.takes_effect(arg):
            continue
        inert = [f"{name}={user[name]}" for name in rule.names
                 if name in catalog and user.get(name) is not None
                 and (rule.any_value or user[name] != catalog[name].default)]
        if inert:
            one = len(inert) == 1
            warnings.append(f"{', '.join(inert)}: {rule.effect} without {rule.condition} ({rule.where}); set "
                            f"{rule.condition} or drop {'it' if one else 'them'}")
    return warnings
