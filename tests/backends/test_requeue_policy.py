"""The batch script's requeue policy: an infrastructure failure is requeued without the host that failed (Slurm's
ExcNodeList, recorded in the manifest); a training or data failure is retried once and stops the chain when it
comes back at the same iteration. The decisions themselves, and the rendered batch script run by bash with
stand-ins for srun, scontrol, squeue and scancel (no cluster needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.runs import slurm_log
from launcher.runs.requeue_policy import REQUEUE, STOP, decide
from launcher.runs.triage import DATA, INFRASTRUCTURE, TRAINING, Triage


def end(cls: str | None, iteration: int | None = 10, host: str | None = None) -> Triage:
    return Triage(cls, f"{cls} reason", iteration, 0, host)


def test_an_infrastructure_failure_is_requeued_without_its_host():
    decision = decide([Triage(INFRASTRUCTURE, "node failure (srun)", 10, None, "gpu-7", host_fault=True)],
                      excluded=["gpu-2"])
    assert (decision.action, decision.exclude, decision.left_out) == (REQUEUE, ("gpu-2", "gpu-7"), ("gpu-7",))
    assert "leaving out gpu-7" in decision.why
    gpu = decide([Triage(INFRASTRUCTURE, "GPU error (CUDA/Xid)", 10, 3, "gpu-8", host_fault=True)])
    assert gpu.exclude == ("gpu-8",)


@pytest.mark.parametrize("reason", ["time limit (slurmstepd)", "preempted (Slurm: PREEMPTED)", "NCCL timeout",
                                    "rank killed by SIGKILL"])
def test_an_infrastructure_failure_that_does_not_blame_the_host_keeps_it(reason):
    decision = decide([Triage(INFRASTRUCTURE, reason, 10, 3, "gpu-9")])
    assert (decision.action, decision.exclude) == (REQUEUE, ())
    assert decision.hosts == "every host kept: the end names no fault of a host"


@pytest.mark.parametrize("cls", [TRAINING, DATA])
def test_the_same_failure_at_the_same_iteration_twice_stops(cls):
    assert decide([end(cls)]).action == REQUEUE  # once: retried
    stop = decide([end(cls), end(INFRASTRUCTURE), end(cls)])
    assert stop.action == STOP and "a second time" in stop.why and "iteration 10" in stop.why
    assert decide([end(cls, 10), end(cls, 20)]).action == REQUEUE  # it moved on: not the same failure


@pytest.mark.parametrize("cls", [TRAINING, DATA, INFRASTRUCTURE])
def test_a_failure_a_retry_meets_again_stops_at_once(cls):
    decision = decide([Triage(cls, "reason", 10, 0, "gpu-3", persistent=True)], excluded=["gpu-2"])
    assert (decision.action, decision.exclude) == (STOP, ("gpu-2",))
    assert decision.why.endswith("a retry meets the same failure")


def test_an_unclassified_failure_is_requeued_as_without_a_policy():
    decision = decide([end(None), end(None)])
    assert (decision.action, decision.why) == (REQUEUE, "")


def test_a_host_name_from_the_log_is_taken_only_as_a_name():
    assert decide([Triage(INFRASTRUCTURE, "node failure", 1, None, "n1;scancel -u x", host_fault=True)]).exclude == ()
    assert decide([end(INFRASTRUCTURE)], excluded=["$(reboot)", "n3"]).exclude == ("n3",)


# ---- the batch script, run by bash ----

TRACEBACK = ["[rank0]: Traceback (most recent call last):", '[rank0]:   File "/mlm/pretrain_gpt.py", line 3, in x',
             "[rank0]: KeyError: 'tokens'"]


def iteration_line(n: int) -> str:
    return (f" [2026-12-01 10:00:00] iteration {n:8d}/     100 | consumed samples: {n * 8:12d} | elapsed time per "
            "iteration (ms): 300.0 | learning rate: 1.0E-04 | global batch size:     8 | lm loss: 1.0E+00 | "
            "loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |")


def run_attempt(tmp_path: Path, restart_count: int, srun_lines: list[str], srun_status: int = 1, chain: int = 1,
                nodes: int = 4, srun_errors: list[str] = (), job_nodes: tuple[str, ...] = ("n1", "n2"),
                spare: tuple[str, ...] = (), policy: str | None = None):
    """One attempt of the rendered 345m batch script (2 nodes) on `job_nodes`; srun prints `srun_lines` (and
    `srun_errors` on its standard error, as tracebacks and srun's own errors come) and exits `srun_status`. The
    partition's responding nodes (sinfo) are n1 … n`nodes` and `spare`. The script's output goes to slurm-7.out and
    slurm-7.err, as #SBATCH --output/--error send it. `policy`: the body of a python3 stand-in in place of the node's
    python3 running the requeue policy."""
    from slurm_support import render_preset

    from launcher.runs.rundir import write_run_dir

    if not (tmp_path / "manifest.json").exists():
        write_run_dir(tmp_path, preset={"name": "345m"}, argv=["sbatch", "job.sbatch"], env={},
                      manifest={"preset": "345m"})
    _, text = render_preset("345m", (f"slurm.chain={chain}",) if chain > 1 else (), 2, 2, run_dir=tmp_path)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "srun-output").write_text("".join(line + "\n" for line in srun_lines))
    (tmp_path / "srun-errors").write_text("".join(line + "\n" for line in srun_errors))
    stand_ins = {"srun": f"cat {tmp_path}/srun-output; cat {tmp_path}/srun-errors >&2; echo srun >> {tmp_path}/calls; "
                         f"exit {srun_status}",
                 # `scontrol show hostnames LIST`: Slurm's names for the attempt's nodes
                 "scontrol": f'echo "scontrol $*" >> {tmp_path}/calls; [ "$1" = show ] && printf "%s\\n" '
                             f'{" ".join(job_nodes)}; exit 0',
                 "scancel": f'echo "scancel $*" >> {tmp_path}/calls; exit 0', "squeue": "exit 0",
                 # the node's python3, with the standard library only (-S: no site-packages, so no PyYAML)
                 "python3": policy or f'exec {sys.executable} -S "$@"',
                 # the partition's responding nodes (nodes=0: sinfo fails, as when a signal kills it)
                 "sinfo": (f'echo sinfo >> {tmp_path}/calls; ((' + str(nodes) + f')) || exit 1; '
                           f'seq 1 {nodes} | sed s/^/n/; printf "%s\\n" {" ".join(spare)}')}
    for name, body in stand_ins.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    node_list = "n[1-2]" if job_nodes == ("n1", "n2") else ",".join(job_nodes)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": node_list,
           "SLURM_NNODES": "2", "SLURM_RESTART_COUNT": str(restart_count)}
    with open(tmp_path / "slurm-7.out", "a") as out, open(tmp_path / "slurm-7.err", "a") as err:
        result = subprocess.run(["bash", str(script)], env=env, stdout=out, stderr=err, text=True, timeout=120,
                                check=False)
    result.stderr = (tmp_path / "slurm-7.err").read_text()
    return result


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []


def test_the_same_python_error_twice_stops_the_chain_with_the_reason(tmp_path):
    first = run_attempt(tmp_path, 0, [iteration_line(10), *TRACEBACK], chain=3)
    assert first.returncode == 0, first.stderr
    assert "scontrol requeue 7" in calls(tmp_path)
    second = run_attempt(tmp_path, 1, [iteration_line(10), *TRACEBACK], chain=3)
    assert second.returncode == 1
    assert calls(tmp_path).count("scontrol requeue 7") == 1  # not requeued again
    assert any(call.startswith("scancel --state=PENDING --name=") for call in calls(tmp_path))  # the chain stops
    ended = [a.ended for a in slurm_log.split_attempts((tmp_path / "slurm-7.out").read_text())]
    assert ended[0].startswith("training failed with exit status 1 (training: Python exception: KeyError: 'tokens' "
                               "at iteration 10, first failing rank 0; retried once); requeued")
    assert ended[1].endswith("a second time: a retry does not fix it); not requeued, the chain stops")
    decisions = json.loads((tmp_path / "manifest.json").read_text())["requeue_decisions"]
    assert [(d["attempt"], d["decision"], d["class"]) for d in decisions] == [(1, "requeue", TRAINING),
                                                                               (2, "stop", TRAINING)]


OOM_THEN_NCCL = ["[rank0]: Traceback (most recent call last):",
                 '[rank0]:   File "/mlm/megatron/core/mlp.py", line 3, in x',
                 "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
                 "[rank1]:[E1201 10:15:00.1 4001 torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632] [Rank 1] "
                 "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600012 "
                 "milliseconds before timing out."]


def test_out_of_memory_stops_the_chain_at_once_though_the_other_ranks_timed_out(tmp_path):
    first = run_attempt(tmp_path, 0, [iteration_line(10)], chain=3, srun_errors=OOM_THEN_NCCL)
    assert first.returncode == 1
    assert "scontrol requeue 7" not in calls(tmp_path)
    assert any(call.startswith("scancel --state=PENDING --name=") for call in calls(tmp_path))
    ended = slurm_log.split_attempts((tmp_path / "slurm-7.out").read_text())[0].ended
    assert "training: CUDA out of memory at iteration 10" in ended and ended.endswith("not requeued, the chain stops")


@pytest.mark.parametrize("where", ["out", "err"])
def test_a_log_longer_than_the_bound_is_judged_by_its_end(tmp_path, monkeypatch, where):
    """The failure is at the end of a long attempt: a log over the bound is read from its tail, its lines kept with
    the attempt the cut runs through."""
    from launcher.runs import requeue_policy

    monkeypatch.setattr(requeue_policy, "MAX_LOG_BYTES", 64 << 10)
    out, err = tmp_path / "slurm-7.out", tmp_path / "slurm-7.err"
    out.write_text("megatron-launch: job 7 attempt 1 on n1\n" + iteration_line(10) + "\n"
                   "megatron-launch: attempt 1 ended: training failed\nmegatron-launch: job 7 attempt 2 on n1\n"
                   + "".join(iteration_line(n) + "\n" for n in range(11, 2000)))
    err.write_text("megatron-launch: job 7 attempt 1 on n1\n" + "\n".join(TRACEBACK) + "\n"
                   "megatron-launch: job 7 attempt 2 on n1\n" + "x\n" * 100_000 * (where == "err")
                   + "\n".join(OOM_THEN_NCCL) + "\n")
    assert max(out.stat().st_size, err.stat().st_size) > requeue_policy.MAX_LOG_BYTES
    ends = requeue_policy.attempt_ends(out, 2, 1)
    assert ends[-1].reason == "CUDA out of memory" and ends[-1].iteration == 1999
    assert decide(ends).action == STOP


def test_an_infrastructure_failure_requeues_and_the_next_attempt_leaves_its_host_out(tmp_path):
    result = run_attempt(tmp_path, 0, [iteration_line(10), "srun: error: Node failure on n2"])
    assert result.returncode == 0, result.stderr
    # the responding nodes are counted before the requeue, whose SIGTERM to the job's processes would kill sinfo
    assert calls(tmp_path)[-3:] == ["sinfo", "scontrol requeue 7", "scontrol update JobId=7 ExcNodeList=n2"]
    log = (tmp_path / "slurm-7.out").read_text()
    assert "megatron-launch: the next attempt leaves out n2 (ExcNodeList)" in log
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["excluded_nodes"] == ["n2"] and manifest["requeue_decisions"][0]["class"] == INFRASTRUCTURE


def test_a_job_that_would_no_longer_fit_without_the_host_stops_with_the_reason(tmp_path):
    result = run_attempt(tmp_path, 0, [iteration_line(10), "srun: error: Node failure on n2"], nodes=2, chain=3)
    assert result.returncode == 1, result.stderr
    assert "scontrol requeue 7" not in calls(tmp_path) and not any("ExcNodeList" in c for c in calls(tmp_path))
    assert any(call.startswith("scancel --state=PENDING --name=") for call in calls(tmp_path))
    ended = slurm_log.split_attempts((tmp_path / "slurm-7.out").read_text())[0].ended
    assert ended == ("training failed with exit status 1 (infrastructure: node failure (srun) at iteration 10 on n2; "
                     "not requeued without n2: leaving it out would leave 1 responding node(s) of the partition for a "
                     "job of 2 node(s), which would wait in the queue for ever); not requeued, the chain stops")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["excluded_nodes"] == []
    (decision,) = manifest["requeue_decisions"]
    assert (decision["decision"], decision["left_out"], decision["host"]) == (STOP, [], "n2")
    assert decision["hosts"].startswith("not requeued without n2")


def test_an_elastic_job_may_lose_a_host_down_to_its_fewest_nodes(tmp_path):
    """The batch script passes the fewest nodes the job may start with (--fewest-nodes); the policy's own figure."""
    from launcher.runs import requeue_policy

    run_attempt(tmp_path, 0, [iteration_line(10), "srun: error: Node failure on n2"], srun_status=0)
    ends = requeue_policy.attempt_ends(tmp_path / "slurm-7.out", 1, 1)
    decision = decide(ends, (), ("n1", "n2"))
    assert requeue_policy.fit(decision, {"n1", "n2"}, 1).exclude == ("n2",)  # an elastic 1-2 job goes on with n1
    assert requeue_policy.fit(decision, {"n1", "n2"}, 2).action == STOP


def test_a_failure_the_log_does_not_explain_is_requeued_as_before(tmp_path):
    result = run_attempt(tmp_path, 0, [iteration_line(10)])
    assert result.returncode == 0, result.stderr
    assert "attempt 1 ended: training failed with exit status 1; requeued" in (tmp_path / "slurm-7.out").read_text()


def test_launch_runs_shows_why_the_chain_stopped(tmp_path, launch):
    run_dir = tmp_path / "345m-20261201T100000Z"
    run_dir.mkdir()
    run_attempt(run_dir, 0, [iteration_line(10), *TRACEBACK])
    run_attempt(run_dir, 1, [iteration_line(10), *TRACEBACK])
    code, out, err = launch("runs", "--run-root", str(tmp_path), "--format", "json")
    assert code == 0, err
    failure = json.loads(out)[0]["failure"]
    assert failure["class"] == TRAINING and failure["reason"].startswith("chain stopped: Python exception: KeyError")
    code, out, err = launch("runs", "--run-root", str(tmp_path))
    assert "training rank 0: chain stopped: Python exception" in out


def test_a_resubmitted_run_leaves_out_the_hosts_that_failed(tmp_path, launch):
    code, out, err = launch("345m", "--slurm", "--megatron-path", str(tmp_path), "--set", f"run_root={tmp_path}",
                            cwd=tmp_path)
    assert code == 0, err
    run_dir = Path(out.strip()).parent
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps({**manifest, "excluded_nodes": ["n2", "bad host"]}))
    code, out, err = launch("--resume", str(run_dir), "--slurm", "--megatron-path", str(tmp_path), cwd=tmp_path)
    assert code == 0, err
    script = (run_dir / "job.sbatch").read_text()
    assert "#SBATCH --exclude=n2\n" in script and "bad host" not in script
    assert "leaving out n2" in err
    assert "manifest.json excluded_nodes: 1 value(s) that are no Slurm node name, not taken" in err
    (run_dir / "manifest.json").write_text(json.dumps({**manifest, "excluded_nodes": [f"n{i}" for i in range(10_000)]}))
    code, out, err = launch("--resume", str(run_dir), "--slurm", "--megatron-path", str(tmp_path), cwd=tmp_path)
    assert code == 0, err
    assert "--exclude" not in (run_dir / "job.sbatch").read_text()
    assert "excluded_nodes: 10000 names, more than the 64 the launcher ever leaves out, not taken" in err


@pytest.mark.parametrize("name", ["slurm-7.out", "manifest.json"])
def test_a_fifo_as_the_log_or_the_manifest_is_not_waited_on(tmp_path, name):
    """The batch script's policy reads run-directory files: a FIFO planted as one is refused at once."""
    import os
    import threading

    from launcher.runs import requeue_policy

    fifo = tmp_path / name
    os.mkfifo(fifo)
    outcome: list[object] = []

    def read() -> None:
        try:
            outcome.append(list(requeue_policy._lines(fifo, 1)) if name.endswith(".out") else
                           requeue_policy._manifest(fifo))
        except ValueError as error:
            outcome.append(error)

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert outcome, f"the policy waited on a FIFO named {name}"
    assert outcome[0] == [] or "not a regular file" in str(outcome[0])


def test_a_manifest_with_nan_is_refused_not_carried(tmp_path):
    from launcher.runs import requeue_policy

    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"preset": "toy", "loss": NaN}')
    with pytest.raises(ValueError, match="NaN is not a JSON number"):
        requeue_policy._manifest(manifest)


def test_the_failure_on_the_jobs_standard_error_is_read_with_its_attempt(tmp_path):
    """Python's traceback, torchrun's root cause and srun's errors go to slurm-J.err (#SBATCH --error), not to the
    .out file: the policy reads each attempt's part of both."""
    root_cause = ["Root Cause (first observed failure):", "[0]:", "  host      : gpu-3.cluster.example",
                  "  rank      : 0 (local_rank: 0)", "  exitcode  : 1 (pid: 7983)", "=" * 20,
                  "srun: error: gpu-3: task 0: Exited with exit code 1"]
    first = run_attempt(tmp_path, 0, [iteration_line(10)], srun_errors=[*TRACEBACK, *root_cause])
    assert first.returncode == 0, first.stderr
    second = run_attempt(tmp_path, 1, [iteration_line(10)], srun_errors=[*TRACEBACK, *root_cause])
    assert second.returncode == 1, second.stderr
    decisions = json.loads((tmp_path / "manifest.json").read_text())["requeue_decisions"]
    assert [(d["decision"], d["class"], d["host"]) for d in decisions] == [("requeue", TRAINING, "gpu-3"),
                                                                          ("stop", TRAINING, "gpu-3")]
    assert "megatron-launch: job 7 attempt 2 on n[1-2]" in (tmp_path / "slurm-7.err").read_text()


def test_a_gpu_error_leaves_out_the_node_slurm_named_not_the_machine_torchrun_named(tmp_path):
    """torchrun's root cause names the machine (its fully qualified name); Slurm's ExcNodeList needs the node name
    that srun gives."""
    errors = ["RuntimeError: CUDA error: unspecified launch failure", "Root Cause (first observed failure):",
              "  host      : gpu-3.cluster.example", "  rank      : 0 (local_rank: 0)", "=" * 20,
              "srun: error: gpu-3: task 0: Exited with exit code 1"]
    result = run_attempt(tmp_path, 0, [iteration_line(10)], srun_errors=errors, job_nodes=("gpu-3", "gpu-4"))
    assert result.returncode == 0, result.stderr
    assert calls(tmp_path)[-2:] == ["scontrol requeue 7", "scontrol update JobId=7 ExcNodeList=gpu-3"]
    assert json.loads((tmp_path / "manifest.json").read_text())["excluded_nodes"] == ["gpu-3"]


def test_an_attempt_stopped_at_the_time_limit_warning_is_recorded(tmp_path):
    from launcher.runs import requeue_policy

    run_attempt(tmp_path, 0, [iteration_line(12)], srun_status=0)  # a run dir and a log with attempt 1
    assert requeue_policy.main([str(tmp_path), "7", "1", "0", "SIGUSR1"]) == 0
    (decision,) = json.loads((tmp_path / "manifest.json").read_text())["requeue_decisions"]
    assert (decision["decision"], decision["class"], decision["iteration"], decision["exclude"]) == (
        REQUEUE, INFRASTRUCTURE, 12, [])
    assert decision["reason"] == "time limit near (SIGUSR1 before the limit)"
    assert requeue_policy.main([str(tmp_path), "7", "1", "0", "$(reboot)"]) == 2  # no signal name: refused


def test_a_host_is_not_left_out_when_sinfo_does_not_answer(tmp_path):
    result = run_attempt(tmp_path, 0, [iteration_line(10), "srun: error: Node failure on n2"], nodes=0)
    assert result.returncode == 0, result.stderr
    assert calls(tmp_path)[-1] == "scontrol requeue 7"  # requeued with n2: no word on whether the job fits without
    assert "at iteration 10 on n2; not leaving out n2: sinfo did not say which nodes respond); requeued" in \
        (tmp_path / "slurm-7.out").read_text()


@pytest.mark.parametrize("damage", ["missing", "dangling link", "link to itself", "name too long"])
def test_a_log_that_cannot_be_opened_leaves_the_plain_requeue_without_a_traceback(tmp_path, damage):
    """No readable log: no decision (exit 1, the batch script requeues as without a policy), and no traceback."""
    log = tmp_path / "slurm-7.out"
    job = "7"
    if damage == "dangling link":
        log.symlink_to(tmp_path / "nowhere")
    elif damage == "link to itself":
        log.symlink_to(log.name)
    elif damage == "name too long":
        job = "7" * 300
    done = subprocess.run([sys.executable, "-m", "launcher.runs.requeue_policy", str(tmp_path), job, "1", "1"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (1, "")
    assert "Traceback" not in done.stderr


def test_a_decision_recorded_writes_back_no_secret_found_in_clear_in_the_manifest(tmp_path):
    from launcher.runs import requeue_policy

    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"preset": "toy", "overrides": ["launcher.env.WANDB_API_KEY=wandbsecret0123456789"],
                                    "attempts": [{"env": {"HF_TOKEN": "plainlookingvalue42", "PLAIN": "kept"}}]}))
    decision = requeue_policy.Decision(REQUEUE, (), "why", end(INFRASTRUCTURE))
    requeue_policy.record(manifest, "7", 1, decision)
    written = json.loads(manifest.read_text())
    assert written["overrides"] == ["launcher.env.WANDB_API_KEY=<redacted>"]
    assert written["attempts"][0]["env"] == {"HF_TOKEN": "<redacted>", "PLAIN": "kept"}
    assert written["requeue_decisions"][0]["decision"] == REQUEUE


# ---- the hosts a fault blames: left out as the attempt's nodes, accumulating, never past the job's room ----

def decisions(tmp_path: Path) -> list[dict]:
    return json.loads((tmp_path / "manifest.json").read_text())["requeue_decisions"]


def test_the_hosts_left_out_accumulate_over_requeues_until_the_job_would_not_fit(tmp_path):
    """n2 dies, then n3's GPU fails: ExcNodeList holds both; then n4 dies and the partition's 4 responding nodes less
    the 3 left out could no longer hold the job's 2: the chain stops, saying so."""
    first = run_attempt(tmp_path, 0, [iteration_line(10), "srun: error: Node failure on n2"])
    assert first.returncode == 0, first.stderr
    gpu = ["[rank2]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
           "srun: error: n3: task 1: Exited with exit code 1", "srun: error: n1: task 0: Killed"]
    second = run_attempt(tmp_path, 1, [iteration_line(20)], srun_errors=gpu, job_nodes=("n1", "n3"))
    assert second.returncode == 0, second.stderr
    updates = [call for call in calls(tmp_path) if "ExcNodeList" in call]
    assert updates == ["scontrol update JobId=7 ExcNodeList=n2", "scontrol update JobId=7 ExcNodeList=n2,n3"]
    third = run_attempt(tmp_path, 2, [iteration_line(30), "srun: error: Node failure on n4"], job_nodes=("n1", "n4"))
    assert third.returncode == 1, third.stderr
    assert calls(tmp_path).count("scontrol requeue 7") == 2
    ended = [a.ended for a in slurm_log.split_attempts((tmp_path / "slurm-7.out").read_text())]
    assert ended[1] == ("training failed with exit status 1 (infrastructure: GPU error (CUDA/Xid) at iteration 20 "
                        "on n3; leaving out n3); requeued")
    assert ended[2].endswith("not requeued without n4: leaving it out and the 2 host(s) left out before would leave 1 "
                             "responding node(s) of the partition for a job of 2 node(s), which would wait in the "
                             "queue for ever); not requeued, the chain stops")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["excluded_nodes"] == ["n2", "n3"]
    assert [(d["decision"], d["exclude"], [x["host"] for x in d["left_out"]]) for d in decisions(tmp_path)] == [
        (REQUEUE, ["n2"], ["n2"]), (REQUEUE, ["n2", "n3"], ["n3"]), (STOP, ["n2", "n3"], [])]
    assert decisions(tmp_path)[1]["left_out"][0]["why"].startswith("infrastructure: GPU error (CUDA/Xid)")


FIRST_RERUN = ("[default1]:ERROR:megatron.core.rerun_state_machine:Rank 1, node {}, device 1, iteration #11: First "
               "rerun: unexpected result is reproducible within the tolerance (nan = nan). Need to rerun on a "
               "different GPU to verify correctness.!")
RESUME = ("[default0]:WARNING:megatron.core.rerun_state_machine:Saving a checkpoint and exiting now. Please resume the "
          "job from the checkpoint to rerun the last iteration and establish a diagnostic")


@pytest.mark.parametrize(("named", "said"), [
    ("n2.cluster.example", "requeued as Megatron asks; leaving out n2, where the rerun must not run again"),
    (None, "requeued as Megatron asks; no host left out: the log does not name the machine the rerun must avoid"),
    ("vm", "requeued as Megatron asks; no host left out: vm, named by the log, is none of the attempt's nodes "
           "(n1, n2)"),
])
def test_megatrons_resume_leaves_out_the_machine_its_rerun_must_avoid(tmp_path, named, said):
    """Exit code 16: the state machine reruns the iteration on another GPU. The machine it names (os.uname(), perhaps
    fully qualified) is left out as the job's node of that name; every rank exits 16, so srun's first failing task
    names no one; a machine that is none of the job's nodes (emulated nodes on one machine) is not left out."""
    errors = ([FIRST_RERUN.format(named)] if named else []) + [
        RESUME, "srun: error: n1: task 0: Exited with exit code 16",
        "srun: error: n2: task 1: Exited with exit code 16"]
    result = run_attempt(tmp_path, 0, [iteration_line(11)], srun_status=16, srun_errors=errors)
    assert result.returncode == 0, result.stderr
    assert said in (tmp_path / "slurm-7.out").read_text()
    updates = [call for call in calls(tmp_path) if "ExcNodeList" in call]
    assert updates == (["scontrol update JobId=7 ExcNodeList=n2"] if named == "n2.cluster.example" else [])
    (decision,) = decisions(tmp_path)
    assert decision["hosts"] in said and decision["resume_asked"] is True


HOSTILE = ["n1 n2", "n1;reboot", "n1,n2", "$(reboot)", "`id`", "n[1-2]", "-n1", "n1\nn2", "n" * 65, "x" * (1 << 20)]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_host_name_never_reaches_a_command(name):
    from launcher import slurm_names

    end_ = Triage(INFRASTRUCTURE, "GPU error (CUDA/Xid)", 1, 0, name, host_fault=True)
    for job_nodes in (None, ("n1", "n2"), (name, "n1")):
        decision = decide([end_], job_nodes=job_nodes)
        assert decision.exclude == () and decision.left_out == ()
    assert slurm_names.node_name(name) is None
    assert decide([end(INFRASTRUCTURE)], excluded=[name, "n3"]).exclude == ("n3",)


def test_a_hostile_node_list_runs_no_scontrol(tmp_path, monkeypatch):
    from launcher.runs import requeue_policy

    ran: list[list[str]] = []
    monkeypatch.setattr(requeue_policy, "_command", lambda argv: ran.append(argv) or "n1\n")
    for value in ["n1;reboot", "$(reboot)", "n1 n2", "", "-n1", "n" * 70_000]:
        assert requeue_policy.attempt_nodes(value) is None
    for value in ["debug;reboot", "-x", "a b"]:
        assert requeue_policy.responding_nodes(value) is None
    assert ran == []
    assert requeue_policy.attempt_nodes("n[1-2]") == ["n1"] and ran == [["scontrol", "show", "hostnames", "n[1-2]"]]
    monkeypatch.setattr(requeue_policy, "_command", lambda argv: "n1\nn2;reboot\n")
    assert requeue_policy.attempt_nodes("n[1-2]") is None  # an answer with a name that is no node name: no list


@pytest.mark.parametrize(("listed", "said"), [
    ([f"n{i}" for i in range(10_000)], "10000 names, more than the 64 the launcher ever leaves out"),
    (["x" * (1 << 20), "n3", "a b", "$(reboot)"], "3 value(s) that are no Slurm node name"),
])
def test_a_hostile_list_of_hosts_left_out_is_not_taken(tmp_path, listed, said):
    """The manifest's excluded_nodes is read back from the run directory: a list the launcher could not have written
    is not taken, and the decision says so."""
    run_attempt(tmp_path, 0, [iteration_line(10)], srun_status=0)  # the run directory and its manifest
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps({**manifest, "excluded_nodes": listed}))
    result = run_attempt(tmp_path, 1, [iteration_line(20), "srun: error: Node failure on n2"])
    assert result.returncode == 0, result.stderr
    updates = [call for call in calls(tmp_path) if "ExcNodeList" in call]
    assert updates == [f"scontrol update JobId=7 ExcNodeList={'n3,n2' if len(listed) == 4 else 'n2'}"]
    (decision,) = decisions(tmp_path)
    assert f"manifest.json's excluded_nodes: {said}, not taken" in decision["hosts"]


def test_the_batch_script_passes_scontrol_no_list_that_is_not_node_names(tmp_path):
    """The policy's list reaches scontrol as one argument; a list that is not node names (a policy gone wrong) is
    refused by the batch script too."""
    result = run_attempt(tmp_path, 0, [iteration_line(20)],
                         policy=f"printf 'requeue\\nn1;touch {tmp_path}/marker,$(id)\\nwhy\\n'")
    assert result.returncode == 0, result.stderr
    assert not any("ExcNodeList" in call for call in calls(tmp_path)) and not (tmp_path / "marker").exists()
    assert "not leaving out hosts: the list is no list of node names" in result.stderr


def test_the_policy_runs_on_a_python_without_the_launchers_packages(tmp_path):
    """The batch script runs it with the node's own python3, which may lack PyYAML (and jinja2, numpy, ...)."""
    blocked = "import sys; sys.modules.update(yaml=None, jinja2=None, numpy=None, tqdm=None); "
    run = (f"import runpy, sys; sys.argv = ['p', {str(tmp_path)!r}, '7', '1', '1']; "
           "runpy.run_module('launcher.runs.requeue_policy', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", blocked + run], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
