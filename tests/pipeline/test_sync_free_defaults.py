"""The launcher's two sync-free defaults: said in the header, never over a setting the preset or --set made."""

from dataclasses import replace

from launcher.megatron.pin import Kernels
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve

WITH_TE = Kernels(True, True, "preset", "2.14.0")


def job_for(*overrides: str, kernels: Kernels | None = None, run_dir=None):
    preset = load_preset("345m", overrides=list(overrides))
    return resolve(preset, 1, 1, run_dir=run_dir, **({"kernels": kernels} if kernels else {}))


def test_the_fast_path_turns_megatrons_rerun_mode_off_and_says_why():
    job = job_for()
    assert job.added["rerun_mode"] == "disabled"
    assert any(note.startswith("rerun_mode disabled") and "still stop the run" in note for note in job.notes)


def test_a_rerun_mode_the_user_chose_is_kept_and_not_explained_away():
    job = job_for("rerun_mode=validate_results")
    assert job.megatron["rerun_mode"] == "validate_results" and "rerun_mode" not in job.added
    assert not any(note.startswith("rerun_mode") for note in job.notes)


def test_no_rerun_default_where_the_nan_check_is_off_or_the_fast_path_is_not_taken():
    assert "rerun_mode" not in job_for("check_for_nan_in_loss_and_grad=false").megatron
    assert "rerun_mode" not in job_for("error_injection_rate=5").megatron  # injection needs the rerun machine
    assert "rerun_mode" not in job_for(kernels=WITH_TE).megatron  # TE: Megatron's own path and default


def test_tensorboard_writes_at_the_log_interval_where_the_launcher_turns_it_on(tmp_path):
    job = job_for(run_dir=tmp_path / "run")
    assert job.megatron["tensorboard_log_interval"] == job.megatron["log_interval"] == 10
    assert any(note.startswith("TensorBoard every 10 iterations") for note in job.notes)
    # Megatron's own log interval where the preset sets none
    preset = load_preset("345m")
    bare = replace(preset, megatron={k: v for k, v in preset.megatron.items() if k != "log_interval"})
    assert resolve(bare, 1, 1, run_dir=tmp_path / "r2").megatron["tensorboard_log_interval"] == 100


def test_a_tensorboard_interval_or_directory_of_the_users_is_kept(tmp_path):
    assert job_for("tensorboard_log_interval=1", run_dir=tmp_path / "a").megatron["tensorboard_log_interval"] == 1
    own = job_for(f"tensorboard_dir={tmp_path / 'tb'}", run_dir=tmp_path / "b")
    assert "tensorboard_log_interval" not in own.megatron  # the user's TensorBoard, Megatron's interval
