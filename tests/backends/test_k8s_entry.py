"""The pod's entry script run here with bash, as the container runs it: `bash -c SCRIPT megatron-launch ARGS…`
with the JobSet's env. A stand-in `getent` (on PATH) plays the cluster DNS, so no name is looked up for real,
and a stand-in torchrun prints the argv it was given."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from launcher.backends import k8s
from tests.backends.k8s_support import expand, render_preset

HOST = "train-node-0-0.train"
PRINT_ARGV = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]


# The image's kernels are the target's; this machine has neither, so the pod's package check would stop here
NO_KERNELS = ("transformer_engine=false", "apex=false")


def _pod(tmp_path: Path, nodes: int = 2, overrides: tuple[str, ...] = NO_KERNELS):
    made, _ = render_preset("345m", ("k8s.name=train", "k8s.dns_timeout=3", *overrides), nodes=nodes,
                            gpus_per_node=1, run_dir=tmp_path / "runs" / "train")
    container = made.obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    # what the downward API fills in
    fields = {"NODE_RANK": "1", "RESTART_ATTEMPT": "2", "MASTER_ADDR": HOST, "MEGATRON_LAUNCH_K8S_NODE": "gpu-7"}
    env = {e["name"]: fields.get(e["name"], e.get("value", "")) for e in container["env"]}
    env = {name: expand(value, env) for name, value in env.items()}
    command = [expand(word, env) for word in container["command"]]
    args = [expand(word, env) for word in container["args"]]
    return command, args, env


def _getent(tmp_path: Path, failures: int) -> Path:
    """A getent that fails `failures` times, then resolves; it records each name asked for."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "getent"
    stub.write_text(f"""#!/bin/bash
echo "$2" >> {tmp_path}/asked
(( $(wc -l < {tmp_path}/asked) > {failures} ))
""")
    stub.chmod(0o755)
    return bin_dir


def _run(command, args, env, bin_dir: Path, timeout: float = 30):
    full = {"PATH": f"{bin_dir}:{os.environ['PATH']}", **env}
    return subprocess.run([*command, *args], env=full, capture_output=True, text=True, timeout=timeout, check=False)


def _with_stand_in(args: list[str]) -> tuple[list[str], list[str]]:
    """args with torchrun replaced by a program that prints its argv; and the argv torchrun was to get."""
    count = int(args[0])
    head, argv = args[:1 + count], args[1 + count:]
    return [*head, *PRINT_ARGV, *argv[1:]], argv[1:]


def test_the_pod_waits_for_the_rendezvous_name_then_runs_the_resolved_argv(tmp_path):
    command, args, env = _pod(tmp_path, overrides=(*NO_KERNELS, "env.HOSTILE=$(id) `id` 'x' \"y\"\nz"))
    args, expected = _with_stand_in(args)
    result = _run(command, args, env, _getent(tmp_path, failures=1))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == expected
    assert f"--rdzv-endpoint {HOST}:29500" in " ".join(expected)
    assert (tmp_path / "asked").read_text().splitlines() == [HOST, HOST]
    log = tmp_path / "runs" / "train" / "logs" / "k8s" / "node-1-attempt-3.log"
    assert log.read_text().splitlines()[0] == (f"megatron-launch: pod 1 of 2 ({os.uname().nodename}), attempt 3, "
                                               f"on node gpu-7, jobset train, rendezvous host {HOST}")


def test_the_wait_for_the_name_is_bounded(tmp_path):
    command, args, env = _pod(tmp_path)
    args, _ = _with_stand_in(args)
    started = time.monotonic()
    result = _run(command, args, env, _getent(tmp_path, failures=1000))
    assert result.returncode == 1
    # the pod log holds stdout and stderr both
    assert f"error: {HOST} did not resolve in 3 s (k8s.dns_timeout)" in result.stdout
    assert time.monotonic() - started < 15


def test_one_node_does_not_wait_for_any_name(tmp_path):
    command, args, env = _pod(tmp_path, nodes=1)
    args, expected = _with_stand_in(args)
    result = _run(command, args, env, _getent(tmp_path, failures=1000))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == expected and "--standalone" in expected
    assert not (tmp_path / "asked").exists()


def test_a_missing_data_file_fails_the_pod_with_exit_2_before_torchrun(tmp_path):
    command, args, env = _pod(tmp_path)
    args, _ = _with_stand_in(args)
    args = ["2", str(tmp_path / "there"), str(tmp_path / "missing $(x)"), *args[1:]]
    (tmp_path / "there").write_text("")
    result = _run(command, args, env, _getent(tmp_path, failures=0))
    assert result.returncode == k8s.INPUT_ERROR
    assert f"error: data file {tmp_path / 'missing $(x)'} is not readable in pod" in result.stdout
    assert '["' not in result.stdout  # the stand-in torchrun never ran


def test_sigterm_during_the_wait_ends_the_pod_at_once(tmp_path):
    command, args, env = _pod(tmp_path)
    args, _ = _with_stand_in(args)
    full = {"PATH": f"{_getent(tmp_path, failures=1000)}:{os.environ['PATH']}", **env,
            "MEGATRON_LAUNCH_DNS_TIMEOUT": "60"}
    proc = subprocess.Popen([*command, *args], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while not (tmp_path / "asked").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 143
    assert "megatron-launch: SIGTERM before training started" in out + err


def test_a_pod_lacking_a_package_the_settings_need_fails_with_exit_2_before_torchrun(tmp_path):
    # the same check, with the same message, as every Slurm node runs at job start
    command, args, env = _pod(tmp_path, overrides=("transformer_engine=false", "apex=false",
                                                   "optimizer=muon"))
    assert json.loads(env["MEGATRON_LAUNCH_NODE_ITEMS"])[0]["distributions"] == ["emerging-optimizers"]
    args, _ = _with_stand_in(args)
    result = _run(command, args, env, _getent(tmp_path, failures=0))
    assert result.returncode == k8s.INPUT_ERROR
    assert "error: optimizer muon needs emerging-optimizers >= 0.2, which is not installed on " in result.stdout
    assert '["' not in result.stdout  # the stand-in torchrun never ran
