"""parameter_count against the parameters of a GPTModel that Megatron really builds (CPU, local spec)."""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest

from launcher.estimate import formulas as est

pytestmark = pytest.mark.megatron
torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

SHAPES: dict[str, dict[str, Any]] = {
    "gpt2-like": dict(num_layers=3, hidden_size=64, num_attention_heads=4, seq_length=32, max_position_embeddings=48,
                      vocab_size=1000),
    "llama-like": dict(num_layers=2, hidden_size=96, num_attention_heads=6, group_query_attention=True,
                       num_query_groups=2, swiglu=True, normalization="RMSNorm", add_bias_linear=False,
                       untie_embeddings_and_output_weights=True, position_embedding_type="rope",
                       seq_length=32, max_position_embeddings=32, vocab_size=777),
    "kv-channels": dict(num_layers=2, hidden_size=48, num_attention_heads=4, kv_channels=16, ffn_hidden_size=100,
                        seq_length=16, max_position_embeddings=16, vocab_size=300),
}


@pytest.fixture(scope="module")
def model_parallel():
    import torch.distributed as dist
    from megatron.core import parallel_state

    if not dist.is_initialized():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", world_size=1, rank=0)
    parallel_state.initialize_model_parallel(1, 1)
    yield
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


def build(args: dict[str, Any]):
    import torch.nn.functional as F
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig

    config = TransformerConfig(
        num_layers=args["num_layers"], hidden_size=args["hidden_size"],
        num_attention_heads=args["num_attention_heads"], kv_channels=args.get("kv_channels"),
        num_query_groups=args.get("num_query_groups") if args.get("group_query_attention") else None,
        ffn_hidden_size=est.ffn_hidden_size(args), gated_linear_unit=bool(args.get("swiglu")),
        activation_func=F.silu if args.get("swiglu") else F.gelu,
        normalization=args.get("normalization", "LayerNorm"), add_bias_linear=args.get("add_bias_linear", True),
        use_cpu_initialization=True,
    )
    return GPTModel(
        config=config, transformer_layer_spec=get_gpt_layer_local_spec(normalization=config.normalization),
        vocab_size=est.padded_vocab_size(args, 1), max_sequence_length=args["max_position_embeddings"],
        position_embedding_type=args.get("position_embedding_type", "learned_absolute"),
        share_embeddings_and_output_weights=not args.get("untie_embeddings_and_output_weights"),
    )


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_parameter_count_equals_the_built_model(name: str, model_parallel) -> None:
    args = SHAPES[name]
    model = build(args)
    built = sum(p.numel() for p in model.parameters())
    assert est.parameter_count(args) == built
    # The single-stage view (what one GPU holds at TP1 PP1) is the same count.
    m = est.model_shape(args, 1)
    assert est.stage_parameters(m, est.Training(world_size=1))[0].params == built
