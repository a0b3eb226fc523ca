"""The output layer's GEMMs run at the efficiency of their own shape: a weight shard of h × V/TP, so its narrow side
is min(h, V/TP), not a transformer layer's h/TP (the rule an expert's GEMM follows too)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from launcher.estimate import formulas as est
from launcher.estimate import steptime

H100 = est.GPUS["h100-80gb"]
LLAMA_LIKE = dict(num_layers=8, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=14336, seq_length=8192,
                  max_position_embeddings=8192, vocab_size=131072, bf16=True, swiglu=True,
                  untie_embeddings_and_output_weights=True, micro_batch_size=1, global_batch_size=64)


def _loss_seconds(args: dict, tp: int) -> float:
    """One microbatch of the output layer and the loss alone (a rank holding no layers), at TP `tp`."""
    m = est.model_shape(args, tp)
    t = replace(est.training_of(args, 8), tp=tp, sequence_parallel=tp > 1)
    place = steptime.placement(t, 8)
    k = steptime.KERNELS["hopper"]
    return steptime._rank_time(m, t, H100, k, 0, False, True, place, None).compute


def test_tensor_parallel_does_not_narrow_the_output_layer_while_its_shard_is_wider_than_the_hidden_size() -> None:
    # V/TP = 16,384 ≥ h = 4,096 up to TP 8: per GPU 1/TP of the FLOPs at one efficiency, so the time is ∝ 1/TP
    tp2, tp8 = _loss_seconds(LLAMA_LIKE, 2), _loss_seconds(LLAMA_LIKE, 8)
    assert tp2 / tp8 == pytest.approx(4, rel=1e-3)


def test_a_narrow_vocabulary_shard_slows_the_output_layer() -> None:
    # V/TP = 4,000 < h = 16,384 at TP 8: the shard is the narrow side and the GEMMs run less efficiently than at TP 2
    narrow = dict(LLAMA_LIKE, hidden_size=16384, num_attention_heads=128, vocab_size=32000)
    tp2, tp8 = _loss_seconds(narrow, 2), _loss_seconds(narrow, 8)
    assert tp2 / tp8 < 4 * 0.97


def test_fp8_does_not_speed_the_output_layer() -> None:
    assert _loss_seconds(dict(LLAMA_LIKE, fp8="hybrid"), 4) == _loss_seconds(LLAMA_LIKE, 4)
