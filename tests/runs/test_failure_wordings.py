"""Classes of failure in the words the real logs of tests/fixtures/failure_logs show them, each in other words than
those logs: the kernel's OOM killer, a rank's CUDA crash without a Python traceback, Megatron's NaN check line alone,
a stale file handle, an import error raised in the data code, a GPU the setup names that the machine lacks, and lines
behind a multi-node runner's host or a tool's own prefix. Each is decided as the requeue policy does (the first time
and after the same failure again)."""

from __future__ import annotations

import pytest

from launcher.runs.requeue_policy import decide
from launcher.runs.triage import DATA, INFRASTRUCTURE, TRAINING, triage_lines

ITERATIONS = [" [2026-12-01 10:00:00] iteration       10/     100 | consumed samples:          80 | elapsed time "
              "per iteration (ms): 100.0 | learning rate: 1.000000E-04 | global batch size:     8 | lm loss: "
              "5.000000E+00 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |"]
TIMEOUTS = ["[rank1]:[E1201 10:10:00 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."]


def frames(rank: int | None, files: list[str], exception: str) -> list[str]:
    lines = ["Traceback (most recent call last):", *[f'  File "{f}", line 12, in x' for f in files], exception]
    return [f"[rank{rank}]: {line}" if rank is not None else line for line in lines]


def retry(lines: list[str]) -> tuple[str | None, str]:
    found = triage_lines(lines, 1)
    actions = (decide([found]).action, decide([found, found]).action)
    return found.cls, {("stop", "stop"): "stop", ("requeue", "stop"): "once"}.get(actions, "requeue")


WORDINGS = {
    # the kernel's OOM killer in its own words: host memory, retried once like Slurm's OUT_OF_MEMORY
    "dmesg's OOM kill": ([*ITERATIONS, "[812.1] Out of memory: Killed process 4242 (pt_main_thread) total-vm:9kB"],
                         TRAINING, "once"),
    "the cgroup's OOM kill in the journal": (
        [*ITERATIONS, "Dec 01 10:00:00 gpu-4 kernel: Memory cgroup out of memory: Killed process 77 (python)"],
        TRAINING, "once"),
    "the OOM killer invoked": ([*ITERATIONS, "[9.9] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0"],
                               TRAINING, "once"),
    "an old kernel's OOM kill": ([*ITERATIONS, "[Thu Dec  7 00:05:15 2017] Memory cgroup out of memory: Kill process "
                                  "24572 (python) score 0 or sacrifice child"], TRAINING, "once"),
    # a rank's kernel failing, said without a Python traceback
    "a C++ terminate's misaligned address": (
        [*ITERATIONS, "terminate called after throwing an instance of 'c10::CUDAError'",
         "  what():  CUDA error: misaligned address"], TRAINING, "once"),
    "a logger's device-side assert": (
        [*ITERATIONS, "2026-12-01 10:00:00 ERROR step failed: CUDA error: device-side assert triggered"],
        TRAINING, "once"),
    "cuDNN's execution failure": ([*ITERATIONS, "[rank2]: RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"],
                                  TRAINING, "once"),
    "cuBLASLt's internal error": (
        [*ITERATIONS, "RuntimeError: CUDA error: CUBLAS_STATUS_INTERNAL_ERROR when calling `cublasLtMatmul( ltHandle, "
                      "computeDesc.descriptor(), &alpha_val, mat1_ptr, Adesc.descriptor())`"], TRAINING, "once"),
    "the crash before the others' timeouts": (
        [*ITERATIONS, "terminate called after throwing an instance of 'c10::Error'",
         "  what():  CUDA error: an illegal memory access was encountered", *TIMEOUTS], TRAINING, "once"),
    # Megatron's NaN check, its line alone (the other ranks then time out in their collective)
    "the NaN check's forward loss line": (
        [*ITERATIONS, "[rank0]: AssertionError: Rank 0: found NaN in local forward loss calculation. Device: 0, "
                      "node: gpu-1", *TIMEOUTS], TRAINING, "once"),
    "the Inf check's grad norm line": (
        [*ITERATIONS, "AssertionError: Rank 7: found Inf in local grad norm in backward pass before data-parallel "
                      "communication collective. Device: 7"], TRAINING, "once"),
    # a network file system's handle gone stale: the file system's, the next attempt opens its files afresh
    "a stale handle at a checkpoint's save": (
        [*ITERATIONS, *frames(3, ["/mlm/megatron/training/checkpointing.py"],
                              "OSError: [Errno 116] Stale file handle: '/ckpt/iter_0000010/.metadata'")],
        INFRASTRUCTURE, "requeue"),
    "a stale NFS handle at start-up": (
        frames(None, ["/mlm/megatron/training/checkpointing.py"],
               "RuntimeError: read(): fd 12 failed with Stale NFS file handle"), INFRASTRUCTURE, "requeue"),
    # the environment's import error, wherever it is raised (the data code builds its C++ helpers)
    "a module missing in the dataset code": (
        frames(0, ["/mlm/megatron/core/datasets/gpt_dataset.py", "/mlm/megatron/core/datasets/utils.py"],
               "ModuleNotFoundError: No module named 'megatron.core.datasets.helpers_cpp'"), TRAINING, "stop"),
    "an undefined symbol in the indexed dataset": (
        [*ITERATIONS, *frames(1, ["/mlm/megatron/core/datasets/indexed_dataset.py"],
                              "ImportError: /usr/lib/python3/fused.so: undefined symbol: _ZN3c104cuda9SetDeviceEi")],
        TRAINING, "stop"),
    # a GPU the job's setup names that the machine does not have
    "an invalid device ordinal mid-run": (
        [*ITERATIONS, *frames(9, ["/mlm/megatron/training/initialize.py"],
                              "torch.AcceleratorError: CUDA error: invalid device ordinal")], TRAINING, "stop"),
    # a multi-node runner's host before the rank's prefix (pdsh, DeepSpeed's runner)
    "a host before the rank's prefix": (
        [f"gpu-3: {line}" for line in frames(5, ["/mlm/pretrain_gpt.py"],
                                             "AssertionError: num_layers must divide pipeline stages")],
        TRAINING, "stop"),
    # a tool's own prefix before each line of the traceback, its timestamps of one width
    "a task runner's prefix": (
        [f"2026-12-01 10:00:0{n}.{n}00 [7/train/42 (pid 4242)] {line}"
         for n, line in enumerate(frames(None, ["/mlm/megatron/training/checkpointing.py", "torch/serialization.py"],
                                         "OSError: [Errno 28] No space left on device"))],
        INFRASTRUCTURE, "stop"),
}


@pytest.mark.parametrize("case", list(WORDINGS))
def test_each_class_of_failure_is_read_in_its_other_words(case):
    lines, cls, expected = WORDINGS[case]
    assert retry(lines) == (cls, expected), triage_lines(lines, 1)


def test_the_kernels_oom_kill_names_the_machine_syslog_names():
    found = triage_lines([*ITERATIONS, "Dec  1 10:00:00 gpu-9 kernel: [  514.6] Out of memory: Killed process 77 "
                                       "(python3) total-vm:11892kB"], 1)
    assert (found.cls, found.host, found.host_fault) == (TRAINING, "gpu-9", True), found


def test_what_the_new_words_leave_to_the_rules_before_them():
    """A rank's own Python exception, a GPU's error and CUDA's own out of memory still say the end; a rank's line in
    the kernel's words is the rank's text; a data file missing in the data code is still the data's."""
    own = frames(0, ["/mlm/pretrain_gpt.py"], "KeyError: 'tokens'")
    crash = "terminate called after throwing an instance of 'c10::Error' what(): CUDA error: misaligned address"
    assert triage_lines([*ITERATIONS, *own, crash], 1).reason.startswith("Python exception: KeyError"), own
    ecc = "[rank2]: RuntimeError: CUDA error: uncorrectable ECC error encountered"
    assert triage_lines([*ITERATIONS, ecc, crash], 1).cls == INFRASTRUCTURE
    oom = triage_lines([*ITERATIONS, "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"], 1)
    assert (oom.reason, oom.persistent) == ("CUDA out of memory", True), oom
    assert triage_lines([*ITERATIONS, "[rank3]: Out of memory: Killed process 77 (python3)"], 1).cls is None
    missing = frames(0, ["/mlm/megatron/core/datasets/indexed_dataset.py"],
                     "FileNotFoundError: [Errno 2] No such file or directory: '/data/c4_text_document.bin'")
    assert triage_lines(missing, 1).cls == DATA


def test_a_tools_prefix_is_taken_off_only_where_its_lines_carry_it():
    """The prefix learnt from the traceback's header is taken off the lines of its shape only: srun's own line after
    it is still srun's, and a longer timestamp (another shape) is left as it is."""
    prefix = "2026-12-01 10:00:01.100 [7/train/42 (pid 4242)] "
    lines = [prefix + line for line in frames(None, ["/mlm/pretrain_gpt.py"], "KeyError: 'tokens'")]
    found = triage_lines([*ITERATIONS, *lines, "srun: error: gpu-5: task 0: Exited with exit code 1"], 1)
    assert (found.reason, found.host) == ("Python exception: KeyError: 'tokens'", "gpu-5"), found
    other = lines[:1] + ["2026-12-01 10:00:01.1000 [7/train/42 (pid 4242)] KeyError: 'tokens'"]
    assert triage_lines(other, 1).cls is None


def test_the_words_are_read_from_a_lines_head_only():
    """Past FACT_WINDOW a line is not read, the new words as the others; a prefix is looked for within MAX_PREFIX."""
    from launcher.runs.triage import FACT_WINDOW, MAX_PREFIX

    for words in ("Out of memory: Killed process 77 (python3)", "CUDA error: an illegal memory access was encountered",
                  "found NaN in local grad norm", "CUBLAS_STATUS_EXECUTION_FAILED"):
        assert triage_lines([*ITERATIONS, words], 1).cls is not None, words
        assert triage_lines([*ITERATIONS, "x" * FACT_WINDOW + words], 1).cls is None, words
    far = ["| " * (MAX_PREFIX // 2 + 1) + line for line in frames(None, ["/mlm/pretrain_gpt.py"], "KeyError: 'tokens'")]
    assert triage_lines(far, 1).cls is None


def test_slurmstepds_cancel_by_its_timestamp_is_still_slurmstepds():
    """slurmstepd's line where its log's time format replaces its name (the form a hung teardown's log showed): the
    time limit, every host kept; a rank's look-alike says nothing."""
    line = ("[2026-04-20T03:25:23.011] error: *** STEP 1942963.1 ON gpu-a7 CANCELLED AT 2026-04-20T03:25:23 DUE TO "
            "TIME LIMIT ***")
    found = triage_lines([*ITERATIONS, "[after training is done] datetime: 2026-04-20 03:17:08", line], 1)
    assert (found.cls, found.reason, found.host_fault) == (INFRASTRUCTURE, "time limit (slurmstepd)", False), found
    assert retry([*ITERATIONS, line]) == (INFRASTRUCTURE, "requeue")
    assert triage_lines([*ITERATIONS, f"[rank2]:{line}"], 1).cls is None
