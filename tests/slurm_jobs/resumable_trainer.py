"""A stand-in for pretrain_gpt.py that behaves like it under Slurm, on CPU, in seconds.

It takes the flags the Slurm backend relies on (--save, --load, --save-interval, --exit-signal-handler,
--train-iters) and follows Megatron's protocol: a SIGTERM handler that only sets a flag, a flag all-reduce
after every iteration, then a checkpoint (the iteration number in <save>/latest_checkpointed_iteration.txt,
as Megatron writes it) and exit 0; on start it resumes from <load>. Other Megatron flags are ignored.
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
    parser.add_argument("--save-interval", type=int)
    parser.add_argument("--exit-signal-handler", action="store_true")
    parser.add_argument("--seconds-per-iter", type=float, default=0.5)
    args, _ = parser.parse_known_args()

    import torch
    import torch.distributed as dist

    received = []
    if args.exit_signal_handler:
        signal.signal(signal.SIGTERM, lambda signum, _frame: received.append(signum))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    tracker = Path(args.load or "/nonexistent") / "latest_checkpointed_iteration.txt"
    start = int(tracker.read_text()) if tracker.exists() else 0
    if rank == 0:
        print(f"trainer: start iteration={start} world_size={world} restart={restart}", flush=True)

    def save(iteration: int, why: str) -> None:
        if rank == 0 and args.save:
            Path(args.save).mkdir(parents=True, exist_ok=True)
            (Path(args.save) / "latest_checkpointed_iteration.txt").write_text(str(iteration))
            print(f"trainer: saved checkpoint iteration={iteration} ({why}) restart={restart}", flush=True)
        dist.barrier()

    for iteration in range(start + 1, args.train_iters + 1):
        time.sleep(args.seconds_per_iter)
        total = torch.tensor([float(rank + 1)])
        dist.all_reduce(total)
        assert total.item() == world * (world + 1) / 2
        if rank == 0:
            print(f"trainer: iteration={iteration} restart={restart}", flush=True)
        got_signal = torch.tensor([float(bool(received))])
        dist.all_reduce(got_signal)
        if got_signal.item():
            save(iteration, "SIGTERM")
            if rank == 0:
                print("trainer: exiting program after receiving SIGTERM.", flush=True)
            dist.destroy_process_group()
            return 0
        if args.save_interval and iteration % args.save_interval == 0:
            save(iteration, "interval")
    save(args.train_iters, "end of training")
    if rank == 0:
        print(f"trainer: done iteration={args.train_iters} restart={restart}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
