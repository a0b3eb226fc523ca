"""Helpers for the real-GPU runs: `launch` as a user types it, on this machine's GPUs.

Skipped where CUDA GPUs or the Megatron-LM checkout are missing. MEGATRON_LM_PATH (or the submodule) must hold
the pinned checkout; GPU_TEST_RUN_ROOT (default: a pytest temp dir) is where run directories go.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from launcher.backends.local import visible_gpus
from launcher.megatron.pin import ENTRY_SCRIPTS, megatron_path
from launcher.runs import logparse

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = int(os.environ.get("GPU_TEST_TIMEOUT_S", "600"))


def gpu_count() -> int:
    return visible_gpus()


def needs_gpus(count: int):
    have = gpu_count()
    checkout = megatron_path(None, None) / ENTRY_SCRIPTS["pretrain_gpt"]
    return [
        pytest.mark.gpu,
        pytest.mark.skipif(have < count, reason=f"needs {count} CUDA GPU(s), found {have}"),
        pytest.mark.skipif(not checkout.is_file(), reason=f"no Megatron-LM checkout at {checkout.parent}"),
    ]


def first_gpus(count: int) -> str:
    """CUDA_VISIBLE_DEVICES for the first `count` visible GPUs."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [d.strip() for d in visible.split(",")] if visible else [str(i) for i in range(gpu_count())]
    return ",".join(ids[:count])


@dataclass
class Run:
    code: int
    stdout: str
    run_dir: Path | None

    def summary(self) -> dict:
        return json.loads((self.run_dir / "summary.json").read_text())

    def log_lines(self, attempt: int = 1) -> list[str]:
        return (self.run_dir / "logs" / f"attempt-{attempt}.log").read_text(errors="replace").splitlines()

    def iterations(self, attempt: int = 1) -> list[logparse.IterationLine]:
        return [e for e in logparse.parse_lines(self.log_lines(attempt)) if isinstance(e, logparse.IterationLine)]

    def tracker(self) -> int | None:
        tracker = self.run_dir / "checkpoints" / "latest_checkpointed_iteration.txt"
        return int(tracker.read_text().strip()) if tracker.is_file() else None


def launch_env(gpus: int, run_root: Path) -> dict[str, str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": first_gpus(gpus), "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = f"{REPO}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(REPO)
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off on shared hosts
    return env


def launch_argv(*args: str, run_root: Path) -> list[str]:
    return [sys.executable, "-m", "launcher", *args, "--set", f"run_root={run_root}"]


def run_dir_of(stdout: str) -> Path | None:
    for line in stdout.splitlines():
        if line.startswith("# run directory: "):
            return Path(line.removeprefix("# run directory: ").strip())
    return None


@pytest.fixture
def run_root(tmp_path) -> Path:
    root = os.environ.get("GPU_TEST_RUN_ROOT")
    return Path(root) if root else tmp_path


@pytest.fixture
def launch_gpu(run_root):
    """launch(*args, gpus=N) → Run, the launcher as a subprocess on the first N GPUs."""

    def run(*args: str, gpus: int) -> Run:
        proc = subprocess.run(launch_argv(*args, run_root=run_root), env=launch_env(gpus, run_root), cwd=run_root,
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        return Run(proc.returncode, proc.stdout + proc.stderr, run_dir_of(proc.stdout))

    return run
