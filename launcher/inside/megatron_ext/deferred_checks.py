"""Megatron's fatal NaN/Inf checks without a host-device synchronisation in every step.

With ``--rerun-mode disabled`` Megatron's ``validate_result`` evaluates ``torch.isnan(loss)`` (and isinf, and the
same on each gradient bucket's norm) on the host: each check waits for the GPU to finish the step so far, and the
GPU then idles while the host queues the next kernels (two of them sit between forward and backward). Here the
verdicts stay on the GPU: one step's flags are stacked, copied to pinned host memory behind an event, and read
when the event has passed, at the latest ``MAX_LAG`` steps later (by then the GPU has long finished them, so the
wait costs nothing). A rejected result still stops the run with Megatron's own message and the iteration it came
from, and every checkpoint save and the end of training read all pending verdicts first, so no checkpoint is
written after a NaN that this check would have caught.

Only the fatal isnan/isinf checks of ``--rerun-mode disabled`` on CUDA tensors are deferred; every other check
(spiky loss, large gradients, the rerun modes that re-run a step) takes Megatron's own path.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch

MAX_LAG = 2  # steps a verdict may trail the step it judges


@dataclass
class _Step:
    iteration: int
    flags: list[torch.Tensor] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)


@dataclass
class _InFlight:
    iteration: int
    host_flags: torch.Tensor
    event: Any  # a torch.cuda.Event; None for flags already on the host
    messages: list[str]


class DeferredVerdicts:
    """The open step's device flags and the closed steps whose flags are on their way to the host."""

    def __init__(self) -> None:
        self.open: _Step | None = None
        self.in_flight: deque[_InFlight] = deque()

    def add(self, iteration: int, rejected: torch.Tensor, message: str) -> None:
        if self.open is not None and self.open.iteration != iteration:
            self._close()
        if self.open is None:
            self.open = _Step(iteration)
        self.open.flags.append(rejected.detach().reshape(()).to(torch.bool))
        self.open.messages.append(message)
        self.poll(iteration)

    def _close(self) -> None:
        step, self.open = self.open, None
        if step is None or not step.flags:
            return
        flags = torch.stack(step.flags)
        event = None
        if flags.is_cuda:
            host = torch.empty(flags.shape, dtype=torch.bool, device="cpu", pin_memory=True)
            host.copy_(flags, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
        else:
            host = flags
        self.in_flight.append(_InFlight(step.iteration, host, event, step.messages))

    def poll(self, iteration: int | None = None) -> None:
        """Read the verdicts that have arrived; wait for those MAX_LAG steps old (None: wait for all)."""
        while self.in_flight:
            oldest = self.in_flight[0]
            if oldest.event is not None and not oldest.event.query():
                if iteration is not None and iteration - oldest.iteration < MAX_LAG:
                    return
                oldest.event.synchronize()
            self.in_flight.popleft()
            rejected = [m for m, bad in zip(oldest.messages, oldest.host_flags.tolist()) if bad]
            if rejected:
                self.in_flight.clear()
                raise RuntimeError(_megatron_message(oldest.iteration, rejected[0]))

    def drain(self) -> None:
        """Every pending verdict read now (before a save, at the end of training)."""
        self._close()
        self.poll(None)


def _megatron_message(iteration: int, message: str) -> str:
    """Megatron's own wording for a rejected result in disabled mode (rerun_state_machine.py:528)."""
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
    return (f"Rank {rank}, node {os.uname()[1]}, device {device}, iteration {iteration + 1}: "
            f"Unexpected result (message='{message}') [read back without a per-step sync by megatron-launch]")


VERDICTS = DeferredVerdicts()


def deferrable(machine: Any, result: Any, rejection_func: Any, fatal: bool) -> bool:
    from megatron.core.rerun_state_machine import RerunMode

    return (fatal and machine.mode == RerunMode.DISABLED and rejection_func in (torch.isnan, torch.isinf)
            and isinstance(result, torch.Tensor) and result.is_cuda and result.numel() == 1)


def install() -> bool:
    """Patch Megatron's rerun state machine and the training loop's save and end; False where already done."""
    from megatron.core.rerun_state_machine import RerunStateMachine

    upstream = RerunStateMachine.validate_result
    if getattr(upstream, "_megatron_launch_deferred", False):
        return False

    def validate_result(self, result, rejection_func, message, comparison_func=None, tolerance=0.0,
                        fatal=True):
        if not deferrable(self, result, rejection_func, fatal):
            return upstream(self, result, rejection_func, message, comparison_func, tolerance, fatal)
        VERDICTS.add(self.current_iteration, rejection_func(result), message)

    validate_result._megatron_launch_deferred = True
    RerunStateMachine.validate_result = validate_result
    _drain_before_saves_and_at_end()
    return True


def _drain_before_saves_and_at_end() -> None:
    try:
        from megatron.training import training
    except ImportError:  # megatron-core alone: no training loop
        return

    def draining(function):
        def wrapper(*args, **kwargs):
            VERDICTS.drain()
            return function(*args, **kwargs)

        wrapper.__wrapped__ = function
        return wrapper

    for name in ("save_checkpoint", "save_checkpoint_and_time"):
        if hasattr(training, name):
            setattr(training, name, draining(getattr(training, name)))
    upstream_train = training.train

    def train(*args, **kwargs):
        result = upstream_train(*args, **kwargs)
        VERDICTS.drain()
        return result

    training.train = train
