"""Settings that need a checkpoint to start from, judged against where the job loads from: a new run's --load is
its own empty checkpoint directory (run_paths), so they would stop the job or train from nothing (seen on an H200
after an import: --exit-on-missing-checkpoint, --no-initialization and --use-checkpoint-args with the run's new
--load)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launcher import untrusted
from launcher.errors import Problem, UserError, shown

# dest → (the flag, what it does without a checkpoint, its value when off)
NEEDS_A_CHECKPOINT = {
    "exit_on_missing_checkpoint": ("--exit-on-missing-checkpoint", "exits at start-up when --load holds no "
                                   "checkpoint", False),
    "use_checkpoint_args": ("--use-checkpoint-args", "reads the model's arguments from the checkpoint in --load "
                            "before anything else", False),
    "perform_initialization": ("--no-initialization", "leaves the weights uninitialized, to be filled by the "
                               "checkpoint in --load", True),
}


def _holds_files(path: str) -> bool | None:
    """Whether `path` holds anything, where this machine can tell (None: it cannot)."""
    try:
        where = Path(path)
        if not where.exists():
            return False
        return where.is_dir() and any(where.iterdir())
    except OSError:
        return None


def checkpoint_needed(written: Mapping[str, Any], megatron: Mapping[str, Any], resuming: bool,
                      remote: bool) -> list[Problem]:
    """`written`: the preset's own settings; `megatron`: the job's (with the run directory's --load); `resuming`: a
    run directory with checkpoints is resumed; `remote`: the job runs where this machine cannot see its files."""
    given = [dest for dest, (_, _, off) in NEEDS_A_CHECKPOINT.items()
             if dest in megatron and megatron[dest] is not None and megatron[dest] != off]
    if not given or resuming:
        return []
    load = written.get("load")
    if load and (remote or _holds_files(str(load)) is not False):
        return []  # the user's own checkpoint directory (checked where it is, at start)
    where = (f"load {load} does not exist or is empty here" if load else
             "the job loads from its new run directory, which holds no checkpoint yet")
    flags = ", ".join(f"{NEEDS_A_CHECKPOINT[d][0]} ({NEEDS_A_CHECKPOINT[d][1]})" for d in given)
    drop = " ".join(f"--set {d}={str(NEEDS_A_CHECKPOINT[d][2]).lower()}" for d in given)
    return [Problem(f"{flags}: {where}", f"drop {'them' if len(given) > 1 else 'it'}: {drop}, or --set load=DIR "
                    "(a checkpoint to start from)", "launcher")]


# Megatron's tracker file: a directory holding it holds a checkpoint that load_checkpoint reads.
TRACKER = "latest_checkpointed_iteration.txt"


# What the distributed optimizer over torch's Adam raises when it loads its state, per checkpoint format.
UNLOADABLE_OPTIMIZER_STATE = {
    "torch": "load_parameter_state_from_dp_zero raises KeyError: 'step' (distrib_optimizer.py:1167): the fresh "
             "optimizer's per-parameter state holds Adam's `step`, which the saved parameter state never holds",
    "torch_dist": "DistributedOptimizer.state_dict asserts on the fresh optimizer (distrib_optimizer.py:793, assert "
                  "len(steps) == 1: torch's Adam has no per-parameter state before its first step), which every "
                  "torch_dist load of that state asks for",
}


def optimizer_state_unloadable(megatron: Mapping[str, Any], te: bool, apex: bool, remote: bool) -> list[Problem]:
    """The distributed optimizer over torch's Adam (no Transformer Engine, no apex) cannot load its state from a
    checkpoint at the pin, in either format (UNLOADABLE_OPTIMIZER_STATE; rehearsed on CPU, saved by the same job:
    scripts/ckpt_load_matrix.py --torch-adam-as-is for torch_dist). TE's and apex's fused Adam keep `step` in the
    param groups and load; --no-load-optim skips the optimizer's state (checkpointing.py:1919). Judged where this
    machine sees the checkpoint (a resumed run's, or --load's) to be loaded."""
    if not megatron.get("use_distributed_optimizer") or te or apex or remote:
        return []
    fmt = megatron.get("ckpt_format") or "torch_dist"
    if fmt not in UNLOADABLE_OPTIMIZER_STATE or (megatron.get("optimizer") or "adam") != "adam":
        return []
    load = megatron.get("load")
    if megatron.get("no_load_optim") or megatron.get("finetune") or not load:
        return []
    try:
        holds = (Path(str(load)) / TRACKER).is_file()
    except OSError:
        holds = False
    if not holds:
        return []
    return [Problem(f"load {load} holds a checkpoint whose optimizer state the distributed optimizer over torch's "
                    f"Adam (no Transformer Engine or apex) cannot load in ckpt_format {fmt} at this Megatron pin: "
                    f"{UNLOADABLE_OPTIMIZER_STATE[fmt]}",
                    "set no_load_optim=true (the weights and the iteration load; Adam's moments start afresh), or run "
                    "with Transformer Engine or apex", "runtime")]


MAX_TRACKER_BYTES = 4096  # Megatron writes the iteration (or "release") and nothing else
INT64_MAX = (1 << 63) - 1  # read_metadata all-reduces the iteration as a torch.long


def tracker_iteration(text: str) -> int | None:
    """The iteration Megatron's read_metadata takes from a tracker's text: int() of the stripped text (so `+7`,
    ` 0007` and `7_0` are iterations, '²' is none), from 0 to 2^63-1; None for anything else, "release" included
    (each reader of a tracker says what that means where it reads one)."""
    try:
        iteration = int(text.strip())
    except ValueError:
        return None
    return iteration if 0 <= iteration <= INT64_MAX else None


def training_iterations(megatron: Mapping[str, Any], global_batch_size: int, batch_schedule: bool) -> int | None:
    """The iteration Megatron trains to: train_iters, else train_samples // global batch (training.py
    update_train_iters at a constant batch); None where a batch schedule or an unset length leaves it open."""
    iters, samples = megatron.get("train_iters"), megatron.get("train_samples")
    if isinstance(iters, int) and not isinstance(iters, bool):
        return iters
    if isinstance(samples, int) and not isinstance(samples, bool) and global_batch_size > 0 and not batch_schedule:
        return samples // global_batch_size
    return None


def loaded_iteration(megatron: Mapping[str, Any]) -> int | None:
    """The iteration Megatron resumes from `load` where this machine can tell (checkpointing.py load_checkpoint):
    ckpt_step where given (with or without a tracker), else the tracker file's; None where it starts at 0 (no
    checkpoint, a release checkpoint, finetune) or stops at load (no such iteration directory, a tracker that is
    not a number: the resume check says why)."""
    load = megatron.get("load")
    if not load or megatron.get("finetune"):
        return None
    step = megatron.get("ckpt_step")
    try:
        if isinstance(step, int) and not isinstance(step, bool) and step > 0:
            iteration: int | None = step
        else:
            tracker = Path(str(load)) / TRACKER
            if not tracker.is_file():
                return None
            iteration = tracker_iteration(untrusted.read_utf8(tracker, "checkpoint tracker file", MAX_TRACKER_BYTES))
        if iteration is None or not (Path(str(load)) / f"iter_{iteration:07d}").is_dir():
            return None
    except (OSError, UserError):
        return None
    return iteration


def nothing_left_to_train(megatron: Mapping[str, Any], iterations: int | None, global_batch_size: int
                          ) -> list[Problem]:
    """A checkpoint in `load` at or past the iteration the job trains to: Megatron loads it, its loop (training.py
    train(): `while iteration < args.train_iters`) never runs, and it exits 0 having trained nothing (saving the same
    iteration again where it is off the save interval). `iterations`: training_iterations()."""
    loaded = loaded_iteration(megatron)
    # a conversion (ckpt_convert_format) saves the loaded checkpoint and exits before training, and skip_train
    # trains nothing on purpose (the checker warns of it)
    if loaded is None or iterations is None or iterations < 1 or loaded < iterations or megatron.get("skip_train") \
            or megatron.get("ckpt_convert_format") is not None:
        return []
    based = "iters" if megatron.get("train_iters") is not None else "samples"
    more = loaded + iterations
    length = f"--set train_iters={more}" if based == "iters" else \
        f"--set train_samples={more * global_batch_size}"
    # Megatron asserts at load that the job's LR and weight-decay schedule (its lengths follow train_iters) equals
    # the checkpoint's unless one of these says which to take (optimizer_param_scheduler.py _check_and_set)
    keeps = megatron.get("override_opt_param_scheduler") or megatron.get("use_checkpoint_opt_param_scheduler")
    schedule = "" if keeps else (" --set override_opt_param_scheduler=true (Megatron asserts at load that the "
                                 "schedule's lengths equal the checkpoint's; this takes the job's, from the step the "
                                 "checkpoint reached)")
    load = shown(str(megatron.get("load")), 200)
    return [Problem(f"load {load} holds a checkpoint at iteration {loaded}, and the job trains to iteration "
                    f"{iterations} (train_{based}): Megatron would load it, train 0 iterations "
                    "(training.py train(): while iteration < args.train_iters) and exit 0",
                    f"to train further, {length}{schedule}; or --set finetune=true (its weights, from iteration 0)",
                    "launcher")]

