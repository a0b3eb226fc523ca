"""Peak live tensor bytes of Megatron training steps, phase by phase, on the CPU.

Runs a shrunk GPT job through the launcher's own path (pretrain_gpt.py's model provider with
``--spec launcher.inside.megatron_ext.sdpa_spec_fast layer_spec``, the fast ops named in MEGATRON_LAUNCH_FAST_OPS,
the distributed optimizer, torch's AdamW, no Transformer Engine or apex) in one process over gloo, CUDA redirected
to the CPU as the rehearsal does (launcher/inside/rehearse_worker.CudaOnCpu), and sums the CPU allocator's
allocations and frees that torch.profiler records (profile_memory; compiled code included, torch.compile with its
aot_eager backend). It prints, per phase (model and optimizer build, then forward+backward, gradient preparation,
torch's AdamW step and the parameter copy of each iteration), the live bytes at its start, its peak and the live
bytes at its end, as multiples of the parameter bytes P, so that the figures scale to the full-size job when the
shrunk one keeps its proportions (s/h, heads·s²/h², vocab/h, layers).

    MEGATRON_LM_PATH=/work/mlm /work/main/.venv/bin/python scripts/memory_probe.py [--bf16] [--hidden 1024]
        [--heads 8] [--query-groups N] [--seq 512] [--max-pos N] [--layers 2] [--vocab 50257] [--iters 2]
        [--fast-ops LIST|none] [--save DIR] [--top N] [--stacks] [-- MORE MEGATRON FLAGS]

``--top N`` lists, for each phase's peak, the N largest blocks made in the phase by the op (with ``--stacks`` also the
Python frames) that made them. On the CPU the SDPA kernel is not the GPU's: with attention dropout the CPU runs
torch's math attention (scores stored), without it its flash kernel; the parameter all-gather (gloo) and the
checkpoint writer (CPU tensors cloned) add copies that a GPU run does not make.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def megatron_argv(opts) -> list[str]:
    """The job's flags as the launcher renders them without TE/apex (zb preset, shrunk)."""
    argv = ["--num-layers", str(opts.layers), "--hidden-size", str(opts.hidden),
            "--num-attention-heads", str(opts.heads), "--seq-length", str(opts.seq),
            "--max-position-embeddings", str(opts.max_pos or opts.seq), "--untie-embeddings-and-output-weights",
            "--use-distributed-optimizer", "--micro-batch-size", "1", "--global-batch-size", "1",
            "--lr", "6e-05", "--min-lr", "6e-06", "--lr-decay-style", "cosine", "--clip-grad", "8.0",
            "--weight-decay", "0.1", "--adam-beta1", "0.9", "--adam-beta2", "0.95", "--init-method-std", "0.006",
            "--no-create-attention-mask-in-dataloader", "--transformer-impl", "local",
            "--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1",
            "--train-iters", str(opts.iters), "--log-interval", "1", "--eval-iters", "0", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", str(opts.vocab),
            "--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion", "--no-persist-layer-norm",
            "--spec", "launcher.inside.megatron_ext.sdpa_spec_fast", "layer_spec", "--rerun-mode", "disabled"]
    if opts.bf16:
        argv.append("--bf16")
    if opts.query_groups:
        argv += ["--group-query-attention", "--num-query-groups", str(opts.query_groups)]
    if opts.save:
        argv += ["--save", opts.save, "--save-interval", str(opts.iters)]
    return argv + opts.extra


class Phases:
    """Live CPU allocator bytes over time from torch.profiler's memory events, cut into named phases."""

    def __init__(self, stacks: bool = False):
        import torch

        self.torch = torch
        self.marks: list[tuple[str, int]] = []  # (phase name, start in ns of the profiler's clock)
        self.profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                               profile_memory=True, with_stack=stacks)

    def phase(self, name: str) -> None:
        with self.torch.profiler.record_function(f"phase:{name}"):
            pass

    def rows(self, top: int = 0) -> list[tuple[str, int, int, int, list]]:
        """(phase, live bytes at its start, its peak, live at its end, the `top` largest blocks made in the phase
        and alive at its peak as (bytes, the op chain that made them)), counted from the profile's start."""
        from torch._C._profiler import _EventType

        marks, memory = [], []
        stack = [(node, ()) for node in self.profiler.profiler.kineto_results.experimental_event_tree()]
        while stack:
            node, chain = stack.pop()
            if node.typed[0] == _EventType.Allocation:
                memory.append((node.start_time_ns, node.typed[1].alloc_size, node.typed[1].ptr, chain))
                continue
            if node.name.startswith("phase:"):
                marks.append((node.start_time_ns, node.name[len("phase:"):]))
            stack.extend((child, (*chain, node.name)) for child in node.children)
        marks.sort()
        memory.sort(key=lambda m: m[0])
        rows, live, blocks, i = [], 0, {}, 0
        for n, (start, name) in enumerate(marks):
            end = marks[n + 1][0] if n + 1 < len(marks) else float("inf")
            while i < len(memory) and memory[i][0] < start:
                live = self._apply(memory[i], live, blocks, None)
                i += 1
            base = peak = live
            made: dict = {}
            at_peak: list = []
            while i < len(memory) and memory[i][0] < end:
                live = self._apply(memory[i], live, blocks, made)
                if live > peak:
                    peak = live
                    if top:
                        at_peak = sorted(made.values(), reverse=True)[:top]
                i += 1
            rows.append((name, base, peak, live, at_peak))
        return rows

    @staticmethod
    def _apply(event, live: int, blocks: dict, made: dict | None) -> int:
        _t, size, ptr, chain = event
        if size > 0:
            blocks[ptr] = size
            if made is not None:
                made[ptr] = (size, " > ".join(_short(c) for c in chain if _kept(c))[-400:])
        else:
            blocks.pop(ptr, None)
            if made is not None:
                made.pop(ptr, None)
        return live + size


def _kept(frame: str) -> bool:
    """Ops, and Python frames of Megatron, the launcher and torch.distributed (with --stacks)."""
    if frame.startswith("phase:"):
        return False
    if ".py(" not in frame:
        return True
    return any(part in frame for part in ("megatron/", "launcher/", "torch/distributed/"))


def _short(frame: str) -> str:
    return frame.split("megatron/")[-1].split("site-packages/")[-1] if ".py(" in frame else frame


def run(opts) -> int:
    os.environ.setdefault("MEGATRON_LAUNCH_COMPILE_BACKEND", "aot_eager")
    os.environ.update({"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": os.environ.get("MASTER_PORT", "29517"), "NO_VCS_VERSION": "1"})
    if opts.fast_ops is not None:
        os.environ["MEGATRON_LAUNCH_FAST_OPS"] = opts.fast_ops
    megatron = os.environ.get("MEGATRON_LM_PATH", "/work/mlm")
    for path in (str(ROOT / "launcher/inside/apex_free"), str(ROOT), megatron):
        sys.path.insert(0, path)
    import datetime
    from functools import partial

    import torch

    from launcher.inside.rehearse_rank import batches
    from launcher.inside.rehearse_worker import CudaOnCpu, initialize_model_parallel

    torch.manual_seed(0)
    probe = Phases(stacks=opts.stacks)
    with CudaOnCpu():
        import pretrain_gpt  # type: ignore[import-not-found]
        from megatron.core.distributed import finalize_model_grads
        from megatron.core.enums import ModelType
        from megatron.core.pipeline_parallel import get_forward_backward_func
        from megatron.core.rerun_state_machine import initialize_rerun_state_machine
        from megatron.core.utils import get_model_config
        from megatron.training import arguments, initialize, training
        from megatron.training.arguments import parse_and_validate_args

        arguments.get_device_arch_version = lambda: 9
        sys.argv = ["pretrain_gpt.py", *megatron_argv(opts)]
        args = parse_and_validate_args(args_defaults={"tokenizer_type": "GPT2BPETokenizer"})
        initialize_rerun_state_machine()
        torch.distributed.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
        initialize_model_parallel(args)
        torch.cuda.manual_seed = lambda seed: torch.manual_seed(seed)
        initialize._set_random_seed(args.seed, args.data_parallel_random_init, args.te_rng_tracker,
                                    args.inference_rng_tracker)
        with probe.profiler:
            probe.phase("build model+optimizer")
            model_provider = partial(pretrain_gpt.model_provider, pretrain_gpt.gpt_builder)
            model, optimizer, scheduler = training.setup_model_and_optimizer(model_provider,
                                                                             ModelType.encoder_or_decoder)
            params = sum(p.numel() * p.element_size() for chunk in model for p in chunk.parameters())
            config = get_model_config(model[0])
            config.grad_scale_func = optimizer.scale_loss
            config.finalize_model_grads_func = finalize_model_grads
            for chunk in model:
                chunk.train()
            data = batches(args)
            current = {"iteration": 0}

            def marked(owner, name: str, label: str) -> None:
                inner = getattr(owner, name)

                def wrapper(*a, **k):
                    probe.phase(f"iter {current['iteration']} {label}")
                    result = inner(*a, **k)
                    probe.phase(f"iter {current['iteration']} after {label}")
                    return result

                setattr(owner, name, wrapper)

            marked(optimizer, "step", "optimizer.step")
            marked(optimizer, "prepare_grads", "prepare_grads")
            marked(optimizer, "clip_grad_norm", "clip_grad_norm")
            for part in getattr(optimizer, "chained_optimizers", [optimizer]):
                marked(part.optimizer, "step", "torch AdamW step")
                marked(part, "_copy_main_params_to_model_params", "copy main->model params")
            for iteration in range(1, opts.iters + 1):
                current["iteration"] = iteration
                probe.phase(f"iter {iteration} forward+backward")
                training.train_step(pretrain_gpt.forward_step, data, model, optimizer, scheduler, config,
                                    get_forward_backward_func(), iteration=iteration - 1)
            if opts.save:
                from megatron.training import checkpointing

                current["iteration"] = "save"
                marked(checkpointing, "generate_state_dict", "generate_state_dict")
                probe.phase("save_checkpoint")
                checkpointing.save_checkpoint(opts.iters, model, optimizer, scheduler, 0)
            probe.phase("end")
    dtype = "bf16" if opts.bf16 else "fp32"
    gib = 2 ** 30
    print(f"{dtype}, fast ops {os.environ.get('MEGATRON_LAUNCH_FAST_OPS', 'default (all)')}, hidden {opts.hidden}, "
          f"heads {opts.heads}, seq {opts.seq}, layers {opts.layers}, vocab {opts.vocab}: "
          f"parameter bytes P = {params / gib:.4f} GiB")
    print(f"{'phase':42} {'live at start':>13} {'peak':>9} {'peak-start':>10} {'live at end':>11}")
    for name, base, peak, end, at_peak in probe.rows(opts.top):
        print(f"{name:42} {base / params:12.2f}P {peak / params:8.2f}P {(peak - base) / params:9.2f}P "
              f"{end / params:10.2f}P")
        for size, chain in at_peak:
            print(f"    {size / params:6.3f}P made by {chain or '(outside any op)'}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--max-pos", type=int, default=0, help="max position embeddings (default: --seq)")
    parser.add_argument("--query-groups", type=int, default=0, help="GQA/MQA: key/value heads (default: --heads)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--iters", type=int, default=2)
    parser.add_argument("--fast-ops", default=None, help="MEGATRON_LAUNCH_FAST_OPS (default: all)")
    parser.add_argument("--save", metavar="DIR", help="then save a checkpoint there as the job does (torch_dist)")
    parser.add_argument("--stacks", action="store_true", help="name the Python frames that made each block")
    parser.add_argument("--top", type=int, default=0,
                        help="list each phase's N largest blocks made in it and alive at its peak")
    parser.add_argument("extra", nargs="*", help="more Megatron flags (after --)")
    opts = parser.parse_args()
    try:
        return run(opts)
    except Exception:  # noqa: BLE001 - a measurement tool: show where it failed
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
