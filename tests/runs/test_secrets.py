"""Secrets given to a launch (env.*TOKEN*, *KEY*, …) never reach the run directory in clear."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from launcher.runs import secrets
from tests.runs.test_launch_run_dir import launch, only_run_dir, stand_in

SECRET = "s3cr3t-value-7f1c"
OTHER = "an0ther-s3cr3t-99"


def files_holding(run_dir: Path, text: str) -> list[Path]:
    return [p for p in run_dir.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_a_run_directory_holds_no_secret_in_clear(tmp_path):
    torchrun = stand_in(tmp_path, "toy_fp32_1gpu.log")
    preset = tmp_path / "p.yaml"
    preset.write_text(f"base: toy\nlauncher:\n  env:\n    WANDB_API_KEY: {OTHER}\n    PLAIN: visible\n")
    result = launch(tmp_path, str(preset), "--set", f"torchrun={torchrun}", "--set", "train_iters=100",
                    "--set", f"env.HF_TOKEN={SECRET}", f"--set=env.DB_PASSWORD={SECRET}")
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    assert files_holding(run_dir, SECRET) == [] and files_holding(run_dir, OTHER) == []
    assert files_holding(run_dir, "visible")  # only secrets are redacted
    assert "env.HF_TOKEN=<redacted>" in (run_dir / "manifest.json").read_text()
    # The child got the real values; command.sh takes them from the environment it runs in.
    command = (run_dir / "command.sh").read_text()
    assert 'export HF_TOKEN="${HF_TOKEN:?' in command


def test_resume_takes_secrets_from_the_environment(tmp_path):
    torchrun = stand_in(tmp_path, "toy_fp32_1gpu.log")
    result = launch(tmp_path, "toy", "--set", f"torchrun={torchrun}", "--set", "train_iters=100",
                    "--set", f"env.HF_TOKEN={SECRET}")
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    result = launch(tmp_path, "--resume", str(run_dir), "--set", f"torchrun={torchrun}")
    assert result.returncode == 2 and "does not store the secret(s) HF_TOKEN" in result.stderr
    os.environ["HF_TOKEN"] = SECRET
    try:
        result = launch(tmp_path, "--resume", str(run_dir), "--set", f"torchrun={torchrun}")
    finally:
        del os.environ["HF_TOKEN"]
    assert result.returncode == 0, result.stderr
    assert files_holding(run_dir, SECRET) == []


def test_slurm_script_names_secrets_without_holding_them(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    result = subprocess.run([sys.executable, "-m", "launcher", "345m", "--slurm", "--megatron-path",
                             "/opt/megatron-lm", "--set", f"env.HF_TOKEN={SECRET}"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert files_holding(run_dir, SECRET) == []
    assert 'export HF_TOKEN="${HF_TOKEN:?' in (run_dir / "job.sbatch").read_text()


def test_one_redaction_rule():
    assert secrets.redact_argv(["launch", "--set", "env.MY_TOKEN=x", "--set=env.API_KEY=y", "lr=1", "env.A=z"]) == [
        "launch", "--set", "env.MY_TOKEN=<redacted>", "--set=env.API_KEY=<redacted>", "lr=1", "env.A=z"]
    assert secrets.redact_env({"AWS_SECRET_ACCESS_KEY": "x", "PATH": "/bin"}) == {
        "AWS_SECRET_ACCESS_KEY": "<redacted>", "PATH": "/bin"}
    assert secrets.redact_preset({"launcher": {"env": {"HF_TOKEN": "x"}}}) == {
        "launcher": {"env": {"HF_TOKEN": "<redacted>"}}}
