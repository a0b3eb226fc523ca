"""What a pod writes is data: a rank's own output cannot make the pod say "do not retry", a rank's endless or
non-UTF-8 line passes through without being held, and `launch --resume RUN --k8s` reads any pod logs (headers by the
hundred thousand, a FIFO, a sparse file past the cap, names that are no Kubernetes node) within bounds, saying what
it did not read and keeping every such name out of the JobSet."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time

import pytest
import yaml

from launcher.backends import k8s_pod
from launcher.runs import k8s_policy
from tests.backends.test_k8s_requeue import ECC, ITERATION, REQUIRED, _kept_off, _pod, _pod_log, _run_dir, root_cause

# ---- the supervisor: only torchrun's own last word sets the pod's exit code ----


def _stand_in(body: str) -> str:
    return "import os, sys\nerr = sys.stderr.buffer\n" + body


def _block(code: int) -> str:
    return "\\n".join(root_cause(0, "train-node-0-0", code))


@pytest.mark.parametrize(("body", "pod_exit"), [
    # a rank prints a block like torchrun's, trains on, then torchrun reports the rank's real end (exit 1)
    (f"err.write(b'{_block(2)}\\n[rank0]: still training\\n{_block(1)}\\n'); sys.exit(1)", 1),
    # the rank's look-alike block is the last word, but torchrun was killed (the OOM killer): no summary of its own
    (f"err.write(b'{_block(17)}\\n'); err.flush(); os.kill(os.getpid(), 9)", 137),
    # the look-alike block is the last word, but torchrun exits as no ChildFailedError does
    (f"err.write(b'{_block(17)}\\n'); sys.exit(3)", 3),
    # a block never closed by its ==== line
    ("err.write(b'Root Cause (first observed failure):\\n[0]:\\n  exitcode  : 2 (pid: 1)\\n'); sys.exit(1)", 1),
    # the block, then more output: not torchrun's last word
    (f"err.write(b'{_block(2)}\\nmore from a rank\\n'); sys.exit(1)", 1),
    # the marker inside a rank's own line
    ("err.write(b'[rank3]: Root Cause (first observed failure):\\n  exitcode  : 2 (pid: 1)\\n====\\n'); "
     "sys.exit(1)", 1),
])
def test_a_ranks_own_output_cannot_make_the_pod_say_do_not_retry(tmp_path, body, pod_exit):
    argv, env = _pod(tmp_path, _stand_in(body))
    result = subprocess.run(argv, env=env, capture_output=True, timeout=60, check=False)
    assert result.returncode == pod_exit, result.stdout.decode(errors="replace")[-2000:]


def test_the_real_block_after_a_look_alike_still_decides(tmp_path):
    body = f"err.write(b'{_block(1)}\\n[rank0]: resumed\\n{_block(17)}\\n'); sys.exit(1)"
    argv, env = _pod(tmp_path, _stand_in(body))
    assert subprocess.run(argv, env=env, capture_output=True, timeout=60, check=False).returncode == 17


def _limit_memory() -> None:
    cap = 400 << 20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def test_a_ranks_huge_line_and_bytes_not_utf8_pass_through_unheld(tmp_path):
    """600 MB without a newline, then bytes that are not UTF-8: the supervisor (under 400 MB of address space) passes
    every byte on and still reads torchrun's block after them."""
    out = tmp_path / "stderr"
    child = (f"import sys\nerr = sys.stderr.buffer\nchunk = b'x' * (1 << 20)\n"
             f"for _ in range(600):\n    err.write(chunk)\n"
             f"err.write(b'\\n\\xff\\xfe\\xc3(\\n{_block(2)}\\n')\nerr.flush()\nsys.exit(1)\n")
    with out.open("wb") as sink:
        done = subprocess.run([sys.executable, "-c", k8s_pod.SUPERVISOR, sys.executable, "-c", child],
                              stderr=sink, stdout=subprocess.DEVNULL, preexec_fn=_limit_memory, timeout=120,
                              check=False)
    assert done.returncode == 2
    assert out.stat().st_size > 600 << 20
    with out.open("rb") as seen:
        seen.seek(600 << 20)
        assert seen.read(8) == b"\n\xff\xfe\xc3(\nto"[:8]


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGINT])
def test_the_supervisor_forwards_each_stop_signal_to_torchrun(tmp_path, sent):
    started, got = tmp_path / "started", tmp_path / "got"
    child = (f"import pathlib, signal, sys, time\n"
             f"def stop(number, _):\n    pathlib.Path({str(got)!r}).write_text(str(number))\n    sys.exit(143)\n"
             f"signal.signal({int(sent)}, stop)\npathlib.Path({str(started)!r}).write_text('')\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", k8s_pod.SUPERVISOR, sys.executable, "-c", child],
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(sent)
    proc.communicate(timeout=30)
    assert got.read_text() == str(int(sent)) and proc.returncode == 143


# ---- the pod logs: bounded, and what was not read is said ----

def _header(attempt: int, host: str = "train-node-0-0", machine: str = "node-a", jobset: str = "train") -> str:
    return f"megatron-launch: pod 0 of 2 ({host}), attempt {attempt}, on node {machine}, jobset {jobset}, x"


def test_a_log_of_headers_by_the_hundred_thousand_keeps_the_newest_attempts(tmp_path):
    logs = tmp_path / "logs" / "k8s"
    logs.mkdir(parents=True)
    count = 100_000
    lines = [_header(k, machine=f"n{k}") for k in range(1, count)]
    # the newest attempt: a GPU fault on pod 1
    lines += [_header(count, "train-node-0-1", "node-last"), ITERATION, ECC,
              *root_cause(1, "train-node-0-1", 1)]
    (logs / "node-0-attempt-1.log").write_text("\n".join(lines) + "\n")
    started = time.monotonic()
    read = k8s_policy.read_attempts(tmp_path)
    assert time.monotonic() - started < 30
    assert len(read.ends) == k8s_policy.MAX_ATTEMPTS
    assert read.ends[-1].host_fault and read.machines == {"train-node-0-1": "node-last"}
    assert read.unread == [f"{count - k8s_policy.MAX_ATTEMPTS:,} older attempt(s) past the "
                           f"{k8s_policy.MAX_ATTEMPTS:,} newest"]


def test_an_attempt_of_more_pods_than_any_jobset_keeps_its_first_ones(tmp_path):
    logs = tmp_path / "logs" / "k8s"
    logs.mkdir(parents=True)
    extra = 50
    lines = [_header(1, f"h{k}", f"n{k}") for k in range(k8s_policy.MAX_PODS + extra)]
    (logs / "node-0-attempt-1.log").write_text("\n".join(lines) + "\n")
    read = k8s_policy.read_attempts(tmp_path)
    assert len(read.machines) == k8s_policy.MAX_PODS and read.unread == [
        f"{extra:,} pod header(s) past {k8s_policy.MAX_PODS:,} pods in one attempt"]


def test_pod_logs_that_cannot_be_read_are_named_never_waited_on(launch, tmp_path):
    run_dir = _run_dir(launch, tmp_path)
    _pod_log(run_dir, 0, 1, [ITERATION], machine="node-a")
    _pod_log(run_dir, 1, 1, [ITERATION, ECC, *root_cause(1, "train-node-0-1", 1)], machine="node-b")
    logs = run_dir / "logs" / "k8s"
    os.mkfifo(logs / "node-2-attempt-1.log")
    with (logs / "node-3-attempt-1.log").open("wb") as sparse:
        sparse.truncate(k8s_policy.MAX_POD_LOG_BYTES + 1)
    (logs / "node-4-attempt-1.log").symlink_to("/dev/zero")
    code, _, err = launch("--resume", str(run_dir), "--k8s", *REQUIRED)
    assert code == 0, err
    assert "pod logs not read in full" in err
    for name in ("node-2-attempt-1.log (not a regular file)", "node-3-attempt-1.log (1,073,741,825 bytes",
                 "node-4-attempt-1.log (not a regular file)"):
        assert name in err
    obj = yaml.safe_load((run_dir / "jobset.yaml").read_text())
    assert _kept_off(obj) == ["node-b"]  # what was read still decides


@pytest.mark.parametrize("machine", [
    "$(touch${IFS}MARKER)", "`id`", "node-a;id", "{a:b}", "[a,b]", "'a'", '"a"', "a,b", "Node-A", "node_a",
    "-node", "node-", "a..b", "x" * 254, "n\u00e9", "a\x1b[31m", "a\\n-b",
])
def test_a_pod_logs_machine_that_is_no_kubernetes_node_name_stays_out_of_the_jobset(launch, tmp_path, machine):
    run_dir = _run_dir(launch, tmp_path)
    _pod_log(run_dir, 0, 1, [ITERATION], machine="node-a")
    _pod_log(run_dir, 1, 1, [ITERATION, ECC, *root_cause(1, "train-node-0-1", 1)], machine=machine)
    code, _, err = launch("--resume", str(run_dir), "--k8s", *REQUIRED, cwd=tmp_path)
    assert code == 0, err
    text = (run_dir / "jobset.yaml").read_text()
    assert _kept_off(yaml.safe_load(text)) is None and "NotIn" not in text
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest.get("excluded_nodes") in (None, [])
    assert not (tmp_path / "MARKER").exists() and "Traceback" not in err


def test_a_pod_log_not_utf8_is_read_and_its_names_not_taken(launch, tmp_path):
    run_dir = _run_dir(launch, tmp_path)
    logs = run_dir / "logs" / "k8s"
    logs.mkdir(parents=True)
    (logs / "node-1-attempt-1.log").write_bytes(
        b"megatron-launch: pod 1 of 2 (train-node-0-1\xff), attempt 1, on node node-\xfe, jobset train, x\n"
        + ECC.encode() + b"\n\xff\xfe\x00\n" + "\n".join(root_cause(1, "train-node-0-1", 1)).encode() + b"\n")
    code, _, err = launch("--resume", str(run_dir), "--k8s", *REQUIRED)
    assert code == 0, err
    assert _kept_off(yaml.safe_load((run_dir / "jobset.yaml").read_text())) is None
