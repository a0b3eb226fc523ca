"""`--set slurm.X` / `--set k8s.X` on a job that runs elsewhere is said: the setting was typed for a cluster the job
does not use (most often a forgotten --slurm)."""

from __future__ import annotations

from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import HERE, Placement, resolve


def _said(overrides: list[str], target: Placement) -> list[str]:
    job = resolve(load_preset("345m", overrides), 1, 1, target=target)
    return [w for w in job.warnings if w.startswith("--set ")]


def test_a_slurm_setting_on_a_job_here_is_said() -> None:
    (warning,) = _said(["slurm.partition=gpu"], HERE)
    assert warning.startswith("--set slurm.partition: only a job for Slurm (--slurm or --submit) uses it")
    assert "runs here" in warning


def test_a_kubernetes_setting_on_a_slurm_job_is_said_and_the_slurm_one_is_not() -> None:
    (warning,) = _said(["slurm.partition=gpu", "k8s.namespace=team"], Placement(slurm=True))
    assert warning.startswith("--set k8s.namespace: only a job for Kubernetes (--k8s) uses it")
    assert "runs on Slurm" in warning


def test_settings_the_job_uses_are_not_said() -> None:
    assert _said(["slurm.partition=gpu", "lr=3e-4", "env.NCCL_DEBUG=INFO"], Placement(slurm=True)) == []
    assert _said(["lr=3e-4"], HERE) == []
