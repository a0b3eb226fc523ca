"""A checkpoint under --load at or past the iteration the job trains to is refused before launch: Megatron would load
it, never enter its loop (training.py train(): `while iteration < args.train_iters`) and exit 0 having trained
nothing. The checkpoints here are tracker files as Megatron writes them (its iteration, or "release"); the checks
on checkpoints Megatron's own save_checkpoint writes are in tests/checks/test_resume_check.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli.job import JobRequest, job_for
from launcher.pipeline.preset import load_preset

# the toy model through pretrain_gpt.py, 20 iterations of 8 samples
TOY = ["entry=pretrain_gpt", "train_iters=20", "global_batch_size=8", "micro_batch_size=4"]


def checkpoint_at(root: Path, tracker: str, *iterations: int) -> Path:
    """A tracker naming `tracker`, with its iteration directory (and those of `iterations`)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "latest_checkpointed_iteration.txt").write_text(tracker + "\n")
    for number in [int(tracker)] if tracker.isdigit() else []:
        (root / f"iter_{number:07d}").mkdir()
    for number in iterations:
        (root / f"iter_{number:07d}").mkdir()
    return root


def refusals(load: Path, *overrides: str) -> list[str]:
    _, problems = job_for(load_preset("toy", [*TOY, f"load={load}", *overrides]),
                          JobRequest(nodes=1, gpus_per_node=2, run_dir=False, local=False))
    return [f"{p.message} | {p.fix}" for p in problems if "train 0 iterations" in p.message]


@pytest.mark.parametrize("tracker", ["20", "25"])
def test_a_checkpoint_at_or_past_train_iters_is_refused(tmp_path, tracker):
    said = refusals(checkpoint_at(tmp_path / "ck", tracker))
    assert len(said) == 1 and f"iteration {tracker}, and the job trains to iteration 20 (train_iters)" in said[0]
    # the way out extends the length and says which LR schedule to take (Megatron asserts they match at load)
    assert f"--set train_iters={int(tracker) + 20} --set override_opt_param_scheduler=true" in said[0]


def test_a_checkpoint_before_the_end_is_no_refusal(tmp_path):
    assert refusals(checkpoint_at(tmp_path / "ck", "19")) == []


def test_the_hint_leads_to_a_job_that_trains(tmp_path):
    load = checkpoint_at(tmp_path / "ck", "20")
    assert refusals(load, "train_iters=40", "override_opt_param_scheduler=true") == []
    assert refusals(load, "finetune=true") == []  # the weights only, from iteration 0


def test_a_conversion_or_an_evaluation_of_the_last_checkpoint_is_no_refusal(tmp_path):
    # ckpt_convert_format saves the loaded checkpoint in another format and exits before training; skip_train
    # evaluates it (both said by the checker's own warnings)
    load = checkpoint_at(tmp_path / "ck", "20")
    assert refusals(load, "ckpt_convert_format=torch", f"ckpt_convert_save={tmp_path / 'out'}") == []
    assert refusals(load, "skip_train=true") == []


def test_a_sample_budget_is_counted_in_iterations(tmp_path):
    # train_samples 160 // global batch 8 = 20 iterations (training.py update_train_iters)
    load = checkpoint_at(tmp_path / "ck", "20")
    said = refusals(load, "train_iters=null", "train_samples=160")
    assert len(said) == 1 and "(train_samples)" in said[0] and "--set train_samples=320" in said[0]
    assert refusals(load, "train_iters=null", "train_samples=168") == []


@pytest.mark.parametrize("tracker", ["release", "not a number"])
def test_a_checkpoint_megatron_starts_at_zero_or_stops_on_is_not_this_refusal(tmp_path, tracker):
    # a release checkpoint loads at iteration 0; a damaged tracker is the resume check's (Megatron stops on it)
    assert refusals(checkpoint_at(tmp_path / "ck", tracker)) == []


def test_ckpt_step_names_the_iteration_megatron_loads(tmp_path):
    load = checkpoint_at(tmp_path / "ck", "30", 10)
    assert refusals(load, "ckpt_step=10") == []
    assert len(refusals(checkpoint_at(tmp_path / "ck2", "5", 20), "ckpt_step=20")) == 1
    # an iteration without its directory stops Megatron at load instead: the resume check's refusal, not this
    assert refusals(checkpoint_at(tmp_path / "ck3", "5"), "ckpt_step=20") == []
    assert refusals(checkpoint_at(tmp_path / "ck4", "20").joinpath("..", "ck4"), "train_iters=20") != []
    (tmp_path / "ck4" / "iter_0000020").rmdir()
    assert refusals(tmp_path / "ck4") == []


def test_resuming_a_finished_run_directory_is_refused(tmp_path, launch):
    code, out, err = launch("toy", "--slurm", "--megatron-path", str(tmp_path), "--set", f"run_root={tmp_path}",
                            *[f"--set={s}" for s in TOY], cwd=tmp_path)
    assert code == 0, err
    run_dir = Path(out.strip()).parent
    checkpoint_at(run_dir / "checkpoints", "20")
    code, out, err = launch("--resume", str(run_dir), "--slurm", "--megatron-path", str(tmp_path), cwd=tmp_path)
    assert code == 2 and "train 0 iterations" in err and "hint: to train further, --set train_iters=40" in err, err
    code, out, err = launch("--resume", str(run_dir), "--slurm", "--megatron-path", str(tmp_path),
                            "--set", "train_iters=40", "--set", "override_opt_param_scheduler=true", cwd=tmp_path)
    assert "train 0 iterations" not in err, err



def tracker_beside_iteration_25(root: Path, text: str) -> Path:
    """iter_0000025/ with a tracker holding `text`."""
    checkpoint_at(root, "25")
    (root / "latest_checkpointed_iteration.txt").write_text(text + "\n")
    return root


@pytest.mark.parametrize("tracker", ["+25", "2_5", " 0025", "٢٥"])
def test_a_tracker_is_read_as_megatrons_read_metadata_reads_it(tmp_path, tracker):
    # read_metadata takes int() of the stripped text: each of these is iteration 25, which Megatron loads
    said = refusals(tracker_beside_iteration_25(tmp_path / "ck", tracker))
    assert len(said) == 1 and "iteration 25, and the job trains to iteration 20" in said[0]


@pytest.mark.parametrize("tracker", ["²⁵", "-25", "25.0", "2" * 5000])
def test_a_tracker_megatron_reads_as_no_iteration_is_no_end_to_train_past(tmp_path, tracker):
    assert refusals(tracker_beside_iteration_25(tmp_path / "ck", tracker)) == []
