"""Settings that need a checkpoint to start from, judged against where the job loads from: a new run's --load is
its own empty checkpoint directory (run_paths), so they would stop the job or train from nothing (seen on an H200
after an import: --exit-on-missing-checkpoint, --no-initialization and --use-checkpoint-args with the run's new
--load)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launcher.errors import Problem

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
