"""Parameters, FLOPs, memory per GPU and time for a Megatron GPT run, before anything starts.

Pure functions over Megatron argument names (the `dest` of each flag) and plain ints; no torch, no megatron;
unset settings take Megatron's defaults from the generated argument catalog (launcher/data/megatron_args.json).

Two memory models live here:

* `megatron_memory`: Megatron's own `theoretical_memory_usage` at 432d76b2b8bf, term for term (reference §3.2).
  Its figures equal what Megatron prints after the first iterations, and tests hold it to that.
* `complete_memory`: what a GPU actually has to hold, adding what Megatron's report leaves out:
  - exact parameters per pipeline stage (biases, learned position embeddings, and the copy of the tied word
    embedding that the last stage keeps for the output layer when PP > 1), every stage checked, not only the first;
  - bytes per parameter by precision (fp32 training has no separate master copy: 16 B/param, not 18);
  - activations per stage from Korthikanti et al. (2022) Table 2 with GQA/SwiGLU/kv_channels widths, the
    attention-score term (5·a·s²·b) when core attention is not fused (`--transformer-impl local`) and not
    recomputed, full recompute storing only each layer's input, and fp32 activations at twice the width;
  - the fp32 logits of the output layer on the last stage.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from launcher.estimate.duration import final_batch
from launcher.gpus import DEFAULT_GPU, GIB, GPUS, Gpu, gpu_by_name  # noqa: F401 - the one catalogue (launcher/gpus.py)
from launcher.megatron import args as megatron_args
from launcher.megatron import layer_pattern
from launcher.megatron.args import default_ffn_hidden_size
from launcher.pipeline.checker import model_args
from launcher.pipeline.pipeline_layout import virtual_pipeline_size

MB = 1024**2  # Megatron's "MB" in its memory report is 2**20 bytes.


def megatron_value(args: Mapping[str, Any], name: str) -> Any:
    """args[name], or Megatron's own default at the pinned commit (from the generated argument catalog)."""
    value = args.get(name)
    return megatron_args.catalog()[name].default if value is None else value


# --------------------------------------------------------------------------------------------------- shape


def pad_vocab(vocab_size: int, tensor_parallel: int, divisible_by: int = 128) -> int:
    """Megatron's rule (build_tokenizer.vocab_size_with_padding): round up to a multiple of divisor·TP."""
    multiple = divisible_by * tensor_parallel
    if multiple < 1:
        raise ValueError(f"make_vocab_size_divisible_by {divisible_by} × TP {tensor_parallel} is no positive multiple")
    return -(-vocab_size // multiple) * multiple  # in integers: a float loses a vocabulary of 10^16 and beyond


def padded_vocab_size(args: Mapping[str, Any], tp: int) -> int:
    """The vocabulary the model is built with at TP `tp`: --padded-vocab-size, or padded as Megatron pads."""
    if args.get("padded_vocab_size"):
        return int(args["padded_vocab_size"])
    vocab = args.get("vocab_size")
    if vocab is None:
        raise ValueError("vocab_size is not set")
    if args.get("pad_vocab_size") is False:
        return int(vocab)
    return pad_vocab(int(vocab), tp, int(megatron_value(args, "make_vocab_size_divisible_by")))


def ffn_hidden_size(args: Mapping[str, Any]) -> int:
    if args.get("ffn_hidden_size"):
        return int(args["ffn_hidden_size"])
    return default_ffn_hidden_size(int(args["hidden_size"]), bool(args.get("swiglu")))


def human(count: float) -> str:
    """1.23K, 354.87M, 174.62B: counts of parameters, FLOPs and tokens."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{count / size:.2f}{unit}"
    return f"{count:.0f}"


def human_bytes(count: float) -> str:
    """2.44 TB, 5.68 GB, 106.88 kB: decimal units (as file systems' GB/s rates are), chosen by size."""
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.2f} {unit}"
    return f"{count:.0f} B"


@dataclass(frozen=True)
class ModelShape:
    """The GPT shape with Megatron's defaults filled in (ffn 4h or SwiGLU's 8h/3, kv_channels h/n, groups)."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    kv_channels: int
    num_query_groups: int
    ffn_hidden_size: int
    swiglu: bool
    norm_size: int  # weights per norm per element: 2 for LayerNorm (weight+bias), 1 for RMSNorm
    vocab_size: int
    padded_vocab_size: int
    seq_length: int
    position_embeddings: int  # rows of the learned position table (0 with RoPE / none)
    untied: bool
    linear_bias: bool
    qkv_bias: bool
    attention_output_gate: bool
    # Mixture of experts (0 experts: a dense GPT): `moe_layers` decoder layers (moe_layer_freq) have an MoE MLP
    # of `num_experts` experts of width moe_ffn_hidden_size,
    # `moe_topk` routed per token, plus a shared expert of width `shared_expert_size` (0: none).
    num_experts: int = 0
    moe_ffn_hidden_size: int = 0
    moe_topk: int = 0
    shared_expert_size: int = 0
    moe_layers: int = 0
    # Multi-latent attention (DeepSeek-V2/V3; multi_latent_attention): low-rank query (q_lora_rank, 0: a full
    # query projection) and key/value (kv_lora_rank) projections, per-head qk_head_dim + qk_pos_emb_head_dim
    # (the RoPE part) for queries and keys, v_head_dim for values.
    mla: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_head_dim: int = 0
    qk_pos_emb_head_dim: int = 0
    v_head_dim: int = 0
    qk_layernorm: bool = False  # a norm on each head's queries and keys (MLA: on the two latents)
    # Sliding-window attention (window_size): `window` keys to the left of each query on `window_layers` of
    # the layers (window_attn_skip_freq leaves the others full); 0: full causal attention everywhere.
    window: int = 0
    window_layers: int = 0
    # What the checkpoint's tensors are named and which a setting adds (checks/model_tensors.py): moe_layer_freq as
    # Megatron reads it (an int N: every N-th layer; or 0/1 per layer); layers saved under their own names
    # (transformer_block.py: a list or N > 1 in moe_layer_freq or linear_attention_freq) rather than stacked;
    # multi-token prediction layers built; a learnable softmax offset; the router's expert bias; the shared
    # expert's gate; Transformer Engine's module names (transformer_impl) and grouped experts (moe_grouped_gemm).
    moe_pattern: int | tuple[int, ...] = 1
    per_layer_keys: bool = False
    mtp_layers: int = 0
    softmax_offset: bool = False
    expert_bias: bool = False
    shared_expert_gate: bool = False
    te_names: bool = False
    grouped_experts: bool = False
    moe_latent_size: int = 0  # the experts work in a latent width, projected from and to hidden (TE only)

    @property
    def query_size(self) -> int:
        return self.kv_channels * self.num_attention_heads

    @property
    def kv_size(self) -> int:
        return self.kv_channels * self.num_query_groups

    @property
    def attn_qk_width(self) -> int:
        """Width of the queries (and, with MLA, of the keys) that enter core attention."""
        if self.mla:
            return self.num_attention_heads * (self.qk_head_dim + self.qk_pos_emb_head_dim)
        return self.query_size

    @property
    def attn_k_width(self) -> int:
        return self.attn_qk_width if self.mla else self.kv_size

    @property
    def attn_v_width(self) -> int:
        return self.num_attention_heads * self.v_head_dim if self.mla else self.kv_size

    @property
    def attn_out_width(self) -> int:
        """Width of core attention's output, the input of the output projection."""
        return self.attn_v_width if self.mla else self.query_size

    @property
    def core_attention_width(self) -> float:
        """Megatron's per-token core-attention width (QK^T over qk width, the values' product over v width)."""
        if self.mla:
            return (self.attn_qk_width + self.attn_v_width) / 2
        return self.query_size

    @property
    def window_fraction(self) -> float:
        """Core-attention work with the window, as a share of full causal attention (all layers together)."""
        if not self.window or not self.window_layers or self.window >= self.seq_length or not self.num_layers:
            return 1.0
        s, w = self.seq_length, self.window
        keys = w * (w + 1) / 2 + (s - w) * (w + 1)  # query i sees min(i + 1, w + 1) keys
        windowed = keys / (s * (s + 1) / 2)
        share = self.window_layers / self.num_layers
        return 1 - share + share * windowed


def model_shape(args: Mapping[str, Any], tensor_parallel: int | None = None) -> ModelShape:
    """Resolve the model shape from Megatron arguments; TP (for vocab padding) defaults to the args' value.
    ValueError where they give none (a size missing, 0 heads, an infinite or 10^30 size: a checkpoint's stored args
    and a measurements file hold whatever was written there)."""
    try:
        return _model_shape(args, tensor_parallel)
    except (ArithmeticError, RecursionError) as error:  # ZeroDivisionError, OverflowError
        raise ValueError(f"no model shape from these settings: {error}") from None


def _model_shape(args: Mapping[str, Any], tensor_parallel: int | None) -> ModelShape:
    hidden = int(args["hidden_size"])
    heads = int(args["num_attention_heads"])
    tp = int(tensor_parallel or megatron_value(args, "tensor_model_parallel_size"))
    swiglu = bool(megatron_value(args, "swiglu"))
    ffn = ffn_hidden_size(args)
    kv_channels = megatron_value(args, "kv_channels") or hidden // heads
    groups = int(megatron_value(args, "num_query_groups")) if megatron_value(args, "group_query_attention") else heads
    vocab = int(megatron_value(args, "vocab_size") or 0)
    padded = padded_vocab_size(args, tp) if vocab or megatron_value(args, "padded_vocab_size") else 0
    seq = int(args["seq_length"])
    learned = megatron_value(args, "position_embedding_type") == "learned_absolute"
    return ModelShape(
        num_layers=int(args["num_layers"]),
        hidden_size=hidden,
        num_attention_heads=heads,
        kv_channels=int(kv_channels),
        num_query_groups=groups,
        ffn_hidden_size=int(ffn),
        swiglu=swiglu,
        norm_size=1 if megatron_value(args, "normalization") == "RMSNorm" else 2,
        vocab_size=vocab,
        padded_vocab_size=padded,
        seq_length=seq,
        position_embeddings=int(megatron_value(args, "max_position_embeddings") or seq) if learned else 0,
        untied=bool(megatron_value(args, "untie_embeddings_and_output_weights")),
        linear_bias=bool(megatron_value(args, "add_bias_linear")),
        qkv_bias=bool(megatron_value(args, "add_bias_linear") or megatron_value(args, "add_qkv_bias")),
        attention_output_gate=bool(megatron_value(args, "attention_output_gate")),
        qk_layernorm=bool(megatron_value(args, "qk_layernorm")),
        **moe_shape(args, int(args["num_layers"]), int(ffn)),
        **mla_shape(args),
        **window_shape(args, int(args["num_layers"]), seq),
        **naming_shape(args),
    )


def _heterogeneous(value: Any) -> bool:
    """transformer_block.py sharded_state_dict: a per-layer pattern that is a list, or an int above 1, saves each
    layer under its own name."""
    if value in (None, ""):
        return False
    pattern = layer_pattern.parse(value) if not isinstance(value, list | tuple) else list(value)
    return isinstance(pattern, list) or pattern > 1


def naming_shape(args: Mapping[str, Any]) -> dict[str, Any]:
    """The ModelShape fields that name tensors or add them under a setting (see the class)."""
    freq = megatron_value(args, "moe_layer_freq")
    pattern = layer_pattern.parse(freq) if not isinstance(freq, list | tuple) else list(freq)
    experts = bool(megatron_value(args, "num_experts"))
    # the launcher's own spec (sdpa_spec) is the local one; another --spec is read as local too
    te = megatron_value(args, "transformer_impl") == "transformer_engine" and not args.get("spec")
    mtp = int(megatron_value(args, "mtp_num_layers") or 0)
    return {
        "moe_pattern": tuple(int(x) for x in pattern) if isinstance(pattern, list) else int(pattern),
        "per_layer_keys": _heterogeneous(freq) or _heterogeneous(args.get("linear_attention_freq")),
        "mtp_layers": min(mtp, 1) if megatron_value(args, "mtp_use_repeated_layer") else mtp,
        "softmax_offset": megatron_value(args, "softmax_type") == "learnable",
        "expert_bias": experts and bool(megatron_value(args, "moe_router_enable_expert_bias")),
        "shared_expert_gate": experts and bool(megatron_value(args, "moe_shared_expert_gate")) and
        bool(megatron_value(args, "moe_shared_expert_intermediate_size")),
        "te_names": te,
        "grouped_experts": te and experts and bool(megatron_value(args, "moe_grouped_gemm")),
        "moe_latent_size": int(megatron_value(args, "moe_latent_size") or 0) if experts else 0,
    }


def mla_shape(args: Mapping[str, Any]) -> dict[str, Any]:
    """The MLA fields of ModelShape (Megatron's defaults where unset); nothing without multi_latent_attention."""
    if not megatron_value(args, "multi_latent_attention"):
        return {}
    return {
        "mla": True,
        "q_lora_rank": int(megatron_value(args, "q_lora_rank") or 0),
        "kv_lora_rank": int(megatron_value(args, "kv_lora_rank")),
        "qk_head_dim": int(megatron_value(args, "qk_head_dim")),
        "qk_pos_emb_head_dim": int(megatron_value(args, "qk_pos_emb_head_dim")),
        "v_head_dim": int(megatron_value(args, "v_head_dim")),
    }


def window_left(value: Any) -> int:
    """The left window of --window-size ("(4096, 0)", "4096,0", [4096, 0]); 0 when unset or unbounded (-1)."""
    if value in (None, "", False):
        return 0
    if isinstance(value, list | tuple):
        parts = [str(v) for v in value]
    else:
        parts = [p for p in re.split(r"[^0-9-]+", str(value)) if p]
    try:
        left = int(parts[0]) if parts else 0
    except ValueError:
        return 0
    return max(0, left)


def window_shape(args: Mapping[str, Any], num_layers: int, seq: int) -> dict[str, Any]:
    """Megatron's is_layer_window_attention over the layers (1-indexed: an int N leaves every N-th layer full,
    a 0/1 list names the windowed layers)."""
    left = window_left(megatron_value(args, "window_size"))
    if not left or left >= seq:
        return {}
    freq = megatron_value(args, "window_attn_skip_freq")
    if freq is None:
        layers = num_layers
    else:
        pattern = layer_pattern.parse(freq) if not isinstance(freq, list | tuple) else list(freq)
        if isinstance(pattern, list):
            layers = sum(1 for x in pattern[:num_layers] if x)
        else:
            every = max(1, int(pattern))
            layers = num_layers - num_layers // every
    return {"window": left, "window_layers": layers}


def moe_shape(args: Mapping[str, Any], num_layers: int, ffn: int) -> dict[str, Any]:
    """The MoE fields of ModelShape from Megatron's flags (moe_layer_freq an int N: every N-th layer, or a
    list of 0/1 per layer, as Megatron reads it); nothing for a dense model."""
    experts = int(megatron_value(args, "num_experts") or 0)
    if not experts:
        return {}
    freq = megatron_value(args, "moe_layer_freq")
    pattern = layer_pattern.parse(freq) if not isinstance(freq, list | tuple) else list(freq)
    if isinstance(pattern, list):
        layers = sum(1 for x in pattern if x)
    else:
        every = max(1, pattern)
        layers = sum(1 for i in range(min(num_layers, 1 << 20)) if i % every == 0)
    return {
        "num_experts": experts,
        "moe_ffn_hidden_size": int(megatron_value(args, "moe_ffn_hidden_size") or ffn),
        "moe_topk": int(megatron_value(args, "moe_router_topk")),
        "shared_expert_size": int(megatron_value(args, "moe_shared_expert_intermediate_size") or 0),
        "moe_layers": layers,
    }


@dataclass(frozen=True)
class Training:
    """The parallel layout and training knobs that change memory and time."""

    world_size: int
    tp: int = 1
    pp: int = 1
    vpp: int = 1  # model chunks per pipeline rank; 1 = not interleaved
    cp: int = 1
    micro_batch_size: int = 1
    global_batch_size: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"  # none | selective | full
    distributed_optimizer: bool = False
    precision: str = "bf16"  # bf16 | fp16 | fp32
    fused_attention: bool = True  # False with --transformer-impl local: attention scores are stored
    # the SDPA spec's grouped key/value heads reach attention repeated to the query heads where flash cannot run
    # (sdpa_repeats_kv), and the backward keeps them so
    repeated_kv: bool = False
    softmax_fusion: bool = True  # --masked-softmax-fusion (apex's kernels): the unfused scores' softmax in place
    # The launcher's compiled TP=1 cross entropy (megatron_ext.sdpa_spec_fast) keeps no fp32 copy of the logits
    fused_cross_entropy: bool = False
    ep: int = 1  # expert parallel (MoE only; dense models keep 1)
    etp: int | None = None  # expert tensor parallel (Megatron's default: TP)
    moe_dispatcher: str = "allgather"  # moe_token_dispatcher_type: allgather | alltoall | flex
    # overlap_moe_expert_parallel_comm: the combined 1F1B schedule runs one microbatch's forward with another's
    # backward, layer by layer, so that each one's token dispatch hides behind the other's compute
    moe_a2a_overlap: bool = False
    # selective recompute's modules (Megatron's default: core_attn); layernorm and moe_act change memory here
    recompute_modules: tuple[str, ...] = ("core_attn",)
    overlap_grad_reduce: bool = False  # DP gradient reduce-scatter/all-reduce overlapped with backward
    overlap_param_gather: bool = False  # distributed optimizer's parameter all-gather overlapped with forward
    tp_comm_overlap: bool = False  # TE userbuffers: TP collectives overlapped with the GEMMs
    # interleaved schedule (VPP > 1): steady-state pipeline sends/receives overlapped with the chunks' compute
    # (Megatron's default); the warm-up and flush ones too only with overlap_p2p_comm_warmup_flush
    overlap_p2p_comm: bool = True
    overlap_p2p_comm_warmup_flush: bool = False
    grad_reduce_in_bf16: bool = False  # gradients kept and reduced in bf16 (2 B) instead of fp32 (4 B)
    # fp16 keeps and reduces its gradients in fp16 (2 B) unless accumulate_allreduce_grads_in_fp32 (bf16: always
    # fp32 unless grad_reduce_in_bf16; Megatron's validate_args)
    fp16_grads_in_fp32: bool = False
    # Megatron's Adam is TE's or apex's fused one, the launcher's fast spec swaps in torch's fused AdamW; without
    # those it is torch's multi-tensor AdamW, whose step makes an fp32 temporary per parameter (√v)
    torch_adam: bool = False
    fp8: bool = False  # TE FP8 GEMMs (--fp8-format)
    # FP8 without TE, torchao's float8 in the compiled layers (megatron_ext/float8.py): the backward gets the bf16
    # GEMM inputs it saved, not FP8 copies as TE's
    fp8_torchao: bool = False
    # Uneven pipelines (stages.py): Megatron's four ways to move layers between pipeline ranks.
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    embedding_in_split: bool = False
    loss_in_split: bool = False
    pipeline_layout: str | None = None
    # Fully sharded data parallel: "" (none), or what Megatron-FSDP shards over DP×CP
    # (data_parallel_sharding_strategy: optim | optim_grads | optim_grads_params; torch FSDP2 shards all three)
    fsdp: str = ""
    fsdp_reshard: bool = True  # parameters freed after the forward and gathered again for the backward
    # defer_embedding_wgrad_compute: the output layer's weight gradient of the first `wgrad_deferral_limit`
    # microbatches (0: all) is computed after the schedule, from their kept inputs and output gradients
    defer_embedding_wgrad: bool = False
    wgrad_deferral_limit: int = 0

    @property
    def dp(self) -> int:
        return self.world_size // (self.tp * self.pp * self.cp)

    @property
    def main_grad_bytes(self) -> int:
        """Bytes per parameter of the gradient buffer Megatron accumulates and reduces in (DDP's grad_dtype)."""
        if self.precision == "fp32":
            return 4
        if self.precision == "fp16":
            return 4 if self.fp16_grads_in_fp32 else 2
        return 2 if self.grad_reduce_in_bf16 else 4

    @property
    def dp_cp(self) -> int:
        """The group Megatron reduces gradients over and shards the distributed optimizer across."""
        return self.dp * self.cp

    @property
    def num_microbatches(self) -> int:
        return max(1, self.global_batch_size // (self.micro_batch_size * self.dp))

    @property
    def deferred_embedding_wgrads(self) -> int:
        """Microbatches whose output-layer weight gradient the last stage defers to the end of the step."""
        if not self.defer_embedding_wgrad or self.pp == 1:
            return 0
        limit = self.wgrad_deferral_limit
        return self.num_microbatches if limit <= 0 else min(limit, self.num_microbatches)

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def expert_dp(self) -> int:
        """The group Megatron reduces expert gradients over and shards their optimizer state across."""
        return max(1, self.world_size // (self.pp * self.ep * self.expert_tp))


def recompute_of(args: Mapping[str, Any]) -> str:
    if megatron_value(args, "recompute_activations"):
        return "selective"
    return megatron_value(args, "recompute_granularity") or "none"


def precision_of(args: Mapping[str, Any]) -> str:
    return "bf16" if megatron_value(args, "bf16") else "fp16" if megatron_value(args, "fp16") else "fp32"


def virtual_stages_of(args: Mapping[str, Any]) -> int:
    """Megatron's VPP from either flag or an explicit layout (a result of 1 means no interleaving): the
    pipeline's one derivation."""
    return virtual_pipeline_size(lambda name: megatron_value(args, name))


def _uses_sdpa_spec(args: Mapping[str, Any], module: str = "launcher.inside.megatron_ext.") -> bool:
    spec = args.get("spec")
    return spec is not None and len(spec) > 0 and str(spec[0]).startswith(module)


def sdpa_repeats_kv(args: Mapping[str, Any]) -> bool:
    """Whether the SDPA spec repeats grouped key/value heads to the query heads (sdpa_spec.sdpa): where flash
    attention cannot run, i.e. in fp32, with the dataloader's explicit mask, or at head dims above 256."""
    heads = int(megatron_value(args, "num_attention_heads"))
    if not (_uses_sdpa_spec(args) and megatron_value(args, "group_query_attention")
            and int(megatron_value(args, "num_query_groups")) != heads):
        return False
    head_dim = megatron_value(args, "kv_channels") or int(megatron_value(args, "hidden_size")) // heads
    return precision_of(args) == "fp32" or bool(megatron_value(args, "create_attention_mask_in_dataloader")) \
        or int(head_dim) > 256


def fused_attention_of(args: Mapping[str, Any], transformer_engine: bool | None = None) -> bool:
    """Whether attention runs in a kernel that keeps no [b, heads, s, s] scores (`transformer_engine`, where given,
    says whether Transformer Engine's attention runs instead of what the args name).

    Upstream's local attention stores the scores. Transformer Engine's flash and fused attention take half
    precision only; in fp32 it runs its unfused attention. The launcher's SDPA spec keeps none in any precision:
    torch's flash or cuDNN attention in half precision, its memory-efficient kernel in fp32, with grouped key/value
    heads repeated first (sdpa_spec.sdpa; torch's math attention, which that kernel's refusal of grouped heads
    left to fp32 GQA jobs, kept 36 GiB of scores in a 4-layer job of 64 heads at sequence 4096 on one H200)."""
    if transformer_engine is None and _uses_sdpa_spec(args):
        return True
    if transformer_engine is None:
        transformer_engine = megatron_value(args, "transformer_impl") != "local"
    return transformer_engine and precision_of(args) != "fp32"


def training_of(args: Mapping[str, Any], world_size: int) -> Training:
    """The Training view of Megatron arguments at a given world size (GBS defaults to MBS·DP, as Megatron; with a
    step batch-size schedule it is the schedule's final batch, the one most of the run trains at)."""
    tp = int(megatron_value(args, "tensor_model_parallel_size"))
    pp = int(megatron_value(args, "pipeline_model_parallel_size"))
    cp = int(megatron_value(args, "context_parallel_size"))
    mbs = int(megatron_value(args, "micro_batch_size") or 1)  # unset, Megatron refuses to start
    dp = max(1, world_size // (tp * pp * cp))
    return Training(
        world_size=world_size,
        tp=tp,
        pp=pp,
        vpp=virtual_stages_of(args),
        cp=cp,
        micro_batch_size=mbs,
        global_batch_size=int(megatron_value(args, "global_batch_size") or final_batch(args) or mbs * dp),
        sequence_parallel=bool(megatron_value(args, "sequence_parallel")) and tp > 1,
        recompute=recompute_of(args),
        distributed_optimizer=bool(megatron_value(args, "use_distributed_optimizer")),
        precision=precision_of(args),
        fused_attention=fused_attention_of(args),
        repeated_kv=sdpa_repeats_kv(args),
        softmax_fusion=bool(megatron_value(args, "masked_softmax_fusion")),
        fused_cross_entropy=(_uses_sdpa_spec(args, "launcher.inside.megatron_ext.sdpa_spec_fast")
                             or bool(args.get("cross_entropy_loss_fusion"))),
        ep=int(megatron_value(args, "expert_model_parallel_size")),
        etp=_optional_int(megatron_value(args, "expert_tensor_parallel_size")),
        moe_dispatcher=str(megatron_value(args, "moe_token_dispatcher_type")),
        moe_a2a_overlap=bool(megatron_value(args, "overlap_moe_expert_parallel_comm")),
        defer_embedding_wgrad=bool(megatron_value(args, "defer_embedding_wgrad_compute")),
        wgrad_deferral_limit=int(megatron_value(args, "wgrad_deferral_limit") or 0),
        recompute_modules=tuple(megatron_value(args, "recompute_modules") or ("core_attn",)),
        overlap_grad_reduce=bool(megatron_value(args, "overlap_grad_reduce")),
        overlap_param_gather=bool(megatron_value(args, "overlap_param_gather")),
        tp_comm_overlap=bool(megatron_value(args, "tp_comm_overlap")) and tp > 1,
        overlap_p2p_comm=bool(megatron_value(args, "overlap_p2p_comm")),
        overlap_p2p_comm_warmup_flush=bool(megatron_value(args, "overlap_p2p_comm_warmup_flush")),
        grad_reduce_in_bf16=bool(megatron_value(args, "grad_reduce_in_bf16")),
        fp16_grads_in_fp32=bool(megatron_value(args, "accumulate_allreduce_grads_in_fp32")),
        fp8=bool(megatron_value(args, "fp8")),  # dest of --fp8-format
        fp8_torchao=bool(megatron_value(args, "fp8"))
        and _uses_sdpa_spec(args, "launcher.inside.megatron_ext.sdpa_spec_fast"),
        first_stage_layers=_optional_int(megatron_value(args, "decoder_first_pipeline_num_layers")),
        last_stage_layers=_optional_int(megatron_value(args, "decoder_last_pipeline_num_layers")),
        embedding_in_split=bool(megatron_value(args, "account_for_embedding_in_pipeline_split")),
        loss_in_split=bool(megatron_value(args, "account_for_loss_in_pipeline_split")),
        pipeline_layout=megatron_value(args, "pipeline_model_parallel_layout") or None,
        **fsdp_of(args),
    )


FSDP_STRATEGIES = ("optim", "optim_grads", "optim_grads_params")


def fsdp_of(args: Mapping[str, Any]) -> dict[str, Any]:
    """Training's FSDP fields: Megatron-FSDP's sharding strategy (no_shard: plain DDP), torch FSDP2's full
    sharding (torch_fsdp2_reshard_after_forward)."""
    if megatron_value(args, "use_torch_fsdp2"):
        return {"fsdp": "optim_grads_params",
                "fsdp_reshard": bool(megatron_value(args, "torch_fsdp2_reshard_after_forward"))}
    if megatron_value(args, "use_megatron_fsdp"):
        strategy = str(megatron_value(args, "data_parallel_sharding_strategy"))
        return {"fsdp": strategy if strategy in FSDP_STRATEGIES else ""}
    return {}


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def pipeline_stages(m: ModelShape, t: Training) -> tuple[Any, ...]:
    """Megatron's split of the decoder layers over the pipeline (stages.Stage per rank); SplitError if invalid."""
    from launcher.estimate.stages import split_layers

    return split_layers(m.num_layers, t.pp, t.vpp, t.first_stage_layers, t.last_stage_layers,
                        t.embedding_in_split, t.loss_in_split, t.pipeline_layout)


# --------------------------------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class LayerParams:
    """Exact parameters of one transformer layer, split by how TP holds them."""

    sharded: int  # split across TP ranks (QKV/fc1 weights+biases, proj/fc2 weights)
    replicated: int  # on every TP rank (norms, row-parallel biases)

    @property
    def total(self) -> int:
        return self.sharded + self.replicated


def attention_params(m: ModelShape) -> LayerParams:
    """The self-attention block's weights (biases of column-parallel layers included; the output projection's
    bias is counted with the layer's replicated ones).

    MLA (megatron.core.transformer.multi_latent_attention at 432d76b2b8bf): the query projection (h → n·(qk +
    rope)) or its low-rank pair (h → q_lora, q_lora → n·(qk + rope)), the key/value down projection (h →
    kv_lora + rope) and up projection (kv_lora → n·(qk + v)), the output projection (n·v → h), the latents'
    norms with qk_layernorm; no biases. The down projections are replicated on every TP rank (TE's
    'duplicated' linear), the rest TP-sharded."""
    h = m.hidden_size
    if m.mla:
        n, q_head = m.num_attention_heads, m.qk_head_dim + m.qk_pos_emb_head_dim
        if m.q_lora_rank:
            sharded = m.q_lora_rank * n * q_head
            replicated = h * m.q_lora_rank + (m.q_lora_rank * m.norm_size if m.qk_layernorm else 0)
        else:
            sharded, replicated = h * n * q_head, 0
        sharded += m.kv_lora_rank * n * (m.qk_head_dim + m.v_head_dim) + n * m.v_head_dim * h
        replicated += h * (m.kv_lora_rank + m.qk_pos_emb_head_dim)
        replicated += m.kv_lora_rank * m.norm_size if m.qk_layernorm else 0
        return LayerParams(sharded, replicated)
    qkv_out = m.query_size + 2 * m.kv_size + (m.query_size if m.attention_output_gate else 0)
    sharded = h * qkv_out + m.query_size * h + (qkv_out if m.qkv_bias else 0)
    replicated = 2 * m.kv_channels * m.norm_size if m.qk_layernorm else 0  # per-head q and k norms
    return LayerParams(sharded, replicated)


def layer_params(m: ModelShape) -> LayerParams:
    h = m.hidden_size
    attention = attention_params(m)
    fc1_out = m.ffn_hidden_size * (2 if m.swiglu else 1)
    sharded = attention.sharded + h * fc1_out + m.ffn_hidden_size * h
    replicated = attention.replicated + 2 * m.norm_size * h  # input norm + pre-MLP norm
    if m.linear_bias:
        sharded += fc1_out
        replicated += 2 * h  # proj and fc2 biases (row-parallel: replicated)
    return LayerParams(sharded, replicated)


@dataclass(frozen=True)
class MoeLayerParams:
    """What an MoE layer has instead of the dense MLP: routed experts (sharded over EP·ETP), the router and
    the shared expert (sharded over TP like a dense MLP)."""

    experts: int  # all routed experts of the layer
    router: int  # replicated
    shared: int  # the shared expert (TP-sharded)


def moe_layer_params(m: ModelShape) -> MoeLayerParams:
    h = m.hidden_size
    per_expert = h * m.moe_ffn_hidden_size * (3 if m.swiglu else 2)
    shared = h * m.shared_expert_size * (3 if m.swiglu else 2) if m.shared_expert_size else 0
    return MoeLayerParams(m.num_experts * per_expert, h * m.num_experts, shared)


def dense_mlp_params(m: ModelShape) -> int:
    """The dense MLP's weights (and fc1 bias) that an MoE layer replaces."""
    fc1_out = m.ffn_hidden_size * (2 if m.swiglu else 1)
    return m.hidden_size * fc1_out + m.ffn_hidden_size * m.hidden_size + (fc1_out if m.linear_bias else 0)


def parameter_count(args: Mapping[str, Any], tp: int = 1) -> int:
    """Total parameters of the GPT model pretrain_gpt.py builds (biases, norms, positions and MoE experts
    included; no MTP), with the vocabulary padded for TP `tp`."""
    m = model_shape(args, tp)
    embedding = m.padded_vocab_size * m.hidden_size
    total = m.num_layers * layer_params(m).total + m.norm_size * m.hidden_size
    if m.num_experts:
        moe = moe_layer_params(m)
        total += m.moe_layers * (moe.experts + moe.router + moe.shared - dense_mlp_params(m))
    total += embedding * (2 if m.untied else 1) + m.position_embeddings * m.hidden_size
    return total


@dataclass(frozen=True)
class StageParams:
    """Parameters one GPU of a pipeline stage holds (its TP shard)."""

    stage: int
    layers: int
    params: float  # all of them, expert weights included
    expert_params: float = 0.0  # of which routed-expert weights (their optimizer state shards over expert DP)


def stage_parameters(m: ModelShape, t: Training) -> tuple[StageParams, ...]:
    """Exact per-GPU parameters of every pipeline stage, with Megatron's (possibly uneven) split."""
    return _stage_parameters(m, t.tp, pipeline_stages(m, t), t.ep, t.expert_tp)


@lru_cache(maxsize=4096)
def _stage_parameters(m: ModelShape, tp: int, stages: tuple[Any, ...], ep: int = 1,
                      etp: int = 1) -> tuple[StageParams, ...]:
    lp = layer_params(m)
    h = m.hidden_size
    word = m.padded_vocab_size * h / tp
    out = []
    moe_share = m.moe_layers / m.num_layers if m.num_experts and m.num_layers else 0.0
    for st in stages:
        params = st.layers * (lp.sharded / tp + lp.replicated)
        experts = 0.0
        if moe_share:  # the dense MLP out; the stage's share of experts (EP·ETP), shared expert, router in
            moe = moe_layer_params(m)
            experts = st.layers * moe_share * moe.experts / (ep * etp)
            params += experts + st.layers * moe_share * (moe.shared / tp + moe.router - dense_mlp_params(m) / tp)
        if st.embedding:
            params += word + m.position_embeddings * h
        if st.loss:
            params += m.norm_size * h
            if m.untied or not st.embedding:  # tied weights: the last stage keeps its own copy when PP > 1
                params += word
        out.append(StageParams(st.rank, st.layers, params, experts))
    return tuple(out)


@dataclass(frozen=True)
class MegatronParams:
    """Megatron's counts as its memory report prints them (biases and position embeddings left out)."""

    transformer_block: float
    embedding: float
    total: float
    most_loaded_shard: float
    expert_shard: float = 0.0  # of which routed experts (their optimizer state shards over expert DP)


def megatron_parameters(m: ModelShape, t: Training) -> MegatronParams:
    """compute_weight_and_optimizer_memory's parameter counts (dense or MoE GPT, no MTP/MLA)."""
    h = m.hidden_size
    p = m.query_size / h
    gated = 1.5 if m.swiglu else 1
    attention = 2 * h * h * (1 + m.num_query_groups / m.num_attention_heads) * p
    if m.mla:  # theoretical_memory_usage's MLA term (it counts both latent norms whatever qk_layernorm says)
        n, q_head = m.num_attention_heads, m.qk_head_dim + m.qk_pos_emb_head_dim
        q_term = m.q_lora_rank * (h + n * q_head + m.norm_size) if m.q_lora_rank else h * n * q_head
        attention = (q_term + m.kv_lora_rank * (h + n * (m.qk_head_dim + m.v_head_dim) + m.norm_size)
                     + h * m.qk_pos_emb_head_dim + n * m.v_head_dim * h)
    mlp = 2 * h * m.ffn_hidden_size * gated
    norms = 2 * h * m.norm_size
    final_norm = m.norm_size * h
    embedding = h * m.padded_vocab_size
    moe_layers = m.moe_layers if m.num_experts else 0
    dense_layers = m.num_layers - moe_layers
    shared = 2 * h * m.shared_expert_size * gated
    routed = 2 * h * m.moe_ffn_hidden_size * m.num_experts * gated
    router = h * m.num_experts + (m.num_experts if m.linear_bias else 0) if m.num_experts else 0
    block = ((attention + mlp + norms) * dense_layers + (attention + shared + routed + norms + router) * moe_layers
             + final_norm)
    embeddings = 2 * embedding if m.untied else embedding
    tp_sharded = (attention + mlp) * dense_layers + (attention + shared) * moe_layers
    replicated = norms * m.num_layers + router * moe_layers + final_norm
    shard = (tp_sharded / t.pp + embedding) / t.tp + replicated / t.pp
    if m.untied and t.pp == 1:
        shard += embedding / t.tp
    experts = routed * moe_layers / t.pp / (t.expert_tp * t.ep)
    return MegatronParams(block, embeddings, block + embeddings, shard + experts, experts)


# --------------------------------------------------------------------------------------------------- FLOPs


@lru_cache(maxsize=4096)
def flops_per_iteration(m: ModelShape, global_batch_size: int) -> float:
    """Megatron's num_floating_point_operations (training.py:411) for a GPT, BSHD, dense or MoE (top-k routed
    plus shared experts per MoE layer, MLA's projections), no MTP.

    Model FLOPs (forward + both backward GEMMs, recompute not counted), as Megatron logs TFLOP/s from.
    """
    tokens = global_batch_size * m.seq_length
    h = m.hidden_size
    q, kv = m.query_size, m.kv_size
    gate = q if m.attention_output_gate else 0
    ffn_factor = 3 if m.swiglu else 2
    attention_linear = 6 * (h * (q + 2 * kv + gate) + q * h)
    if m.mla:  # Megatron's MLA branch, its "+1" (norm) terms included
        n, q_head = m.num_attention_heads, m.qk_head_dim + m.qk_pos_emb_head_dim
        q_term = m.q_lora_rank * (h + n * q_head + 1) if m.q_lora_rank else h * n * q_head
        attention_linear = 6 * (q_term + m.kv_lora_rank * (h + n * (m.qk_head_dim + m.v_head_dim) + 1)
                                + h * m.qk_pos_emb_head_dim + n * m.v_head_dim * h)
    attention_core = 6 * m.core_attention_width  # ½ causal mask × 2 GEMMs (Megatron ignores any window)
    dense_layers = m.num_layers - (m.moe_layers if m.num_experts else 0)
    per_token = 6 * h * m.ffn_hidden_size * ffn_factor * dense_layers + attention_linear * m.num_layers
    if m.num_experts:  # routed experts (top-k of them per token) and the shared expert, as Megatron counts
        per_token += 6 * h * (m.moe_ffn_hidden_size * m.moe_topk + m.shared_expert_size) * ffn_factor * m.moe_layers
    per_token += 6 * h * m.padded_vocab_size
    return tokens * per_token + global_batch_size * m.seq_length**2 * attention_core * m.num_layers


# --------------------------------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU on the most loaded GPU."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    stage: int = 0  # which pipeline stage is the most loaded
    model: str = "megatron"
    # live only during the optimizer step, when the activations are freed (optimizer_step_bytes)
    optimizer_step: float = 0.0

    @property
    def weights_and_optimizer(self) -> float:
        return self.weights + self.gradients + self.optimizer

    @property
    def total(self) -> float:
        """The peak: the forward/backward's (activations) or the optimizer step's, whichever is larger."""
        return self.weights_and_optimizer + max(self.activations, self.optimizer_step)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(weights_and_optimizer=self.weights_and_optimizer, total=self.total)
        return d


def megatron_activation_bytes(m: ModelShape, t: Training) -> float:
    """Megatron's compute_activation_memory / _without_sp (first stage), chosen as Megatron chooses."""
    s, b, h, pp = m.seq_length, t.micro_batch_size, m.hidden_size, t.pp
    with_sp = t.sequence_parallel and t.recompute == "selective"
    if with_sp:
        act = s * b * h * (18 + 4 * m.ffn_hidden_size / h) * m.num_layers
    else:
        act = s * b * h * (10 + 24 / t.tp) * m.num_layers
    act += 8 * s * b * pp + s * b * h * pp
    if t.vpp > 1:
        act *= 1 + (pp - 1) / (pp * t.vpp)
    elif pp > 1:
        act *= min(1, t.num_microbatches / pp)
    if with_sp:
        if pp == 1:
            act += s * b * h * 4 * (1 + m.padded_vocab_size / h)
        return act / t.tp
    if pp == 1:
        act += 2 * (s * b * m.padded_vocab_size / t.tp + s * b * h)
    return act * 1.05


def megatron_memory(m: ModelShape, t: Training) -> Memory:
    """Megatron's theoretical memory: bf16 weights (2 B), fp32 main grads (4 B), fp32 master+Adam (12 B, /DP
    with the distributed optimizer; DP = world/(TP·PP·CP)), and Megatron's activation formula."""
    counts = megatron_parameters(m, t)
    shard, experts = counts.most_loaded_shard, counts.expert_shard
    optimizer = 12 / t.dp * (shard - experts) + 12 / t.expert_dp * experts if t.distributed_optimizer else 12 * shard
    return Memory(2 * shard, 4 * shard, optimizer, megatron_activation_bytes(m, t), 0, "megatron")


@dataclass(frozen=True)
class MemoryDifference:
    """One named reason why the complete model's total differs from Megatron's report (bytes, signed)."""

    what: str
    bytes: float
    why: str


def memory_difference(m: ModelShape, t: Training) -> list[MemoryDifference]:
    """complete_memory − megatron_memory, term by term; the terms add up to the difference exactly.

    Megatron's report (theoretical_memory_usage) uses its sequence-parallel formula only together with
    selective recompute; otherwise it counts the 10·s·b·h per layer outside the TP regions on every TP rank
    and adds 5 % for temporaries. The complete model shards by TP whenever sequence parallel is on, and
    leaves temporaries to the usable-memory margin (USABLE_FRACTION)."""
    megatron, complete = megatron_memory(m, t), complete_memory(m, t)
    # Megatron's report counts 4 B of main gradients per parameter; grad_reduce_in_bf16 and fp16 without
    # accumulate_allreduce_grads_in_fp32 keep them at 2 B
    half_grads = -megatron.gradients / 2 if t.main_grad_bytes == 2 else 0.0
    params = complete.weights_and_optimizer - megatron.weights_and_optimizer - half_grads
    step = max(0.0, complete.optimizer_step - complete.activations)
    sp_formula = t.sequence_parallel and t.recompute == "selective"
    margin = 0.0 if sp_formula else -(megatron.activations - megatron.activations / 1.05)
    sp = 0.0
    if t.sequence_parallel and not sp_formula:
        s, b, h, pp = m.seq_length, t.micro_batch_size, m.hidden_size, t.pp
        unsharded = s * b * h * 10 * m.num_layers * (1 - 1 / t.tp)
        if t.vpp > 1:
            unsharded *= 1 + (pp - 1) / (pp * t.vpp)
        elif pp > 1:
            unsharded *= min(1, t.num_microbatches / pp)
        sp = -unsharded
    rest = complete.activations - megatron.activations - margin - sp
    return [
        MemoryDifference("parameters", params, "exact per-stage count (biases, learned positions, the tied "
                         "output copy on the last stage) at bytes per parameter by precision"),
        MemoryDifference("gradients in 16 bits", half_grads, "grad_reduce_in_bf16 (bf16) or fp16 without "
                         "accumulate_allreduce_grads_in_fp32 keeps and reduces the main gradients in 2 B per "
                         "parameter; Megatron's report counts fp32 (4 B)"),
        MemoryDifference("optimizer step", step, "the step's fp32 copy of 16-bit gradients and torch AdamW's "
                         "temporary (4 B each per parameter the GPU updates), above the activations it outlives"),
        MemoryDifference("sequence parallel", sp, "Megatron's report uses its sequence-parallel formula only "
                         f"with selective recompute; the run shards norms and dropouts over TP {t.tp}"),
        MemoryDifference("Megatron's 5 % margin", margin, "Megatron adds 5 % for temporaries; the complete "
                         f"model leaves them to the {USABLE_FRACTION:.0%} fit rule"),
        MemoryDifference("activation terms", rest, f"the most loaded stage ({complete.stage}), Korthikanti Table 2 "
                         "widened for GQA/SwiGLU, attention scores when unfused, fp32 logits, recompute"),
    ]


def bytes_per_parameter(t: Training) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per parameter with Megatron's mixed-precision Adam."""
    weights: float
    grads: float
    optimizer: float
    if t.precision == "fp32":
        weights, grads, optimizer = 4, 4, 8  # fp32 params are the master copy; Adam m and v
    else:
        # half params, main grads (Training.main_grad_bytes), fp32 master + m + v
        weights, grads, optimizer = 2, t.main_grad_bytes, 12
    if t.distributed_optimizer or t.fsdp:
        optimizer /= t.dp_cp  # Megatron shards it over the data-parallel group with context parallel
    if t.fsdp in ("optim_grads", "optim_grads_params"):
        grads /= t.dp_cp
    if t.fsdp == "optim_grads_params":
        weights /= t.dp_cp
    return weights, grads, optimizer


def optimizer_step_bytes(t: Training, params: float, expert_params: float = 0.0) -> float:
    """Bytes live only during the optimizer step, per parameter this GPU's optimizer updates. With 2-byte
    gradients (fp16 without accumulate_allreduce_grads_in_fp32, bf16 with grad_reduce_in_bf16) Megatron's
    mixed-precision optimizer gives each fp32 main parameter an fp32 copy of its gradient for the step
    (optimizer.py Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads: `main_grad.float()`;
    distrib_optimizer.py the same per shard), freed by the next step's zero_grad: 4 B (with fp32 gradient buffers
    `.float()` is the buffer itself). Torch's multi-tensor AdamW (Training.torch_adam) adds 4 B for √v. Seen on
    one H200: the 175B shape at 4 layers in fp16 (16 B per parameter outside the step, 20 B in it) ran out of
    memory at its first step."""
    if t.fsdp:
        return 0.0
    per_parameter = (4 if t.precision != "fp32" and t.main_grad_bytes == 2 else 0) + (4 if t.torch_adam else 0)
    if t.distributed_optimizer:  # each rank steps its shard; expert state shards over expert DP
        return per_parameter * ((params - expert_params) / t.dp_cp + expert_params / t.expert_dp)
    return per_parameter * params


def uses_torch_adam(args: Mapping[str, Any], transformer_engine: bool, apex: bool) -> bool:
    """Whether Megatron's optimizer is torch's multi-tensor AdamW (optimizer/__init__.py imports TE's FusedAdam,
    else apex's, else torch's AdamW; the launcher's fast spec makes that one fused)."""
    return not transformer_engine and not apex and not _uses_sdpa_spec(
        args, "launcher.inside.megatron_ext.sdpa_spec_fast")


# FSDP gathers a layer's parameters (and reduces its gradients) while the one before it computes: two layers'
# unsharded weights and gradients are in memory at a time (Megatron-FSDP's double buffer, FSDP2's prefetch).
FSDP_LAYERS_IN_FLIGHT = 2


def fsdp_unsharded_bytes(m: ModelShape, t: Training) -> float:
    """The unsharded working set FSDP adds on one GPU: the in-flight layers' full weights and gradients."""
    if t.fsdp not in ("optim_grads", "optim_grads_params"):
        return 0.0
    lp = layer_params(m)
    layer = lp.sharded / t.tp + lp.replicated
    if m.num_experts and m.num_layers:
        moe = moe_layer_params(m)
        layer += m.moe_layers / m.num_layers * (moe.experts / (t.ep * t.expert_tp) + moe.shared / t.tp
                                                - dense_mlp_params(m) / t.tp)
    weight_bytes = (2 if t.precision != "fp32" else 4) if t.fsdp == "optim_grads_params" else 0
    grad_bytes = t.main_grad_bytes
    return FSDP_LAYERS_IN_FLIGHT * layer * (weight_bytes + grad_bytes)


# Per score element of the one layer whose unfused attention is being computed (forward or backward): torch's
# softmax takes an fp32 copy and returns fp32 probabilities beside the bf16 scores, probabilities and gradients;
# apex's fused kernel works on the bf16 scores in place. In fp32 (no copy; apex's kernel takes half precision
# only) the raw scores beside the kept probabilities going forward, two fp32 gradients of them going back.
UNFUSED_ATTENTION_BYTES = {"torch softmax": 16, "fused softmax": 6, "fp32": 8}


def layer_activation_bytes(m: ModelShape, t: Training) -> float:
    """One layer, one microbatch, one GPU: Korthikanti et al. Table 2, generalised to GQA/SwiGLU/kv_channels.

    Context parallelism gives each GPU s/CP of the sequence, so every term is divided by CP."""
    s, b, h = m.seq_length // t.cp, t.micro_batch_size, m.hidden_size
    w = 4 if t.precision == "fp32" else 2  # bytes per stored activation element
    g = 1 if t.fp8 and not t.fp8_torchao else w  # GEMM inputs: TE keeps them in FP8 for the backward
    # Outside the TP regions: two norm inputs (w), QKV and fc1 inputs (g), two dropout masks (1 B each).
    replicated = s * b * h * (2 * w + 2 * g + 2)
    if t.recompute == "selective" and "layernorm" in t.recompute_modules:
        replicated -= s * b * h * 2 * g  # the norms' outputs (QKV and fc1 inputs) are recomputed
    # Inside: Q, K, V and the proj input (g); the MLP's activation input (2F wide with SwiGLU) and fc2 input (g).
    sharded = s * b * (w * (m.attn_qk_width + m.attn_k_width + m.attn_v_width) + g * m.attn_out_width)
    if t.repeated_kv and not m.mla:
        sharded += s * b * w * 2 * m.query_size
    if m.mla:  # the latents the down projections make on every TP rank: up projections' (and norms') inputs
        replicated += s * b * (g + (w if m.qk_layernorm else 0)) * (m.q_lora_rank + m.kv_lora_rank)
        replicated += s * b * w * m.qk_pos_emb_head_dim  # the shared RoPE key
    sharded += s * b * m.ffn_hidden_size * (w * (2 if m.swiglu else 1) + g)
    if not t.fused_attention and t.recompute == "none":
        # scores, softmax, dropout mask: local queries against the whole sequence
        sharded += m.num_attention_heads * s * m.seq_length * b * (2 * w + 1)
    if t.sequence_parallel:
        return (replicated + sharded) / t.tp
    return replicated + sharded / t.tp


def moe_layer_activation_delta(m: ModelShape, t: Training) -> float:
    """An MoE layer's activations minus the dense MLP's it replaces, one microbatch, one GPU.

    Per GPU the experts see (s/CP)·b·topk·ETP/TP token-expert pairs of width F_moe/ETP, i.e. the dense MLP's
    terms with F → topk·F_moe (+ the shared expert's width), sharded by TP; the dispatcher keeps the permuted
    hidden states (GEMM input, g bytes) and the combine's input (w bytes) of each pair, and the router its
    fp32 logits over the experts."""
    if not m.num_experts:
        return 0.0
    s, b, h = m.seq_length // t.cp, t.micro_batch_size, m.hidden_size
    w = 4 if t.precision == "fp32" else 2
    g = 1 if t.fp8 and not t.fp8_torchao else w
    per_width = s * b * (w * (2 if m.swiglu else 1) + g)
    moe_width = m.moe_topk * m.moe_ffn_hidden_size + m.shared_expert_size
    mlp = per_width * (moe_width - m.ffn_hidden_size) / t.tp
    pairs = s * b * m.moe_topk * t.expert_tp / t.tp
    buffers = pairs * h * (g + w)
    if t.recompute == "selective" and "moe_act" in t.recompute_modules:  # the experts' fc2 input
        mlp -= pairs * m.moe_ffn_hidden_size / t.expert_tp * g
    if t.recompute == "selective" and "moe" in t.recompute_modules:  # the whole MoE layer: only its input kept
        mlp, buffers = -per_width * m.ffn_hidden_size / t.tp, 0.0
    router = 4 * s * b * m.num_experts / (t.tp if t.sequence_parallel else 1)
    return mlp + buffers + router


def stage_activation_bytes(m: ModelShape, t: Training, stage: int) -> float:
    """Activations held by one GPU of pipeline rank `stage` at the peak of the 1F1B / interleaved schedule."""
    st = pipeline_stages(m, t)[stage]
    s, b, h = m.seq_length // t.cp, t.micro_batch_size, m.hidden_size
    w = 4 if t.precision == "fp32" else 2
    layers = st.layers
    per_layer = layer_activation_bytes(m, t)
    if m.num_experts and m.num_layers:  # the MoE layers' share of the stage's layers
        per_layer += moe_layer_activation_delta(m, t) * m.moe_layers / m.num_layers
    if t.recompute == "full":
        # Each layer keeps only its input; one layer's working set is rebuilt at a time.
        kept = w * s * b * h / (t.tp if t.sequence_parallel else 1)
        transient = per_layer
    else:
        kept, transient = per_layer, 0.0
    if t.vpp > 1:  # Megatron's interleaved warm-up: chunks of layers/VPP in flight
        chunks = min((t.pp - stage - 1) * 2 + (t.vpp - 1) * t.pp + 1, t.num_microbatches * t.vpp)
        in_flight_layers = chunks * layers / t.vpp
        in_flight = chunks / t.vpp
    else:
        in_flight = min(t.pp - stage, t.num_microbatches)
        in_flight_layers = in_flight * layers
    act = kept * in_flight_layers
    # The working sets of one layer (forward or backward) and of the loss are live at different times: the
    # logits exist from the last layer's forward to the output layer's backward, before any layer's backward
    # (1F1B: the last stage runs a microbatch's backward right after its forward), so the peak holds the larger.
    # Seen on one H200: a 1-layer model at sequence 262144 with full recompute, estimated at their sum
    # (201 GiB), trained.
    layer = transient
    if not t.fused_attention:
        # Upstream's local attention works on one layer's [b, heads, s, s] scores at a time, also when recompute
        # keeps none: bf16 scores, their fp32 copy and softmax, bf16 probabilities, and in the backward their
        # gradients (seen on one H200: 64 heads at sequence 8192, 72 GiB at the peak where this term was missing)
        per_score = UNFUSED_ATTENTION_BYTES["fp32" if t.precision == "fp32" else
                                            "fused softmax" if t.softmax_fusion else "torch softmax"]
        layer += per_score * m.num_attention_heads / t.tp * s * m.seq_length * b
    loss = 0.0
    if st.loss:  # fp32 logits (and their gradient) for one microbatch, vocab split over TP; the output layer's input
        logit_bytes = 2 * w if t.fused_cross_entropy and t.tp == 1 else 2 * 4  # fused: logits + grad in bf16
        loss = logit_bytes * s * b * m.padded_vocab_size / t.tp + w * s * b * h
    act += max(layer, loss)
    if st.embedding:  # embedding output (dropout mask) and token ids, per microbatch in flight
        act += in_flight * (s * b * h + 8 * s * b)
    if st.loss:
        # defer_embedding_wgrad_compute keeps, for each deferred microbatch, the output layer's input (sharded
        # with sequence parallel) and its output gradient (layers.py embedding_activation_buffer and
        # grad_output_buffer) until the weight gradients run after the schedule
        kept = w * s * b * (m.padded_vocab_size / t.tp + h / (t.tp if t.sequence_parallel else 1))
        act += t.deferred_embedding_wgrads * kept
    return act


def complete_memory(m: ModelShape, t: Training) -> Memory:
    """The most loaded GPU over all pipeline stages, with exact parameters and per-stage activations."""
    wb, gb, ob = bytes_per_parameter(t)
    best: Memory | None = None
    stages = pipeline_stages(m, t)
    params = stage_parameters(m, t)
    # Later ranks hold fewer microbatches in flight: among ranks alike, the first is the peak.
    seen: set[tuple[int, bool, bool]] = set()
    for st in stages:
        key = (st.layers, st.embedding, st.loss)
        if key in seen:
            continue
        seen.add(key)
        p, experts = params[st.rank].params, params[st.rank].expert_params
        optimizer = ob * p
        if experts and (t.distributed_optimizer or t.fsdp):  # expert state shards over expert DP, not DP×CP
            optimizer += ob * experts * (t.dp_cp / t.expert_dp - 1)
        activations = stage_activation_bytes(m, t, st.rank) + fsdp_unsharded_bytes(m, t)
        mem = Memory(wb * p, gb * p, optimizer, activations, st.rank, "complete", optimizer_step_bytes(t, p, experts))
        if best is None or mem.total > best.total:
            best = mem
    assert best is not None
    return best


# --------------------------------------------------------------------------------------------------- GPUs


# Room left for the CUDA context, NCCL buffers and allocator fragmentation, which no formula above counts: a
# layout above this share of the GPU is "tight" (warned, never recommended by `launch plan`).
USABLE_FRACTION = 0.90

# What a training process holds beyond the estimate's point value, whatever the job: the one memory rule
# (memory_fit) refuses a job whose estimate is above the GPU's memory minus this. From the measured peaks of
# docs/benchmarks.md ("Memory estimate against the measured peaks"): the largest under-estimate of `max
# allocated` there (175b shrunk, TP 2: 38.42 measured against 37.48 GiB, 0.94 GiB), plus the largest allocator
# fragmentation at a step's peak (`max reserved` − `max allocated`; 345m TP 2: 25278 − 23381 MB, 1.85 GiB), plus
# the CUDA context and NCCL's buffers outside PyTorch's allocator (~0.5 GiB on Hopper with lazy module loading).
MEMORY_RESERVE_BYTES = 3.3 * GIB


def memory_fit(memory_bytes: float, gpu_memory_bytes: float) -> bool:
    """The one memory rule, for the dry-run, `launch plan`, the import and the launch on a machine: the job fits
    when its estimate per GPU is at most the GPU's memory minus MEMORY_RESERVE_BYTES."""
    return memory_bytes <= gpu_memory_bytes - MEMORY_RESERVE_BYTES


def fit_status(memory_bytes: float, gpu: Gpu) -> str:
    """'does not fit' where memory_fit refuses, else 'tight' above USABLE_FRACTION of the GPU, else 'fits'."""
    if not memory_fit(memory_bytes, gpu.memory_bytes):
        return "does not fit"
    if memory_bytes > USABLE_FRACTION * gpu.memory_bytes:
        return "tight"
    return "fits"


# --------------------------------------------------------------------------------------------------- time


def time_to_tokens(step_seconds: float, global_batch_size: int, seq_length: int, tokens: float) -> float:
    """Seconds to train `tokens` tokens at `step_seconds` per iteration of global_batch_size·seq_length."""
    return tokens / (global_batch_size * seq_length) * step_seconds


# Aggregate write rate to the checkpoint file system assumed for save times: all ranks write their shards in
# parallel (torch_dist); a mid-size Lustre/GPFS gives tens of GB/s. `launch plan --ckpt-write-gbps` changes it.
CHECKPOINT_WRITE_GBPS = 20.0


def checkpoint_bytes(parameters: float, args: Mapping[str, Any]) -> float:
    """Bytes of one Megatron checkpoint with the Adam optimizer: the model's weights (2 bytes each in bf16/fp16,
    4 in fp32) plus the optimizer's fp32 state (main weights in mixed precision, and two moments) unless
    --no-save-optim leaves it out."""
    mixed = bool(args.get("bf16") or args.get("fp16"))
    weights = 2 if mixed else 4
    optimizer = (4 if mixed else 0) + 8 if args.get("optimizer") in (None, "adam") else (4 if mixed else 0)
    return parameters * (weights + (0 if args.get("no_save_optim") else optimizer))


def save_cost(parameters: float, args: Mapping[str, Any], step_seconds: float, save_interval: int,
              total_iterations: int | None, write_gbps: float = CHECKPOINT_WRITE_GBPS) -> dict[str, float | None]:
    """What periodic checkpoints cost: seconds per save, and the share of training time they add."""
    size = checkpoint_bytes(parameters, args)
    seconds = size / (write_gbps * 1e9)
    saves = -(-total_iterations // save_interval) if total_iterations else None
    return {
        "bytes": size, "write_gbps": write_gbps, "seconds_per_save": seconds, "save_interval": save_interval,
        "saves": saves, "overhead_fraction": seconds / (save_interval * step_seconds),
        "total_seconds": seconds * saves if saves else None,
    }


def built_model_parameters(effective: Mapping[str, Any], entry: str, tp: int, tokenizer_vocab: int | None = None
                           ) -> int:
    """The one parameter count `launch list`, the dry-run and `launch plan` print: of the model that `entry`
    builds from every argument as Megatron sees it (ResolvedJob.effective(); the simple loop builds its own:
    unpadded vocabulary, untied output)."""
    return parameter_count(model_args(effective, entry, tokenizer_vocab), tp)
