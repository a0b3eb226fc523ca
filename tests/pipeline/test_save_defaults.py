"""The launcher's checkpoint default (the save plan kept between saves): said in the header, only where the job
saves torch_dist checkpoints, never over a setting the preset or --set made."""

import pytest

from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve


def job_for(*overrides: str, run_dir=None):
    return resolve(load_preset("345m", overrides=list(overrides)), 1, 1, run_dir=run_dir)


@pytest.mark.parametrize("overrides", [(), ("async_save=false",), ("ckpt_format=torch_dist",)])
def test_a_run_that_saves_torch_dist_keeps_its_save_plan_and_the_header_says_so(tmp_path, overrides):
    job = job_for(*overrides, run_dir=tmp_path / "run")
    assert job.added["ckpt_assume_constant_structure"] is True
    assert any(note.startswith("ckpt_assume_constant_structure") and "=false" in note for note in job.notes)


@pytest.mark.parametrize("value", ["false", "true"])
def test_the_users_own_choice_is_kept_and_not_explained_away(tmp_path, value):
    job = job_for(f"ckpt_assume_constant_structure={value}", run_dir=tmp_path / "run")
    assert job.megatron["ckpt_assume_constant_structure"] is (value == "true")
    assert "ckpt_assume_constant_structure" not in job.added
    assert not any(note.startswith("ckpt_assume_constant_structure") for note in job.notes)


def test_no_default_for_the_torch_format_which_has_no_cached_plan(tmp_path):
    job = job_for("ckpt_format=torch", "async_save=false", run_dir=tmp_path / "run")
    assert "ckpt_assume_constant_structure" not in job.megatron


def test_no_default_for_a_job_that_does_not_save():
    job = job_for()  # no run directory and no save in the preset: nothing is written
    assert "save" not in job.megatron and "ckpt_assume_constant_structure" not in job.megatron


def test_the_fully_parallel_save_is_off_where_its_group_is_one_rank_and_the_header_says_so(tmp_path):
    job = job_for(run_dir=tmp_path / "run")
    assert job.added["ckpt_fully_parallel_save"] is False
    assert any(note.startswith("ckpt_fully_parallel_save off") for note in job.notes)


@pytest.mark.parametrize("overrides", [("ckpt_fully_parallel_save=true",), ("use_distributed_optimizer=true",),
                                       ("ckpt_fully_parallel_save_process_group=ep_dp",)])
def test_the_fully_parallel_save_is_kept_where_the_user_or_the_optimizer_wants_it(tmp_path, overrides):
    job = job_for(*overrides, run_dir=tmp_path / "run")
    assert job.megatron.get("ckpt_fully_parallel_save") is not False
    assert not any(note.startswith("ckpt_fully_parallel_save off") for note in job.notes)


def test_the_fully_parallel_save_is_kept_where_data_parallel_ranks_share_the_writes(tmp_path):
    job = resolve(load_preset("345m"), 1, 2, run_dir=tmp_path / "run")  # DP 2
    assert "ckpt_fully_parallel_save" not in job.megatron
    tp2 = resolve(load_preset("345m", overrides=["tensor_model_parallel_size=2"]), 1, 2, run_dir=tmp_path / "r2")
    assert tp2.megatron["ckpt_fully_parallel_save"] is False  # TP 2 on 2 GPUs: DP 1
