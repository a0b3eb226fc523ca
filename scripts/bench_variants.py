"""Run `launch 345m` variants on one GPU and print each one's steady ms/iter and tokens/s.

    python scripts/bench_variants.py GPU OUT_DIR '[["name", {"ENV": "value"}, ["setting=value", ...]], ...]'

Each variant is bench_345m.py's `launch 345m --set train_iters=60 --set eval_iters=0` plus its `--set`s, with its
environment variables. Pair it with the baseline in the same command (`MBS=16 ACCUM=2 COMPILE=1 ITERS=30 python
scripts/torch_gpt345m.py`); docs/benchmarks.md gives the commands. A run with Megatron's PyTorch profiler
(`profile=true`, `use_pytorch_profiler=true`, ...) gets its trace summarised by scripts/trace_summary.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench_345m import REPO, report, run_launch  # scripts/ is on sys.path when this runs as a script


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    gpu, out, variants = argv[0], Path(argv[1]), json.loads(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for name, env_extra, sets in variants:
        try:
            result = run_launch([gpu], [w for s in sets for w in ("--set", s)], 60, out / "runs" / name,
                                out / f"{name}.log", env_extra)
        except SystemExit as failure:  # one failed variant does not stop the others
            print(f"{name}: {failure}", flush=True)
            continue
        (out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
        report(f"{name}:", result)
        for trace in Path(result["run_dir"]).rglob("rank-0.json.gz"):
            summary = subprocess.run([sys.executable, str(REPO / "scripts" / "trace_summary.py"), str(trace)],
                                     capture_output=True, text=True)
            (out / f"{name}.trace.txt").write_text(summary.stdout + summary.stderr)
            print(summary.stdout, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
