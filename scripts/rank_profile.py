"""One training rank of a preset under cProfile, without torchrun: where its start-up goes, function by function.

    python scripts/rank_profile.py PRESET [--set NAME=VALUE ...] [--megatron-path DIR] [--top 60]

Takes the rank's argv and environment from `launch PRESET --gpus-per-node 1 --dry-run --format json`, runs
pretrain_gpt.py in a child interpreter as world size 1 (RANK=0, a free MASTER_PORT) under cProfile, and prints the
wall time of the child and its profile sorted by cumulative and by own time. Needs one GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHILD = r"""
import cProfile, io, os, pstats, runpy, signal, sys, time
script, top, dump = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sys.argv = [script] + sys.argv[4:]
start = time.time()
profile = cProfile.Profile()

def write(note=""):
    profile.disable()
    out = io.StringIO()
    print(f"rank wall under cProfile: {time.time() - start:.2f} s{note}", file=out)
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top // 2)
    open(dump, "w").write(out.getvalue())

def stopped(signum, frame):  # the deadline: the profile so far, then out
    write(" (stopped at the deadline)")
    os._exit(0)

signal.signal(signal.SIGTERM, stopped)
profile.enable()
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit:
    pass
finally:
    write()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("preset")
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--megatron-path")
    parser.add_argument("--top", type=int, default=60)
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds; then the rank is stopped and "
                        "its profile so far printed")
    args = parser.parse_args()
    launch = [sys.executable, "-m", "launcher", args.preset, "--gpus-per-node", "1", "--dry-run", "--format", "json",
              *[w for s in args.set for w in ("--set", s)],
              *(["--megatron-path", args.megatron_path] if args.megatron_path else [])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    dry = subprocess.run(launch, env=env, capture_output=True, text=True)
    if dry.returncode != 0:
        print(dry.stdout[-2000:], dry.stderr[-2000:])
        return 1
    job = json.loads(dry.stdout)
    rank_env = {**os.environ, **job["env"], "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(free_port()), "PYTHONUNBUFFERED": "1"}
    inherited = os.environ.get("PYTHONPATH")
    if inherited:
        rank_env["PYTHONPATH"] = f"{job['env'].get('PYTHONPATH', '')}:{inherited}"
    with tempfile.TemporaryDirectory() as scratch:
        dump = Path(scratch) / "profile.txt"
        start = time.monotonic()
        child = subprocess.Popen([sys.executable, "-c", CHILD, job["script"], str(args.top), str(dump),
                                  *job["script_args"]], env=rank_env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            stdout, stderr = child.communicate(timeout=args.deadline)
        except subprocess.TimeoutExpired:
            child.terminate()
            try:
                stdout, stderr = child.communicate(timeout=8)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, 9)
                stdout, stderr = child.communicate()
        print(f"rank exit {child.returncode}, {time.monotonic() - start:.2f} s wall (interpreter start included)")
        lines = [line for line in stdout.splitlines() if "datetime" in line or "startup-" in line
                 or "iteration " in line[:40] or "Compilation time" in line]
        print("\n".join(lines[:60]))
        if dump.exists():
            print(dump.read_text())
        else:
            print(stdout[-3000:], stderr[-3000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
