"""Where a checkpoint save spends the training loop's time: one line per save, phase by phase.

Megatron's ``save-checkpoint`` timer says how long the loop stood still for a save, not why. With
``MEGATRON_LAUNCH_SAVE_PHASES=1`` in the ranks' environment, the steps that Megatron's save runs on the training
thread are timed and rank 0 prints, after each save::

    > megatron-launch save phases, iteration 10: 3.214 s = rng 0.001 + state dict 0.105 + dist save 1.402
      (preprocess 0.301, common 0.012, parallelize 0.210, to torch 0.402, plan 0.301, prepare write 0.050) +
      hand-off to the writer 1.650 + other 0.056

and, when the background write of that save has been finalised on the training thread, how long after the save
began the checkpoint was complete on storage (at the resolution of the loop's per-iteration poll) and how long the
finalisation itself held the loop. Times only; nothing about the save changes.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

SAVE_PHASES_ENV = "MEGATRON_LAUNCH_SAVE_PHASES"
END_WAIT = ", the end of training waited for the write"

# (module, attribute, phase): what is timed. Nested phases are printed inside their parent.
_TOP = ("empty cache", "rng", "state dict", "dist save", "hand-off to the writer")
_INNER = ("preprocess", "common", "parallelize", "to torch", "plan", "prepare write")
_HANDOFF = ("wait for the previous write", "copy to host")


class Phases:
    def __init__(self) -> None:
        self.times: dict[str, float] = defaultdict(float)
        self.active = False
        self.started: dict[int, float] = {}  # iteration → wall clock at the start of its save
        self.finalize_s = 0.0

    def line(self, iteration: int, total: float) -> str:
        t = self.times
        inner = {"dist save": ", ".join(f"{name} {t[name]:.3f}" for name in _INNER if name in t),
                 "hand-off to the writer": ", ".join(f"{name} {t[name]:.3f}" for name in _HANDOFF if name in t)}
        parts = []
        for name in _TOP:
            if name in t:
                parts.append(f"{name} {t[name]:.3f}" + (f" ({inner[name]})" if inner.get(name) else ""))
        other = total - sum(t[name] for name in _TOP if name in t)
        return (f"> megatron-launch save phases, iteration {iteration}: {total:.3f} s = " + " + ".join(parts)
                + f" + other {other:.3f}")


PHASES = Phases()


def _print0(text: str) -> None:
    import torch

    if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
        print(text, flush=True)


def timed(function: Callable[..., Any], phase: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not PHASES.active:
            return function(*args, **kwargs)
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            PHASES.times[phase] += time.perf_counter() - start

    wrapper.__wrapped__ = function
    wrapper._megatron_launch_phase = phase
    return wrapper


def _patch(owner: Any, name: str, phase: str) -> None:
    function = getattr(owner, name, None)
    if function is None or getattr(function, "_megatron_launch_phase", None):
        return
    setattr(owner, name, timed(function, phase))


def install() -> bool:
    """Wrap the steps of Megatron's save (and its finalisation) with timers; False where already done."""
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import serialization
    from megatron.core.dist_checkpointing.strategies import filesystem_async, fully_parallel, state_dict_saver
    from megatron.core.dist_checkpointing.strategies import torch as torch_strategy
    from megatron.training import checkpointing, training

    if getattr(training.save_checkpoint_and_time, "_megatron_launch_phases", False):
        return False
    import torch

    _patch(torch.cuda, "empty_cache", "empty cache")  # save_checkpoint_and_time frees the cached GPU memory
    _patch(checkpointing, "get_rng_state", "rng")
    _patch(checkpointing, "generate_state_dict", "state dict")
    _patch(dist_checkpointing, "save", "dist save")
    _patch(checkpointing, "schedule_async_save", "hand-off to the writer")
    _patch(serialization, "save_preprocess", "preprocess")
    _patch(serialization, "save_common", "common")
    _patch(fully_parallel.FullyParallelSaveStrategyWrapper, "apply_saving_parallelization", "parallelize")
    _patch(torch_strategy, "mcore_to_pyt_state_dict", "to torch")
    _patch(state_dict_saver, "save_state_dict_async_plan", "plan")
    _patch(filesystem_async.FileSystemWriterAsync, "prepare_write_data", "prepare write")
    from launcher.inside.megatron_ext import staged_save  # the fast op's hand-off, where it is applied

    _patch(staged_save, "wait_for_writer", "wait for the previous write")
    _patch(staged_save.HostStage, "stage", "copy to host")

    upstream_save = training.save_checkpoint_and_time

    def save_checkpoint_and_time(iteration, *args, **kwargs):
        PHASES.times.clear()
        PHASES.active = True
        PHASES.started[int(iteration)] = time.time()
        start = time.perf_counter()
        try:
            return upstream_save(iteration, *args, **kwargs)
        finally:
            PHASES.active = False
            _print0(PHASES.line(int(iteration), time.perf_counter() - start))

    save_checkpoint_and_time._megatron_launch_phases = True
    save_checkpoint_and_time.__wrapped__ = upstream_save
    training.save_checkpoint_and_time = save_checkpoint_and_time

    upstream_finalize = training.maybe_finalize_async_save

    def maybe_finalize_async_save(*args, **kwargs):
        from megatron.training import async_utils

        queue = async_utils._async_calls_queue
        pending = queue.get_num_unfinalized_calls() if queue is not None else 0
        start = time.perf_counter()
        result = upstream_finalize(*args, **kwargs)
        spent = time.perf_counter() - start
        left = queue.get_num_unfinalized_calls() if queue is not None else 0
        if pending and left < pending:
            finished = sorted(PHASES.started)[: pending - left]
            for iteration in finished:
                began = PHASES.started.pop(iteration)
                _print0(f"> megatron-launch save of iteration {iteration} complete on storage "
                        f"{time.time() - began:.2f} s after it began (finalised on the training thread in "
                        f"{spent:.3f} s{END_WAIT if kwargs.get('blocking') else ''})")
        return result

    training.maybe_finalize_async_save = maybe_finalize_async_save
    return True


def install_from_environment() -> bool:
    return os.environ.get(SAVE_PHASES_ENV, "") not in ("", "0") and install()
