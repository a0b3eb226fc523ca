"""Where a run's Megatron outputs go inside its run directory: the settings resolve adds for a new run.

The run directory itself (made, recorded, resumed) is launcher/runs/rundir.py's; these are only the paths and save
intervals the job passes to Megatron, decided before any check.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Megatron's examples save every 500 to 10,000 iterations; 1,000 of the 175b preset are a few hours on its GPUs.
PERIODIC_SAVE_ITERATIONS = 1000
RETAINED_SAVES = 10
CHECKPOINTS = "checkpoints"
TENSORBOARD = "tensorboard"
WANDB = "wandb"
MEGATRON_LOG_INTERVAL = 100  # --log-interval's default at the pin


def run_dir_megatron_args(run_dir: Path, megatron: Mapping[str, Any]) -> dict[str, Any]:
    """Megatron arguments that point a run at its directory; settings the preset made itself are kept.

    Checkpoints: --save and --load are the same directory, so relaunching the run resumes it (reference §9).
    Megatron requires --save-interval with --save; without one, save once at the end (train_iters).
    """
    run_dir = Path(run_dir).absolute()
    args: dict[str, Any] = {}
    save = megatron.get("save") or str(run_dir / CHECKPOINTS)
    args["save"] = save
    if not megatron.get("load"):
        args["load"] = save
    if not megatron.get("save_interval"):
        args.update(default_save_settings(megatron))
    if not megatron.get("tensorboard_dir"):
        args["tensorboard_dir"] = str(run_dir / TENSORBOARD)
        if megatron.get("tensorboard_log_interval") is None:
            # Megatron's default of 1 reads the loss back to the host in every step; the log's interval is
            # what a person reads anyway (+ part of 3 % on 345M, H200: docs/benchmarks.md)
            args["tensorboard_log_interval"] = int(megatron.get("log_interval") or MEGATRON_LOG_INTERVAL)
    if megatron.get("wandb_project"):  # W&B only when the preset asks for it
        if not megatron.get("wandb_save_dir"):
            args["wandb_save_dir"] = str(run_dir / WANDB)
        if not megatron.get("wandb_exp_name"):
            args["wandb_exp_name"] = run_dir.name
    return args


def default_save_settings(megatron: Mapping[str, Any]) -> dict[str, int]:
    """Where the preset sets no save_interval: a checkpoint every PERIODIC_SAVE_ITERATIONS (as Megatron's own
    examples do), or once at the end of a shorter run. A node failure then costs at most that many iterations.
    Megatron keeps every checkpoint unless save_retain_interval is set; then it deletes each older one that is
    not a multiple of it once a newer one is saved: keep every RETAINED_SAVES-th, so a long run does not fill
    the file system (175B: ~2.4 TB per checkpoint)."""
    end = end_of_training_interval(megatron)
    if end <= PERIODIC_SAVE_ITERATIONS:
        return {"save_interval": end}
    settings = {"save_interval": PERIODIC_SAVE_ITERATIONS}
    if megatron.get("save_retain_interval") is None:
        settings["save_retain_interval"] = PERIODIC_SAVE_ITERATIONS * RETAINED_SAVES
    return settings


def end_of_training_interval(megatron: Mapping[str, Any]) -> int:
    """A save interval that saves once, at the end: Megatron saves there anyway when --save is set. A length below
    1 is refused on its own (checker.required_problems): the interval derived from it must not be a second problem."""
    iters = megatron.get("train_iters")
    if isinstance(iters, (int, float)) and iters >= 1:
        return int(iters)
    samples, batch = megatron.get("train_samples"), megatron.get("global_batch_size")
    if isinstance(samples, (int, float)) and isinstance(batch, (int, float)) and samples >= 1 and batch >= 1:
        # Megatron's iterations of a constant-batch sample budget (training.py update_train_iters: floor; fewer
        # samples than one batch are refused on their own, checker.sample_budget)
        return max(1, int(samples) // int(batch))
    return 1_000_000_000  # unknown length (batch schedule): larger than any run
