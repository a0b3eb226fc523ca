"""Shared pieces of the Slurm tests: jobs rendered from the shipped presets, and the local cluster's state."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from launcher.backends import slurm
from launcher.checks.data import check_job_data
from launcher.errors import UserError
from launcher.megatron.pin import Kernels
from launcher.pipeline.command import build_command
from launcher.pipeline.elastic import attempt_range
from launcher.pipeline.node_range import NodeRange
from launcher.pipeline.preset import available_presets, load_preset
from launcher.pipeline.resolve import Placement, kernels_of, resolve, target_for

REPO = Path(__file__).resolve().parent.parent
GOLDEN_DIR = Path(__file__).resolve().parent / "golden" / "slurm"
TRAINER = Path(__file__).resolve().parent / "slurm_jobs" / "resumable_trainer.py"
# Fixed paths keep the golden files independent of the machine and the clock.
GOLDEN_MEGATRON = Path("/opt/megatron-lm")
GOLDEN_RUNS = Path("/shared/runs")
DEFAULT_CLUSTER_BASE = Path("/tmp/megatron-launch-slurm")
FINISHED_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                   "DEADLINE", "PREEMPTED"}

PRESETS = available_presets()


def preset_kernels(preset) -> Kernels:
    """The preset's own kernel setting; "auto" counts as absent so nothing depends on this machine."""
    te, apex = preset.launcher.transformer_engine, preset.launcher.apex
    return Kernels(te is True, apex is True, "preset")


def render_preset(name: str, overrides: tuple[str, ...] = (), nodes: int | NodeRange | None = None,
                  gpus_per_node: int | None = None, preflight: bool = False,
                  run_dir: Path | None = None, megatron_path: Path = GOLDEN_MEGATRON) -> tuple[slurm.BatchJob, str]:
    preset = load_preset(name, list(overrides))
    target: Placement = target_for(preset, slurm=True)
    # A container image decides its own kernels (an NGC image: TE and apex); on bare metal, the preset's.
    kernels = kernels_of(preset, target) if target.container_image else preset_kernels(preset)
    settings = dict(kernels=kernels, megatron_path=megatron_path, target=target,
                    run_dir=run_dir or GOLDEN_RUNS / name, preflight=preflight, data_check=check_job_data)
    if isinstance(nodes, NodeRange):  # --nodes MIN-MAX: judged at each count
        resolved, problems = attempt_range(preset, nodes, gpus_per_node, **settings)
        if problems:
            raise UserError(problems)
    else:
        resolved = resolve(preset, nodes, gpus_per_node, **settings)
    job = slurm.prepare_job(resolved, build_command(resolved)).job
    return job, slurm.render_batch_script(job)


def venv_torchrun() -> str:
    """torchrun next to the interpreter running the tests (the venv that has torch)."""
    candidate = Path(sys.executable).parent / "torchrun"
    return str(candidate) if candidate.exists() else "torchrun"


# -- the local cluster (scripts/slurm-local.sh) ---------------------------------------------------------------


def cluster_env() -> dict[str, str] | None:
    """Environment for Slurm clients, or None when no local cluster answers."""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return None
    env = dict(os.environ)
    if "SLURM_CONF" not in env:
        conf = Path(os.environ.get("SLURM_LOCAL_BASE", DEFAULT_CLUSTER_BASE)) / "etc" / "slurm.conf"
        if not conf.exists():
            return None
        env["SLURM_CONF"] = str(conf)
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %G %t"], env=env, capture_output=True, text=True,
                             timeout=10, check=False)
    except subprocess.TimeoutExpired:
        return None
    return env if out.returncode == 0 and out.stdout.strip() else None


def cluster_shape(env: dict[str, str]) -> tuple[int, int]:
    """(nodes, GPUs on the smallest node) of the cluster."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %G"], env=env, capture_output=True, text=True,
                         check=True).stdout
    nodes: dict[str, int] = {}
    for line in out.splitlines():
        node, gres = line.split(maxsplit=1)
        match = re.search(r"gpu(?::[^:(]+)?:(\d+)", gres)
        nodes[node] = int(match.group(1)) if match else 0
    return len(nodes), min(nodes.values(), default=0)


def job_fields(job_id: str, env: dict[str, str]) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], env=env, capture_output=True, text=True,
                         check=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def wait_for_job(job_id: str, env: dict[str, str], timeout: float) -> dict[str, str]:
    """Poll until the job has finished (through any requeues); its final scontrol fields."""
    deadline = time.monotonic() + timeout
    while True:
        fields = job_fields(job_id, env)
        if fields.get("JobState") in FINISHED_STATES:
            return fields
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], env=env, check=False)
            raise AssertionError(f"job {job_id} not finished after {timeout} s: {fields.get('JobState')}")
        time.sleep(0.3)


def wait_for_line(path: Path, pattern: str, timeout: float, job_id: str, env: dict[str, str]) -> str:
    deadline, state = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        if path.exists():
            for line in path.read_text(errors="replace").splitlines():
                if re.search(pattern, line):
                    return line
        state = job_fields(job_id, env).get("JobState")
        if state in FINISHED_STATES:
            break
        time.sleep(0.3)
    text = path.read_text(errors="replace") if path.exists() else "(no log)"
    raise AssertionError(f"{pattern!r} not in {path} ({state}):\n{text}")


def sacct_states(job_id: str, env: dict[str, str]) -> list[str]:
    """The job's state in Slurm's accounting, one per attempt, oldest first ("CANCELLED by 0" is CANCELLED)."""
    out = subprocess.run(["sacct", "-j", job_id, "--duplicates", "--allocations", "--noheader", "--parsable2",
                          "--format=Start,State"], env=env, capture_output=True, text=True, timeout=30, check=False)
    records = sorted(line.split("|") for line in out.stdout.splitlines() if "|" in line)
    return [state.split()[0] for _, state in records if state]


def wait_for_sacct(job_id: str, env: dict[str, str], attempts: int, timeout: float) -> list[str]:
    """The accounting of a finished job that ran `attempts` times: slurmctld sends it to slurmdbd on its own
    time, so wait until every attempt's record is there, the last with a final state."""
    deadline = time.monotonic() + timeout
    while True:
        states = sacct_states(job_id, env)
        if len(states) >= attempts and states[-1] in FINISHED_STATES or time.monotonic() > deadline:
            return states
        time.sleep(0.3)


def free_port() -> int:
    """A TCP port free now on this machine: a job's own rendezvous port, so that no earlier job's torchrun still
    holding the default 29500 fails the next attempt's rendezvous (an infrastructure failure the test did not make)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
