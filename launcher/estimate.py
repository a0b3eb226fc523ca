"""Model size arithmetic, without torch: padded vocabulary and the exact parameter count of Megatron's GPT."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def padded_vocab_size(args: Mapping[str, Any], tp: int) -> int:
    """Megatron's build_tokenizer padding: up to a multiple of make_vocab_size_divisible_by × TP."""
    if args.get("padded_vocab_size"):
        return args["padded_vocab_size"]
    vocab = args["vocab_size"]
    if vocab is None:
        raise ValueError("vocab_size is not set")
    if args.get("pad_vocab_size") is False:
        return vocab
    multiple = args.get("make_vocab_size_divisible_by", 128) * tp
    return math.ceil(vocab / multiple) * multiple


def ffn_hidden_size(args: Mapping[str, Any]) -> int:
    if args.get("ffn_hidden_size"):
        return args["ffn_hidden_size"]
    hidden = args["hidden_size"]
    return int((4 * hidden * 2 / 3) / 64) * 64 if args.get("swiglu") else 4 * hidden


def parameter_count(args: Mapping[str, Any], tp: int = 1) -> int:
    """Total parameters of the GPT model pretrain_gpt.py builds (biases, norms, positions included)."""
    h, layers, heads = args["hidden_size"], args["num_layers"], args["num_attention_heads"]
    head_dim = args.get("kv_channels") or h // heads
    groups = args.get("num_query_groups", 1) if args.get("group_query_attention") else heads
    q_width, kv_width = heads * head_dim, 2 * groups * head_dim
    ffn = ffn_hidden_size(args)
    bias = args.get("add_bias_linear", True)
    qkv_bias = bias or args.get("add_qkv_bias", False)
    norm = h if args.get("normalization") == "RMSNorm" else 2 * h
    fc1_out = 2 * ffn if args.get("swiglu") else ffn

    attention = h * (q_width + kv_width) + (q_width + kv_width if qkv_bias else 0) + q_width * h + (h if bias else 0)
    mlp = h * fc1_out + (fc1_out if bias else 0) + ffn * h + (h if bias else 0)
    per_layer = attention + mlp + 2 * norm

    vocab = padded_vocab_size(args, tp)
    embedding = vocab * h
    positions = args["max_position_embeddings"] * h if args.get("position_embedding_type",
                                                                  "learned_absolute") == "learned_absolute" else 0
    output = vocab * h if args.get("untie_embeddings_and_output_weights") else 0
    return layers * per_layer + norm + embedding + positions + output


def human(count: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{count / size:.2f}{unit}"
    return str(int(count))
