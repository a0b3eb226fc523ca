"""The Slurm backend on a real Slurm cluster (scripts/slurm-local.sh up): sbatch's own parser and scheduler,
a 2-node x 2-GPU preflight whose 4 ranks rendezvous through torchrun, and a signal → requeue → resume cycle.

Skipped when no cluster answers (sbatch/sinfo missing, or no SLURM_CONF and no cluster at the default base).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from slurm_support import (
    PRESETS,
    TRAINER,
    cluster_env,
    cluster_shape,
    job_fields,
    render_preset,
    venv_torchrun,
    wait_for_job,
    wait_for_line,
)

from launcher.errors import UserError

pytestmark = pytest.mark.slurm
# Bound on any job here (a requeued one included) on a 2-core machine that other work keeps busy: the tests wait
# for states (a line the job wrote, scontrol's job state), and this only ends one that would otherwise hang.
JOB_SECONDS = 600


@pytest.fixture(scope="module")
def cluster() -> dict[str, str]:
    env = cluster_env()
    if env is None:
        pytest.skip("no local Slurm cluster (start one with: scripts/slurm-local.sh up)")
    return env


@pytest.fixture(scope="module")
def two_by_two(cluster) -> dict[str, str]:
    nodes, gpus = cluster_shape(cluster)
    if nodes < 2 or gpus < 2:
        pytest.skip(f"needs 2 nodes with 2 GPUs each, the cluster has {nodes} x {gpus}")
    return cluster


def sbatch_test_only(script: Path, env: dict[str, str], *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sbatch", "--test-only", *options, str(script)], env=env, capture_output=True,
                          text=True, timeout=30, check=False)


def fitting_size(name: str, nodes: int, gpus: int) -> tuple[int, int] | None:
    """A node count and GPUs per node that the cluster has and the preset's layout accepts, if any."""
    for size in ((None, None), (nodes, gpus), (1, gpus), (nodes, 1), (1, 1)):
        try:
            job, _ = render_preset(name, (), *size)
        except UserError:
            continue
        if job.nodes <= nodes and job.gpus_per_node <= gpus:
            return job.nodes, job.gpus_per_node
    return None


@pytest.mark.parametrize("name", PRESETS)
def test_sbatch_accepts_every_preset(cluster, tmp_path, name):
    """sbatch parses every #SBATCH line and the scheduler finds room, at a size this cluster has.

    A preset too big for any size here (175b needs 128 GPUs for TP 8 x PP 16) is rendered at its own size and
    test-submitted with --nodes/--gpus-per-node on sbatch's command line, which override those two lines.
    """
    nodes, gpus = cluster_shape(cluster)
    size = fitting_size(name, nodes, gpus)
    _, text = render_preset(name, (), *(size or (None, None)), run_dir=tmp_path / name)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    shrink = () if size else (f"--nodes={nodes}", f"--gpus-per-node={gpus}")
    result = sbatch_test_only(script, cluster, *shrink)
    assert result.returncode == 0, result.stderr
    assert re.search(r"Job \d+ to start at", result.stderr), result.stderr


def test_sbatch_refuses_more_nodes_than_the_cluster_has(cluster, tmp_path):
    nodes, gpus = cluster_shape(cluster)
    _, text = render_preset("345m", (f"global_batch_size={4 * (nodes + 1) * gpus}",), nodes + 1, gpus,
                            run_dir=tmp_path)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    result = sbatch_test_only(script, cluster)
    assert result.returncode != 0
    assert "Requested node configuration is not available" in result.stderr


# Jobs that run share the two emulated nodes with other test runs (whole-node jobs would wait for each other);
# test_sbatch_accepts_every_preset submits the default whole-node request (--exclusive, --mem=0) for real.
SHARED_NODES = ("slurm.exclusive=false", "slurm.cpus_per_task=1", "slurm.mem=500M")
SHARED = tuple(word for setting in SHARED_NODES for word in ("--set", setting))


def test_preflight_of_345m_on_two_nodes(launch, two_by_two, tmp_path):
    """4 ranks on n1 and n2 rendezvous through torchrun (c10d on the first node) and all-reduce with gloo."""
    code, out, err = launch("345m", "--preflight", "--submit", "--nodes", "2", "--gpus-per-node", "2",
                            "--set", f"torchrun={venv_torchrun()}", "--set", f"run_root={tmp_path}/runs",
                            *SHARED, env=two_by_two)
    assert code == 0, err
    job_id = out.strip()
    assert job_id.isdigit(), out
    fields = wait_for_job(job_id, two_by_two, timeout=JOB_SECONDS)
    (run_dir,) = (tmp_path / "runs").iterdir()
    log = (run_dir / f"slurm-{job_id}.out").read_text()
    assert fields["JobState"] == "COMPLETED" and fields["ExitCode"] == "0:0", log + _stderr(run_dir, job_id)
    joined = re.findall(r"preflight: joined rank=(\d+) local_rank=(\d+) world_size=(\d+) host=\S+ node=(\S+)", log)
    assert sorted(int(rank) for rank, *_ in joined) == [0, 1, 2, 3]
    assert {world for _, _, world, _ in joined} == {"4"}
    by_node: dict[str, list[str]] = {}
    for _, local_rank, _, node in joined:
        by_node.setdefault(node, []).append(local_rank)
    assert {node: sorted(ranks) for node, ranks in by_node.items()} == {"n1": ["0", "1"], "n2": ["0", "1"]}
    assert "preflight: all_reduce backend=gloo world_size=4 sum=10 expected=10 ok" in log
    bandwidth = re.search(r"preflight: bus_bandwidth=([\d.]+) GB/s", log)
    assert bandwidth and float(bandwidth.group(1)) > 0


def test_signal_requeues_and_the_next_attempt_resumes(launch, two_by_two, tmp_path):
    """The time-limit warning (SIGUSR1 to the batch shell, as --signal=B:USR1@N sends it) → SIGTERM to the ranks
    → checkpoint → requeue → the second attempt has SLURM_RESTART_COUNT=1, resumes from --load, completes.

    The ranks run a stand-in for pretrain_gpt.py (tests/slurm_jobs/resumable_trainer.py) that follows
    Megatron's signal and checkpoint protocol on CPU, given as the Megatron checkout's pretrain_gpt.py.
    """
    job_id, run_dir = _submit_trainer(launch, two_by_two, tmp_path, "train_iters=16", "slurm.max_restarts=1",
                                      "slurm.time=00:10:00", "slurm.signal_seconds=60")
    log_path = run_dir / f"slurm-{job_id}.out"
    wait_for_line(log_path, r"trainer: iteration=3 restart=0", JOB_SECONDS, job_id, two_by_two)
    subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], env=two_by_two, check=True)
    fields = wait_for_job(job_id, two_by_two, timeout=JOB_SECONDS)
    log = log_path.read_text()
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1", log + _stderr(run_dir, job_id)
    saved = re.search(r"trainer: saved checkpoint iteration=(\d+) \(SIGTERM\) restart=0", log)
    assert saved and 3 <= int(saved.group(1)) < 16, log
    assert f"megatron-launch: requeueing job {job_id} (restart 1 of 1)" in log
    assert f"trainer: start iteration={saved.group(1)} world_size=4 restart=1" in log
    assert "trainer: done iteration=16 restart=1" in log
    assert f"job {job_id} attempt 2 on n[1-2]" in log
    checkpoint = run_dir / "checkpoints" / "latest_checkpointed_iteration.txt"
    assert checkpoint.read_text() == "16"


def test_time_limit_warning_reaches_the_batch_shell(launch, two_by_two, tmp_path):
    """Slurm itself sends the #SBATCH --signal=B:USR1@110 warning of a 2-minute job to the batch shell, which
    forwards SIGTERM and, with no restarts allowed, reports the spent budget instead of requeueing; the job
    ends before its limit. (Slurm checks limits about every 30 s, later on a busy machine: the warning is due
    10 s in and leaves more than a minute of slack. It may come before the ranks have started; the checkpoint
    on SIGTERM is the requeue test's business.)"""
    job_id, run_dir = _submit_trainer(launch, two_by_two, tmp_path, "train_iters=400", "slurm.max_restarts=0",
                                      "slurm.time=2", "slurm.signal_seconds=110")
    fields = wait_for_job(job_id, two_by_two, timeout=JOB_SECONDS)
    log, stderr = (run_dir / f"slurm-{job_id}.out").read_text(), _stderr(run_dir, job_id)
    assert fields["JobState"] != "TIMEOUT" and fields["Restarts"] == "0", log + stderr
    assert "megatron-launch: got SIGUSR1, sending SIGTERM to the training processes" in stderr, log + stderr
    assert "megatron-launch: not requeueing: 0 of 0 restarts used" in stderr
    ran = datetime.fromisoformat(fields["EndTime"]) - datetime.fromisoformat(fields["StartTime"])
    assert ran.total_seconds() < 120, fields


def test_chain_holds_each_job_until_the_previous_ends(launch, two_by_two, tmp_path):
    name = f"chain-{uuid.uuid4().hex[:8]}"
    megatron = _fake_megatron(tmp_path)
    code, out, err = launch("345m", "--submit", "--chain", "2", "--nodes", "2", "--gpus-per-node", "2",
                            "--megatron-path", str(megatron), "--set", f"slurm.job_name={name}",
                            "--set", f"run_root={tmp_path}/runs", *SHARED, env=two_by_two)
    ids = out.split()
    try:
        assert code == 0, err
        assert len(ids) == 2
        first, second = (job_fields(job_id, two_by_two) for job_id in ids)
        assert first["JobName"] == second["JobName"] == name
        assert second["Dependency"].startswith("singleton") and second["JobState"] == "PENDING"
        # Slurm names the dependency as the reason once its scheduler has looked at the job; on a busy machine it
        # may first say Resources (the first job's nodes are still another test's)
        deadline = time.monotonic() + 30
        while second["Reason"] != "Dependency" and time.monotonic() < deadline:
            time.sleep(1)
            second = job_fields(ids[1], two_by_two)
        assert second["Reason"] == "Dependency"
    finally:
        subprocess.run(["scancel", *ids], env=two_by_two, check=False)


def _submit_trainer(launch, env: dict[str, str], tmp_path: Path, *settings: str) -> tuple[str, Path]:
    """Submit the 345m preset on 2 x 2 with the stand-in trainer as its pretrain_gpt.py; (job id, run dir)."""
    sets = [word for setting in (f"torchrun={venv_torchrun()}", f"run_root={tmp_path}/runs",
                                 f"slurm.job_name=trainer-{uuid.uuid4().hex[:8]}", *SHARED_NODES, *settings)
            for word in ("--set", setting)]
    code, out, err = launch("345m", "--submit", "--nodes", "2", "--gpus-per-node", "2", "--megatron-path",
                            str(_fake_megatron(tmp_path)), *sets, env=env)
    assert code == 0, err
    (run_dir,) = (tmp_path / "runs").iterdir()
    return out.strip(), run_dir


def _fake_megatron(tmp_path: Path) -> Path:
    """A "Megatron-LM checkout" whose pretrain_gpt.py is the stand-in trainer."""
    megatron = tmp_path / "megatron-lm"
    megatron.mkdir()
    shutil.copy(TRAINER, megatron / "pretrain_gpt.py")
    return megatron


def _stderr(run_dir: Path, job_id: str) -> str:
    """The job's stderr for a failure message, without torchrun's OMP_NUM_THREADS banner."""
    err = run_dir / f"slurm-{job_id}.err"
    lines = err.read_text(errors="replace").splitlines() if err.exists() else []
    banner = re.compile(r"run\.py:\d+\] (\**|Setting OMP_NUM_THREADS.*)$")
    return "\n--- stderr ---\n" + "\n".join(line for line in lines if not banner.search(line))


def _submit_failing_at_start(launch, cluster, tmp_path, *overrides: str) -> tuple[dict[str, str], str]:
    """Submit a 345m job that must stop before torchrun; (its final scontrol fields, its stderr)."""
    megatron = tmp_path / "megatron-lm"
    megatron.mkdir()
    (megatron / "pretrain_gpt.py").write_text("raise SystemExit('training must not start')\n")
    code, out, err = launch("345m", "--submit", "--nodes", "1", "--gpus-per-node", "1", *overrides,
                            "--set", f"torchrun={venv_torchrun()}", "--set", f"run_root={tmp_path}/runs",
                            "--megatron-path", str(megatron), env=cluster)
    assert code == 0, err
    job_id = out.strip()
    fields = wait_for_job(job_id, cluster, timeout=JOB_SECONDS)
    (run_dir,) = (tmp_path / "runs").iterdir()
    return fields, (run_dir / f"slurm-{job_id}.err").read_text()


def test_bare_metal_job_stops_at_start_when_a_node_lacks_the_kernels_its_flags_assume(launch, cluster, tmp_path):
    """The flags say TE; the node has none: the job ends with the launcher's message, before torchrun."""
    fields, err = _submit_failing_at_start(launch, cluster, tmp_path, "--set", "transformer_engine=true",
                                           "--set", "apex=false")
    assert fields["JobState"] == "FAILED" and fields["ExitCode"] == "2:0", err
    assert "error: transformer_impl transformer_engine (Megatron's default) needs Transformer Engine, which is " \
           "not installed on " in err
    assert "training must not start" not in err


def test_job_stops_at_start_when_a_node_lacks_a_package_its_settings_need(launch, cluster, tmp_path):
    """345m saves asynchronously with a persistent writer; Megatron's default strategy (nvrx) needs
    nvidia-resiliency-ext, which the nodes lack: the launcher's message at job start, not an exception at the
    first save hours later."""
    started = time.monotonic()
    fields, err = _submit_failing_at_start(launch, cluster, tmp_path, "--set", "async_strategy=nvrx")
    assert time.monotonic() - started < 60 + 30  # the job itself ends within 60 s; submission and polling aside
    assert fields["JobState"] == "FAILED" and fields["ExitCode"] == "2:0", err
    assert "error: async_save with async_strategy nvrx needs nvidia-resiliency-ext >= 0.6.0, which is not " \
           "installed on " in err
    assert "hint: set async_strategy=mcore or install nvidia-resiliency-ext" in err
    assert "training must not start" not in err


def test_job_stops_at_start_when_its_node_cannot_see_the_data(launch, cluster, tmp_path):
    fields, err = _submit_failing_at_start(launch, cluster, tmp_path, "--set", "mock_data=false",
                                           "--set", f"data_path={tmp_path}/cluster/web_text_document")
    assert fields["JobState"] == "FAILED" and fields["ExitCode"] == "2:0", err
    assert f"{tmp_path}/cluster/web_text_document.bin" in err and "training must not start" not in err
