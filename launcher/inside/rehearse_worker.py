"""Rehearse a job on the CPU: build its model and optimizer through pretrain_gpt.py's own model provider and spec,
at the tiny size the launcher gives (launcher/checks/rehearsal.py), and run one training step.

This file runs inside the *Megatron* interpreter (megatron-core + torch), as a plain script, with the Megatron-LM
checkout (pretrain_gpt.py, gpt_builders.py, model_provider.py) and the launcher's root on PYTHONPATH. One process
serves many requests (importing Megatron takes seconds, a rehearsal well under one), one JSON line each:

    request  (stdin):  {"argv": [...Megatron flags...], "env": {...}}
    response (stdout): {"ok": false, "stage": "model", "error": "AssertionError: ...", "where": "file.py:12",
                        "seconds": 0.4, "facts": {"parameters": 123456, "loss": 4.8}}

Stages: "args" (parse_and_validate_args, as pretrain_gpt.py calls it), "init" (the model-parallel groups, as
Megatron's initialisation makes them), "model" (setup_model_and_optimizer's model:
get_model → model_provider → gpt_builder with the job's --spec), "optimizer" (its optimizer and LR scheduler),
"step" (Megatron's train_step: forward, backward, finalize grads, optimizer step). On a CPU, CUDA tensors are
redirected to the CPU (shared/reference/megatron-core-on-cpu.md; tensors also name their type as CUDA's,
which Megatron's optimizer and gradient clipping check), torch.compile runs with aot_eager (the same
graphs, no kernels generated), one process plays a world of one.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import traceback

READY = "megatron-rehearse-worker ready"
ANNOUNCED = "> megatron-launch compiled layers: "  # compiled_layer.announce


def _message(exc: BaseException) -> tuple[str, str]:
    """(Megatron's message, where it was raised: the innermost frame in megatron/ or the launcher's code)."""
    text = " ".join(str(exc).split())
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f"{os.sep}megatron{os.sep}" in f.filename or "megatron_ext" in f.filename]
    frame = (ours or frames)[-1] if (ours or frames) else None
    where = f"{os.path.basename(frame.filename)}:{frame.lineno}" if frame else ""
    if not text and frame is not None:
        text = (frame.line or "").strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__, where


class _Stream:
    """A CUDA stream on the CPU, where everything runs in order anyway."""

    def __init__(self, *_args, **_kwargs):
        pass

    def wait_stream(self, *_args):
        return None

    def wait_event(self, *_args):
        return None

    def record_event(self, *_args):
        return _Event()

    def synchronize(self):
        return None


class _Event(_Stream):
    def record(self, *_args):
        return None

    def wait(self, *_args):  # the MoE all-to-all overlap waits on its events (moe utils.py:291)
        return None

    def query(self):
        return True


def uneven_all_gather(all_gather):
    """torch.distributed.all_gather that also gathers tensors of different lengths over gloo, as NCCL does (gloo
    refuses them: 'ProcessGroupGloo::allgather: invalid tensor size'): each rank's padded to the longest, gathered,
    and its rows copied into the caller's tensors. Megatron's all-to-all dispatcher at expert TP > 1 gathers the
    tokens each expert-TP rank received (mappings.py:150, output_split_sizes)."""
    import torch

    def gather(tensor_list, tensor, group=None, async_op=False):
        if all(t.shape == tensor.shape for t in tensor_list):
            return all_gather(tensor_list, tensor, group=group, async_op=async_op)
        longest = max(t.shape[0] for t in tensor_list)
        padded = torch.zeros((longest, *tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)
        padded[:tensor.shape[0]] = tensor
        gathered = [torch.empty_like(padded) for _ in tensor_list]
        all_gather(gathered, padded, group=group)
        for out, got in zip(tensor_list, gathered):
            out.copy_(got[:out.shape[0]])
        return _Event() if async_op else None  # done already: wait() returns at once

    return gather


class CudaOnCpu:
    """The ~15-line redirect of shared/reference/megatron-core-on-cpu.md: CUDA devices become the CPU."""

    def __init__(self):
        import torch
        from torch.overrides import TorchFunctionMode

        def to_cpu(device):
            if isinstance(device, int) or (isinstance(device, str) and device.startswith("cuda")) or \
                    (isinstance(device, torch.device) and device.type == "cuda"):
                return torch.device("cpu")
            return device

        class Redirect(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = dict(kwargs or {})
                if "device" in kwargs:
                    kwargs["device"] = to_cpu(kwargs["device"])
                if func is torch.Tensor.cuda:
                    return args[0]
                if func is torch.Tensor.type and len(args) == 1 and not kwargs:
                    # Megatron's optimizers check type() == 'torch.cuda.FloatTensor' and the like
                    name = func(*args)
                    return name if ".cuda." in name else name.replace("torch.", "torch.cuda.", 1)
                if func is torch.Tensor.to:
                    args = tuple(to_cpu(a) if isinstance(a, (str, torch.device)) else a for a in args)
                return func(*args, **kwargs)

        self.torch, self.mode = torch, Redirect()
        # one function object per name: torch.compile's rule table refuses one object under two torch names
        self.stand_ins = {"current_device": lambda: "cpu", "synchronize": lambda *a, **k: None,
                          # the target's GPU (Hopper), as --check answers it; RNG states are the CPU's
                          "get_device_capability": lambda *a, **k: (9, 0),
                          "get_rng_state": lambda *a, **k: torch.get_rng_state(),
                          "set_rng_state": lambda state, *a, **k: torch.set_rng_state(state),
                          "set_device": lambda *a, **k: None, "device_count": lambda: 1, "Stream": _Stream,
                          "Event": _Event,
                          "current_stream": lambda *a, **k: _Stream(), "stream": lambda *a: contextlib.nullcontext()}
        self.saved = {name: getattr(torch.cuda, name) for name in self.stand_ins}

        # functions that read the GPU's state, copy from it or keep its memory alive, by (owner, name)
        from megatron.core.tensor_parallel import random as tp_random
        from megatron.core.transformer.moe import token_dispatcher

        def host_copy(tensor, as_numpy=False, record_stream=False):
            # the all-to-all dispatcher's split sizes copied "to the host": numpy arrays there, as on a GPU (a CPU
            # tensor would stay a tensor, which all_to_all_single refuses as split sizes)
            return tensor.numpy() if as_numpy and torch.is_tensor(tensor) else tensor

        self.module_stand_ins = {
            # activation recomputation saves and restores "the GPU's" RNG state: the CPU generator's here
            (tp_random, "_get_cuda_rng_state"): lambda *a, **k: torch.get_rng_state(),
            (tp_random, "_set_cuda_rng_state"): lambda state, *a, **k: torch.set_rng_state(state),
            (token_dispatcher, "maybe_move_tensor_to_cpu"): host_copy,
            # a stand-in stream, which torch's argument parser refuses before any mode sees it; nothing to keep
            # alive on the CPU (pipeline_parallel/utils.py:230, the MoE all-to-all overlap)
            (torch.Tensor, "record_stream"): lambda self, *a, **k: None,
            # gloo gathers only tensors of one length; NCCL, and so Megatron, gathers any
            (torch.distributed, "all_gather"): uneven_all_gather(torch.distributed.all_gather)}
        self.module_saved = {key: getattr(*key) for key in self.module_stand_ins}

    def __enter__(self):
        for name, value in self.stand_ins.items():
            setattr(self.torch.cuda, name, value)
        for (module, name), value in self.module_stand_ins.items():
            setattr(module, name, value)
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)
        for name, value in self.saved.items():
            setattr(self.torch.cuda, name, value)
        for (module, name), value in self.module_saved.items():
            setattr(module, name, value)


def _setup():
    """Import Megatron, pretrain_gpt.py and its builder once; a process group of one over gloo."""
    import argparse

    import torch

    def raise_parse_error(_parser, message):
        raise ValueError(f"argparse: {message}")

    argparse.ArgumentParser.error = raise_parse_error
    os.environ.setdefault("MEGATRON_LAUNCH_COMPILE_BACKEND", "aot_eager")
    os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"})
    import pretrain_gpt  # type: ignore[import-not-found]  # the checkout's: forward_step, and through it gpt_builder and model_provider

    from launcher.inside.megatron_state import Snapshot

    if not torch.distributed.is_initialized():  # an in-memory store: no port that two workers could share
        torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
    return pretrain_gpt, Snapshot(MEGATRON_MODULES)


# Megatron's modules and the checkout's scripts: their globals and class attributes are a job's state.
MEGATRON_MODULES = ("megatron.", "pretrain_gpt", "gpt_builders", "model_provider")
# Built from the job's arguments at import (the spec), or holding its classes (the compiled layer checks them).
JOB_MODULES = ("launcher.inside.megatron_ext.sdpa_spec", "launcher.inside.megatron_ext.compiled_layer")


def _destroy_subgroups():
    """Every process group but the world's: destroy_model_parallel only forgets Megatron's, and each gloo group
    keeps its threads and sockets (thousands after a hundred rehearsals)."""
    import gc

    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    gc.collect()  # the last job's model, DDP buffers and optimizer hold groups too
    world = dist.group.WORLD
    for group in list(distributed_c10d._world.pg_map):
        if group is not world:
            with contextlib.suppress(Exception):
                dist.destroy_process_group(group)


def _reset(snapshot):
    """Megatron's process-wide state back to what it was before the first job, so the next request starts as in a
    fresh process: Megatron's own destroy functions (they release what they hold: groups, buffers), then every
    module-level and class-level value of Megatron's modules put back (megatron_state.Snapshot: the MoE and MTP
    loss trackers and the like, which no destroy function forgets)."""
    from megatron.core import parallel_state
    from megatron.core.num_microbatches_calculator import destroy_num_microbatches_calculator
    from megatron.training import global_vars

    global_vars.destroy_global_vars()
    destroy_num_microbatches_calculator()
    parallel_state.destroy_model_parallel()
    _destroy_subgroups()
    with contextlib.suppress(Exception):
        from megatron.core.rerun_state_machine import destroy_rerun_state_machine

        destroy_rerun_state_machine()
    import torch

    torch._dynamo.reset()  # each job compiles as in its own process (and no recompile limit builds up across jobs)
    for name in [m for m in sys.modules if m.startswith(JOB_MODULES)]:
        # Megatron imports --spec once per process; each job builds its own (the package keeps the submodule
        # as an attribute, which `from package import sdpa_spec` would take without importing it again)
        del sys.modules[name]
        parent, _, child = name.rpartition(".")
        if parent in sys.modules and hasattr(sys.modules[parent], child):
            delattr(sys.modules[parent], child)
    snapshot.restore()  # also transformer_block.LayerNormImpl, which the SDPA spec swaps (sdpa_spec.py)


def _batches(args):
    """What pretrain_gpt.py's mock dataset yields, per micro batch: random tokens."""
    import torch

    b, s = args.micro_batch_size, args.seq_length
    while True:
        tokens = torch.randint(0, args.padded_vocab_size, (b, s + 1))
        batch = {"tokens": tokens[:, :-1].contiguous(), "labels": tokens[:, 1:].contiguous(),
                 "loss_mask": torch.ones(b, s), "position_ids": torch.arange(s).expand(b, s).contiguous()}
        if args.create_attention_mask_in_dataloader:
            batch["attention_mask"] = torch.ones(b, 1, s, s, dtype=torch.bool).triu(1)
        yield batch


def initialize_model_parallel(args) -> None:
    """Megatron's process groups for the job's layout, as initialize._initialize_distributed creates them."""
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(
        args.tensor_model_parallel_size, args.pipeline_model_parallel_size,
        args.virtual_pipeline_model_parallel_size, context_parallel_size=args.context_parallel_size,
        hierarchical_context_parallel_sizes=args.hierarchical_context_parallel_sizes,
        expert_model_parallel_size=args.expert_model_parallel_size,
        num_distributed_optimizer_instances=args.num_distributed_optimizer_instances,
        expert_tensor_parallel_size=args.expert_tensor_parallel_size,
        order="tp-cp-ep-dp-pp" if not args.use_tp_pp_dp_mapping else "tp-cp-ep-pp-dp",
        create_gloo_process_groups=args.use_gloo_process_groups)


def rehearse(pretrain_gpt, argv: list[str]) -> dict:
    """One job's model, optimizer and training step; never raises."""
    from functools import partial

    import torch
    from megatron.core import tensor_parallel
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.enums import ModelType
    from megatron.core.num_microbatches_calculator import get_num_microbatches
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.rerun_state_machine import initialize_rerun_state_machine
    from megatron.core.utils import get_model_config
    from megatron.training import training
    from megatron.training.arguments import parse_and_validate_args

    start = time.monotonic()
    stage, facts = "args", {}
    sys.argv = ["pretrain_gpt.py", *argv]
    try:
        with CudaOnCpu():
            # as pretrain_gpt.py's __main__ does: ModelOpt's arguments when they import
            extra = pretrain_gpt.add_modelopt_args if pretrain_gpt.has_nvidia_modelopt else None
            args = parse_and_validate_args(extra_args_provider=extra,
                                           args_defaults={"tokenizer_type": "GPT2BPETokenizer"})
            initialize_rerun_state_machine()
            stage = "init"
            initialize_model_parallel(args)
            torch.manual_seed(args.seed)
            tensor_parallel.random.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
            stage = "model"
            model_provider = partial(pretrain_gpt.model_provider, pretrain_gpt.gpt_builder)
            model = training.get_model(model_provider, ModelType.encoder_or_decoder)
            facts["parameters"] = sum(p.numel() for chunk in model for p in chunk.parameters())
            stage = "optimizer"
            config, overrides = training.get_megatron_optimizer_config(args)
            config.timers = None
            from megatron.core.optimizer import get_megatron_optimizer

            optimizer = get_megatron_optimizer(config, model, config_overrides=overrides,
                                               use_gloo_process_groups=args.use_gloo_process_groups)
            scheduler = training.get_optimizer_param_scheduler(optimizer)
            stage = "step"
            model_config = get_model_config(model[0])
            model_config.grad_scale_func = optimizer.scale_loss
            model_config.finalize_model_grads_func = finalize_model_grads
            if args.overlap_grad_reduce:
                model_config.no_sync_func = model[0].no_sync
            if args.overlap_param_gather and args.align_param_gather:
                model_config.param_sync_func = model[0].start_param_sync
            for chunk in model:
                chunk.train()
            result = training.train_step(pretrain_gpt.forward_step, _batches(args), model, optimizer, scheduler,
                                         model_config, get_forward_backward_func(), iteration=0)
            loss = result[0].get("lm loss") if result and isinstance(result[0], dict) else None
            facts["loss"] = float(loss) if loss is not None else None
            facts["skipped_iteration"] = bool(result[1]) if len(result) > 1 else None
            facts["num_microbatches"] = get_num_microbatches()
            facts["threads"] = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None
        return {"ok": True, "stage": "done", "error": "", "where": "", "facts": facts,
                "seconds": round(time.monotonic() - start, 2)}
    except SystemExit as exc:
        return {"ok": False, "stage": stage, "error": f"Megatron called exit({exc.code})", "where": "",
                "facts": facts, "seconds": round(time.monotonic() - start, 2)}
    except BaseException as exc:  # noqa: BLE001 - any failure is the verdict, not a crash of the worker
        if isinstance(exc, KeyboardInterrupt):
            raise
        error, where = _message(exc)
        return {"ok": False, "stage": stage, "error": error, "where": where, "facts": facts,
                "seconds": round(time.monotonic() - start, 2), "traceback": traceback.format_exc()[-4000:]}


def main() -> int:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # Megatron prints freely: keep the protocol on a private copy of stdout
    sys.stdout = sys.stderr
    try:
        pretrain_gpt, snapshot = _setup()
    except Exception as exc:  # noqa: BLE001
        error, where = _message(exc)
        protocol.write(json.dumps({"fatal": f"cannot import pretrain_gpt.py and Megatron: {error} ({where})"}) + "\n")
        return 1
    import megatron.core

    protocol.write(json.dumps({"ready": READY, "version": megatron.core.__version__,
                               "origin": os.path.dirname(os.path.dirname(megatron.core.__file__))}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        saved_env = dict(os.environ)  # Megatron writes some itself (NVTE_*_ATTN for the attention backend)
        os.environ.update(request.get("env", {}))
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                result = rehearse(pretrain_gpt, request["argv"])
        finally:
            os.environ.clear()
            os.environ.update(saved_env)
            _reset(snapshot)
        log = sink.getvalue()
        said = [line.split(": ", 1)[1] for line in log.splitlines() if line.startswith(ANNOUNCED)]
        result.setdefault("facts", {})["compiled_layers"] = said[-1] if said else None  # the spec's own line
        result["log_tail"] = log[-2000:]
        protocol.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
