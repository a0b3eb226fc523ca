"""Rules that depend on the target machine: its environment variables, GPU generation and kernels (TE/apex);
and the settings Megatron's validate_args silently rewrites, said before launch.

Each rule mirrors the cited line of megatron/training/arguments.py (or the config dataclass) at 432d76b2b8bf.
`check(c, tp, cp)` takes layout's _Checker: it reads settings through c.arg and reports through c.fail and
c.warnings, so every problem still arrives in one list.
"""

from __future__ import annotations

from typing import Any

from launcher.inside.megatron_ext import FAST_OPS_ENV, FP8_PACKAGE, FP8_RECIPES_WITHOUT_TE, SDPA_SPEC_FAST, selected_ops
from launcher.inside.megatron_ext.compiled_coverage import compiled_layer_gaps
from launcher.megatron import args as megatron_args
from launcher.megatron import requirements
from launcher.megatron.target import capability
from launcher.pipeline import attention_env, cuda_graph_rules, spec_rules
from launcher.pipeline.divisors import divisors
from launcher.pipeline.environment import CONNECTIONS, uses_fsdp
from launcher.pipeline.feature_settings import drop_hint, with_drops

DETERMINISTIC_NCCL_ALGOS = ("Tree", "Ring", "CollnetDirect", "CollnetChain", "^NVLS")  # arguments.py:1532


def env_value(c: Any, name: str) -> str | None:
    """What a rank sees: the job's environment (the launcher's exports, launcher.env, then the inherited one)."""
    value: str | None = c.env.get(name)
    return value


def gradient_accumulation_fusion(c: Any) -> bool:
    """As the job will see it: without apex the launcher turns it off unless the preset sets it (on the launcher's
    layer spec, environment.APEX_FREE then stands in for apex's module)."""
    if c.preset.megatron.get("gradient_accumulation_fusion") is not None:
        return bool(c.preset.megatron["gradient_accumulation_fusion"])
    return bool(c.arg("gradient_accumulation_fusion")) and c.apex


def check(c: Any, tp: int, cp: int, vpp: int | None) -> None:
    context_parallel_sizes(c, cp)
    connections(c, tp, cp)
    attention_variables(c)
    distributed_backend(c)
    fused_residual_rmsnorm(c)
    moe_overlap(c, vpp)
    flex_dispatcher(c, tp)
    torch_fsdp2(c)
    megatron_fsdp(c)
    deterministic(c)
    without_te(c)
    needs_of_the_table(c, tp, cp)
    silent_rewrites(c, tp)
    no_op_settings(c)
    full_iteration_cuda_graph(c)
    graph_register(c)
    cuda_graph_rules.check(c)
    spec_rules.check(c)


def full_iteration_cuda_graph(c: Any) -> None:
    """The pin's training loop wraps each step in FullCudaGraphWrapper(…, use_single_mempool=
    args.cuda_graph_use_single_mempool) (training.py:3285), but arguments.py keeps that TransformerConfig field off
    the command line (arguments.py:2061): the first step raises AttributeError (seen on an H200)."""
    if c.arg("cuda_graph_impl") == "full_iteration":
        c.fail("cuda_graph_impl full_iteration stops at the first training step at this Megatron pin: its training "
               "loop reads args.cuda_graph_use_single_mempool, which no flag defines (training.py:3285, "
               "arguments.py:2061)",
               "set cuda_graph_impl=none", stage="runtime")


def graph_register(c: Any) -> None:
    """arguments.py:1741: Transformer Engine's CUDA graphs with expandable segments need NCCL's graph registration
    off (an illegal memory access otherwise)."""
    if c.arg("cuda_graph_impl") == "transformer_engine" and \
            "expandable_segments:True" in (env_value(c, "PYTORCH_CUDA_ALLOC_CONF") or "") and \
            env_value(c, "NCCL_GRAPH_REGISTER") != "0":
        c.fail("cuda_graph_impl transformer_engine with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True needs "
               "NCCL_GRAPH_REGISTER=0: Megatron asserts it to avoid an illegal memory access (arguments.py:1741)",
               "set env.NCCL_GRAPH_REGISTER=0")


def as_seen(name: str, value: str | None) -> str:
    """NAME=value, or "NAME unset" (never NAME=None) for a variable no rank has."""
    return f"{name} unset" if value is None else f"{name}={value}"


def connections(c: Any, tp: int, cp: int) -> None:
    fsdp = uses_fsdp(c.arg)
    value = env_value(c, CONNECTIONS)
    if fsdp and value == "1":  # arguments.py:1027 (torch FSDP2), :1139 (Megatron-FSDP)
        which = "use_torch_fsdp2" if c.arg("use_torch_fsdp2") else "use_megatron_fsdp"
        c.fail(f"{which}: FSDP requires {CONNECTIONS} > 1 or unset, but it is 1",
               f"remove {CONNECTIONS} from launcher.env (or set it to e.g. 32)")
    arch = capability(c.preset.launcher.gpu)[0]
    if (tp > 1 or cp > 1) and arch < 10:  # arguments.py:1398-1425; Blackwell and later need nothing
        if fsdp:
            c.warnings.append(f"TP/CP > 1 with FSDP: Megatron warns that TP wants {CONNECTIONS}=1 while FSDP wants "
                              "it larger; expect slower overlap")
        elif c.arg("overlap_moe_expert_parallel_comm"):
            if value != "1":
                c.warnings.append(f"TP/CP > 1 with overlap_moe_expert_parallel_comm and {as_seen(CONNECTIONS, value)}: "
                                  "Megatron only warns; TP communication overlaps less")
        elif value != "1":
            c.fail(f"{as_seen(CONNECTIONS, value)} with TP {tp} / CP {cp} > 1 on {c.preset.launcher.gpu}",
                   f"Megatron asserts it is 1 on Hopper and older GPUs; remove the setting "
                   f"(or set env.{CONNECTIONS}=1)")


def attention_variables(c: Any) -> None:
    """NVTE_FLASH_ATTN / NVTE_FUSED_ATTN / NVTE_UNFUSED_ATTN as a rank sees them (the preset's launcher.env over the
    environment the launch inherits) against the effective attention_backend: the pin asserts they agree when it
    builds the model, on every layer spec (attention_env)."""
    backend = str(c.arg("attention_backend") or "auto")
    exported = c.env.exported

    def where(name: str) -> str:
        return "launcher.env" if name in exported else "inherited from the environment the launch starts in"

    found = attention_env.refusal(backend, lambda name: env_value(c, name), c.arg("spec"), where)
    if found is not None:
        c.fail(*found, stage="runtime")


def distributed_backend(c: Any) -> None:
    """--distributed-backend gloo (an older Megatron's CPU runs; the pin requires CUDA, initialize.py): the gradient
    all-reduce on CUDA tensors then fails at the first step on any world size ("ProcessGroupGloo::
    allreduce_coalesced: unsupported device type cuda", seen on one H200)."""
    backend = c.arg("distributed_backend")
    if backend is not None and backend != "nccl":
        c.fail(f"distributed_backend {backend}: the pin trains on CUDA tensors only, and gloo cannot reduce them "
               "(the first step fails: ProcessGroupGloo::allreduce_coalesced: unsupported device type cuda)",
               "set distributed_backend=nccl", stage="runtime")


def fused_residual_rmsnorm(c: Any) -> None:
    """transformer_config.py:1910-1914: the fusion of the residual into RMSNorm's backward needs RMSNorm."""
    normalization = c.arg("normalization") or "LayerNorm"
    if c.arg("fused_residual_rmsnorm") and normalization != "RMSNorm":
        c.fail(f"fused_residual_rmsnorm needs normalization RMSNorm, and this job's is {normalization} "
               "(TransformerConfig raises at model build)",
               "set fused_residual_rmsnorm=false (the model stays as it is), or set normalization=RMSNorm")


def context_parallel_sizes(c: Any, cp: int) -> None:
    """arguments.py:578-583 (the sizes may be given as one string "2 2"; the preset splits it)."""
    sizes = c.arg("hierarchical_context_parallel_sizes")
    if sizes and _product(sizes) != cp:
        c.fail(f"hierarchical_context_parallel_sizes {' · '.join(map(str, sizes))} = {_product(sizes)} must "
               f"multiply to context_parallel_size {cp}")
    if "a2a+p2p" in (c.arg("cp_comm_type") or []) and not sizes:
        c.fail("cp_comm_type a2a+p2p needs hierarchical_context_parallel_sizes", "e.g. \"2 2\" for CP 4")


def _product(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def flex_dispatcher(c: Any, tp: int) -> None:
    """The flex token dispatcher's DeepEP backend exchanges tokens over the TP×EP group: Megatron asserts that group
    has more than one rank when it builds the MoE layer (token_dispatcher.py:1422)."""
    ep = c.arg("expert_model_parallel_size") or 1
    if not c.arg("num_experts") or c.arg("moe_token_dispatcher_type") != "flex":
        return
    # the old flag names DeepEP on its own: leaving the flex dispatcher leaves it behind unless the hint drops it
    drop_deepep = " --set moe_enable_deepep=false" if c.arg("moe_enable_deepep") else ""
    if (c.arg("moe_flex_dispatcher_backend") == "deepep" or c.arg("moe_enable_deepep")) and tp * ep <= 1:
        c.fail(f"moe_token_dispatcher_type flex with the DeepEP backend at TP {tp} · EP {ep}: Megatron asserts "
               "\"DeepEP dispatcher requires TPxEP > 1\" when it builds the MoE layer (token_dispatcher.py:1422)",
               f"set moe_token_dispatcher_type=alltoall{drop_deepep} (at TP·EP 1 no token leaves its GPU), or "
               "raise expert_model_parallel_size", stage="runtime")


def moe_overlap(c: Any, vpp: int | None) -> None:
    """TransformerConfig.__post_init__, transformer_config.py:2386-2433."""
    if not c.arg("overlap_moe_expert_parallel_comm"):
        return
    what = "overlap_moe_expert_parallel_comm"
    if c.arg("pipeline_model_parallel_size") > 1 and vpp is None:
        c.fail(f"{what} with PP > 1 needs a virtual pipeline",
               f"set {what}=false, or set num_virtual_stages_per_pipeline_rank")
    if c.arg("expert_model_parallel_size") <= 1:  # it overlaps the experts' all-to-all, which EP 1 does not have
        c.fail(f"{what} needs expert parallelism (expert_model_parallel_size > 1)",
               f"set {what}=false (at EP 1 there is no expert all-to-all to overlap), or raise "
               "expert_model_parallel_size")
    if c.arg("moe_token_dispatcher_type") not in ("alltoall", "flex"):
        c.fail(f"{what} needs moe_token_dispatcher_type alltoall or flex, got {c.arg('moe_token_dispatcher_type')}",
               f"set {what}=false, or moe_token_dispatcher_type=alltoall")
    if c.arg("recompute_granularity") == "full" or c.arg("recompute_method") is not None or \
            c.arg("recompute_num_layers") is not None:
        c.fail(f"{what} cannot be combined with full recomputation / recompute_method / recompute_num_layers",
               f"set {what}=false")
    if not (c.arg("bf16") or c.arg("fp16")):
        c.fail(f"{what} needs bf16 or fp16", f"set {what}=false, or bf16=true")
    if c.arg("moe_shared_expert_overlap"):
        c.fail(f"{what} cannot be combined with moe_shared_expert_overlap", f"set {what}=false")
    mtp = c.arg("mtp_num_layers")
    if mtp not in (None, 1):
        c.fail(f"{what} supports at most one MTP layer, got mtp_num_layers {mtp}", f"set {what}=false")


def torch_fsdp2(c: Any) -> None:
    """arguments.py:1010-1027."""
    if not c.arg("use_torch_fsdp2"):
        return
    what = "use_torch_fsdp2"
    if c.arg("pipeline_model_parallel_size") != 1:
        c.fail(f"{what} does not support pipeline parallelism (PP {c.arg('pipeline_model_parallel_size')})",
               "set pipeline_model_parallel_size=1")
    if c.arg("expert_model_parallel_size") != 1:
        c.fail(f"{what} does not support expert parallelism", "set expert_model_parallel_size=1")
    if c.arg("use_distributed_optimizer"):
        c.fail(f"{what} does not work with Megatron's distributed optimizer",
               f"{with_drops('set use_distributed_optimizer=false', c.arg)} (FSDP2 shards the optimizer itself)")
    if gradient_accumulation_fusion(c):
        c.fail(f"{what} does not support gradient accumulation fusion (on by default with apex)",
               "set gradient_accumulation_fusion=false (--no-gradient-accumulation-fusion)")
    if c.arg("ckpt_format") not in ("torch_dist", "torch_dcp"):
        c.fail(f"{what} needs ckpt_format torch_dist or torch_dcp, got {c.arg('ckpt_format')}",
               "set ckpt_format=torch_dist")
    if not c.arg("untie_embeddings_and_output_weights"):
        c.fail(f"{what} requires untie_embeddings_and_output_weights", "set untie_embeddings_and_output_weights=true")
    if c.arg("fp16"):
        c.fail(f"{what} does not support fp16 yet", "use bf16")


def megatron_fsdp(c: Any) -> None:
    """arguments.py:1107-1160 and the checkpoint-format checks at :1497-1508."""
    fsdp = c.arg("use_megatron_fsdp")
    fmt = c.arg("ckpt_format")
    if fsdp:
        if c.arg("optimizer") not in ("sgd", "adam"):
            # the optimizer is the run's numerics, FSDP only where its states live: the first way out keeps it
            back = " --set ckpt_format=torch_dist" if fmt == "fsdp_dtensor" else ""  # FSDP's own format goes too
            c.fail(f"use_megatron_fsdp does not support the {c.arg('optimizer')} optimizer yet",
                   f"--set use_megatron_fsdp=false{back}, or --set optimizer=adam")
        if c.arg("data_parallel_sharding_strategy") == "optim_grads_params" and \
                c.arg("check_weight_hash_across_dp_replicas_interval") is not None:
            c.fail("check_weight_hash_across_dp_replicas_interval is not supported with optim_grads_params",
                   "set check_weight_hash_across_dp_replicas_interval=null, or data_parallel_sharding_strategy="
                   "optim_grads")
        if fmt != "fsdp_dtensor":
            c.fail(f"use_megatron_fsdp requires ckpt_format fsdp_dtensor, got {fmt}", "set ckpt_format=fsdp_dtensor")
        if c.arg("init_model_with_meta_device") and c.arg("data_parallel_sharding_strategy") == "no_shard":
            c.fail("init_model_with_meta_device is not supported with data_parallel_sharding_strategy no_shard",
                   "set init_model_with_meta_device=false")
    if c.arg("fsdp_manual_registration") and not fsdp:
        c.fail("fsdp_manual_registration needs use_megatron_fsdp", "set fsdp_manual_registration=false")
    if fmt == "fsdp_dtensor" and not fsdp:
        fsdp_can = env_value(c, CONNECTIONS) != "1"  # Megatron-FSDP refuses CUDA_DEVICE_MAX_CONNECTIONS=1
        c.fail("ckpt_format fsdp_dtensor needs use_megatron_fsdp",
               "set ckpt_format=torch_dist (Megatron's default format)" + (", or use_megatron_fsdp=true" if fsdp_can
                                                                          else ""))
    if fmt == "torch_dcp":
        if not c.arg("use_torch_fsdp2"):
            c.fail("ckpt_format torch_dcp needs use_torch_fsdp2", "set ckpt_format=torch_dist")
        if c.arg("tensor_model_parallel_size") > 1 or c.arg("pipeline_model_parallel_size") > 1:
            c.fail("ckpt_format torch_dcp is not supported with TP or PP > 1", "set ckpt_format=torch_dist")


def deterministic(c: Any) -> None:
    """arguments.py:1527-1536."""
    if not c.arg("deterministic_mode"):
        return
    if c.arg("use_flash_attn"):
        c.fail("deterministic_mode cannot use flash attention", "drop use_flash_attn")
    if c.arg("cross_entropy_loss_fusion"):
        c.fail("deterministic_mode cannot use cross_entropy_loss_fusion (not deterministic)",
               "set cross_entropy_loss_fusion=false")
    algo = env_value(c, "NCCL_ALGO")
    if algo not in DETERMINISTIC_NCCL_ALGOS:
        c.fail(f"deterministic_mode needs NCCL_ALGO in {', '.join(DETERMINISTIC_NCCL_ALGOS)}, got {algo}",
               "e.g. --set env.NCCL_ALGO=Tree")


def without_te(c: Any) -> None:
    """What a target without Transformer Engine (or apex) cannot run, said before launch."""
    rope = c.arg("position_embedding_type") == "rope" or c.arg("use_rotary_position_embeddings")
    if not c.te and rope and c.preset.megatron.get("apply_rope_fusion") is True:
        # transformer_config.py:1947 (the launcher turns it off itself unless the preset insists)
        c.fail("apply_rope_fusion needs Transformer Engine's fused RoPE, which the target lacks",
               "drop apply_rope_fusion (the launcher then adds --no-rope-fusion)")
    if c.arg("cross_entropy_loss_fusion") and c.arg("cross_entropy_fusion_impl") == "te" and not c.te:
        # language_module.py:179, at the first step (seen: gpt3_15b_8t_release_gb200 with its TP-overlap hint taken)
        c.fail("cross_entropy_fusion_impl te needs Transformer Engine's fused cross entropy, which the target lacks: "
               "Megatron raises 'Trying to use a TE block when it's not present' at the first step",
               "set cross_entropy_fusion_impl=native (Megatron's own fused cross entropy)", stage="runtime")
    if c.arg("num_experts") and c.arg("fp8") and not c.te:  # transformer_config.py:2057
        c.fail("MoE with fp8 needs Transformer Engine >= 1.7, which the target lacks",
               f"drop fp8 and what only it reads: {drop_hint('fp8', c.arg)}, or run in a Transformer Engine "
               "container (transformer_engine: true)")
    if c.arg("fp8") and not c.arg("num_experts") and not c.te:
        fp8_without_te(c)
    if c.arg("defer_embedding_wgrad_compute"):  # model_parallel_config.py:431-439
        if c.arg("pipeline_model_parallel_size") == 1:  # it defers into the pipeline's drain, which PP 1 has not
            c.fail("defer_embedding_wgrad_compute needs pipeline parallelism (PP > 1)",
                   "set defer_embedding_wgrad_compute=false (at PP 1 there is no pipeline flush to defer it to), "
                   "or raise pipeline_model_parallel_size")
        elif not gradient_accumulation_fusion(c):
            c.fail("defer_embedding_wgrad_compute needs gradient_accumulation_fusion" +
                   ("" if c.apex else ", which needs NVIDIA apex (the target has none, so the launcher turns it "
                                      "off)"), "set defer_embedding_wgrad_compute=false")
    recomputed = checkpointed_without_output(c.arg)
    if not c.te and "layernorm" in recomputed:
        rest = ",".join(m for m in recomputed if m != "layernorm")
        # an empty list is refused (recompute_modules needs a value): layernorm alone is dropped with the recompute
        off = " --set recompute_activations=false" if c.arg("recompute_activations") else ""
        drop = (f"drop layernorm from recompute_modules (--set recompute_modules=[{rest}])" if rest else
                f"drop the selective recompute of layernorm: --set recompute_granularity=null --set "
                f"recompute_modules=null{off}")
        c.fail(LAYERNORM_RECOMPUTE_WITHOUT_TE, f"{drop}, or run in a Transformer Engine container "
               "(transformer_engine: true)", stage="runtime")
    if c.arg("fine_grained_activation_offloading"):  # arguments.py:1716-1722
        if c.arg("transformer_impl") != "transformer_engine" or not c.te:
            c.fail("fine_grained_activation_offloading needs transformer_impl transformer_engine (and TE)",
                   "set fine_grained_activation_offloading=false")
        elif env_value(c, "NVTE_CPU_OFFLOAD_V1") != "1":
            c.fail("fine_grained_activation_offloading with TE >= 2.10 needs NVTE_CPU_OFFLOAD_V1=1",
                   "--set env.NVTE_CPU_OFFLOAD_V1=1")
    if c.preset.megatron.get("transformer_impl") == "transformer_engine" and not c.te:
        c.fail("transformer_impl transformer_engine, but the target has no Transformer Engine",
               "set transformer_engine: true for a TE container, or drop transformer_impl", stage="runtime")


# Megatron's output-discarding checkpoint at the pin (tensor_parallel/random.py:714, CheckpointWithoutOutput: `self.fp8
# = fp8 is not None`, whose default is False) always takes its FP8 branch, which reads TE's FP8GlobalStateManager.
# Selective recompute of "layernorm" checkpoints each norm so (transformer_layer.py:618, 754); with TE the input norm
# is fused into the next linear and its MoE norm finds TE's state; without TE every norm is its own module.
LAYERNORM_RECOMPUTE_WITHOUT_TE = (
    "recompute_modules layernorm needs Transformer Engine at the pin: Megatron's output-discarding checkpoint of "
    "the norms reads TE's FP8 state even without fp8 (tensor_parallel/random.py:714), so the first step raises "
    "\"NameError: name 'FP8GlobalStateManager' is not defined\" (random.py:667)")


def checkpointed_without_output(arg: Any) -> list[str]:
    """The selective-recompute modules of `arg` (a setting's reader), where the granularity is selective."""
    modules = arg("recompute_modules")
    if arg("recompute_granularity") != "selective" or not modules:
        return []
    return [str(m) for m in ([modules] if isinstance(modules, str) else modules)]


def fp8_without_te(c: Any) -> None:
    """Megatron's fp8 is Transformer Engine's (fp8_utils.py:680: a null context without it). Without TE the
    launcher's compiled layers run it with torchao's float8 matmul (inside/megatron_ext/float8.py); refused where
    they cannot, since the job would quietly train in bf16."""
    fmt, recipe = c.arg("fp8"), c.arg("fp8_recipe")
    what = f"fp8 {fmt} without Transformer Engine"
    otherwise = f"or run with Transformer Engine, or drop fp8 and what only it reads: {drop_hint('fp8', c.arg)}"
    if not c.torchao:
        c.fail(f"{what} runs through torchao's float8 training, which the target lacks",
               f"install torchao where the job runs (pip install torchao) and declare it where the launcher cannot "
               f"look (a container, a declared target): --set packages={FP8_PACKAGE}; {otherwise}", "launcher")
    arch = capability(c.preset.launcher.gpu)
    if arch < (8, 9):
        c.fail(f"{what}: float8 matmuls need compute capability 8.9 (Ada, Hopper) or newer; {c.preset.launcher.gpu} "
               f"has {arch[0]}.{arch[1]}", otherwise, "launcher")
    if str(recipe) not in FP8_RECIPES_WITHOUT_TE:
        c.fail(f"{what}: fp8_recipe {recipe} is Transformer Engine's; torchao runs dynamic scaling "
               f"({' or '.join(FP8_RECIPES_WITHOUT_TE)})", f"set fp8_recipe=tensorwise, {otherwise}", "launcher")
    if list(c.arg("spec") or []) != list(SDPA_SPEC_FAST):
        c.fail(f"{what} runs only on the launcher's SDPA fast path (its compiled layers), which this job does not "
               f"take (spec {' '.join(map(str, c.arg('spec') or [])) or 'none'}; the dry-run says why)", otherwise,
               "launcher")
        return
    fast_ops = env_value(c, FAST_OPS_ENV)
    try:
        without_layer = "layer" not in selected_ops(fast_ops)
    except ValueError:
        without_layer = False  # said by the checker's own rule
    if without_layer:
        c.fail(f"{what} runs in the compiled layers, which {FAST_OPS_ENV}={fast_ops} leaves out",
               f"add layer to {FAST_OPS_ENV} (or remove it), {otherwise}", "launcher")
    for reason in compiled_layer_gaps(c.arg):
        c.fail(f"{what} runs only in the launcher's compiled layers, which do not run {reason}: the layers would "
               "train in bf16", f"drop that setting, {otherwise}", "launcher")


def silent_rewrites(c: Any, tp: int) -> None:
    """Settings validate_args changes in place with at most a log line (launcher.megatron.effective): said here,
    for the settings the preset gave, so nobody is surprised."""
    if c.effective is not None:
        c.warnings.extend(c.effective.warnings(c.preset.megatron))
    if c.arg("mtp_hybrid_override_pattern") is not None:  # kept by validate_args without MTP layers; unused
        c.warnings.append("mtp_hybrid_override_pattern is ignored for GPT models")


def needs_of_the_table(c: Any, tp: int, cp: int) -> None:
    """The requirements table's rows the kernels, settings and layout decide (launcher.megatron.requirements);
    Python packages and apex's extensions are checked where they are installed: before a local launch, on each
    node at job start, and (packages) in --check against what the target declares."""
    settings = c.effective.settings if c.effective is not None else c.preset.effective()
    inventory = requirements.Inventory(te=c.te, apex=c.apex, te_version=c.te_version)
    for row in requirements.applicable(settings, ("te", "setting", "layout", "unsupported")):
        if row.enforced_by:
            continue  # a rule above says it in its own words
        condition = row.condition(settings, c.preset.megatron)
        if row.kind == "te":
            present, found = inventory.has(row)
            if not present:
                where = f"the target has {found}" if found else "the target lacks it"
                fix = with_drops(row.fix, c.arg)  # turning the feature off leaves nothing only it reads
                c.fail(f"{condition} needs {row.wanted()}, and {where} ({row.cite})",
                       f"{fix}; or use Transformer Engine >= {row.min_version}" if found else fix,
                       stage="runtime")
        elif row.kind == "setting":
            wrong = {dest: test for dest, test in row.needs["setting"].items()
                     if not requirements.holds(settings.get(dest), test)}
            fix = with_drops(row.fix, c.arg)  # moving a setting leaves nothing that only its old value reads
            if wrong and set(wrong) <= set(row.when):  # the setting itself is what Megatron refuses
                c.fail(f"{condition}: Megatron's validation refuses it ({row.cite}): {row.why}", fix)
            elif wrong:
                now = ", ".join(f"{dest} is {requirements.wanted_value(settings.get(dest))}" for dest in wrong)
                needed = " and ".join(f"{d} {requirements.wanted_value(v)}" for d, v in wrong.items())
                c.fail(f"{condition} needs {needed}, but {now} "
                       f"({row.cite}): {row.why}", fix)
        elif row.kind == "layout":
            distributed_optimizer_instances(c, row, condition, tp, cp)
        else:
            c.fail(f"{condition} cannot train at this Megatron pin ({row.cite}): {row.why}", row.fix, stage="runtime")


def _word(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def distributed_optimizer_instances(c: Any, row: Any, condition: str, tp: int, cp: int) -> None:
    """parallel_state.py: the instances split DP·CP (:829) and the expert data-parallel size (:1248)."""
    instances = c.arg("num_distributed_optimizer_instances")
    pp, ep = c.arg("pipeline_model_parallel_size"), c.arg("expert_model_parallel_size")
    etp = c.arg("expert_tensor_parallel_size") or tp
    if c.world % (tp * pp * cp) or c.world % (etp * ep * pp):
        return  # the world size rule already says why
    dp = c.world // (tp * pp * cp)
    expert_dp = c.world // (etp * ep * pp)
    if (dp * cp) % instances:
        c.fail(f"{condition} does not divide DP·CP = {dp}·{cp} = {dp * cp} ({row.cite})",
               f"use num_distributed_optimizer_instances in {divisors(dp * cp)}", stage="runtime")
    elif expert_dp % instances:
        c.fail(f"{condition} does not divide the expert data-parallel size {expert_dp} = world {c.world} / "
               f"(ETP·EP·PP = {etp}·{ep}·{pp}) (parallel_state.py:1248)",
               f"use num_distributed_optimizer_instances in {divisors(expert_dp)}", stage="runtime")



def no_op_settings(c: Any) -> None:
    """A switch the preset sets to Megatron's own default emits no flag (there is none to emit: e.g. only
    --no-ckpt-fully-parallel-save exists for ckpt_fully_parallel_save); say so rather than drop it silently."""
    catalog = megatron_args.catalog()
    for dest, value in c.preset.megatron.items():
        arg = catalog.get(dest)
        if arg is None or arg.kind not in ("true", "false") or value is None or bool(value) != bool(arg.default):
            continue
        if dest == "gradient_accumulation_fusion" and not c.apex:
            continue  # without apex it decides the launcher's own fallback (kernels.fallbacks), not a flag
        if arg.kind == "false":  # the only flags turn it off
            c.warnings.append(f"{dest}: {str(value).lower()} is Megatron's default and emits no flag "
                              f"(only {arg.flags[0]} exists)")
