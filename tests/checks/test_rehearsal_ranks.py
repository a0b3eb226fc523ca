"""The multi-rank CPU rehearsal (`launch PRESET --check --rehearse`): the job's layout shrunk to at most 16 CPU
processes, a tiny model that divides like the job's, torchrun bounded in time and killed as one process group."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.checks.megatron_verdict import target_env
from launcher.checks.rehearsal_ranks import (
    MAX_PROCESSES,
    RankLayout,
    _failure,
    load_layout,
    pointed_setting,
    rank_settings,
    rehearse_layout,
    run_ranks,
    shrunk_layout,
)
from launcher.megatron.pin import Kernels
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve
from tests.checks.test_rehearsal import megatron_checkout, needs_checkout


def job(preset: str, *overrides: str, nodes: int | None = None, gpus: int | None = None):
    """The preset resolved for the kernels it declares (175b: Transformer Engine and apex)."""
    loaded = load_preset(preset, list(overrides))
    kernels = Kernels(loaded.launcher.transformer_engine is True, loaded.launcher.apex is True, "preset")
    return resolve(loaded, nodes, gpus, kernels=kernels)


def test_the_175b_layout_shrinks_to_tp_2_pp_2_with_its_virtual_stages_and_dp_2():
    resolved = job("175b", "num_layers_per_virtual_pipeline_stage=3")
    layout, notes = shrunk_layout(resolved.layout, resolved.megatron)
    assert layout == RankLayout(tp=2, pp=2, vpp=2, cp=1, ep=1, etp=None, dp=2)
    assert (layout.world, notes) == (8, [])
    assert layout.describe() == "TP 2 · PP 2 (VPP 2) · CP 1 · EP 1 · DP 2"


def test_a_layout_whose_product_is_at_most_8_keeps_its_own_sizes():
    resolved = job("345m", "tensor_model_parallel_size=4", "pipeline_model_parallel_size=2", nodes=1, gpus=16)
    layout, _ = shrunk_layout(resolved.layout, resolved.megatron)
    assert (layout.tp, layout.pp, layout.dp, layout.world) == (4, 2, 2, 16)


@pytest.mark.parametrize("tp, etp", [(2, 4), (4, 2), (4, 1), (2, 2), (1, 4)])
def test_expert_tp_keeps_its_order_against_tp_when_shrunk(tp, etp):
    """Expert TP below, at or above TP builds other expert groups: a shrunk layout keeps which one the job has."""
    resolved = job("345m", f"tensor_model_parallel_size={tp}", "pipeline_model_parallel_size=2", "num_experts=8",
                   "expert_model_parallel_size=2", f"expert_tensor_parallel_size={etp}", "moe_router_topk=2",
                   "add_bias_linear=false", "num_attention_heads=16", "transformer_engine=true",
                   f"sequence_parallel={str(tp > 1).lower()}", nodes=4, gpus=8)
    layout, notes = shrunk_layout(resolved.layout, resolved.megatron)
    order = (etp > tp) - (etp < tp)
    assert ((layout.etp > layout.tp) - (layout.etp < layout.tp)) == order, (layout, notes)
    assert layout.world <= MAX_PROCESSES and (layout.tp * layout.dp) % (layout.ep * layout.etp) == 0
    assert ("expert TP" in layout.describe()) == (order != 0)


def test_expert_parallelism_gets_the_data_parallel_ranks_its_groups_need():
    resolved = job("345m", "num_experts=8", "expert_model_parallel_size=4", "moe_router_topk=2",
                   "add_bias_linear=false", nodes=1, gpus=8)
    layout, _ = shrunk_layout(resolved.layout, resolved.megatron)
    assert (layout.tp, layout.ep, layout.dp) == (1, 4, 4)  # EP 4 is carved out of TP·CP·DP
    settings, _ = rank_settings(resolved.megatron, layout, load_layout(layout, None))
    assert settings["num_experts"] == 8 and settings["num_experts"] % layout.ep == 0  # two experts per rank


def test_no_layout_needs_more_than_16_processes():
    resolved = job("345m", "num_experts=64", "expert_model_parallel_size=64", "moe_router_topk=2",
                   "add_bias_linear=false", "global_batch_size=64", nodes=8, gpus=8)
    layout, _ = shrunk_layout(resolved.layout, resolved.megatron)
    assert layout.world <= MAX_PROCESSES and layout.ep == 2


def test_the_checkpoint_loads_back_at_another_tp_pp():
    assert load_layout(RankLayout(tp=2, pp=2, vpp=2, dp=2), None) == RankLayout(tp=1, pp=2, vpp=2, dp=1)
    assert load_layout(RankLayout(), None) == RankLayout(tp=2)
    assert load_layout(RankLayout(pp=2), 1) == RankLayout(pp=1)  # one query group does not split across TP


@pytest.mark.parametrize("groups, tp, heads, want_groups", [(None, 2, 4, None), (8, 8, 16, 8), (1, 1, 4, 1)],
                         ids=["multi-head", "grouped-query", "multi-query"])
def test_the_tiny_model_divides_by_the_widest_tp_and_keeps_its_kind_of_attention(groups, tp, heads, want_groups):
    megatron = {**job("345m").megatron, "num_attention_heads": 32, "num_query_groups": groups}
    settings, _ = rank_settings(megatron, RankLayout(tp=tp), RankLayout(tp=1))
    assert settings["num_attention_heads"] == heads and settings.get("num_query_groups") == want_groups
    assert settings["num_attention_heads"] % tp == 0 and settings["hidden_size"] % heads == 0
    # the vocabulary pads alike at both layouts: the loaded weights are the saved ones, no padding rows dropped
    assert settings["vocab_size"] % (128 * tp) == 0


@pytest.mark.parametrize("job_tp, groups, tp, want_groups", [(8, 2, 8, 2), (8, 4, 8, 4), (4, 2, 4, 2), (8, 2, 2, 1)])
def test_fewer_query_groups_than_tp_ranks_stay_fewer(job_tp, groups, tp, want_groups):
    """attention.py takes its own branch where num_query_groups < TP (each rank gathers its group's keys and
    values): the tiny model keeps that relation, or says it could not."""
    megatron = {**job("345m").megatron, "num_attention_heads": 32, "num_query_groups": groups,
                "tensor_model_parallel_size": job_tp}
    settings, notes = rank_settings(megatron, RankLayout(tp=tp), RankLayout(tp=1))
    assert settings["num_query_groups"] == want_groups and settings["num_query_groups"] < tp
    assert tp % settings["num_query_groups"] == 0 and settings["num_attention_heads"] % tp == 0
    assert settings["num_attention_heads"] > settings["num_query_groups"]
    assert any("rehearsed as multi-query" in note for note in notes) == (want_groups == 1)


def test_the_175b_settings_keep_sequence_parallel_and_the_distributed_optimizer():
    resolved = job("175b", "num_layers_per_virtual_pipeline_stage=3")
    layout, _ = shrunk_layout(resolved.layout, resolved.megatron)
    settings, notes = rank_settings(resolved.megatron, layout, load_layout(layout, None))
    assert settings["sequence_parallel"] is True and settings["use_distributed_optimizer"] is True
    assert (settings["num_layers"], settings["num_layers_per_virtual_pipeline_stage"]) == (4, 1)
    assert settings["global_batch_size"] == 4  # as many microbatches on each replica as pipeline stages
    assert "load" not in settings and not any("world of one" in note for note in notes)


FAKE_RANKS = """
import json, os, sys, time
out = os.environ["MEGATRON_LAUNCH_REHEARSE_OUT"]
rank = int(sys.argv[1])
if rank == 1:
    json.dump({"rank": 1, "ok": False, "stage": "step", "time": time.time(), "where": "schedules.py:1",
               "error": "AssertionError: sequence_parallel needs the sequence divisible by TP"},
              open(os.path.join(out, "rank-1.json"), "w"))
    sys.exit(1)
time.sleep(0.5)
json.dump({"rank": 0, "ok": False, "stage": "step", "time": time.time(), "error": "RuntimeError: peer gone"},
          open(os.path.join(out, "rank-0.json"), "w"))
"""


def test_the_first_failing_rank_is_reported_with_the_setting_it_names(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(FAKE_RANKS)
    argv = ["sh", "-c", f"{sys.executable} {script} 0 & {sys.executable} {script} 1; wait"]
    (tmp_path / "work").mkdir()
    run = run_ranks(argv, dict(os.environ), tmp_path / "work", limit_s=60)
    failure = _failure(run, {"sequence_parallel": True, "seq_length": 64}, RankLayout(tp=2), 60, "train")
    assert (failure["rank"], failure["stage"]) == (1, "step")
    assert failure["setting"] == "sequence_parallel=True"
    assert not (tmp_path / "work" / "answers").exists()


def test_at_the_time_limit_every_process_of_the_group_is_killed(tmp_path):
    pid_file = tmp_path / "child.pid"
    # a "torchrun" whose "rank" runs in a session of its own, as torchrun starts them (a process-group kill misses it)
    rank = f"import subprocess; p = subprocess.Popen(['sleep', '300'], start_new_session=True); " \
           f"open({str(pid_file)!r}, 'w').write(str(p.pid)); p.wait()"
    argv = [sys.executable, "-c", rank]
    (tmp_path / "work").mkdir()
    start = time.monotonic()
    run = run_ranks(argv, dict(os.environ), tmp_path / "work", limit_s=1)
    assert run.timed_out and time.monotonic() - start < 30
    child = int(pid_file.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
    failure = _failure(run, {}, RankLayout(tp=2, dp=2), 1, "train")
    assert "did not finish within 1 s (all killed)" in failure["error"]


def test_a_failure_without_a_named_setting_points_to_what_its_stage_depends_on():
    answer = {"error": "CheckpointingException: cannot write, already there", "traceback": "File x.py"}
    assert pointed_setting(answer, {"ckpt_format": "torch_dist", "lr": 1.0}, "save") == "ckpt_format"
    flagged = {"error": "AssertionError: --tensor-model-parallel-size must divide --num-attention-heads"}
    assert pointed_setting(flagged, {"tensor_model_parallel_size": 2, "num_attention_heads": 4}, "args") \
        == "tensor_model_parallel_size=2"
    assert json.dumps(replace(RankLayout(tp=2), dp=2).as_dict())


@needs_checkout
@pytest.mark.parametrize("preset, overrides, layout, loaded", [
    ("345m", [], "TP 1 · PP 1 · CP 1 · EP 1 · DP 1", "TP 2 · PP 1"),
    # 175b (TP 8 · PP 16 · DP 12) with virtual stages: 8 processes, sequence parallel, the distributed optimizer
    ("175b", ["num_layers_per_virtual_pipeline_stage=3"], "TP 2 · PP 2 (VPP 2) · CP 1 · EP 1 · DP 2",
     "TP 1 · PP 2 (VPP 2)"),
], ids=["345m", "175b"])
def test_the_presets_rehearse_their_own_layouts_and_reload_at_another(preset, overrides, layout, loaded,
                                                                      monkeypatch):
    # a temporary directory of this test's own, so that another test's rehearsal beside it leaves none in it (short:
    # the ranks' multiprocessing sockets live under it)
    own = tempfile.mkdtemp(prefix="rh-")
    monkeypatch.setattr(tempfile, "tempdir", own)
    checkout = megatron_checkout()
    assert checkout is not None
    loaded_preset = load_preset(preset, list(overrides))
    kernels = Kernels(loaded_preset.launcher.transformer_engine is True, loaded_preset.launcher.apex is True, "preset")
    resolved = resolve(loaded_preset, kernels=kernels, megatron_path=checkout)
    before = set(Path(tempfile.gettempdir()).glob("megatron-launch-rehearsal-*"))
    result = rehearse_layout(resolved, target_env(resolved))
    assert not set(Path(tempfile.gettempdir()).glob("megatron-launch-rehearsal-*")) - before  # nothing left
    os.rmdir(own)
    assert result.ok, "\n".join(result.render())
    first = result.render()[0]
    assert first.startswith(f"rehearsed: {layout} on {result.layout.world} CPU process")
    assert "2 steps (loss " in first and f"saved torch_dist and loaded at {loaded}" in first
    assert result.facts["load"]["iteration"] == 2


STOPPED_LAUNCHER = """
import os, sys
from pathlib import Path
from launcher.checks.rehearsal_ranks import run_ranks
from launcher.interrupts import signals_interrupt
work = Path(sys.argv[1])
with signals_interrupt():
    try:
        rank = ("import subprocess; p = subprocess.Popen(['sleep', '300'], start_new_session=True); "
                f"open('{work.parent}/child.pid', 'w').write(str(p.pid)); p.wait()")
        run_ranks([sys.executable, "-c", rank], dict(os.environ), work, limit_s=300)
    except KeyboardInterrupt:
        sys.exit(143)
"""


def test_a_launcher_stopped_by_sigterm_kills_its_rank_processes(tmp_path):
    import signal
    import subprocess

    (tmp_path / "work").mkdir()
    proc = subprocess.Popen([sys.executable, "-c", STOPPED_LAUNCHER, str(tmp_path / "work")],
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    pid_file = tmp_path / "child.pid"
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    child = int(pid_file.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


def test_a_failure_in_a_file_of_one_feature_points_to_its_setting():
    """Megatron's distributed optimizer without apex/TE asserts when a fresh one loads a checkpoint."""
    answer = {"error": "AssertionError: assert len(steps) == 1", "where": "distrib_optimizer.py:793"}
    assert pointed_setting(answer, {"use_distributed_optimizer": True, "lr": 1e-4}, "load") \
        == "use_distributed_optimizer=True"


def test_context_parallelism_is_rehearsed_at_cp_1_and_says_why():
    resolved = job("345m", "context_parallel_size=2", "cp_comm_type=p2p", "transformer_engine=true", nodes=1, gpus=2)
    layout, notes = shrunk_layout(resolved.layout, resolved.megatron)
    settings, _ = rank_settings(resolved.megatron, layout, load_layout(layout, None))
    assert layout.cp == 1 and "cp_comm_type" not in settings and settings["context_parallel_size"] == 1
    assert notes[0].startswith("CP 2: context parallelism's attention is Transformer Engine's")


def test_a_switch_only_transformer_engine_implements_is_off_here_and_said():
    """moe/gpt3_mcore_te_tp2_pp2_ep4_etp1_memory_speed crashed here with moe_permute_fusion (TE >= 2.1 only)."""
    from launcher.checks.rehearsal_ranks import without_te_switches

    settings, notes = without_te_switches({"num_experts": 4, "moe_permute_fusion": True, "lr": 1e-4})
    assert settings["moe_permute_fusion"] is False and settings["lr"] == 1e-4
    assert notes and notes[0].startswith("moe_permute_fusion: needs Transformer Engine")


def test_a_value_only_transformer_engine_implements_becomes_megatrons_own_here_and_is_said():
    """gpt/gpt3_15b_8t_release_gb200 (cross_entropy_fusion_impl te) failed here at its first step: 'Trying to use a
    TE block when it's not present' (language_module.py:179)."""
    from launcher.checks.rehearsal_ranks import without_te_switches

    settings, notes = without_te_switches({"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"})
    assert settings["cross_entropy_fusion_impl"] == "native"
    assert notes == ["cross_entropy_fusion_impl te: Transformer Engine's (the target's), Megatron's native here "
                     "(language_module.py:179)"]
    unfused, notes = without_te_switches({"cross_entropy_loss_fusion": False, "cross_entropy_fusion_impl": "te"})
    assert unfused["cross_entropy_fusion_impl"] == "te" and notes == []  # not read without the fusion


def test_fp8_of_a_transformer_engine_target_is_rehearsed_without_it_and_said():
    """moe/deepseek_proxy_fsdp_ep2_fsdp2 (fp8 with MoE) failed here at model build: 'Only transformer-engine>=1.7.0
    supports MoE FP8 training' (transformer_config.py:2060)."""
    from launcher.checks.rehearsal_ranks import without_te_switches

    settings, notes = without_te_switches({"num_experts": 8, "fp8": "e4m3", "fp8_recipe": "blockwise",
                                           "fp8_param_gather": True, "bf16": True})
    assert "fp8" not in settings and "fp8_recipe" not in settings and "fp8_param_gather" not in settings
    assert settings["bf16"] is True
    assert notes == ["fp8 e4m3: Transformer Engine's (the target's); rehearsed without it here (fp8, fp8_param_gather, "
                     "fp8_recipe at Megatron's defaults)"]


def test_sequence_parallelism_off_at_tp_1_is_on_where_the_checkpoint_loads_at_tp_2():
    """moe/gpt3_mcore_te_tp1_pp2_resume_torch_dist_reshard_2x1x4_te_8experts2parallel_dist_optimizer (TP 1, SP set)
    failed loading at TP 2: 'sequence parallel not supported by torch LayerNorm' (the stand-in was not asked for)."""
    from launcher.checks.rehearsal_ranks import sequence_parallel_somewhere

    layout = RankLayout(tp=1, pp=2, ep=2, dp=2)
    load = load_layout(layout, None)
    assert load.tp == 2
    assert sequence_parallel_somewhere({"sequence_parallel": True}, layout, load)
    assert not sequence_parallel_somewhere({"sequence_parallel": True}, layout, layout)
    assert not sequence_parallel_somewhere({}, layout, load)


@pytest.mark.parametrize("ep, experts, topk, groups, group_topk", [(2, 64, 8, 8, 4), (4, 256, 8, 8, 4),
                                                                   (1, 16, 6, 4, 2), (8, 64, 2, 8, 2)])
def test_group_limited_routing_at_the_shrunk_expert_count_can_serve_its_topk(ep, experts, topk, groups, group_topk):
    """moe/deepseek_proxy_fsdp_ep2_fsdp2 at EP 2 failed at its first step: 'selected index k out of range'
    (moe_utils.py:621): its groups could not serve topk / group_topk experts each."""
    megatron = {**job("345m").megatron, "num_experts": experts, "expert_model_parallel_size": ep,
                "moe_router_topk": topk, "moe_router_num_groups": groups, "moe_router_group_topk": group_topk}
    layout = RankLayout(ep=ep, dp=ep)
    settings, _ = rank_settings(megatron, layout, layout)
    n, k = settings["num_experts"], settings["moe_router_topk"]
    g, gk = settings["moe_router_num_groups"], settings["moe_router_group_topk"]
    assert n % ep == 0 and n % g == 0 and gk <= g and k % gk == 0 and k // gk <= n // g and k <= n


def test_fp16_weights_loaded_at_another_tp_compare_at_fp16s_precision():
    """gpt/gpt3_mcore_tp1_pp2_fp16 saved at TP 1 and loaded at TP 2: parameter norm 18.84367 vs 18.84672 (Megatron's
    norm of fp16 parameters rounds each tensor's to fp16 here); bf16 and fp32 norms are of fp32 copies."""
    from launcher.checks.rehearsal_ranks import norm_tolerance

    assert abs(18.843666595223795 - 18.846724798875037) <= norm_tolerance({"fp16": True}) * 18.846724798875037
    assert abs(18.843666595223795 - 18.846724798875037) > norm_tolerance({"bf16": True}) * 18.846724798875037


def test_steps_fp16s_dynamic_loss_scale_skipped_are_said_not_failed():
    """gpt/gpt3_mcore_tp1_pp2_fp16 failed here at its first step: fp16's loss scale starts at 2^32 and skips the
    first steps on the GPU too (rehearse_rank.py accepts them under fp16 with a dynamic scale and says so)."""
    from launcher.checks.rehearsal_ranks import LayoutRehearsal

    layout = RankLayout(pp=2, dp=2)
    result = LayoutRehearsal(True, layout, load_layout(layout, None), seconds=90.0,
                             facts={"loss": [5.558, 5.573], "skipped_steps": [1, 2], "format": "torch_dist"})
    assert "2 steps (loss 5.558 → 5.573; step 1, 2 skipped by fp16's dynamic loss scale, as on the GPU)" in \
        result.render()[0]


def test_a_per_layer_pattern_keeps_its_length_as_the_number_of_layers_at_any_pipeline_size():
    """moe/gpt3_mcore_te_tp2_pp2_ep4_etp1_memory_speed: 16 layers named by moe_layer_freq, at PP 2."""
    megatron = {**job("345m").megatron, "num_layers": 16, "num_experts": 8, "moe_router_topk": 2,
                "moe_layer_freq": "([0]*1+[1]*15)", "pipeline_model_parallel_size": 2}
    settings, _ = rank_settings(megatron, RankLayout(pp=2), RankLayout(pp=2, tp=2))
    assert settings["num_layers"] == 16


def test_a_model_no_layer_spec_without_transformer_engine_builds_is_not_run_here_and_says_why():
    """moe/gpt3_mcore_te_tp2_pp2_ep4_etp1_memory_speed (a TE target: multi-latent attention with multi-token
    prediction) failed at model build here, 'DotProductAttention.__init__() got an unexpected keyword argument
    k_channels', which its target does not: this machine cannot build it, as the launcher says of a target without
    TE (kernels.fast_path_problems)."""
    from launcher.megatron.pin import detect_kernels

    if detect_kernels()[0]:
        pytest.skip("Transformer Engine is installed here: the job builds")
    resolved = job("345m", "transformer_engine=true", "multi_latent_attention=true", "mtp_num_layers=1",
                   "position_embedding_type=rope",
                   "pipeline_model_parallel_size=2", nodes=1, gpus=2)
    result = rehearse_layout(resolved, {})
    assert (result.ok, result.stage) == (False, "setup")
    assert result.render()[0].startswith("rehearsal: not run: this machine lacks what the job needs: multi-latent "
                                         "attention (multi_latent_attention) needs Transformer Engine")
    assert result.render()[0].endswith("(this machine has no Transformer Engine; the target has)")


def test_a_switch_megatron_allows_only_with_transformer_engine_is_off_here_and_said():
    """moe/gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_no_mtp_no_a2a_ovlp_fine_grained_offloading failed at Megatron's
    arguments here: 'Fine-grained activation offloading is only supported with transformer_engine implementation'
    (arguments.py:1716)."""
    from launcher.checks.rehearsal_ranks import without_te_switches

    settings, notes = without_te_switches({"fine_grained_activation_offloading": True, "lr": 1e-4})
    assert settings["fine_grained_activation_offloading"] is False
    assert notes == ["fine_grained_activation_offloading: Transformer Engine's (the target's), off here "
                     "(arguments.py:1716)"]


def test_recomputing_the_norms_of_a_te_target_is_off_here_and_said():
    """…_no_mtp_no_a2a_ovlp_fine_grained_offloading (recompute_modules layernorm mla_up_proj mlp moe_act) failed at its
    first step here: NameError FP8GlobalStateManager (random.py:667), TE's FP8 state read by the norms' checkpoint."""
    from launcher.checks.rehearsal_ranks import without_te_switches

    settings, notes = without_te_switches({"recompute_granularity": "selective",
                                           "recompute_modules": ["layernorm", "mla_up_proj", "moe_act"]})
    assert settings["recompute_modules"] == ["mla_up_proj", "moe_act"]
    assert notes == ["recompute_modules layernorm: Megatron's checkpoint of the norms needs Transformer Engine (the "
                     "target's) at the pin (tensor_parallel/random.py:714); not recomputed here"]
    alone, _ = without_te_switches({"recompute_granularity": "selective", "recompute_modules": ["layernorm"]})
    assert "recompute_granularity" not in alone and alone.get("recompute_modules") is None


def test_every_setting_the_rehearsal_drops_or_keeps_apart_is_a_setting_of_the_pin():
    """A name Megatron does not know is never in the job, so a table naming it drops nothing (seen: `use_nccl_ub`
    for Megatron's `nccl_ub`, left on beside Megatron FSDP switched off, whose manual registration then asserted)."""
    from launcher.checks import rehearsal, rehearsal_ranks
    from launcher.megatron import args as megatron_args

    named = {*rehearsal.DROPPED, *rehearsal.CPU_ONLY_NOT, *rehearsal.DEPENDS_ON, *rehearsal.SHRUNK_IF_GIVEN,
             *rehearsal.PARALLEL, *rehearsal_ranks.SAVE_DROPPED, *rehearsal_ranks.TE_ONLY_SWITCHES,
             *rehearsal_ranks.TE_ONLY_VALUES}
    named |= {dest for dependents in rehearsal.DEPENDS_ON.values() for dest in dependents}
    named |= {dest for _, knobs in rehearsal.PARALLEL.values() for dest in knobs}
    assert sorted(named - set(megatron_args.catalog())) == []


def test_megatron_fsdp_off_here_takes_its_userbuffers_and_manual_registration_with_it():
    """nvidia_megatron_fsdp_llama3_8b_fp8_uv_run (--use-megatron-fsdp --use-nccl-ub --fsdp-manual-registration)
    failed here at Megatron's arguments: 'FSDP manual registration is only supported with Megatron FSDP'
    (arguments.py:1158)."""
    from launcher.checks.rehearsal import tiny_settings

    settings, notes = tiny_settings({"use_megatron_fsdp": True, "nccl_ub": True, "fsdp_manual_registration": True,
                                     "fsdp_double_buffer": True, "ckpt_format": "fsdp_dtensor",
                                     "use_distributed_optimizer": True, "num_layers": 4})
    assert settings["use_megatron_fsdp"] is False
    assert not {"nccl_ub", "fsdp_manual_registration", "fsdp_double_buffer", "ckpt_format"} & set(settings)
    assert settings["use_distributed_optimizer"] is True and "Megatron FSDP (CUDA only)" in notes


def test_a_transformer_engine_switch_with_an_exclusion_is_off_here_with_what_only_it_reads():
    """hygon_train_deepseekv3_671B (--use-precision-aware-optimizer, a TE target) failed here at model build:
    '--use-precision-aware-optimizer requires FusedAdam from TransformerEngine' (optimizer_config.py:453); its
    requirement row holds unless optimizer_cpu_offload, and rows with such an exclusion were passed over."""
    from launcher.checks.rehearsal_ranks import without_te_switches

    job = {"use_distributed_optimizer": True, "use_precision_aware_optimizer": True, "main_grads_dtype": "bf16",
           "exp_avg_dtype": "bf16", "lr": 1e-4}
    settings, notes = without_te_switches(job)
    assert settings["use_precision_aware_optimizer"] is False and settings["lr"] == 1e-4
    assert "main_grads_dtype" not in settings and "exp_avg_dtype" not in settings  # Megatron asserts fp32 without it
    assert notes[0].startswith("use_precision_aware_optimizer: needs Transformer Engine")
    offloaded, _ = without_te_switches({**job, "optimizer_cpu_offload": True})  # HybridDeviceOptimizer's, not TE's
    assert offloaded["use_precision_aware_optimizer"] is True
    delayed, notes = without_te_switches({"delay_wgrad_compute": True, "gradient_accumulation_fusion": False})
    assert delayed["delay_wgrad_compute"] is False and notes[0].startswith("delay_wgrad_compute: needs")


def test_what_megatron_allows_only_at_tp_above_1_is_left_out_of_the_load_at_tp_1_and_said():
    """abci_10b_interleaved (TP 2, --distribute-checkpointed-activations) trained at TP 2 and failed loading at TP 1:
    'can distribute recomputed activations only across tensor model parallel groups' (arguments.py:1356)."""
    from pathlib import Path

    from launcher.checks.rehearsal_ranks import _load_settings

    layout = RankLayout(tp=2, pp=2, vpp=2)
    load = load_layout(layout, None)
    assert load.tp == 1
    job = {"distribute_saved_activations": True, "recompute_granularity": "full", "recompute_method": "uniform",
           "global_batch_size": 4, "num_layers": 4}
    notes: list[str] = []
    out = _load_settings(job, job, layout, load, Path("/ckpt"), notes)
    assert "distribute_saved_activations" not in out and out["recompute_granularity"] == "full"
    assert notes == ["distribute_saved_activations at TP 1 · PP 2 (VPP 2): Megatron allows it only at TP > 1; the "
                     "load there runs without it"]
    kept = _load_settings(job, job, layout, replace(layout, pp=1, vpp=None), Path("/ckpt"), [])
    assert kept["distribute_saved_activations"] is True  # TP 2 there


def test_the_one_process_rehearsal_leaves_out_what_megatron_allows_only_at_tp_above_1():
    from launcher.checks.rehearsal import tiny_settings

    settings, _ = tiny_settings({"tensor_model_parallel_size": 2, "distribute_saved_activations": True,
                                 "recompute_granularity": "full", "recompute_method": "uniform", "num_layers": 4})
    assert settings["tensor_model_parallel_size"] == 1 and "distribute_saved_activations" not in settings


@needs_checkout
def test_experts_below_tp_without_expert_parallelism_reload_at_tp_2_with_the_same_norm(monkeypatch):
    """A MoE job at expert TP 1 and EP 1 (a one-GPU move of a job that sets its expert TP), reloaded at TP 2: each TP
    rank holds every expert, and Megatron's parameter norm counted them once per TP rank at EP 1, so the correct
    load read as other weights (habana_mixtral_8x7b_hl_defaults: 19.985 vs 19.233)."""
    own = tempfile.mkdtemp(prefix="rh-")
    monkeypatch.setattr(tempfile, "tempdir", own)
    checkout = megatron_checkout()
    assert checkout is not None
    loaded_preset = load_preset("345m", ["num_experts=4", "moe_router_topk=2", "add_bias_linear=false",
                                         "expert_tensor_parallel_size=1"])
    resolved = resolve(loaded_preset, 1, 1, kernels=Kernels(False, False, "preset"), megatron_path=checkout)
    result = rehearse_layout(resolved, target_env(resolved))
    os.rmdir(own)
    assert result.ok, "\n".join(result.render())
    assert "loaded at TP 2 · PP 1" in result.render()[0]
