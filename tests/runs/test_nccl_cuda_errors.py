"""NCCL's "unhandled cuda error" (ncclUnhandledCudaError) is classed by the CUDA error NCCL names, not as a network
error: out of memory stops, an illegal memory access is a rank's own crash (retried once), a GPU's own error
(ECC, a launch failure, a device gone) is the machine's, named from NCCL's WARN line where no rank printed it."""

from __future__ import annotations

import pytest

from launcher.runs.requeue_policy import decide
from launcher.runs.triage import INFRASTRUCTURE, TRAINING, triage_lines

ITERATIONS = [" [2026-12-01 10:00:00] iteration       10/     100 | consumed samples:          80 | elapsed time "
              "per iteration (ms): 100.0 | learning rate: 1.000000E-04 | global batch size:     8 | lm loss: "
              "5.000000E+00 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |"]
# torch's exception for the failed collective: the same for every CUDA error NCCL meets
UNHANDLED = ["[rank3]: Traceback (most recent call last):",
             '[rank3]:   File "/mlm/megatron/core/distributed/param_and_grad_buffer.py", line 12, in start_grad_sync',
             "[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
             "ProcessGroupNCCL.cpp:3356, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version "
             "2.21.5"]
SRUN = "srun: error: gpu-g1: task 0: Exited with exit code 1"


def warn(what: str, host: str = "gpu-g2") -> str:
    return f"{host}:4242:4300 [3] enqueue.cc:1085 NCCL WARN Cuda failure {what}"


FORMS = {  # the CUDA error (its number, where NCCL >= 2.19 prints it) in each place NCCL's words put it
    "NCCL's WARN line": lambda what: [warn(what), *UNHANDLED],
    "torch's last error over two lines": lambda what: [*UNHANDLED, "[rank3]: ncclUnhandledCudaError: Call to CUDA "
                                                       "function failed.", "[rank3]: Last error:",
                                                       f"[rank3]: Cuda failure {what}"],
    "the last error on one line": lambda what: [*UNHANDLED, "[rank3]: ncclUnhandledCudaError: Call to CUDA function "
                                                "failed. Last error: Cuda failure " + what.split(" ", 1)[-1]],
}
ENDS = {  # the CUDA error: its class, what the requeue policy does the first and the second time, the reason's words
    "2 'out of memory'": (TRAINING, ("stop", "stop"), "CUDA out of memory"),
    "700 'an illegal memory access was encountered'": (TRAINING, ("requeue", "stop"), "rank crashed"),
    "716 'misaligned address'": (TRAINING, ("requeue", "stop"), "rank crashed"),
    "214 'uncorrectable ECC error encountered'": (INFRASTRUCTURE, ("requeue", "requeue"), "GPU error"),
    "719 'unspecified launch failure'": (INFRASTRUCTURE, ("requeue", "requeue"), "GPU error"),
    "74 'uncorrectable NVLink error detected'": (INFRASTRUCTURE, ("requeue", "requeue"), "GPU error"),
    "46 'CUDA-capable device(s) is/are busy or unavailable'": (INFRASTRUCTURE, ("requeue", "requeue"), "GPU error"),
    # the driver's state on the machine (a driver replaced under it, a Fabric Manager restarted without a GPU reset or
    # not running): its reboot fixes it, another machine does not meet it
    "999 'unknown error'": (INFRASTRUCTURE, ("requeue", "requeue"), "GPU error"),
    "3 'initialization error'": (INFRASTRUCTURE, ("requeue", "requeue"), "GPU error"),
    "802 'system not yet initialized'": (INFRASTRUCTURE, ("requeue", "requeue"), "GPU error"),
    # a CUDA error that says nothing of whose failure it is: as any failed collective
    "1 'invalid argument'": (INFRASTRUCTURE, ("requeue", "requeue"), "NCCL/network error"),
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("what", list(ENDS))
def test_the_cuda_error_nccl_names_decides_the_class(what, form):
    cls, actions, reason = ENDS[what]
    found = triage_lines([*ITERATIONS, *FORMS[form](what), SRUN], 1)
    assert (found.cls, reason) == (cls, reason if reason in found.reason else found.reason), found
    assert (decide([found]).action, decide([found, found]).action) == actions, found
    device = reason == "GPU error"
    assert found.host_fault == device, found
    if device:  # NCCL's own line names its machine; without it, srun's failing task is the one known
        assert found.host == ("gpu-g2" if form == "NCCL's WARN line" else "gpu-g1"), found


def test_a_gpu_error_in_nccls_words_names_the_machine_before_srun_and_a_ranks_look_alike_names_none():
    """A rank printing NCCL's WARN line (torchrun's prefix) does not name the machine in it: srun's task does."""
    ecc = "214 'uncorrectable ECC error encountered'"
    real = triage_lines([*ITERATIONS, *UNHANDLED, warn(ecc, "gpu-g7"), SRUN], 1)
    assert (real.cls, real.host, real.host_fault) == (INFRASTRUCTURE, "gpu-g7", True), real
    look_alike = triage_lines([*ITERATIONS, *UNHANDLED, f"[rank3]: {warn(ecc, 'gpu-g9')}", SRUN], 1)
    assert (look_alike.cls, look_alike.host) == (INFRASTRUCTURE, "gpu-g1"), look_alike
    alone = triage_lines([*ITERATIONS, *UNHANDLED, f"[rank3]: {warn(ecc, 'gpu-g9')}"], 1)
    assert alone.host is None and decide([alone]).exclude == (), alone
    # the torch-worded GPU error first, NCCL's own line after it: the machine is still named
    torch_first = triage_lines([*ITERATIONS, "[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
                                warn(ecc, "gpu-g7")], 1)
    assert (torch_first.host, torch_first.host_fault) == ("gpu-g7", True), torch_first


def test_a_ranks_own_exception_still_comes_before_nccls_illegal_memory_access():
    own = ["[rank0]: Traceback (most recent call last):", '[rank0]:   File "/mlm/pretrain_gpt.py", line 3, in <module>',
           "[rank0]: KeyError: 'tokens'"]
    found = triage_lines([*ITERATIONS, *own, warn("700 'an illegal memory access was encountered'"), *UNHANDLED], 1)
    assert found.reason.startswith("Python exception: KeyError"), found


def test_a_warn_line_cut_before_its_closing_quote_still_names_the_error():
    """A line whose end was cut (a copied log, a truncated line) names the error up to the line's end."""
    found = triage_lines([*ITERATIONS, warn("999 'unknown error")], 1)
    assert (found.cls, found.host, found.host_fault) == (INFRASTRUCTURE, "gpu-g2", True), found
    inside = triage_lines([*ITERATIONS, warn("999 'unknown error") + " more words"], 1)
    assert inside.cls is None, inside  # without its closing quote, the words up to the line's end are the name


def test_nccls_cuda_error_is_read_from_a_bounded_window():
    """The CUDA error's name is read within 120 characters of its quote: a line without its closing quote costs no
    more than one with it."""
    found = triage_lines([*ITERATIONS, warn("700 '" + "an illegal memory access" + "x" * 7000), *UNHANDLED], 1)
    assert found.reason == "NCCL/network error", found
