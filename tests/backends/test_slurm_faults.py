"""Unplanned faults on a real Slurm cluster lose at most one save interval: a preemption (`scontrol requeue`),
a rank killed (SIGKILL) while it writes a checkpoint, and a node whose slurmd dies mid-job (NODE_FAIL).
Each time the job comes back within its restart budget and resumes from the last complete checkpoint, the
job's log in the run directory says how every attempt ended, Slurm's accounting (sacct, from the cluster's
slurmdbd) records each attempt's state, and `launch report` shows both.

Every wait is for a state: a line the job wrote, a job state or restart count from scontrol, a record in sacct.
The time bounds only end a test that would otherwise hang; none of them is a guess at how long something takes.

The ranks run the stand-in trainer (tests/slurm_jobs/resumable_trainer.py), which writes checkpoints in
Megatron's order (files, then the tracker). These tests start a second cluster of their own with
scripts/slurm-local.sh (its own directory, nodes and ports per session; a silent node is declared down after
5 s instead of 300 s), because they kill its daemons; the shared cluster's jobs are never touched. Skipped where
that cluster cannot start (no Slurm packages, not root).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from slurm_support import (
    REPO,
    TRAINER,
    free_port,
    job_fields,
    sacct_states,
    venv_torchrun,
    wait_for_job,
    wait_for_line,
    wait_for_sacct,
)

pytestmark = pytest.mark.slurm


# One cluster per test session: its own directory, node names and ports, so that sessions running at the same
# time (other checkouts, CI jobs) never start, use or stop each other's cluster.
SESSION = uuid.uuid4().hex[:4]
BASE = Path(f"/tmp/mlaunch-faults-{SESSION}")
NODE = f"f{SESSION}"  # nodes f<session>1 and f<session>2
JOB_SECONDS = 600  # bound on one job with a requeue, on a 2-core machine that other work keeps busy
# The budget each job has (slurm.max_restarts): one more than the fault costs, so that a second, unexpected
# restart shows up as a wrong count in the assertions instead of as a job that ends early.
MAX_RESTARTS = 2


@pytest.fixture(scope="module")
def faults_cluster() -> dict[str, str]:
    if shutil.which("slurmctld") is None or os.geteuid() != 0:
        pytest.skip("needs the Slurm packages and root to start a cluster of its own (scripts/slurm-local.sh)")
    script = [str(REPO / "scripts" / "slurm-local.sh")]
    controller, first_node, dbd = _free_ports()
    env = {**os.environ, "SLURM_LOCAL_PREFIX": NODE, "SLURM_LOCAL_PORT": str(controller),
           "SLURM_LOCAL_NODE_PORT": str(first_node), "SLURM_LOCAL_DBD_PORT": str(dbd),
           "SLURM_LOCAL_SLURMD_TIMEOUT": "5"}
    started = subprocess.run([*script, "up", str(BASE)], env=env, capture_output=True, text=True, timeout=300,
                             check=False)
    if started.returncode != 0:
        pytest.skip(f"the fault-test cluster did not start: {started.stderr.strip()[-500:]}")
    try:
        yield {**os.environ, "SLURM_CONF": str(BASE / "etc" / "slurm.conf")}
    finally:
        subprocess.run([*script, "down", str(BASE)], env=env, capture_output=True, timeout=120, check=False)
        shutil.rmtree(BASE, ignore_errors=True)


def submit_trainer(launch, env: dict[str, str], tmp_path: Path, *settings: str) -> tuple[str, Path]:
    """The 345m preset on 2 nodes x 2 GPUs with the stand-in trainer as pretrain_gpt.py; (job id, run dir)."""
    megatron = tmp_path / "megatron-lm"
    megatron.mkdir()
    shutil.copy(TRAINER, megatron / "pretrain_gpt.py")
    sets = [word for setting in (f"torchrun={venv_torchrun()}", f"run_root={tmp_path}/runs",
                                 f"slurm.job_name=faults-{uuid.uuid4().hex[:8]}", f"slurm.rdzv_port={free_port()}",
                                 "slurm.time=00:10:00", f"slurm.max_restarts={MAX_RESTARTS}", "save_interval=4",
                                 "env.TRAINER_SECONDS_PER_ITER=0.3", *settings)
            for word in ("--set", setting)]
    code, out, err = launch("345m", "--submit", "--nodes", "2", "--gpus-per-node", "2", "--megatron-path",
                            str(megatron), *sets, env=env)
    assert code == 0, err
    (run_dir,) = (tmp_path / "runs").iterdir()
    return out.strip(), run_dir


def test_preemption_by_requeue_resumes_from_the_checkpoint_saved_on_sigterm(launch, faults_cluster, tmp_path):
    env = faults_cluster
    job_id, run_dir = submit_trainer(launch, env, tmp_path, "train_iters=24")
    log_path = run_dir / f"slurm-{job_id}.out"
    wait_for_line(log_path, r"trainer: iteration=6 restart=0", JOB_SECONDS, job_id, env)
    subprocess.run(["scontrol", "requeue", job_id], env=env, check=True, timeout=30)
    fields = wait_for_job(job_id, env, timeout=JOB_SECONDS)
    log = log_path.read_text()
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1", log
    assert wait_for_sacct(job_id, env, 2, JOB_SECONDS) == ["REQUEUED", "COMPLETED"], sacct_states(job_id, env)
    saved = re.search(r"trainer: saved checkpoint iteration=(\d+) \(SIGTERM\) restart=0", log)
    assert saved and int(saved.group(1)) >= 6, log
    assert f"trainer: start iteration={saved.group(1)} world_size=4 restart=1" in log
    # The batch shell says so itself, or (when Slurm killed it before it could) the next attempt says it.
    assert re.search(r"megatron-launch: attempt 1 ended: (stopped by Slurm \(SIGTERM|killed without a word)", log)
    assert "megatron-launch: attempt 2 ended: training finished" in log, log
    _assert_report(run_dir, "attempt 1 (job", "(Slurm: REQUEUED, exit code", "attempt 2 (job",
                   "training finished (Slurm: COMPLETED, exit code 0:0")


def test_a_rank_killed_while_writing_a_checkpoint_resumes_from_the_last_complete_one(launch, faults_cluster,
                                                                                     tmp_path):
    env = faults_cluster
    job_id, run_dir = submit_trainer(launch, env, tmp_path, "train_iters=16",
                                     "env.TRAINER_CHECKPOINT_SECONDS=6")
    log_path = run_dir / f"slurm-{job_id}.out"
    wait_for_line(log_path, r"trainer: writing checkpoint iteration=8 \(interval\) restart=0", JOB_SECONDS,
                  job_id, env)
    checkpoints = run_dir / "checkpoints"
    os.kill(int((run_dir / "trainer-pids" / "rank-0").read_text()), signal.SIGKILL)
    # the half-written checkpoint is on disk, the tracker still names the complete one before it
    assert (checkpoints / "iter_0000008").is_dir()
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text() == "4"
    fields = wait_for_job(job_id, env, timeout=JOB_SECONDS)
    log = log_path.read_text()
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1", log
    assert wait_for_sacct(job_id, env, 2, JOB_SECONDS) == ["REQUEUED", "COMPLETED"], sacct_states(job_id, env)
    assert "megatron-launch: attempt 1 ended: training failed with exit status" in log
    assert "trainer: start iteration=4 world_size=4 restart=1" in log  # one save interval lost, no more
    assert "trainer: done iteration=16 restart=1" in log
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text() == "16"
    _assert_report(run_dir, "attempt 1 (job", "training failed", "; requeued", "attempt 2 (job",
                   "training finished")


def test_a_node_that_dies_fails_the_job_as_node_fail_and_it_resumes_after_requeue(launch, faults_cluster,
                                                                                   tmp_path):
    """A node dies as a machine dies: its slurmd and every process of the job on it are killed at once. The
    ranks on the other node wait in their collective (the stand-in trainer's lockstep), as Megatron's would, so
    nothing but Slurm ends the attempt: it declares the node DOWN after SlurmdTimeout, ends the job as NODE_FAIL
    and requeues it; the job waits until the node's slurmd is back (started again by the test, as an operator
    would), then resumes from the tracker. The node that dies is the one that does not hold torchrun's
    rendezvous store: with the store gone, the surviving torchrun would end the attempt itself (that is a failed
    training run, the previous test's case) before Slurm could see the node fail."""
    env = faults_cluster
    job_id, run_dir = submit_trainer(launch, env, tmp_path, "train_iters=24")
    log_path = run_dir / f"slurm-{job_id}.out"
    wait_for_line(log_path, r"trainer: iteration=6 restart=0", JOB_SECONDS, job_id, env)
    store_node = _rendezvous_store_node(run_dir, job_id)
    (victim,) = {f"{NODE}1", f"{NODE}2"} - {store_node}
    _kill_node(victim, job_id)
    try:
        requeued = _wait_for(lambda: job_fields(job_id, env).get("Restarts") == "1", JOB_SECONDS)
        assert requeued, job_fields(job_id, env)
        # slurmctld's own account: the node failure (NODE_FAIL) is why the job was requeued
        controller_log = (BASE / "log" / "slurmctld.log").read_text()
        assert f"requeue job JobId={job_id} due to failure of node {victim}" in controller_log, controller_log[-2000:]
        assert f"Nodes {victim} not responding, setting DOWN" in controller_log
    finally:
        subprocess.run(["slurmd", "-f", env["SLURM_CONF"], "-N", victim], env=env, check=True, timeout=30)
    fields = wait_for_job(job_id, env, timeout=JOB_SECONDS)
    log = log_path.read_text()
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1", log
    # Slurm's accounting: the first attempt ended as NODE_FAIL, the second completed
    assert wait_for_sacct(job_id, env, 2, JOB_SECONDS) == ["NODE_FAIL", "COMPLETED"], sacct_states(job_id, env)
    # Attempt 2 resumed from a complete checkpoint no older than the last interval save of attempt 1: rank 0
    # saved on Slurm's SIGTERM where it survived (its last lines may be missing from the log when the node that
    # died ran the batch script, which relays the output), or the interval checkpoint is the last one.
    saved = [int(n) for n in re.findall(r"trainer: saved checkpoint iteration=(\d+) \(\w+\) restart=0", log)]
    start = re.search(r"trainer: start iteration=(\d+) world_size=4 restart=1", log)
    assert saved and start and int(start.group(1)) >= max(saved) >= 4, log
    resumed = run_dir / "checkpoints" / f"iter_{int(start.group(1)):07d}"
    assert sorted(path.name for path in resumed.glob("*.done")) == [f"rank_{r:02d}.done" for r in range(4)]
    # the batch shell got Slurm's SIGTERM, or (on the dead node, or killed before it could say so) the next
    # attempt says it
    assert re.search(r"megatron-launch: attempt 1 ended: (stopped by Slurm|killed without a word)", log), log
    assert "megatron-launch: attempt 2 ended: training finished" in log, log
    _assert_report(run_dir, "attempt 1 (job", "(Slurm: NODE_FAIL, exit code", "attempt 2 (job",
                   "training finished (Slurm: COMPLETED, exit code 0:0",
                   "job states:         from Slurm's accounting (sacct) and the job log")


# ---- helpers ----

def _assert_report(run_dir: Path, *phrases: str) -> None:
    """`launch report` as a user on the cluster runs it (SLURM_CONF names the cluster, so sacct answers)."""
    report = subprocess.run([sys.executable, "-m", "launcher", "report", str(run_dir)], cwd=REPO,
                            capture_output=True, text=True, timeout=120, check=False,
                            env={**os.environ, "PYTHONPATH": str(REPO), "SLURM_CONF": str(BASE / "etc" / "slurm.conf")})
    assert report.returncode == 0, report.stderr
    assert "outcome:            success" in report.stdout, report.stdout
    assert "in 2 attempts" in report.stdout, report.stdout
    for phrase in phrases:
        assert phrase in report.stdout, report.stdout


def _rendezvous_store_node(run_dir: Path, job_id: str) -> str:
    """The node whose torchrun holds the job's c10d rendezvous store (the agent listening on the job's
    rendezvous port: both nodes resolve to this host, so either agent may have taken it)."""
    port = int(re.search(r"^rdzv_port=(\d+)$", (run_dir / "job.sbatch").read_text(), re.M).group(1))
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in _read(table).decode().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # 0A: LISTEN
                listening.add(f"socket:[{fields[9]}]")
    for pid in _pids():
        try:
            sockets = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        except OSError:
            continue
        if sockets & listening:
            environ = dict(item.split(b"=", 1) for item in _read(f"/proc/{pid}/environ").split(b"\0") if b"=" in item)
            if environ.get(b"SLURM_JOB_ID") == job_id.encode():
                return environ[b"SLURMD_NODENAME"].decode()
    raise AssertionError(f"no process of job {job_id} listens on its rendezvous port {port}")


def _kill_node(node: str, job_id: str) -> None:
    """SIGKILL the node's slurmd, then the job's processes on it (its slurmstepd and what runs under it)."""
    pid_file = BASE / "run" / f"slurmd-{node}.pid"
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    victims: set[int] = set()
    for pid in _pids():
        environ = _read(f"/proc/{pid}/environ").split(b"\0")
        if f"SLURMD_NODENAME={node}".encode() in environ and f"SLURM_JOB_ID={job_id}".encode() in environ:
            victims.add(pid)
            parent = _parent(pid)
            while parent > 1 and parent not in victims:  # up to the node's slurmstepd
                if _read(f"/proc/{parent}/cmdline").startswith(b"slurmstepd"):
                    victims.add(parent)
                    break
                parent = _parent(parent)
    assert victims, f"no process of job {job_id} on {node}"
    for pid in sorted(victims, key=lambda p: not _read(f"/proc/{p}/cmdline").startswith(b"slurmstepd")):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _parent(pid: int) -> int:
    stat = _read(f"/proc/{pid}/stat")
    return int(stat.rsplit(b")", 1)[1].split()[1]) if stat else 0


def _wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.5)
    return False




def _free_ports() -> tuple[int, int, int]:
    """Ports for slurmctld, the first of two consecutive ones for the slurmds, and slurmdbd."""
    while True:
        first = free_port()
        if first < 65000 and all(_port_is_free(port) for port in (first, first + 1)):
            controller, dbd = free_port(), free_port()
            if len({controller, dbd, first, first + 1}) == 4:
                return controller, first, dbd


def _port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
