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
    "qk-layernorm": dict(num_layers=2, hidden_size=64, num_attention_heads=4, qk_layernorm=True,
                         normalization="RMSNorm", seq_length=16, max_position_embeddings=16, vocab_size=300),
    # Multi-latent attention: low-rank query and key/value, RoPE head part, its own value head size
    "mla-q-lora": dict(num_layers=2, hidden_size=64, num_attention_heads=4, multi_latent_attention=True,
                       q_lora_rank=24, kv_lora_rank=16, qk_head_dim=12, qk_pos_emb_head_dim=8, v_head_dim=20,
                       qk_layernorm=True, normalization="RMSNorm", add_bias_linear=False, swiglu=True,
                       position_embedding_type="rope", seq_length=16, max_position_embeddings=16, vocab_size=300),
    "mla-full-q": dict(num_layers=2, hidden_size=64, num_attention_heads=4, multi_latent_attention=True,
                       kv_lora_rank=16, qk_head_dim=12, qk_pos_emb_head_dim=8, v_head_dim=10,
                       position_embedding_type="rope", seq_length=16, max_position_embeddings=16, vocab_size=300),
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


class NoWeights(torch.nn.Module):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()


def build(args: dict[str, Any]):
    import torch.nn.functional as F
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import MLATransformerConfig, TransformerConfig

    mla = {k: args[k] for k in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim") if k in args}
    if mla:  # Megatron's flag defaults to no low-rank query (MLATransformerConfig's own default is 512)
        mla["q_lora_rank"] = args.get("q_lora_rank")
    config = (MLATransformerConfig if args.get("multi_latent_attention") else TransformerConfig)(
        num_layers=args["num_layers"], hidden_size=args["hidden_size"],
        num_attention_heads=args["num_attention_heads"], kv_channels=args.get("kv_channels"),
        num_query_groups=args.get("num_query_groups") if args.get("group_query_attention") else None,
        ffn_hidden_size=est.ffn_hidden_size(args), gated_linear_unit=bool(args.get("swiglu")),
        activation_func=F.silu if args.get("swiglu") else F.gelu,
        normalization=args.get("normalization", "LayerNorm"), add_bias_linear=args.get("add_bias_linear", True),
        use_cpu_initialization=True, qk_layernorm=bool(args.get("qk_layernorm")), **mla,
        **({"rope_type": "rope"} if mla else {}),  # YaRN (MLA's default) builds its cache on the GPU
    )
    spec = get_gpt_layer_local_spec(normalization=config.normalization, qk_layernorm=config.qk_layernorm,
                                    multi_latent_attention=bool(args.get("multi_latent_attention")))
    if mla:  # upstream's local core attention takes no separate k/v head sizes; core attention has no weights
        spec.submodules.self_attention.submodules.core_attention = NoWeights
    return GPTModel(
        config=config, transformer_layer_spec=spec,
        vocab_size=est.padded_vocab_size(args, 1), max_sequence_length=args["max_position_embeddings"],
        position_embedding_type=args.get("position_embedding_type", "learned_absolute"),
        share_embeddings_and_output_weights=not args.get("untie_embeddings_and_output_weights"),
    )


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_parameter_count_equals_the_built_model(name: str, model_parallel, monkeypatch) -> None:
    args = SHAPES[name]
    # MLA's rotary embedding asks for the current CUDA device (it ignores use_cpu_initialization): CPU here
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    model = build(args)
    built = sum(p.numel() for p in model.parameters())
    assert est.parameter_count(args) == built
    # The single-stage view (what one GPU holds at TP1 PP1) is the same count.
    m = est.model_shape(args, 1)
    assert est.stage_parameters(m, est.Training(world_size=1))[0].params == built
