"""The CPU rehearsal (`launch PRESET --check --rehearse`): the job's model and optimizer at a tiny size, built
through pretrain_gpt.py's own model provider and spec, one training step; model-build crashes surface here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from launcher.checks.rehearsal import HIDDEN, Rehearser, rehearsal_env, tiny_settings
from launcher.errors import UserError
from launcher.megatron.pin import Kernels
from launcher.pipeline.command import script_args
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve

REPO = Path(__file__).resolve().parents[2]


# CI's clean clone has none, and no package reachable from it ships one: megatron-core 0.18.0 on PyPI has
# megatron/core and megatron/training (of its release, not the pin) but not pretrain_gpt.py, gpt_builders.py and
# model_provider.py, which the rehearsal runs (docs/rehearsal.md, "Where it runs").
NO_CHECKOUT = ("needs a Megatron-LM checkout at the pin (pretrain_gpt.py, gpt_builders.py, model_provider.py; set "
               "MEGATRON_LM_PATH): no PyPI package ships them, so CI skips this")


def megatron_checkout() -> Path | None:
    for candidate in (os.environ.get("MEGATRON_LM_PATH"), REPO / "third_party" / "megatron-lm",
                      Path("/work/main/third_party/megatron-lm")):
        if candidate and (Path(candidate) / "pretrain_gpt.py").is_file():
            return Path(candidate)
    return None


def needs_checkout(test):
    test = pytest.mark.skipif(find_spec("megatron") is None or find_spec("torch") is None,
                              reason="needs megatron-core and torch")(test)
    test = pytest.mark.skipif(megatron_checkout() is None, reason=NO_CHECKOUT)(test)
    return pytest.mark.megatron(test)


def test_the_175b_job_is_rehearsed_at_a_tiny_size_and_says_what_it_leaves_out():
    job = resolve(load_preset("175b", []), kernels=Kernels(True, True, "preset"))
    settings, not_rehearsed = tiny_settings(job.megatron)
    assert (settings["num_layers"], settings["hidden_size"], settings["num_attention_heads"]) == (2, HIDDEN, 4)
    assert settings["tensor_model_parallel_size"] == settings["pipeline_model_parallel_size"] == 1
    assert "num_layers_per_virtual_pipeline_stage" not in settings and "sequence_parallel" not in settings
    assert settings["use_distributed_optimizer"] is True and "load" not in settings  # it runs on the CPU too
    assert not_rehearsed[0].startswith("TP 8, PP 16: one CPU process plays a world of one")


def test_a_per_layer_pattern_keeps_the_number_of_layers():
    settings, _ = tiny_settings({"num_layers": 8, "num_experts": 64, "moe_layer_freq": "([0]*2+[1]*6)",
                                 "moe_router_topk": 6, "num_query_groups": 8, "num_attention_heads": 32})
    assert (settings["num_layers"], settings["num_experts"], settings["moe_router_topk"]) == (8, 4, 4)
    assert settings["num_query_groups"] == 2


@pytest.fixture(scope="module")
def rehearser():
    with Rehearser(megatron_checkout()) as worker:
        yield worker


def rehearse_raw(worker: Rehearser, megatron: dict) -> dict:
    settings, _ = tiny_settings(megatron)
    return worker.rehearse_many([(script_args(settings), {})])[0]


def job_settings(*overrides: str) -> dict:
    return resolve(load_preset("345m", list(overrides)), 1, 1, kernels=Kernels(False, False, "preset")).megatron


@needs_checkout
def test_the_345m_job_builds_and_trains_one_step_on_the_cpu(rehearser):
    result = rehearser.rehearse(job_settings(), {})
    assert result.ok, result.traceback
    assert result.facts["parameters"] > 0 and 0 < result.facts["loss"] < 10


@needs_checkout
def test_the_optimizers_cpu_offload_is_said_not_rehearsed_and_the_rest_trains(rehearser):
    # a Mixtral fork's --optimizer-cpu-offload with the precision-aware optimizer (main params fp16): on the CPU
    # Megatron's HybridDeviceOptimizer finds no CUDA parameter to copy and its first step failed (KeyError)
    settings = job_settings("use_distributed_optimizer=true", "use_precision_aware_optimizer=true",
                            "optimizer_cpu_offload=true", "main_params_dtype=fp16", "bf16=true",
                            "use_torch_optimizer_for_cpu_offload=true")
    _, not_rehearsed = tiny_settings(settings)
    assert any(line.startswith("the optimizer's CPU offload") for line in not_rehearsed)
    result = rehearser.rehearse(settings, {})
    assert result.ok, result.traceback


PADDED_MOE = ("num_experts=16", "moe_router_topk=4", "moe_expert_capacity_factor=1.5",
              "moe_pad_expert_input_to_capacity=true", "moe_token_dispatcher_type=alltoall", "add_bias_linear=false")


@needs_checkout
def test_padding_to_capacity_at_the_shrunk_expert_count_trains_its_step(rehearser):
    # 16 experts, topk 4, factor 1.5: each expert's capacity is 0.375 of the tokens; shrunk to 4 experts at the
    # same topk and factor it was 1.5 of them and Megatron's unfused permute failed at the first step
    settings = job_settings(*PADDED_MOE)
    tiny, _ = tiny_settings(settings)
    assert tiny["moe_router_topk"] * tiny["moe_expert_capacity_factor"] <= tiny["num_experts"]
    result = rehearser.rehearse(settings, {})
    assert result.ok, result.traceback


@pytest.mark.parametrize("overrides, experts, factor", [
    (PADDED_MOE, 16, 1.0),  # fits at the job's counts, not at the shrunk ones: the factor that fits
    (PADDED_MOE[:3] + PADDED_MOE[4:], 16, 1.5),  # no padding: capacity only drops tokens, nothing to fit
    # past the tokens at the job's own counts (which the dry-run refuses): kept, to fail as on a GPU
    (PADDED_MOE, 4, 1.5),
])
def test_the_capacity_factor_is_fitted_only_where_the_shrink_alone_pushes_capacity_past_the_tokens(overrides,
                                                                                                      experts,
                                                                                                      factor):
    tiny, _ = tiny_settings({**job_settings(*overrides), "num_experts": experts})
    assert tiny["moe_expert_capacity_factor"] == factor


@needs_checkout
@pytest.mark.parametrize("overrides", [
    # Issue 22 saw MLA crash inside training on the SDPA spec, and upstream's local spec cannot build it without TE
    # either: the spec's core attention now takes MLA's head sizes.
    ["multi_latent_attention=true"],
    # DeepSeek's shape (a dense first layer, then MoE; MLA): each layer of the one --spec picks dense or MoE by its
    # number as Megatron's decoder block spec would; before, such a job went to the local spec, which cannot build
    # MLA, and was refused.
    ["multi_latent_attention=true", "num_experts=4", "moe_layer_freq=([0]*1+[1]*1)", "add_bias_linear=false",
     "num_layers=2"],
], ids=["mla", "mla-dense-and-moe-layers"])
def test_multi_latent_attention_builds_and_trains_one_step_on_the_sdpa_spec(rehearser, overrides):
    settings = job_settings(*overrides)
    assert settings["spec"] == ["launcher.inside.megatron_ext.sdpa_spec_fast", "layer_spec"]
    result = rehearser.rehearse(settings, {})
    assert result.ok, result.traceback
    assert 0 < result.facts["loss"] < 10


@needs_checkout
def test_any_spec_with_multi_token_prediction_fails_in_megatrons_builder(rehearser):
    """Why MTP sends a job to Megatron's local spec (no --spec): gpt_builder binds use_te only without one."""
    settings = dict(job_settings("position_embedding_type=rope"), mtp_num_layers=1,
                    spec=["megatron.core.models.gpt.gpt_layer_specs", "get_gpt_layer_local_spec"])
    reply = rehearse_raw(rehearser, settings)
    assert (reply["ok"], reply["stage"]) == (False, "model")
    assert "use_te" in reply["error"]


@needs_checkout
def test_megatrons_local_spec_cannot_build_multi_latent_attention(rehearser):
    """Why MLA with another gap (which sends a job to Megatron's local spec) is refused before launch."""
    settings = {k: v for k, v in job_settings("multi_latent_attention=true").items()
                if k not in ("spec", "create_attention_mask_in_dataloader")}
    reply = rehearse_raw(rehearser, settings)
    assert (reply["ok"], reply["stage"]) == (False, "model")
    assert "k_channels" in reply["error"]


@needs_checkout
def test_torch_layernorm_refusing_zero_centered_gamma_is_caught_at_model_build(rehearser):
    """Megatron's own local spec without apex (no --spec): WrappedTorchNorm asserts, as it did inside the
    compiled layer before the SDPA spec brought its own norm."""
    settings = {k: v for k, v in job_settings("layernorm_zero_centered_gamma=true").items()
                if k not in ("spec", "create_attention_mask_in_dataloader")}
    reply = rehearse_raw(rehearser, settings)
    assert (reply["ok"], reply["stage"]) == (False, "model")
    assert reply["error"] == ("AssertionError: zero_centered_gamma not supported by torch LayerNorm when "
                              "instantiating TransformerLayer")
    assert reply["where"].startswith("torch_norm.py:")


@needs_checkout
@pytest.mark.parametrize("overrides", [
    ["layernorm_zero_centered_gamma=true"],  # the SDPA spec's own norm, compiled layers on
    ["window_size=(16,0)"],  # Megatron's local spec (the SDPA one does not cover it)
    ["softmax_type=learnable"],
    ["num_experts=4", "moe_layer_freq=([0]*1+[1]*1)", "add_bias_linear=false", "num_layers=2"],  # now covered
    ["mtp_num_layers=1", "position_embedding_type=rope"],  # Megatron's local spec
], ids=["zero-centered-gamma", "window", "learnable-softmax", "dense-and-moe-layers", "multi-token-prediction"])
def test_what_the_launcher_resolves_for_a_fast_path_gap_trains_one_step(rehearser, overrides):
    result = rehearser.rehearse(job_settings(*overrides), {})
    assert result.ok, (result.error, result.traceback)


@pytest.mark.megatron
@pytest.mark.skipif(find_spec("megatron") is None or find_spec("torch") is None, reason="needs megatron-core")
def test_without_a_checkout_the_rehearsal_is_not_run_and_says_why(launch, tmp_path):
    code, out, err = launch("345m", "--check", "--rehearse", "--megatron-path", str(tmp_path))
    assert code == 2, err
    assert (f"rehearsal: not run: the rehearsal builds the model through pretrain_gpt.py's model provider, and "
            f"{tmp_path} is not a Megatron-LM checkout") in out


# a value ends at a space, comma, semicolon or parenthesis, except a YAML list ([a,b]), whose commas are its own
SET_HINT = re.compile(r"\bset ([a-z_][a-z0-9_.]*|env\.[A-Za-z_][A-Za-z0-9_]*)=(\[[^\]\s]*\]|[^\s,;)]+)")


@needs_checkout
def test_following_the_launchers_set_hints_on_nvidias_configurations_leads_to_a_job_that_trains(rehearser,
                                                                                                  tmp_path):
    """Every functional-test configuration moved to one GPU (scripts/functional_test_matrix.py) whose refusal hints
    `set X=V`: take the first such fix of each problem, up to three rounds; a job accepted that way must rehearse a
    step. Found: gpt3_15b_8t_release_gb200 with its TP-overlap hint taken crashed at its first step
    (cross_entropy_fusion_impl te without TE), now refused with its own hint."""
    sys.path.insert(0, str(REPO / "scripts"))
    import functional_test_matrix as matrix

    checkout = megatron_checkout()
    assert checkout is not None
    followed = []
    for config in matrix.configurations(checkout):
        try:
            path, settings = matrix.imported_preset(config, tmp_path)
        except UserError:
            continue  # not a configuration the import reads (the matrix lists these too)
        overrides, fixes = matrix.one_gpu_overrides(settings), []
        for _ in range(3):
            try:
                job = resolve(load_preset(str(path), [*overrides, *fixes]), 1, 1, kernels=matrix.NO_KERNELS,
                              megatron_path=checkout, run_dir=tmp_path / "runs" / path.stem)
            except UserError as err:
                new = [f"{m[1]}={m[2]}" for p in err.problems if (m := SET_HINT.search(p.hint))]
                new = [fix for fix in dict.fromkeys(new) if fix not in fixes]
                if not new:
                    break
                fixes += new
            else:
                if fixes:
                    followed.append((config.parent.name, fixes, job))
                break
    assert len(followed) >= 3  # the fp16 save, the two gb200 ones, the fp8 TP-overlap one (at the pin)
    for name, fixes, job in followed:  # one worker for all, as the matrix has (each job starts clean)
        result = rehearser.rehearse(job.megatron, dict(job.preset.launcher.env))
        assert result.ok, (name, fixes, result.error)


# MoE jobs whose aux loss Megatron tracks per layer (moe_utils.save_to_aux_losses_tracker), with 2 and 4 layers
MOE = ("num_experts=4", "moe_aux_loss_coeff=0.01", "add_bias_linear=false")
MOE_JOBS = {"moe-2-layers": (*MOE, "num_layers=2"),
            "moe-4-layers": (*MOE, "num_layers=4", "moe_layer_freq=([1]*4)"),
            "moe-4-layers-seq-aux-loss": (*MOE, "num_layers=4", "moe_layer_freq=([1]*4)",
                                          "moe_router_load_balancing_type=seq_aux_loss")}


@needs_checkout
def test_jobs_one_after_another_in_one_worker_get_the_verdicts_and_losses_of_fresh_workers():
    """One worker serves many jobs (the functional-test matrix's hundreds): each must run as in a process of its
    own. Found: Megatron's MoE aux-loss tracker is a module global whose tensors the first MoE job sizes by its
    layer count, and no destroy function forgets it, so a MoE job with more layers after one with fewer failed in
    its router (IndexError, moe_utils.py:1001) though alone it trains."""
    checkout = megatron_checkout()
    assert checkout is not None
    jobs = {name: job_settings(*overrides) for name, overrides in MOE_JOBS.items()}
    order = ["moe-2-layers", "moe-4-layers", "moe-4-layers-seq-aux-loss", "moe-2-layers"]
    with Rehearser(checkout) as worker:
        shared = [worker.rehearse(jobs[name], {}) for name in order]
    fresh = {}
    for name, job in jobs.items():
        with Rehearser(checkout) as worker:
            fresh[name] = worker.rehearse(job, {})
    assert all(result.ok for result in fresh.values()), {name: r.error for name, r in fresh.items()}
    assert [(r.ok, r.stage, r.error, r.facts.get("loss")) for r in shared] == \
        [(fresh[name].ok, fresh[name].stage, fresh[name].error, fresh[name].facts.get("loss")) for name in order]


def test_a_package_on_the_inherited_pythonpath_is_importable_in_the_rehearsal_as_in_the_launch(tmp_path,
                                                                                              monkeypatch):
    """The dry-run judges FP8 without Transformer Engine by whether torchao is importable where the launcher runs,
    and a launch gives its ranks the inherited PYTHONPATH after its own: the rehearsal's processes must find what
    the dry-run found, or a job the launch would train crashes in its rehearsal (and the other way round)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "package_on_the_users_path.py").write_text("VALUE = 7\n")
    checkout = tmp_path / "megatron-lm"
    monkeypatch.setenv("PYTHONPATH", str(site))
    env = rehearsal_env(checkout)
    paths = env["PYTHONPATH"].split(os.pathsep)
    assert paths[0] == str(checkout)  # the checkout first, as the launch's ranks have it
    assert paths.index(str(site)) > paths.index(str(REPO))
    found = subprocess.run([sys.executable, "-c", "import package_on_the_users_path as p; print(p.VALUE)"],
                           env=env, capture_output=True, text=True, cwd=tmp_path)
    assert found.stdout.strip() == "7", found.stderr
