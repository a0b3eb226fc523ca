"""Published Megatron training runs with their layouts and iteration times, and the plan's predictions.

Each run: the Megatron arguments the source states (shape, layout, batch, precision, overlap knobs), the
GPU budget, and the published iteration time (or the throughput it is derived from, as `derived` says).
Knobs a source leaves unstated are named in `free`; the prediction takes the plan's fastest fitting choice
for them. `python -m launcher.estimate.calibration` prints the table in docs/plan.md;
tests/estimate/test_plan_calibration.py holds it to the targets.

Two parts: the runs the constants were fitted on (`held_back` False), and a held-back part the fit never
sees (the constants were fixed before those runs were added), reported separately.
`python -m launcher.estimate.calibration --fit` refits each family's constants that `FITS` names on that family's
fitted runs and prints every fitted run's residual by precision; `--ranges` prints the held-back errors that
launcher/estimate/ranges.py turns into the range around every predicted time.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from launcher.estimate import formulas as est
from launcher.estimate import search as ps
from launcher.estimate.ranges import HeldBack

SC21 = ("Narayanan et al. 2021 (SC21), Table 1, https://arxiv.org/abs/2104.04473; layouts "
        "third_party/megatron-lm/examples/academic_paper_scripts/sc21/run_table_1.sh")
README = "Megatron-LM README.md at 432d76b2b8bf, images/model_table.png (H100 weak scaling)"
NEMO_LAUNCHER = ("NVIDIA/NeMo-Framework-Launcher README.md §7.1.2 and launcher_scripts/conf/training/gpt3/"
                 "{5b,175b}.yaml at 80353286b44b")
NEMO_2407 = ("NVIDIA/NeMo docs/source/performance/performance_summary.md (NeMo 24.07, DGX-H100, FP8); "
             "layouts also NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/perf_recipes/llama/h100/llama3.py")
BRIDGE_2509 = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md at ea2990630918 (25.09, DGX-H100, "
               "FP8-CS); recipe src/megatron/bridge/perf_recipes/llama/h100/llama31.py")
OURS = "docs/benchmarks.md and shared reference gpu-measurements.md (one H200, no Transformer Engine)"
NEMO_2407_MORE = ("NVIDIA/NeMo docs/source/performance/performance_summary.md at 070a0bb168d4 (NeMo 24.07, "
                  "DGX-H100, FP8): the rows not in the fitted part; Llama 2 shapes from Touvron et al. 2023, "
                  "https://arxiv.org/abs/2307.09288")
MOE_ZOO = ("yanring/Megatron-MoE-ModelZoo best_practice/Qwen3/readme.md at c1ad0b5c89f4 (256 H100, BF16, "
           "step time) with model_configs/benchmarking/Qwen3-235B-A22B.yaml")
BRIDGE_2511_MOE = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md at 00b7660be025 (25.11, DGX-H100, "
                   "FP8-CS, token-dropless); shapes from Megatron-MoE-ModelZoo model_configs/benchmarking/"
                   "Qwen3-{30B-A3B,235B-A22B}.yaml")
BRIDGE_26 = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md at 067f987df (DGX-H100, FP8): every "
             "pre-training row of the 26.02.01-26.06 containers whose model the plan describes (Llama 3, Qwen3 MoE; "
             "not GPT-OSS's sliding-window attention, Nemotron-H's Mamba layers) and whose layout is in no other "
             "row, each at its latest release; MoE dispatchers from the recipes at 4a6450755^ and 067f987df")
BRIDGE_B200 = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md at 00b7660be025 and "
               "docs/performance-summary-archive.md at 0a25f911b2ed, DGX-B200 tables (FP8-CS for Llama, MXFP8 for "
               "Qwen3, token-dropless MoE): the oldest release of each dense and each dropless MoE row fitted "
               "(25.09, 25.11), the later releases held back (25.11, 26.02); 25.09's token-drop MoE rows (a capacity "
               "factor, not modelled), DeepSeek-V3 (MTP) and GPT-OSS (attention sinks) left out")
BRIDGE_2509_MOE = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, 25.09 section (DGX-H100, FP8, "
                   "token drop); shapes as for 25.11")

GPT = dict(vocab_size=50257, max_position_embeddings=2048, seq_length=2048)
# 2021 Megatron: unfused attention (softmax through HBM), no overlap of any communication.
SC21_ERA = dict(GPT, fp16=True, recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1,
                transformer_impl="local")
MODERN = dict(bf16=True, use_distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True)
LLAMA = dict(group_query_attention=True, num_query_groups=8, swiglu=True, normalization="RMSNorm",
             untie_embeddings_and_output_weights=True, position_embedding_type="rope", add_bias_linear=False,
             vocab_size=128256, seq_length=8192, max_position_embeddings=8192)


@dataclass(frozen=True)
class Run:
    name: str
    source: str
    gpu: str
    world: int
    args: dict[str, Any]
    seconds: float  # published (or derived) seconds per iteration
    derived: str  # how `seconds` follows from the published figure
    free: tuple[str, ...] = ()  # knobs the source does not state: the plan picks its fastest fitting value
    extra: dict[str, Any] = field(default_factory=dict)
    held_back: bool = False  # in the part the fit never sees

    @property
    def part(self) -> str:
        return "held back" if self.held_back else "fit"

    @property
    def precision(self) -> str:
        return "fp8" if self.args.get("fp8") else est.precision_of(self.args)

    @property
    def moe(self) -> bool:
        return bool(self.args.get("num_experts"))

    @property
    def tp(self) -> int:
        return int(self.args.get("tensor_model_parallel_size", 1))

    @property
    def pp(self) -> int:
        return int(self.args.get("pipeline_model_parallel_size", 1))


def sc21_seconds(batch: int, layers: int, hidden: int, gpus: int, tflops: float, seq: int = 2048,
                 vocab: int = 51200) -> float:
    """The paper's FLOPs per iteration (§5.1, counts the full recompute): 96·B·s·l·h²·(1 + s/6h + V/16lh)."""
    flops = 96 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
    return flops / (gpus * tflops * 1e12)


def megatron_seconds(args: dict[str, Any], gpus: int, tflops: float) -> float:
    """Seconds from a model TFLOP/s per GPU that Megatron logs (training.num_floating_point_operations)."""
    m = est.model_shape(args)
    return est.flops_per_iteration(m, int(args["global_batch_size"])) / (gpus * tflops * 1e12)


def tokens_seconds(batch: int, seq: int, tokens_per_second: float) -> float:
    return batch * seq / tokens_per_second


def _sc21() -> Iterable[Run]:
    rows = [  # size, heads, hidden, layers, TP, PP, GPUs, batch, micro batch, layers per virtual stage, TFLOP/s
        ("1.7B", 24, 2304, 24, 1, 1, 32, 512, 16, None, 137),
        ("3.6B", 32, 3072, 30, 2, 1, 64, 512, 16, None, 138),
        ("7.5B", 32, 4096, 36, 4, 1, 128, 512, 16, None, 142),
        ("18B", 48, 6144, 40, 8, 1, 256, 1024, 8, None, 135),
        ("39B", 64, 8192, 48, 8, 2, 512, 1536, 4, None, 138),
        ("76B", 80, 10240, 60, 8, 4, 1024, 1792, 2, 5, 140),
        ("145B", 96, 12288, 80, 8, 8, 1536, 2304, 2, 5, 148),
        ("310B", 128, 16384, 96, 8, 16, 1920, 2160, 1, 3, 155),
        ("530B", 128, 20480, 105, 8, 35, 2520, 2520, 1, 1, 163),
        ("1T", 160, 25600, 128, 8, 64, 3072, 3072, 1, None, 163),
    ]
    for size, heads, hidden, layers, tp, pp, gpus, batch, mbs, per_vstage, tflops in rows:
        args = dict(SC21_ERA, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                    tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, micro_batch_size=mbs,
                    global_batch_size=batch, num_layers_per_virtual_pipeline_stage=per_vstage)
        yield Run(f"SC21 {size}", SC21, "a100-80gb", gpus, args,
                  sc21_seconds(batch, layers, hidden, gpus, tflops),
                  f"{tflops} TFLOP/s per GPU (paper's FLOPs, recompute counted)")


def _readme() -> Iterable[Run]:
    rows = [  # size, heads, hidden, layers, TP, PP, GPUs, batch, TFLOP/s
        ("1.7B", 16, 2048, 24, 1, 1, 48, 192, 408.8),
        ("7.1B", 32, 4096, 30, 2, 1, 96, 192, 465.9),
        ("16B", 48, 6144, 32, 4, 1, 192, 192, 489.1),
        ("32B", 56, 7168, 48, 8, 1, 384, 192, 459.6),
        ("70B", 64, 8192, 84, 8, 2, 768, 384, 419.7),
        ("119B", 80, 10240, 92, 8, 4, 1536, 768, 420.5),
        ("177B", 96, 12288, 96, 8, 6, 2304, 1152, 432.8),
        ("314B", 128, 16384, 96, 8, 8, 3072, 1536, 474.4),
        ("462B", 144, 18432, 112, 8, 16, 6144, 3072, 459.9),
    ]
    for size, heads, hidden, layers, tp, pp, gpus, batch, tflops in rows:
        args = dict(MODERN, num_layers=layers, hidden_size=hidden, num_attention_heads=heads, vocab_size=131072,
                    seq_length=4096, max_position_embeddings=4096, position_embedding_type="rope",
                    untie_embeddings_and_output_weights=True, tensor_model_parallel_size=tp,
                    pipeline_model_parallel_size=pp, global_batch_size=batch, micro_batch_size=1,
                    sequence_parallel=tp > 1, tp_comm_overlap=tp > 1)
        yield Run(f"Megatron README {size}", README, "h100-80gb", gpus, args, megatron_seconds(args, gpus, tflops),
                  f"{tflops} model TFLOP/s per GPU", free=("vpp", "recompute", "micro_batch_size"))


def _nemo() -> Iterable[Run]:
    # transformer_engine: False in those configs; the attention's memory says it was not the unfused kind
    # (5B at micro batch 4 would need 64 GiB for the scores alone): recompute is left to the plan.
    a100 = dict(GPT, bf16=True, use_distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True)
    gpt5b = dict(num_layers=24, hidden_size=4096, num_attention_heads=32)
    gpt20b = dict(num_layers=44, hidden_size=6144, num_attention_heads=48)
    gpt175b = dict(num_layers=96, hidden_size=12288, num_attention_heads=96)
    yield Run("NeMo launcher GPT-3 5B", NEMO_LAUNCHER, "a100-80gb", 128,
              dict(a100, **gpt5b, micro_batch_size=4, global_batch_size=2048),
              tokens_seconds(2048, 2048, 659_481), "659,481 tokens/s on 16 nodes", free=("recompute",))
    yield Run("NeMo launcher GPT-3 175B", NEMO_LAUNCHER, "a100-80gb", 1024,
              dict(a100, **gpt175b, tensor_model_parallel_size=4, pipeline_model_parallel_size=8,
                   num_virtual_stages_per_pipeline_rank=12, sequence_parallel=True, micro_batch_size=1,
                   global_batch_size=2048),
              tokens_seconds(2048, 2048, 109_684), "109,684 tokens/s on 128 nodes", free=("recompute",))
    # NVIDIA's performance recipes reduce gradients in bf16 (Megatron-Bridge: grad_reduce_in_fp32: false)
    # and fuse the cross entropy.
    fp8 = dict(GPT, **MODERN, fp8="hybrid", grad_reduce_in_bf16=True, cross_entropy_loss_fusion=True)
    yield Run("NeMo 24.07 GPT-3 5B", NEMO_2407, "h100-80gb", 64,
              dict(fp8, **gpt5b, micro_batch_size=4, global_batch_size=2048),
              tokens_seconds(2048, 2048, 22521 * 64), "22,521 tokens/s/GPU")
    yield Run("NeMo 24.07 GPT-3 20B", NEMO_2407, "h100-80gb", 64,
              dict(fp8, **gpt20b, tensor_model_parallel_size=2, sequence_parallel=True, tp_comm_overlap=True,
                   micro_batch_size=2, global_batch_size=256),
              tokens_seconds(256, 2048, 5851 * 64), "5,851 tokens/s/GPU", free=("recompute",))
    yield Run("NeMo 24.07 GPT-3 175B", NEMO_2407, "h100-80gb", 128,
              dict(fp8, **gpt175b, tensor_model_parallel_size=4, pipeline_model_parallel_size=8,
                   num_virtual_stages_per_pipeline_rank=6, sequence_parallel=True, tp_comm_overlap=True,
                   micro_batch_size=1, global_batch_size=256),
              tokens_seconds(256, 2048, 726 * 128), "726 tokens/s/GPU", free=("recompute",))
    llama = dict(LLAMA, **MODERN, fp8="hybrid", grad_reduce_in_bf16=True, cross_entropy_loss_fusion=True)
    yield Run("NeMo 24.07 Llama 3 8B (CP 2)", NEMO_2407, "h100-80gb", 8,
              dict(llama, num_layers=32, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=14336,
                   context_parallel_size=2, micro_batch_size=1, global_batch_size=128),
              tokens_seconds(128, 8192, 12036 * 8), "12,036 tokens/s/GPU", free=("recompute",))
    yield Run("NeMo 24.07 Llama 3 70B (CP 2)", NEMO_2407, "h100-80gb", 64,
              dict(llama, num_layers=80, hidden_size=8192, num_attention_heads=64, ffn_hidden_size=28672,
                   tensor_model_parallel_size=4, pipeline_model_parallel_size=4, context_parallel_size=2,
                   num_virtual_stages_per_pipeline_rank=5, sequence_parallel=True, tp_comm_overlap=True,
                   micro_batch_size=1, global_batch_size=128),
              tokens_seconds(128, 8192, 1533 * 64), "1,533 tokens/s/GPU", free=("recompute",))
    yield Run("Bridge 25.09 Llama 3 70B", BRIDGE_2509, "h100-80gb", 64,
              dict(llama, num_layers=80, hidden_size=8192, num_attention_heads=64, ffn_hidden_size=28672,
                   tensor_model_parallel_size=4, pipeline_model_parallel_size=8,
                   num_virtual_stages_per_pipeline_rank=5, sequence_parallel=True, tp_comm_overlap=True,
                   micro_batch_size=1, global_batch_size=128),
              tokens_seconds(128, 8192, 1619 * 64), "1,619 tokens/s/GPU", free=("recompute",))
    yield Run("Bridge 25.09 Llama 3.1 405B", BRIDGE_2509, "h100-80gb", 1024,
              dict(llama, num_layers=126, hidden_size=16384, num_attention_heads=128, ffn_hidden_size=53248,
                   tensor_model_parallel_size=8, pipeline_model_parallel_size=8, context_parallel_size=2,
                   num_virtual_stages_per_pipeline_rank=8, sequence_parallel=True, tp_comm_overlap=True,
                   account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True,
                   micro_batch_size=1, global_batch_size=512),
              tokens_seconds(512, 8192, 302 * 1024), "302 tokens/s/GPU", free=("recompute",))


def _ours() -> Iterable[Run]:
    gpt345m = dict(num_layers=24, hidden_size=1024, num_attention_heads=16, vocab_size=50257, seq_length=1024,
                   max_position_embeddings=1024, bf16=True)
    yield Run("ours: 345m, 1 H200", OURS, "h200-141gb", 1,
              dict(gpt345m, micro_batch_size=32, global_batch_size=32), 0.1721, "172.1 ms/iteration")
    yield Run("ours: 175b layer shape, 2 layers, 1 H200", OURS, "h200-141gb", 1,
              dict(GPT, num_layers=2, hidden_size=12288, num_attention_heads=96, bf16=True,
                   use_distributed_optimizer=True, micro_batch_size=1, global_batch_size=16),
              1.656, "1,656 ms/iteration")


def _held_back_dense() -> Iterable[Run]:
    """NeMo 24.07's rows that the dense constants were not fitted on."""
    fp8 = dict(GPT, **MODERN, fp8="hybrid", grad_reduce_in_bf16=True, cross_entropy_loss_fusion=True)
    yield Run("NeMo 24.07 GPT-3 175B (512 GPUs)", NEMO_2407_MORE, "h100-80gb", 512,
              dict(fp8, num_layers=96, hidden_size=12288, num_attention_heads=96, tensor_model_parallel_size=4,
                   pipeline_model_parallel_size=8, num_virtual_stages_per_pipeline_rank=6, sequence_parallel=True,
                   tp_comm_overlap=True, micro_batch_size=2, global_batch_size=2048),
              tokens_seconds(2048, 2048, 782 * 512), "782 tokens/s/GPU", free=("recompute",), held_back=True)
    llama2 = dict(MODERN, swiglu=True, normalization="RMSNorm", untie_embeddings_and_output_weights=True,
                  position_embedding_type="rope", add_bias_linear=False, vocab_size=32000, seq_length=4096,
                  max_position_embeddings=4096, fp8="hybrid", grad_reduce_in_bf16=True,
                  cross_entropy_loss_fusion=True, micro_batch_size=1, global_batch_size=128)
    rows = [  # size, layers, hidden, heads, query groups, ffn, GPUs, TP, PP, VP, tokens/s/GPU
        ("7B", 32, 4096, 32, None, 11008, 8, 1, 1, None, 16847),
        ("13B", 40, 5120, 40, None, 13824, 16, 1, 4, 10, 8646),
        ("70B", 80, 8192, 64, 8, 28672, 64, 4, 4, 20, 1707),
    ]
    for size, layers, hidden, heads, groups, ffn, gpus, tp, pp, vp, rate in rows:
        args = dict(llama2, num_layers=layers, hidden_size=hidden, num_attention_heads=heads, ffn_hidden_size=ffn,
                    group_query_attention=groups is not None, num_query_groups=groups,
                    tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                    num_virtual_stages_per_pipeline_rank=vp, sequence_parallel=tp > 1, tp_comm_overlap=tp > 1)
        yield Run(f"NeMo 24.07 Llama 2 {size}", NEMO_2407_MORE, "h100-80gb", gpus, args,
                  tokens_seconds(128, 4096, rate * gpus), f"{rate:,} tokens/s/GPU", free=("recompute",),
                  held_back=True)


# Qwen3 MoE shapes (Megatron-MoE-ModelZoo model_configs/benchmarking): GQA 4 groups of 128 channels, SwiGLU
# experts, 128 experts top-8, no shared expert; the vocabulary (151,936) padded by multiples of 1187·TP.
QWEN3 = dict(MODERN, swiglu=True, normalization="RMSNorm", untie_embeddings_and_output_weights=True,
             position_embedding_type="rope", add_bias_linear=False, group_query_attention=True, num_query_groups=4,
             kv_channels=128, qk_layernorm=True, vocab_size=151936, make_vocab_size_divisible_by=1187,
             seq_length=4096, max_position_embeddings=40960, num_experts=128, moe_router_topk=8,
             moe_grouped_gemm=True, cross_entropy_loss_fusion=True)
QWEN3_30B = dict(QWEN3, num_layers=48, hidden_size=2048, ffn_hidden_size=6144, num_attention_heads=32,
                 moe_ffn_hidden_size=768)
QWEN3_235B = dict(QWEN3, num_layers=94, hidden_size=4096, ffn_hidden_size=12288, num_attention_heads=64,
                  moe_ffn_hidden_size=1536, account_for_embedding_in_pipeline_split=True,
                  account_for_loss_in_pipeline_split=True)


def _moe() -> Iterable[Run]:
    def layout(tp: int, pp: int, vp: int | None, ep: int, mbs: int, gbs: int, dispatcher: str) -> dict[str, Any]:
        return dict(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                    num_virtual_stages_per_pipeline_rank=vp, expert_model_parallel_size=ep,
                    expert_tensor_parallel_size=1, sequence_parallel=tp > 1, micro_batch_size=mbs,
                    global_batch_size=gbs, moe_token_dispatcher_type=dispatcher)

    selective = dict(recompute_granularity="selective", recompute_modules=["layernorm", "moe_act"])  # "norm, act"
    zoo = [  # dispatcher, TP, PP, VPP, EP, recompute, step seconds, held back
        ("flex", 2, 8, 4, 32, selective, 19.7, False),
        ("alltoall", 2, 32, 3, 8, selective, 24.2, False),
        ("flex", 4, 8, 4, 8, {}, 29.0, True),
    ]
    for dispatcher, tp, pp, vp, ep, recompute, seconds, held in zoo:
        name = f"MoE zoo Qwen3 235B TP{tp} PP{pp} EP{ep} ({'DeepEP' if dispatcher == 'flex' else 'A2A'})"
        yield Run(name, MOE_ZOO, "h100-80gb", 256,
                  dict(QWEN3_235B, **layout(tp, pp, vp, ep, 1, 2048, dispatcher), **recompute),
                  seconds, f"{seconds} s/step", held_back=held)
    fp8 = dict(fp8="e4m3", grad_reduce_in_bf16=True)
    yield Run("Bridge 25.11 Qwen3 30B-A3B", BRIDGE_2511_MOE, "h100-80gb", 16,
              dict(QWEN3_30B, **fp8, **layout(1, 2, 24, 8, 2, 512, "alltoall")),
              tokens_seconds(512, 4096, 5275 * 16), "5,275 tokens/s/GPU", free=("recompute",), held_back=True)
    yield Run("Bridge 25.11 Qwen3 235B-A22B", BRIDGE_2511_MOE, "h100-80gb", 256,
              dict(QWEN3_235B, **fp8, **layout(2, 8, 4, 32, 1, 2048, "alltoall")),
              tokens_seconds(2048, 4096, 1575 * 256), "1,575 tokens/s/GPU", free=("recompute",), held_back=True)
    yield Run("Bridge 25.09 Qwen3 30B-A3B (token drop)", BRIDGE_2509_MOE, "h100-80gb", 16,
              dict(QWEN3_30B, **fp8, **layout(1, 2, 24, 8, 2, 512, "alltoall")),
              tokens_seconds(512, 4096, 10494 * 16), "10,494 tokens/s/GPU", free=("recompute",))
    yield Run("Bridge 25.09 Qwen3 235B-A22B (token drop)", BRIDGE_2509_MOE, "h100-80gb", 256,
              dict(QWEN3_235B, **fp8, **layout(2, 8, 4, 32, 1, 2048, "alltoall")),
              tokens_seconds(2048, 4096, 1204 * 256), "1,204 tokens/s/GPU", free=("recompute",))


def _held_back_bridge_26() -> Iterable[Run]:
    """Runs published after the constants were fixed (added 2026-12-02, never fitted): one per layout."""
    llama = dict(LLAMA, **MODERN, fp8="hybrid", grad_reduce_in_bf16=True, cross_entropy_loss_fusion=True,
                 sequence_parallel=True, tp_comm_overlap=True, micro_batch_size=1)
    yield Run("Bridge 26.04.01 Llama 3 70B (GBS 256)", BRIDGE_26, "h100-80gb", 64,
              dict(llama, num_layers=80, hidden_size=8192, num_attention_heads=64, ffn_hidden_size=28672,
                   tensor_model_parallel_size=4, pipeline_model_parallel_size=8,
                   num_virtual_stages_per_pipeline_rank=5, global_batch_size=256),
              tokens_seconds(256, 8192, 1664 * 64), "1,664 tokens/s/GPU", free=("recompute",), held_back=True)
    yield Run("Bridge 26.06 Llama 3.1 405B (GBS 1536)", BRIDGE_26, "h100-80gb", 1024,
              dict(llama, num_layers=126, hidden_size=16384, num_attention_heads=128, ffn_hidden_size=53248,
                   tensor_model_parallel_size=8, pipeline_model_parallel_size=8, context_parallel_size=2,
                   num_virtual_stages_per_pipeline_rank=8, account_for_embedding_in_pipeline_split=True,
                   account_for_loss_in_pipeline_split=True, global_batch_size=1536),
              tokens_seconds(1536, 8192, 326 * 1024), "326 tokens/s/GPU", free=("recompute",), held_back=True)
    fp8 = dict(fp8="e4m3", grad_reduce_in_bf16=True)
    moe = [  # name, shape, GPUs, TP, PP, VP, EP, dispatcher, the recipe's moe_a2a_overlap, tokens/s/GPU
        ("26.06 Qwen3 30B-A3B EP16", QWEN3_30B, 16, 1, 1, None, 16, "flex", False, 8826),
        ("26.02.01 Qwen3 30B-A3B PP2 EP8", QWEN3_30B, 16, 1, 2, 12, 8, "flex", True, 9058),
        ("26.04.01 Qwen3 235B-A22B (GBS 8192)", QWEN3_235B, 256, 2, 8, 4, 32, "alltoall", True, 1712),
    ]
    for name, shape, gpus, tp, pp, vp, ep, dispatcher, a2a_overlap, rate in moe:
        gbs = 8192 if gpus == 256 else 1024
        yield Run(f"Bridge {name}", BRIDGE_26, "h100-80gb", gpus,
                  dict(shape, **fp8, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                       num_virtual_stages_per_pipeline_rank=vp, expert_model_parallel_size=ep,
                       expert_tensor_parallel_size=1, sequence_parallel=tp > 1, micro_batch_size=1,
                       global_batch_size=gbs, moe_token_dispatcher_type=dispatcher,
                       overlap_moe_expert_parallel_comm=a2a_overlap),
                  tokens_seconds(gbs, 4096, rate * gpus), f"{rate:,} tokens/s/GPU", free=("recompute",),
                  held_back=True)


def _b200() -> Iterable[Run]:
    """Megatron-Bridge's DGX-B200 rows (BRIDGE_B200): Blackwell's constants are fitted on each row's oldest
    release, the later releases are held back, as for the H100 rows (older fitted, newer held back)."""
    llama = dict(LLAMA, **MODERN, fp8="hybrid", grad_reduce_in_bf16=True, cross_entropy_loss_fusion=True)
    llama8b = dict(llama, num_layers=32, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=14336,
                   micro_batch_size=2, global_batch_size=128)
    llama405b = dict(llama, num_layers=126, hidden_size=16384, num_attention_heads=128, ffn_hidden_size=53248,
                     tensor_model_parallel_size=4, pipeline_model_parallel_size=8, context_parallel_size=2,
                     num_virtual_stages_per_pipeline_rank=8, sequence_parallel=True, tp_comm_overlap=True,
                     account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True,
                     micro_batch_size=1, global_batch_size=64)
    fp8 = dict(fp8="e4m3", fp8_recipe="mxfp8", grad_reduce_in_bf16=True)

    def moe(shape: dict[str, Any], pp: int, vp: int | None, gbs: int) -> dict[str, Any]:
        return dict(shape, **fp8, pipeline_model_parallel_size=pp, num_virtual_stages_per_pipeline_rank=vp,
                    expert_model_parallel_size=8, expert_tensor_parallel_size=1, micro_batch_size=1,
                    global_batch_size=gbs, moe_token_dispatcher_type="alltoall")

    rows = [  # name, args, GPUs, tokens/s/GPU, held back
        ("25.09 Llama 3 8B", llama8b, 8, 29994, False),
        ("25.09 Llama 3.1 405B", llama405b, 128, 664, False),
        ("25.11 Qwen3 30B-A3B", moe(QWEN3_30B, 1, None, 512), 8, 9299, False),
        ("25.11 Qwen3 235B-A22B", moe(QWEN3_235B, 8, 2, 1024), 64, 3269, False),
        ("25.11 Llama 3 8B", llama8b, 8, 30624, True),
        ("25.11 Llama 3.1 405B", llama405b, 128, 661, True),
        ("26.02 Qwen3 30B-A3B", moe(QWEN3_30B, 1, None, 512), 8, 9691, True),
        ("26.02 Qwen3 235B-A22B (GBS 8192)", moe(QWEN3_235B, 8, None, 8192), 256, 3805, True),
    ]
    for name, args, gpus, rate, held in rows:
        gbs, seq = int(args["global_batch_size"]), int(args["seq_length"])
        yield Run(f"Bridge B200 {name}", BRIDGE_B200, "b200-180gb", gpus, args,
                  tokens_seconds(gbs, seq, rate * gpus), f"{rate:,} tokens/s/GPU", free=("recompute",),
                  held_back=held)


RUNS: tuple[Run, ...] = (*_sc21(), *_readme(), *_nemo(), *_ours(), *_held_back_dense(), *_moe(),
                         *_held_back_bridge_26(), *_b200())


@dataclass(frozen=True)
class Result:
    run: Run
    predicted: float
    memory_gib: float
    fit: str
    rank: int | None  # 1-based rank of the first listed layout with the published TP·PP; None if not in top
    top: list[str]
    tied: int = 0  # how many of the plan's first layouts are within its tie band of #1 (search.tied_with_first)
    gap: float | None = None  # the published TP·PP's listed time / #1's − 1; None when not listed
    first_memory_gib: float = 0.0  # memory of the plan's #1 and of the published TP·PP as listed
    listed_memory_gib: float | None = None
    first_layout: str = ""  # #1 as search.describe writes it
    deciding: str = ""  # the step-time term the listed published TP·PP loses most on against #1 (search.dominant_cost)
    first_tp_pp: tuple[int, int] = (0, 0)  # the plan's #1's (TP, PP)

    @property
    def error(self) -> float:
        return self.predicted / self.run.seconds - 1

    @property
    def in_top3(self) -> bool:
        return self.rank is not None and self.rank <= 3

    @property
    def in_first_tie(self) -> bool:
        """The published TP·PP is #1 or tied with it (within the plan's tie band)."""
        return self.rank is not None and (self.rank == 1 or self.rank <= self.tied)

    @property
    def trivial(self) -> bool:
        """One GPU: TP1 PP1 is the only layout, so its rank says nothing."""
        return self.run.world == 1


def _choices(run: Run, t: est.Training, m: est.ModelShape) -> Iterable[est.Training]:
    vpps = [t.vpp]
    if "vpp" in run.free:
        vpps = ps.vpp_choices(m, t)  # the search's own choices, so that both price the same layouts
    mbss = ps.MICRO_BATCHES if "micro_batch_size" in run.free else (t.micro_batch_size,)
    recomputes = ps.recompute_choices(t) if "recompute" in run.free else (t.recompute,)
    for vpp in vpps:
        for mbs in mbss:
            for recompute in recomputes:
                yield replace(t, vpp=vpp, micro_batch_size=mbs, recompute=recompute)


def chosen(run: Run) -> ps.Candidate:
    """The published layout with the fastest choice of the knobs the source leaves open among those whose memory
    estimate is within the GPU's memory. The run ran, so it fitted: the plan's 90 % margin (USABLE_FRACTION) is
    room for what the estimate does not count when recommending, not evidence that the run recomputed (e.g.
    Megatron-Bridge's B200 Qwen3 235B recipe sets no recompute; its estimate is 92 % of the B200)."""
    gpu = est.GPUS[run.gpu]
    best: ps.Candidate | None = None
    fallback: ps.Candidate | None = None
    for t in _choices(run, est.training_of(run.args, run.world), est.model_shape(run.args)):
        m = est.model_shape(run.args, t.tp)
        if ps.layout_problems(m, t):
            continue
        c = ps.evaluate(m, t, gpu, 8)
        if fallback is None or c.memory.total < fallback.memory.total:
            fallback = c
        if c.fit in ("fits", "tight") and (best is None or c.seconds < best.seconds):
            best = c
    pick = best or fallback
    assert pick is not None, f"{run.name}: the published layout is invalid by our rules"
    return pick


def evaluate(run: Run, top: int = 10) -> Result:
    gpu = est.GPUS[run.gpu]
    pick = chosen(run)
    found = ps.search(run.args, run.world, gpu, 8, top=top)
    ranked = found.best
    labels = [f"TP{c.training.tp} PP{c.training.pp}" for c in ranked]
    rank = next((i for i, c in enumerate(ranked, 1) if (c.training.tp, c.training.pp) == (run.tp, run.pp)), None)
    listed = ranked[rank - 1] if rank else None
    deciding = ps.dominant_cost(listed.step, ranked[0].step) if listed and rank != 1 else ""
    return Result(run, pick.seconds, pick.memory.total / est.GIB, pick.fit, rank, labels[:3], found.tied,
                  listed.seconds / ranked[0].seconds - 1 if listed else None, ranked[0].memory.total / est.GIB,
                  listed.memory.total / est.GIB if listed else None, ps.describe(ranked[0].training), deciding,
                  (ranked[0].training.tp, ranked[0].training.pp))


def evaluate_all(runs: Iterable[Run] = RUNS) -> list[Result]:
    return [evaluate(r) for r in runs]


def summary(results: list[Result]) -> dict[str, Any]:
    errors = [abs(r.error) for r in results]
    ranked = [r for r in results if not r.trivial]
    return {
        "runs": len(results),
        "median_abs_error": statistics.median(errors),
        "p90_abs_error": percentile(errors, 0.9),
        "max_abs_error": max(errors),
        "top1_hits": sum(r.rank == 1 for r in ranked),
        "top3_hits": sum(r.in_top3 for r in ranked),
        "first_tie_hits": sum(r.in_first_tie for r in ranked),
        "top3_runs": len(ranked),
        "refused": [r.run.name for r in results if r.fit == "does not fit"],
    }


def percentile(values: list[float], q: float) -> float:
    """The q-quantile with linear interpolation (statistics.quantiles' 'inclusive' method)."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def part_summary_line(label: str, results: list[Result]) -> str:
    s = summary(results)
    ranked = s["top3_runs"] or 1
    return (f"{label}: {s['runs']} runs, median |error| {s['median_abs_error']:.1%}, 90th percentile "
            f"{s['p90_abs_error']:.1%} (max {s['max_abs_error']:.1%}); published TP·PP first for {s['top1_hits']} "
            f"and in the top 3 for {s['top3_hits']} of {s['top3_runs']} multi-GPU runs "
            f"({s['top1_hits'] / ranked:.0%} / {s['top3_hits'] / ranked:.0%}), #1 or tied with it for "
            f"{s['first_tie_hits']}; judged not to fit: {len(s['refused'])}.")


def markdown(results: list[Result]) -> str:
    lines = ["| run | part | GPUs | published TP·PP | published s/iter | predicted | error | plan's rank of TP·PP "
             "| plan's top 3 | memory (GiB) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        rank = "n/a (1 GPU)" if r.trivial else (str(r.rank) if r.rank else "> 10")
        lines.append(f"| {r.run.name} | {r.run.part} | {r.run.world} × {r.run.gpu} | {r.run.tp}·{r.run.pp} | "
                     f"{r.run.seconds:.3f} ({r.run.derived}) | {r.predicted:.3f} | {r.error:+.1%} | {rank} | "
                     f"{', '.join(r.top)} | {r.memory_gib:.1f} ({r.fit}) |")
    s = summary(results)
    lines.append("")
    lines.append(f"Median |error| {s['median_abs_error']:.1%} over {s['runs']} runs (max {s['max_abs_error']:.1%}); "
                 f"published TP·PP the plan's first for {s['top1_hits']} of {s['top3_runs']} multi-GPU runs "
                 f"({s['top1_hits'] / max(1, s['top3_runs']):.0%}) and in its top 3 for {s['top3_hits']}; "
                 f"published layouts judged not to fit: {len(s['refused'])}.")
    lines.append("")
    for label, part in (("Fitted part", [r for r in results if not r.run.held_back]),
                        ("Held-back part", [r for r in results if r.run.held_back]),
                        ("MoE runs", [r for r in results if r.run.moe]),
                        ("Held-back MoE runs", [r for r in results if r.run.moe and r.run.held_back])):
        if part:
            lines.append("- " + part_summary_line(label, part))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- the MoE fit

MOE_GRID: dict[str, tuple[float, ...]] = {
    "grouped_work": (1e9, 3e9, 1e10, 2e10, 3e10, 5e10, 7e10, 1e11, 1.5e11, 2e11, 3e11),
    "dispatch_exposed": (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0),
    "grouped_fp8_gain": (1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.85),
}
# A family's dense GEMM efficiency (Hopper's on its fitted dense runs; Blackwell's two fitted dense runs fix this one
# constant, the rest is Hopper's kernels on Blackwell's own peaks and bandwidths, launcher/gpus.py).
DENSE_GRID: dict[str, tuple[float, ...]] = {"gemm": tuple(round(0.50 + 0.02 * i, 2) for i in range(21))}
# What each family's fit moves (dense: False, MoE: True): Hopper's dense GEMM rate on its fitted dense runs (the
# expert GEMMs scale with it too, but the MoE fit does not move it) and its MoE constants (its BF16 and FP8 Qwen3
# runs tell grouped_fp8_gain apart), Blackwell's GEMM rate and its expert GEMMs' overhead: its two MoE runs are
# both FP8, so its FP8 gain and dispatch share stay Hopper's.
FITS: dict[str, tuple[tuple[bool, dict[str, tuple[float, ...]]], ...]] = {
    "hopper": ((False, DENSE_GRID), (True, MOE_GRID)),
    "blackwell": ((False, DENSE_GRID), (True, {"grouped_work": MOE_GRID["grouped_work"]})),
}


def fit_constants(grid: dict[str, tuple[float, ...]], family: str, moe: bool, runs: Iterable[Run] = RUNS,
                  rounds: int = 3) -> tuple[dict[str, float], list[tuple[Run, float]]]:
    """Coordinate descent of `grid`'s constants of one GPU family on the fitted part's runs of that family (MoE
    or dense; never the held-back part), minimising the mean |log error| at each run's chosen knobs;
    (constants, residual per fitted run). KERNELS is restored afterwards."""
    import math

    from launcher.estimate import steptime

    fitted = [r for r in runs if r.moe == moe and not r.held_back and est.GPUS[r.gpu].family == family]
    picks = [(r, chosen(r).training, est.model_shape(r.args, chosen(r).training.tp)) for r in fitted]
    saved = steptime.KERNELS[family]

    def errors() -> list[float]:
        return [steptime.step_time(m, t, est.GPUS[r.gpu]).total / r.seconds - 1 for r, t, m in picks]

    def loss() -> float:
        return statistics.fmean(abs(math.log1p(e)) for e in errors())

    try:
        for _ in range(rounds):
            for name, values in grid.items():
                scores = []
                for value in values:
                    steptime.KERNELS[family] = replace(steptime.KERNELS[family], **{name: value})
                    scores.append((loss(), value))
                steptime.KERNELS[family] = replace(steptime.KERNELS[family], **{name: min(scores)[1]})
        constants = {name: getattr(steptime.KERNELS[family], name) for name in grid}
        return constants, list(zip(fitted, errors(), strict=True))
    finally:
        steptime.KERNELS[family] = saved


def residuals_text(runs: Iterable[Run] = RUNS) -> str:
    """The fit's residuals: each fitted-part run's error at the current constants, grouped by precision, and
    the MoE constants the fit finds."""
    lines = []
    fitted = [r for r in runs if not r.held_back]
    for precision in sorted({r.precision for r in fitted}):
        group = [(r, chosen(r).seconds / r.seconds - 1) for r in fitted if r.precision == precision]
        errors = [abs(e) for _, e in group]
        lines.append(f"{precision}: {len(group)} fitted runs, median |error| {statistics.median(errors):.1%}, "
                     f"mean signed {statistics.fmean(e for _, e in group):+.1%}")
        lines += [f"  {e:+6.1%}  {r.name}" for r, e in group]
    for family, fits in FITS.items():
        for moe, grid in fits:
            constants, residual = fit_constants(grid, family, moe, runs)
            lines.append(f"{family} {'MoE' if moe else 'dense'} constants fitted on its fitted runs: "
                         + ", ".join(f"{k} {v:g}" for k, v in constants.items()))
            lines += [f"  {e:+6.1%}  {r.name} (at the fitted constants)" for r, e in residual]
    return "\n".join(lines)


def misses_text(results: Iterable[Result]) -> str:
    """Every multi-GPU run whose published TP·PP is not the plan's #1: how far behind #1 the plan lists it
    (its fastest choice of the other knobs), the memory of both, #1's layout and the step-time term the published
    TP·PP loses most on; docs/plan.md reads the causes from this."""
    lines = [f"{'part':<9} {'gap':>7} {'rank':>4} {'GiB pub/#1':>12}  run: published TP·PP vs #1"]
    missed = [r for r in results if not r.trivial and r.rank != 1]
    for r in missed:
        gap = f"{r.gap:+.1%}" if r.gap is not None else "n/l"
        mem = f"{r.listed_memory_gib:.1f}" if r.listed_memory_gib is not None else "-"
        tie = " (tied)" if r.in_first_tie else ""
        lines.append(f"{r.run.part:<9} {gap:>7} {str(r.rank or '>10'):>4} {mem:>5}/{r.first_memory_gib:<5.1f}  "
                     f"{r.run.name}: TP{r.run.tp} PP{r.run.pp} vs {r.first_layout}{tie}"
                     + (f"; {r.deciding}" if r.deciding else ""))
    if missed:
        lines.append(miss_pattern_line(missed))
    return "\n".join(lines)


def miss_pattern_line(missed: list[Result]) -> str:
    """Which way the misses lean: is the published TP·PP (the product) larger or smaller than #1's, and does it hold
    less memory as the plan lists it."""
    larger = sum(r.run.tp * r.run.pp > r.first_tp_pp[0] * r.first_tp_pp[1] for r in missed)
    smaller = sum(r.run.tp * r.run.pp < r.first_tp_pp[0] * r.first_tp_pp[1] for r in missed)
    listed = [r for r in missed if r.listed_memory_gib is not None]
    lighter = sum(r.listed_memory_gib is not None and r.listed_memory_gib < r.first_memory_gib for r in listed)
    return (f"{len(missed)} misses: published TP·PP larger than #1's in {larger}, smaller in {smaller}; "
            f"listed with less memory than #1 in {lighter} of {len(listed)}")


def held_back_errors(results: Iterable[Result]) -> tuple[HeldBack, ...]:
    """The held-back runs' errors as launcher/estimate/ranges.py keeps them (rounded to 0.1 %)."""
    return tuple(HeldBack(r.run.name, r.run.moe, est.GPUS[r.run.gpu].family, r.run.precision == "fp8",
                          round(r.error, 3)) for r in results if r.run.held_back)


def ranges_text(results: Iterable[Result]) -> str:
    """The HELD_BACK table of launcher/estimate/ranges.py, to paste there."""
    return "\n".join(f"    HeldBack({h.name!r}, {h.moe}, {h.generation!r}, {h.fp8}, {h.error}),"
                     for h in held_back_errors(results)).replace("'", '"')


if __name__ == "__main__":
    import sys

    if "--fit" in sys.argv[1:]:
        print(residuals_text())
    elif "--misses" in sys.argv[1:]:
        print(misses_text(evaluate_all()))
    elif "--ranges" in sys.argv[1:]:
        print(ranges_text(evaluate_all()))
    else:
        print(markdown(evaluate_all()))
