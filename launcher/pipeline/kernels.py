"""Kernels of the target: which fused-kernel packages (Transformer Engine, NVIDIA apex) the training processes
will find where the job runs, and the Megatron settings that work without them. No torch imported.

Here and on bare-metal Slurm the packages are looked up in this Python (for Slurm: the login node's, and the
job checks each node again at start); in a container the image decides: an NGC PyTorch or NeMo image ships
both, any other image must say what it has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from launcher.errors import Problem, UserError
from launcher.inside.megatron_ext import (
    FAST_OPS_ENV,
    FP8_IMPLEMENTATION_WITHOUT_TE,
    FP8_PACKAGE,
    FP8_WEIGHT_CACHE_ENV,
    SDPA_SPEC_FAST,
    coverage,
    selected_ops,
)
from launcher.megatron import requirements
from launcher.megatron.pin import Kernels, detect_kernels, has_module
from launcher.megatron.target import DECLARED_TE_VERSION
from launcher.pipeline.environment import asks_apex_free_fusion, uses_megatron_ext

# Images that ship Transformer Engine and a full apex (with its CUDA extensions); enroot writes nvcr.io#nvidia/…
NGC_IMAGES = ("nvcr.io/nvidia/pytorch", "nvcr.io/nvidia/nemo")

# Measured on H200 without Transformer Engine and apex (shared/reference/gpu-measurements.md): each flag turns
# off a default that needs the missing package. Applied only where the preset does not set the value itself.
WITHOUT_TE = {"transformer_impl": "local"}
# Without TE, upstream's local core attention builds the full [b, heads, s, s] score matrix. This layer spec
# (shipped in launcher/inside/megatron_ext) swaps in torch's flash SDPA and faster stand-ins for the no-TE/no-apex
# fallbacks: 1.6x+ on the 345M model (docs/benchmarks.md). SDPA's causal kernel needs no mask tensor, so the
# dataloader stops building one. Used only where the preset sets no spec of its own.
SDPA_SPEC = {
    "spec": ["launcher.inside.megatron_ext.sdpa_spec_fast", "layer_spec"],
    "create_attention_mask_in_dataloader": False,
}
# Megatron's default rerun mode (validate_results) answers each NaN/Inf check on the host, twice per microbatch
# between forward and backward; in disabled mode the spec's deferred checks (megatron_ext/deferred_checks.py)
# keep the same fatal checks without a per-step sync (+3 % with the tensorboard interval on 345M, H200:
# docs/benchmarks.md). What a rerun would add, re-running a failing step to tell a flaky GPU from bad numerics,
# is for large jobs with TE, which never take this path; a preset that sets rerun_mode keeps its own.
FAST_PATH_DEFAULTS = {"rerun_mode": "disabled"}
WITHOUT_APEX = {
    "gradient_accumulation_fusion": False,  # apex's fused_weight_gradient_mlp_cuda, needed even with TE
    "masked_softmax_fusion": False,  # apex's scaled_masked_softmax_cuda kernels
    "no_persist_layer_norm": True,  # torch's LayerNorm fallback rejects persistent layer norm
}


def is_ngc_image(image: str) -> bool:
    name = image.removeprefix("docker://").replace("#", "/", 1)
    return any(name == ngc or name.startswith((ngc + ":", ngc + "@")) for ngc in NGC_IMAGES)


def kernels_for(te_setting: str | bool, apex_setting: str | bool, *, slurm: bool = False,
                container_image: str | None = None, packages: tuple[str, ...] = ()) -> Kernels:
    """What the job's processes will find; `auto` is answered where the job runs, or refused if it cannot be.
    torchao counts where launcher.packages declares it, or where the kernels are looked up here and it is found, and
    for a job that runs here whatever decided TE and apex: it is this machine's torchao that the job will import."""
    kernels = _kernels_for(te_setting, apex_setting, slurm=slurm, container_image=container_image)
    looked_up_here = kernels.how in ("detected", "login node") or (not slurm and not container_image)
    torchao = FP8_PACKAGE in packages or (looked_up_here and has_module(FP8_PACKAGE))
    return replace(kernels, torchao=torchao)


def _kernels_for(te_setting: str | bool, apex_setting: str | bool, *, slurm: bool,
                 container_image: str | None) -> Kernels:
    if "auto" not in (te_setting, apex_setting):
        return Kernels(bool(te_setting), bool(apex_setting), "preset", DECLARED_TE_VERSION if te_setting else None)
    te_version: str | None = DECLARED_TE_VERSION
    if container_image and is_ngc_image(container_image):
        found, how = (True, True), "NGC image"
    elif container_image:
        unknown = [name for name, value in (("transformer_engine", te_setting), ("apex", apex_setting))
                   if value == "auto"]
        raise UserError(Problem(
            f"cannot tell whether container image {container_image} has {' and '.join(unknown)} "
            "(the preset says auto, and only NGC images nvcr.io/nvidia/pytorch and nvcr.io/nvidia/nemo are known)",
            "declare what the image ships: " + " ".join(f"--set {name}=true|false" for name in unknown)))
    else:
        found, how = detect_kernels(), ("login node" if slurm else "detected")
        te_version = requirements.te_version_here() if te_setting == "auto" else DECLARED_TE_VERSION
    te = found[0] if te_setting == "auto" else bool(te_setting)
    apex = found[1] if apex_setting == "auto" else bool(apex_setting)
    return Kernels(te, apex, how, te_version if te else None)


# Weight gradients accumulated into the fp32 main_grad inside their GEMM without apex (inside/apex_free), the default
# on the SDPA fast path where a step accumulates several microbatches. One H200 (docs/benchmarks.md): the 175b layer
# shape, 16 microbatches, 507.8 → 544.0 TFLOP/s (+7.1 %); 345m, one microbatch per step, 1.4-2.7 % slower (nothing
# to accumulate, and the fp32-output GEMMs cost more), so not there; FP8's GEMMs are torchao's (not measured).
FUSED_ACCUMULATION_FROM = 2


def fallbacks(megatron: Mapping[str, Any], kernels: Kernels, microbatches: int | None = None) -> dict[str, Any]:
    """The settings a job without TE/apex needs, where the preset leaves them open (`microbatches`: per step and
    model replica, where known)."""
    wanted = {**({} if kernels.transformer_engine else WITHOUT_TE), **({} if kernels.apex else WITHOUT_APEX)}
    if uses_sdpa_spec(megatron, kernels):
        wanted.update(SDPA_SPEC)  # a spec of the local implementation: never next to an explicit TE one
        if keeps_rerun_default(megatron):
            wanted.update(FAST_PATH_DEFAULTS)
        if not kernels.apex and not megatron.get("fp8") and (microbatches or 0) >= FUSED_ACCUMULATION_FROM:
            wanted["gradient_accumulation_fusion"] = True
        if megatron.get("reset_attention_mask"):  # its per-document mask is built in the dataloader
            del wanted["create_attention_mask_in_dataloader"]
    if not kernels.transformer_engine and uses_rope(megatron):
        wanted["apply_rope_fusion"] = False  # fused RoPE is TE's (transformer_config.py:1947)
    return {dest: value for dest, value in wanted.items() if megatron.get(dest) is None}


def fused_accumulation_notes(flags: Mapping[str, Any], microbatches: int | None) -> list[str]:
    """Said where fallbacks turned the apex-free fused accumulation on (not where the preset asked for it)."""
    if flags.get("gradient_accumulation_fusion") is not True:
        return []
    return [f"gradient accumulation fusion on without apex (the launcher's default where a step accumulates "
            f"{microbatches} microbatches): weight gradients accumulate into the fp32 main_grad inside their GEMM "
            "(torch.addmm with out_dtype; launcher/inside/apex_free stands in for apex's module); +7.1 % at the 175b "
            "layer shape on one H200 (docs/benchmarks.md); --set gradient_accumulation_fusion=false to turn it off"]


def keeps_rerun_default(megatron: Mapping[str, Any]) -> bool:
    """Whether FAST_PATH_DEFAULTS' rerun mode applies: not where the NaN check is off (nothing to defer), nor
    where the preset asks for the rerun machinery itself (error injection works only in its other modes)."""
    return megatron.get("check_for_nan_in_loss_and_grad") is not False and not megatron.get("error_injection_rate")


def uses_sdpa_spec(megatron: Mapping[str, Any], kernels: Kernels) -> bool:
    """Whether the launcher gives this job its SDPA layer spec: no TE, the local implementation, no spec of the
    preset's own, and no feature the spec does not cover (inside/megatron_ext/coverage.py)."""
    local = megatron.get("transformer_impl") in (None, "local")
    return (not kernels.transformer_engine and megatron.get("spec") is None and local
            and not coverage.sdpa_spec_gaps(megatron))


def fast_path_notes(megatron: Mapping[str, Any], kernels: Kernels) -> list[str]:
    """Said before launch: which FP8 runs without TE, and when a job without TE trains on Megatron's plain local
    spec instead of the SDPA one."""
    return [*fp8_notes(megatron, kernels), *_spec_notes(megatron, kernels)]


def fp8_notes(megatron: Mapping[str, Any], kernels: Kernels) -> list[str]:
    """Which FP8 implementation runs (checks.target_rules.fp8_without_te refuses the jobs it cannot run)."""
    fmt = megatron.get("fp8")
    if not fmt or kernels.transformer_engine or not uses_sdpa_spec(megatron, kernels) or not kernels.torchao:
        return []
    recipe = megatron.get("fp8_recipe") or "delayed"
    grads = "e5m2" if fmt == "hybrid" else "e4m3"
    instead = f" (in place of Megatron's fp8_recipe {recipe}, which is TE's)" if recipe != "tensorwise" else ""
    return [f"fp8 {fmt} without Transformer Engine: {FP8_IMPLEMENTATION_WITHOUT_TE}{instead}, e4m3 activations and "
            f"weights, {grads} gradients, in each compiled layer's QKV, projection, fc1 and fc2 GEMMs; embedding, "
            "output layer, attention and weights stay bf16 (checkpoints too)"]


# What each fast op measured (docs/benchmarks.md: "History", "The compiled layers", the fourth session, the saves).
FAST_OP_GAINS = (
    (("ce", "norm", "scale", "adam"), "ce,norm,scale,adam 0.78 -> 0.93x"),
    (("layer",), "layer (the compiled layers) +6 to 7 %"),
    (("nosync",), "nosync 0.987 -> 1.012x"),
    (("nancheck",), "nancheck: see rerun_mode"),
    (("save",), "save: a save blocks 0.358 s instead of 2.365 s"),
)


def fast_spec_notes(megatron: Mapping[str, Any], kernels: Kernels, env: Callable[[str], str | None]) -> list[str]:
    """What the launcher's fast spec runs in the ranks (`env` reads a rank's environment): its fast ops and, for
    FP8 without TE, the weight cache; each with what it measured (docs/benchmarks.md) and how to turn it off."""
    spec = megatron.get("spec")
    if not isinstance(spec, list) or tuple(map(str, spec)) != SDPA_SPEC_FAST:
        return []
    given = env(FAST_OPS_ENV)
    try:
        ops = selected_ops(given)
    except ValueError:  # the rank refuses an unknown name itself
        return []
    whose = "all, the default" if given is None or not given.strip() else f"{FAST_OPS_ENV}={given}"
    gains = [gain for names, gain in FAST_OP_GAINS if set(names) <= set(ops)]
    notes = [f"the layers are the launcher's SDPA spec with fast ops {','.join(ops) or 'none'} ({whose}); one H200, "
             "345m against compiled plain PyTorch: Megatron's local attention 0.16x, the SDPA spec 0.78x"
             + "".join(f"; {gain}" for gain in gains)
             + f"; --set env.{FAST_OPS_ENV}=none (or a subset, e.g. ce,norm) for Megatron's own"]
    if megatron.get("fp8") and kernels.torchao and not kernels.transformer_engine and env(FP8_WEIGHT_CACHE_ENV) != "0":
        notes.append(f"FP8 weights cast once per optimizer step, not in every microbatch ({FP8_WEIGHT_CACHE_ENV}): one "
                     "H200, the 175b layer shape, 16 microbatches: 639.0 -> 680.8 TFLOP/s; "
                     f"--set env.{FP8_WEIGHT_CACHE_ENV}=0 for torchao's cast in every call")
    return notes


def _spec_notes(megatron: Mapping[str, Any], kernels: Kernels) -> list[str]:
    local = megatron.get("transformer_impl") in (None, "local")
    gaps = coverage.sdpa_spec_gaps(megatron)
    if uses_sdpa_spec(megatron, kernels):
        notes = []
        if megatron.get("rerun_mode") is None and keeps_rerun_default(megatron):
            notes.append("rerun_mode disabled (the launcher's default on the SDPA fast path): the NaN/Inf checks "
                         "of loss and gradients still stop the run, read back at most 2 steps late and before every "
                         "save instead of a host sync in each step (one H200, 345m, with the TensorBoard interval: "
                         "+3.7 %, 0.962 -> 0.998 of compiled plain PyTorch); --set rerun_mode=validate_results for "
                         "Megatron's re-run diagnosis")
        if asks_apex_free_fusion(megatron, kernels.apex):  # the spec is the SDPA one: it gets APEX_FREE
            notes.append("gradient accumulation fusion without apex: weight gradients accumulate into the fp32 "
                         "main_grad inside their GEMM (torch.addmm with out_dtype; launcher/inside/apex_free on "
                         "PYTHONPATH stands in for apex's module)")
        return notes
    if kernels.transformer_engine or megatron.get("spec") is not None or not local or not gaps \
            or coverage.refused(gaps, megatron, kernels.apex):
        return []
    return [f"the SDPA fast path does not cover {coverage.describe(gaps)}: Megatron's local layer spec is used "
            "(it trains, but slower)"]


def fast_path_problems(megatron: Mapping[str, Any], kernels: Kernels) -> list[Problem]:
    """Refused here, not in training: a preset that names the SDPA spec itself for a model it does not cover, and
    (without TE) a model that no local layer spec builds."""
    gaps = coverage.sdpa_spec_gaps(megatron)
    problems = []
    if uses_megatron_ext(megatron) and gaps:
        problems.append(Problem(
            f"spec {' '.join(map(str, megatron['spec']))} does not cover {coverage.describe(gaps)}",
            "remove spec from the preset (--set spec=null): without Transformer Engine the launcher then uses "
            "Megatron's local layer spec", stage="launcher"))
    local = megatron.get("transformer_impl") in (None, "local")
    if local and not kernels.transformer_engine:
        for gap in coverage.refused(gaps, megatron, kernels.apex):
            why = gap.local_spec if gap in gaps else (
                f"the launcher's SDPA spec builds it without TE but does not cover {coverage.describe(gaps)}, and "
                f"Megatron's local spec cannot build it{' without apex' if gap.apex_builds else ''}: "
                f"{gap.local_spec}")
            needs, targets = (("Transformer Engine or NVIDIA apex", "--set transformer_engine=true or apex=true")
                              if gap.apex_builds else ("Transformer Engine", "--set transformer_engine=true"))
            # the SDPA spec builds it once what sent the job off that spec is gone: a way out on this target
            back = "" if gap in gaps else (
                f", or {' '.join(f'set {g.setting}={coverage.off(g)}' for g in gaps)} (the launcher's SDPA spec then "
                f"builds {gap.what}; the model loses {coverage.describe(gaps)})")
            problems.append(Problem(
                f"{gap.what} ({gap.setting}) needs {needs}: {why}",
                f"use a target with {needs} ({targets}){back}, or unset {gap.setting}", stage="launcher"))
    return problems


def uses_rope(megatron: Mapping[str, Any]) -> bool:
    """validate_args turns RoPE fusion off unless the position embedding is RoPE (arguments.py:1457-1460)."""
    return megatron.get("position_embedding_type") == "rope" or bool(megatron.get("use_rotary_position_embeddings"))
