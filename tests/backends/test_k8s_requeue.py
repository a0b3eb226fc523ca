"""Kubernetes follows the Slurm requeue policy's triage where a JobSet can: each pod exits with the code of its first
failing rank where that code says no retry helps (2, 17), which the JobSet's failure policy fails at once; and
`launch --resume RUN --k8s` reads the pods' logs with the same triage, keeps the new pods off the machine a host's
fault names (a required node affinity on the node's name), and warns where a retry meets the same failure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from launcher.backends import k8s, k8s_pod
from tests.backends.k8s_support import expand, render_preset, schema_errors

REQUIRED = ("--set", "k8s.image=nvcr.io/nvidia/pytorch:25.01-py3", "--set", "k8s.pvc=training-runs")
ITERATION = (" [2026-12-01 10:00:00] iteration       10/     100 | consumed samples:          80 | elapsed time per "
             "iteration (ms): 100.0 | learning rate: 1.000000E-04 | global batch size:     8 | lm loss: "
             "5.000000E+00 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |")


def root_cause(rank: int, host: str, exitcode: int) -> list[str]:
    """torchrun's summary after a rank failed, as torch/distributed/elastic prints it."""
    return ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "============================================================", "pretrain_gpt.py FAILED",
            "------------------------------------------------------------", "Failures:", "  <NO_OTHER_FAILURES>",
            "------------------------------------------------------------", "Root Cause (first observed failure):",
            "[0]:", "  time      : 2026-12-01_10:00:05", f"  host      : {host}",
            f"  rank      : {rank} (local_rank: {rank % 8})", f"  exitcode  : {exitcode} (pid: 4242)",
            "  error_file: <N/A>", "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/",
            "============================================================"]


# ---- the pod's exit status: the first failing rank's code, where the JobSet's policy acts on it ----

def _container(made: k8s.Prepared) -> dict:
    return made.obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]


def _pod(tmp_path: Path, stand_in: str) -> tuple[list[str], dict[str, str]]:
    """The one-node pod's command line and env, with torchrun replaced by a Python program `stand_in`."""
    made, _ = render_preset("345m", ("k8s.name=train", "transformer_engine=false", "apex=false"), nodes=1,
                            gpus_per_node=1, run_dir=tmp_path / "runs" / "train")
    container = _container(made)
    env = {e["name"]: e.get("value", "") for e in container["env"]}
    env = {name: expand(value, env) for name, value in env.items()}
    env.update(NODE_RANK="0", RESTART_ATTEMPT="0", MASTER_ADDR="localhost", MEGATRON_LAUNCH_K8S_NODE="gpu-7",
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    args = [expand(word, env) for word in container["args"]]
    count = int(args[0])
    command = [expand(word, env) for word in container["command"]]
    return [*command, *args[:1 + count], sys.executable, "-c", stand_in], env


@pytest.mark.parametrize(("rank_exit", "pod_exit"), [(17, 17), (2, 2), (16, 16), (1, 1), (-9, 1)])
def test_the_pod_exits_with_the_failing_ranks_code_where_the_policy_reads_it(tmp_path, rank_exit, pod_exit):
    lines = "\\n".join(root_cause(0, "train-node-0-0", rank_exit))
    stand_in = f"import sys; sys.stderr.write('{lines}\\n'); sys.exit(1)"  # torchrun: 1 whatever its ranks did
    argv, env = _pod(tmp_path, stand_in)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == pod_exit, result.stdout + result.stderr
    assert f"megatron-launch: torchrun exited 1; its first failing rank exited {rank_exit}; the pod exits " \
           f"{pod_exit}" in result.stdout
    assert "Root Cause (first observed failure):" in result.stdout  # passed through to the pod's log


def test_a_training_that_ends_well_exits_0_and_says_nothing_more(tmp_path):
    argv, env = _pod(tmp_path, "print('trained')")
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0 and result.stdout.splitlines()[-1] == "trained"


def test_sigterm_to_the_pod_reaches_torchrun_which_saves_and_ends(tmp_path):
    started, saved = tmp_path / "started", tmp_path / "saved"
    stand_in = (f"import pathlib, signal, sys, time\n"
                f"def stop(*_):\n    pathlib.Path({str(saved)!r}).write_text('saved')\n    sys.exit(143)\n"
                f"signal.signal(signal.SIGTERM, stop)\npathlib.Path({str(started)!r}).write_text('')\n"
                f"time.sleep(60)\n")
    argv, env = _pod(tmp_path, stand_in)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # the kubelet signals PID 1: the supervisor the entry script became
    proc.communicate(timeout=30)
    assert saved.read_text() == "saved" and proc.returncode == 143


def test_the_jobset_fails_at_once_on_exit_2_and_17_and_restarts_anything_else():
    made, _ = render_preset("345m", nodes=2, gpus_per_node=8)
    job = made.obj["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["podFailurePolicy"]["rules"] == [{"action": "FailJob", "onExitCodes": {
        "containerName": "megatron", "operator": "In", "values": [k8s_pod.INPUT_ERROR,
                                                                 k8s_pod.FAILED_ON_RESULT_VALIDATION]}}]
    policy = made.obj["spec"]["failurePolicy"]
    assert policy["rules"] == [{"name": "NotRetried", "action": "FailJobSet", "onJobFailureReasons": [
        "PodFailurePolicy"]}]
    assert k8s_pod.RESUME_TO_DISAMBIGUATE not in k8s_pod.NOT_RETRIED  # exit 16 is restarted (counted)
    env = {e["name"]: e for e in _container(made)["env"]}
    assert env["MEGATRON_LAUNCH_K8S_NODE"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_the_supervisor_reads_the_exit_codes_megatron_defines(tmp_path):
    mlm = Path(os.environ.get("MEGATRON_LM_PATH", "/work/mlm"))
    source = mlm / "megatron" / "core" / "rerun_state_machine.py"
    if not source.is_file():
        pytest.skip("no Megatron-LM checkout")
    text = source.read_text()
    assert f"EXIT_CODE_RESUME_TO_DISAMBIGUATE: int = {k8s_pod.RESUME_TO_DISAMBIGUATE}" in text
    assert f"EXIT_CODE_FAILED_ON_RESULT_VALIDATION: int = {k8s_pod.FAILED_ON_RESULT_VALIDATION}" in text


# ---- launch --resume RUN --k8s: the same triage, the machine a fault names kept off ----

def _run_dir(launch, tmp_path: Path, nodes: int = 2) -> Path:
    code, out, err = launch("345m", "--k8s", "--nodes", str(nodes), *REQUIRED, "--set", "k8s.name=train",
                            "--set", f"run_root={tmp_path}/runs")
    assert code == 0, err
    return Path(out.strip()).parent


def _pod_log(run_dir: Path, pod: int, attempt: int, lines: list[str], machine: str = "", jobset: str = "train",
             nodes: int = 2) -> None:
    logs = run_dir / "logs" / "k8s"
    logs.mkdir(parents=True, exist_ok=True)
    where = f", on node {machine}, jobset {jobset}" if machine else ""
    header = (f"megatron-launch: pod {pod} of {nodes} (train-node-0-{pod}), attempt {attempt}{where}, rendezvous "
              "host train-node-0-0.train")
    with (logs / f"node-{pod}-attempt-{attempt}.log").open("a") as log:
        log.write("\n".join([header, *lines]) + "\n")


def _resume(launch, run_dir: Path) -> tuple[dict, str]:
    # the image and the claim are given again: a resume takes neither from the run directory
    code, out, err = launch("--resume", str(run_dir), "--k8s", *REQUIRED)
    assert code == 0, err
    obj = yaml.safe_load((run_dir / "jobset.yaml").read_text())
    return obj, err


def _kept_off(obj: dict) -> list[str] | None:
    pod = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    if "affinity" not in pod:
        return None
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": terms[0][
        "matchFields"][0]["values"]}]}]
    return terms[0]["matchFields"][0]["values"]


ECC = "[rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered"


def test_a_gpu_fault_keeps_the_next_jobset_off_the_machine_its_pod_ran_on(launch, tmp_path):
    run_dir = _run_dir(launch, tmp_path)
    _pod_log(run_dir, 0, 1, [ITERATION], machine="gke-a100-pool-3f2a")
    _pod_log(run_dir, 1, 1, [ITERATION, ECC, *root_cause(1, "train-node-0-1", 1)], machine="gke-a100-pool-9c1d")
    obj, err = _resume(launch, run_dir)
    assert _kept_off(obj) == ["gke-a100-pool-9c1d"]
    assert "leaving out gke-a100-pool-9c1d, where pod train-node-0-1 ran" in err
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["excluded_nodes"] == ["gke-a100-pool-9c1d"]
    assert manifest["requeue_decisions"][-1]["left_out"][0]["host"] == "gke-a100-pool-9c1d"
    if __import__("importlib").util.find_spec("jsonschema"):
        assert schema_errors(obj) == []
    # the next fault on another machine: both kept off
    _pod_log(run_dir, 0, 1, [ITERATION, ECC.replace("rank1", "rank0"), *root_cause(0, "train-node-0-0", 1)],
             machine="gke-a100-pool-3f2a", jobset="train-r2")
    _pod_log(run_dir, 1, 1, [ITERATION], machine="gke-a100-pool-77aa", jobset="train-r2")
    obj, _ = _resume(launch, run_dir)
    assert _kept_off(obj) == ["gke-a100-pool-9c1d", "gke-a100-pool-3f2a"]


def test_megatrons_request_to_rerun_elsewhere_keeps_off_the_machine_it_names(launch, tmp_path):
    run_dir = _run_dir(launch, tmp_path)
    again = ("[default1]:ERROR:megatron.core.rerun_state_machine:Got rescheduled on the same GPU. Need to resume "
             "again from the same checkpoint (node: train-node-0-1, gpu: 1)")
    _pod_log(run_dir, 0, 1, [ITERATION, *root_cause(0, "train-node-0-0", 16)], machine="node-a")
    _pod_log(run_dir, 1, 1, [ITERATION, again, *root_cause(1, "train-node-0-1", 16)], machine="node-b")
    obj, err = _resume(launch, run_dir)
    assert _kept_off(obj) == ["node-b"]
    assert "where the rerun must not run again" in err


@pytest.mark.parametrize("lines", [
    [ITERATION, "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."],
    [ITERATION, *root_cause(0, "train-node-0-0", 17)],  # Megatron's failed result validation
])
def test_an_end_a_retry_meets_again_is_said_and_keeps_every_machine(launch, tmp_path, lines):
    run_dir = _run_dir(launch, tmp_path)
    _pod_log(run_dir, 0, 1, lines, machine="node-a")
    _pod_log(run_dir, 1, 1, [ITERATION], machine="node-b")
    obj, err = _resume(launch, run_dir)
    assert _kept_off(obj) is None
    assert "warning: the JobSet's last attempt ended" in err and "a retry meets the same failure" in err


@pytest.mark.parametrize(("machine", "named"), [
    ("", "train-node-0-1"),  # a pod log of before: no machine named
    ("$(id)", "train-node-0-1"),  # no node name: not taken
    ("gke-pool-1", "train-node-0-9"),  # a host that is none of the attempt's pods
])
def test_a_machine_the_logs_do_not_name_as_one_of_the_pods_is_not_kept_off(launch, tmp_path, machine, named):
    run_dir = _run_dir(launch, tmp_path)
    _pod_log(run_dir, 0, 1, [ITERATION], machine=machine or "")
    _pod_log(run_dir, 1, 1, [ITERATION, ECC, *root_cause(1, named, 1)], machine=machine or "")
    obj, err = _resume(launch, run_dir)
    assert _kept_off(obj) is None
    assert "no machine left out" in err or "no host left out" in err


def test_a_hostile_excluded_nodes_list_is_not_taken(launch, tmp_path):
    run_dir = _run_dir(launch, tmp_path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["excluded_nodes"] = ["node-a", "$(id)", "x" * 300]
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    obj, err = _resume(launch, run_dir)
    assert _kept_off(obj) == ["node-a"]
    assert "2 value(s) that name no machine, dropped" in err
    manifest["excluded_nodes"] = [f"n{k}" for k in range(10_000)]
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    obj, err = _resume(launch, run_dir)
    assert _kept_off(obj) is None and "10000 names, more than the 64" in err
