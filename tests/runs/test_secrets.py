"""Secrets given to a launch (env.*TOKEN*, *KEY*, …) never reach the run directory in clear."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


# -- one rule for every value of every file: by name, by form, a URL's password included ---------------------------

TOKEN = "hf_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
URL_PASSWORD = "pw-9f3e1"
NO_KERNELS = ("--set", "transformer_engine=false", "--set", "apex=false")
CLUSTER_VALUES = ("--set", f"k8s.image=user:{TOKEN}@registry.example/megatron:1",
                  "--set", f"env.DATABASE_URL=postgres://u:{URL_PASSWORD}@db.example/runs",
                  "--set", f"wandb_exp_name={TOKEN}", "--set", f"env.PLAIN_URL=https://joe:{URL_PASSWORD}@h.example/")


def _no_secret_in(run_dir: Path) -> None:
    for secret in (TOKEN, URL_PASSWORD):
        assert files_holding(run_dir, secret) == [], secret


def test_a_kubernetes_run_directory_holds_no_credential_of_any_setting(launch_cli_env, tmp_path):
    result = launch_cli_env(tmp_path, "toy", "--k8s", "--gpus-per-node", "2", *NO_KERNELS,
                            "--set", "k8s.secret=job-secrets",
                            "--set", f"run_root={tmp_path}/runs", *CLUSTER_VALUES)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    _no_secret_in(run_dir)
    jobset = (run_dir / "jobset.yaml").read_text()
    assert "secretKeyRef" in jobset and "name: DATABASE_URL" in jobset  # the pod reads it from the Secret
    assert "postgres://" not in jobset


def test_a_slurm_run_directory_holds_no_credential_of_any_setting(launch_cli_env, tmp_path):
    result = launch_cli_env(tmp_path, "toy", "--slurm", "--gpus-per-node", "2", *NO_KERNELS,
                            "--set", f"run_root={tmp_path}/runs",
                            "--set", f"slurm.container_image=user:{TOKEN}@registry.example/megatron:1",
                            *CLUSTER_VALUES[2:])
    assert result.returncode == 0, result.stderr
    _no_secret_in(only_run_dir(tmp_path))


def test_a_local_run_directory_holds_no_credential_of_any_setting(tmp_path):
    torchrun = stand_in(tmp_path, "toy_fp32_1gpu.log")
    result = launch(tmp_path, "toy", "--set", f"torchrun={torchrun}", "--set", "train_iters=100", *CLUSTER_VALUES[2:])
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    _no_secret_in(run_dir)
    assert "DATABASE_URL=<redacted>" not in (run_dir / "command.sh").read_text()
    assert 'export DATABASE_URL="${DATABASE_URL:?' in (run_dir / "command.sh").read_text()


def test_import_writes_no_token_expanded_into_a_flag(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text(f"export HF_TOKEN=plainvalue123\nexport DB=postgres://u:{URL_PASSWORD}@h/db\n"
                      "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 "
                      "--num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 "
                      "--global-batch-size 8 --lr 1e-4 --train-iters 10 --mock-data --tokenizer-type NullTokenizer "
                      "--vocab-size 1000 --wandb-exp-name $HF_TOKEN --wandb-project $DB\n")
    result = subprocess.run([sys.executable, "-m", "launcher", "import", str(script), "-o", str(tmp_path / "out.yaml")],
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
                            capture_output=True, text=True, timeout=120, check=False)
    text = (tmp_path / "out.yaml").read_text()
    assert "plainvalue123" not in text and URL_PASSWORD not in text, text
    assert "plainvalue123" not in result.stdout + result.stderr
    assert "wandb_exp_name: <redacted>" in text


def test_a_url_password_is_a_secret_by_its_form():
    from launcher import redaction
    for value in (f"postgres://u:{URL_PASSWORD}@h/db", f"user:{URL_PASSWORD}@registry.example/x:1",
                  f"redis://:{URL_PASSWORD}@cache:6379"):
        assert redaction.has_secret_form(value) and URL_PASSWORD not in redaction.scrub(value)
    for value in ("nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io/x@sha256:abcd", "git@github.com:org/repo",
                  "host:8080", "postgres://h/db"):
        assert not redaction.has_secret_form(value) and redaction.scrub(value) == value


@pytest.fixture
def launch_cli_env():
    def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
                              timeout=120, check=False)
    return run


def test_colon_at_words_that_are_no_login_stay_as_written():
    # sbatch's own `--signal=B:USR1@300` was written as B:<redacted>@300, which sbatch refuses
    from launcher import redaction

    for text in ("--signal=B:USR1@300", "a:b@c", "12:30@4"):
        assert redaction.scrub(text) == text and not redaction.has_secret_form(text)
    assert redaction.scrub("u:tok@registry.example.com:5000/img") == "u:<redacted>@registry.example.com:5000/img"
