"""A rehearsal without a GPU (`launch PRESET --check --rehearse`): the job's model and optimizer, at a tiny size
with the same features, built on this machine's CPU through pretrain_gpt.py's own model provider and the job's
--spec, then one training step (forward, backward, gradient finalisation, optimizer step).

The launcher never imports torch: launcher/inside/rehearse_worker.py does, in a subprocess of the interpreter
that has megatron-core, with the Megatron-LM checkout on its path (pretrain_gpt.py and its builder live there, not
in the megatron-core wheel). One worker serves many rehearsals (scripts/feature_matrix.py --functional-tests).
What a CPU process of one cannot rehearse is said, never silently skipped.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from launcher.checks.megatron_python import TARGET_ENV_PREFIXES, WorkerProcess, find_megatron_python
from launcher.errors import UserError
from launcher.megatron.pin import FETCH_HINT, has_module, submodule_hint
from launcher.pipeline.environment import APEX_FREE
from launcher.pipeline.value_rules import capacity_past_tokens

WORKER = Path(__file__).resolve().parent.parent / "inside" / "rehearse_worker.py"
LAUNCHER_ROOT = Path(__file__).resolve().parents[2]  # training processes import launcher.inside from here
# torch.compile's backend in the rehearsal: the same graphs (forward and backward), no kernels generated.
COMPILE_BACKEND = "aot_eager"

APEX_MODULE = "fused_weight_gradient_mlp_cuda"  # apex's, which Megatron's gradient accumulation fusion imports

REHEARSAL_SAVE = "/nonexistent/megatron-launch-rehearsal"
# The tiny model: every size a feature is defined by stays given or absent, only its value shrinks.
HEADS, HIDDEN, HEAD_DIM, FFN, SEQ, VOCAB, EXPERTS = 4, 64, 16, 128, 64, 128, 4
TINY = {"hidden_size": HIDDEN, "num_attention_heads": HEADS, "seq_length": SEQ, "max_position_embeddings": SEQ,
        "micro_batch_size": 1, "global_batch_size": 2, "mock_data": True, "tokenizer_type": "NullTokenizer",
        "vocab_size": VOCAB}
SHRUNK_IF_GIVEN = {"ffn_hidden_size": FFN, "kv_channels": HEAD_DIM, "moe_ffn_hidden_size": HIDDEN,
                   "moe_shared_expert_intermediate_size": HIDDEN, "q_lora_rank": 32, "kv_lora_rank": 32,
                   "qk_head_dim": HEAD_DIM, "qk_pos_emb_head_dim": 8, "v_head_dim": HEAD_DIM}
# The parallel groups a CPU process of one cannot form, and the settings that only mean something with them.
PARALLEL = {
    "tensor_model_parallel_size": ("TP", ("sequence_parallel", "tp_comm_overlap", "tp_comm_overlap_cfg",
                                           "tp_comm_bootstrap_backend")),
    "pipeline_model_parallel_size": ("PP", ("num_layers_per_virtual_pipeline_stage",
                                             "num_virtual_stages_per_pipeline_rank", "overlap_p2p_comm",
                                             "overlap_p2p_comm_warmup_flush", "microbatch_group_size_per_vp_stage",
                                             "decoder_first_pipeline_num_layers",
                                             "decoder_last_pipeline_num_layers",
                                             "account_for_embedding_in_pipeline_split",
                                             "account_for_loss_in_pipeline_split", "pipeline_model_parallel_layout",
                                             "defer_embedding_wgrad_compute")),
    "context_parallel_size": ("CP", ("cp_comm_type", "hierarchical_context_parallel_sizes")),
    "expert_model_parallel_size": ("EP", ()),
    "expert_tensor_parallel_size": ("expert TP", ()),
}
# Settings that read or write files, or reach services, that a rehearsal must not touch.
DROPPED = ("load", "pretrained_checkpoint", "data_path", "train_data_path", "valid_data_path", "test_data_path",
           "data_args_path", "per_split_data_args_path", "split", "vocab_file", "merge_file", "tokenizer_model",
           "data_cache_path", "tensorboard_dir", "wandb_project", "wandb_exp_name",
           "wandb_save_dir", "wandb_entity", "rampup_batch_size", "step_batch_size_schedule",
           "use_checkpoint_args", "exit_interval", "exit_duration_in_mins")
CPU_ONLY_NOT = {  # setting → why it is switched off for the rehearsal (what the GPU run keeps)
    "use_megatron_fsdp": "Megatron FSDP (CUDA only)",
    "cuda_graph_impl": "CUDA graphs",
    "external_cuda_graph": "CUDA graphs",
    "enable_cuda_graph": "CUDA graphs",
    "use_torch_fsdp2": "torch FSDP2 over NCCL",
    # HybridDeviceOptimizer copies the CUDA parameters to the CPU and steps those copies; a CPU process has no CUDA
    # parameter, so every one lands in the CPU optimizer without a copy and its step looks up a copy that is none
    "optimizer_cpu_offload": "the optimizer's CPU offload (it moves CUDA parameters to the CPU), with the "
                             "precision-aware settings its optimizer takes",
}

# Settings Megatron allows only next to one switched off above: left out with it (their own checks need it).
DEPENDS_ON = {
    # arguments.py:1157-1159, 1507: manual registration and fsdp_dtensor assert Megatron FSDP; NCCL's userbuffers
    # turn manual registration on under it
    "use_megatron_fsdp": ("data_parallel_sharding_strategy", "ckpt_format", "fsdp_double_buffer", "nccl_ub",
                          "fsdp_manual_registration", "init_model_with_meta_device",
                          "megatron_fsdp_enable_fine_grained_param_gather", "megatron_fsdp_grad_comm_dtype",
                          "megatron_fsdp_main_grads_dtype", "megatron_fsdp_main_params_dtype",
                          "strict_fsdp_dtensor_load"),
    "cuda_graph_impl": ("rl_training_cuda_graphs", "cuda_graph_scope_deprecated", "cuda_graph_modules",
                        "cuda_graph_warmup_steps"),
    # the precision-aware optimizer runs in HybridDeviceOptimizer here; without it Megatron asks TE's FusedAdam
    "optimizer_cpu_offload": ("optimizer_offload_fraction", "use_torch_optimizer_for_cpu_offload",
                              "overlap_cpu_optimizer_d2h_h2d", "pin_cpu_grads", "pin_cpu_params",
                              "use_precision_aware_optimizer", "main_grads_dtype", "main_params_dtype",
                              "exp_avg_dtype", "exp_avg_sq_dtype"),
}


def needing_more_than_one(dest: str) -> tuple[str, ...]:
    """The switches Megatron allows only where the parallel size `dest` is above 1, as the requirement table says
    (distribute_saved_activations: TP > 1, arguments.py:1356)."""
    from launcher.megatron import requirements

    return tuple(switch for row in requirements.table() if (row.needs.get("setting") or {}).get(dest) == {"gt": 1}
                 for switch, test in row.when.items() if test is True)


@dataclass(frozen=True)
class Rehearsal:
    """The rehearsal's answer for one job: it built and stepped, or the stage that crashed and Megatron's message."""

    ok: bool
    stage: str = "done"  # args | model | optimizer | step | done
    error: str = ""
    where: str = ""
    seconds: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)
    not_rehearsed: tuple[str, ...] = ()
    traceback: str = ""

    STAGES = {"args": "Megatron's arguments", "model": "model build", "optimizer": "optimizer build",
              "step": "training step", "setup": "start", "launcher": "the launcher's settings for this machine"}

    def render(self) -> list[str]:
        if self.ok:
            loss = self.facts.get("loss")
            lines = [f"rehearsal: ok (tiny model of {self.facts.get('parameters', 0):,} parameters built on the CPU "
                     f"through pretrain_gpt.py's model provider; one training step, loss "
                     f"{loss:.3f}, {self.seconds:.1f} s)" if loss is not None else
                     f"rehearsal: ok (model built, one step, {self.seconds:.1f} s)"]
        elif self.stage in ("setup", "worker", "launcher"):
            lines = [f"rehearsal: not run: {self.error}"]
        else:
            where = f" ({self.where})" if self.where else ""
            lines = [f"rehearsal: crashed at {self.STAGES.get(self.stage, self.stage)}: {self.error}{where}"]
        return lines + [f"  not rehearsed: {text}" for text in self.not_rehearsed]

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "stage": self.stage, "error": self.error, "where": self.where,
                "seconds": self.seconds, "facts": self.facts, "not_rehearsed": list(self.not_rehearsed)}


def _given(settings: Mapping[str, Any], dest: str) -> bool:
    return settings.get(dest) not in (None, False)


def tiny_settings(megatron: Mapping[str, Any], *, te_here: bool = False,
                  saves: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The job's Megatron settings at the rehearsal's size, and what that leaves unrehearsed. `saves`: the caller
    writes (and reads back) a checkpoint of its own, so only data and tokenizer are said to be stand-ins."""
    settings = dict(megatron)
    not_rehearsed: list[str] = []
    sizes = [f"{name} {megatron[dest]}" for dest, (name, _) in PARALLEL.items() if (megatron.get(dest) or 1) > 1]
    for dest, (_name, knobs) in PARALLEL.items():
        if (megatron.get(dest) or 1) > 1:
            settings[dest] = 1
            for knob in (*knobs, *needing_more_than_one(dest)):
                settings.pop(knob, None)
    if sizes:
        not_rehearsed.append(f"{', '.join(sizes)}: one CPU process plays a world of one (every parallel size 1, "
                             "the settings of those groups left out)")
    for dest in DROPPED:
        settings.pop(dest, None)
    if settings.get("save"):  # never written (validate_args only asks whether there is one): one name for all
        settings["save"] = REHEARSAL_SAVE
    settings.update(TINY)
    for dest, value in SHRUNK_IF_GIVEN.items():
        if settings.get(dest) is not None:
            settings[dest] = value
    _shrink_layers(settings)
    _shrink_attention_groups(settings, megatron.get("num_attention_heads") or HEADS)
    _shrink_experts(settings)
    for dest, why in CPU_ONLY_NOT.items():
        if _given(settings, dest) and settings[dest] != "none":
            settings[dest] = "none" if dest == "cuda_graph_impl" else False
            not_rehearsed.append(why)
            for dependent in DEPENDS_ON.get(dest, ()):
                settings.pop(dependent, None)
    if settings.get("transformer_impl", "transformer_engine") == "transformer_engine" and not te_here:
        settings["transformer_impl"] = "local"
        not_rehearsed.append("Transformer Engine (the target's, not installed here): rehearsed with Megatron's "
                             "local implementation")
    not_rehearsed.append(f"CUDA kernels: the step ran on the CPU (torch.compile with its {COMPILE_BACKEND} "
                         "backend: the same graphs, no kernels generated), at "
                         f"{settings.get('num_layers')} layers × hidden {HIDDEN}, sequence {SEQ}")
    not_rehearsed.append("data and tokenizer: mock data, a NullTokenizer" if saves else
                         "data, tokenizer and checkpoints: mock data, a NullTokenizer, no --load, no save")
    return settings, not_rehearsed


def _shrink_layers(settings: dict[str, Any]) -> None:
    """2 layers, unless a per-layer pattern names every layer (then their number stays)."""
    patterned = any(isinstance(settings.get(dest), str) and "[" in settings[dest]
                    for dest in ("moe_layer_freq", "no_rope_freq", "linear_attention_freq"))
    if not patterned and (settings.get("num_layers") or 2) > 2:
        settings["num_layers"] = 2


def _shrink_attention_groups(settings: dict[str, Any], heads: int) -> None:
    """Multi-head, multi-query and grouped-query attention stay what they were (4, 1 or 2 groups of 4 heads)."""
    groups = settings.get("num_query_groups")
    if groups is not None:
        settings["num_query_groups"] = HEADS if groups >= heads else 1 if groups == 1 else 2


def _shrink_experts(settings: dict[str, Any]) -> None:
    experts = settings.get("num_experts")
    if not experts:
        return
    job_topk = settings.get("moe_router_topk") or 2
    settings["num_experts"] = min(experts, EXPERTS)
    if settings.get("moe_router_topk"):
        settings["moe_router_topk"] = min(settings["moe_router_topk"], settings["num_experts"])
    fit_group_limited_router(settings)
    # Padding to capacity: an expert's capacity (tokens × topk / experts × the factor) past the tokens fails
    # Megatron's unfused permute at the first step (a view of fewer sorted indices, moe_utils.py:407). Where the
    # job's own counts keep it below (16 experts, topk 4, factor 1.5) and the shrunk ones would not (4 experts),
    # the factor becomes 1; a job past it at its own counts keeps its factor (and fails, as on a GPU).
    factor = settings.get("moe_expert_capacity_factor")
    shrunk_topk = settings.get("moe_router_topk") or 2
    if settings.get("moe_pad_expert_input_to_capacity") and isinstance(factor, (int, float)) \
            and not capacity_past_tokens(job_topk, factor, experts) \
            and capacity_past_tokens(shrunk_topk, factor, settings["num_experts"]):
        settings["moe_expert_capacity_factor"] = 1.0


def fit_group_limited_router(settings: dict[str, Any]) -> None:
    """Group-limited routing at the shrunk expert count: it takes topk / group_topk experts from each chosen group
    (moe_utils.py:620), so every group is chosen and topk is a multiple of the groups that each group can serve."""
    if not settings.get("moe_router_num_groups"):
        return
    groups = 2 if settings["num_experts"] % 2 == 0 else 1
    per_group = settings["num_experts"] // groups
    topk = settings.get("moe_router_topk") or 1
    settings["moe_router_num_groups"] = settings["moe_router_group_topk"] = groups
    settings["moe_router_topk"] = max(groups, min(topk, groups * per_group) // groups * groups)


# -- the worker ------------------------------------------------------------------------------------------------

def rehearsal_python(megatron_path: Path, python: str | None = None) -> str:
    """The interpreter that has megatron-core and torch, once the checkout is known to have pretrain_gpt.py."""
    found = python or find_megatron_python()
    if not found:
        raise UserError("the rehearsal needs megatron-core and torch, which this Python cannot import",
                        "pip install 'megatron-core==0.18.0' torch pyyaml, or set MEGATRON_PYTHON")
    if not (megatron_path / "pretrain_gpt.py").is_file():
        raise UserError(
            f"the rehearsal builds the model through pretrain_gpt.py's model provider, and {megatron_path} "
            "is not a Megatron-LM checkout (the megatron-core wheel has no pretrain_gpt.py or gpt_builders.py)",
            f"{FETCH_HINT}, or pass --megatron-path DIR (or set MEGATRON_LM_PATH) to a checkout of the pinned "
            f"Megatron-LM{submodule_hint(megatron_path)}")
    return found


def rehearsal_env(megatron_path: Path) -> dict[str, str]:
    """This machine's environment without what describes the target, with the checkout and launcher importable.
    The inherited PYTHONPATH comes after them, as a launch gives its ranks (JobEnvironment.for_process): a package
    found there (torchao, which the dry-run counts on for FP8 without Transformer Engine) is the rehearsal's too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(TARGET_ENV_PREFIXES)}
    paths = [str(megatron_path), str(LAUNCHER_ROOT)]
    if not has_module(APEX_MODULE):  # as a launch without apex gives its ranks (pipeline/environment.APEX_FREE)
        paths.append(str(APEX_FREE))
    paths += [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry and entry not in paths]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["NO_VCS_VERSION"] = "1"
    env["MEGATRON_LAUNCH_COMPILE_BACKEND"] = COMPILE_BACKEND
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


class Rehearser(WorkerProcess):
    """A running rehearse worker; a context manager, then rehearse() per job."""

    def __init__(self, megatron_path: Path, python: str | None = None):
        self.python = rehearsal_python(megatron_path, python)
        hello = self._start(WORKER, rehearsal_env(megatron_path), "the rehearsal", cwd=tempfile.gettempdir())
        self.megatron_origin: str = hello.get("origin", "?")

    def rehearse_many(self, requests: Sequence[tuple[Sequence[str], Mapping[str, str]]]) -> list[dict[str, Any]]:
        """Raw replies in order; requests are written from a thread so neither pipe can fill up and stall."""
        assert self._proc.stdin is not None
        stdin = self._proc.stdin

        def feed() -> None:
            try:
                for argv, env in requests:
                    stdin.write(json.dumps({"argv": list(argv), "env": dict(env)}) + "\n")
                stdin.flush()
            except BrokenPipeError:
                pass  # the worker died; _read says why

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        replies = [self._read() for _ in requests]
        writer.join()
        return replies

    def rehearse(self, megatron: Mapping[str, Any], env: Mapping[str, str], *, te_here: bool = False) -> Rehearsal:
        from launcher.pipeline.command import script_args

        settings, not_rehearsed = tiny_settings(megatron, te_here=te_here)
        reply = self.rehearse_many([(script_args(settings), env)])[0]
        return verdict(reply, not_rehearsed)


def verdict(reply: Mapping[str, Any], not_rehearsed: Sequence[str]) -> Rehearsal:
    if "fatal" in reply:
        return Rehearsal(False, "worker", str(reply["fatal"]), not_rehearsed=tuple(not_rehearsed))
    return Rehearsal(bool(reply["ok"]), reply["stage"], reply["error"], reply.get("where", ""),
                     float(reply.get("seconds", 0.0)), dict(reply.get("facts", {})), tuple(not_rehearsed),
                     reply.get("traceback", ""))


def rehearse_job(job: Any, env: Mapping[str, str]) -> Rehearsal:
    """Rehearse a resolved job here. Where its target has Transformer Engine or apex and this machine lacks them,
    the launcher's own settings for a target without them are applied (kernels.fallbacks: the local
    implementation, the SDPA spec, apex's fusions off), and the rehearsal says so. A missing checkout or Megatron
    is a rehearsal not run, with its fix."""
    megatron, notes = settings_here(job)
    absent = packages_absent_here(job)
    if absent:  # the target's (declared), not this machine's: building the model here would only crash on them
        return Rehearsal(False, "setup", "this machine lacks what the job needs: " + "; ".join(absent),
                         not_rehearsed=tuple(notes))
    try:
        with Rehearser(Path(job.megatron_path)) as worker:
            result = worker.rehearse(megatron, env)
    except UserError as exc:
        problem = exc.problems[0]
        return Rehearsal(False, "setup", f"{problem.message} (hint: {problem.hint})" if problem.hint else
                         problem.message, not_rehearsed=tuple(notes))
    return replace(result, not_rehearsed=(*notes, *result.not_rehearsed))


def settings_here(job: Any) -> tuple[dict[str, Any], list[str]]:
    """The job's Megatron settings as this machine can build them: where its target has Transformer Engine or apex
    and this machine lacks them, the launcher's own settings for a target without them, and a note saying so."""
    from launcher.megatron.pin import detect_kernels
    from launcher.pipeline import kernels as kernel_rules

    te_here, apex_here = detect_kernels()
    kernels = job.kernels
    here = replace(kernels, transformer_engine=kernels.transformer_engine and te_here, apex=kernels.apex and apex_here)
    megatron = dict(job.megatron)
    notes = []
    if (here.transformer_engine, here.apex) != (kernels.transformer_engine, kernels.apex):  # the rest is no kernel
        missing = [name for name, target, local in (("Transformer Engine", kernels.transformer_engine, te_here),
                                                     ("NVIDIA apex", kernels.apex, apex_here)) if target and not local]
        notes.append(f"{' and '.join(missing)} (the target's, not installed here): rehearsed with the settings the "
                     "launcher gives a target without them")
        if megatron.get("transformer_impl") == "transformer_engine" and not here.transformer_engine:
            del megatron["transformer_impl"]
        megatron.update(kernel_rules.fallbacks(megatron, here))
    return megatron, notes


# The requirement rows whose package the rehearsal itself imports (it builds the model and the optimizer and takes
# steps; its checkpoint, where it saves one, is written synchronously by Megatron's own writer, never an async or
# nvrx one; it reads mock data with a NullTokenizer and starts no RL or logging services).
# The partial distributed optimizer's groups (einops) are built where the layout has them (DP > 1: the layout
# rehearsal); context parallelism's hierarchical groups are not (it is rehearsed at CP 1).
REHEARSAL_IMPORTS = frozenset({"emerging-optimizer", "partial-distributed-optimizer-einops"})


def packages_absent_here(job: Any) -> list[str]:
    """The requirement table's Python packages the rehearsal of this job would import (on Megatron's effective
    settings) that this interpreter lacks, each as its one-line message."""
    from launcher.megatron import requirements
    from launcher.megatron.effective import effective_settings

    settings = effective_settings(job.megatron, job.layout.vpp).settings
    here = requirements.Inventory(te=False, apex=False, packages=requirements.packages_here())
    return [problem.message for row in requirements.applicable(settings, ["package"])
            if row.id in REHEARSAL_IMPORTS and not here.has(row)[0]
            for problem in [requirements.missing_problem(row, settings, job.megatron, None, " here")]]
