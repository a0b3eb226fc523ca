"""The resume check on a model whose tensors differ from the checkpoint's, as the pinned Megatron loads it (measured
with scripts/ckpt_load_matrix.py; docs/resume-and-requeue.md): a tensor of another shape, or one the job's model has
and the checkpoint lacks, stops the load (refused); one the checkpoint has and the job's model does not is left
unread without a word (a warning: another model trains); the torch format's optimizer state and a dp_reshardable
distributed optimizer's stop on any change of the tensors; use_checkpoint_args takes the checkpoint's model settings.
The stored settings are made as Megatron stores them (after validate_args)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from launcher.checks.model_tensors import compare, tensors
from launcher.checks.resume import judge
from launcher.estimate.formulas import model_shape
from tests.checks.test_resume_optimizer_state import DISTRIBUTED, job, levels, stored, text

# what validate_args stores for the toy model (hidden 12, 4 heads) with Megatron's defaults
DEFAULTS = {"position_embedding_type": "learned_absolute", "add_position_embedding": True,
            "normalization": "LayerNorm", "add_bias_linear": True, "add_qkv_bias": True,
            "untie_embeddings_and_output_weights": False, "qk_layernorm": False, "swiglu": False,
            "ffn_hidden_size": 48, "kv_channels": 3, "num_query_groups": 1, "group_query_attention": False,
            "padded_vocab_size": 256, "num_experts": None, "dist_ckpt_strictness": "assume_ok_unexpected",
            "transformer_impl": "local"}
TORCH_FILE = ("args", "checkpoint_version", "iteration", "model", "optimizer", "opt_param_scheduler", "rng_state")

# (stored with, the job's settings, the tensor named): the job's model lacks a tensor the checkpoint has
DROPPED = [({}, ["position_embedding_type=rope"], "embedding.position_embeddings.weight"),
           ({}, ["normalization=RMSNorm"], "decoder.layers.self_attention.linear_qkv.layer_norm_bias"),
           ({}, ["add_bias_linear=false"], "decoder.layers.self_attention.linear_proj.bias"),
           ({"untie_embeddings_and_output_weights": True}, [], "output_layer.weight"),
           ({"qk_layernorm": True}, [], "decoder.layers.self_attention.q_layernorm.weight")]
# the job's model has a tensor the checkpoint lacks
ADDED = [({"position_embedding_type": "rope"}, [], "embedding.position_embeddings.weight"),
         ({"normalization": "RMSNorm"}, [], "decoder.layers.self_attention.linear_qkv.layer_norm_bias"),
         ({"add_bias_linear": False, "add_qkv_bias": False}, [], "decoder.layers.mlp.linear_fc1.bias"),
         ({"add_bias_linear": False, "add_qkv_bias": False}, ["add_bias_linear=false", "add_qkv_bias=true"],
          "decoder.layers.self_attention.linear_qkv.bias"),
         ({}, ["untie_embeddings_and_output_weights=true"], "output_layer.weight"),
         ({}, ["qk_layernorm=true"], "decoder.layers.self_attention.q_layernorm.weight")]
# another shape of a tensor both have
RESHAPED = [({}, ["group_query_attention=true", "num_query_groups=2"], "linear_qkv.weight"),
            ({}, ["swiglu=true"], "linear_fc1.weight"), ({}, ["ffn_hidden_size=24"], "linear_fc1.weight"),
            ({}, ["kv_channels=6"], "linear_qkv.weight"),
            ({}, ["max_position_embeddings=128"], "embedding.position_embeddings.weight"),
            ({"num_experts": 2, "moe_ffn_hidden_size": 48, "moe_router_topk": 2, "tensor_model_parallel_size": 1,
              "padded_vocab_size": 128, "add_bias_linear": False, "add_qkv_bias": False},
             ["num_experts=4", "moe_router_topk=2", "tensor_model_parallel_size=1", "add_bias_linear=false"],
             "router.weight")]


def saved(tmp_path, settings: dict, sharding: str | None = None, fmt: str = "torch_dist"):
    made = stored(tmp_path, "bf16", sharding, **{**DEFAULTS, **settings})
    return made if fmt == "torch_dist" else replace(made, format="torch", content_metadata=None, keys=TORCH_FILE)


@pytest.mark.parametrize(("settings", "job_settings", "named"), DROPPED)
def test_a_tensor_the_job_lacks_is_left_unread_with_a_warning(tmp_path, settings, job_settings, named):
    check = judge(job(tmp_path, "bf16=true", *job_settings), saved(tmp_path, settings))
    assert check.ok and levels(check, "shape") == ["warn"], check.render()
    assert named in text(check, "shape") and "left unread" in text(check, "shape")
    strict = judge(job(tmp_path, "bf16=true", *job_settings, "dist_ckpt_strictness=raise_all"),
                   saved(tmp_path, settings))
    assert levels(strict, "shape") == ["refuse"] and "raise_all" in text(strict, "shape"), strict.render()


@pytest.mark.parametrize(("settings", "job_settings", "named"), ADDED)
def test_a_tensor_the_checkpoint_lacks_is_refused_unless_the_strictness_lets_it_pass(
        tmp_path, settings, job_settings, named):
    check = judge(job(tmp_path, "bf16=true", *job_settings), saved(tmp_path, settings))
    assert levels(check, "shape") == ["refuse"], check.render()
    assert named in text(check, "shape") and "not in state dict" in text(check, "shape")
    lenient = judge(job(tmp_path, "bf16=true", *job_settings, "dist_ckpt_strictness=log_unexpected"),
                    saved(tmp_path, settings))
    assert lenient.ok and levels(lenient, "shape") == ["warn"], lenient.render()
    assert "keep their initial values" in text(lenient, "shape")


@pytest.mark.parametrize(("settings", "job_settings", "named"), RESHAPED)
def test_a_tensor_of_another_shape_is_refused_whatever_lifts_the_rest(tmp_path, settings, job_settings, named):
    for fmt in ("torch_dist", "torch"):
        for lifted in ([], ["no_load_optim=true"], ["dist_ckpt_strictness=ignore_all"]):
            check = judge(job(tmp_path, "bf16=true", f"ckpt_format={fmt}", *job_settings, *lifted),
                          saved(tmp_path, settings, fmt=fmt))
            assert levels(check, "shape") == ["refuse"] and named in text(check, "shape"), check.render()


@pytest.mark.parametrize(("settings", "job_settings", "named"), DROPPED + ADDED)
def test_the_torch_format_refuses_any_tensor_change_while_it_loads_the_optimizer_state(
        tmp_path, settings, job_settings, named):
    check = judge(job(tmp_path, "bf16=true", "ckpt_format=torch", *job_settings),
                  saved(tmp_path, settings, fmt="torch"))
    assert levels(check, "shape") == ["refuse"], check.render()
    assert "parameter group that doesn't match" in text(check, "shape")
    weights = judge(job(tmp_path, "bf16=true", "ckpt_format=torch", "no_load_optim=true", *job_settings),
                    saved(tmp_path, settings, fmt="torch"))
    # the torch format's names (the local spec's modules), per layer said once
    per_layer = named.replace("decoder.layers.", "decoder.layers.*.").replace(
        "self_attention.linear_qkv.layer_norm_", "input_layernorm.")
    assert weights.ok and levels(weights, "shape") == ["warn"] and per_layer in text(weights, "shape"), \
        weights.render()


def test_a_dp_reshardable_state_refuses_a_tensor_left_unread_and_a_fully_reshardable_one_loads(tmp_path):
    check = judge(job(tmp_path, "bf16=true", "add_bias_linear=false", DISTRIBUTED),
                  saved(tmp_path, {}, "dp_reshardable"))
    assert levels(check, "shape") == ["refuse"] and "one flat buffer" in text(check, "shape"), check.render()
    assert judge(job(tmp_path, "bf16=true", "add_bias_linear=false", DISTRIBUTED, "no_load_optim=true"),
                 saved(tmp_path, {}, "dp_reshardable")).ok
    fully = judge(job(tmp_path, "bf16=true", "add_bias_linear=false", DISTRIBUTED),
                  saved(tmp_path, {}, "fully_reshardable"))
    assert fully.ok and levels(fully, "shape") == ["warn"], fully.render()


@pytest.mark.parametrize(("settings", "job_settings", "named"), DROPPED + ADDED + RESHAPED)
def test_use_checkpoint_args_judges_the_model_megatron_takes_from_the_checkpoint(
        tmp_path, settings, job_settings, named):
    """load_args_from_checkpoint forces most model settings from the stored args; ffn_hidden_size, kv_channels and
    max_position_embeddings only where the job leaves them unset, and qk_layernorm never: those are judged as the
    job sets them."""
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100")  # a load that holds a checkpoint
    own = judge(job(tmp_path, "bf16=true", *job_settings), saved(tmp_path, settings))
    check = judge(job(tmp_path, "bf16=true", "use_checkpoint_args=true", *job_settings), saved(tmp_path, settings))
    assert levels(check, "shape")[0] == "note" and "use_checkpoint_args" in text(check, "shape"), check.render()
    kept = {"ffn_hidden_size", "kv_channels", "max_position_embeddings", "qk_layernorm"}
    if kept & {s.split("=")[0] for s in job_settings} or "qk_layernorm" in settings:
        assert levels(check, "shape")[1:] == levels(own, "shape") and levels(own, "shape") != ["ok"], check.render()
    else:
        assert check.ok and levels(check, "shape") == ["note", "ok"], check.render()


def test_auto_detect_does_not_let_a_torch_job_load_a_torch_dist_checkpoint(tmp_path):
    """generate_state_dict builds the sharded state dict only for ckpt_format torch_dist: KeyError: 'model'."""
    check = judge(job(tmp_path, "bf16=true", "ckpt_format=torch", "auto_detect_ckpt_format=true"),
                  saved(tmp_path, {}))
    assert levels(check, "format") == ["refuse"] and "KeyError: 'model'" in text(check, "format"), check.render()
    assert "auto_detect_ckpt_format" not in check.refused[0].hint


def test_the_tensors_follow_the_settings():
    base = {"num_layers": 2, "hidden_size": 12, "num_attention_heads": 4, "seq_length": 64, "vocab_size": 100,
            "max_position_embeddings": 64}
    plain = tensors(model_shape(base, 1))
    assert plain["decoder.layers.self_attention.linear_qkv.weight"] == (2, 36, 12)
    assert "output_layer.weight" not in plain and "decoder.final_layernorm.bias" in plain
    moe = tensors(model_shape({**base, "num_experts": 4, "moe_shared_expert_intermediate_size": 8}, 1))
    assert moe["decoder.layers.mlp.experts.experts.linear_fc1.weight"] == (2, 4, 48, 12)
    assert moe["decoder.layers.mlp.shared_experts.linear_fc2.weight"] == (2, 12, 8)
    assert not compare(model_shape(base, 1), model_shape({**base, "vocab_size": 300}, 1))  # the vocabulary's rows


def test_the_torch_format_loads_another_number_of_layers_only_when_fine_tuning(tmp_path):
    """One tensor per layer: check_checkpoint_args asserts num_layers unless finetune, and then the load's
    non-strict fallback keeps the new layers at their initial values."""
    torch_format = saved(tmp_path, {}, fmt="torch")
    weights = judge(job(tmp_path, "bf16=true", "ckpt_format=torch", "num_layers=4", "no_load_optim=true"),
                    torch_format)
    assert levels(weights, "shape") == ["refuse"] and "check_checkpoint_args" in text(weights, "shape"), \
        weights.render()
    tuned = judge(job(tmp_path, "bf16=true", "ckpt_format=torch", "num_layers=4", "finetune=true"), torch_format)
    assert tuned.ok and levels(tuned, "shape") == ["warn"], tuned.render()
    assert "decoder.layers.*.input_layernorm.weight" in text(tuned, "shape")
    stacked = judge(job(tmp_path, "bf16=true", "num_layers=4", "finetune=true"), saved(tmp_path, {}))
    assert levels(stacked, "shape") == ["refuse"] and "Global shape mismatch" in text(stacked, "shape")


def test_a_torch_checkpoint_claiming_billions_of_layers_is_counted_not_listed(tmp_path):
    # its stored args are the checkpoint's word: the per-layer tensors are counted (they were listed, one name each:
    # 3,000,000 layers took 47 s and gigabytes here)
    huge = saved(tmp_path, {"num_layers": 3_000_000_000}, fmt="torch")
    tuned = judge(job(tmp_path, "bf16=true", "ckpt_format=torch", "finetune=true"), huge)
    assert levels(tuned, "shape") == ["warn"] and "decoder.layers.*.input_layernorm.weight" in text(tuned, "shape")
    loaded = judge(job(tmp_path, "bf16=true", "ckpt_format=torch", "num_layers=2"), huge)
    assert levels(loaded, "shape") == ["refuse"], loaded.render()
    differ = compare(model_shape({**DEFAULTS, "num_layers": 3_000_000_000, "hidden_size": 12,
                                  "num_attention_heads": 4, "seq_length": 8, "max_position_embeddings": 8,
                                  "vocab_size": 100}, 1),
                     model_shape({**DEFAULTS, "num_layers": 2, "hidden_size": 12, "num_attention_heads": 4,
                                  "seq_length": 8, "max_position_embeddings": 8, "vocab_size": 100}, 1), "torch")
    per_layer = sum(name.startswith("decoder.layers.") for name in tensors(model_shape(
        {**DEFAULTS, "num_layers": 1, "hidden_size": 12, "num_attention_heads": 4, "seq_length": 8,
         "max_position_embeddings": 8, "vocab_size": 100}, 1)))
    assert differ.dropped_count == (3_000_000_000 - 2) * per_layer and not differ.added


MOE_SAVED = {"num_experts": 2, "moe_ffn_hidden_size": 48, "moe_router_topk": 2, "tensor_model_parallel_size": 1,
             "padded_vocab_size": 128, "add_bias_linear": False, "add_qkv_bias": False}
MOE_JOB = ["tensor_model_parallel_size=1", "num_experts=2", "moe_router_topk=2", "add_bias_linear=false"]


@pytest.mark.parametrize(("before", "now"), [(1, 2), (2, 1)])
def test_an_moe_optimizer_state_does_not_load_across_ep_1(tmp_path, before, now):
    """At EP 1 the expert parameters share the dense optimizer; above it they have their own (chained)."""
    stored = saved(tmp_path, {**MOE_SAVED, "expert_model_parallel_size": before})
    check = judge(job(tmp_path, "bf16=true", *MOE_JOB, f"expert_model_parallel_size={now}"), stored)
    raised = "Expected 2 entries" if now > 1 else "KeyError: 'pre_wd_mult'"
    assert levels(check, "optimizer") == ["refuse"] and raised in text(check, "optimizer"), \
        check.render()
    weights = judge(job(tmp_path, "bf16=true", *MOE_JOB, f"expert_model_parallel_size={now}", "no_load_optim=true"),
                    stored)
    assert weights.ok and levels(weights, "optimizer") == [], weights.render()
    same = judge(job(tmp_path, "bf16=true", *MOE_JOB, f"expert_model_parallel_size={before}"), stored)
    assert same.ok and levels(same, "optimizer") == [], same.render()
