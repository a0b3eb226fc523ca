"""FP8 without Transformer Engine: accepted where the launcher's compiled layers run it with torchao (the dry-run
says so), refused with a hint where they cannot; the printed command is the command (Megatron's own --fp8-format)."""

from __future__ import annotations

import pytest

from launcher.errors import UserError
from launcher.megatron.pin import Kernels
from launcher.pipeline import kernels as kernel_rules
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve

WITH_TORCHAO = Kernels(False, False, "preset", torchao=True)
BARE = Kernels(False, False, "preset")


def job(overrides, kernels=WITH_TORCHAO, preset="345m", gpus=1):
    return resolve(load_preset(preset, list(overrides)), 1, gpus, kernels=kernels)


def refusal(overrides, kernels=WITH_TORCHAO, gpus=1):
    with pytest.raises(UserError) as err:
        job(overrides, kernels, gpus=gpus)
    return err.value.render()


@pytest.mark.parametrize("fmt", ["hybrid", "e4m3"])
def test_fp8_without_te_runs_through_torchao_and_the_dry_run_says_so(fmt):
    resolved = job([f"fp8_format={fmt}"])
    assert resolved.megatron["fp8"] == fmt  # Megatron gets its own flag; the compiled layers read its config
    assert resolved.megatron["spec"] == ["launcher.inside.megatron_ext.sdpa_spec_fast", "layer_spec"]
    notes = [n for n in resolved.notes if n.startswith(f"fp8 {fmt} without Transformer Engine")]
    assert len(notes) == 1
    assert "torchao float8 with dynamic tensorwise scaling" in notes[0]
    assert ("e5m2 gradients" if fmt == "hybrid" else "e4m3 gradients") in notes[0]
    assert "in place of Megatron's fp8_recipe delayed" in notes[0]
    assert not any("fp8" in w for w in resolved.warnings)


def test_fp8_with_the_tensorwise_recipe_is_said_without_a_substitution():
    note = next(n for n in job(["fp8_format=hybrid", "fp8_recipe=tensorwise"]).notes if n.startswith("fp8"))
    assert "in place of" not in note


def test_without_fp8_nothing_is_said_about_it():
    assert not any(n.startswith("fp8") for n in job([]).notes)


def test_with_te_fp8_is_megatrons_own_and_needs_no_torchao():
    resolved = job(["fp8_format=hybrid", "micro_batch_size=4"], Kernels(True, True, "preset"))
    assert not any(n.startswith("fp8") for n in resolved.notes)


def test_fp8_without_te_and_without_torchao_is_refused_with_a_hint():
    text = refusal(["fp8_format=hybrid"], BARE)
    assert ("error: fp8 hybrid without Transformer Engine runs through torchao's float8 training, which the target "
            "lacks\n  hint: install torchao where the job runs (pip install torchao) and declare it") in text
    assert "--set packages=torchao" in text and "--set fp8=null" in text


def test_torchao_declared_in_launcher_packages_counts_as_present():
    resolved = job(["fp8_format=hybrid", "packages=torchao", "transformer_engine=false", "apex=false"],
                   kernel_rules.kernels_for(False, False, packages=("torchao",)))
    assert resolved.kernels.torchao


def test_torchao_is_looked_up_where_the_kernels_are(monkeypatch):
    monkeypatch.setattr(kernel_rules, "detect_kernels", lambda: (False, False))
    monkeypatch.setattr(kernel_rules, "has_module", lambda name: name == "torchao")
    assert kernel_rules.kernels_for("auto", "auto").torchao
    assert kernel_rules.kernels_for(False, False).torchao  # the job runs here: this machine's torchao
    # a declared target elsewhere: only launcher.packages says
    assert not kernel_rules.kernels_for(False, False, slurm=True).torchao
    monkeypatch.setattr(kernel_rules, "has_module", lambda name: False)
    assert not kernel_rules.kernels_for("auto", "auto").torchao


@pytest.mark.parametrize(("overrides", "gpus", "reason"), [
    (["tensor_model_parallel_size=2"], 2, "tensor parallelism (TP > 1)"),
    (["recompute_granularity=full", "recompute_method=uniform", "recompute_num_layers=1"], 1,
     "activation recomputation"),
    (["squared_relu=true"], 1, "activation functions other than GeLU and SwiGLU"),
    (["reset_attention_mask=true"], 1, "per-document attention masks"),
], ids=["tp2", "recompute", "squared-relu", "document-mask"])
def test_fp8_where_the_compiled_layer_hands_over_to_megatron_is_refused(overrides, gpus, reason):
    text = refusal(["fp8_format=hybrid", *overrides], gpus=gpus)
    assert (f"error: fp8 hybrid without Transformer Engine runs only in the launcher's compiled layers, which do not "
            f"run {reason}") in text


def test_fp8_with_rotary_embeddings_runs_in_the_compiled_layers():
    # Llama's shape on one GPU: RoPE, RMSNorm, SwiGLU, grouped queries
    resolved = job(["fp8_format=hybrid", "position_embedding_type=rope", "normalization=RMSNorm", "swiglu=true",
                    "num_query_groups=4", "group_query_attention=true", "add_bias_linear=false"])
    assert resolved.megatron["fp8"] == "hybrid" and resolved.megatron["position_embedding_type"] == "rope"
    assert resolved.megatron["spec"] == ["launcher.inside.megatron_ext.sdpa_spec_fast", "layer_spec"]


def test_fp8_recipes_of_te_alone_are_refused():
    text = refusal(["fp8_format=e4m3", "fp8_recipe=blockwise"])
    assert "fp8_recipe blockwise is Transformer Engine's" in text and "set fp8_recipe=tensorwise" in text


def test_fp8_on_a_gpu_without_float8_matmuls_is_refused():
    text = refusal(["fp8_format=hybrid", "gpu=a100-80gb"])
    assert "float8 matmuls need compute capability 8.9 (Ada, Hopper) or newer; a100-80gb has 8.0" in text


def test_fp8_off_the_sdpa_fast_path_is_refused():
    text = refusal(["fp8_format=hybrid", "spec=[my.module, layer_spec]"])
    assert "runs only on the launcher's SDPA fast path (its compiled layers), which this job does not take" in text


def test_fp8_with_the_compiled_layers_switched_off_is_refused():
    text = refusal(["fp8_format=hybrid", "env.MEGATRON_LAUNCH_FAST_OPS=ce,norm"])
    assert "MEGATRON_LAUNCH_FAST_OPS=ce,norm leaves out" in text


def test_fp8_through_torchao_is_estimated_with_bf16_activations_not_tes_fp8_copies():
    from launcher.estimate.formulas import layer_activation_bytes, model_shape, training_of

    torchao = job(["fp8_format=hybrid", "micro_batch_size=4"]).megatron
    te = dict(torchao, spec=None, transformer_impl="transformer_engine")
    bf16 = {k: v for k, v in torchao.items() if k != "fp8"}
    per_layer = {name: layer_activation_bytes(model_shape(args), training_of(args, 1))
                 for name, args in (("torchao", torchao), ("te", te), ("bf16", bf16))}
    assert per_layer["torchao"] == per_layer["bf16"] > per_layer["te"]


def test_the_rehearsal_notes_no_missing_kernel_for_a_target_that_only_adds_torchao(monkeypatch):
    from launcher.checks import rehearsal
    from launcher.megatron import pin

    monkeypatch.setattr(pin, "detect_kernels", lambda: (False, False))
    resolved = job(["fp8_format=hybrid"])
    megatron, notes = rehearsal.settings_here(resolved)
    assert notes == [] and megatron == resolved.megatron


def test_a_job_that_runs_here_uses_this_machines_torchao_however_te_was_decided(monkeypatch):
    monkeypatch.setattr(kernel_rules, "has_module", lambda name: name == "torchao")
    assert kernel_rules.kernels_for(False, False).torchao
    assert not kernel_rules.kernels_for(False, False, container_image="example.org/mine:1").torchao
    monkeypatch.setattr(kernel_rules, "has_module", lambda name: False)
    assert not kernel_rules.kernels_for(False, False).torchao
    assert kernel_rules.kernels_for(False, False, packages=("torchao",)).torchao
