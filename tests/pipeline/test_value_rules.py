"""Values Megatron accepts at parse time but fails on later (or trains on NaN with): refused before launch."""

from __future__ import annotations

import pytest

from launcher.errors import UserError
from launcher.megatron.pin import Kernels
from launcher.pipeline.kernels import fallbacks
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve
from tests.pipeline.refusals import refused

WITHOUT = Kernels(False, False, "preset")
WITH = Kernels(True, True, "preset")


def resolved(*overrides: str, gpus: int = 1, kernels: Kernels = WITHOUT):
    return resolve(load_preset("345m", list(overrides)), 1, gpus, kernels=kernels)


def problems(*overrides: str, gpus: int = 1) -> str:
    return refused(overrides, 1, gpus)


def accepted(*overrides: str, gpus: int = 1) -> None:
    resolved(*overrides, gpus=gpus)


@pytest.mark.parametrize(("override", "expected"), [
    ("lr=nan", "error: lr is nan: it must be a finite number > 0"),
    ("lr=inf", "error: lr is inf: it must be a finite number > 0"),
    ("lr=0", "error: lr 0 must be > 0"),
    ("min_lr=nan", "error: min_lr is nan: it must be a finite number >= 0"),
    ("hidden_dropout=1.5", "error: hidden_dropout 1.5 is a dropout probability and must lie in [0, 1]"),
    ("attention_dropout=-0.1", "error: attention_dropout -0.1 is a dropout probability"),
    ("adam_beta2=1.0", "error: adam_beta2 1.0 must lie in [0, 1)"),
    ("weight_decay=-1", "error: weight_decay -1 must be >= 0"),
])
def test_values_out_of_range_are_refused_with_a_fix(override, expected):
    text = problems(override)
    assert expected in text
    assert "hint: " in text


@pytest.mark.parametrize("override", ["rope_scaling_factor=nan", "moe_router_topk_scaling_factor=-inf",
                                      "moe_aux_loss_coeff=inf", "mup_width_mult=nan", "inprocess_hard_timeout=nan"])
def test_any_float_setting_that_is_not_finite_is_refused(override):
    """Megatron's parser takes float('nan') for every float flag; nothing after it notices before the loss is NaN."""
    dest = override.partition("=")[0]
    text = problems(override)
    assert f"error: {dest} is {override.partition('=')[2]}: it must be a finite number" in text
    # a single value of a bounded setting (moe_aux_loss_coeff: one coefficient is a number to Megatron, which
    # unwraps a one-element list) is said by the range rule, with its bound
    assert f"hint: give {dest} a number, or remove it" in text or f"hint: set {dest} to a number" in text


def test_an_infinite_timeout_is_no_timeout_and_is_kept():
    accepted("inprocess_hard_timeout=inf")


def test_query_groups_must_divide_the_heads():
    text = problems("group_query_attention=true", "num_query_groups=3")
    assert "num_attention_heads 16 is not divisible by num_query_groups 3" in text
    assert "use num_query_groups in [1, 2, 4, 8, 16]" in text
    accepted("group_query_attention=true", "num_query_groups=4")


def test_query_groups_vs_tensor_parallel_still_checked():
    text = problems("group_query_attention=true", "num_query_groups=3", "num_attention_heads=12",
                    "tensor_model_parallel_size=2", gpus=2)
    assert "num_query_groups 3 must be a multiple or divisor of TP 2" in text


@pytest.mark.parametrize("overrides", [
    ("num_experts=-4",),
    ("num_experts=0", "expert_model_parallel_size=2"),
])
def test_expert_counts_below_one_are_refused(overrides):
    text = problems(*overrides, gpus=2)
    assert "num_experts must be at least 1" in text
    assert "leave num_experts unset" in text


PADDED = ("moe_pad_expert_input_to_capacity=true", "moe_token_dispatcher_type=alltoall", "add_bias_linear=false")


@pytest.mark.parametrize(("experts", "topk", "factor", "fits"), [(4, 4, 1.5, "1"), (6, 4, 2.0, "1.5"),
                                                                 (16, 6, 3.0, "2.66")])
def test_padding_to_a_capacity_past_the_tokens_is_refused_with_a_factor_that_fits(experts, topk, factor, fits):
    # each expert's capacity, tokens × topk / experts × factor, past the tokens fails Megatron's permute at the
    # first step (seen on CPU with the pin's pretrain_gpt.py: "shape '[4, 96]' is invalid for input of size 256")
    sizes = (f"num_experts={experts}", f"moe_router_topk={topk}", f"moe_expert_capacity_factor={factor}")
    text = problems(*sizes, *PADDED)
    assert "is more than the tokens" in text
    assert f"set moe_expert_capacity_factor={fits} " in text
    accepted(*sizes[:2], f"moe_expert_capacity_factor={fits}", *PADDED)
    accepted(*sizes, *PADDED[1:])  # without padding the factor only drops tokens
    accepted(f"num_experts={experts * 4}", *sizes[1:], *PADDED)  # more experts: capacity within the tokens


def test_moe_with_linear_biases_is_refused_with_a_fix():
    text = problems("num_experts=4", "moe_router_topk=2")
    assert "MoE experts (4) with linear biases fail at the first training step" in text
    assert "set add_bias_linear=false" in text
    for also in ((), ("swiglu=true",), ("bias_gelu_fusion=false",)):  # each of these failed on the GPU
        assert "with linear biases" in problems("num_experts=4", "moe_router_topk=2", *also)
    accepted("num_experts=4", "moe_router_topk=2", "add_bias_linear=false")
    # with TE, the fused bias-activation is Megatron's same code (esmoe_topk1_fork_flag_ep4 of the import corpus,
    # a TE target, rehearsed at EP 4: "Only support fusion of swiglu and quick_gelu with per_token_scale")
    for also in ((), ("swiglu=true",)):
        with pytest.raises(UserError, match="with linear biases"):
            resolved("num_experts=4", "moe_router_topk=2", *also, kernels=WITH)
    resolved("num_experts=4", "moe_router_topk=2", "bias_gelu_fusion=false", kernels=WITH)  # seen failing without TE
    resolved("num_experts=4", "moe_router_topk=2", "use_te_activation_func=true", "bias_gelu_fusion=false",
             kernels=WITH)  # TE's activation scales by the probabilities itself
    assert "moe_router_topk 5 must lie between 1 and num_experts 4" in problems(
        "num_experts=4", "moe_router_topk=5", "add_bias_linear=false")


def test_reset_attention_mask_keeps_the_dataloader_mask():
    assert "create_attention_mask_in_dataloader" not in resolved("reset_attention_mask=true").added
    assert resolved().added["create_attention_mask_in_dataloader"] is False  # SDPA's causal kernel needs none
    text = problems("reset_attention_mask=true", "create_attention_mask_in_dataloader=false")
    assert "reset_attention_mask needs the attention mask built in the dataloader" in text


def test_rope_without_te_turns_the_te_rope_fusion_off():
    preset = load_preset("345m", ["position_embedding_type=rope"])
    assert fallbacks(preset.megatron, WITHOUT)["apply_rope_fusion"] is False
    assert "apply_rope_fusion" not in fallbacks(preset.megatron, WITH)
    assert resolved("position_embedding_type=rope").added["apply_rope_fusion"] is False


def test_async_save_needs_a_format_megatron_saves_asynchronously():
    accepted()  # the preset ships async_save with torch_dist and the persistent worker
    text = problems("ckpt_format=torch")
    assert "async_save with ckpt_format torch" in text and "set async_save=false" in text
    accepted("ckpt_format=torch", "async_save=false")
    assert any("use_persistent_ckpt_worker" in w for w in resolved("use_persistent_ckpt_worker=false").warnings)
