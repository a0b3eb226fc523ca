"""The learning-rate schedule a resume loads with the optimizer state: Megatron compares the job's with the
checkpoint's (optimizer_param_scheduler.py _check_and_set) and asserts them equal, takes the checkpoint's with
use_checkpoint_opt_param_scheduler (the job's ignored) or the job's with override_opt_param_scheduler. The stored
settings are made by hand as the pin stores them (get_optimizer_param_scheduler writes lr_decay_iters back); the
same cases against Megatron's own load are cells of scripts/ckpt_load_matrix.py
(tests/checks/test_resume_check_against_megatron.py)."""

from __future__ import annotations

from launcher.checks.resume import judge
from tests.checks.test_resume_optimizer_state import job, levels, stored, text

# the toy preset's schedule as a 200-iteration run of global batch 8 stores it
SCHEDULE = {"lr": 0.001, "min_lr": 0.0, "lr_decay_style": "constant", "train_iters": 200, "lr_decay_iters": 200,
            "lr_warmup_iters": 0, "weight_decay": 0.01, "weight_decay_incr_style": "constant"}


def test_an_unchanged_schedule_says_nothing(tmp_path):
    check = judge(job(tmp_path), stored(tmp_path, "fp32", **SCHEDULE))
    assert levels(check, "schedule") == [], check.render()


def test_a_longer_run_is_refused_as_megatron_asserts_and_either_flag_lifts_it(tmp_path):
    check = judge(job(tmp_path, "train_iters=400"), stored(tmp_path, "fp32", **SCHEDULE))
    assert levels(check, "schedule") == ["refuse"]
    said = text(check, "schedule")
    assert "total number of iterations 1600.0 (checkpoint) → 3200.0 (job)" in said
    assert "total number of weight decay iterations" in said and "do not match" in said
    taken = judge(job(tmp_path, "train_iters=400", "override_opt_param_scheduler=true"),
                  stored(tmp_path, "fp32", **SCHEDULE))
    assert levels(taken, "schedule") == [] and taken.ok
    kept = judge(job(tmp_path, "train_iters=400", "use_checkpoint_opt_param_scheduler=true"),
                 stored(tmp_path, "fp32", **SCHEDULE))
    assert levels(kept, "schedule") == ["warn"] and kept.ok


def test_a_rate_the_checkpoints_schedule_replaces_is_warned_as_ignored(tmp_path):
    check = judge(job(tmp_path, "lr=0.002", "use_checkpoint_opt_param_scheduler=true"),
                  stored(tmp_path, "fp32", **SCHEDULE))
    assert levels(check, "schedule") == ["warn"]
    assert "learning rate 0.001 (checkpoint) → 0.002 (job)" in text(check, "schedule")
    assert "the job's are ignored" in text(check, "schedule")


def test_no_schedule_is_compared_where_none_loads(tmp_path):
    for weights_only in ("no_load_optim=true", "finetune=true"):
        check = judge(job(tmp_path, "train_iters=400", weights_only), stored(tmp_path, "fp32", **SCHEDULE))
        assert levels(check, "schedule") == [], check.render()
