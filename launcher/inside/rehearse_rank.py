"""One rank of the multi-rank CPU rehearsal (launcher/checks/rehearsal_ranks.py): started by torchrun as the job's
pretrain_gpt.py would be, with the job's (shrunk) Megatron flags, over gloo on the CPU.

It does what pretrain() does up to its first checkpoint, through Megatron's own functions: parse_and_validate_args,
the model-parallel groups, setup_model_and_optimizer (which loads --load when given), train_step for the steps
asked, save_checkpoint in the job's format. Each rank writes its answer to $MEGATRON_LAUNCH_REHEARSE_OUT/rank-N.json:

    {"rank": 0, "ok": true, "stage": "done", "facts": {"loss": [10.9, 10.8], "params_norm": 12.3, ...}}
    {"rank": 3, "ok": false, "stage": "step", "error": "AssertionError: ...", "where": "file.py:12", "time": ...}

and a rank that fails exits 1 at once, so that torchrun stops the others. CUDA is redirected to the CPU as in the
one-process rehearsal (rehearse_worker.CudaOnCpu).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
import traceback
from pathlib import Path

OUT_ENV, MODE_ENV, STEPS_ENV = "MEGATRON_LAUNCH_REHEARSE_OUT", "MEGATRON_LAUNCH_REHEARSE_MODE", \
    "MEGATRON_LAUNCH_REHEARSE_STEPS"


def _write(out: Path, rank: int, answer: dict) -> None:
    path = out / f"rank-{rank}.json"
    path.with_suffix(".tmp").write_text(json.dumps(answer))
    path.with_suffix(".tmp").replace(path)


def batches(args):
    """What the mock dataset yields, per micro batch: random tokens, other ones on each data-parallel rank (the
    tensor-parallel ranks of one replica read the same: Megatron broadcasts its first rank's)."""
    import torch
    from megatron.core import parallel_state

    generator = torch.Generator().manual_seed(args.seed + parallel_state.get_data_parallel_rank())
    b, s = args.micro_batch_size, args.seq_length
    while True:
        tokens = torch.randint(0, args.padded_vocab_size, (b, s + 1), generator=generator)
        batch = {"tokens": tokens[:, :-1].contiguous(), "labels": tokens[:, 1:].contiguous(),
                 "loss_mask": torch.ones(b, s), "position_ids": torch.arange(s).expand(b, s).contiguous()}
        if args.create_attention_mask_in_dataloader:
            batch["attention_mask"] = torch.ones(b, 1, s, s, dtype=torch.bool).triu(1)
        yield batch


class Stages:
    """The stage a rank is in (its failure names it) and the seconds each took (facts["seconds"])."""

    def __init__(self, facts: dict):
        self.now, self.since, self.cpu, self.facts = "import", time.monotonic(), time.process_time(), facts
        facts["seconds"], facts["cpu_seconds"] = {}, {}
        facts["stage"] = self

    def enter(self, name: str) -> None:
        self.facts["seconds"][self.now] = round(time.monotonic() - self.since, 2)
        self.facts["cpu_seconds"][self.now] = round(time.process_time() - self.cpu, 2)
        self.now, self.since, self.cpu = name, time.monotonic(), time.process_time()


NORM_SP_ENV = "MEGATRON_LAUNCH_REHEARSE_NORM_SP"


class _WithoutSequenceParallel:
    """A config as torch's LayerNorm fallback accepts it: sequence parallelism off, the rest as given."""

    def __init__(self, config):
        self._config = config

    def __getattr__(self, name):
        return False if name == "sequence_parallel" else getattr(self._config, name)


def norm_standing_in_for_the_targets() -> None:
    """The target's norm (Transformer Engine's or apex's) splits the sequence across TP; torch's fallback, the only
    one here, asserts against it. The same LayerNorm then, its weights marked sequence-parallel as apex's are,
    so that finalize_model_grads sums their gradients across TP as on the target."""
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    original = WrappedTorchNorm.__new__

    def new(cls, config, hidden_size, eps=1e-5, *args, **kwargs):
        norm = original(cls, _WithoutSequenceParallel(config), hidden_size, eps, *args, **kwargs)
        for param in norm.parameters():
            param.sequence_parallel = bool(config.sequence_parallel)
        return norm

    WrappedTorchNorm.__new__ = new


def params_norm(model: list) -> float:
    """Megatron's parameter norm (calc_params_l2_norm), with the expert weights summed as expert ones at EP 1 too.
    Megatron marks them so (`allreduce` false) only at EP > 1 (tensor_parallel/layers.py:849, 914, 1196, 1264); at
    EP 1 it sums them with the dense weights over TP (training/utils/common_utils.py:102-115, 175-195), so under an
    expert TP below TP, where each TP rank holds the same experts, it counts them once per TP rank, and a correct
    load at another TP reads as different weights."""
    from megatron.training.utils import calc_params_l2_norm

    marked = [param for chunk in model for name, param in chunk.named_parameters()
              if ".experts." in f".{name}" and getattr(param, "allreduce", True)]
    for param in marked:
        param.allreduce = False
    try:
        return float(calc_params_l2_norm(model, force_create_fp32_copy=True))
    finally:
        for param in marked:
            param.allreduce = True


def rehearse(argv: list[str], mode: str, steps: int, facts: dict) -> str:
    """Run the rank; returns the stage reached ("done"), recording facts as it goes; raises on failure."""
    stage = Stages(facts)
    from functools import partial

    import torch

    from launcher.inside.rehearse_worker import CudaOnCpu, initialize_model_parallel

    with CudaOnCpu():
        import pretrain_gpt  # type: ignore[import-not-found]  # the checkout's model provider and forward_step
        from megatron.core import parallel_state
        from megatron.core.distributed import finalize_model_grads
        from megatron.core.enums import ModelType
        from megatron.core.num_microbatches_calculator import get_num_microbatches
        from megatron.core.pipeline_parallel import get_forward_backward_func
        from megatron.core.rerun_state_machine import initialize_rerun_state_machine
        from megatron.core.utils import get_model_config
        from megatron.training import arguments, checkpointing, initialize, training
        from megatron.training.arguments import parse_and_validate_args

        if os.environ.get(NORM_SP_ENV) == "1":
            norm_standing_in_for_the_targets()
        arguments.get_device_arch_version = lambda: 9  # the target's GPU (Hopper), as --check assumes it
        stage.enter("args")
        sys.argv = ["pretrain_gpt.py", *argv]
        extra = pretrain_gpt.add_modelopt_args if pretrain_gpt.has_nvidia_modelopt else None
        args = parse_and_validate_args(extra_args_provider=extra,
                                       args_defaults={"tokenizer_type": "GPT2BPETokenizer"})
        initialize_rerun_state_machine()
        stage.enter("init")
        torch.distributed.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
        initialize_model_parallel(args)
        facts["ranks"] = {"tp": parallel_state.get_tensor_model_parallel_rank(),
                          "pp": parallel_state.get_pipeline_model_parallel_rank(),
                          "dp": parallel_state.get_data_parallel_rank()}
        # Megatron's own seeding; "the GPU's" generator states it tracks (and saves) are the CPU generator's
        torch.cuda.manual_seed = lambda seed: torch.manual_seed(seed)
        initialize._set_random_seed(args.seed, args.data_parallel_random_init, args.te_rng_tracker,
                                    args.inference_rng_tracker)
        stage.enter("model")
        model_provider = partial(pretrain_gpt.model_provider, pretrain_gpt.gpt_builder)
        model, optimizer, scheduler = training.setup_model_and_optimizer(model_provider,
                                                                         ModelType.encoder_or_decoder)
        facts["parameters"] = sum(p.numel() for chunk in model for p in chunk.parameters())
        facts["chunks"] = len(model)
        facts["decoder_layers"] = decoder_layers(model)
        if mode == "load":
            facts["iteration_loaded"] = args.iteration
            facts["params_norm"] = params_norm(model)
        stage.enter("step")
        model_config = get_model_config(model[0])
        model_config.grad_scale_func = optimizer.scale_loss
        model_config.finalize_model_grads_func = finalize_model_grads
        if args.overlap_grad_reduce:
            model_config.no_sync_func = [chunk.no_sync for chunk in model] if len(model) > 1 else model[0].no_sync
        if args.overlap_param_gather and args.align_param_gather:
            model_config.param_sync_func = [chunk.start_param_sync for chunk in model] if len(model) > 1 \
                else model[0].start_param_sync
        for chunk in model:
            chunk.train()
        data = [batches(args) for _ in model] if len(model) > 1 else batches(args)
        losses, skipped = [], []
        for iteration in range(args.iteration, args.iteration + steps):
            result = training.train_step(pretrain_gpt.forward_step, data, model, optimizer, scheduler,
                                         model_config, get_forward_backward_func(), iteration=iteration)
            loss = result[0].get("lm loss") if result and isinstance(result[0], dict) else None
            losses.append(float(loss) if loss is not None else None)
            if result[1]:
                if not (args.fp16 and args.loss_scale is None):
                    raise RuntimeError(f"step {iteration + 1} was skipped (the optimizer found inf/nan gradients)")
                # fp16's dynamic loss scale starts at 2^32 and halves on each overflow: its first steps are
                # skipped on the GPU too (the found-inf all-reduce across the model-parallel group ran)
                skipped.append(iteration + 1)
            args.iteration = iteration + 1
            args.consumed_train_samples += args.global_batch_size
        facts["loss"] = losses
        facts["skipped_steps"] = skipped
        facts["num_microbatches"] = get_num_microbatches()
        if mode == "train":
            facts["params_norm"] = params_norm(model)
            stage.enter("save")
            checkpointing.save_checkpoint(args.iteration, model, optimizer, scheduler, 0)
            torch.distributed.barrier()
        stage.enter("done")
    return "done"


def main() -> int:
    from launcher.inside.parent_death import die_with_parent

    die_with_parent(os.getppid())  # torchrun: a rank outlives neither it nor, through it, the rehearsal
    out = Path(os.environ[OUT_ENV])
    mode = os.environ.get(MODE_ENV, "train")
    steps = int(os.environ.get(STEPS_ENV, "2"))
    rank = int(os.environ.get("RANK", "0"))
    start = time.monotonic()
    facts: dict = {}
    try:
        rehearse(sys.argv[1:], mode, steps, facts)
    except BaseException as exc:  # noqa: BLE001 - any failure is this rank's answer
        from launcher.inside.rehearse_worker import _message

        error, where = _message(exc) if not isinstance(exc, SystemExit) else (f"Megatron called exit({exc.code})",
                                                                                 "")
        stage = getattr(facts.pop("stage", None), "now", "start")
        _write(out, rank, {"rank": rank, "ok": False, "stage": stage, "error": error, "where": where,
                           "time": time.time(), "facts": facts, "seconds": round(time.monotonic() - start, 2),
                           "traceback": traceback.format_exc()[-4000:]})
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # at once: torchrun then stops the other ranks, which may wait in a collective
    facts.pop("stage", None)
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the checkpoint writers' processes
    facts["children_cpu_seconds"] = round(children.ru_utime + children.ru_stime, 2)
    _write(out, rank, {"rank": rank, "ok": True, "stage": "done", "error": "", "where": "", "facts": facts,
                       "seconds": round(time.monotonic() - start, 2)})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # every rank is past the last barrier; tearing down torch and Megatron costs seconds of CPU each


def decoder_layers(model: list) -> list[int] | None:
    """The decoder layers each model chunk of this rank built (the pipeline split as Megatron made it)."""
    from megatron.core.utils import get_attr_wrapped_model

    try:
        return [len(get_attr_wrapped_model(chunk, "decoder").layers) for chunk in model]
    except (AttributeError, RuntimeError):
        return None


if __name__ == "__main__":  # the checkpoint save starts helper processes that import this file again
    sys.exit(main())

