"""A stand-in for pretrain_gpt.py that behaves like it under Slurm, in seconds, without a GPU.

It takes the flags the Slurm backend relies on (--save, --load, --exit-signal-handler, --train-iters) and
follows Megatron's protocol for them: SIGTERM only sets a flag; the iteration in progress finishes; rank 0
writes the iteration to <save>/latest_checkpointed_iteration.txt (Megatron's tracker file) and every rank
exits 0; a new start resumes from <load>'s tracker. Other Megatron flags are ignored.

It imports no torch on purpose: torchrun (which does) still starts, rendezvouses and signals it, while the
job starts in seconds on a 2-core machine. The collective itself is what the preflight test exercises.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-iters", type=int, required=True)
    parser.add_argument("--save")
    parser.add_argument("--load")
    parser.add_argument("--exit-signal-handler", action="store_true")
    parser.add_argument("--seconds-per-iter", type=float, default=0.5)
    args, _ = parser.parse_known_args()

    received: list[int] = []
    if args.exit_signal_handler:
        signal.signal(signal.SIGTERM, lambda signum, _frame: received.append(signum))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    tracker = Path(args.load or "/nonexistent") / "latest_checkpointed_iteration.txt"
    start = int(tracker.read_text()) if tracker.exists() else 0

    def say(text: str) -> None:
        if rank == 0:
            print(f"trainer: {text} restart={restart}", flush=True)

    def save(iteration: int, why: str) -> None:
        if rank == 0 and args.save:
            Path(args.save).mkdir(parents=True, exist_ok=True)
            (Path(args.save) / "latest_checkpointed_iteration.txt").write_text(str(iteration))
        say(f"saved checkpoint iteration={iteration} ({why})")

    say(f"start iteration={start} world_size={world}")
    for iteration in range(start + 1, args.train_iters + 1):
        time.sleep(args.seconds_per_iter)
        say(f"iteration={iteration}")
        if received:
            save(iteration, "SIGTERM")
            say("exiting program after receiving SIGTERM.")
            return 0
    save(args.train_iters, "end of training")
    say(f"done iteration={args.train_iters}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
