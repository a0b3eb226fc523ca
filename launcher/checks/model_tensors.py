"""The tensors a GPT of a given shape saves, by the names Megatron at the pin saves them under and their shapes, as
its layer specs build them. A load compares these, not the settings:

    reshaped   in both, another shape: Megatron stops at load (torch_dist 'Global shape mismatch', torch
               'size mismatch'), whatever its strictness
    added      the job's model has it, the checkpoint does not (a bias, a norm, an untied output layer): torch_dist
               stops at load ('… from model not in state dict'); the torch format's non-strict fallback leaves it
               at its initial value
    dropped    the checkpoint has it, the job's model does not: it is left unread, and the model is another one
               (torch_dist stops only with dist_ckpt_strictness raise_all)

torch_dist stacks the decoder's layers into one tensor each (their first dimension counts the layers) unless a
per-layer pattern (moe_layer_freq, linear_attention_freq: a list, or an int above 1) makes the layers unlike:
then each layer is saved under its own name (decoder.layers.3.…, transformer_block.py sharded_state_dict), as the
torch format always saves them, and each expert too (local_experts.0.…). Such per-layer tensors are counted by
the layers that hold them (Layers), never listed: a checkpoint's stored args may claim any number of layers.

Names follow the implementation: the local spec maps its norms to Transformer Engine's fused names in torch_dist
(input_layernorm → self_attention.linear_qkv.layer_norm_, pre_mlp_layernorm → mlp.linear_fc1.layer_norm_, also in
MoE layers, where TE keeps pre_mlp_layernorm); MLA keeps input_layernorm and, under TE, fuses its latents' norms
into the up projections; the torch format saves module names (TE's fused norms, grouped experts as weight0…).
The vocabulary's rows (the embedding and an untied output layer) are VOCAB: another padded vocabulary is judged
apart (resume._vocabulary), as torch_dist loads those two at another size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from launcher.estimate.formulas import ModelShape

VOCAB = -1  # the padded vocabulary's rows
# saved with the weights but no parameter: the optimizer holds no state for it
BUFFERS = ("mlp.router.expert_bias",)


@dataclass(frozen=True)
class Layers:
    """The decoder layers below `count` that hold a tensor: those whose moe_layer_freq `pattern` says MoE
    (`moe`) or dense (not `moe`); an int pattern N makes every N-th layer MoE (1: all of them, as for every layer's
    attention)."""

    count: int
    pattern: int | tuple[int, ...] = 1
    moe: bool = True

    def holds(self, index: int) -> bool:
        if isinstance(self.pattern, int):
            return (index % max(1, self.pattern) == 0) == self.moe
        return (index < len(self.pattern) and self.pattern[index] == 1) == self.moe

    def size(self) -> int:
        return _between(self, 0, self.count)

    def common(self, other: Layers) -> int:
        """How many layers both hold (layer by layer only over a listed pattern, which is bounded)."""
        end = min(self.count, other.count)
        if isinstance(self.pattern, int) and isinstance(other.pattern, int):
            a, b = max(1, self.pattern), max(1, other.pattern)
            both = _multiples(math.lcm(a, b), 0, end)
            if self.moe and other.moe:
                return both
            if self.moe != other.moe:
                return _multiples(a if self.moe else b, 0, end) - both
            return end - _multiples(a, 0, end) - _multiples(b, 0, end) + both
        listed = max(len(p) for p in (self.pattern, other.pattern) if isinstance(p, tuple))
        stop = min(end, listed)
        shared = sum(1 for i in range(stop) if self.holds(i) and other.holds(i))
        if stop < end:  # past every listed pattern: such a side's layers are dense
            fixed = [layers for layers in (self, other) if isinstance(layers.pattern, tuple)]
            rest = other if fixed[0] is self else self
            if len(fixed) == 1 and not fixed[0].moe:
                shared += _between(rest, stop, end)
            elif len(fixed) == 2 and not (self.moe or other.moe):
                shared += end - stop
        return shared


def _multiples(n: int, start: int, end: int) -> int:
    """Multiples of n in [start, end)."""
    return max(0, (end + n - 1) // n - (start + n - 1) // n)


def _between(layers: Layers, start: int, end: int) -> int:
    if end <= start:
        return 0
    if isinstance(layers.pattern, int):
        hit = _multiples(max(1, layers.pattern), start, end)
        return hit if layers.moe else end - start - hit
    listed = min(end, len(layers.pattern))
    return sum(1 for i in range(start, listed) if layers.holds(i)) + \
        (0 if layers.moe else max(0, end - max(start, listed)))


@dataclass(frozen=True)
class Entry:
    """One saved tensor, or a family of them: `shape` each; per layer (`layers`) and per expert (`experts`, the
    torch format's local_experts.*) where not stacked."""

    shape: tuple[int, ...]
    layers: Layers | None = None
    experts: int = 0

    def count(self) -> int:
        return (self.layers.size() if self.layers else 1) * (self.experts or 1)

    def common(self, other: Entry) -> int:
        layers = self.layers.common(other.layers) if self.layers and other.layers else 1
        return layers * (min(self.experts, other.experts) if self.experts and other.experts else 1)


@dataclass(frozen=True)
class Difference:
    reshaped: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]  # (name, checkpoint's, job's)
    # the names added or dropped (a per-layer or per-expert family once, with *), and how many tensors they are
    added: tuple[str, ...]
    dropped: tuple[str, ...]
    added_count: int = 0
    dropped_count: int = 0
    # whether a parameter (not only a buffer) is added or dropped, and whether the optimizer's parameter groups
    # (with and without weight decay) change size
    params_changed: bool = False
    groups_changed: bool = False

    def __bool__(self) -> bool:
        return bool(self.reshaped or self.added or self.dropped)


def _norm(name: str, size: int, m: ModelShape) -> dict[str, tuple[int, ...]]:
    """A LayerNorm's weight and bias, an RMSNorm's weight alone (norm_size); `name` ends in '.' for a module and
    in '_' for TE's fused norm (layer_norm_weight)."""
    out: dict[str, tuple[int, ...]] = {f"{name}weight": (size,)}
    if m.norm_size == 2:
        out[f"{name}bias"] = (size,)
    return out


def _linear(name: str, rows: int, cols: int, bias: bool) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {f"{name}.weight": (rows, cols)}
    if bias:
        out[f"{name}.bias"] = (rows,)
    return out


def _attention(m: ModelShape) -> dict[str, tuple[int, ...]]:
    h, at = m.hidden_size, "self_attention"
    out: dict[str, tuple[int, ...]] = {}
    if m.softmax_offset:  # softmax_type learnable: one offset per head
        out[f"{at}.core_attention.softmax_offset"] = (m.num_attention_heads,)
    if m.mla:  # MultiLatentAttention (no biases); q_layernorm / kv_layernorm on the latents with qk_layernorm
        # TE fuses the latents' norms into the up projections (gpt_layer_specs.py), under that name in both formats
        q_norm, kv_norm = (f"{at}.linear_q_up_proj.layer_norm_", f"{at}.linear_kv_up_proj.layer_norm_") \
            if m.te_names else (f"{at}.q_layernorm.", f"{at}.kv_layernorm.")
        qk = m.num_attention_heads * (m.qk_head_dim + m.qk_pos_emb_head_dim)
        if m.q_lora_rank:
            out |= _linear(f"{at}.linear_q_down_proj", m.q_lora_rank, h, False)
            out |= _linear(f"{at}.linear_q_up_proj", qk, m.q_lora_rank, False)
            if m.qk_layernorm:
                out |= _norm(q_norm, m.q_lora_rank, m)
        else:
            out |= _linear(f"{at}.linear_q_proj", qk, h, False)
        out |= _linear(f"{at}.linear_kv_down_proj", m.kv_lora_rank + m.qk_pos_emb_head_dim, h, False)
        out |= _linear(f"{at}.linear_kv_up_proj", m.num_attention_heads * (m.qk_head_dim + m.v_head_dim),
                       m.kv_lora_rank, False)
        if m.qk_layernorm:
            out |= _norm(kv_norm, m.kv_lora_rank, m)
        return out | _linear(f"{at}.linear_proj", h, m.attn_out_width, m.linear_bias)
    # the gate (attention_output_gate) is one more query-sized block of linear_qkv's rows
    rows = m.query_size * (2 if m.attention_output_gate else 1) + 2 * m.kv_size
    out |= _linear(f"{at}.linear_qkv", rows, h, m.qkv_bias)
    if m.qk_layernorm:
        out |= _norm(f"{at}.q_layernorm.", m.kv_channels, m) | _norm(f"{at}.k_layernorm.", m.kv_channels, m)
    return out | _linear(f"{at}.linear_proj", h, m.query_size, m.linear_bias)


def _mlp(prefix: str, width: int, m: ModelShape, bias: bool, h: int = 0) -> dict[str, tuple[int, ...]]:
    h = h or m.hidden_size
    return _linear(f"{prefix}.linear_fc1", width * (2 if m.swiglu else 1), h, bias) | \
        _linear(f"{prefix}.linear_fc2", h, width, bias)


def _norm_names(m: ModelShape, moe: bool, fmt: str) -> tuple[str, str]:
    """The input and pre-MLP norms' names (gpt_layer_specs.py: the local spec's sharded_state_dict_keys_map, TE's
    fused norms; MLA's local spec maps nothing)."""
    fused_in, fused_mlp = "self_attention.linear_qkv.layer_norm_", "mlp.linear_fc1.layer_norm_"
    plain_in, plain_mlp = "input_layernorm.", "pre_mlp_layernorm."
    if m.mla:
        return plain_in, (fused_mlp if m.te_names and not moe else plain_mlp)
    if fmt == "torch" and not m.te_names:
        return plain_in, plain_mlp
    return fused_in, (plain_mlp if m.te_names and moe else fused_mlp)


def _layer(m: ModelShape, moe: bool, fmt: str) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """One decoder layer's tensors (each layer's shape), and its experts' (each expert's shape)."""
    h = m.hidden_size
    norm_in, norm_mlp = _norm_names(m, moe, fmt)
    out = _norm(norm_in, h, m) | _attention(m) | _norm(norm_mlp, h, m)
    experts: dict[str, tuple[int, ...]] = {}
    if not moe:
        return out | _mlp("mlp", m.ffn_hidden_size, m, m.linear_bias), experts
    out["mlp.router.weight"] = (m.num_experts, h)
    if m.linear_bias:
        out["mlp.router.bias"] = (m.num_experts,)
    if m.expert_bias:
        out["mlp.router.expert_bias"] = (m.num_experts,)
    if m.shared_expert_size:
        out |= _mlp("mlp.shared_experts", m.shared_expert_size, m, False)
        if m.shared_expert_gate:
            out["mlp.shared_experts.gate_weight"] = (1, h)
    if m.moe_latent_size:  # moe_layer.py: the experts' input and output projected to and from the latent width
        out |= _linear("mlp.fc1_latent_proj", m.moe_latent_size, h, m.linear_bias)
        out |= _linear("mlp.fc2_latent_proj", h, m.moe_latent_size, m.linear_bias)
    each = _mlp("", m.moe_ffn_hidden_size, m, m.linear_bias, m.moe_latent_size)
    if fmt != "torch":  # stacked over the experts, as SequentialMLP and TE's grouped experts both save them
        out |= {f"mlp.experts.experts{k}": (m.num_experts, *v) for k, v in each.items()}
    elif m.grouped_experts:  # TEGroupedMLP: linear_fc1.weight0, weight1, …
        experts = {f"mlp.experts{k}*": v for k, v in each.items()}
    else:
        experts = {f"mlp.experts.local_experts.*{k}": v for k, v in each.items()}
    return out, experts


def _is_moe(m: ModelShape, index: int) -> bool:
    return bool(m.num_experts) and Layers(m.num_layers, m.moe_pattern).holds(index)


def entries(m: ModelShape, fmt: str = "torch_dist") -> dict[str, Entry]:
    """Every tensor of the model `m` (estimate.formulas.model_shape) as `fmt` saves it, name → Entry."""
    h, count = m.hidden_size, m.num_layers
    out: dict[str, Entry] = {"embedding.word_embeddings.weight": Entry((VOCAB, h))}
    if m.position_embeddings:
        out["embedding.position_embeddings.weight"] = Entry((m.position_embeddings, h))
    mixed = bool(m.num_experts) and (isinstance(m.moe_pattern, tuple) or m.moe_pattern > 1)
    kinds = [False, True] if mixed else [bool(m.num_experts)]
    per_layer = fmt == "torch" or m.per_layer_keys
    for moe in kinds:
        layers = Layers(count) if len(kinds) == 1 else Layers(count, m.moe_pattern, moe)
        tensors, experts = _layer(m, moe, fmt)
        for name, shape in tensors.items():
            if not per_layer:
                out[f"decoder.layers.{name}"] = Entry((count, *shape))
                continue
            key = f"decoder.layers.*.{name}"
            held = out.get(key)  # in both kinds of layer: every layer holds it
            out[key] = Entry(shape, Layers(count) if held else layers)
        for name, shape in experts.items():
            out[f"decoder.layers.*.{name}"] = Entry(shape, layers, m.num_experts)
    out |= {k: Entry(v) for k, v in _norm("decoder.final_layernorm.", h, m).items()}
    if m.mtp_layers:  # multi_token_prediction.py: one layer like the decoder's last per MTP depth, named apart
        mtp, inner = Layers(m.mtp_layers), "transformer_layer" if fmt != "torch" else "mtp_model_layer"
        own = _norm("enorm.", h, m) | _norm("hnorm.", h, m) | _norm("final_layernorm.", h, m) | \
            {"eh_proj.weight": (h, 2 * h)}
        tensors, experts = _layer(m, _is_moe(m, count - 1), fmt)
        out |= {f"mtp.layers.*.{k}": Entry(v, mtp) for k, v in own.items()}
        out |= {f"mtp.layers.*.{inner}.{k}": Entry(v, mtp) for k, v in tensors.items()}
        out |= {f"mtp.layers.*.{inner}.{k}": Entry(v, mtp, m.num_experts) for k, v in experts.items()}
    if m.untied:
        out["output_layer.weight"] = Entry((VOCAB, h))
    return out


def tensors(m: ModelShape, fmt: str = "torch_dist") -> dict[str, tuple[int, ...]]:
    """Every tensor's name and shape, a per-layer family's shape led by how many layers (and experts) hold it."""
    return {name: ((e.count(), *e.shape) if e.layers or e.experts else e.shape)
            for name, e in entries(m, fmt).items()}


def _is_buffer(name: str) -> bool:
    return name.endswith(BUFFERS)


def _groups(found: dict[str, Entry]) -> tuple[int, int]:
    """Parameters with and without weight decay (Megatron's default: biases and 1-D tensors go without), the
    optimizer's parameter groups that the torch format saves by position (`found` named as the torch format names
    them: each tensor's own shape)."""
    decayed = plain = 0
    for name, entry in found.items():
        if _is_buffer(name):
            continue
        if name.endswith("bias") or len(entry.shape) == 1:
            plain += entry.count()
        else:
            decayed += entry.count()
    return decayed, plain


def compare(checkpoint: ModelShape, job: ModelShape, fmt: str = "torch_dist") -> Difference:
    """The tensors of `job` against the checkpoint's, named as `fmt` saves them."""
    theirs, ours = entries(checkpoint, fmt), entries(job, fmt)
    reshaped, added, dropped, added_count, dropped_count, params = [], [], [], 0, 0, False
    for name, entry in ours.items():
        held = theirs.get(name)
        both = entry.common(held) if held else 0
        if held and both and held.shape != entry.shape:
            reshaped.append((name, held.shape, entry.shape))
        if entry.count() > both:
            added.append(name)
            added_count += entry.count() - both
            params = params or not _is_buffer(name)
    for name, entry in theirs.items():
        held = ours.get(name)
        both = entry.common(held) if held else 0
        if entry.count() > both:
            dropped.append(name)
            dropped_count += entry.count() - both
            params = params or not _is_buffer(name)
    groups = fmt == "torch" and _groups(theirs) != _groups(ours)
    return Difference(tuple(reshaped), tuple(added), tuple(dropped), added_count, dropped_count, params, groups)
