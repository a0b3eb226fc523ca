"""Model shapes for the estimate tests: the three presets' Megatron args, plus shapes that exercise GQA,
SwiGLU, RMSNorm, untied embeddings, RoPE and kv_channels ≠ hidden/heads.

Each entry: name → (Megatron args, world size the preset is meant for).
"""

from __future__ import annotations

from typing import Any

TOY: dict[str, Any] = dict(
    num_layers=2, hidden_size=12, num_attention_heads=4, seq_length=64, max_position_embeddings=64,
    vocab_size=100, micro_batch_size=8, global_batch_size=8, tensor_model_parallel_size=2,
)
GPT_345M: dict[str, Any] = dict(
    num_layers=24, hidden_size=1024, num_attention_heads=16, seq_length=1024, max_position_embeddings=1024,
    vocab_size=50257, micro_batch_size=4, global_batch_size=32, bf16=True, use_distributed_optimizer=True,
)
GPT_175B: dict[str, Any] = dict(
    num_layers=96, hidden_size=12288, num_attention_heads=96, seq_length=2048, max_position_embeddings=2048,
    vocab_size=50257, micro_batch_size=1, global_batch_size=1536, bf16=True, tensor_model_parallel_size=8,
    pipeline_model_parallel_size=16, use_distributed_optimizer=True, sequence_parallel=True,
)
LLAMA_LIKE: dict[str, Any] = dict(
    num_layers=32, hidden_size=4096, num_attention_heads=32, group_query_attention=True, num_query_groups=8,
    ffn_hidden_size=14336, swiglu=True, normalization="RMSNorm", untie_embeddings_and_output_weights=True,
    position_embedding_type="rope", add_bias_linear=False, seq_length=4096, max_position_embeddings=4096,
    vocab_size=128256, micro_batch_size=1, global_batch_size=128, bf16=True,
)
GPT3_XL: dict[str, Any] = dict(
    num_layers=24, hidden_size=2048, num_attention_heads=24, kv_channels=128, seq_length=2048,
    max_position_embeddings=2048, vocab_size=50257, micro_batch_size=2, global_batch_size=512, bf16=True,
)

PRESETS: dict[str, tuple[dict[str, Any], int]] = {
    "toy": (TOY, 2),
    "345m": (GPT_345M, 1),
    "175b": (GPT_175B, 1536),
}
EXTRA: dict[str, tuple[dict[str, Any], int]] = {
    "llama-like": (LLAMA_LIKE, 64),
    "gpt3-xl": (GPT3_XL, 16),
}
