"""Settings with which Megatron runs to a normal exit while updating nothing (refused) or less than the job says
(warned): steps at learning rate 0, skipped iterations, early-exit settings, a decay length of 0, a conversion run.
Each refusal's way out is followed and gives an accepted job; the LR rule is held to the pin's own scheduler."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from launcher.checks.data import check_data_sources
from launcher.cli.job import JobRequest, job_for
from launcher.megatron import args as megatron_args
from launcher.pipeline import update_rules
from launcher.pipeline.preset import load_preset
from tests.checks.test_rehearsal import megatron_checkout, needs_checkout


def judged(*overrides: str) -> tuple[list[str], list[str]]:
    """The 345m preset (cosine decay over lr_decay_iters 320000, warm-up 1 %, min_lr 1e-5, 500000 iterations of
    32) with `overrides`: (problems as 'message | hint', warnings)."""
    job, problems = job_for(load_preset("345m", list(overrides)), JobRequest(run_dir=False, local=False))
    return [f"{p.message} | {p.fix}" for p in problems], list(job.warnings)


def followed(hint: str) -> list[list[str]]:
    """Each `--set X=V` of a hint, as overrides."""
    return [[part.split()[0]] for part in hint.split("--set ")[1:]]


def said(texts: list[str], words: str) -> list[str]:
    return [text for text in texts if words in text]


# -- learning rate 0 -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", [["train_iters=1"], ["train_iters=10", "lr_decay_iters=1", "min_lr=0"],
                                  ["train_iters=null", "lr_decay_iters=null", "train_samples=32"]])
def test_a_run_whose_every_step_has_learning_rate_0_is_refused_and_each_way_out_trains(case):
    problems, _ = judged(*case)
    refused = said(problems, "would run at learning rate 0, updating nothing")
    assert len(refused) == 1, problems
    for way in followed(refused[0].split(" | ")[1]):
        problems, _ = judged(*case, *way)
        assert problems == [], (way, problems)


def test_a_run_that_trains_nothing_on_purpose_is_not_judged_by_its_steps():
    assert not said(judged("train_iters=1", "skip_train=true")[0], "learning rate 0")


def test_one_step_past_the_warm_up_start_is_accepted():
    problems, warnings = judged("train_iters=2")
    assert problems == [] and not said(warnings, "learning rate 0")


def test_a_decay_that_ends_before_the_run_with_min_lr_0_is_warned_with_the_count():
    problems, warnings = judged("train_iters=1000", "lr_decay_iters=100", "min_lr=0")
    assert problems == []
    assert said(warnings, "the last 900 of the job's 1000 iterations run at learning rate 0")


@pytest.mark.parametrize("case", [[], ["train_iters=1000", "lr_decay_iters=100"],  # min_lr 1e-5
                                  ["train_iters=1000", "lr_decay_iters=100", "min_lr=0", "lr_decay_style=constant"],
                                  ["train_iters=1000", "min_lr=0"]])  # the decay ends with the run
def test_no_step_at_learning_rate_0_is_no_warning(case):
    problems, warnings = judged(*case)
    assert problems == [] and not said(warnings, "learning rate 0"), warnings


# the settings of Megatron's get_optimizer_param_scheduler, at their defaults
SCHEDULE_ARGS = ("train_iters", "train_samples", "lr_decay_iters", "lr_decay_samples", "lr_wsd_decay_iters",
                 "lr_wsd_decay_samples", "lr_warmup_fraction", "lr_warmup_iters", "lr_warmup_samples",
                 "lr_warmup_init", "lr", "min_lr", "lr_decay_style", "weight_decay_incr_style",
                 "use_checkpoint_opt_param_scheduler", "override_opt_param_scheduler", "lr_wsd_decay_style",
                 "step_batch_size_schedule")
SCHEDULES = [
    {"train_iters": 1, "lr_warmup_fraction": 0.01, "lr_decay_style": "cosine"},
    {"train_iters": 10, "lr_decay_iters": 4, "lr_decay_style": "cosine"},
    {"train_iters": 10, "lr_decay_iters": 4, "lr_decay_style": "linear", "lr_warmup_iters": 2},
    {"train_iters": 10, "lr_decay_iters": 4, "lr_decay_style": "inverse-square-root", "lr_warmup_iters": 2},
    {"train_iters": 10, "lr_decay_iters": 1, "lr_warmup_fraction": 0.5, "lr_decay_style": "cosine"},
    {"train_iters": 10, "lr_decay_iters": 6, "lr_decay_style": "WSD", "lr_wsd_decay_iters": 3},
    {"train_iters": 10, "lr_decay_iters": 4, "lr_decay_style": "constant", "lr_warmup_iters": 2},
    {"train_iters": 10, "lr_decay_iters": 4, "lr_decay_style": "cosine", "min_lr": 1e-5},
    {"train_iters": 12, "lr_warmup_init": 1e-5, "lr_warmup_iters": 3, "lr_decay_style": "linear"},
    {"train_samples": 100, "lr_decay_samples": 50, "lr_decay_style": "cosine"},
    {"train_samples": 100, "lr_decay_samples": 48, "lr_warmup_samples": 10, "lr_decay_style": "inverse-square-root"},
    {"train_samples": 100, "lr_decay_samples": 47, "lr_decay_style": "WSD", "lr_wsd_decay_samples": 20,
     "lr_wsd_decay_style": "minus_sqrt"},
]
BATCH = 8
# Megatron's own scheduler, built by training.py get_optimizer_param_scheduler from the arguments and stepped by
# the global batch after each step as train_step does: the iterations (1-indexed) that run at learning rate 0
PROBE = r"""
import json, sys, types
from megatron.training import global_vars, training
found = []
for case in json.loads(sys.argv[1]):
    args = types.SimpleNamespace(**case)
    global_vars.set_args(args)
    optimizer = types.SimpleNamespace(param_groups=[{"default_config": True}])
    scheduler = training.get_optimizer_param_scheduler(optimizer)
    zero = []
    for iteration in range(1, args.train_iters + 1):
        if optimizer.param_groups[0]["lr"] == 0:
            zero.append(iteration)
        scheduler.step(increment=args.global_batch_size)
    found.append(zero)
print(json.dumps(found))
"""


@needs_checkout
def test_the_steps_at_learning_rate_0_are_those_of_megatrons_scheduler():
    catalog = megatron_args.catalog()

    def full(case: dict) -> dict:
        return {**{name: catalog[name].default for name in SCHEDULE_ARGS}, "lr": 1e-3, "global_batch_size": BATCH,
                "start_weight_decay": 0.01, "end_weight_decay": 0.01, **case}

    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps([full(c) for c in SCHEDULES])],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(megatron_checkout())})
    assert done.returncode == 0, done.stderr[-3000:]
    megatron = json.loads(done.stdout.strip().splitlines()[-1])
    for case, zero in zip(SCHEDULES, megatron, strict=True):
        settings = full(case)
        iterations = case.get("train_iters") or case["train_samples"] // BATCH
        found = update_rules.zero_rate(settings.get, iterations, BATCH)
        assert found is not None and sorted(found.steps) == zero, (case, zero)
    assert any(megatron) and not all(megatron)  # the grid has both


# -- skipped iterations, early exits, the decay's length, conversion -------------------------------------------

def test_skipping_every_iteration_is_refused_and_some_or_none_are_not():
    problems, _ = judged("train_iters=3", "iterations_to_skip=[1,2,3]")
    refused = said(problems, "iterations_to_skip lists every one of the job's 3 iterations")
    assert len(refused) == 1 and "--set iterations_to_skip=null" in refused[0]
    assert judged("train_iters=3", "iterations_to_skip=[1,2,3]", "iterations_to_skip=null")[0] == []
    assert judged("train_iters=3", "iterations_to_skip=[1,3]")[0] == []


def test_iterations_to_skip_outside_the_run_are_warned():
    _, warnings = judged("train_iters=3", "iterations_to_skip=[0,2,7]")
    assert said(warnings, "iterations_to_skip 0, 7: not among the job's iterations 1-3")
    assert not said(judged("train_iters=3", "iterations_to_skip=[2]")[1], "iterations_to_skip")


@pytest.mark.parametrize(("setting", "words"), [("exit_interval=0", "exit_interval 0: Megatron reads 0 as unset"),
                                                ("exit_interval=600000", "never reached"),
                                                ("exit_duration_in_mins=0", "exit_duration_in_mins 0: Megatron reads")])
def test_early_exits_megatron_never_takes_are_warned(setting, words):
    problems, warnings = judged(setting)
    assert problems == [] and said(warnings, words), warnings


@pytest.mark.parametrize("setting", ["exit_interval=1000", "exit_duration_in_mins=60"])
def test_early_exits_within_the_run_say_nothing(setting):
    problems, warnings = judged(setting)
    assert problems == [] and not said(warnings, "exit_"), warnings


def test_a_negative_duration_stops_after_one_iteration_and_is_refused():
    problems, _ = judged("exit_duration_in_mins=-1")
    refused = said(problems, "exits after the first iteration")
    assert len(refused) == 1 and "--set exit_duration_in_mins=null" in refused[0]
    assert judged("exit_duration_in_mins=-1", "exit_duration_in_mins=null")[0] == []


@pytest.mark.parametrize("case", [["lr_decay_iters=0"],
                                  ["train_iters=null", "lr_decay_iters=null", "train_samples=3200",
                                   "lr_decay_samples=0"]])
def test_a_decay_length_of_0_is_refused_and_megatrons_default_accepted(case):
    problems, _ = judged(*case)
    refused = said(problems, "asserts a decay length above 0")
    assert len(refused) == 1, problems
    assert judged(*case, *followed(refused[0].split(" | ")[1])[0])[0] == []


def test_a_conversion_run_is_said_to_train_nothing():
    _, warnings = judged("ckpt_convert_format=torch", "ckpt_convert_save=/tmp/converted")
    assert said(warnings, "exits without training")
    assert not said(judged()[1], "exits without training")


# -- data: a training set -------------------------------------------------------------------------------------

def test_per_split_data_without_a_train_split_is_refused():
    refused = [p.message for p in check_data_sources({"valid_data_path": ["v"], "test_data_path": ["t"]})]
    assert said(refused, "valid_data_path and test_data_path without train_data_path: Megatron builds no training "
                         "set and trains nothing")
    assert not said([p.message for p in check_data_sources({"train_data_path": ["a"], "valid_data_path": ["v"]})],
                    "no training set")


def test_a_per_split_file_without_train_datasets_is_refused(tmp_path):
    from launcher.checks.data import check_data

    listing = tmp_path / "splits.json"
    listing.write_text(json.dumps({"train": None, "valid": ["1.0", str(tmp_path / "v")], "test": None}))
    assert said([p.message for p in check_data({"per_split_data_args_path": str(listing)}, python_here=False)],
                "names no train datasets")
    listing.write_text(json.dumps({"train": [str(tmp_path / "a")], "valid": None, "test": None}))
    assert not said([p.message for p in check_data({"per_split_data_args_path": str(listing)}, python_here=False)],
                    "names no train datasets")


def test_both_sources_of_the_lr_schedule_are_refused_and_either_way_out_accepted():
    both = ["override_opt_param_scheduler=true", "use_checkpoint_opt_param_scheduler=true"]
    refused = said(judged(*both)[0], "both set")
    assert len(refused) == 1
    for way in followed(refused[0].split(" | ")[1]):
        assert judged(*both, *way)[0] == [], way


def test_megatrons_scheduler_asserts_on_both_sources():
    from types import SimpleNamespace

    scheduler = pytest.importorskip("megatron.core.optimizer_param_scheduler")
    with pytest.raises(AssertionError, match="both override and use-checkpoint"):
        scheduler.OptimizerParamScheduler(
            SimpleNamespace(param_groups=[{}]), init_lr=0.0, max_lr=1e-3, min_lr=0.0, lr_warmup_steps=0,
            lr_decay_steps=10, lr_decay_style="linear", start_wd=0.01, end_wd=0.01, wd_incr_steps=10,
            wd_incr_style="constant", use_checkpoint_opt_param_scheduler=True, override_opt_param_scheduler=True)
