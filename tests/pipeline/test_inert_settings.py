"""A setting Megatron reads only under another one, set while that one is off, is said in the job's warnings:
Megatron accepts it silently and trains another model than the one written."""

from __future__ import annotations

import pytest

from launcher.megatron import args as megatron_args
from launcher.pipeline.inert_settings import dependences
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve


def _warnings(*overrides: str) -> list[str]:
    job = resolve(load_preset("345m", list(overrides)), 1, 1)
    return [w for w in job.warnings if "without" in w and "(" in w]


@pytest.mark.parametrize("overrides, named, condition", [
    (["num_query_groups=4"], "num_query_groups=4", "group_query_attention=true"),
    # multi-query attention asked for with Megatron's default value: without the flag, 16 groups
    (["num_query_groups=1"], "num_query_groups=1", "group_query_attention=true"),
    (["rotary_base=500000", "rotary_percent=0.5"], "rotary_base=500000, rotary_percent=0.5",
     "position_embedding_type=rope"),
    (["q_lora_rank=64"], "q_lora_rank=64", "multi_latent_attention=true"),
    (["moe_router_topk=4", "moe_grouped_gemm=true"], "moe_grouped_gemm=True, moe_router_topk=4", "num_experts=N"),
    (["fp8_recipe=tensorwise"], "fp8_recipe=tensorwise", "fp8_format=hybrid"),
    (["initial_loss_scale=4096"], "initial_loss_scale=4096.0", "fp16=true"),
    (["recompute_num_layers=2"], "recompute_num_layers=2", "recompute_granularity=full"),
    (["window_attn_skip_freq=2"], "window_attn_skip_freq=2", "window_size"),
    (["mtp_loss_scaling_factor=0.3"], "mtp_loss_scaling_factor=0.3", "mtp_num_layers=N"),
])
def test_a_setting_without_the_one_it_needs_is_named(overrides: list[str], named: str, condition: str) -> None:
    (warning,) = _warnings(*overrides)
    assert warning.startswith(f"{named}: no effect without {condition}")
    assert "drop" in warning


@pytest.mark.parametrize("overrides", [
    ["num_query_groups=4", "group_query_attention=true"],
    ["num_query_groups=16"],  # as many groups as the 345m's 16 heads: plain multi-head attention either way
    ["rotary_base=500000", "position_embedding_type=rope"],
    ["rotary_base=500000", "use_rotary_position_embeddings=true"],  # Megatron's own rewrite to rope
    ["moe_router_topk=4", "num_experts=4", "add_bias_linear=false"],
    ["initial_loss_scale=4096", "fp16=true", "bf16=false"],
    ["recompute_modules=[core_attn,mlp]", "recompute_granularity=selective"],
    ["rotary_percent=1.0"],  # Megatron's default, written out: nothing to say
])
def test_a_setting_that_takes_effect_is_not_named(overrides: list[str]) -> None:
    assert _warnings(*overrides) == []


def test_what_the_launcher_adds_is_never_blamed() -> None:
    """Only the user's own settings are judged: the fast path's additions are the launcher's business."""
    job = resolve(load_preset("345m", []), 1, 1)
    assert job.added and _warnings() == []


def test_every_rule_names_megatron_arguments() -> None:
    catalog = megatron_args.catalog()
    for rule in dependences():
        assert rule.names and all(name in catalog for name in rule.names), rule.names


def test_skip_train_says_that_nothing_is_trained() -> None:
    job = resolve(load_preset("345m", ["skip_train=true"]), 1, 1)
    (warning,) = [w for w in job.warnings if w.startswith("skip_train")]
    assert "trains nothing" in warning and "drop skip_train" in warning
    assert not [w for w in resolve(load_preset("345m", []), 1, 1).warnings if "skip_train" in w]
