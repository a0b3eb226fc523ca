"""Settings with which Megatron at the pin runs to a normal exit while updating less than the job asks: steps at
learning rate 0, iterations it skips, early-exit settings it reads as unset or that stop it after one step, a
conversion run; and the LR scheduler's own asserts that validate_args lets through (a decay length of 0, both
sources of the schedule), which stop the run before its first step.

Each rule takes the value Megatron will see (`arg`), `fail(message, hint, stage)`, `warn(text)`, and the job's
training length in iterations with its (constant) global batch where known. A run that would update nothing is
refused; one that updates less than it says is warned. Judged for a start at iteration 0: a checkpoint at or past
the end is load_rules.nothing_left_to_train's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Arg = Callable[[str], Any]
Fail = Callable[..., None]
Warn = Callable[[str], None]

SCHEDULER = "core/optimizer_param_scheduler.py get_lr"


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check(arg: Arg, fail: Fail, warn: Warn, iterations: int | None, global_batch_size: int | None) -> None:
    decay_length(arg, fail)
    schedule_source(arg, fail)
    conversion(arg, warn)
    exits(arg, fail, warn, iterations)
    if iterations is None or iterations < 1 or arg("skip_train") or arg("ckpt_convert_format") is not None:
        return  # no step to judge: skip_train and a conversion train nothing on purpose (each warned)
    skipped(arg, fail, warn, iterations)
    if global_batch_size is not None and global_batch_size >= 1:
        zero_rate_steps(arg, fail, warn, iterations, global_batch_size)


def decay_length(arg: Arg, fail: Fail) -> None:
    """training.py get_optimizer_param_scheduler defaults lr_decay_iters (samples) only where it is None; the
    scheduler then asserts `lr_decay_steps > 0` (optimizer_param_scheduler.py __init__), whatever the decay style."""
    for name in ("lr_decay_iters", "lr_decay_samples"):
        value = arg(name)
        if _count(value) and value < 1:
            unit = name.removeprefix("lr_decay_")
            fail(f"{name} {value}: Megatron's LR scheduler asserts a decay length above 0 (OptimizerParamScheduler: "
                 "assert self.lr_decay_steps > 0) and does not read 0 as unset",
                 f"--set {name}=null (Megatron's default: train_{unit})", "runtime")


def schedule_source(arg: Arg, fail: Fail) -> None:
    """OptimizerParamScheduler.__init__ asserts `not use_checkpoint_opt_param_scheduler` under
    override_opt_param_scheduler ('both override and use-checkpoint are set.'), when training.py builds it."""
    if arg("override_opt_param_scheduler") and arg("use_checkpoint_opt_param_scheduler"):
        fail("override_opt_param_scheduler and use_checkpoint_opt_param_scheduler are both set: Megatron's LR "
             "scheduler asserts at start that at most one is ('both override and use-checkpoint are set.')",
             "--set use_checkpoint_opt_param_scheduler=false (the job's schedule), or --set "
             "override_opt_param_scheduler=false (the checkpoint's)", "runtime")


def conversion(arg: Arg, warn: Warn) -> None:
    """training.py setup_model_and_optimizer: `if args.ckpt_convert_format is not None:` saves the loaded model in
    that format and calls exit() before training."""
    if arg("ckpt_convert_format") is not None:
        warn(f"ckpt_convert_format {arg('ckpt_convert_format')}: Megatron converts the checkpoint in load, saves it "
             "under ckpt_convert_save and exits without training (training.py setup_model_and_optimizer: exit()); "
             "the run's summary says no iteration was logged")


def exits(arg: Arg, fail: Fail, warn: Warn, iterations: int | None) -> None:
    """training.py checkpoint_and_decide_exit, after each step: `if args.exit_duration_in_mins:` and `if
    args.exit_interval and iteration % args.exit_interval == 0`."""
    interval, minutes = arg("exit_interval"), arg("exit_duration_in_mins")
    if _count(interval) and interval == 0:
        warn("exit_interval 0: Megatron reads 0 as unset (training.py checkpoint_and_decide_exit: `if "
             "args.exit_interval and ...`), so the run does not stop early; drop it, or give the interval")
    elif _count(interval) and iterations is not None and abs(interval) > iterations:
        warn(f"exit_interval {interval}: past the job's {iterations} iterations, so it is never reached (training.py "
             "checkpoint_and_decide_exit stops at a multiple of it); drop it, or give one within the run")
    if _count(minutes) and minutes == 0:
        warn("exit_duration_in_mins 0: Megatron reads 0 as unset (training.py checkpoint_and_decide_exit: `if "
             "args.exit_duration_in_mins:`), so the run does not stop on time; drop it, or give the minutes")
    elif _count(minutes) and minutes < 0:
        fail(f"exit_duration_in_mins {minutes}: every training time is past it, so Megatron saves and exits after "
             f"the first iteration (training.py checkpoint_and_decide_exit: train_time > {minutes})",
             "--set exit_duration_in_mins=null (no time limit), or a positive number of minutes", "runtime")


def skipped(arg: Arg, fail: Fail, warn: Warn, iterations: int) -> None:
    """training.py train(): `if (iteration + 1) in args.iterations_to_skip:` fast-forwards the data and counts the
    iteration without a step (and without a log line)."""
    listed = arg("iterations_to_skip") or []
    values = {v for v in listed if _count(v)}
    inside = {v for v in values if 1 <= v <= iterations}
    if iterations <= len(inside):
        fail(f"iterations_to_skip lists every one of the job's {iterations} iterations: Megatron skips each without "
             "a step (training.py train(): `if (iteration + 1) in args.iterations_to_skip`), so the run updates "
             "nothing and logs no iteration", "--set iterations_to_skip=null (skip none), or list fewer", "runtime")
        return
    outside = sorted(values - inside)
    if outside:
        shown = ", ".join(str(v) for v in outside[:5]) + (", …" if len(outside) > 5 else "")
        warn(f"iterations_to_skip {shown}: not among the job's iterations 1-{iterations} (1-indexed), so never "
             "skipped (training.py train() compares them with iteration + 1); drop them")


@dataclass(frozen=True)
class ZeroRate:
    """Where a start at iteration 0 steps at learning rate 0 (iterations 1-indexed)."""

    first: bool  # iteration 1: the warm-up starts at lr_warmup_init 0
    tail: int  # the last `tail` iterations: past the decay, at min_lr 0
    iterations: int
    decay: float  # the decay's length in the training length's unit
    decay_name: str  # the setting that gave it
    warmup_name: str  # the warm-up's setting

    @property
    def steps(self) -> set[int]:
        return ({1} if self.first else set()) | set(range(self.iterations - self.tail + 1, self.iterations + 1))


def zero_rate(arg: Arg, iterations: int, batch: int) -> ZeroRate | None:
    """The steps at learning rate 0 of a start at iteration 0 (None where the settings are refused elsewhere). The
    scheduler is built at step 0 and stepped after each update by the global batch (training.py train_step), so
    step i runs at get_lr(s) with s = (i-1)·batch samples: the warm-up's first step at lr_warmup_init, and (but
    for a constant schedule) every step from the end of the decay (s >= the decay's steps, where its coefficient is
    0; inverse-square-root: s > them) at min_lr. Groups of decoupled_lr keep decoupled_min_lr there."""
    lr, init, min_lr = arg("lr"), arg("lr_warmup_init"), arg("min_lr")
    if not (_number(lr) and lr > 0 and _number(init) and _number(min_lr)):
        return None  # value_rules says what is wrong with them
    based = "iters" if arg("train_iters") is not None else "samples"
    scale = batch if based == "iters" else 1  # the scheduler counts samples
    decay_set = arg(f"lr_decay_{based}")
    length = iterations if based == "iters" else arg("train_samples")
    decay = (decay_set if _count(decay_set) and decay_set > 0 else length) * scale
    fraction = arg("lr_warmup_fraction")
    warmup = fraction * decay if _number(fraction) else (arg(f"lr_warmup_{based}") or 0) * scale
    if not (_number(decay) and decay > 0 and _number(warmup)) or warmup >= decay:
        return None  # training_length refuses the warm-up against the decay
    style = arg("lr_decay_style")
    decoupled = arg("decoupled_lr") is not None and arg("decoupled_min_lr") not in (None, 0)
    tail = 0
    if style != "constant" and min_lr == 0 and not decoupled:
        last_decaying = math.floor(decay / batch) + 1 if style == "inverse-square-root" else math.ceil(decay / batch)
        tail = max(0, iterations - last_decaying)
    return ZeroRate(first=warmup > 0 and init == 0, tail=tail, iterations=iterations, decay=decay / scale,
                    decay_name=f"lr_decay_{based}" if decay_set is not None else f"lr_decay_{based} (train_{based})",
                    warmup_name="lr_warmup_fraction" if _number(fraction) else f"lr_warmup_{based}")


def zero_rate_steps(arg: Arg, fail: Fail, warn: Warn, iterations: int, batch: int) -> None:
    """Refused where every step runs at learning rate 0 (zero_rate), warned where the last ones do."""
    found = zero_rate(arg, iterations, batch)
    if found is None:
        return
    lr, style, warm = arg("lr"), arg("lr_decay_style"), found.warmup_name
    if len(found.steps) >= iterations:
        why = []
        if found.first:
            why.append(f"the first step runs at lr_warmup_init 0 (the warm-up, {warm}, starts there)")
        if found.tail:
            why.append(f"every later one at min_lr 0 (the {style} decay ends at {found.decay_name})")
        ways = [f"--set {warm}={'null' if warm == 'lr_warmup_fraction' else 0} (no warm-up)",
                f"--set lr_warmup_init={lr:g} (the warm-up from the peak rate)"]
        if found.tail:
            ways.append(f"--set min_lr={lr / 10:g}")
        fail(f"every one of the job's {iterations} iteration(s) would run at learning rate 0, updating nothing: "
             f"{', and '.join(why)} ({SCHEDULER}; the scheduler steps after each update)",
             ", or ".join(ways), "runtime")
    elif found.tail:
        based = found.decay_name.split()[0].removeprefix("lr_decay_")
        warn(f"the last {found.tail} of the job's {iterations} iterations run at learning rate 0 and update nothing: "
             f"min_lr is 0 and the {style} decay reaches it at {found.decay_name} {found.decay:g} ({SCHEDULER}); "
             f"set min_lr above 0 to keep training there, or lr_decay_{based} to the training length")
