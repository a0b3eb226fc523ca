"""The resume check on tensors Megatron creates only under a setting, and on names that follow the implementation
(measured with scripts/ckpt_load_matrix.py where the CPU runs it; docs/resume-and-requeue.md): the router's expert
bias, the shared expert's gate, a learnable softmax offset, multi-token prediction layers, MLA's latent norms, layers
saved one by one under a per-layer moe_layer_freq, Transformer Engine's norm names and grouped experts. The stored
settings are made as Megatron stores them."""

from __future__ import annotations

import random

import pytest

from launcher.checks.model_tensors import Layers, compare, tensors
from launcher.checks.resume import judge
from launcher.cli.job import JobRequest, job_for
from launcher.estimate.formulas import model_shape
from launcher.pipeline.preset import load_preset
from tests.checks.test_resume_model_tensors import DEFAULTS, MOE_JOB, MOE_SAVED, saved
from tests.checks.test_resume_optimizer_state import job, levels, text

MOE = {**MOE_SAVED, "moe_router_topk": 2}
SIGMOID = ["moe_router_score_function=sigmoid"]
MLA = {"multi_latent_attention": True, "position_embedding_type": "rope", "kv_lora_rank": 16, "qk_head_dim": 8,
       "qk_pos_emb_head_dim": 8, "v_head_dim": 8, "add_bias_linear": False, "add_qkv_bias": False}
MLA_JOB = ["multi_latent_attention=true", "position_embedding_type=rope", "kv_lora_rank=16", "qk_head_dim=8",
           "qk_pos_emb_head_dim=8", "v_head_dim=8", "add_bias_linear=false"]
ROPE = ["position_embedding_type=rope"]
TE = ["transformer_impl=transformer_engine", "launcher.transformer_engine=true"]

# (stored with, the job's settings, the tensor named): the job's model has a tensor the checkpoint lacks
ADDED = [
    (MOE, [*MOE_JOB, "moe_router_enable_expert_bias=true", *SIGMOID], "decoder.layers.mlp.router.expert_bias"),
    ({**MOE, "moe_shared_expert_intermediate_size": 12},
     [*MOE_JOB, "moe_shared_expert_intermediate_size=12", "moe_shared_expert_gate=true"],
     "decoder.layers.mlp.shared_experts.gate_weight"),
    ({}, ["softmax_type=learnable"], "decoder.layers.self_attention.core_attention.softmax_offset"),
    ({"position_embedding_type": "rope"}, [*ROPE, "mtp_num_layers=1"], "mtp.layers.*.enorm.weight"),
    ({"position_embedding_type": "rope", "mtp_num_layers": 1}, [*ROPE, "mtp_num_layers=2"],
     "mtp.layers.*.hnorm.weight"),
    (MLA, [*MLA_JOB, "qk_layernorm=true"], "decoder.layers.self_attention.kv_layernorm.weight"),
    (MLA, [*MLA_JOB, "q_lora_rank=16"], "decoder.layers.self_attention.linear_q_down_proj.weight"),
    # moe_layer_freq a list: each layer under its own name, even where the layers are the same
    (MOE, [*MOE_JOB, "moe_layer_freq=[1,1]"], "decoder.layers.*.self_attention.linear_qkv.weight"),
    ({**MOE, "moe_layer_freq": [1, 0]}, [*MOE_JOB, "moe_layer_freq=[0,1]"], "decoder.layers.*.mlp.linear_fc1.weight"),
]
# the checkpoint has a tensor the job's model lacks
DROPPED = [
    ({**MOE, "moe_router_enable_expert_bias": True, "moe_router_score_function": "sigmoid"}, [*MOE_JOB, *SIGMOID],
     "decoder.layers.mlp.router.expert_bias"),
    ({**MOE, "moe_shared_expert_intermediate_size": 12, "moe_shared_expert_gate": True},
     [*MOE_JOB, "moe_shared_expert_intermediate_size=12"], "decoder.layers.mlp.shared_experts.gate_weight"),
    ({"softmax_type": "learnable"}, [], "decoder.layers.self_attention.core_attention.softmax_offset"),
    ({"position_embedding_type": "rope", "mtp_num_layers": 1}, ROPE, "mtp.layers.*.enorm.weight"),
    ({"position_embedding_type": "rope", "mtp_num_layers": 2}, [*ROPE, "mtp_num_layers=1"], "mtp.layers.*.hnorm.bias"),
    ({**MLA, "qk_layernorm": True}, MLA_JOB, "decoder.layers.self_attention.kv_layernorm.weight"),
]


@pytest.mark.parametrize(("settings", "job_settings", "named"), ADDED)
def test_a_tensor_a_setting_adds_that_the_checkpoint_lacks_is_refused(tmp_path, settings, job_settings, named):
    check = judge(job(tmp_path, "bf16=true", *job_settings), saved(tmp_path, settings))
    assert levels(check, "shape") == ["refuse"], check.render()
    assert named in text(check, "shape") and "not in state dict" in text(check, "shape")


@pytest.mark.parametrize(("settings", "job_settings", "named"), DROPPED)
def test_a_tensor_a_setting_adds_that_the_job_lacks_is_left_unread_with_a_warning(
        tmp_path, settings, job_settings, named):
    check = judge(job(tmp_path, "bf16=true", *job_settings), saved(tmp_path, settings))
    assert check.ok and levels(check, "shape") == ["warn"], check.render()
    assert named in text(check, "shape") and "left unread" in text(check, "shape")


def test_a_buffer_left_unread_does_not_stop_a_dp_reshardable_optimizer_state(tmp_path):
    """The router's expert bias is a buffer: the distributed optimizer's flat buffer holds parameters only."""
    stored = {**MOE, "moe_router_enable_expert_bias": True, "moe_router_score_function": "sigmoid",
              "use_distributed_optimizer": True}
    check = judge(job(tmp_path, "bf16=true", "use_distributed_optimizer=true", *MOE_JOB, *SIGMOID),
                  saved(tmp_path, stored, "dp_reshardable"))
    assert check.ok and levels(check, "shape") == ["warn"], check.render()
    gate = {**MOE, "moe_shared_expert_intermediate_size": 12, "moe_shared_expert_gate": True,
            "use_distributed_optimizer": True}
    parameter = judge(job(tmp_path, "bf16=true", "use_distributed_optimizer=true", *MOE_JOB,
                          "moe_shared_expert_intermediate_size=12"), saved(tmp_path, gate, "dp_reshardable"))
    assert levels(parameter, "shape") == ["refuse"] and "flat buffer" in text(parameter, "shape"), \
        parameter.render()


def test_transformer_engine_names_an_moe_layers_norm_otherwise_than_the_local_spec(tmp_path):
    """The local spec saves the pre-MLP norm as TE's fused mlp.linear_fc1.layer_norm_ also in MoE layers, where TE
    keeps pre_mlp_layernorm: a local MoE checkpoint does not load into a TE job. Dense layers are named alike."""
    moe = judge(job(tmp_path, "bf16=true", *MOE_JOB, *TE), saved(tmp_path, MOE))
    assert levels(moe, "shape") == ["refuse"], moe.render()
    assert "decoder.layers.pre_mlp_layernorm.weight" in text(moe, "shape")
    dense = judge(job(tmp_path, "bf16=true", *TE), saved(tmp_path, {}))
    assert dense.ok and levels(dense, "shape") == ["ok"], dense.render()


def test_grouped_experts_save_as_sequential_ones_in_torch_dist_and_under_other_names_in_the_torch_format(tmp_path):
    """TEGroupedMLP's sharded state dict is SequentialMLP's; its module names (linear_fc1.weight0, …) are not."""
    stored = {**MOE, "transformer_impl": "transformer_engine", "moe_grouped_gemm": True}
    same = judge(job(tmp_path, "bf16=true", *MOE_JOB, *TE), saved(tmp_path, stored))
    assert same.ok and levels(same, "shape") == ["ok"], same.render()
    torch_job = ["ckpt_format=torch", *MOE_JOB, *TE]
    moved = judge(job(tmp_path, "bf16=true", *torch_job), saved(tmp_path, stored, fmt="torch"))
    assert levels(moved, "shape") == ["refuse"] and "matched by position" in text(moved, "shape"), moved.render()
    assert "mlp.experts.local_experts.*.linear_fc1.weight" in text(moved, "shape")
    weights = judge(job(tmp_path, "bf16=true", "no_load_optim=true", *torch_job), saved(tmp_path, stored, fmt="torch"))
    assert weights.ok and levels(weights, "shape") == ["warn"], weights.render()
    assert "mlp.experts.linear_fc1.weight*" in text(weights, "shape")


def test_a_torch_checkpoint_of_the_local_spec_names_its_norms_otherwise_than_te(tmp_path):
    check = judge(job(tmp_path, "bf16=true", "ckpt_format=torch", *TE), saved(tmp_path, {}, fmt="torch"))
    assert levels(check, "shape") == ["refuse"] and "matched by position" in text(check, "shape"), check.render()
    assert "decoder.layers.*.self_attention.linear_qkv.layer_norm_weight" in text(check, "shape")


def test_layer_sets_count_as_the_layers_one_by_one():
    draw = random.Random(7)

    def layers() -> Layers:
        pattern = draw.choice([draw.randint(1, 5), tuple(draw.randint(0, 1) for _ in range(draw.randint(0, 14)))])
        return Layers(draw.randint(0, 14), pattern, draw.random() < 0.5)

    for _ in range(4000):
        a, b = layers(), layers()
        assert a.common(b) == sum(1 for i in range(min(a.count, b.count)) if a.holds(i) and b.holds(i)), (a, b)
        assert a.size() == sum(1 for i in range(a.count) if a.holds(i)), a


def test_layers_saved_one_by_one_are_counted_not_listed():
    base = {**DEFAULTS, **MOE, "hidden_size": 12, "num_attention_heads": 4, "seq_length": 8,
            "max_position_embeddings": 8, "vocab_size": 100}
    huge = model_shape({**base, "num_layers": 3_000_000_000, "moe_layer_freq": 2}, 1)
    differ = compare(huge, model_shape({**base, "num_layers": 3_000_000_000, "moe_layer_freq": 3}, 1))
    # MoE on the layers divisible by 2 (1.5e9) against 3 (1e9), those by 6 (5e8) in both: 3 MoE tensors per layer
    # (router, the experts' fc1 and fc2) and 2 dense ones (fc1, fc2; the pre-MLP norm is every layer's)
    assert differ.dropped_count == 3 * 1_000_000_000 + 2 * 500_000_000 and not differ.reshaped
    assert differ.added_count == 3 * 500_000_000 + 2 * 1_000_000_000
    experts = tensors(huge)["decoder.layers.*.mlp.experts.experts.linear_fc1.weight"]
    assert experts[:2] == (1_500_000_000, 2)


def job4(tmp_path, *overrides: str):
    """test_resume_optimizer_state.job on 4 GPUs (EP 4)."""
    made, problems = job_for(load_preset("toy", ["entry=pretrain_gpt", "train_iters=200", "global_batch_size=8",
                                                 "micro_batch_size=2", "ckpt_format=torch_dist", f"load={tmp_path}",
                                                 *overrides]),
                             JobRequest(nodes=1, gpus_per_node=4, run_dir=False, local=False))
    assert not problems, problems
    return made


@pytest.mark.parametrize(("before", "now"), [(2, 4), (4, 2)])
def test_a_dp_reshardable_expert_optimizer_state_does_not_follow_ep_between_sizes_above_1(tmp_path, before, now):
    """Each rank's flat buffer of the experts' optimizer holds its num_experts / EP experts (measured, EP 2 → 4:
    'Global shape mismatch' for chained_1.optimizer.distributed.….param); a plain optimizer's state reshards."""
    settings = {**MOE, "num_experts": 4, "expert_model_parallel_size": before, "use_distributed_optimizer": True}
    layout = [*MOE_JOB, "num_experts=4", f"expert_model_parallel_size={now}", "use_distributed_optimizer=true"]
    check = judge(job4(tmp_path, "bf16=true", *layout), saved(tmp_path, settings, "dp_reshardable"))
    assert levels(check, "optimizer") == ["refuse"] and "chained_1" in text(check, "optimizer"), check.render()
    fully = judge(job4(tmp_path, "bf16=true", *layout), saved(tmp_path, settings, "fully_reshardable"))
    assert fully.ok and levels(fully, "optimizer") == ["note"], fully.render()
    weights = judge(job4(tmp_path, "bf16=true", *layout, "no_load_optim=true"),
                    saved(tmp_path, settings, "dp_reshardable"))
    assert weights.ok, weights.render()
    plain = judge(job4(tmp_path, "bf16=true", *MOE_JOB, "num_experts=4", f"expert_model_parallel_size={now}"),
                  saved(tmp_path, {**settings, "use_distributed_optimizer": False}))
    assert plain.ok and levels(plain, "optimizer") == [], plain.render()


def test_moe_latent_projections_are_tensors_of_their_own_and_narrow_the_experts():
    base = {**DEFAULTS, **MOE, "num_layers": 2, "hidden_size": 12, "num_attention_heads": 4, "seq_length": 8,
            "max_position_embeddings": 8, "vocab_size": 100, "transformer_impl": "transformer_engine",
            "moe_grouped_gemm": True}
    latent = tensors(model_shape({**base, "moe_latent_size": 6}, 1))
    assert latent["decoder.layers.mlp.fc1_latent_proj.weight"] == (2, 6, 12)
    assert latent["decoder.layers.mlp.experts.experts.linear_fc1.weight"] == (2, 2, 48, 6)
    assert latent["decoder.layers.mlp.experts.experts.linear_fc2.weight"] == (2, 2, 6, 48)
    assert "decoder.layers.mlp.fc1_latent_proj.weight" not in tensors(model_shape(base, 1))


@pytest.mark.parametrize("setting", ["experimental_attention_variant=gated_delta_net", "linear_attention_freq=2"])
def test_layers_whose_tensors_are_not_modelled_are_said_not_compared(tmp_path, setting):
    name, value = setting.split("=")
    for stored, job_settings in (({name: value}, TE), ({}, [setting, *TE])):
        check = judge(job(tmp_path, "bf16=true", *job_settings), saved(tmp_path, stored))
        assert levels(check, "shape") == ["warn"] and "not compared" in text(check, "shape"), check.render()
        assert name in text(check, "shape")
