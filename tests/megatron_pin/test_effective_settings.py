"""Megatron's effective settings (launcher.megatron.effective): the values validate_args really leaves, checked
directly and against Megatron's own validate_args through the verdict worker."""

from __future__ import annotations

import pytest
from upstream_support import shared_checker

from launcher.megatron.effective import effective_settings
from launcher.pipeline import command

BASE = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 128,
        "max_position_embeddings": 128, "micro_batch_size": 1, "train_iters": 10, "lr": 1e-4, "eval_interval": 5,
        "eval_iters": 1, "mock_data": True, "tokenizer_type": "NullTokenizer", "vocab_size": 128,
        "transformer_impl": "local", "gradient_accumulation_fusion": False, "masked_softmax_fusion": False,
        "no_persist_layer_norm": True}


def test_tp_1_turns_sequence_parallel_off_and_says_so():
    effective = effective_settings({"sequence_parallel": True})
    assert effective["sequence_parallel"] is False
    assert effective.warnings({"sequence_parallel": True}) == [
        "sequence_parallel is ignored with TP 1 (Megatron turns it off)"]
    assert effective_settings({"sequence_parallel": True, "tensor_model_parallel_size": 2})["sequence_parallel"]


def test_async_save_without_a_persistent_writer_is_dropped_and_the_strategy_becomes_mcore():
    effective = effective_settings({"async_save": True})
    assert (effective["async_save"], effective["async_strategy"]) == (False, "mcore")
    kept = effective_settings({"async_save": True, "use_persistent_ckpt_worker": True})
    assert (kept["async_save"], kept["async_strategy"]) == (True, "nvrx")  # nvrx: Megatron's default
    torch_format = effective_settings({"async_save": True, "ckpt_format": "torch"})
    assert torch_format["async_save"] is True  # not rewritten: value_rules refuses it instead


def test_p2p_overlap_lives_only_with_the_interleaved_schedule():
    assert effective_settings({}, vpp=None)["overlap_p2p_comm"] is False
    assert effective_settings({"pipeline_model_parallel_size": 2}, vpp=2)["overlap_p2p_comm"] is True


def test_emerging_optimizers_replace_the_distributed_optimizer():
    effective = effective_settings({"optimizer": "dist_muon", "use_distributed_optimizer": True})
    assert (effective["optimizer"], effective["use_distributed_optimizer"]) == ("muon", False)


def test_a_one_element_router_list_becomes_its_element_so_sinkhorn_top_1_needs_no_pre_softmax():
    from launcher.pipeline.value_rules import softmax_of_one_needed

    given = {"num_experts": 4, "moe_router_topk": 1, "moe_router_load_balancing_type": ["sinkhorn"],
             "moe_aux_loss_coeff": [0.01]}
    effective = effective_settings(given)
    assert (effective["moe_router_load_balancing_type"], effective["moe_aux_loss_coeff"]) == ("sinkhorn", 0.01)
    assert not softmax_of_one_needed(effective.__getitem__, 1)  # TransformerConfig: != "sinkhorn" exempts it
    two = effective_settings({**given, "moe_router_load_balancing_type": ["sinkhorn", "aux_loss"],
                              "moe_aux_loss_coeff": [0.0, 0.01]})
    assert two["moe_router_load_balancing_type"] == ["sinkhorn", "aux_loss"]  # a list is not "sinkhorn"
    assert softmax_of_one_needed(two.__getitem__, 1)


CASES = [
    {"sequence_parallel": True},
    {"async_save": True, "ckpt_format": "torch_dist"},
    {"async_save": True, "use_persistent_ckpt_worker": True, "async_strategy": "nvrx"},
    {"use_rotary_position_embeddings": True, "apply_rope_fusion": False},
    {"position_embedding_type": "learned_absolute", "apply_rope_fusion": True},
    {"add_bias_linear": False},
    {"fp16": True},
    {"overlap_p2p_comm": True, "pipeline_model_parallel_size": 1},
    {"optimizer": "dist_muon", "use_distributed_optimizer": True},
    {"mtp_hybrid_override_pattern": "M*"},
    {"num_experts": 4, "moe_router_topk": 1, "moe_router_load_balancing_type": ["sinkhorn"],
     "moe_aux_loss_coeff": [0.01], "add_bias_linear": False},
]
# What launcher.megatron.effective rewrites; Megatron's other bookkeeping (dtypes, derived sizes) is not a setting.
REWRITTEN = {"sequence_parallel", "async_save", "async_strategy", "position_embedding_type", "apply_rope_fusion",
             "bias_gelu_fusion", "check_for_nan_in_loss_and_grad", "overlap_p2p_comm", "align_param_gather",
             "use_distributed_optimizer", "optimizer", "mtp_hybrid_override_pattern", "fsdp_manual_registration",
             "use_gloo_process_groups", "moe_router_load_balancing_type", "moe_aux_loss_coeff"}


@pytest.mark.megatron
@pytest.mark.parametrize("given", CASES, ids=lambda c: ",".join(c))
def test_the_effective_settings_are_what_validate_args_leaves(given):
    settings = {**BASE, **given}
    verdict = shared_checker().check(command.script_args(settings), 1)
    megatron = {dest: now for dest, now in verdict.facts["changed_by_validate_args"].items() if dest in REWRITTEN}
    ours = {r.dest: r.now for r in effective_settings(settings).rewrites if r.dest in REWRITTEN}
    assert ours == megatron


def test_pretrain_gpt_defaults_the_tokenizer_to_gpt2_bpe_which_needs_transformers():
    from launcher.megatron import requirements

    settings = effective_settings({}).settings
    assert settings["tokenizer_type"] == "GPT2BPETokenizer"
    assert "tokenizer-transformers" in [row.id for row in requirements.applicable(settings)]
    assert effective_settings({"tokenizer_type": "NullTokenizer"})["tokenizer_type"] == "NullTokenizer"
