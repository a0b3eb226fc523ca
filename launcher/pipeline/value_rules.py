"""Pre-launch rules on model and optimizer values that Megatron only finds at model build or the first step.

Each function takes the preset's `arg` (the value Megatron will see), `fail(message, hint, stage)` and whether TE
is available; layout.check calls them all. Megatron parses `--lr nan` or `--hidden-dropout 1.5` without complaint
and then trains on NaN or crashes in dropout; `--num-query-groups 3` with 16 heads fails only at the first forward.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from launcher.megatron import layer_pattern
from launcher.pipeline import cuda_graph_rules
from launcher.pipeline.divisors import divisors

Arg = Callable[[str], Any]
Fail = Callable[..., None]

# dest → what it is; each must lie in [0, 1].
PROBABILITIES = {
    "hidden_dropout": "a dropout probability",
    "attention_dropout": "a dropout probability",
    "lr_warmup_fraction": "a fraction of the LR decay",
    "rotary_percent": "a fraction of the head dimension",
    "optimizer_offload_fraction": "a fraction of the optimizer state",
}
# dest → (lowest allowed, exclusive?): finite numbers with a lower bound, each only when set.
POSITIVE = {"lr": (0.0, True), "min_lr": (0.0, False), "adam_eps": (0.0, True), "init_method_std": (0.0, True),
            "weight_decay": (0.0, False), "clip_grad": (0.0, False), "layernorm_epsilon": (0.0, True),
            "initial_loss_scale": (0.0, True), "loss_scale": (0.0, True), "min_loss_scale": (0.0, True),
            "decoupled_lr": (0.0, True), "decoupled_min_lr": (0.0, False), "start_weight_decay": (0.0, False),
            "end_weight_decay": (0.0, False), "lr_warmup_init": (0.0, False), "moe_aux_loss_coeff": (0.0, False)}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def value_ranges(arg: Arg, fail: Fail, te: bool = False) -> None:
    """Finite learning rates and scales, probabilities in [0, 1], Adam's betas in [0, 1)."""
    for dest, (low, exclusive) in POSITIVE.items():
        value = arg(dest)
        if not _number(value):
            continue
        bound = f"> {low:g}" if exclusive else f">= {low:g}"
        example = "1e-5" if dest.startswith("min") else "3e-4" if "lr" in dest else "1"
        if not math.isfinite(value):
            fail(f"{dest} is {value}: it must be a finite number {bound}",
                 f"set {dest} to a number, e.g. --set {dest}={example}", "runtime")
        elif value < low or (exclusive and value == low):
            fail(f"{dest} {value:g} must be {bound}", f"set {dest} to a value {bound}", "runtime")
    for dest, what in PROBABILITIES.items():
        value = arg(dest)
        if _number(value) and not (math.isfinite(value) and 0.0 <= value <= 1.0):
            fail(f"{dest} {value} is {what} and must lie in [0, 1]", f"e.g. --set {dest}=0.1", "runtime")
    for dest in ("adam_beta1", "adam_beta2"):
        value = arg(dest)
        if _number(value) and not (math.isfinite(value) and 0.0 <= value < 1.0):
            fail(f"{dest} {value} must lie in [0, 1)", f"e.g. --set {dest}=0.9", "runtime")


# float settings where an infinite value can mean "none" (a timeout, an interval, a wait): only NaN is refused there
UNBOUNDED_WORDS = ("timeout", "interval", "wait", "seconds", "delay")


def non_finite(arg: Arg, fail: Fail, te: bool = False) -> None:
    """Every float setting finite: Megatron's parser takes `nan` and `inf` for any of them (float('nan')), and a
    NaN RoPE factor or router coefficient trains on NaN from the first step. The settings value_ranges bounds are
    said there."""
    from launcher.megatron.args import catalog

    said = {*POSITIVE, *PROBABILITIES, "adam_beta1", "adam_beta2"}  # their single values: value_ranges
    for dest, spec in catalog().items():
        values = arg(dest) if spec.type == "float" else None
        if values is None or (dest in said and not isinstance(values, list)):
            continue
        for value in values if isinstance(values, list) else [values]:
            if not _number(value) or math.isfinite(value):
                continue
            if math.isinf(value) and any(word in dest for word in UNBOUNDED_WORDS):
                continue
            default = "unset" if spec.default is None else spec.default
            fail(f"{dest} is {value}: it must be a finite number (Megatron takes it and trains or runs on it)",
                 f"give {dest} a number, or remove it for Megatron's default ({default})", "runtime")
            break


def query_groups(arg: Arg, fail: Fail, te: bool = False) -> None:
    """Grouped-query attention: the heads split evenly into the groups (TransformerConfig / the first forward)."""
    if not arg("group_query_attention"):
        return
    heads, groups = arg("num_attention_heads"), arg("num_query_groups")
    if groups is None:
        fail("group_query_attention needs num_query_groups", "e.g. --set num_query_groups=4", "runtime")
        return
    if groups < 1:
        fail(f"num_query_groups must be at least 1, got {groups}", "", "runtime")
    elif heads and heads % groups:
        fits = divisors(heads)
        fail(f"num_attention_heads {heads} is not divisible by num_query_groups {groups}: every query group "
             "needs the same number of heads", f"use num_query_groups in {fits}", "runtime")


def experts(arg: Arg, fail: Fail, te: bool = False) -> None:
    """MoE expert counts: positive, at least the router's top-k; expert parallelism only with experts."""
    count, ep, topk = arg("num_experts"), arg("expert_model_parallel_size"), arg("moe_router_topk")
    if arg("moe_router_group_topk") and not arg("moe_router_num_groups"):  # transformer_config.py:2105-2110
        fail(f"moe_router_group_topk {arg('moe_router_group_topk')} without moe_router_num_groups: Megatron's "
             "TransformerConfig raises \"When using group limited routing, moe_router_num_groups must be "
             "specified\" (with or without experts)",
             "set moe_router_group_topk=null (no group-limited routing)")
    if count is None:
        if softmax_of_one_needed(arg, topk or 2):  # TransformerConfig checks the router of a dense model too
            fail("moe_router_topk 1 with the softmax score function needs moe_router_pre_softmax: Megatron's "
                 "TransformerConfig raises 'Please use --moe-router-pre-softmax when topk is 1' even without "
                 "experts", "set moe_router_topk=null (a model without experts routes nothing)")
        return
    if count < 1:
        dense = "leave num_experts unset (a dense model)"
        fail(f"num_experts must be at least 1, got {count}" +
             (f" (with expert_model_parallel_size {ep})" if ep and ep > 1 else ""),
             f"{dense}" + (" and expert_model_parallel_size=1" if ep and ep > 1 else "") +
             ", or set a positive number of experts", "runtime")
        return
    if arg("add_bias_linear") and not arg("moe_grouped_gemm") and (not te or fused_bias_activation(arg)):
        # Megatron's SequentialMLP passes each expert its router probabilities; with linear biases every path
        # fails at the first step (measured on an H200, no TE): fused bias-GeLU "Only support fusion of swiglu
        # and quick_gelu with per_token_scale", unfused "a view ... is being modified inplace" (mlp.py's bias
        # add), SwiGLU "Bias is not supported for weighted swiglu fusion". With TE the fused paths are the same
        # Megatron code (mlp.py:270-291; TE's linears do not change them).
        fail(f"MoE experts ({count}) with linear biases fail at the first training step (Megatron's sequential "
             "experts scale each expert's output by its router probability, which its bias paths cannot)",
             "set add_bias_linear=false (--disable-bias-linear)", "runtime")
    balancing = arg("moe_router_load_balancing_type")
    balancing = [balancing] if isinstance(balancing, str) else list(balancing or [])
    capacity = arg("moe_expert_capacity_factor")
    if _number(capacity) and capacity >= 0 and "sinkhorn" in balancing:
        # TransformerConfig (transformer_config.py:1481): token dropping needs the router's own balancing losses
        kept = [b for b in balancing if b != "sinkhorn"] or ["aux_loss"]
        fail(f"moe_expert_capacity_factor {capacity} with moe_router_load_balancing_type sinkhorn: Megatron's "
             "TransformerConfig raises \"moe_expert_capacity_factor only works with aux_loss, seq_aux_loss, "
             "global_aux_loss or none load balancing\"",
             f"set moe_expert_capacity_factor=null (no token dropping), or moe_router_load_balancing_type="
             f"{' '.join(kept)}")
    groups, group_topk = arg("moe_router_num_groups"), arg("moe_router_group_topk")
    if _number(groups) and groups < 0:  # 0, like unset, means no groups to Megatron
        fail(f"moe_router_num_groups must be at least 1, got {groups}", "set moe_router_num_groups=null (no groups)")
    elif groups and count % groups:  # TransformerConfig: the experts split evenly into the router's groups
        divides = divisors(count)
        near = max(g for g in divides if g <= groups)
        fail(f"num_experts {count} is not divisible by moe_router_num_groups {groups}",
             f"set moe_router_num_groups={near}" + (f" --set moe_router_group_topk={near}"
                                                   if group_topk is not None and group_topk > near else "")
             + f" (any of {divides})")
    elif groups and group_topk is not None and group_topk > groups:
        fail(f"moe_router_group_topk {group_topk} is more than moe_router_num_groups {groups}",
             f"e.g. --set moe_router_group_topk={groups}")
    if topk is not None and not 1 <= topk <= count:
        fits = min(2, count)
        fail(f"moe_router_topk {topk} must lie between 1 and num_experts {count}",
             f"e.g. --set moe_router_topk={fits}" + (" --set moe_router_pre_softmax=true"
                                                     if softmax_of_one_needed(arg, fits) else ""), "runtime")
        return
    if softmax_of_one_needed(arg, topk or 2):
        # transformer_config.py:2091-2099: a softmax over the one chosen expert's score has a zero gradient
        fail("moe_router_topk 1 with the softmax score function needs moe_router_pre_softmax (the softmax over all "
             "experts before choosing one): Megatron's TransformerConfig raises 'Please use --moe-router-pre-softmax "
             "when topk is 1' at model build", "set moe_router_pre_softmax=true", "runtime")
    padded_capacity(arg, fail, count, topk or 2, te)


def softmax_of_one_needed(arg: Arg, topk: int) -> bool:
    """Megatron would take a softmax over the score of one expert (top-1, softmax scores, after selection)."""
    return (topk == 1 and (arg("moe_router_score_function") or "softmax") == "softmax"
            and not arg("moe_router_pre_softmax") and arg("moe_router_load_balancing_type") != "sinkhorn")


def attention_mask(arg: Arg, fail: Fail, te: bool = False) -> None:
    """reset_attention_mask changes the mask the dataloader builds; without one Megatron silently ignores it."""
    if arg("reset_attention_mask") and arg("create_attention_mask_in_dataloader") is False:
        fail("reset_attention_mask needs the attention mask built in the dataloader, but "
             "create_attention_mask_in_dataloader is false (Megatron would ignore the reset without a word)",
             "remove create_attention_mask_in_dataloader=false (the launcher keeps the mask for this setting)",
             "runtime")


def no_rope_layers(arg: Arg, fail: Fail, te: bool = False) -> None:
    """no_rope_freq N skips RoPE in every N-th layer, a pattern names each layer: TransformerConfig asserts that N
    divides num_layers, or that the pattern has num_layers entries."""
    freq, layers = arg("no_rope_freq"), arg("num_layers")
    every = int(freq) if isinstance(freq, str) and freq.isascii() and freq.isdigit() and len(freq) <= 18 else freq
    if isinstance(every, str) and "[" in every and layers:
        try:
            pattern = layer_pattern.parse(every)
        except ValueError:
            return  # the catalog's type check says what is wrong with it
        if isinstance(pattern, list) and len(pattern) != layers:
            fail(f"no_rope_freq lists {len(pattern)} layers, and the model has num_layers {layers}",
                 f"set no_rope_freq=[0]*{layers - 1}+[1] (one entry per layer: 0 keeps RoPE, 1 skips it)")
        return
    if isinstance(every, int) and not isinstance(every, bool) and every > 0 and layers and layers % every:
        fits = divisors(layers)
        near = max(n for n in fits if n <= every)
        fail(f"no_rope_freq {every} does not divide num_layers {layers}", f"set no_rope_freq={near} (any of "
             f"{fits}), or give a per-layer pattern such as [0]*3+[1]")


def bf16_end_layers(arg: Arg, fail: Fail, te: bool = False) -> None:
    """FP8 with first_last_layers_bf16: TransformerConfig takes the BF16 layers at each end from one pipeline
    stage, so each count lies in [0, num_layers / PP]."""
    if not arg("first_last_layers_bf16") or arg("fp8") is None:
        return
    most = arg("num_layers") // max(1, arg("pipeline_model_parallel_size"))
    for dest in ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"):
        value = arg(dest)
        if _number(value) and not 0 <= value <= most:
            fail(f"{dest} {value} must lie between 0 and the layers of one pipeline stage ({most})",
                 f"set {dest}={min(max(0, value), most)}")


ASYNC_FORMATS = ("torch_dist", "torch_dcp", "fsdp_dtensor")


def async_save(arg: Arg, fail: Fail, te: bool = False) -> None:
    """--async-save in the torch format: save_checkpoint raises NotImplementedError at the first save. (Without a
    persistent writer validate_args turns it off: a warning of target_rules.)"""
    if arg("async_save") and arg("ckpt_format") not in ASYNC_FORMATS:
        fail(f"async_save with ckpt_format {arg('ckpt_format')}: Megatron saves asynchronously only in "
             f"{', '.join(ASYNC_FORMATS)} and raises at the first save", "set async_save=false, or ckpt_format "
             "torch_dist", "runtime")


def attention_backend_local(arg: Arg, fail: Fail, te: bool = False) -> None:
    """--attention-backend local names Megatron's own local layer spec: validate_args asserts the spec is it
    (arguments.py:430); the launcher's SDPA spec, or TE's (no --spec), is another."""
    spec = arg("spec")
    spec = spec.split() if isinstance(spec, str) else list(spec or [])
    if arg("attention_backend") == "local" and not (spec and spec[0] == "local"):
        fail(f"attention_backend local with {'--spec ' + ' '.join(spec) if spec else 'no --spec'}: the pinned "
             "Megatron's validate_args asserts \"--attention-backend local is only supported with --spec local\" "
             "(arguments.py:430)", "set attention_backend=auto (the job's layer spec chooses its attention)",
             "validate")


# Old flags the pin still parses only to stop on them in validate_args (arguments.py at the pin): dest → (how it
# stops, Megatron's own message, the settings that mean what the flag meant).
STOPPED_BY_VALIDATE_ARGS = {
    "checkpoint_activations": ("calls exit(), so the job ends with status 0 before any training",
                               "--checkpoint-activations is no longer valid, use --recompute-activations, or, for more "
                               "control, --recompute-granularity and --recompute-method.",
                               "--set checkpoint_activations=false --set recompute_activations=true (Megatron's "
                               "replacement: selective recompute), or --set checkpoint_activations=false --set "
                               "recompute_granularity=full --set recompute_method=uniform --set recompute_num_layers=1 "
                               "(what the flag did in Megatron ≤ v2.6)"),
    "batch_size": ("asserts", "--batch-size argument is no longer valid, use --micro-batch-size instead",
                   "--set batch_size=null --set micro_batch_size={value} (the old per-GPU batch)"),
    "warmup": ("asserts", "--warmup argument is no longer valid, use --lr-warmup-fraction instead",
               "--set warmup=null, and lr_warmup_fraction=F or lr_warmup_iters=N for a warmup"),
    "model_parallel_size": ("asserts", "--model-parallel-size is no longer valid, use --tensor-model-parallel-size "
                                       "instead",
                            "--set model_parallel_size=null --set tensor_model_parallel_size={value}"),
}


def _recompute_the_graphs_take(arg: Arg, hint: str) -> str:
    """--checkpoint-activations' replacements, less those the job's per-layer CUDA graphs refuse (a graphed recompute
    cannot redraw its dropout; full recompute needs the full-iteration graph); none left: no recompute at all."""
    selective = {"checkpoint_activations": False, "recompute_granularity": "selective", "recompute_method": None,
                 "recompute_num_layers": None}
    full = {"checkpoint_activations": False, "recompute_granularity": "full", "recompute_method": "uniform",
            "recompute_num_layers": 1}
    ways = hint.split(", or ")
    kept = [way for way, changes in zip(ways, (selective, full), strict=True)
            if not cuda_graph_rules.refuses(arg, changes)]
    if kept:
        return ", or ".join(kept)
    return ("--set checkpoint_activations=false (no recompute: this job's per-layer CUDA graphs take neither "
            "Megatron's replacement, selective recompute, nor full recompute)")


def stopped_by_validate_args(arg: Arg, fail: Fail, te: bool = False) -> None:
    """A flag of an older Megatron that the pin parses and then stops on (exit() or an assert in validate_args)."""
    for dest, (how, message, hint) in STOPPED_BY_VALIDATE_ARGS.items():
        if arg(dest) is not None and arg(dest) is not False:  # validate_args asserts `is None`: 0 is set too
            if dest == "checkpoint_activations":  # selective recompute takes no method or layer count
                left = "".join(f" --set {d}=null" for d in ("recompute_method", "recompute_num_layers")
                               if arg(d) is not None)
                hint = hint.replace("recompute_activations=true", f"recompute_activations=true{left}", 1)
                if arg("recompute_activations"):  # it would turn the full recompute of the other way selective
                    hint = hint.replace("recompute_granularity=full", "recompute_activations=false --set "
                                        "recompute_granularity=full", 1)
                hint = _recompute_the_graphs_take(arg, hint)
            batch = arg("global_batch_size")
            if dest == "batch_size" and _number(batch) and _number(arg(dest)) and arg(dest) > 0 \
                    and batch % arg(dest):  # the old per-GPU batch does not divide the global one: let it follow
                hint = hint.replace(" (the old", " --set global_batch_size=null (the old", 1)
            value = arg(dest)
            heads = arg("num_attention_heads")
            if dest in ("batch_size", "model_parallel_size") and not (
                    _number(value) and value >= 1 and value == int(value)
                    and (dest == "batch_size" or (_number(heads) and heads % value == 0))):
                # an old value that no size takes (0, negative, a TP that does not divide the heads): drop it only
                hint = f"--set {dest}=null (its value {value} is no size the pin's setting takes)"
            fail(f"{dest} is a flag of an older Megatron: the pinned Megatron's validate_args {how}: \"{message}\"",
                 hint.format(value=value), "validate")


def negative_counts(arg: Arg, fail: Fail, te: bool = False) -> None:
    """Counts whose negative value Megatron's truthiness tests take as set (`if args.mtp_num_layers:`) and that
    then size lists and models with it."""
    for dest in ("mtp_num_layers",):
        value = arg(dest)
        if _number(value) and value < 0:
            fail(f"{dest} must be 0 or more, got {value}", f"set {dest}=null", "validate")


def activation_fusion(arg: Arg, fail: Fail, te: bool = False) -> None:
    """TransformerConfig's checks of the fused bias-activation (transformer_config.py:1893-1905): Megatron fuses
    the bias into the activation with bias_swiglu_fusion under SwiGLU, else bias_gelu_fusion."""
    fused = arg("bias_swiglu_fusion") if arg("swiglu") else arg("bias_gelu_fusion")
    which = "bias_swiglu_fusion" if arg("swiglu") else "bias_gelu_fusion"
    offset = arg("glu_linear_offset")
    if fused and _number(offset) and offset != 0 and not arg("quick_geglu"):
        fail(f"glu_linear_offset {offset} with {which}: Megatron's TransformerConfig raises \"When "
             "bias_activation_fusion is True and glu_linear_offset is non-zero, activation function must be "
             "quick_gelu\"", "set glu_linear_offset=null (no offset)")
    if fused and arg("use_te_activation_func"):
        fail(f"use_te_activation_func with {which}: Megatron's TransformerConfig raises \"bias_activation_fusion "
             "and use_te_activation_func cannot be both true\"", "set use_te_activation_func=false")


def cpu_offloading(arg: Arg, fail: Fail, te: bool = False) -> None:
    """validate_args turns CPU offloading on for cpu_offloading_num_layers > 0 (arguments.py:1730); TransformerConfig
    then wants fewer offloaded layers than the model has (transformer_config.py:1529)."""
    count, layers = arg("cpu_offloading_num_layers"), arg("num_layers")
    if not (_number(count) and _number(layers)) or count <= 0:  # 0: no offloading (Megatron's default)
        return
    if arg("recompute_granularity") is not None:  # transformer_config.py:1525
        fail(f"cpu_offloading_num_layers {count} with recompute_granularity {arg('recompute_granularity')}: "
             "Megatron's TransformerConfig raises \"CPU offloading does not work when activation recomputation is "
             "enabled\"", "set cpu_offloading_num_layers=0 (no offloading), or recompute_granularity=null --set "
             "recompute_method=null --set recompute_num_layers=null")
    if (arg("pipeline_model_parallel_size") or 1) > 1:  # transformer_config.py:1520
        fail(f"cpu_offloading_num_layers {count} with pipeline_model_parallel_size "
             f"{arg('pipeline_model_parallel_size')}: Megatron's TransformerConfig raises \"Currently there is no "
             "support for Pipeline parallelism with CPU offloading\"",
             "set cpu_offloading_num_layers=0 (no offloading)")
    if count >= layers:
        fail(f"cpu_offloading_num_layers {count} with num_layers {layers}: Megatron's TransformerConfig raises "
             f"\"CPU offloading can be done only for layers less than {layers}\"",
             f"set cpu_offloading_num_layers={layers - 1}" if layers > 1 else "set cpu_offloading_num_layers=0")


def autoresume(arg: Arg, fail: Fail, te: bool = False) -> None:
    """--adlr-autoresume imports NVIDIA's internal userlib.auto_resume; without it Megatron prints and exit()s
    (global_vars.py:298), status 0, before any training."""
    if arg("adlr_autoresume"):
        fail("adlr_autoresume needs userlib.auto_resume (NVIDIA's internal cluster library): without it Megatron "
             "calls exit() before any training (global_vars.py:298)", "set adlr_autoresume=false", "validate")


def xavier_uniform_init(arg: Arg, fail: Fail, te: bool = False) -> None:
    """--init-method-xavier-uniform: the pin still parses it, and core_transformer_config_from_args then passes
    `scaled_init_method` (argument_utils.py:324), a keyword the pin's TransformerConfig no longer has (it became
    output_layer_init_method): a TypeError before the model is built, on every job that sets it."""
    if arg("init_method_xavier_uniform"):
        fail("init_method_xavier_uniform: the pinned Megatron builds its config with scaled_init_method=xavier_"
             "uniform_ (argument_utils.py:324), a keyword its TransformerConfig no longer takes: \"TypeError: "
             "TransformerConfig.__init__() got an unexpected keyword argument 'scaled_init_method'\" at start-up",
             "set init_method_xavier_uniform=false (the pin's command line then initializes from a normal "
             "distribution with init_method_std; Xavier init is only reachable from Python, through "
             "TransformerConfig.init_method and output_layer_init_method)", "runtime")


RULES = (stopped_by_validate_args, negative_counts, activation_fusion, cpu_offloading, autoresume, xavier_uniform_init,
         attention_backend_local, value_ranges, non_finite, query_groups, experts, attention_mask, async_save,
         no_rope_layers, bf16_end_layers)


def fused_bias_activation(arg: Arg) -> bool:
    """Whether an expert's MLP takes Megatron's fused bias-activation path with the router probabilities
    (mlp.py:270-291), which is the same with or without Transformer Engine: TE's own activation
    (use_te_activation_func) is another path; Megatron fuses SwiGLU with --bias-swiglu-fusion and every other
    activation with --bias-gelu-fusion (argument_utils.py:309-314), both on by default."""
    if arg("use_te_activation_func") or arg("quick_geglu"):  # quick-GeGLU's weighted fusion: not seen failing
        return False
    return bool(arg("bias_swiglu_fusion") if arg("swiglu") else arg("bias_gelu_fusion"))


def check_values(arg: Arg, fail: Fail, te: bool = False) -> None:
    """Every rule; `te`: Transformer Engine is available to the training processes."""
    for rule in RULES:
        rule(arg, fail, te)


def capacity_past_tokens(topk: int, factor: float, experts: int) -> bool:
    """Padded to capacity, each expert takes tokens × topk / experts × factor: more than the tokens when this holds."""
    return topk * factor > experts


def padded_capacity(arg: Arg, fail: Fail, count: int, topk: int, te: bool) -> None:
    """Padding to capacity: each expert's capacity is tokens × topk / experts × the factor; past the tokens (topk
    × factor > experts) Megatron's unfused permute fails at the first step (moe_utils.py:407 views fewer sorted
    indices than experts × capacity). Transformer Engine's fused permute (moe_permute_fusion) is not that path."""
    factor = arg("moe_expert_capacity_factor")
    if not arg("moe_pad_expert_input_to_capacity") or not _number(factor) or factor < 0 \
            or not capacity_past_tokens(topk, factor, count) or (te and arg("moe_permute_fusion")):
        return
    fits = math.floor(count / topk * 100) / 100
    fail(f"moe_pad_expert_input_to_capacity with moe_expert_capacity_factor {factor}, moe_router_topk {topk} and "
         f"num_experts {count}: each expert's capacity ({topk} × {factor} / {count} of the tokens) is more than the "
         "tokens, and Megatron's permute fails at the first training step (\"shape '[experts, capacity]' is "
         "invalid\", moe_utils.py:407)",
         f"set moe_expert_capacity_factor={fits:g} (capacity at most the tokens), or "
         "moe_pad_expert_input_to_capacity=false", "runtime")
