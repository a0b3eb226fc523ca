"""What Megatron at the pin does when a job loads a checkpoint saved with other settings: each cell saves a tiny
GPT (2 layers, hidden 64) with Megatron's own train_step and save_checkpoint, then loads it with changed settings
through setup_model_and_optimizer (which calls load_checkpoint) and takes one more step, in CPU processes over gloo
(launcher/inside/rehearse_rank.py, as the multi-rank rehearsal runs it).

    MEGATRON_LM_PATH=/path/to/Megatron-LM python scripts/ckpt_load_matrix.py [CELL...] [--json OUT]

Each cell prints one line: "loads" (iteration and parameter norm after the load, the loss of the step after it)
or "raises at load" with Megatron's error and where it was raised. Without CELL names every cell runs (the cells
saving alike share one save); `--list` names them.

The CPU stands in for the target where Megatron's own code cannot run here:
- CUDA tensors are CPU tensors (launcher/inside/rehearse_worker.CudaOnCpu);
- the distributed optimizer over torch's Adam (no Transformer Engine or apex here) cannot describe its state before
  the first step (distrib_optimizer.py state_dict: assert len(steps) == 1), which every torch_dist load of its
  state asks for, and looks for a per-parameter `step` the fully reshardable state never holds (KeyError: 'step',
  distrib_optimizer.py:1167); the target's fused Adam (TE's or apex's) keeps its step in the param groups and does
  neither. Both are given as the fused Adam's path gives them (fused_adam_stand_in; `--torch-adam-as-is` leaves
  Megatron's torch-Adam path alone and shows the assertion);
- multi-latent attention cells build both models with the launcher's SDPA spec (the local spec with a core attention
  that takes MLA's head sizes, as TE's does; the local DotProductAttention raises a TypeError at model build). No
  core attention holds a parameter here, so the tensors saved are the local spec's.
Not run here (no Transformer Engine): TE's module names and grouped experts (moe_grouped_gemm with TE); MoE with
linear biases fails its first step on the CPU (mlp.py: a view modified in place).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS_SAVED = 2
BASE = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
        "--max-position-embeddings", "64", "--vocab-size", "128", "--tokenizer-type", "NullTokenizer",
        "--micro-batch-size", "1", "--global-batch-size", "2", "--train-iters", "10", "--lr", "1e-3",
        "--lr-decay-style", "constant", "--mock-data", "--eval-iters", "0", "--eval-interval", "1000",
        "--save-interval", "1000", "--transformer-impl", "local", "--no-gradient-accumulation-fusion",
        "--use-cpu-initialization", "--no-persist-layer-norm", "--no-masked-softmax-fusion",
        "--no-bias-gelu-fusion", "--no-bias-dropout-fusion", "--no-rope-fusion", "--log-interval", "1"]
# fp16's dynamic loss scale starts at 2^32: its first steps overflow and are skipped, leaving no Adam state to save
PRECISION = {"fp32": [], "bf16": ["--bf16"], "fp16": ["--fp16", "--initial-loss-scale", "1024"]}
FULLY = ["--dist-ckpt-optim-fully-reshardable"]
DISTOPT = ["--use-distributed-optimizer"]
SHIM_ENV = "CKPT_MATRIX_TORCH_ADAM_AS_IS"


@dataclass(frozen=True)
class Cell:
    name: str
    save: tuple[str, ...]  # flags of the run that saves (after BASE)
    load: tuple[str, ...]  # flags of the run that loads it (after BASE)
    save_world: int = 1
    load_world: int = 1
    what: str = ""


def _p(name: str, distopt: bool) -> tuple[str, ...]:
    return (*PRECISION[name], *(DISTOPT if distopt else ()))


def _f(name: str) -> tuple[str, ...]:
    return (*_p(name, True), *FULLY)


def cells() -> list[Cell]:
    out = []
    for dist in (False, True):
        tag = "distopt" if dist else "plain"
        for old in ("bf16", "fp16", "fp32"):
            for new in ("bf16", "fp16", "fp32"):
                if new != old:
                    out.append(Cell(f"{tag}-{old}-to-{new}", _p(old, dist), _p(new, dist),
                                    what=f"torch_dist, {tag} optimizer: saved {old}, loaded {new}"))
    for old, new in (("bf16", "fp32"), ("fp32", "bf16"), ("bf16", "fp16")):
        out.append(Cell(f"fully-{old}-to-{new}", _f(old), _f(new),
                        what=f"distributed optimizer saved fully_reshardable: saved {old}, loaded {new}"))
    out += [
        Cell("plain-bf16-same", _p("bf16", False), _p("bf16", False), what="baseline: unchanged resume"),
        Cell("distopt-bf16-same", _p("bf16", True), _p("bf16", True), what="baseline: unchanged resume"),
        Cell("plain-fp32-to-bf16-no-load-optim", _p("fp32", False), (*_p("bf16", False), "--no-load-optim")),
        Cell("plain-fp32-to-bf16-finetune", _p("fp32", False), (*_p("bf16", False), "--finetune")),
        Cell("distopt-fp32-to-bf16-no-load-optim", _p("fp32", True), (*_p("bf16", True), "--no-load-optim")),
        Cell("bf16-plain-to-distopt", _p("bf16", False), _p("bf16", True), what="use_distributed_optimizer on"),
        Cell("bf16-distopt-to-plain", _p("bf16", True), _p("bf16", False), what="use_distributed_optimizer off"),
        Cell("fp32-plain-to-distopt", _p("fp32", False), _p("fp32", True), what="use_distributed_optimizer on"),
        Cell("fp32-distopt-to-plain", _p("fp32", True), _p("fp32", False), what="use_distributed_optimizer off"),
        Cell("bf16-fully-to-plain", _f("bf16"), _p("bf16", False),
             what="use_distributed_optimizer off, its state saved fully_reshardable"),
        Cell("bf16-plain-to-fully", _p("bf16", False), _f("bf16"),
             what="use_distributed_optimizer on (fully_reshardable), a plain optimizer's state"),
        Cell("bf16-distopt-to-plain-no-load-optim", _p("bf16", True), (*_p("bf16", False), "--no-load-optim")),
        Cell("distopt-vocab-128-to-256", _p("bf16", True), (*_p("bf16", True), "--vocab-size", "256")),
        Cell("fully-vocab-128-to-256", _f("bf16"), (*_f("bf16"), "--vocab-size", "256")),
        Cell("distopt-vocab-128-to-256-no-load-optim", _p("bf16", True),
             (*_p("bf16", True), "--vocab-size", "256", "--no-load-optim")),
        Cell("distopt-bf16-grad-reduce-in-bf16", _p("bf16", True), (*_p("bf16", True), "--grad-reduce-in-bf16"),
             what="the same params dtype, gradients reduced in bf16 instead of fp32"),
        Cell("fully-bf16-grad-reduce-in-bf16", _f("bf16"), (*_f("bf16"), "--grad-reduce-in-bf16"),
             what="the same params dtype, gradients reduced in bf16 instead of fp32"),
        Cell("plain-fp16-same", _p("fp16", False), _p("fp16", False), what="baseline: unchanged resume"),
        Cell("format-dist-to-torch", _p("bf16", False), (*_p("bf16", False), "--ckpt-format", "torch"),
             what="a torch_dist checkpoint, the job's ckpt_format torch"),
        Cell("format-torch-to-dist", (*_p("bf16", False), "--ckpt-format", "torch"), _p("bf16", False),
             what="a torch checkpoint, the job's ckpt_format torch_dist"),
        Cell("torch-fp32-to-bf16", (*_p("fp32", False), "--ckpt-format", "torch"),
             (*_p("bf16", False), "--ckpt-format", "torch"), what="torch format, plain optimizer"),
        Cell("torch-vocab-100-to-120", (*_p("bf16", False), "--ckpt-format", "torch", "--vocab-size", "100"),
             (*_p("bf16", False), "--ckpt-format", "torch", "--vocab-size", "120"),
             what="torch format, another vocabulary padded to the same 128 rows"),
        Cell("schedule-iters-10-to-20", _p("bf16", False), (*_p("bf16", False), "--train-iters", "20"),
             what="a longer run: the LR schedule's lengths (they follow train_iters) change"),
        Cell("schedule-iters-10-to-20-override", _p("bf16", False),
             (*_p("bf16", False), "--train-iters", "20", "--override-opt_param-scheduler"),
             what="a longer run, the job's LR schedule taken"),
        Cell("schedule-lr-use-checkpoint", _p("bf16", False),
             (*_p("bf16", False), "--lr", "2e-3", "--use-checkpoint-opt_param-scheduler"),
             what="another peak rate, the checkpoint's LR schedule taken (the job's ignored)"),
        Cell("layers-2-to-4", _p("bf16", False), (*_p("bf16", False), "--num-layers", "4")),
        Cell("hidden-64-to-128", _p("bf16", False), (*_p("bf16", False), "--hidden-size", "128")),
        Cell("vocab-128-to-256", _p("bf16", False), (*_p("bf16", False), "--vocab-size", "256"),
             what="another tokenizer's vocabulary: padded 128 → 256"),
        Cell("vocab-pad-128-to-8", (*_p("bf16", False), "--vocab-size", "100"),
             (*_p("bf16", False), "--vocab-size", "100", "--make-vocab-size-divisible-by", "8"),
             what="the same vocabulary padded otherwise: 128 → 104 rows"),
        Cell("vocab-pad-128-to-8-no-load-optim", (*_p("bf16", False), "--vocab-size", "100"),
             (*_p("bf16", False), "--vocab-size", "100", "--make-vocab-size-divisible-by", "8", "--no-load-optim")),
        Cell("distopt-tp1-to-tp2", _p("bf16", True), (*_p("bf16", True), "--tensor-model-parallel-size", "2"),
             load_world=2, what="TP 1 → 2, dist_ckpt_optim_fully_reshardable off (dp_reshardable)"),
        Cell("distopt-tp1-to-tp2-fully-reshardable", (*_p("bf16", True), "--dist-ckpt-optim-fully-reshardable"),
             (*_p("bf16", True), "--tensor-model-parallel-size", "2", "--dist-ckpt-optim-fully-reshardable"),
             load_world=2, what="TP 1 → 2, dist_ckpt_optim_fully_reshardable on"),
        Cell("distopt-tp1-to-tp2-fp32-fully-reshardable", (*_p("bf16", True), "--dist-ckpt-optim-fully-reshardable"),
             (*_p("fp32", True), "--tensor-model-parallel-size", "2", "--dist-ckpt-optim-fully-reshardable"),
             load_world=2, what="TP 1 → 2 and bf16 → fp32, fully reshardable"),
    ]
    out += shape_cells()
    return out


B16 = PRECISION["bf16"]
MOE = ("--num-experts", "2", "--moe-router-topk", "2", "--disable-bias-linear")  # the experts take no biases


def _change(name: str, save: tuple[str, ...], load: tuple[str, ...], what: str, world: int = 1) -> Cell:
    """A model-shape or layout change: bf16, the plain optimizer unless the flags say otherwise."""
    return Cell(name, (*B16, *save), (*B16, *load), save_world=1, load_world=world, what=what)


def shape_cells() -> list[Cell]:
    untied, rope, rms = ("--untie-embeddings-and-output-weights",), ("--position-embedding-type", "rope"), \
        ("--normalization", "RMSNorm")
    qkln, nobias, torch_fmt = ("--qk-layernorm",), ("--disable-bias-linear",), ("--ckpt-format", "torch")
    return [
        _change("gqa-4-to-2", (), ("--group-query-attention", "--num-query-groups", "2"), "4 → 2 query groups"),
        _change("swiglu-on", (), ("--swiglu",), "SwiGLU on (fc1 twice as wide)"),
        _change("untie-on", (), untied, "untie_embeddings_and_output_weights on: an output layer the checkpoint "
                "lacks"),
        _change("untie-off", untied, (), "untie_embeddings_and_output_weights off: the saved output layer unused"),
        _change("rope-to-learned", rope, (), "position embeddings learned_absolute, saved rope"),
        _change("learned-to-rope", (), rope, "rope, saved with learned position embeddings"),
        _change("learned-to-rope-raise-all", (), (*rope, "--dist-ckpt-strictness", "raise_all"),
                "rope, saved learned, dist_ckpt_strictness raise_all"),
        _change("layernorm-to-rmsnorm", (), rms, "RMSNorm, saved LayerNorm (its biases unused)"),
        _change("rmsnorm-to-layernorm", rms, (), "LayerNorm, saved RMSNorm (no biases saved)"),
        _change("qk-layernorm-on", (), qkln, "qk_layernorm on"),
        _change("qk-layernorm-off", qkln, (), "qk_layernorm off"),
        _change("bias-linear-off", (), nobias, "add_bias_linear off: the saved biases unused"),
        _change("bias-linear-on", nobias, (), "add_bias_linear on, saved without biases"),
        _change("qkv-bias-on", nobias, (*nobias, "--add-qkv-bias"), "add_qkv_bias on, saved without biases"),
        _change("ffn-256-to-128", (), ("--ffn-hidden-size", "128"), "ffn_hidden_size 256 → 128"),
        _change("kv-channels-16-to-32", (), ("--kv-channels", "32"), "kv_channels 16 → 32"),
        _change("max-position-64-to-128", (), ("--max-position-embeddings", "128"),
                "learned positions: max_position_embeddings 64 → 128"),
        _change("seq-64-to-32", (), ("--seq-length", "32"), "seq_length 64 → 32, max_position_embeddings kept"),
        _change("distopt-bias-linear-off", DISTOPT, (*DISTOPT, *nobias), "dp_reshardable, add_bias_linear off"),
        _change("fully-bias-linear-off", (*DISTOPT, *FULLY), (*DISTOPT, *FULLY, *nobias),
                "fully_reshardable, add_bias_linear off"),
        _change("torch-untie-on", torch_fmt, (*torch_fmt, *untied), "torch format, untie on"),
        _change("torch-qk-layernorm-on", torch_fmt, (*torch_fmt, *qkln), "torch format, qk_layernorm on"),
        _change("torch-bias-linear-off", torch_fmt, (*torch_fmt, *nobias), "torch format, add_bias_linear off"),
        _change("torch-layers-2-to-4-no-load-optim", torch_fmt, (*torch_fmt, "--num-layers", "4", "--no-load-optim"),
                "torch format, 4 layers, the optimizer state not loaded"),
        _change("torch-layers-2-to-4-finetune", torch_fmt, (*torch_fmt, "--num-layers", "4", "--finetune"),
                "torch format, 4 layers, finetune"),
        _change("torch-untie-on-no-load-optim", torch_fmt, (*torch_fmt, *untied, "--no-load-optim"),
                "torch format, untie on, the optimizer state not loaded"),
        _change("untie-on-log-unexpected", (), (*untied, "--dist-ckpt-strictness", "log_unexpected"),
                "untie on, dist_ckpt_strictness log_unexpected"),
        _change("moe-experts-2-to-4", MOE, ("--num-experts", "4", *MOE[2:]), "MoE: 2 → 4 experts"),
        _change("moe-shared-expert-on", MOE, (*MOE, "--moe-shared-expert-intermediate-size", "64"),
                "MoE: a shared expert added"),
        _change("moe-shared-expert-off", (*MOE, "--moe-shared-expert-intermediate-size", "64"), MOE,
                "MoE: the shared expert dropped"),
        _change("moe-ep-1-to-2", MOE, (*MOE, "--expert-model-parallel-size", "2"), "MoE: EP 1 → 2", world=2),
        _change("moe-ep-1-to-2-no-load-optim", MOE, (*MOE, "--expert-model-parallel-size", "2", "--no-load-optim"),
                "MoE: EP 1 → 2, the optimizer state not loaded", world=2),
        Cell("moe-ep-2-to-1", (*B16, *MOE, "--expert-model-parallel-size", "2"), (*B16, *MOE), save_world=2,
             what="MoE: EP 2 → 1"),
        _change("distopt-moe-ep-1-to-2", (*MOE, *DISTOPT), (*MOE, *DISTOPT, "--expert-model-parallel-size", "2"),
                "MoE, dp_reshardable: EP 1 → 2", world=2),
        _change("pp-1-to-2", (), ("--pipeline-model-parallel-size", "2"), "PP 1 → 2", world=2),
        _change("pp-1-to-2-vpp", ("--num-layers", "4"), ("--num-layers", "4", "--pipeline-model-parallel-size", "2",
                                                          "--num-layers-per-virtual-pipeline-stage", "1"),
                "4 layers: PP 1 → 2 with 2 virtual stages per rank", world=2),
        _change("finetune-no-load-rng", (), ("--finetune", "--no-load-rng"), "finetune and no_load_rng"),
        _change("ckpt-step-missing", (), ("--ckpt-step", "5"), "ckpt_step 5, only iteration 2 saved"),
        _change("use-checkpoint-args-swiglu", ("--swiglu",), ("--use-checkpoint-args",),
                "saved with SwiGLU, loaded without it and use_checkpoint_args"),
        _change("use-checkpoint-args-untie", untied, ("--use-checkpoint-args",),
                "saved untied, loaded tied with use_checkpoint_args"),
        _change("use-checkpoint-args-qk-layernorm", qkln, ("--use-checkpoint-args",),
                "saved with qk_layernorm, loaded without it and use_checkpoint_args (which does not take it)"),
        _change("auto-detect-dist-to-torch", (), (*torch_fmt, "--auto-detect-ckpt-format"),
                "a torch_dist checkpoint, the job's ckpt_format torch with auto_detect_ckpt_format"),
    ] + conditional_cells()


MOE4 = ("--num-experts", "4", *MOE[2:])
# the local DotProductAttention does not take the head sizes MLA gives (k_channels, v_channels: a TypeError at model
# build); the launcher's SDPA spec is the local spec with a core attention that takes them, as TE's does (neither
# holds parameters), so both sides of an MLA cell build their model with it
SDPA = ("--spec", "launcher.inside.megatron_ext.sdpa_spec", "layer_spec")
MLA = ("--multi-latent-attention", "--position-embedding-type", "rope", "--kv-lora-rank", "16", "--qk-head-dim", "8",
       "--qk-pos-emb-head-dim", "8", "--v-head-dim", "8", *SDPA)


def _ep(size: int, distopt: bool, fully: bool = False) -> tuple[str, ...]:
    """EP 2 and 4 on as many ranks (data parallel 2 and 4: a global batch of 4 on both sides)."""
    return (*B16, *MOE4, *(DISTOPT if distopt else ()), *(FULLY if fully else ()), "--expert-model-parallel-size",
            str(size), "--global-batch-size", "4")


def conditional_cells() -> list[Cell]:
    """Parameters Megatron creates only under a setting (MoE's grouped GEMM, expert bias, shared-expert gate and
    router bias, MLA, multi-token prediction, a learnable softmax offset, the MoE layer pattern) and EP between
    sizes above 1."""
    out = [Cell(f"{tag}moe-ep-{a}-to-{b}", _ep(a, dist), _ep(b, dist), save_world=a, load_world=b,
                what=f"MoE, 4 experts{', dp_reshardable' if dist else ''}: EP {a} → {b}")
           for dist, tag in ((False, ""), (True, "distopt-")) for a, b in ((2, 4), (4, 2))]
    out.append(Cell("fully-moe-ep-2-to-4", _ep(2, True, True), _ep(4, True, True), save_world=2, load_world=4,
                    what="MoE, 4 experts, fully_reshardable: EP 2 → 4"))
    gate, bias = ("--moe-shared-expert-intermediate-size", "64", "--moe-shared-expert-gate"), \
        ("--moe-router-enable-expert-bias", "--moe-router-score-function", "sigmoid")
    q_lora, mla_qkln = ("--q-lora-rank", "16"), ("--qk-layernorm",)
    learnable, rope = ("--softmax-type", "learnable"), ("--position-embedding-type", "rope")

    def mtp(n: int) -> tuple[str, ...]:  # MTP takes RoPE or no position embedding (arguments.py)
        return ("--mtp-num-layers", str(n))

    out += [
        _change("moe-grouped-gemm-on", MOE, (*MOE, "--moe-grouped-gemm"),
                "MoE: moe_grouped_gemm on (the local spec's experts stay a SequentialMLP)"),
        _change("moe-expert-bias-on", MOE, (*MOE, *bias), "MoE: the router's expert bias on (a buffer it saves)"),
        _change("moe-expert-bias-off", (*MOE, *bias), MOE, "MoE: the router's expert bias off"),
        _change("moe-shared-gate-on", (*MOE, *gate[:2]), (*MOE, *gate), "MoE: the shared expert's gate on"),
        _change("moe-shared-gate-off", (*MOE, *gate), (*MOE, *gate[:2]), "MoE: the shared expert's gate off"),
        _change("moe-layer-freq-1-to-11", MOE, (*MOE, "--moe-layer-freq", "[1,1]"),
                "MoE on both layers, moe_layer_freq 1 → [1,1] (the same layers, each saved under its own name)"),
        _change("distopt-moe-expert-bias-off", (*MOE, *DISTOPT, *bias), (*MOE, *DISTOPT),
                "MoE, dp_reshardable: the router's expert bias off (a buffer, not in the optimizer's buffer)"),
        _change("moe-layer-freq-10-to-01", (*MOE, "--moe-layer-freq", "[1,0]"), (*MOE, "--moe-layer-freq", "[0,1]"),
                "MoE on layer 1 of 2, loaded with MoE on layer 2"),
        _change("moe-layer-freq-11-to-10", MOE, (*MOE, "--moe-layer-freq", "[1,0]"),
                "MoE on both layers, loaded with MoE on the first only"),
        _change("mla-on", SDPA, MLA, "multi-latent attention on"),
        _change("mla-off", MLA, SDPA, "multi-latent attention off"),
        _change("mla-q-lora-on", MLA, (*MLA, *q_lora), "MLA: q_lora_rank 16 (a low-rank query), saved without"),
        _change("mla-q-lora-off", (*MLA, *q_lora), MLA, "MLA: q_lora_rank unset, saved with 16"),
        _change("mla-qk-layernorm-on", MLA, (*MLA, *mla_qkln), "MLA: qk_layernorm on (norms on the latents)"),
        _change("mla-qk-layernorm-off", (*MLA, *mla_qkln), MLA, "MLA: qk_layernorm off"),
        _change("mla-kv-lora-16-to-32", MLA, (*MLA, "--kv-lora-rank", "32"), "MLA: kv_lora_rank 16 → 32"),
        _change("mtp-on", rope, (*rope, *mtp(1)), "multi-token prediction (RoPE): 1 MTP layer added"),
        _change("mtp-off", (*rope, *mtp(1)), rope, "multi-token prediction (RoPE): the MTP layer dropped"),
        _change("mtp-1-to-2", (*rope, *mtp(1)), (*rope, *mtp(2)), "MTP layers 1 → 2 (RoPE)"),
        _change("mtp-2-to-1", (*rope, *mtp(2)), (*rope, *mtp(1)), "MTP layers 2 → 1 (RoPE)"),
        _change("softmax-learnable-on", (), learnable, "softmax_type learnable: a per-head softmax offset added"),
        _change("softmax-learnable-off", learnable, (), "softmax_type learnable → vanilla: the offset dropped"),
    ]
    return out


@dataclass
class Outcome:
    ok: bool
    stage: str = ""
    error: str = ""
    where: str = ""
    facts: dict = field(default_factory=dict)
    seconds: float = 0.0


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _env(megatron: Path, out: Path, mode: str, steps: int, as_is: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONPATH=os.pathsep.join([str(megatron), str(ROOT)]), CUDA_DEVICE_MAX_CONNECTIONS="1",
               OMP_NUM_THREADS="1", NO_VCS_VERSION="1", MEGATRON_LAUNCH_COMPILE_BACKEND="aot_eager",
               MEGATRON_LAUNCH_REHEARSE_OUT=str(out), MEGATRON_LAUNCH_REHEARSE_MODE=mode,
               MEGATRON_LAUNCH_REHEARSE_STEPS=str(steps), TMPDIR=str(out.parent))
    if as_is:
        env[SHIM_ENV] = "1"
    return env


def run(python: str, megatron: Path, flags: list[str], world: int, mode: str, steps: int, work: Path,
        as_is: bool) -> Outcome:
    out = work / f"answers-{mode}-{time.monotonic_ns()}"
    out.mkdir(parents=True)
    argv = [python, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(world),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_port()}", "--max-restarts", "0",
            str(Path(__file__).resolve()), "--rank", *flags]
    start = time.monotonic()
    with open(out / "torchrun.log", "wb") as log:
        code = subprocess.run(argv, env=_env(megatron, out, mode, steps, as_is), stdout=log,
                              stderr=subprocess.STDOUT, cwd=work, timeout=900).returncode
    answers = sorted((json.loads(p.read_text()) for p in out.glob("rank-*.json")), key=lambda a: a["rank"])
    seconds = round(time.monotonic() - start, 1)
    failed = [a for a in answers if not a["ok"]]
    if failed:
        first = min(failed, key=lambda a: a.get("time", 0))
        return Outcome(False, first["stage"], _innermost(first["error"]), first["where"], first.get("facts", {}),
                       seconds)
    if code != 0 or len(answers) != world:
        tail = (out / "torchrun.log").read_text(errors="replace")[-1500:]
        return Outcome(False, "torchrun", f"exit {code}, {len(answers)} of {world} answers: {tail}", "", {}, seconds)
    facts = answers[0]["facts"]
    losses = [x for a in answers for x in (a["facts"].get("loss") or []) if x is not None]
    facts["loss"] = losses[:1] or facts.get("loss")
    return Outcome(True, "done", facts=facts, seconds=seconds)


def _innermost(error: str) -> str:
    """torch.distributed.checkpoint's CheckpointException carries each rank's traceback as text: its last
    exception is Megatron's own."""
    if "Traceback" not in error:
        return error
    found = re.findall(r"(\w+(?:Error|Exception)): (.*?)(?= \(RANK \d+\)|$)", error.split("Traceback", 1)[1])
    return f"{error.split(':', 1)[0]} from {found[-1][0]}: {found[-1][1][:400]}" if found else error


def describe(cell: Cell, saved: Outcome, loaded: Outcome) -> str:
    if not saved.ok:
        return f"{cell.name}: the save failed at {saved.stage}: {saved.error} ({saved.where})"
    if not loaded.ok:
        return f"{cell.name}: raises at load ({loaded.stage}): {loaded.error[:300]} ({loaded.where})"
    f = loaded.facts
    norm, before = f.get("params_norm"), saved.facts.get("params_norm")
    drift = abs(norm - before) / before if norm and before else None
    loss = f.get("loss") or [None]
    return (f"{cell.name}: loads at iteration {f.get('iteration_loaded')} (saved {STEPS_SAVED}), parameter norm "
            f"{norm:.6g} vs saved {before:.6g} (relative {drift:.1e}), next step's loss {loss[0]}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cells", nargs="*")
    parser.add_argument("--json", help="write every outcome here")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--keep", metavar="DIR", help="save the checkpoints under DIR and keep them")
    parser.add_argument("--torch-adam-as-is", action="store_true",
                        help="no stand-in for the target's fused Adam (the distributed optimizer's loads assert)")
    opts = parser.parse_args(argv)
    known = {c.name: c for c in cells()}
    if opts.list:
        print("\n".join(f"{c.name}: {c.what}" if c.what else c.name for c in known.values()))
        return 0
    unknown = [n for n in opts.cells if n not in known]
    if unknown:
        print(f"error: no cell {', '.join(unknown)}\nhint: --list names them", file=sys.stderr)
        return 2
    megatron = Path(os.environ.get("MEGATRON_LM_PATH", ""))
    if not (megatron / "pretrain_gpt.py").is_file():
        print("error: MEGATRON_LM_PATH names no Megatron-LM checkout\nhint: export MEGATRON_LM_PATH=DIR",
              file=sys.stderr)
        return 2
    python = os.environ.get("MEGATRON_PYTHON", sys.executable)
    chosen = [known[n] for n in opts.cells] if opts.cells else list(known.values())
    work = Path(opts.keep).resolve() if opts.keep else Path(tempfile.mkdtemp(prefix="ckpt-load-matrix-"))
    saves: dict[tuple, tuple[Outcome, Path]] = {}
    results = []
    try:
        for cell in chosen:
            key = (cell.save, cell.save_world)
            if key not in saves:
                where = work / f"save-{len(saves)}"
                flags = [*BASE, *cell.save, "--save", str(where / "ckpt")]
                saves[key] = (run(python, megatron, flags, cell.save_world, "train", STEPS_SAVED, where,
                                  opts.torch_adam_as_is), where / "ckpt")
                if opts.keep:
                    print(f"saved with {' '.join(cell.save) or 'fp32'}: {where / 'ckpt'}", flush=True)
            saved, ckpt = saves[key]
            loaded = Outcome(False, "save", "not loaded: the save failed")
            if saved.ok:
                flags = [*BASE, *cell.load, "--load", str(ckpt), "--exit-on-missing-checkpoint"]
                loaded = run(python, megatron, flags, cell.load_world, "load", 1, work / f"load-{cell.name}",
                             opts.torch_adam_as_is)
            line = describe(cell, saved, loaded)
            print(line, flush=True)
            results.append({"cell": cell.name, "what": cell.what, "save": list(cell.save), "saves_at": str(ckpt),
                            "load": list(cell.load), "save_world": cell.save_world, "load_world": cell.load_world,
                            "saved": saved.__dict__, "loaded": loaded.__dict__, "line": line})
    finally:
        if not opts.keep:
            shutil.rmtree(work, ignore_errors=True)
    if opts.json:
        Path(opts.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


def fused_adam_stand_in() -> None:
    """A fresh distributed optimizer's state dict as the target's fused Adam gives it (no per-parameter state yet;
    Megatron's torch-Adam path asserts there). Its saved step is loaded as on the target."""
    from megatron.core.optimizer import distrib_optimizer as dopt

    original = dopt.DistributedOptimizer.state_dict

    def state_dict(self):
        if dopt.HAVE_APEX_OR_TE or len(self.optimizer.state) > 0:
            return original(self)
        inner = self.optimizer.state_dict()
        out = {"optimizer": {k: v for k, v in inner.items() if k != "state"}}
        for group in out["optimizer"]["param_groups"]:
            del group["params"]
            group["step"] = 0
        if self.grad_scaler:
            out["grad_scaler"] = self.grad_scaler.state_dict()
        return out

    dopt.DistributedOptimizer.state_dict = state_dict
    original_set = dopt.DistributedOptimizer._set_main_param_and_optimizer_states

    def set_states(self, model_param, tensors):
        """torch's Adam keeps a per-parameter `step` the fully reshardable state never holds (the fused Adam
        keeps it in the param groups): loaded as the target loads its own states."""
        if dopt.HAVE_APEX_OR_TE or "step" in tensors or self.config.use_precision_aware_optimizer_no_fp8_or_ds_fp8:
            return original_set(self, model_param, tensors)
        group_index, group_order = self.model_param_group_index_map[model_param]
        state = self.optimizer.state[self.optimizer.param_groups[group_index]["params"][group_order]]
        step = state.pop("step", None)
        try:
            return original_set(self, model_param, tensors)
        finally:
            if step is not None:
                state["step"] = step

    dopt.DistributedOptimizer._set_main_param_and_optimizer_states = set_states


def rank_main() -> int:
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    from launcher.inside import rehearse_rank

    if os.environ.get(SHIM_ENV) != "1":
        from launcher.inside.rehearse_worker import CudaOnCpu

        with CudaOnCpu():
            fused_adam_stand_in()
    return rehearse_rank.main()


if __name__ == "__main__":  # the checkpoint writer's helper processes import this file again
    sys.exit(rank_main() if sys.argv[1:2] == ["--rank"] else main(sys.argv[1:]))
