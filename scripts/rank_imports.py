"""What a training rank imports before pretrain_gpt.py's main starts, and what it costs.

    python scripts/rank_imports.py --megatron-path DIR [--profile] [--top 40]

Runs pretrain_gpt.py's module level (its imports, not its main) in a child interpreter, with the PYTHONPATH a
rank gets (the checkout, this launcher's root, then the inherited one), under `python -X importtime`; prints the
wall time, the slowest imports by cumulative and by own time, and every top-level package it imported with its
cumulative time. With --profile, a second child runs the same under cProfile (sorted by own time: extension
loading, module code, file system calls).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BODY = ("import sys, runpy; sys.argv = ['pretrain_gpt.py']; "
        "src = open({path!r}).read().split('if __name__ ==')[0]; "
        "exec(compile(src, {path!r}, 'exec'), {{'__name__': 'pretrain_gpt_imports'}})")
# After the imports: how many modules have no bytecode file on disk (each was compiled from source in this
# process: a read-only site-packages, PYTHONDONTWRITEBYTECODE, or a first import), by top-level package.
NO_PYC = ("; import os, collections; "
          "mods = [m for m in list(sys.modules.values()) if isinstance(getattr(m, '__cached__', None), str)]; "
          "miss = collections.Counter(m.__name__.split('.')[0] for m in mods if not os.path.exists(m.__cached__)); "
          "print('bytecode: dont_write_bytecode', sys.dont_write_bytecode, 'pycache_prefix', sys.pycache_prefix, "
          "'modules without a .pyc on disk', sum(miss.values()), 'of', len(mods), dict(miss.most_common(8)))")
PROFILE = ("import cProfile, pstats, io; pr = cProfile.Profile(); pr.enable(); {body}; pr.disable(); "
           "s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats('tottime').print_stats(35); "
           "pstats.Stats(pr, stream=s).sort_stats('cumulative').print_stats(45); print(s.getvalue())")


def rank_env(megatron_path: Path) -> dict[str, str]:
    inherited = os.environ.get("PYTHONPATH")
    path = os.pathsep.join(filter(None, [str(megatron_path), str(REPO), inherited]))
    return {**os.environ, "PYTHONPATH": path, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}


def parse_importtime(stderr: str) -> list[tuple[int, int, int, str]]:
    """(self µs, cumulative µs, depth, name) per imported module."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        parts = line[len("import time:"):].split("|", 2)
        if len(parts) != 3 or not parts[0].strip().isdigit() or not parts[1].strip().isdigit():
            continue
        self_us, cum_us, name = parts[0].strip(), parts[1].strip(), parts[2][1:]
        depth = (len(name) - len(name.lstrip(" "))) // 2
        rows.append((int(self_us), int(cum_us), depth, name.strip()))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megatron-path", type=Path, default=Path(os.environ.get("MEGATRON_LM_PATH", ".")))
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    entry = args.megatron_path / "pretrain_gpt.py"
    body = BODY.format(path=str(entry))
    env = rank_env(args.megatron_path)
    start = time.monotonic()
    plain = subprocess.run([sys.executable, "-c", body + NO_PYC], env=env, capture_output=True, text=True,
                           cwd=args.megatron_path)
    print(f"pretrain_gpt.py imports, plain: {time.monotonic() - start:.2f} s wall (exit {plain.returncode}; "
          f"interpreter start included)")
    print(plain.stdout.strip().splitlines()[-1] if plain.stdout.strip() else "(no bytecode report)")
    start = time.monotonic()
    timed = subprocess.run([sys.executable, "-X", "importtime", "-c", body], env=env, capture_output=True,
                           text=True, cwd=args.megatron_path)
    print(f"pretrain_gpt.py imports under -X importtime: {time.monotonic() - start:.2f} s wall")
    rows = parse_importtime(timed.stderr)
    print(f"\n-- slowest by cumulative time (ms), depth <= 6, of {len(rows)} modules")
    for self_us, cum_us, depth, name in sorted(rows, key=lambda r: -r[1]):
        if depth <= 6:
            print(f"{cum_us / 1000:9.1f} {self_us / 1000:8.1f}  {'  ' * depth}{name}")
            args.top -= 1
            if args.top <= 0:
                break
    print("\n-- slowest by own time (ms)")
    for self_us, _cum, _depth, name in sorted(rows, key=lambda r: -r[0])[:30]:
        print(f"{self_us / 1000:9.1f}  {name}")
    print("\n-- top-level packages imported (cumulative ms of their first import)")
    seen: dict[str, int] = {}
    for _self, cum_us, _depth, name in rows:
        top = name.split(".")[0]
        if name == top:
            seen[top] = max(seen.get(top, 0), cum_us)
    print(", ".join(f"{name} {us / 1000:.0f}" for name, us in sorted(seen.items(), key=lambda kv: -kv[1])
                    if us >= 5000))
    if args.profile:
        start = time.monotonic()
        prof = subprocess.run([sys.executable, "-c", PROFILE.format(body=body)], env=env, capture_output=True,
                              text=True, cwd=args.megatron_path)
        print(f"\n-- cProfile ({time.monotonic() - start:.2f} s wall)")
        print(prof.stdout[-30000:])
    if plain.returncode != 0:
        print(plain.stderr[-3000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
