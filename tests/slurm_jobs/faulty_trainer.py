"""A stand-in for pretrain_gpt.py whose attempts end as they are told to, in a second, for the requeue policy's tests
on a real Slurm cluster.

TRAINER_FAULTS lists one end per attempt (SLURM_RESTART_COUNT picks; past the list: "none"):
    none      three iterations, then a normal end (exit 0)
    gpu       three iterations, then the CUDA error a failing GPU raises (an infrastructure failure of this host)
    keyerror  three iterations, then a Python exception in the training code (the same each time)
    rerun     three iterations, then Megatron's rerun state machine asking for the iteration to be rerun on another
              GPU (its two log lines, exit code 16), naming as its machine Slurm's name for this node (a cluster
              whose host names are its node names; os.uname() here is one machine for every emulated node)
    wait      iterations until SIGTERM (Megatron's --exit-signal-handler), then "exiting program" and exit 0
Like Megatron, it prints its iteration lines on rank 0's standard output and lets an exception's traceback go to
standard error. It imports no torch (torchrun, which does, still starts and watches it).
"""

from __future__ import annotations

import os
import signal
import sys
import time


def iteration_line(n: int) -> str:
    return (f" [2026-12-01 10:00:00] iteration {n:8d}/     100 | consumed samples: {n * 8:12d} | elapsed time per "
            "iteration (ms): 100.0 | learning rate: 1.0E-04 | global batch size:     8 | lm loss: 1.0E+00 | "
            "loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |")


def main() -> int:
    restart = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    faults = os.environ.get("TRAINER_FAULTS", "").split(",")
    fault = faults[restart] if restart < len(faults) else "none"
    rank = int(os.environ.get("RANK", "0"))
    stopped: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopped.append(signum))
    iteration = 0
    while iteration < 3 or (fault == "wait" and not stopped and iteration < 3000):
        iteration += 1
        if rank == 0:
            print(iteration_line(iteration), flush=True)
        time.sleep(0.1)
    if stopped:
        print(" [2026-12-01 10:00:01] exiting program after receiving SIGTERM.", flush=True)
        return 0
    if fault == "gpu":
        raise RuntimeError("CUDA error: unspecified launch failure")
    if fault == "rerun":
        node = os.environ.get("SLURMD_NODENAME", "unknown")
        print(f"ERROR:megatron.core.rerun_state_machine:Rank {rank}, node {node}, device 0, iteration #3: First rerun: "
              "unexpected result is reproducible within the tolerance (nan = nan). Need to rerun on a different GPU to "
              "verify correctness.!", file=sys.stderr, flush=True)
        print("WARNING:megatron.core.rerun_state_machine:Saving a checkpoint and exiting now. Please resume the job "
              "from the checkpoint to rerun the last iteration and establish a diagnostic", file=sys.stderr, flush=True)
        return 16  # EXIT_CODE_RESUME_TO_DISAMBIGUATE
    if fault == "keyerror":
        batch: dict[str, object] = {}
        return len(batch["tokens"])  # type: ignore[arg-type]
    print(" [2026-12-01 10:00:01] [after training is done] ...", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
