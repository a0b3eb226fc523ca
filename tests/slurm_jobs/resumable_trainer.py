"""A stand-in for pretrain_gpt.py that behaves like it under Slurm, in seconds, without a GPU.

It takes the flags the Slurm backend relies on (--save, --load, --save-interval, --exit-signal-handler,
--train-iters) and follows Megatron's protocol for them:
- SIGTERM only sets a flag; the iteration in progress finishes, a checkpoint is saved and every rank exits 0;
- a checkpoint is written in Megatron's order: its files into iter_NNNNNNN/ first (one per rank, each marked
  complete), then the iteration into <save>/latest_checkpointed_iteration.txt (the tracker file), replaced
  whole; so the tracker never names a checkpoint that a crash left half-written. Rank 0 writes every part
  (the stand-in's ranks share no barrier);
- a new start resumes from the checkpoint <load>'s tracker names, and refuses one whose files are incomplete;
- the ranks move in lockstep, as Megatron's do through their collectives: an iteration ends when every rank has
  reached it (a file per rank and iteration), so a rank whose peer died waits, as it would in a collective,
  until SIGTERM or Slurm's kill; and they leave together: the others wait for rank 0's "left" marker (written
  after its last save), never for a time.
Its log lines have Megatron's format (iteration, saved/loaded checkpoint, exit), so `launch report` reads them.

Knobs for fault tests, from the environment: TRAINER_SECONDS_PER_ITER (0.5), TRAINER_CHECKPOINT_SECONDS (time
spent writing one checkpoint's files, 0). Each rank writes its pid to <save>/../trainer-pids/rank-N; the lockstep
and leave markers are under <save>/../trainer-sync/restart-R/.

It imports no torch on purpose: torchrun (which does) still starts, rendezvouses and signals it, while the
job starts in seconds on a 2-core machine. The collective itself is what the preflight test exercises.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

TRACKER = "latest_checkpointed_iteration.txt"
SHARD_BYTES = 64 * 1024


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-iters", type=int, required=True)
    parser.add_argument("--save")
    parser.add_argument("--load")
    parser.add_argument("--save-interval", type=int)
    parser.add_argument("--exit-signal-handler", action="store_true")
    args, _ = parser.parse_known_args()
    seconds_per_iter = float(os.environ.get("TRAINER_SECONDS_PER_ITER", "0.5"))
    checkpoint_seconds = float(os.environ.get("TRAINER_CHECKPOINT_SECONDS", "0"))

    received: list[int] = []
    if args.exit_signal_handler:
        signal.signal(signal.SIGTERM, lambda signum, _frame: received.append(signum))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    pids = Path(args.save or args.load or ".").parent / "trainer-pids"
    pids.mkdir(parents=True, exist_ok=True)
    (pids / f"rank-{rank}").write_text(str(os.getpid()))

    def say(text: str) -> None:
        if rank == 0:
            print(f"trainer: {text} restart={restart}", flush=True)

    def megatron(text: str) -> None:
        if rank == 0:
            print(f" [{datetime.now().isoformat(sep=' ')}] {text}", flush=True)

    def save(iteration: int, why: str) -> None:
        if rank == 0 and args.save:  # stands for every rank's part; the others wait in leave()
            directory = Path(args.save) / f"iter_{iteration:07d}"
            directory.mkdir(parents=True, exist_ok=True)
            say(f"writing checkpoint iteration={iteration} ({why})")
            for part in range(world):  # files first, slowly when asked, each complete before the next
                with open(directory / f"rank_{part:02d}.distcp", "wb") as shard:
                    for _ in range(4):
                        shard.write(b"\0" * (SHARD_BYTES // 4))
                        shard.flush()
                        time.sleep(checkpoint_seconds / world / 4)
                (directory / f"rank_{part:02d}.done").touch()
            temporary = Path(args.save) / f".{TRACKER}.tmp"  # the tracker last, replaced whole
            temporary.write_text(str(iteration))
            os.replace(temporary, Path(args.save) / TRACKER)
            megatron(f"successfully saved checkpoint from iteration {iteration:7d} to {args.save} [ t 1/1, p 1/1 ]")
        say(f"saved checkpoint iteration={iteration} ({why})")

    sync = Path(args.save or args.load or ".").parent / "trainer-sync" / f"restart-{restart}"
    sync.mkdir(parents=True, exist_ok=True)
    left = sync / "left"
    # Bounds that only end a stand-in whose peers are gone for good (Slurm kills a job's leftovers long before).
    give_up = 600

    def together(iteration: int) -> bool:
        """The iteration's collective: True once every rank has reached it; False when SIGTERM came or rank 0
        left first (the job is ending)."""
        (sync / f"iter-{iteration}.rank-{rank}").touch()
        deadline = time.monotonic() + give_up
        while time.monotonic() < deadline:
            if len(list(sync.glob(f"iter-{iteration}.rank-*"))) == world:
                return True
            if received or left.exists():
                return False
            time.sleep(0.05)
        return False

    def leave() -> None:
        """Rank 0 says it has saved and leaves; the others wait for that (Megatron's ranks leave a save together),
        or until rank 0's process is gone (killed: there is no save to wait for)."""
        if rank == 0:
            left.touch()
            return
        deadline = time.monotonic() + give_up
        while not left.exists() and rank_0_alive() and time.monotonic() < deadline:
            time.sleep(0.05)

    def rank_0_alive() -> bool:
        """(The stand-in's ranks share one host, so one may look at another's process.)"""
        try:
            os.kill(int((pids / "rank-0").read_text()), 0)
        except (OSError, ValueError):
            return False
        return True

    def stop(iteration: int) -> int:
        """SIGTERM (or a peer gone for good): rank 0 saves the last complete iteration; all leave after it, exit 0."""
        save(iteration, "SIGTERM")
        leave()
        say("exiting program after receiving SIGTERM.")
        megatron("[exiting program after receiving SIGTERM.]")
        return 0

    start = 0
    tracker = Path(args.load or "/nonexistent") / TRACKER
    if tracker.exists():
        start = int(tracker.read_text())
        done = list((Path(args.load) / f"iter_{start:07d}").glob("rank_*.done"))
        if len(done) != world:
            print(f"trainer: checkpoint iteration={start} is incomplete ({len(done)} of {world} ranks)",
                  file=sys.stderr, flush=True)
            return 1
        megatron(f"successfully loaded checkpoint from {args.load} [ t 1/1, p 1/1 ] at iteration {start}")
    say(f"start iteration={start} world_size={world}")
    for iteration in range(start + 1, args.train_iters + 1):
        time.sleep(seconds_per_iter)
        if not together(iteration):  # the job is ending: save what the last complete iteration left
            return stop(iteration - 1)
        megatron(f"iteration {iteration:8d}/{args.train_iters:8d} | consumed samples: {iteration * 8:12d} | "
                 f"elapsed time per iteration (ms): {seconds_per_iter * 1000:.1f} | learning rate: 1.0E-04 | "
                 f"global batch size:     8 | lm loss: {10.0 / iteration:.6E} | loss scale: 1.0 | "
                 f"number of skipped iterations:   0 | number of nan iterations:   0 |")
        say(f"iteration={iteration}")
        if received:
            return stop(iteration)
        if args.save_interval and iteration % args.save_interval == 0 and iteration < args.train_iters:
            save(iteration, "interval")
    save(args.train_iters, "end of training")
    leave()
    say(f"done iteration={args.train_iters}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
