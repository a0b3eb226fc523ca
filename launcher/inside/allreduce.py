"""Preflight: prove that every rank of a job can rendezvous and all-reduce, before training burns the allocation.

Run by the same torchrun and rendezvous as the training script (`launch PRESET --preflight`), so a success
here means the job's node list, rendezvous endpoint, ports and collective backend work. Each rank reports
RANK / LOCAL_RANK / WORLD_SIZE / host; rank 0 prints them in rank order, checks the all-reduce sum on every
rank, and reports the bus bandwidth (NCCL on GPUs, gloo on CPU).

Standalone on purpose: it imports only torch and the standard library, so it runs in any training
environment (venv or container) without the launcher installed there.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

SCRIPT_PATH = Path(__file__).resolve()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--size-mb", type=float, default=None,
                        help="all-reduce message size for bandwidth in MiB (default: 256 on GPUs, 16 on CPU)")
    parser.add_argument("--iters", type=int, default=5, help="timed all-reduce iterations")
    parser.add_argument("--timeout-s", type=int, default=300, help="collective timeout")
    return parser.parse_args(argv)


def bus_bandwidth_gbps(nbytes: int, seconds: float, world_size: int) -> float:
    """NCCL-tests convention: an all-reduce moves 2(n-1)/n of the buffer over the slowest link."""
    return nbytes * 2 * (world_size - 1) / world_size / seconds / 1e9 if seconds > 0 else 0.0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch
    import torch.distributed as dist

    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    use_gpu = torch.cuda.is_available()
    if use_gpu:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if use_gpu else torch.device("cpu")
    backend = "nccl" if use_gpu else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout_s))

    # Slurm's emulated nodes share one hostname, so the Slurm node name tells them apart.
    node = os.environ.get("SLURMD_NODENAME", "-")
    me = f"rank={rank} local_rank={local_rank} world_size={world_size} host={socket.gethostname()} node={node}"
    # One write per line: ranks share the output, and an unbuffered print writes the newline separately.
    sys.stdout.write(f"preflight: {me}\n")
    sys.stdout.flush()
    everyone: list[str | None] = [None] * world_size
    dist.all_gather_object(everyone, me)

    # Correctness: rank r contributes r+1 everywhere; every element must equal 1+2+...+n on every rank.
    expected = world_size * (world_size + 1) / 2
    size_mb = args.size_mb if args.size_mb is not None else (256.0 if use_gpu else 16.0)
    numel = max(1, int(size_mb * 2**20) // 4)
    buffer = torch.full((numel,), float(rank + 1), dtype=torch.float32, device=device)
    dist.all_reduce(buffer)
    correct = bool(torch.all(buffer == expected).item())
    observed = buffer[0].item()
    flags = torch.tensor([0.0 if correct else 1.0], device=device)
    dist.all_reduce(flags)
    wrong_ranks = int(flags.item())

    # Bandwidth: one warm-up above, then timed iterations between barriers.
    dist.barrier()
    if use_gpu:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(buffer)
    if use_gpu:
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / max(1, args.iters)
    nbytes = numel * 4

    if rank == 0:
        for line in everyone:
            print(f"preflight: joined {line}")
        verdict = "ok" if wrong_ranks == 0 else f"WRONG on {wrong_ranks} rank(s)"
        print(f"preflight: all_reduce backend={backend} world_size={world_size} "
              f"sum={observed:g} expected={expected:g} {verdict}")
        print(f"preflight: bus_bandwidth={bus_bandwidth_gbps(nbytes, seconds, world_size):.3f} GB/s "
              f"size={nbytes / 2**20:.1f} MiB time={seconds * 1e3:.2f} ms/iter", flush=True)
    dist.destroy_process_group()
    return 0 if wrong_ranks == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
