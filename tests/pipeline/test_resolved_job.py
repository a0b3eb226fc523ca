"""The ResolvedJob holds everything the run gets, immutable all the way down; `added` is what the launcher decided;
the preset stays as written and `megatron` is every setting passed."""

import dataclasses

import pytest

from launcher.pipeline.command import build_command
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve


def test_added_holds_the_micro_batch_the_launcher_picked():
    job = resolve(load_preset("345m"), 1, 1)
    assert job.added["micro_batch_size"] == 32
    assert job.preset.megatron.get("micro_batch_size") is None  # as written: left open


def test_added_holds_the_toy_one_gpu_fallback():
    job = resolve(load_preset("toy"), 1, 1)
    assert (job.entry, job.added["tensor_model_parallel_size"], job.megatron["tensor_model_parallel_size"]) == (
        "pretrain_gpt", 1, 1)
    assert job.preset.megatron["tensor_model_parallel_size"] == 2


def test_every_passed_setting_the_preset_did_not_write_is_in_added(tmp_path):
    job = resolve(load_preset("345m"), 1, 2, run_dir=tmp_path / "run")
    written = job.preset.megatron
    assert {dest for dest, value in job.megatron.items() if written.get(dest, object()) != value} == set(job.added)
    assert {"save", "load", "tensorboard_dir", "micro_batch_size", "transformer_impl"} <= set(job.added)


def test_the_argv_is_the_passed_settings_not_the_written_ones():
    job = resolve(load_preset("345m"), 1, 1)
    flags = build_command(job).script_args
    assert flags[flags.index("--micro-batch-size") + 1] == "32"


@pytest.mark.parametrize("mapping", ["megatron", "added", "kernel_flags"])
def test_the_jobs_mappings_cannot_be_changed(mapping):
    job = resolve(load_preset("345m"), 1, 1)
    with pytest.raises(TypeError):
        getattr(job, mapping)["lr"] = 1.0


def test_the_jobs_environment_cannot_be_changed():
    job = resolve(load_preset("345m", ["tensor_model_parallel_size=2"]), 1, 2)
    with pytest.raises(TypeError):
        job.environment.exported["CUDA_DEVICE_MAX_CONNECTIONS"] = "8"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.rdzv_port = 1  # type: ignore[misc]
