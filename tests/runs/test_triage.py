"""Each attempt's end in one class (infrastructure, training, data) from its log, exit status and Slurm state,
with the first failing rank and its host; recorded logs and excerpts in the forms torch, torchrun, srun and
slurmstepd print them."""

from __future__ import annotations

import os

import pytest

from launcher.runs.triage import DATA, INFRASTRUCTURE, TRAINING, triage_lines

ITERATIONS = [" [2026-12-01 10:00:00] iteration       10/     100 | consumed samples:          80 | elapsed time "
              "per iteration (ms): 100.0 | learning rate: 1.000000E-04 | global batch size:     8 | lm loss: "
              "5.000000E+00 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |"]


def root_cause(rank: int, host: str, exitcode: str, traceback: str) -> list[str]:
    """torchrun's ChildFailedError summary (torch/distributed/elastic/multiprocessing/errors), after the traceback
    of torchrun's own raise."""
    return ["Traceback (most recent call last):", '  File "/usr/local/bin/torchrun", line 8, in <module>',
            "    sys.exit(main())",
            '  File "/usr/local/lib/python3.12/dist-packages/torch/distributed/launcher/api.py", line 270, in '
            "launch_agent", "    raise ChildFailedError(",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "============================================================",
            "pretrain_gpt.py FAILED",
            "------------------------------------------------------------",
            "Root Cause (first observed failure):",
            "[0]:",
            "  time      : 2026-12-01_10:00:05",
            f"  host      : {host}",
            f"  rank      : {rank} (local_rank: {rank % 8})",
            f"  exitcode  : {exitcode} (pid: 4242)",
            "  error_file: <N/A>",
            f"  traceback : {traceback}",
            "============================================================"]


def traceback(rank: int, frames: list[str], exception: str) -> list[str]:
    lines = ["Traceback (most recent call last):", *[f'  File "{f}", line 12, in x' for f in frames], exception]
    return [f"[rank{rank}]: {line}" for line in lines]


CASES = {
    "node failure by Slurm's accounting": (ITERATIONS, 0, "NODE_FAIL", INFRASTRUCTURE, "node failure", None),
    "preemption": (ITERATIONS, 0, "PREEMPTED", INFRASTRUCTURE, "preempted", None),
    "time limit": (ITERATIONS + ["slurmstepd: error: *** JOB 7 ON gpu-a3 CANCELLED AT 2026-12-01T10:00:00 DUE TO "
                                 "TIME LIMIT ***"], None, None, INFRASTRUCTURE, "time limit", "gpu-a3"),
    "node failure said by srun": (ITERATIONS + ["srun: error: Node failure on gpu-b7"], 1, None, INFRASTRUCTURE,
                                  "node failure", "gpu-b7"),
    "NCCL timeout": (ITERATIONS + ["[rank5]:[E1201 10:00:00 ProcessGroupNCCL.cpp:616] [Rank 5] Watchdog caught "
                                   "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 "
                                   "milliseconds before timing out."]
                     + root_cause(5, "gpu-c2", "-6", "Signal 6 (SIGABRT) received by PID 4242"), 1, "FAILED",
                     INFRASTRUCTURE, "NCCL timeout", "gpu-c2"),
    "a rank killed by a signal": (ITERATIONS + root_cause(3, "gpu-d4", "-9", "Signal 9 (SIGKILL) received by PID 4242"),
                                  1, "FAILED", INFRASTRUCTURE, "SIGKILL", "gpu-d4"),
    "an Xid error": (ITERATIONS + ["NVRM: Xid (PCI:0000:1b:00): 79, pid=4242, GPU has fallen off the bus."], 1, None,
                     INFRASTRUCTURE, "GPU error", None),
    "out of memory": (ITERATIONS + traceback(0, ["/mlm/megatron/core/transformer/mlp.py"],
                                             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
                      + root_cause(0, "gpu-e1", "1", "To enable traceback see: https://pytorch.org/docs"), 1, None,
                      TRAINING, "CUDA out of memory", "gpu-e1"),
    "an assertion": (ITERATIONS + traceback(2, ["/mlm/megatron/training/training.py"],
                                            "AssertionError: micro batch size must be positive")
                     + root_cause(2, "gpu-f9", "1", "To enable traceback see: https://pytorch.org/docs"), 1, None,
                     TRAINING, "assertion", "gpu-f9"),
    "a Python exception": (ITERATIONS + traceback(1, ["/mlm/pretrain_gpt.py"], "KeyError: 'tokens'")
                           + ["srun: error: gpu-g2: task 0: Exited with exit code 1"], 1, None, TRAINING,
                           "Python exception: KeyError", "gpu-g2"),
    "a missing data file": (traceback(0, ["/mlm/megatron/core/datasets/indexed_dataset.py"],
                                      "FileNotFoundError: [Errno 2] No such file or directory: '/data/web.idx'"),
                            1, None, DATA, "web.idx", None),
    "a corrupt index": (traceback(0, ["/mlm/megatron/core/datasets/gpt_dataset.py",
                                      "/mlm/megatron/core/datasets/indexed_dataset.py"],
                                  "ValueError: mmap length is greater than file size"), 1, None, DATA, "mmap", None),
    "the index build": (traceback(0, ["/mlm/megatron/core/datasets/blended_megatron_dataset_builder.py"],
                                  "RuntimeError: could not build the sample index"), 1, None, DATA, "sample index",
                        None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_end_gets_its_class_and_where(case):
    lines, code, state, cls, said, host = CASES[case]
    found = triage_lines(lines, code, state)
    assert found.cls == cls, found
    assert said in found.reason
    assert found.iteration == (10 if lines[:1] == ITERATIONS else None)
    if host:
        assert found.host == host and host in found.describe()


def test_the_first_failing_rank_is_torchruns_root_cause():
    found = triage_lines(ITERATIONS + traceback(6, ["/mlm/x.py"], "RuntimeError: boom")
                         + root_cause(6, "gpu-h1", "1", "To enable traceback"), 1)
    assert (found.rank, found.host) == (6, "gpu-h1")
    assert found.describe() == "training: Python exception: RuntimeError: boom at iteration 10, first failing rank 6 " \
                               "on gpu-h1"


def test_without_a_root_cause_the_rank_that_raised_first(log_fixture):
    found = triage_lines(traceback(3, ["/mlm/x.py"], "ValueError: bad") + traceback(1, ["/mlm/x.py"], "ValueError: x"))
    assert found.rank == 3


def test_recorded_logs(log_fixture):
    nan = triage_lines(log_fixture("bf16_2gpu_nan.log"), 0)
    assert nan.cls == TRAINING and "NaN" in nan.reason
    stopped = triage_lines(log_fixture("h200_345m_sigterm.log"), 1)
    assert stopped.cls == INFRASTRUCTURE and "signal" in stopped.reason  # torchrun's SignalException is no bug
    assert triage_lines(log_fixture("h200_345m_1gpu.log"), 0).cls is None


def test_a_failure_the_log_does_not_explain_gets_no_class():
    found = triage_lines(ITERATIONS, 1)
    assert found.cls is None and "without a cause" in found.reason


def test_a_rank_started_without_torchrun_and_killed_by_a_signal_is_named_from_its_own_status():
    """No torchrun, no root cause block: the exit status is the one rank's, 128 + the signal's number."""
    killed = triage_lines(ITERATIONS, 128 + 9, rank_status=True)
    assert (killed.cls, killed.reason, killed.rank) == (INFRASTRUCTURE, "rank killed by SIGKILL", 0)
    assert triage_lines(ITERATIONS, 128 + 9).cls is None  # torchrun's (or Slurm's) status names no rank
    assert triage_lines(ITERATIONS, 1, rank_status=True).cls is None  # an exit, not a signal
    raised = triage_lines([*ITERATIONS, "Traceback (most recent call last):", "AssertionError: no weights"],
                          128 + 6, rank_status=True)
    assert raised.cls == TRAINING and raised.rank == 0  # its own traceback first, as with torchrun


def test_a_handled_exception_line_without_a_traceback_is_no_failure():
    assert triage_lines(ITERATIONS + ["ValueError: retrying the download"], 0).cls is None


# -- the root cause among what every rank printed, and whether a retry meets it again ------------------------------

STARTUP = ["using world size: 16, data-parallel size: 2, context-parallel size: 1, tensor-model-parallel size: 4, "
           "pipeline-model-parallel size: 2"]
TRAINING_BEGINS = ["[after dataloaders are built] datetime: 2026-12-01 09:59:00 ", "done with setup ...",
                   "training ..."]
TORCHRUN_HINT = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
# what the ranks that waited print (ProcessGroupNCCL's watchdog at torch 2.x), then their abort
NCCL_TIMEOUTS = [f"[rank{r}]:[E1201 10:15:00.123456 {4000 + r} torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632] "
                 f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, "
                 "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
                 for r in (1, 2, 3)] + ["terminate called after throwing an instance of 'c10::DistBackendError'"]
NCCL_REMOTE = traceback(2, ["/mlm/megatron/core/distributed/param_and_grad_buffer.py"],
                        "torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/"
                        "ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error, NCCL version "
                        "2.21.5") + ["[rank2]: ncclRemoteError: A call failed possibly due to a network error or a "
                                     "remote process exiting prematurely."]
OOM = traceback(0, ["/mlm/megatron/core/transformer/mlp.py"],
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                "of 79.15 GiB of which 1.23 GiB is free.")


def end_of(lines: list[str]) -> tuple[str | None, bool, str]:
    found = triage_lines(lines, 1)
    return found.cls, found.persistent, found.reason


MIXED = {
    # a rank out of memory leaves the others waiting in their collective: the cause is the memory
    "out of memory, then the others' NCCL timeouts": (ITERATIONS + OOM + NCCL_TIMEOUTS
                                                      + root_cause(1, "g", "-6", "Signal 6 (SIGABRT) received"),
                                                      TRAINING, True, "out of memory"),
    "NCCL timeouts printed before the out-of-memory traceback": (ITERATIONS + NCCL_TIMEOUTS + OOM, TRAINING, True,
                                                                "out of memory"),
    "out of memory, then a peer's NCCL error": (ITERATIONS + OOM + NCCL_REMOTE, TRAINING, True, "out of memory"),
    "ranks interleaved line by line": (ITERATIONS + [line for pair in zip(OOM, NCCL_TIMEOUTS) for line in pair]
                                       + OOM[len(NCCL_TIMEOUTS):], TRAINING, True, "out of memory"),
    "an assertion mid-run, then NCCL timeouts": (ITERATIONS + traceback(0, ["/mlm/megatron/training/training.py"],
                                                                        "AssertionError: grad norm is inf")
                                                 + NCCL_TIMEOUTS, TRAINING, False, "assertion"),
    "a missing data file, then NCCL timeouts": (STARTUP + traceback(
        0, ["/mlm/megatron/core/datasets/indexed_dataset.py"],
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/web_text_document.idx'") + NCCL_TIMEOUTS,
        DATA, True, "web_text_document.idx"),
    "a peer's NCCL error alone": (ITERATIONS + NCCL_REMOTE, INFRASTRUCTURE, False, "NCCL"),
    "NCCL timeouts alone": (ITERATIONS + NCCL_TIMEOUTS, INFRASTRUCTURE, False, "NCCL timeout"),
    # a GPU that failed outranks what its peers then raise
    "an ECC error, then NCCL errors": (ITERATIONS + traceback(4, ["/mlm/megatron/training/training.py"],
                                                              "RuntimeError: CUDA error: uncorrectable ECC error "
                                                              "encountered") + NCCL_REMOTE,
                                       INFRASTRUCTURE, False, "GPU error"),
    # out of memory in the words of a kernel launch, cuBLAS and NCCL's own allocation
    "out of memory at a kernel launch": (ITERATIONS + traceback(0, ["/mlm/megatron/core/tensor_parallel/layers.py"],
                                                                "RuntimeError: CUDA error: out of memory"),
                                         TRAINING, True, "out of memory"),
    "out of memory in cuBLAS": (ITERATIONS + traceback(0, ["/mlm/x.py"], "RuntimeError: CUDA error: "
                                                       "CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate`"),
                                TRAINING, True, "out of memory"),
    "out of memory in NCCL": (STARTUP + traceback(0, ["/mlm/megatron/training/initialize.py"],
                                                  "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/"
                                                  "distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled cuda error")
                              + ["[rank0]: ncclUnhandledCudaError: Call to CUDA function failed.",
                                 "[rank0]: Last error:", "[rank0]: Cuda failure 'out of memory'"],
                              TRAINING, True, "out of memory"),
    # what the job's settings or environment raise before training begins
    "a divisibility assertion at start-up": (STARTUP + traceback(0, ["/mlm/megatron/training/arguments.py"],
                                                                "AssertionError: number of attention heads (32) must "
                                                                "be divisible by tensor parallel size (3)")
                                             + root_cause(0, "g", "1", TORCHRUN_HINT), TRAINING, True, "start-up"),
    "a ValueError at start-up": (STARTUP + traceback(0, ["/mlm/megatron/training/arguments.py"],
                                                     "ValueError: num_layers should be divisible by the pipeline "
                                                     "size"), TRAINING, True, "start-up"),
    "Megatron's parser refusing a flag": (["usage: pretrain_gpt.py [-h] [--num-layers NUM_LAYERS]",
                                           "pretrain_gpt.py: error: unrecognized arguments: --no-such-flag"],
                                          TRAINING, True, "unrecognized arguments"),
    "a module missing": (traceback(0, ["/mlm/megatron/core/extensions/transformer_engine.py"],
                                   "ModuleNotFoundError: No module named 'transformer_engine'"),
                         TRAINING, True, "import error"),
    "an extension built for another torch": (ITERATIONS + traceback(0, ["/mlm/x.py"], "ImportError: /usr/lib/apex/"
                                                                    "fused_layer_norm_cuda.so: undefined symbol: x"),
                                             TRAINING, True, "import error"),
    "the disk full at a checkpoint": (ITERATIONS + traceback(0, ["/mlm/megatron/training/checkpointing.py"],
                                                             "OSError: [Errno 28] No space left on device"),
                                      INFRASTRUCTURE, True, "disk full"),
    "the quota full at a checkpoint": (ITERATIONS + traceback(0, ["/mlm/megatron/core/dist_checkpointing/x.py"],
                                                              "OSError: [Errno 122] Disk quota exceeded: '/c/x'"),
                                       INFRASTRUCTURE, True, "disk full"),
    "torch.save's writer on a full disk": (ITERATIONS + traceback(0, ["/torch/serialization.py"],
                                                                  "RuntimeError: [enforce fail at inline_container.cc"
                                                                  ":603] . unexpected pos 4563878400 vs 4563878288"),
                                           INFRASTRUCTURE, True, "disk full"),
    # the kernel's OOM killer, said by slurmstepd or srun: the host's memory, not a node to leave out
    "the OOM killer, then SIGKILLed ranks": (ITERATIONS + [
        "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step tasks have been OOM Killed.",
        *NCCL_TIMEOUTS] + root_cause(3, "g", "-9", "Signal 9 (SIGKILL) received by PID 4242"),
        TRAINING, False, "host out of memory"),
    "srun's out-of-memory task": (ITERATIONS + ["srun: error: gpu-a2: task 3: Out Of Memory"], TRAINING, False,
                                  "host out of memory"),
    # what a retry may well fix: kept retryable
    "a KeyError mid-run": (ITERATIONS + traceback(0, ["/mlm/x.py"], "KeyError: 'tokens'"), TRAINING, False,
                           "KeyError"),
    "an exception after training began, before its first logged iteration": (
        STARTUP + TRAINING_BEGINS + traceback(0, ["/mlm/x.py"], "ValueError: bad batch"), TRAINING, False, "bad"),
    "a NaN loss": (ITERATIONS + traceback(0, ["/mlm/megatron/training/training.py"], "AssertionError: found NaN in "
                                          "local forward loss calculation. Device: 0, node: gpu-a1"),
                   TRAINING, False, "NaN"),
    "a word with nan in it is no NaN": (ITERATIONS + traceback(0, ["/mlm/x.py"], "RuntimeError: node under "
                                                               "maintenance"), TRAINING, False, "Python exception"),
    "a RuntimeError at start-up (a port taken, a flaky file system)": (
        STARTUP + traceback(0, ["/mlm/x.py"], "RuntimeError: The server socket has failed to listen on any local "
                                              "network address."), TRAINING, False, "server socket"),
    "colour codes and a progress bar redrawn in place": ([f"\x1b[31m{line}\x1b[0m" for line in ITERATIONS]
                                                         + ["  3%|3   | 1/30\r 100%|##########| 30/30\r"]
                                                         + [f"\x1b[1m{line}" for line in OOM] + NCCL_TIMEOUTS,
                                                         TRAINING, True, "out of memory"),
}


@pytest.mark.parametrize("case", list(MIXED))
def test_the_root_cause_and_whether_a_retry_meets_it_again(case):
    lines, cls, persistent, said = MIXED[case]
    found_cls, found_persistent, reason = end_of(lines)
    assert (found_cls, found_persistent) == (cls, persistent), reason
    assert said in reason


def test_what_a_retry_meets_again_is_recorded_and_read_back():
    from launcher.runs.triage import describe_failures

    found = triage_lines(ITERATIONS + OOM + NCCL_TIMEOUTS, 1)
    assert found.as_dict()["persistent"] is True
    assert describe_failures([found.as_dict()]) == ["attempt 1: training: CUDA out of memory at iteration 10, "
                                                    "first failing rank 0"]


# -- in launch report --------------------------------------------------------------------------------------------

def test_report_classifies_each_slurm_attempt_with_sacct_and_the_log(tmp_path, launch):
    from launcher.runs.rundir import write_run_dir

    run_dir = write_run_dir(tmp_path / "runs" / "345m-20261201T100000Z", preset={"name": "345m", "megatron": {}},
                            manifest={"checkpoint_dir": str(tmp_path / "ckpt")}, argv=["sbatch", "job.sbatch"],
                            env={})
    (run_dir / "slurm-7.out").write_text("\n".join([
        "megatron-launch: job 7 attempt 1 on n[1-2], rendezvous n1:29500", *ITERATIONS,
        "megatron-launch: job 7 attempt 2 on n[1-2], rendezvous n1:29500",
        "megatron-launch: attempt 1 ended: killed without a word (its node failed, or Slurm killed it)",
        *ITERATIONS, *traceback(1, ["/mlm/pretrain_gpt.py"], "KeyError: 'tokens'"),
        "srun: error: n2: task 1: Exited with exit code 1",
        "megatron-launch: attempt 2 ended: training failed with exit status 1; not requeued"]) + "\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    records = ("7|NODE_FAIL|0:0|2026-12-01T10:00:00|2026-12-01T10:05:00|n[1-2]\\n"
               "7|FAILED|1:0|2026-12-01T10:06:00|2026-12-01T10:07:00|n[1-2]\\n")
    (bin_dir / "sacct").write_text(f"#!/bin/bash\nprintf '{records}'\n")
    (bin_dir / "sacct").chmod(0o755)
    import os

    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    code, out, err = launch("report", str(run_dir), "--format", "json", env=env)
    import json

    failures = json.loads(out)["failures"]
    assert [f["class"] for f in failures] == [INFRASTRUCTURE, TRAINING], failures
    assert failures[0]["reason"] == "node failure (Slurm: NODE_FAIL)"
    assert (failures[1]["rank"], failures[1]["host"], failures[1]["iteration"]) == (1, "n2", 10)
    code, out, err = launch("report", str(run_dir), env=env)
    assert "failures:           attempt 1: infrastructure: node failure (Slurm: NODE_FAIL) at iteration 10" in out
    assert "attempt 2: training: Python exception: KeyError: 'tokens' at iteration 10, first failing rank 1 on n2" \
        in out


# -- recorded in summary.json, shown by launch runs -------------------------------------------------------------

def test_a_failed_run_here_records_its_class_and_launch_runs_shows_it(tmp_path, launch):
    import json

    from launcher.runs.monitor import Monitor
    from launcher.runs.rundir import write_run_dir

    root = tmp_path / "runs"
    run_dir = write_run_dir(root / "toy-20261201T100000Z", preset={"name": "toy"}, argv=["x"], env={},
                            manifest={"preset": "toy", "created": "2026-12-01T10:00:00+00:00",
                                      "attempts": [{"started": "2026-12-01T10:00:00+00:00"}]})
    (run_dir / "logs").mkdir(exist_ok=True)
    monitor = Monitor(run_dir, out=open(os.devnull, "w"), tty=False)  # noqa: SIM115
    for line in ITERATIONS + traceback(0, ["/mlm/megatron/core/transformer/mlp.py"],
                                       "torch.OutOfMemoryError: CUDA out of memory.") \
            + root_cause(0, "gpu-e1", "1", "To enable traceback"):
        monitor.feed(line)
    summary = monitor.close(1)
    assert summary.failure == {"class": TRAINING, "reason": "CUDA out of memory", "iteration": 10, "rank": 0,
                               "host": "gpu-e1", "persistent": True}
    assert json.loads((run_dir / "summary.json").read_text())["failure"]["class"] == TRAINING
    write_run_dir(root / "toy-20261201T090000Z", preset={"name": "toy"}, argv=["x"], env={},
                  manifest={"preset": "toy", "created": "2026-12-01T09:00:00+00:00"})
    code, out, err = launch("runs", "--run-root", str(root))
    assert code == 0, err
    header, failed, other = out.splitlines()
    assert header.split()[-1] == "failure"
    assert failed.endswith("training rank 0 on gpu-e1: CUDA out of memory") and other.endswith("-")
    code, out, err = launch("runs", "--run-root", str(root), "--format", "json")
    assert json.loads(out)[0]["failure"]["host"] == "gpu-e1"


def test_a_hostile_failure_record_is_not_taken_as_is(tmp_path):
    from launcher.runs.listing import describe
    from launcher.runs.rundir import write_run_dir

    run_dir = write_run_dir(tmp_path / "toy-1", preset={"name": "toy"}, argv=["x"], env={}, manifest={})
    (run_dir / "summary.json").write_text('{"outcome": "failed", "failure": {"class": "x", "rank": "0; rm -rf /", '
                                          '"host": ["a"], "reason": "' + "y" * 5000 + '"}}')
    row = describe(run_dir)
    assert row.failure == {"class": "x", "reason": "y" * 200, "iteration": None, "rank": None, "host": None}


# ---- Megatron's rerun state machine: exit code 16 asks for a resume, 17 says the validation failed ----

def _pin_rerun_state_machine():
    """megatron/core/rerun_state_machine.py of the pin, parsed: the Megatron-LM checkout's (MEGATRON_LM_PATH, the
    submodule) or the installed megatron-core's (the pinned 0.18.0); skip without either."""
    import ast
    import importlib.util
    from pathlib import Path

    roots = [os.environ.get("MEGATRON_LM_PATH"), Path(__file__).resolve().parents[2] / "third_party" / "megatron-lm"]
    sources = [Path(root) / "megatron" / "core" / "rerun_state_machine.py" for root in roots if root]
    installed = importlib.util.find_spec("megatron")
    sources += [Path(folder) / "core" / "rerun_state_machine.py"
                for folder in (installed.submodule_search_locations or [] if installed else [])]
    for source in sources:
        if source.is_file():
            return ast.parse(source.read_text())
    pytest.skip("no Megatron-LM source with megatron/core/rerun_state_machine.py (set MEGATRON_LM_PATH)")


def test_the_rerun_exit_table_is_megatrons_at_the_pin():
    """Both codes and the warning before each exit as the pin's source has them, so the table cannot drift."""
    import ast

    from launcher.runs import triage

    tree = _pin_rerun_state_machine()
    constants = {node.target.id: node.value.value for node in tree.body
                 if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                 and node.target.id.startswith("EXIT_CODE_") and isinstance(node.value, ast.Constant)}
    assert constants == {"EXIT_CODE_RESUME_TO_DISAMBIGUATE": triage.RESUME_TO_DISAMBIGUATE,
                         "EXIT_CODE_FAILED_ON_RESULT_VALIDATION": triage.FAILED_ON_RESULT_VALIDATION}
    method = next(node for node in ast.walk(tree)
                  if isinstance(node, ast.FunctionDef) and node.name == "should_checkpoint_and_exit")
    said: dict[str, int] = {}
    for branch in (node for node in ast.walk(method) if isinstance(node, ast.If)):
        warning = next((call.args[2].value for call in ast.walk(branch.body[0]) if isinstance(call, ast.Call)
                        and getattr(call.func, "id", "") == "log_single_rank"), None)
        returned = next((node.value for node in branch.body if isinstance(node, ast.Return)), None)
        if warning is not None and isinstance(returned, ast.Tuple) and isinstance(returned.elts[-1], ast.Name):
            said[warning] = constants[returned.elts[-1].id]
    assert said == triage.RERUN_EXIT_LINES
    assert set(said.values()) == set(triage.RERUN_EXITS)


RESUME_WARNING = ("[default0]:WARNING:megatron.core.rerun_state_machine:Saving a checkpoint and exiting now. Please "
                  "resume the job from the checkpoint to rerun the last iteration and establish a diagnostic")
FAILED_WARNING = ("[default0]:WARNING:megatron.core.rerun_state_machine:Exiting now. A checkpoint at the last "
                  "iteration already exists if further examination is needed")
UNEXPECTED = ["[default1]:ERROR:megatron.core.rerun_state_machine:Unexpected result nan on rank 1 at iteration #11 "
              "invocation #1 (message='found NaN in local forward loss calculation')"]


@pytest.mark.parametrize(("lines", "exit_code"), [
    (ITERATIONS + UNEXPECTED + root_cause(1, "gpu-h1", "16", "To enable traceback see: https://pytorch.org"), 1),
    (ITERATIONS + UNEXPECTED + ["srun: error: gpu-h1: task 0: Exited with exit code 16"], 16),
    (ITERATIONS + UNEXPECTED, 16),
    (ITERATIONS + UNEXPECTED + [RESUME_WARNING], None),
])
def test_megatrons_resume_code_is_requeued_every_time(lines, exit_code):
    from launcher.runs.requeue_policy import REQUEUE, decide

    found = triage_lines(lines, exit_code)
    assert found.cls == TRAINING and "exit code 16" in found.reason and found.resume_asked and not found.persistent
    assert found.as_dict()["resume_asked"] is True
    assert decide([found]).action == REQUEUE
    assert decide([found, found, found]).action == REQUEUE  # the same iteration again: Megatron asked again


@pytest.mark.parametrize(("lines", "exit_code"), [
    (ITERATIONS + UNEXPECTED + root_cause(1, "gpu-h1", "17", "To enable traceback see: https://pytorch.org"), 1),
    (ITERATIONS + UNEXPECTED + ["srun: error: gpu-h1: task 0: Exited with exit code 17"], 17),
    (ITERATIONS + UNEXPECTED + [FAILED_WARNING], None),
    (ITERATIONS + UNEXPECTED + [RESUME_WARNING] + root_cause(1, "gpu-h1", "17", "To enable traceback"), 1),
])
def test_megatrons_failed_validation_code_stops_at_once(lines, exit_code):
    from launcher.runs.requeue_policy import STOP, decide

    found = triage_lines(lines, exit_code)
    assert found.cls == TRAINING and "exit code 17" in found.reason and found.persistent and not found.resume_asked
    assert "resume_asked" not in found.as_dict()
    assert decide([found]).action == STOP


def test_another_exit_code_after_a_nan_is_no_rerun_exit():
    found = triage_lines(ITERATIONS + UNEXPECTED + root_cause(1, "gpu-h1", "1", "To enable traceback"), 1)
    assert not found.resume_asked and not found.persistent and "exit code" not in found.reason


# ---- the host a fault blames: named in each form a log says it ----

ECC = ["RuntimeError: CUDA error: uncorrectable ECC error encountered",
       "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
       "incorrect.", "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
       "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."]
NCCL_SYSTEM = traceback(5, ["/mlm/megatron/core/distributed/param_and_grad_buffer.py"],
                        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                        "ProcessGroupNCCL.cpp:2006, unhandled system error (run with NCCL_DEBUG=INFO for details), "
                        "NCCL version 2.21.5") + [
    "[rank5]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
    "[rank5]: Last error:", "[rank5]: Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory"]
NCCL_PEER_SEEN = ("gpu-f7:51234:51500 [1] transport/net_ib.cc:1106 NCCL WARN NET/IB : Got completion from peer "
                  "10.1.0.6<40123> with status=5 opcode=0 len=0 vendor err 249 (Recv) localGid ::ffff:10.1.0.7")
NCCL_OWN = "gpu-f6:41234:41500 [5] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot " \
           "allocate memory"
FIRST_RERUN = ("[default1]:ERROR:megatron.core.rerun_state_machine:Rank 1, node gpu-h2.cluster.example, device 1, "
               "iteration #11: First rerun: unexpected result is reproducible within the tolerance (nan = nan). Need "
               "to rerun on a different GPU to verify correctness.!")
SAME_GPU_AGAIN = ("[default1]:ERROR:megatron.core.rerun_state_machine:Got rescheduled on the same GPU. Need to resume "
                  "again from the same checkpoint (node: gpu-h3, gpu: 1)")
AGAIN_WARNING = ("[default0]:WARNING:megatron.core.rerun_state_machine:Exiting now. Please resume the job from the "
                 "same "
                 "checkpoint to rerun the last iteration and establish a diagnostic")

HOST_FAULTS = {
    "a GPU's ECC error, the node from srun's failing task": (
        ITERATIONS + [f"[rank3]: {line}" for line in ECC]
        + ["srun: error: gpu-b3: task 1: Exited with exit code 1", "srun: error: gpu-b4: task 0: Killed"],
        1, "GPU error (CUDA/Xid)", "gpu-b3"),
    "a GPU's ECC error, the machine from torchrun's root cause": (
        ITERATIONS + [f"[rank3]: {line}" for line in ECC]
        + root_cause(3, "gpu-c4.cluster.example", "1", "To enable traceback see: https://pytorch.org"),
        1, "GPU error (CUDA/Xid)", "gpu-c4.cluster.example"),
    "an Xid as syslog writes it": (
        ITERATIONS + ["Dec  1 10:00:02 gpu-c5 kernel: [12345.678901] NVRM: Xid (PCI:0000:1b:00): 48, pid=4242, "
                      "name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the "
                      "framebuffer "
                      "at partition 7, subpartition 0."], 1, "GPU error (CUDA/Xid)", "gpu-c5"),
    "a dead node": (ITERATIONS + ["srun: error: Node failure on gpu-e5",
                                  "srun: error: gpu-e6: task 1: Killed"], 1, "node failure (srun)", "gpu-e5"),
    "the OOM killer": (
        ITERATIONS + ["slurmstepd: error: Detected 1 oom_kill event in StepId=7.0. Some of the step tasks have been "
                      "OOM Killed.", "srun: error: gpu-d2: task 1: Out Of Memory",
                      "srun: error: gpu-d1: task 0: Killed"], 1, "host out of memory", "gpu-d2"),
    "one machine's NCCL system error": (
        ITERATIONS + NCCL_SYSTEM + [NCCL_OWN, NCCL_PEER_SEEN], 1, "NCCL system error", "gpu-f6"),
    "the machine Megatron's rerun must avoid": (
        ITERATIONS + UNEXPECTED
        + [FIRST_RERUN, RESUME_WARNING, "srun: error: gpu-h1: task 0: Exited with exit code 16"],
        16, "exit code 16", "gpu-h2.cluster.example"),
    "the machine the job came back to": (
        ITERATIONS + [SAME_GPU_AGAIN, AGAIN_WARNING] + root_cause(0, "gpu-h9", "16", "To enable traceback"), 1,
        "exit code 16", "gpu-h3"),
}


@pytest.mark.parametrize("case", list(HOST_FAULTS))
def test_a_fault_of_a_host_names_that_host(case):
    lines, code, said, host = HOST_FAULTS[case]
    found = triage_lines(lines, code)
    assert said in found.reason and (found.host, found.host_fault) == (host, True), found
    assert found.as_dict()["host_fault"] is True


NO_HOST = {
    "a GPU error no line places": (ITERATIONS + [f"[rank3]: {line}" for line in ECC], 1, "GPU error"),
    "an NCCL system error without NCCL's lines": (ITERATIONS + NCCL_SYSTEM, 1, "no machine(s)"),
    "an NCCL system error two machines say": (
        ITERATIONS + NCCL_SYSTEM + [NCCL_OWN, NCCL_OWN.replace("gpu-f6", "gpu-f8")], 1, "2 machine(s)"),
    "Megatron's resume without its node line": (ITERATIONS + UNEXPECTED + [RESUME_WARNING]
                                                + ["srun: error: gpu-h1: task 0: Exited with exit code 16"], 16,
                                                "exit code 16"),
}


@pytest.mark.parametrize("case", list(NO_HOST))
def test_a_fault_of_a_host_the_log_does_not_place_names_none(case):
    """Every rank exits 16, and every machine sees a peer's NCCL failure: the first task srun saw end is no culprit."""
    lines, code, said = NO_HOST[case]
    found = triage_lines(lines, code)
    assert said in found.reason, found
    assert found.host is None or not found.host_fault, found


@pytest.mark.parametrize("line", [
    "slurmstepd: error: *** JOB 7 ON gpu-a3 CANCELLED AT 2026-12-01T10:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG "
    "FOR DETAILS ***",  # slurmstepd names its own node, where it saw the cancel
    "slurmstepd: error: *** JOB 7 ON gpu-a3 CANCELLED AT 2026-12-01T10:00:00 DUE TO TIME LIMIT ***",
    "[rank1]:[E1201 10:00:00 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
])
def test_an_end_that_says_nothing_against_the_host_it_names_blames_none(line):
    found = triage_lines([*ITERATIONS, line, "srun: error: gpu-a4: task 1: Exited with exit code 1"], 1)
    assert found.cls == INFRASTRUCTURE and not found.host_fault and "host_fault" not in found.as_dict()


@pytest.mark.parametrize("name", ["gpu 7", "gpu-7;reboot", "$(reboot)", "`id`", "x" * 60_000])
def test_a_hostile_name_in_a_root_cause_reaches_no_decision(name):
    from launcher.runs.requeue_policy import decide

    found = triage_lines(ITERATIONS + [f"[rank3]: {line}" for line in ECC]
                         + root_cause(3, name, "1", "To enable traceback"), 1)
    assert found.host_fault
    assert decide([found], job_nodes=None).exclude == ()
    assert decide([found], job_nodes=("gpu-7", "gpu-8")).exclude == ()


def test_the_rerun_node_lines_are_megatrons_at_the_pin():
    """The two lines that name the machine a rerun must avoid, written from the pin's own formats, name it."""
    import ast

    tree = _pin_rerun_state_machine()
    formats = {"".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
               for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)}
    failure = "Rank {}, node {}, device {}, iteration #{}: {}!"  # log_failure's
    reproduced = next(f for f in formats if f.startswith("First rerun: unexpected result is reproducible"))
    again = next(f for f in formats if f.startswith("Got rescheduled on the same GPU"))
    assert failure in formats
    first = failure.format(1, "gpu-h2", 1, 11, reproduced.format("nan", "nan"))
    for line, host in [(first, "gpu-h2"), (again.format("gpu-h3", 1), "gpu-h3")]:
        found = triage_lines([*ITERATIONS, f"[default1]:ERROR:megatron.core.rerun_state_machine:{line}"], 16)
        assert (found.resume_asked, found.host, found.host_fault) == (True, host, True), line


# -- each class of failure in the other words it comes in (variants of the real logs in tests/fixtures/failure_logs) --

CLASS_VARIANTS = {
    # a GPU error in the words of the driver's enums, an old torch, a C++ terminate
    "cudaErrorLaunchFailure": (["[rank2]: RuntimeError: CUDA driver error: cudaErrorLaunchFailure"], INFRASTRUCTURE,
                               "requeue"),
    "CUDA_ERROR_LAUNCH_FAILED": (["E1201 jax: CUDA_ERROR_LAUNCH_FAILED: unspecified"], INFRASTRUCTURE, "requeue"),
    "old torch's ECC": (["THCudaCheck FAIL file=x.cu line=1 error=39 : uncorrectable ECC error encountered"],
                        INFRASTRUCTURE, "requeue"),
    "a cut traceback's assertion": (['[rank4]:   File "/mlm/megatron/training/arguments.py", line 9, in validate_args',
                                     "[rank4]: AssertionError: tensor parallel size must divide the attention heads"],
                                    TRAINING, "stop"),
    "a cut traceback's import error": (['  File "/mlm/megatron/core/extensions/transformer_engine.py", line 3, in '
                                        "<module>", "ModuleNotFoundError: No module named 'transformer_engine'"],
                                       TRAINING, "stop"),
    "torchx's prefix on a rank's traceback": (
        ["trainer/0 [default1]:[rank1]: Traceback (most recent call last):",
         'trainer/0 [default1]:[rank1]:   File "/mlm/pretrain_gpt.py", line 3, in <module>',
         "trainer/0 [default1]:[rank1]: KeyError: 'tokens'"], TRAINING, "stop"),
    "NCCL's invalid argument": (["[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1, "
                                 "invalid argument (run with NCCL_DEBUG=WARN for details), NCCL version 2.21.5",
                                 "[rank0]: ncclInvalidArgument: Invalid value for an argument."], TRAINING, "stop"),
    "Megatron's dist-checkpoint validation": (
        ['  File "/mlm/megatron/core/dist_checkpointing/validation.py", line 9, in validate_sharding',
         "megatron.core.dist_checkpointing.core.CheckpointingException: Invalid access pattern for ShardedTensor"],
        TRAINING, "stop"),
    "a socket transport's error": (["gpu-3:11:12 [0] NCCL INFO x", "gpu-3:11:12 [0] misc/socket.cc:50 NCCL WARN "
                                    "NET/Socket : Call to recv from 10.0.0.2<4000> failed : Connection refused"],
                                   INFRASTRUCTURE, "requeue"),
    "faulthandler's illegal instruction": (["Fatal Python error: Illegal instruction", "",
                                            "Current thread 0x00007f (most recent call first):"], TRAINING, "once"),
    "srun's segmentation fault": (["srun: error: gpu-5: task 3: Segmentation fault (core dumped)"], TRAINING, "once"),
    "torchrun's SIGABRT line alone": (["E1201 10:00:00 123 torch/distributed/elastic/multiprocessing/api.py:869] "
                                       "failed (exitcode: -6) local_rank: 3 (pid: 77) of binary: /usr/bin/python"],
                                      TRAINING, "once"),
    "torchrun's SIGTERM line alone": (["E1201 10:00:00 123 torch/distributed/elastic/multiprocessing/api.py:869] "
                                       "failed (exitcode: -15) local_rank: 3 (pid: 77) of binary: /usr/bin/python"],
                                      INFRASTRUCTURE, "requeue"),
    "a kernel built for another GPU": (traceback(0, ["/mlm/megatron/core/fusions/fused_softmax.py"],
                                                 "RuntimeError: CUDA error: no kernel image is available for execution "
                                                 "on the device") + ITERATIONS, TRAINING, "stop"),
    "Megatron's unexpected inf without reruns": (
        ["[rank0]: RuntimeError: Rank 0, node gpu-1, device 0, iteration 12: Unexpected result inf (message='found "
         "Inf in local grad norm')"], TRAINING, "once"),
}


@pytest.mark.parametrize("case", list(CLASS_VARIANTS))
def test_each_class_of_failure_is_read_in_its_other_words(case):
    from launcher.runs.requeue_policy import STOP, decide

    lines, cls, retry = CLASS_VARIANTS[case]
    found = triage_lines(lines, 1)
    actions = (decide([found]).action, decide([found, found]).action)
    said = {("stop", "stop"): "stop", ("requeue", "stop"): "once"}.get(actions, "requeue")
    assert (found.cls, said) == (cls, retry), found
    assert retry != "requeue" or STOP not in actions


def test_torchruns_root_cause_outranks_the_other_failures_it_lists():
    """torchrun lists the ranks it stopped (SIGTERM) beside the first failure: the root cause says the end."""
    others = ["Failures:", "[1]:", "  time      : 2026-12-01_10:00:05", "  host      : gpu-a1",
              "  rank      : 1 (local_rank: 1)", "  exitcode  : -15 (pid: 4243)", "  error_file: <N/A>",
              "  traceback : Signal 15 (SIGTERM) received by PID 4243",
              "------------------------------------------------------------"]
    lines = root_cause(0, "gpu-a1", "17", "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
    found = triage_lines([*ITERATIONS, *lines[:9], *others, *lines[9:]], 1)
    assert found.reason.startswith("Megatron's result validation failed") and found.persistent, found


# -- a rank's own output that looks like the launcher's or the scheduler's lines decides nothing --------------------

LOOK_ALIKES = {
    "slurmstepd's time limit": ["slurmstepd: error: *** JOB 7 ON gpu-a3 CANCELLED AT 2026-12-01T10:00:00 DUE TO "
                                "TIME LIMIT ***"],
    "srun's node failure": ["srun: error: Node failure on gpu-b7"],
    "srun's out of memory": ["srun: error: gpu-b7: task 1: Out Of Memory"],
    "syslog's Xid naming a host": ["Dec  1 10:00:02 gpu-7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has "
                                   "fallen off the bus."],
    "torchrun's root cause saying exit 17": root_cause(0, "gpu-a1", "17", "To enable traceback")[9:],
    "torchrun's failed line": ["E1201 api.py:869] failed (exitcode: -9) local_rank: 3 (pid: 77) of binary: python"],
}


@pytest.mark.parametrize("case", list(LOOK_ALIKES))
def test_a_ranks_look_alike_of_a_launcher_line_says_neither_stop_nor_requeue(case):
    """A rank's output carries torchrun's prefix: what it prints in slurmstepd's, srun's, syslog's or torchrun's words
    is the rank's text, not how the job ended, and names no host to leave out."""
    from launcher.runs.requeue_policy import decide

    said = triage_lines([*ITERATIONS, *(f"[rank3]:{line}" for line in LOOK_ALIKES[case])], 1)
    assert not said.persistent and said.host is None, said
    assert decide([said]).exclude == ()
    assert said.cls is None or case == "syslog's Xid naming a host", said  # the GPU error's words are the rank's
    real = triage_lines([*ITERATIONS, *LOOK_ALIKES[case]], 1)  # the same lines from the launcher or the scheduler
    assert real.cls is not None, real


def test_a_lines_facts_are_read_from_its_head_only():
    """A failure's words open its line; past the first FACT_WINDOW characters a line is not searched, so a 1 GiB
    tail of 64 KiB lines costs the patterns what 8 KiB lines would."""
    from launcher.runs.triage import FACT_WINDOW, NET_WINDOW

    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert triage_lines([*ITERATIONS, f"[rank0]: {oom}"], 1).persistent
    assert triage_lines([*ITERATIONS, "x" * FACT_WINDOW + oom], 1).cls is None
    ib = "gpu-1:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with error 12"
    assert triage_lines([*ITERATIONS, ib], 1).reason == "NCCL/network error"
    far = ib.replace("NET/IB : ", "NET/IB : " + "y" * NET_WINDOW)
    assert triage_lines([*ITERATIONS, far], 1).cls is None


# an exit code a log writes is a count like any other (ASCII digits, a few of them): 5,000 digits passed isdigit()
# and then failed int() (an internal error of report and of the requeue policy), '¹⁶' passed isdigit() too
@pytest.mark.parametrize("code", ["9" * 5000, "1" + "6" * 4299, "\u00b9\u2076", "016" * 2000])
@pytest.mark.parametrize("where", ["root cause", "srun"])
def test_an_exit_code_that_is_no_count_is_no_rerun_exit(code, where):
    lines = ITERATIONS + UNEXPECTED + (root_cause(1, "gpu-h1", code, "To enable traceback") if where == "root cause"
                                       else [f"srun: error: gpu-h1: task 0: Exited with exit code {code}"])
    for exit_code in (None, 1):
        found = triage_lines(lines, exit_code)
        assert not found.resume_asked and not found.persistent
