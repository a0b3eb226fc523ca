"""The parameter tensors a GPT of a given shape holds, by the names of Megatron's sharded state dict and their global
shapes (the decoder's layers stacked: their first dimension counts the layers that hold them), as the pin's layer
specs build them (local and Transformer Engine specs save the same names). A load compares these, not the settings:

    reshaped   in both, another shape: Megatron stops at load (torch_dist 'Global shape mismatch', torch
               'size mismatch'), whatever its strictness
    added      the job's model has it, the checkpoint does not (a bias, a norm, an untied output layer): torch_dist
               stops at load ('… from model not in state dict'); the torch format's non-strict fallback leaves it
               at its initial value
    dropped    the checkpoint has it, the job's model does not: it is left unread, and the model is another one
               (torch_dist stops only with dist_ckpt_strictness raise_all)

The torch format saves one tensor per layer and per expert instead (compare): another number of layers adds or
drops tensors there. The vocabulary's rows (the embedding and an untied output layer) are VOCAB: another padded
vocabulary is judged apart (resume._vocabulary), as torch_dist loads those two at another size.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.estimate.formulas import ModelShape

VOCAB = -1  # the padded vocabulary's rows


@dataclass(frozen=True)
class Difference:
    reshaped: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]  # (name, checkpoint's, job's)
    # the names added or dropped, the torch format's per-layer and per-expert ones once each
    # (decoder.layers.*.…, local_experts.*.…), and how many tensors they are
    added: tuple[str, ...]
    dropped: tuple[str, ...]
    added_count: int = 0
    dropped_count: int = 0

    def __bool__(self) -> bool:
        return bool(self.reshaped or self.added or self.dropped)


def _norm(name: str, size: int, m: ModelShape, layers: int | None = None) -> dict[str, tuple[int, ...]]:
    """A LayerNorm's weight and bias, an RMSNorm's weight alone (norm_size)."""
    lead = () if layers is None else (layers,)
    out = {f"{name}.weight": (*lead, size)}
    if m.norm_size == 2:
        out[f"{name}.bias"] = (*lead, size)
    return out


def _linear(name: str, rows: int, cols: int, bias: bool, lead: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    out = {f"{name}.weight": (*lead, rows, cols)}
    if bias:
        out[f"{name}.bias"] = (*lead, rows)
    return out


def _attention(m: ModelShape, n: int) -> dict[str, tuple[int, ...]]:
    h, lead, at = m.hidden_size, (n,), "decoder.layers.self_attention"
    out: dict[str, tuple[int, ...]] = {}
    if m.mla:  # MultiLatentAttention (no biases); q_layernorm / kv_layernorm on the latents with qk_layernorm
        qk = m.num_attention_heads * (m.qk_head_dim + m.qk_pos_emb_head_dim)
        if m.q_lora_rank:
            out |= _linear(f"{at}.linear_q_down_proj", m.q_lora_rank, h, False, lead)
            out |= _linear(f"{at}.linear_q_up_proj", qk, m.q_lora_rank, False, lead)
            if m.qk_layernorm:
                out |= _norm(f"{at}.q_layernorm", m.q_lora_rank, m, n)
        else:
            out |= _linear(f"{at}.linear_q_proj", qk, h, False, lead)
        out |= _linear(f"{at}.linear_kv_down_proj", m.kv_lora_rank + m.qk_pos_emb_head_dim, h, False, lead)
        out |= _linear(f"{at}.linear_kv_up_proj", m.num_attention_heads * (m.qk_head_dim + m.v_head_dim),
                       m.kv_lora_rank, False, lead)
        if m.qk_layernorm:
            out |= _norm(f"{at}.kv_layernorm", m.kv_lora_rank, m, n)
        return out | _linear(f"{at}.linear_proj", h, m.attn_out_width, m.linear_bias, lead)
    # the gate (attention_output_gate) is one more query-sized block of linear_qkv's rows
    rows = m.query_size * (2 if m.attention_output_gate else 1) + 2 * m.kv_size
    out |= _linear(f"{at}.linear_qkv", rows, h, m.qkv_bias, lead)
    if m.qk_layernorm:
        out |= _norm(f"{at}.q_layernorm", m.kv_channels, m, n) | _norm(f"{at}.k_layernorm", m.kv_channels, m, n)
    return out | _linear(f"{at}.linear_proj", h, m.query_size, m.linear_bias, lead)


def _mlp(prefix: str, width: int, m: ModelShape, lead: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    h = m.hidden_size
    return _linear(f"{prefix}.linear_fc1", width * (2 if m.swiglu else 1), h, m.linear_bias, lead) | \
        _linear(f"{prefix}.linear_fc2", h, width, m.linear_bias, lead)


def tensors(m: ModelShape) -> dict[str, tuple[int, ...]]:
    """Every parameter tensor of the model `m` (estimate.formulas.model_shape), name → global shape."""
    h, layers = m.hidden_size, m.num_layers
    out: dict[str, tuple[int, ...]] = {"embedding.word_embeddings.weight": (VOCAB, h)}
    if m.position_embeddings:
        out["embedding.position_embeddings.weight"] = (m.position_embeddings, h)
    out |= _norm("decoder.layers.input_layernorm", h, m, layers) | _attention(m, layers)
    out |= _norm("decoder.layers.pre_mlp_layernorm", h, m, layers)
    moe = m.moe_layers if m.num_experts else 0
    if layers - moe:
        out |= _mlp("decoder.layers.mlp", m.ffn_hidden_size, m, (layers - moe,))
    if moe:
        out["decoder.layers.mlp.router.weight"] = (moe, m.num_experts, h)
        out |= _mlp("decoder.layers.mlp.experts.experts", m.moe_ffn_hidden_size, m, (moe, m.num_experts))
        if m.shared_expert_size:
            out |= _mlp("decoder.layers.mlp.shared_experts", m.shared_expert_size, m, (moe,))
    out |= _norm("decoder.final_layernorm", h, m)
    if m.untied:
        out["output_layer.weight"] = (VOCAB, h)
    return out


LAYERS, EXPERTS = "decoder.layers.", "mlp.experts.experts."


def _per_layer(name: str, shape: tuple[int, ...]) -> tuple[str, str, int, tuple[int, ...]]:
    """The torch format's view of a stacked tensor, which it saves as one tensor per layer (decoder.layers.0.…) and
    per expert (local_experts.0.…): (their names with * for the indices, the first one's name, how many, the shape
    of each). Counted, never listed: a checkpoint's stored args may claim any number of layers."""
    if not name.startswith(LAYERS):
        return name, name, 1, shape
    rest = name.removeprefix(LAYERS)
    if rest.startswith(EXPERTS):
        inner = f"mlp.experts.local_experts.{{}}.{rest.removeprefix(EXPERTS)}"
        return f"{LAYERS}*.{inner.format('*')}", f"{LAYERS}0.{inner.format(0)}", shape[0] * shape[1], shape[2:]
    return f"{LAYERS}*.{rest}", f"{LAYERS}0.{rest}", shape[0], shape[1:]


def _common(a: tuple[int, ...], b: tuple[int, ...], name: str) -> int:
    """How many of a stacked tensor's per-layer (and per-expert) tensors two models both hold."""
    if not name.startswith(LAYERS):
        return 1
    if name.removeprefix(LAYERS).startswith(EXPERTS):
        return min(a[0], b[0]) * min(a[1], b[1])
    return min(a[0], b[0])


def compare(checkpoint: ModelShape, job: ModelShape, fmt: str = "torch_dist") -> Difference:
    """The tensors of `job` against the checkpoint's, named as `fmt` saves them: torch_dist stacks the layers, the
    torch format saves one tensor per layer and per expert, so that another number of layers or experts adds or
    drops tensors rather than reshaping them."""
    theirs, ours = tensors(checkpoint), tensors(job)
    if fmt != "torch":
        added, dropped = [n for n in ours if n not in theirs], [n for n in theirs if n not in ours]
        return Difference(reshaped=tuple((name, theirs[name], shape) for name, shape in ours.items()
                                         if name in theirs and theirs[name] != shape),
                          added=tuple(added), dropped=tuple(dropped), added_count=len(added),
                          dropped_count=len(dropped))
    reshaped, added, dropped, added_count, dropped_count = [], [], [], 0, 0
    for name, shape in ours.items():
        said, first, count, each = _per_layer(name, shape)
        both = _common(theirs[name], shape, name) if name in theirs else 0
        saved_each = _per_layer(name, theirs[name])[3] if both else each
        if saved_each != each:
            reshaped.append((first, saved_each, each))
        if count > both:
            added.append(said)
            added_count += count - both
    for name, shape in theirs.items():
        said, _, count, _ = _per_layer(name, shape)
        both = _common(shape, ours[name], name) if name in ours else 0
        if count > both:
            dropped.append(said)
            dropped_count += count - both
    return Difference(tuple(reshaped), tuple(added), tuple(dropped), added_count, dropped_count)
