"""A run root of N synthetic run directories, for measuring `launch runs` on it (docs/hostile-input.md, "Measured").

    python scripts/synthetic_runs.py N ROOT [--record-bytes BYTES]

Each run directory holds what a finished local run leaves for the listing: manifest.json (one attempt, ≈ 3.5 KB,
as `launch toy` writes it), summary.json, metrics.jsonl (100 iteration records). With --record-bytes, every
record is that large instead (a manifest after hundreds of resumes, a summary and a metrics file padded to it):
the worst case for a reader; those files are hard links to one set, so 10,000 runs of 1 MB records take no
disk, while every run's files are read as if they were its own.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def records(record_bytes: int) -> dict[str, str]:
    attempt = {"started": "2026-12-01T10:00:00+00:00",
               "argv": ["torchrun", "--nproc-per-node", "1", "pretrain_gpt.py", *["--num-layers", "2"] * 60],
               "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTHONPATH": "/opt/megatron-lm"}}
    manifest = {"entry": "pretrain_gpt", "format": 1, "preset": "toy", "created": "2026-12-01T10:00:00+00:00",
                "launcher": {"version": "0.1"}, "world": {"nodes": 1, "gpus_per_node": 1},
                "layout": {"tp": 1, "pp": 1, "cp": 1, "dp": 1}, "overrides": [], "attempts": [attempt]}
    summary = {"outcome": "success", "last_iteration": 100, "train_iters": 100, "steady_tokens_per_s": 25859.0,
               "reasons": []}
    line = json.dumps({"kind": "iteration", "iteration": 100, "train_iters": 100, "lm_loss": 4.31,
                       "tokens_per_s": 25859.0, "ms_per_iter": 19.8}) + "\n"
    metrics = line * 100
    if record_bytes:
        attempts = max(1, record_bytes // len(json.dumps(attempt, indent=2)))
        manifest["attempts"] = [attempt] * attempts
        summary["reasons"] = ["x" * record_bytes]
        metrics = line * (record_bytes // len(line) + 1)
    text = json.dumps(manifest, indent=2) + "\n"
    return {"manifest.json": text, "summary.json": json.dumps(summary, indent=2) + "\n", "metrics.jsonl": metrics}


def main(argv: list[str]) -> int:
    record_bytes = 0
    if "--record-bytes" in argv:
        at = argv.index("--record-bytes")
        record_bytes = int(argv[at + 1])
        argv = argv[:at] + argv[at + 2:]
    if len(argv) != 2 or not argv[0].isdigit():
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    count, root = int(argv[0]), Path(argv[1])
    root.mkdir(parents=True, exist_ok=True)
    shared = root / ".records"  # hidden: the listing skips names starting with a dot
    shared.mkdir(exist_ok=True)
    for name, text in records(record_bytes).items():
        (shared / name).write_text(text)
    for number in range(count):
        run_dir = root / f"toy-20261201T{number:06d}Z"
        run_dir.mkdir()
        for name in ("manifest.json", "summary.json", "metrics.jsonl"):
            if record_bytes:
                os.link(shared / name, run_dir / name)
            else:
                (run_dir / name).write_text((shared / name).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
