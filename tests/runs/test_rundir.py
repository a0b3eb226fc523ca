"""Run directories: atomic creation, refused overwrite, manifest contents, resume."""

import json
import os
import stat
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
import yaml

import launcher
from launcher.errors import UserError
from launcher.pipeline.run_paths import run_dir_megatron_args
from launcher.runs import rundir

NOW = datetime(2026, 11, 29, 16, 1, 50, tzinfo=UTC)


@dataclass(frozen=True)
class Preset:  # the fields of launcher.pipeline.preset.Preset that a run directory records
    name: str
    megatron: dict
    launcher: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Job:  # the fields of a ResolvedJob that a run directory records
    preset: Preset
    nodes: int = 1
    gpus_per_node: int = 2
    layout: dict = field(default_factory=lambda: {"tp": 1, "pp": 1, "dp": 2})


@dataclass(frozen=True)
class Command:
    argv: list
    env: dict
    unset: tuple = ()


def make(tmp_path, megatron=None):
    megatron = megatron or {"num_layers": 2, "train_iters": 100, "seq_length": 64}
    path = rundir.new_run_dir_path(tmp_path / "runs", "toy", NOW)
    megatron = {**megatron, **run_dir_megatron_args(path, megatron)}
    argv = ["torchrun", "--nproc-per-node", "2", "pretrain_gpt.py", "--save", megatron["save"],
            "--data-path", "a path with spaces;rm -rf /"]
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "WANDB_API_KEY": "s3cret"}
    job = Job(Preset("toy", megatron, {"entry": "pretrain_gpt"}))
    made = rundir.create_run_dir(job, Command(argv, env), ["lr=3e-4"], run_dir=path,
                                 megatron_path=launcher_root())
    return made, argv


def launcher_root():
    from pathlib import Path
    return Path(launcher.__file__).resolve().parent.parent


def test_layout_and_manifest(tmp_path):
    path, argv = make(tmp_path)
    assert path.name == "toy-20261129T160150Z"
    assert sorted(p.name for p in path.iterdir()) == [
        "checkpoints", "command.sh", "logs", "manifest.json", "preset.yaml", "tensorboard"]
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no staging left behind
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["launcher"]["version"] == launcher.__version__
    assert manifest["world"] == {"nodes": 1, "gpus_per_node": 2, "world_size": 2}
    assert manifest["layout"] == {"tp": 1, "pp": 1, "dp": 2}
    assert manifest["overrides"] == ["lr=3e-4"]
    assert manifest["megatron_lm"]["expected_commit"] == launcher.MEGATRON_COMMIT
    assert set(manifest["packages"]) >= {"megatron-core", "torch", "transformer-engine", "apex",
                                         "cuda (torch build)"}
    assert manifest["attempts"][0]["argv"] == argv
    assert manifest["attempts"][0]["env"]["WANDB_API_KEY"] == "<redacted>"
    assert manifest["hosts"] and manifest["checkpoint_dir"] == str(path.absolute() / "checkpoints")
    preset = yaml.safe_load((path / "preset.yaml").read_text())
    assert preset["megatron"]["save"] == preset["megatron"]["load"] == manifest["checkpoint_dir"]
    assert preset["megatron"]["tensorboard_dir"] == str(path.absolute() / "tensorboard")
    assert preset["megatron"]["save_interval"] == 100


def test_versions_come_from_metadata_without_importing_torch(tmp_path):
    import importlib.metadata
    import subprocess
    import sys

    code = ("import sys, launcher.runs.rundir as r; v = r.package_versions(); "
            "assert 'torch' not in sys.modules; print(v['torch'], v['cuda (torch build)'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=launcher_root()).stdout.split()
    try:
        assert out[0] == importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        assert out[0] == "None"


def test_command_script_is_quoted_and_runnable(tmp_path):
    path, argv = make(tmp_path)
    script = (path / "command.sh").read_text()
    assert stat.S_IMODE(os.stat(path / "command.sh").st_mode) & 0o100
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in script
    assert "'a path with spaces;rm -rf /'" in script and "s3cret" not in script
    # bash parses the last line back into exactly the argv (checked by a shell, not by string compare)
    import subprocess
    echoed = subprocess.run(["bash", "-c", "set -- " + script.splitlines()[-1] + '; printf "%s\\n" "$@"'],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    assert echoed == argv


def test_existing_directory_is_never_overwritten(tmp_path):
    path, _ = make(tmp_path)
    before = (path / "manifest.json").read_bytes()
    with pytest.raises(UserError, match="already exists"):
        rundir.write_run_dir(path, preset={"name": "toy"}, manifest={}, argv=["x"], env={})
    assert (path / "manifest.json").read_bytes() == before
    # a launch in the same second gets its own directory
    assert rundir.new_run_dir_path(tmp_path / "runs", "toy", NOW).name == "toy-20261129T160150Z-2"


def test_failed_write_leaves_nothing(tmp_path):
    target = tmp_path / "runs" / "toy-x"
    with pytest.raises(TypeError):
        rundir.write_run_dir(target, preset={"name": "toy"}, manifest={"bad": object()}, argv=["x"], env={})
    assert not target.exists() and list((tmp_path / "runs").iterdir()) == []


def test_resume_reuses_the_checkpoint_directory(tmp_path):
    path, _ = make(tmp_path)
    (path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("50")
    run = rundir.open_run_dir(path)
    args = run.resume_megatron_args()
    assert args["save"] == args["load"] == str(path.absolute() / "checkpoints")
    rundir.record_attempt(run, ["torchrun", "again"], {"A": "1"})
    manifest = json.loads((path / "manifest.json").read_text())
    assert [a["argv"] for a in manifest["attempts"]][-1] == ["torchrun", "again"]
    assert len(manifest["attempts"]) == 2


def test_preset_checkpoint_dir_is_kept(tmp_path):
    path, _ = make(tmp_path, {"train_iters": 10, "save": "/lustre/ckpt/gpt", "save_interval": 5})
    preset = yaml.safe_load((path / "preset.yaml").read_text())
    assert preset["megatron"]["save"] == preset["megatron"]["load"] == "/lustre/ckpt/gpt"
    assert preset["megatron"]["save_interval"] == 5
    assert rundir.open_run_dir(path).checkpoint_dir == "/lustre/ckpt/gpt"


def test_wandb_flags_only_when_the_preset_configures_it(tmp_path):
    plain = run_dir_megatron_args(tmp_path / "r", {"train_iters": 1})
    assert not any(key.startswith("wandb") for key in plain)
    wandb = run_dir_megatron_args(tmp_path / "r", {"train_iters": 1, "wandb_project": "gpt"})
    assert wandb["wandb_save_dir"].endswith("/r/wandb") and wandb["wandb_exp_name"] == "r"


@pytest.mark.parametrize("damage", ["missing", "not-json", "file"])
def test_not_a_run_directory(tmp_path, damage):
    target = tmp_path / "x"
    if damage == "file":
        target.write_text("")
    else:
        target.mkdir()
        (target / "preset.yaml").write_text("name: toy\n")
        if damage == "not-json":
            (target / "manifest.json").write_text("{truncated")
    with pytest.raises(UserError, match="run directory"):
        rundir.open_run_dir(target)


def test_long_runs_save_periodically_and_keep_every_tenth(tmp_path):
    """175b as shipped: 95,368 iterations would otherwise save only at the end (a node failure loses days)."""
    long = run_dir_megatron_args(tmp_path, {"train_samples": 146484375, "global_batch_size": 1536})
    assert (long["save_interval"], long["save_retain_interval"]) == (1000, 10000)
    kept = run_dir_megatron_args(tmp_path, {"train_iters": 50000, "save_retain_interval": 5000})
    assert kept["save_interval"] == 1000 and "save_retain_interval" not in kept  # the preset's own stays


def test_short_runs_save_at_the_end_when_the_preset_gives_no_interval(tmp_path):
    by_iters = run_dir_megatron_args(tmp_path, {"train_iters": 500})
    by_samples = run_dir_megatron_args(tmp_path, {"train_samples": 1001, "global_batch_size": 10})
    # Megatron trains 1001 // 10 = 100 iterations (training.py update_train_iters): the last one saves
    assert (by_iters["save_interval"], by_samples["save_interval"]) == (500, 100)
    assert run_dir_megatron_args(tmp_path, {"train_iters": 500, "save_interval": 50}).get(
        "save_interval") is None  # the preset's own stays
