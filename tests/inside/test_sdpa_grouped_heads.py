"""The SDPA spec's attention with grouped key/value heads (GQA/MQA). Where flash attention cannot run (fp32, an
explicit mask, head dims above 256) the fused kernel left, the memory-efficient one, takes no grouped heads, so the
spec repeats the key/value heads to the query heads itself rather than letting torch fall back to its math
attention (which keeps [b, heads, s, s] scores per layer); otherwise the grouped heads go to flash as they are."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

F = torch.nn.functional


@pytest.fixture
def sdpa_calls(monkeypatch):
    """What reaches torch's SDPA: (query heads, key heads, value heads, enable_gqa) per call."""
    from launcher.inside.megatron_ext import sdpa_spec

    calls = []

    def recording(q, k, v, **kwargs):
        calls.append((q.size(-3), k.size(-3), v.size(-3), kwargs.get("enable_gqa", False)))
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    monkeypatch.setattr(sdpa_spec, "F", types.SimpleNamespace(scaled_dot_product_attention=recording))
    return calls


def qkv(heads: int, groups: int, dtype=torch.float32):
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, heads, 16, 8, generator=generator).to(dtype)
    k, v = (torch.randn(2, groups, 16, 8, generator=generator).to(dtype) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("groups", [1, 2])
def test_fp32_grouped_heads_reach_sdpa_repeated_and_give_torchs_grouped_result(sdpa_calls, groups):
    from launcher.inside.megatron_ext.sdpa_spec import sdpa

    q, k, v = qkv(4, groups)
    out = sdpa(q, k, v, is_causal=True, scale=0.3, enable_gqa=True)
    assert sdpa_calls == [(4, 4, 4, False)]
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3, enable_gqa=True)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_grouped_heads_go_to_sdpa_as_they_are(sdpa_calls, dtype):
    from launcher.inside.megatron_ext.sdpa_spec import sdpa

    sdpa(*qkv(4, 2, dtype), is_causal=True, enable_gqa=True)
    assert sdpa_calls == [(4, 2, 2, True)]


def test_half_precision_grouped_heads_with_a_mask_reach_sdpa_repeated(sdpa_calls):
    from launcher.inside.megatron_ext.sdpa_spec import sdpa

    q, k, v = qkv(4, 2, torch.bfloat16)
    mask = torch.ones(16, 16, dtype=torch.bool).tril()
    out = sdpa(q, k, v, attn_mask=mask, enable_gqa=True)
    assert sdpa_calls == [(4, 4, 4, False)]
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True))


def test_fp32_without_grouped_heads_is_untouched(sdpa_calls):
    from launcher.inside.megatron_ext.sdpa_spec import sdpa

    sdpa(*qkv(4, 4), is_causal=True, enable_gqa=False)
    assert sdpa_calls == [(4, 4, 4, False)]


def test_the_compiled_layers_math_repeats_grouped_heads_in_fp32(sdpa_calls):
    from launcher.inside.megatron_ext.compiled_layer import layer_math

    h, heads, groups, d, ffn = 32, 4, 1, 8, 64
    qkv_rows = groups * (heads // groups + 2) * d
    generator = torch.Generator().manual_seed(1)

    def rand(*shape):
        return torch.randn(*shape, generator=generator) * 0.1

    out = layer_math(rand(16, 2, h), torch.ones(h), torch.zeros(h), rand(qkv_rows, h), rand(qkv_rows),
                     rand(h, heads * d), rand(h), torch.ones(h), torch.zeros(h), rand(ffn, h), rand(ffn),
                     rand(h, ffn), rand(h), eps=1e-5, rms=False, zero_centered=False, heads=heads, groups=groups,
                     head_dim=d, scale=d ** -0.5, activation="gelu", hidden_dropout=0.0, attention_dropout=0.0)
    assert out.shape == (16, 2, h)
    assert sdpa_calls == [(heads, heads, heads, False)]
