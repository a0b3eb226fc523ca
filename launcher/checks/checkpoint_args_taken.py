"""The job's settings as Megatron runs it with use_checkpoint_args: before validate_args, the pin's
load_args_from_checkpoint (megatron/training/checkpointing.py) replaces the job's model settings with the
checkpoint's stored ones, so the model Megatron builds, and loads the checkpoint into, is largely the checkpoint's.
The resume check judges that job, not the one the preset writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# _set_arg(name, force=True): the checkpoint's value wherever it stored one
FORCED = ("num_query_groups", "group_query_attention", "position_embedding_type", "add_position_embedding",
          "use_rotary_position_embeddings", "rotary_base", "rotary_percent", "rotary_interleaved", "add_bias_linear",
          "add_qkv_bias", "squared_relu", "swiglu", "untie_embeddings_and_output_weights", "apply_layernorm_1p",
          "normalization", "apply_query_key_layer_scaling", "attention_dropout", "hidden_dropout",
          "mtp_hybrid_override_pattern", "mtp_num_layers", "mtp_use_repeated_layer", "spec", "num_experts",
          "moe_layer_freq", "moe_router_topk", "moe_router_pre_softmax", "moe_grouped_gemm",
          "moe_single_grouped_weight", "moe_single_grouped_bias", "moe_shared_expert_intermediate_size",
          "moe_router_score_function", "moe_router_enable_expert_bias", "moe_router_topk_scaling_factor",
          "mamba_state_dim", "mamba_head_dim", "mamba_num_groups", "mamba_num_heads",
          "heterogeneous_layers_config_path", "heterogeneous_layers_config_encoded_json", "moe_latent_size",
          "tiktoken_pattern")
# _set_arg(name): the checkpoint's value only where the job leaves the setting unset (None after parsing)
WHERE_UNSET = ("num_layers", "hidden_size", "ffn_hidden_size", "seq_length", "num_attention_heads", "kv_channels",
               "max_position_embeddings", "moe_token_dispatcher_type", "hybrid_layer_pattern", "padded_vocab_size",
               "ckpt_format")
TOKENIZER = ("tokenizer_model", "tokenizer_type")  # forced with use_tokenizer_model_from_checkpoint_args
LAYOUT = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
          "expert_model_parallel_size")  # forced with use_mp_args_from_checkpoint_args


def taken(job_args: Mapping[str, Any], saved: Mapping[str, Any]) -> dict[str, Any]:
    """`job_args` (every setting as Megatron parses the job's flags) with what load_args_from_checkpoint takes
    from the stored args `saved`; `job_args` unchanged without use_checkpoint_args."""
    if not job_args.get("use_checkpoint_args"):
        return dict(job_args)
    stored = dict(saved)
    if "disable_bias_linear" in stored:  # the pin's one-off conversion of older checkpoints
        stored["add_bias_linear"] = not stored["disable_bias_linear"]
    out = dict(job_args)

    def take(name: str, force: bool) -> None:
        if (force or out.get(name) is None) and stored.get(name) is not None:
            out[name] = stored[name]

    for name in FORCED:
        take(name, True)
    for name in WHERE_UNSET:
        take(name, False)
    if stored.get("num_experts") is not None:
        take("moe_ffn_hidden_size", True)
    else:
        out["moe_ffn_hidden_size"] = None
    if job_args.get("use_tokenizer_model_from_checkpoint_args"):
        for name in TOKENIZER:
            take(name, True)
    if job_args.get("use_mp_args_from_checkpoint_args"):
        for name in LAYOUT:
            take(name, True)
    return out
