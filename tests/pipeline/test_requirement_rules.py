"""The rules the requirements table adds for crashes outside validate_args (model build, the first step,
process-group set-up), and the rules that now judge Megatron's effective settings. Each names the exact message."""

from __future__ import annotations

import pytest

from launcher.errors import UserError
from launcher.megatron.pin import Kernels
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve
from tests.pipeline.refusals import refused


def test_tp_comm_overlap_is_refused_after_megatron_turns_sequence_parallel_off_at_tp_1():
    text = refused(["tp_comm_overlap=true", "sequence_parallel=true"], te=True, apex=True)
    assert ("error: tp_comm_overlap needs sequence_parallel, which Megatron turns off at TP 1 (arguments.py:1384) "
            "before it asserts that TP overlap needs it\n"
            "  hint: set tp_comm_overlap=false (there is no TP communication to overlap at TP 1)") in text


def test_tp_comm_overlap_needs_transformer_engine():
    text = refused(["tp_comm_overlap=true", "sequence_parallel=true", "tensor_model_parallel_size=2"], 1, 2,
                   apex=True)
    assert ("error: tp_comm_overlap needs Transformer Engine, and the target lacks it "
            "(megatron/training/initialize.py:179)\n  hint: set tp_comm_overlap=false or install Transformer Engine"
            ) in text


def test_delay_wgrad_compute_without_te_names_the_te_versions_megatron_asks_for():
    text = refused(["delay_wgrad_compute=true", "gradient_accumulation_fusion=false"])
    assert ("error: delay_wgrad_compute needs Transformer Engine >= 2.3.0, and the target lacks it "
            "(megatron/training/arguments.py:1685)\n"
            "  hint: set delay_wgrad_compute=false or install Transformer Engine") in text
    assert ("error: delay_wgrad_compute with gradient_accumulation_fusion false needs Transformer Engine >= 2.7.0, "
            "and the target lacks it (megatron/training/arguments.py:1711)") in text


def test_delay_wgrad_compute_needs_moe_expert_parallel_overlap_even_with_te():
    text = refused(["delay_wgrad_compute=true"], te=True, apex=True)
    assert ("error: delay_wgrad_compute needs overlap_moe_expert_parallel_comm true, but "
            "overlap_moe_expert_parallel_comm is false (megatron/core/transformer/transformer_config.py:2457)") in text
    assert "Transformer Engine >=" not in text  # the declared TE (2.14.0) is new enough


MOE = ["moe_permute_fusion=true", "num_experts=4", "add_bias_linear=false"]


def test_moe_permute_fusion_needs_te_2_1():
    assert ("error: moe_permute_fusion needs Transformer Engine >= 2.1.0, and the target lacks it "
            "(megatron/core/transformer/transformer_config.py:2397)\n"
            "  hint: set moe_permute_fusion=false or install Transformer Engine") in refused(MOE)
    old = refused(MOE, te=True, apex=True, te_version="2.0.0")
    assert ("error: moe_permute_fusion needs Transformer Engine >= 2.1.0, and the target has 2.0.0 "
            "(megatron/core/transformer/transformer_config.py:2397)\n  hint: set moe_permute_fusion=false or install "
            "Transformer Engine; or use Transformer Engine >= 2.1.0") in old
    resolve(load_preset("345m", MOE), kernels=Kernels(True, True, "preset", "2.1.0"))  # new enough: accepted


def test_p2p_warmup_flush_without_the_interleaved_schedule():
    assert ("error: overlap_p2p_comm_warmup_flush needs overlap_p2p_comm true, but overlap_p2p_comm is false "
            "(megatron/core/model_parallel_config.py:459)") in refused(["overlap_p2p_comm_warmup_flush=true"])


def test_distributed_optimizer_instances_must_divide_dp():
    text = refused(["num_distributed_optimizer_instances=3", "use_distributed_optimizer=true"], 1, 4)
    assert ("error: num_distributed_optimizer_instances 3 does not divide DP·CP = 4·1 = 4 "
            "(megatron/core/parallel_state.py:830)\n  hint: use num_distributed_optimizer_instances in [1, 2, 4]"
            ) in text
    resolve(load_preset("345m", ["num_distributed_optimizer_instances=2", "use_distributed_optimizer=true"]), 1, 4)


def test_torch_fsdp2_is_refused_for_its_finish_grad_sync_type_error():
    text = refused(["use_torch_fsdp2=true", "untie_embeddings_and_output_weights=true"], 1, 2)
    assert ("error: use_torch_fsdp2 cannot train at this Megatron pin "
            "(megatron/core/distributed/finalize_model_grads.py:498): finalize_model_grads calls "
            "finish_grad_sync(force_all_reduce=…) on every model chunk, but torch-FSDP2's "
            "TorchFullyShardedDataParallel inherits _BaseDataParallel.finish_grad_sync(self), which takes no "
            "arguments: a TypeError at the first training step\n"
            "  hint: use use_megatron_fsdp (with ckpt_format fsdp_dtensor) or plain data parallelism") in text


def test_sequence_parallel_at_tp_1_is_a_warning_from_the_effective_settings():
    job = resolve(load_preset("345m", ["sequence_parallel=true"]))
    assert "sequence_parallel is ignored with TP 1 (Megatron turns it off)" in job.warnings
    assert job.layout.sequence_parallel is False


# -- what NVIDIA's configurations met on one H200 (docs/functional-test-matrix.md) ---------------------------------

def test_fim_data_with_the_mock_dataset_is_refused_before_launch():
    assert ("error: fim_data needs a real dataset: Megatron's mock dataset has no fill-in-the-middle variant "
            "(arguments.py:1523)\n  hint: set data_path to a prepared dataset (launch prepare-data), or drop "
            "fim_data") in refused(["fim_data=true"])


def test_te_cross_entropy_fusion_without_te_is_refused_before_its_first_step():
    te_ce = ["cross_entropy_loss_fusion=true", "cross_entropy_fusion_impl=te"]
    assert ("error: cross_entropy_fusion_impl te needs Transformer Engine's fused cross entropy, which the target "
            "lacks: Megatron raises 'Trying to use a TE block when it's not present' at the first step\n"
            "  hint: set cross_entropy_fusion_impl=native") in refused(te_ce)
    resolve(load_preset("345m", [*te_ce, "cross_entropy_fusion_impl=native"]), kernels=Kernels(False, False, "preset"))
    resolve(load_preset("345m", te_ce), kernels=Kernels(True, True, "preset", "2.14.0"))


@pytest.mark.parametrize("modules", [["layernorm"], ["core_attn", "layernorm", "mlp"]])
def test_recomputing_the_norms_without_te_is_refused_before_its_first_step(modules):
    # seen rehearsing moe/gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_no_mtp_no_a2a_ovlp_fine_grained_offloading without TE:
    # NameError FP8GlobalStateManager (random.py:667): CheckpointWithoutOutput() takes its FP8 branch at the pin
    sets = ["recompute_granularity=selective", f"recompute_modules=[{','.join(modules)}]"]
    rest = ",".join(m for m in modules if m != "layernorm")
    assert ("error: recompute_modules layernorm needs Transformer Engine at the pin: Megatron's output-discarding "
            "checkpoint of the norms reads TE's FP8 state even without fp8 (tensor_parallel/random.py:714)") in \
        refused(sets)
    if rest:
        assert f"  hint: drop layernorm from recompute_modules (--set recompute_modules=[{rest}])" in refused(sets)
    else:  # an empty list is refused on its own: the recompute goes with its only module
        assert ("  hint: drop the selective recompute of layernorm: --set recompute_granularity=null --set "
                "recompute_modules=null, or run") in refused(sets)
    resolve(load_preset("345m", sets), kernels=Kernels(True, True, "preset", "2.14.0"))
    full = ["recompute_granularity=full", "recompute_method=uniform", "recompute_num_layers=1"]
    resolve(load_preset("345m", full), kernels=Kernels(False, False, "preset"))


def test_fp8_param_gather_without_fp8_is_refused_as_megatrons_config_would():
    # seen on gpt-oss's example moved off TE with the MoE-fp8 hint followed: TransformerConfig's ValueError
    assert ("error: fp8_param_gather needs fp8 (fp8_format)\n  hint: drop it and what only fp8 reads: "
            "--set fp8_param_gather=false, or set fp8 (--fp8-format)") in refused(["fp8_param_gather=true",
                                                                                 "use_distributed_optimizer=true"])
    hint = refused(["num_experts=4", "add_bias_linear=false", "fp8_format=e4m3", "fp8_param_gather=true",
                    "use_distributed_optimizer=true"])
    assert "hint: drop fp8 and what only it reads: --set fp8=null --set fp8_param_gather=false, or run" in hint


def warnings_of(overrides: list[str]) -> tuple[str, ...]:
    return resolve(load_preset("345m", overrides), kernels=Kernels(False, False, "preset")).warnings


def test_a_short_fp16_run_is_refused_or_warned_that_the_loss_scale_warm_up_skips_its_steps():
    # seen: 4 fp16 iterations, all skipped (loss scale 2^32 → 2^28), no loss logged; then, on one H200, fp16 scripts
    # of the import corpus moved to 4 iterations, accepted by the dry-run, updated nothing
    fp16 = ["fp16=true", "bf16=false"]
    assert ("error: fp16's loss scale warm-up (initial_loss_scale 2^32) skips about the first 20 iterations (each "
            "overflow halves the scale), so train_iters 4 ends without one weight update and no loss is logged\n"
            "  hint: set initial_loss_scale=4096 (gradients of order 1-10 do not overflow there), or train longer "
            "than 20 iterations, or use bf16") in refused([*fp16, "train_iters=4"])
    assert ("fp16 starts its dynamic loss scale at initial_loss_scale 2^32 and halves it on each step whose "
            "gradients overflow, skipping that step: the first ~20 iterations usually update nothing, so "
            "train_iters 16 may end without one weight update (set initial_loss_scale, e.g. 4096, or train longer)"
            ) in warnings_of([*fp16, "train_iters=16"])
    assert not any("loss scale" in w for w in warnings_of([*fp16, "train_iters=4", "initial_loss_scale=4096"]))
    assert not any("loss scale" in w for w in warnings_of([*fp16, "train_iters=100"]))
    assert not any("loss scale" in w for w in warnings_of(["train_iters=4"]))  # bf16 has no loss scale


def test_fp16_with_the_distributed_optimizer_is_refused_when_its_first_save_falls_in_the_warm_up(tmp_path):
    # seen on one H200 (docs/functional-test-matrix.md): 4 fp16 iterations all skipped, then the first save of the
    # distributed optimizer without TE/apex asserted (no Adam step count to save)
    def judged(overrides: list[str], apex: bool = False) -> str:
        try:
            resolve(load_preset("345m", overrides), kernels=Kernels(False, apex, "preset"), run_dir=tmp_path / "run")
        except UserError as err:
            return err.render()
        return "accepted"

    fp16 = ["fp16=true", "bf16=false", "use_distributed_optimizer=true", "train_iters=4"]
    assert ("error: fp16's loss scale warm-up (initial_loss_scale 2^32) skips about the first 20 iterations, and the "
            "first checkpoint comes at iteration 4: the distributed optimizer without Transformer Engine or apex "
            "cannot save before its first step (distrib_optimizer.py:793 asserts one Adam step count among no "
            "states)\n  hint: set initial_loss_scale=4096, or save_interval above 20, or use bf16") in judged(fp16)
    assert "first checkpoint comes at iteration 10" in judged([*fp16[:3], "train_iters=100", "save_interval=10"])
    for fine in (["initial_loss_scale=4096"], ["train_iters=100"], ["train_iters=100", "save_interval=30"]):
        assert judged([*fp16, *fine]) == "accepted", fine
    # no save inside the warm-up to refuse (4 iterations are still refused: none of them updates the weights)
    assert "first checkpoint" not in judged([*fp16, "use_distributed_optimizer=false"])
    assert "first checkpoint" not in judged(fp16, apex=True)  # apex's Adam keeps its own step count
    assert judged([*fp16, "use_distributed_optimizer=false", "train_iters=30"]) == "accepted"


def test_error_injection_is_warned_to_stop_the_job_with_exit_16_or_17():
    (warning,) = [w for w in warnings_of(["error_injection_rate=5"]) if "error_injection" in w]
    assert warning == ("error_injection_rate 5 injects a transient_error into the loss on purpose (Megatron's rerun "
                       "tests): the rerun state machine then re-runs the step and may stop the job with exit code 16 "
                       "(a persistent error: it saves a checkpoint, to be resumed on another GPU) or 17 (result "
                       "validation failed), to be resumed from the last checkpoint")


FSDP_DTENSOR = ["use_megatron_fsdp=true", "ckpt_format=fsdp_dtensor", "gradient_accumulation_fusion=false"]


def test_fsdp_dtensor_async_saves_with_megatron_cores_strategy_are_refused():
    # seen on the H200 (gpt3_mcore_te_tp2_zp_z3_resume_fsdp_dtensor with the nvrx hint followed): a TypeError at
    # the first save, save_state_dict_async_plan() got an unexpected keyword argument 'enable_cache'
    text = refused([*FSDP_DTENSOR, "async_save=true", "use_persistent_ckpt_worker=true", "async_strategy=mcore"])
    assert ("error: ckpt_format fsdp_dtensor with async_save with async_strategy mcore cannot train at this Megatron "
            "pin (megatron/training/checkpointing.py:723): fsdp_dtensor's async save calls the strategy's "
            "save_state_dict_async_plan(…, enable_cache=…), which only nvidia-resiliency-ext's takes") in text
    assert "hint: set async_save=false, or async_strategy=nvrx with nvidia-resiliency-ext installed" in text
    resolve(load_preset("345m", [*FSDP_DTENSOR, "async_save=false"]), kernels=Kernels(False, False, "preset"),
            inherited_env={})  # FSDP's connections rule reads the environment; this test's is not the point


def test_the_nvrx_hint_never_leads_an_fsdp_dtensor_job_to_the_strategy_that_crashes():
    from launcher.megatron import requirements

    given = {"async_save": True, "use_persistent_ckpt_worker": True, "ckpt_format": "fsdp_dtensor"}
    settings = {"async_strategy": "nvrx", **given}
    rows = [r for r in requirements.applicable(settings) if r.package == "nvidia-resiliency-ext"]
    assert [(r.id, r.fix) for r in rows] == [
        ("async-save-nvrx-fsdp-dtensor", "install nvidia-resiliency-ext or set async_save=false")]
    assert rows[0].condition(settings, given) == ("async_save with async_strategy nvrx (Megatron's default) with "
                                                  "ckpt_format fsdp_dtensor")
    other = {**settings, "ckpt_format": "torch_dist"}
    assert [r.id for r in requirements.applicable(other) if r.package == "nvidia-resiliency-ext"] == [
        "async-save-nvrx"]
    # an exclusion is no cause: the message names the settings that make the row apply
    (row,) = [r for r in requirements.table() if r.id == "async-save-nvrx"]
    assert row.condition(other, given) == "async_save with async_strategy nvrx (Megatron's default)"


# -- a hint is a way out, never a way into another crash -------------------------------------------------------

def _fix_alternatives(fix: str) -> list[dict[str, object]]:
    """The `set a=b` choices a row's hint offers ('set x=false, or y=true' → [{x: False}, {y: True}]); the settings
    of one choice go together ('set x=1 --set z=2, or y=true' → [{x: 1, z: 2}, {y: True}])."""
    import re

    import yaml

    if not fix.startswith(("set ", "drop ")) and " set " not in fix:
        return []
    from launcher.megatron import args as megatron_args

    catalog = megatron_args.catalog()  # the launcher's own settings (transformer_engine=false) are other rules'
    choices = [{dest: yaml.safe_load(value) for dest, value in re.findall(r"\b([a-z_]+)=([\w.]+)", way)
                if dest in catalog} for way in re.split(r",? or ", fix)]
    return [choice for choice in choices if choice]


def _an_example(test: object) -> object:
    if isinstance(test, dict):
        if "between" in test:
            low, high = test["between"]
            return (low + high) / 2
        if "given" in test:
            return 1 if test["given"] else None
        return test["in"][0] if "in" in test else test["gt"] + 1 if "gt" in test else None
    return test


def test_following_a_rows_hint_never_leads_into_a_row_that_cannot_train():
    # found on the H200: the nvrx row's "set async_strategy=mcore" took an fsdp_dtensor job into a TypeError
    from launcher.megatron import requirements
    from launcher.megatron.effective import effective_settings
    from launcher.pipeline.feature_settings import with_drops

    def blocks(row: requirements.Requirement, settings: dict) -> bool:
        if row.kind == "setting":  # it applies, and its setting is not what it needs
            return row.applies(settings) and not all(requirements.holds(settings.get(d), test)
                                                     for d, test in row.needs["setting"].items())
        return row.applies(settings)

    blocking = ("setting", "layout", "unsupported")
    table = requirements.table()
    base = dict(load_preset("345m").megatron)  # a job as people write it: async saves with their persistent worker
    checked = 0
    for row in table:
        for index, written in enumerate(_fix_alternatives(row.fix)):
            for other in table:  # the row's settings together with another row's, less what the fix sets
                given = {**base, **{dest: _an_example(test) for dest, test in other.when.items()
                                    if dest not in written}}
                given.update({dest: _an_example(test) for dest, test in row.when.items()})
                given = {dest: value for dest, value in given.items() if value is not None}
                # the hint as the launcher words it for these settings (a way out drops what only it left behind)
                fix = _fix_alternatives(with_drops(row.fix, given.get))[index]
                before = effective_settings(given).settings
                if not blocks(row, before):
                    continue
                after = effective_settings({**given, **fix}).settings
                now_blocked = [r.id for r in table if r.kind in blocking and blocks(r, after)
                               and not blocks(r, before)]
                assert not blocks(row, after), (row.id, fix)
                assert now_blocked == [], f"{row.id}'s hint {fix} with {other.id}'s settings leads to {now_blocked}"
                checked += 1
    assert checked > 20


def test_full_iteration_cuda_graphs_are_refused_at_this_pin_with_and_without_te():
    for te in (False, True):
        text = refused(["cuda_graph_impl=full_iteration", "no_check_for_nan_in_loss_and_grad=true"], te=te, apex=te)
        assert "error: cuda_graph_impl full_iteration stops at the first training step at this Megatron pin" in text
        assert "hint: set cuda_graph_impl=none" in text


@pytest.mark.parametrize("refused_size", ["seq_length=null", "hidden_size=0"])
def test_a_job_refused_for_its_sizes_is_judged_on_megatrons_rewritten_settings_too(refused_size):
    # the rules said beside a missing or refused size read the settings validate_args leaves, as they do once the
    # sizes are fixed: --use-rotary-position-embeddings makes the model RoPE, so --no-position-embedding stands
    # (an import of FlagPerf's Aquila2 job was told to drop it, and after fixing its batch size was not)
    rope = ["use_rotary_position_embeddings=true", "add_position_embedding=false"]
    text = refused([refused_size, *rope])
    assert "add_position_embedding" not in text and "error:" in text
    assert "add_position_embedding false" in refused([refused_size, "add_position_embedding=false"])
    resolve(load_preset("345m", rope))  # the sizes fixed: accepted, as before
