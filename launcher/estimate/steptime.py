"""Seconds per training iteration for a Megatron GPT layout, by cause (no torch).

The structure (docs/plan.md has the same with the calibration table):

1. Compute, per pipeline rank and microbatch, layer by layer:
   - GEMMs: 6·tokens·(linear weights per layer)/TP FLOPs at a shape-dependent fraction of the dense peak,
     `gemm · w/(w + gemm_width) · T/(T + gemm_tokens)`, w = hidden/TP (the GEMM shard), T = micro batch ·
     seq/CP (tokens per GEMM); FP8 multiplies the GEMM rate by `fp8_gain`;
   - core attention: Megatron's 6·q·s FLOPs per token (causal) at the flash-attention fraction `attention`;
   - elementwise work (norms, residuals, dropout, activation functions, casts): bytes over HBM bandwidth,
     `elementwise` passes over the hidden-wide tensors (replicated over TP unless sequence parallel) and
     `elementwise_ffn` over the FFN-wide ones;
   - the output layer and cross entropy on the rank that holds the loss (the output layer in BF16 also under FP8:
     it is outside the layers' FP8 context; at the width curve of its own shard h × V/TP); the embedding is a gather;
   - recompute: full repeats each layer's forward (⅓ of GEMM and attention, ½ of elementwise), the MoE block's
     included (expert GEMMs, permutation, dispatch); selective repeats the core attention's forward.
2. Pipeline (1F1B, or interleaved with VPP chunks): the slowest rank sets the pace, M microbatches of it,
   plus the fill and drain, (Σ rank times − slowest)/VPP, i.e. (PP−1)/(VPP·M) of the compute when even.
3. Communication, each with its overlap rule, at bus bandwidths (NVLink inside a node, one NIC per GPU between
   nodes); which groups cross nodes follows Megatron's rank order tp-cp-ep-dp-pp (TP innermost, PP outermost):
   - TP: 8 (t−1)/t activation volumes per layer per microbatch (2 all-reduces forward, 2 backward; with
     sequence parallel the same as all-gathers/reduce-scatters plus 2 all-gathers again in backward); exposed
     `tp_exposed` of it, or `tp_exposed_overlap` with `tp_comm_overlap` (TE userbuffers);
   - CP: ring attention passes K and V around the CP group (CP−1 steps forward, K, V and their gradients
     backward), overlapped with the attention it feeds: only what exceeds the attention time is exposed;
   - EP (MoE): the token dispatch and combine, forward and backward (all-to-all or all-gather; `flex` once per
     remote node), `dispatch_exposed` of it exposed, or with overlap_moe_expert_parallel_comm what another
     microbatch's compute does not hide; the expert GEMMs run at a shape efficiency of their own tokens per expert
     (_moe_time);
   - PP: one activation (sharded by TP with sequence parallel) per microbatch per chunk boundary each way,
     plus a latency per transfer; 1F1B waits for each; the interleaved schedule with overlap_p2p_comm (Megatron's
     default for VPP > 1) hides the steady-state ones behind the chunks' compute, not the warm-up and flush ones;
   - DP (gradients over DP×CP, the routed experts' over expert DP): reduce-scatter of the stage's gradients
     (fp32, or bf16 with grad_reduce_in_bf16) and all-gather of bf16 parameters with the distributed optimizer,
     else one all-reduce. With `overlap_grad_reduce` it hides behind the last microbatch's backward and only the
     part that does not fit, or at least the last bucket, is exposed; with `overlap_param_gather` likewise behind
     the first microbatch's forward; with VPP > 1 chunk by chunk (_staggered); without them all of it is exposed.
4. Optimizer step: Adam's bytes per (local) parameter over HBM bandwidth.

No term is counted twice: the constants are kernel-level efficiencies (a GEMM alone, a flash-attention
kernel alone), calibrated so that the sum matches end-to-end published iteration times
(launcher/estimate/calibration.py holds the runs; tests/estimate/test_plan_calibration.py computes the table).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from launcher.estimate.formulas import (
    Gpu,
    ModelShape,
    StageParams,
    Training,
    flops_per_iteration,
    pipeline_stages,
    stage_parameters,
)


@dataclass(frozen=True)
class Kernels:
    """Kernel-level efficiencies of one GPU family (fractions of the dense peak or counts of passes)."""

    gemm: float  # a large GEMM's fraction of the dense peak
    gemm_width: float  # shard width hidden/TP at which GEMM efficiency is half of `gemm`
    gemm_tokens: float  # tokens per GEMM (micro batch · seq / CP) at which it is half
    attention: float  # flash attention, forward + backward, fraction of the dense peak
    attention_unfused: float  # the two batched GEMMs of unfused attention (--transformer-impl local)
    fp8_gain: float  # GEMM speed-up with FP8
    elementwise: float  # bytes per element of hidden-wide tensors per layer, forward + backward
    elementwise_ffn: float  # the same for FFN-wide tensors (activation function)
    tp_exposed: float  # fraction of TP communication left exposed without tp_comm_overlap
    tp_exposed_overlap: float  # ... with tp_comm_overlap
    launch: float  # seconds of fixed cost per layer per microbatch (launches, syncs), forward + backward
    # MoE, fitted on the fitted part's Hopper MoE runs (`python -m launcher.estimate.calibration --fit`;
    # Ampere borrows them): the FLOPs of one expert's GEMM (2·M·N·K: its tokens × h × F_moe/ETP) at which the
    # grouped GEMM runs at half a large GEMM's rate (few large experts run as dense GEMMs do, many small ones
    # far below; that overhead does not shrink with FP8), the fraction of the token dispatch left exposed, and
    # the speed-up FP8 gives the expert GEMMs' large-GEMM part (fitted, not assumed equal to `fp8_gain`: the
    # published FP8 MoE runs do not show the dense GEMMs' gain)
    grouped_work: float = 2e10
    dispatch_exposed: float = 0.4
    grouped_fp8_gain: float = 1.0


# Fitted on the runs in calibration.py (coordinate descent on the mean and median |log error|), then rounded.
KERNELS: dict[str, Kernels] = {
    "ampere": Kernels(gemm=0.73, gemm_width=200, gemm_tokens=128, attention=0.3, attention_unfused=0.10,
                      fp8_gain=1.0, elementwise=20, elementwise_ffn=10, tp_exposed=0.55, tp_exposed_overlap=0.15,
                      launch=1e-4),
    "hopper": Kernels(gemm=0.68, gemm_width=200, gemm_tokens=512, attention=0.25, attention_unfused=0.10,
                      fp8_gain=1.85, elementwise=80, elementwise_ffn=10, tp_exposed=0.55, tp_exposed_overlap=0.15,
                      launch=1e-4),
}
# Blackwell: Hopper's kernel structure on the B200's own peaks and bandwidths (launcher/gpus.py), with the two
# constants its published runs fix (calibration.FITS: the dense GEMM rate on its two fitted dense runs, the
# expert GEMMs' small-GEMM overhead on its two fitted MoE runs, all FP8; the FP8 gain of expert GEMMs stays
# Hopper's, the only family whose BF16 and FP8 MoE runs tell the two apart).
KERNELS["blackwell"] = replace(KERNELS["hopper"], gemm=0.62, grouped_work=5e10)
KERNELS["ada"] = KERNELS["ampere"]  # not calibrated

P2P_LATENCY_S = 3e-5  # per pipeline send/receive pair
DDP_BUCKET_PARAMS = 40e6  # Megatron's default DDP bucket (at least 40M parameters)
ADAM_BYTES_PER_PARAM = 34  # read grad, master, m, v; write master, m, v, bf16 param; the grad-norm pass


@dataclass(frozen=True)
class StepTime:
    """Seconds per iteration, by cause. `total` is what ranking and time-to-budget use."""

    compute: float  # model FLOPs and elementwise work on the slowest pipeline rank, all microbatches
    recompute: float  # activation recompute on that rank
    bubble: float  # pipeline fill and drain
    tensor_comm: float  # exposed TP communication
    context_comm: float  # exposed CP ring-attention communication
    pipeline_comm: float  # exposed point-to-point transfers between stages
    data_comm: float  # exposed DP gradient reduction and parameter all-gather
    optimizer: float  # the optimizer step
    model_tflops: float = 0.0  # what Megatron would log: model FLOPs / (total · world)

    @property
    def total(self) -> float:
        return (self.compute + self.recompute + self.bubble + self.tensor_comm + self.context_comm
                + self.pipeline_comm + self.data_comm + self.optimizer)

    def as_dict(self) -> dict[str, float]:
        d = asdict(self)
        d["total"] = self.total
        return d


@dataclass(frozen=True)
class Placement:
    """Which of a layout's process groups span more than one node (Megatron's rank order tp-cp-ep-dp-pp)."""

    tp: bool
    cp: bool
    dp: bool  # the data-parallel group with CP, over which gradients are reduced
    pp: bool
    dp_per_node: int = 1  # members of one DP×CP group inside a node: NCCL drives that many NICs at once
    ep: bool = False  # the expert-parallel group (stride TP·CP)
    ep_per_node: int = 1  # members of the expert-parallel group inside one node


def placement(t: Training, gpus_per_node: int) -> Placement:
    """Megatron's default order (--rank-order tp-cp-ep-dp-pp): consecutive ranks fill TP first, then CP,
    EP, DP; PP is outermost. A group with stride `a` and `n` members lies in one node iff a·n ≤ node."""

    def spans(stride: int, size: int) -> bool:
        return size > 1 and stride * size > gpus_per_node

    return Placement(
        tp=spans(1, t.tp),
        cp=spans(t.tp, t.cp),
        dp=t.dp_cp > 1 and t.tp * t.cp * t.ep * t.dp > gpus_per_node,
        pp=spans(t.tp * t.cp * t.ep * t.dp, t.pp),
        dp_per_node=max(1, min(t.dp_cp, gpus_per_node // (t.tp * t.ep))),
        ep=spans(t.tp * t.cp, t.ep),
        ep_per_node=max(1, min(t.ep, gpus_per_node // (t.tp * t.cp))),
    )


def _bandwidth(gpu: Gpu, crosses: bool) -> float:
    return (gpu.network_gbps if crosses else gpu.nvlink_gbps) * 1e9


@dataclass(frozen=True)
class _RankTime:
    compute: float
    recompute: float
    tensor_comm: float
    context_comm: float

    @property
    def total(self) -> float:
        return self.compute + self.recompute + self.tensor_comm + self.context_comm


def _rank_time(m: ModelShape, t: Training, gpu: Gpu, k: Kernels, layers: int, embedding: bool, loss: bool,
               place: Placement, tflops: float | None) -> _RankTime:
    """One microbatch, forward and backward, on one GPU of a pipeline rank holding `layers` layers."""
    h, s, tp = m.hidden_size, m.seq_length, t.tp
    tokens = t.micro_batch_size * s / t.cp
    peak = gpu.peak_tflops * 1e12
    hbm = gpu.hbm_tbps * 1e12
    act = 4 if t.precision == "fp32" else 2
    linear = attention_gemm_weights(m, tp) + h * m.ffn_hidden_size * (3 if m.swiglu else 2)
    moe_share = m.moe_layers / m.num_layers if m.num_experts and m.num_layers else 0.0
    if moe_share:  # the MoE layers' MLP is not the dense one: experts and dispatch are added below
        linear -= moe_share * h * m.ffn_hidden_size * (3 if m.swiglu else 2)
    gemm_flops = 6 * tokens * linear / tp
    # Megatron's 6·q·s per token (MLA: the mean of the qk and v widths), less what a sliding window skips
    attn_flops = 6 * tokens * m.core_attention_width * s / tp * m.window_fraction
    if tflops:  # a measured rate replaces the kernel model for all FLOPs
        rate = tflops * 1e12
        gemm_rate = attn_rate = rate
    else:
        width = h / tp
        eff = k.gemm * width / (width + k.gemm_width) * tokens / (tokens + k.gemm_tokens)
        gemm_rate = peak * eff * (k.fp8_gain if t.fp8 else 1.0)
        attn_rate = peak * k.attention
    gemm = gemm_flops / gemm_rate
    if not t.fused_attention and not tflops:
        attn_rate = peak * k.attention_unfused
    attn = attn_flops / attn_rate
    if not t.fused_attention:  # scores, softmax and its mask through HBM, forward and backward: ~6 passes
        attn += 6 * act * t.micro_batch_size * m.num_attention_heads / tp * (s / t.cp) * s / hbm
    replicated = 1 / tp if t.sequence_parallel or tp == 1 else 1.0
    elem = act * tokens * (k.elementwise * h * replicated + k.elementwise_ffn * m.ffn_hidden_size / tp) / hbm
    layer = gemm + attn + elem + k.launch
    dispatch = experts_forward = 0.0
    if moe_share:
        moe = _moe_time(m, t, gpu, k, tokens, gemm_rate if tflops else None, place.ep, place.ep_per_node)
        layer += moe_share * moe.compute
        dispatch = moe_share * moe.dispatch
        experts_forward = moe_share * moe.forward
    if t.recompute == "full":
        # Megatron checkpoints the whole transformer layer (transformer_block.checkpointed_forward), the MoE
        # block included: its router, expert GEMMs and permutation run forward again, and so do the token
        # dispatch and combine (half of the dispatch's four all-to-alls, added to the communication below)
        extra = (gemm + attn) / 3 + elem / 2 + experts_forward
    elif t.recompute == "selective":
        extra = attn / 3
    else:
        extra = 0.0
    compute = layers * layer
    if loss and m.padded_vocab_size:  # output layer (fwd + bwd) and cross entropy over fp32 logits (a vocabulary
        # not known here counts none, as the parameters and memory do: the dry-run says it is unknown)
        output_rate = _output_rate(m, t, gpu, k, tokens, tflops)
        compute += 6 * tokens * h * m.padded_vocab_size / tp / output_rate
        # its weight gradient (a third) moves to the end of the step for the deferred microbatches (step_time)
        compute -= _output_wgrad(m, t, tokens, output_rate) * t.deferred_embedding_wgrads / t.num_microbatches
        compute += 16 * tokens * m.padded_vocab_size / tp / hbm
    if embedding:
        compute += 2 * act * tokens * h / hbm
    # TP: 8 (t−1)/t activation volumes per layer, 10 with sequence parallel (backward re-gathers inputs).
    tensor = 0.0
    if tp > 1:
        volumes = (10 if t.sequence_parallel else 8) + (4 if t.recompute == "full" else 0)
        seconds = volumes * (tp - 1) / tp * act * tokens * h / _bandwidth(gpu, place.tp)
        tensor = layers * seconds * (k.tp_exposed_overlap if t.tp_comm_overlap else k.tp_exposed)
    # CP ring: K and V of the local chunk travel CP−1 steps forward; K, V and their gradients backward.
    context = 0.0
    if t.cp > 1:
        kv = act * tokens * (m.attn_k_width + m.attn_v_width) / tp
        ring = 3 * (t.cp - 1) * kv / _bandwidth(gpu, place.cp)
        context = layers * max(0.0, ring - attn)
    # the token dispatch is communication too, reported with TP's; full recompute repeats its forward half
    if t.moe_a2a_overlap and dispatch:
        dispatch = _overlapped_dispatch(t, dispatch, k.dispatch_exposed, layer)
    tensor += layers * dispatch * (1.5 if t.recompute == "full" else 1.0)
    return _RankTime(compute, layers * extra, tensor, context)


def _output_rate(m: ModelShape, t: Training, gpu: Gpu, k: Kernels, tokens: float, tflops: float | None) -> float:
    """FLOP rate of the output layer's GEMMs. It is tensor_parallel.ColumnParallelLinear, outside the transformer
    block's FP8 context (transformer_block.py), so it runs in BF16 also when the layers run in FP8. Its weight shard
    is h × V/TP: the narrow side of its GEMMs is min(h, V/TP), not a layer's h/TP (the rule an expert's GEMM
    follows too), so TP does not narrow it while V/TP ≥ h."""
    if tflops:
        return tflops * 1e12
    narrow = min(m.hidden_size, m.padded_vocab_size / t.tp)
    shape = narrow / (narrow + k.gemm_width) * tokens / (tokens + k.gemm_tokens)
    return gpu.peak_tflops * 1e12 * k.gemm * shape


def _output_wgrad(m: ModelShape, t: Training, tokens: float, rate: float) -> float:
    """Seconds of the output layer's weight-gradient GEMM for one microbatch: 2·tokens·h·V/TP FLOPs."""
    return 2 * tokens * m.hidden_size * m.padded_vocab_size / t.tp / rate


def _overlapped_dispatch(t: Training, exposed: float, share: float, layer: float) -> float:
    """Exposed token dispatch of one layer and microbatch under overlap_moe_expert_parallel_comm. Megatron's
    combined 1F1B schedule (transformer_config.py: it needs VPP with PP > 1 and forbids full recompute) runs the
    forward of one microbatch together with the backward of another, layer by layer: each one's all-to-alls
    (`exposed`/`share` seconds in all) hide behind the other's compute (`layer`), and only what exceeds it shows.
    The chunks of the warm-up and the flush have no partner and expose as without the overlap: 2·(PP−1) +
    (VPP−1)·PP of the VPP·M chunks (schedules.get_pp_rank_microbatches), one at PP 1 (the first forward)."""
    chunks = t.vpp * t.num_microbatches
    edge = 2 * (t.pp - 1) + (t.vpp - 1) * t.pp if t.pp > 1 else 1
    alone = min(1.0, edge / max(1, chunks))
    full = exposed / share if share else 0.0
    return alone * exposed + (1 - alone) * max(0.0, full - layer)


def _fsdp_comm(t: Training, shard: float, microbatch: float, grad_bytes: int, act: int, bw: float,
               layers: int) -> tuple[float, float]:
    """Exposed FSDP communication of one microbatch (reduce) and of the step (gather), in seconds.

    Megatron-FSDP / torch FSDP2 with sharded gradients reduce-scatter each layer's gradients in every
    microbatch's backward; with sharded parameters they all-gather each layer's before its forward and (when
    resharding after the forward) again before its backward. Each layer's collective overlaps the compute of
    the layer next to it: exposed is what exceeds that microbatch's forward (⅓) or backward (⅔) compute, and
    at least one layer's collective, the first one, which has nothing to hide behind."""
    group = t.dp_cp
    share = (group - 1) / group * shard
    reduce = share * grad_bytes / bw
    gather_fwd = share * act / bw if t.fsdp == "optim_grads_params" else 0.0
    gather_bwd = gather_fwd if t.fsdp_reshard else 0.0
    per_layer = 1 / max(1, layers)
    forward = max(gather_fwd * per_layer, gather_fwd - microbatch / 3)
    backward = max((gather_bwd + reduce) * per_layer, gather_bwd + reduce - 2 * microbatch / 3)
    once = 0.0 if t.fsdp == "optim_grads_params" else share * act / bw  # optim_grads: one gather per step
    return forward + backward, once


def attention_gemm_weights(m: ModelShape, tp: int) -> float:
    """The attention block's GEMM weights as TP-sharded ones (×TP for those every TP rank computes: MLA's down
    projections), so that 6·tokens·weights/TP is the FLOPs per GPU."""
    h = m.hidden_size
    if m.mla:
        n, q_head = m.num_attention_heads, m.qk_head_dim + m.qk_pos_emb_head_dim
        sharded = (m.q_lora_rank if m.q_lora_rank else h) * n * q_head
        sharded += m.kv_lora_rank * n * (m.qk_head_dim + m.v_head_dim) + n * m.v_head_dim * h
        replicated = h * (m.q_lora_rank + m.kv_lora_rank + m.qk_pos_emb_head_dim)
        return sharded + replicated * tp
    return h * (m.query_size + 2 * m.kv_size + (m.query_size if m.attention_output_gate else 0)) + m.query_size * h


@dataclass(frozen=True)
class _MoeTime:
    compute: float  # expert GEMMs (routed and shared) and the permutation, forward + backward
    forward: float  # the forward part of `compute`: what full recompute runs again
    dispatch: float  # exposed token dispatch and combine, forward + backward


def _moe_time(m: ModelShape, t: Training, gpu: Gpu, k: Kernels, tokens: float,
              rate: float | None, crosses: bool, ep_per_node: int = 1) -> _MoeTime:
    """One MoE layer, one microbatch, forward + backward: expert GEMMs + permutation, exposed dispatch.

    Expert GEMMs: 6·(token-expert pairs)·h·F_moe·(3 with SwiGLU, else 2)/ETP FLOPs per GPU, pairs = tokens ·
    topk · ETP/TP, at a shape efficiency: the dense width curve at min(F_moe/ETP, h), and an overhead of
    `grouped_work`/W where W = 2·M·N·K is one expert's GEMM (M its tokens): few large experts run as dense
    GEMMs do; FP8 divides the large-GEMM part by `grouped_fp8_gain` (fitted), not the overhead; the shared
    expert runs as a dense MLP. Dispatch (forward dispatch + combine, backward
    the same): all-to-all moves each pair's hidden state once, (EP−1)/EP of it off the GPU; all-gather
    gathers every EP rank's tokens; over NVLink when the EP group (stride TP·CP) is in one node, else one
    NIC per GPU. The `flex` dispatcher (DeepEP / HybridEP kernels) sends a token across the network once per
    remote node holding one of its experts and fans it out to those experts over NVLink there, so between nodes
    it moves (nodes−1)·(1 − (1 − 1/nodes)^topk) hidden states per token instead of topk·(EP−1)/EP."""
    h, tp = m.hidden_size, t.tp
    act = 4 if t.precision == "fp32" else 2
    factor = 3 if m.swiglu else 2
    peak = gpu.peak_tflops * 1e12
    pairs = tokens * m.moe_topk * t.expert_tp / tp
    width = m.moe_ffn_hidden_size / t.expert_tp
    per_expert = pairs / max(1, m.num_experts // t.ep)  # tokens each local expert's GEMMs get
    flops = 6 * pairs * h * width * factor
    if rate:
        seconds = flops / rate
    else:
        # each expert's GEMM: M = its tokens, N·K = h·F_moe/ETP; at its work W the time is the large-GEMM time
        # (÷ grouped_fp8_gain with FP8) plus an overhead of grouped_work/W of it, which FP8 does not cut
        narrow = min(width, h)
        large = flops / (peak * k.gemm * narrow / (narrow + k.gemm_width))
        work = 2 * per_expert * h * width
        seconds = large * (1 / (k.grouped_fp8_gain if t.fp8 else 1.0) + k.grouped_work / work)
    if m.shared_expert_size:
        shared_w = h / tp
        shared_eff = k.gemm * shared_w / (shared_w + k.gemm_width) * tokens / (tokens + k.gemm_tokens)
        seconds += 6 * tokens * h * m.shared_expert_size * factor / tp / (rate or peak * shared_eff)
    permute = 8 * act * pairs * h / (gpu.hbm_tbps * 1e12)  # permute / unpermute, forward and backward
    forward = seconds / 3 + permute / 2  # a GEMM's forward is one of its three; the permutation's half
    seconds += permute
    dispatch = 0.0
    if t.ep > 1:
        local = tokens / tp if t.sequence_parallel or tp == 1 else tokens
        if t.moe_dispatcher == "allgather":
            volume = (t.ep - 1) * local * h * act
        else:
            volume = (t.ep - 1) / t.ep * local * m.moe_topk * h * act
        seconds_one = volume / _bandwidth(gpu, crosses)
        if t.moe_dispatcher == "flex" and crosses:
            nodes = -(-t.ep // ep_per_node)  # the EP group spans this many nodes (the last one part-filled)
            remote = (nodes - 1) * (1 - (1 - 1 / nodes) ** m.moe_topk)  # distinct remote nodes per token
            # the network leg and the NVLink fan-out run as one pipelined kernel: the slower of the two
            seconds_one = max(local * remote * h * act / _bandwidth(gpu, True), volume / _bandwidth(gpu, False))
        dispatch = 4 * seconds_one * k.dispatch_exposed
    return _MoeTime(seconds, forward, dispatch)



def step_time(m: ModelShape, t: Training, gpu: Gpu, gpus_per_node: int = 8,
              tflops: float | None = None, kernels: Kernels | None = None) -> StepTime:
    """The model in the module docstring; `tflops` (a measured model TFLOP/s per GPU) replaces the kernel
    efficiencies for the FLOPs, everything else stays; `kernels` replaces the GPU family's constants."""

    k = kernels or KERNELS[gpu.family]
    place = placement(t, gpus_per_node)
    stages = pipeline_stages(m, t)
    times = {}
    for st in stages:
        key = (st.layers, st.embedding, st.loss)
        if key not in times:
            times[key] = _rank_time(m, t, gpu, k, st.layers, st.embedding, st.loss, place, tflops)
    per_rank = [times[(st.layers, st.embedding, st.loss)] for st in stages]
    slowest = max(per_rank, key=lambda r: r.total)
    M = t.num_microbatches
    bubble = (sum(r.total for r in per_rank) - slowest.total) / t.vpp
    deferred = _deferred_wgrad(m, t, gpu, k, tflops, bubble)

    act = 4 if t.precision == "fp32" else 2
    tokens = t.micro_batch_size * m.seq_length / t.cp
    pipeline_comm = 0.0
    if t.pp > 1:
        size = act * tokens * m.hidden_size / (t.tp if t.sequence_parallel else 1)
        one = P2P_LATENCY_S + size / _bandwidth(gpu, place.pp)
        pipeline_comm = 2 * t.vpp * M * one  # every send/receive, forward and backward, waited for
        if t.vpp > 1 and t.overlap_p2p_comm:
            pipeline_comm = _interleaved_p2p(t, M, one, slowest.total)

    params = stage_parameters(m, t)
    shard = max(p.params for p in params)
    data_comm = 0.0
    group = t.dp_cp
    if group > 1:
        # Across nodes NCCL runs one ring per NIC: a group with k members per node moves k NICs' worth.
        bw = min(gpu.nvlink_gbps, gpu.network_gbps * place.dp_per_node) * 1e9 if place.dp else gpu.nvlink_gbps * 1e9
        grad_bytes = t.main_grad_bytes  # the buffer Megatron reduces in (fp16: fp16 unless told otherwise)
        # What DP communication can hide behind: the last microbatch's backward and the first one's forward, their
        # compute only (the TP/CP/EP collectives of that microbatch use the links, they hide nothing)
        hiding = slowest.compute + slowest.recompute
        backward = 2 / 3 * hiding
        forward = 1 / 3 * hiding
        buckets = max(1.0, shard / max(DDP_BUCKET_PARAMS, 1e6 * group))
        if t.fsdp in ("optim_grads", "optim_grads_params"):
            reduce, gather = _fsdp_comm(t, shard, hiding, grad_bytes, act, bw, stages[0].layers)
            reduce, buckets = reduce * M, 0.0  # per microbatch, already exposed-only
        elif t.distributed_optimizer or t.fsdp:
            reduce = _dp_share(params, group, t.expert_dp) * grad_bytes / bw
            gather = _dp_share(params, group, t.expert_dp) * act / bw
        else:
            reduce, gather = 2 * _dp_share(params, group, t.expert_dp) * grad_bytes / bw, 0.0
        if t.overlap_grad_reduce and buckets:
            reduce = max(reduce / buckets, _staggered(reduce, backward, t.vpp, t.pp))
        if t.overlap_param_gather and (t.distributed_optimizer or t.fsdp == "optim") and buckets:
            gather = max(gather / buckets, _staggered(gather, forward, t.vpp, t.pp))
        data_comm = reduce + gather
    experts = max(p.expert_params for p in params)
    local = ((shard - experts) / group + experts / t.expert_dp) if t.distributed_optimizer or t.fsdp else shard
    optimizer = local * ADAM_BYTES_PER_PARAM / (gpu.hbm_tbps * 1e12)

    step = StepTime(
        compute=M * slowest.compute + deferred, recompute=M * slowest.recompute, bubble=bubble,
        tensor_comm=M * slowest.tensor_comm, context_comm=M * slowest.context_comm,
        pipeline_comm=pipeline_comm, data_comm=data_comm, optimizer=optimizer,
    )
    model_tflops = flops_per_iteration(m, t.global_batch_size) / (step.total * t.world_size) / 1e12
    return StepTime(**{**asdict(step), "model_tflops": model_tflops})


def _deferred_wgrad(m: ModelShape, t: Training, gpu: Gpu, k: Kernels, tflops: float | None, bubble: float) -> float:
    """Exposed seconds of the output layer's deferred weight gradients (defer_embedding_wgrad_compute): Megatron
    runs them after the last stage's last backward (schedules.finish_embedding_wgrad_compute), while the earlier
    stages still drain their backward, about two thirds of the bubble (the backward's share); what is longer
    shows."""
    n = t.deferred_embedding_wgrads
    if not n or not m.padded_vocab_size:
        return 0.0
    tokens = t.micro_batch_size * m.seq_length / t.cp
    rate = _output_rate(m, t, gpu, k, tokens, tflops)
    return max(0.0, n * _output_wgrad(m, t, tokens, rate) - 2 / 3 * bubble)


def _dp_share(params: Sequence[StageParams], group: int, expert_dp: int) -> float:
    """Parameters per GPU whose gradients a ring reduce-scatter (or all-gather) moves off the GPU, on the most
    loaded stage: (n−1)/n of each group's shard, the dense ones over DP×CP, the routed experts over expert DP
    (world / (PP·EP·ETP): with EP they have fewer replicas, none to reduce when expert DP is 1)."""
    return max((group - 1) / group * (p.params - p.expert_params) + (expert_dp - 1) / expert_dp * p.expert_params
               for p in params)


def _staggered(volume: float, microbatch: float, vpp: int, pp: int) -> float:
    """Exposed seconds of a DP collective of `volume` seconds that overlaps one microbatch's backward (or
    forward) of `microbatch` seconds, chunk by chunk. Each model chunk is its own DDP instance: Megatron's
    interleaved schedule launches a chunk's gradient reduction when that chunk's last backward starts
    delivering buckets, and the last PP microbatches run their backward chunk by chunk, the deepest first, so
    chunk k (k = 0 the last to finish) starts k·PP chunk-steps before the end; the parameter all-gathers are
    launched PP chunk-steps ahead of each chunk's first forward (param_sync_func), the mirror image. The queue
    of VPP equal shares on one stream ends max over k of (k+1)·volume/VPP − (k·PP + 1)·chunk after the last
    chunk-step; linear in k, so k = 0 or k = VPP−1 decides. With VPP 1 this is volume − microbatch."""
    chunk = microbatch / vpp
    share = volume / vpp
    return max(0.0, share - chunk, volume - ((vpp - 1) * pp + 1) * chunk)


def _interleaved_p2p(t: Training, M: int, one: float, microbatch: float) -> float:
    """Exposed pipeline transfers of the interleaved schedule with overlap_p2p_comm (Megatron's default for VPP > 1):
    the steady state posts each send/receive before the next chunk's compute and waits after it, so only what a
    transfer takes beyond one chunk's compute is exposed; the warm-up and flush transfers are waited for at once
    unless overlap_p2p_comm_warmup_flush. Megatron's warm-up on the first rank: 2·(PP−1) + (VPP−1)·PP chunks
    (schedules.get_pp_rank_microbatches), as many in the flush."""
    chunks = t.vpp * M
    edge = min(chunks, 2 * (t.pp - 1) + (t.vpp - 1) * t.pp)
    chunk = microbatch / t.vpp  # one chunk's forward + backward
    steady = 2 * (chunks - edge) * max(0.0, one - chunk / 2)  # a forward or a backward hides it
    warm = 0.0 if t.overlap_p2p_comm_warmup_flush else 2 * edge * one
    return steady + warm


def describe_kernels(gpu: Gpu) -> dict[str, Any]:
    return asdict(KERNELS[gpu.family])
