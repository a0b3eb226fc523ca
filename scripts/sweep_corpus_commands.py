"""Every command a user runs on an imported preset, on every preset of the import corpus: none may end in an
internal error (exit other than 0 or 2, or "internal error" in its output).

    python scripts/sweep_corpus_commands.py [--plan docs/data/import-corpus-gpu-plan.json] [--only TEXT] [--jobs 2]

The presets are the ones `launch import` wrote for each corpus script (the plan file of scripts/import_corpus_gpu.py
--write-plan holds them). Each command runs as `python -m launcher …` in a directory of its own, under a timeout.
Prints one line per finding and a count; exit 1 when there is a finding.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (
    ("{p}", "--dry-run", "--format", "json"),
    ("{p}", "--dry-run", "--nodes", "2", "--gpus-per-node", "4"),
    ("{p}", "--slurm", "--dry-run"),
    ("{p}", "--k8s", "--dry-run"),
    ("show", "{p}"),
    ("plan", "{p}", "--gpus", "64", "--format", "json"),
    ("diff", "{p}", "345m"),
)
TIMEOUT_S = 120


def finding(preset: Path, command: tuple[str, ...]) -> str | None:
    argv = [arg.format(p=preset.name) for arg in command]
    try:
        done = subprocess.run([sys.executable, "-m", "launcher", *argv, "--set", f"run_root={preset.parent}/runs"],
                              cwd=preset.parent, capture_output=True, text=True, timeout=TIMEOUT_S,
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(preset.parent)})
    except subprocess.TimeoutExpired:
        return f"timeout after {TIMEOUT_S} s: launch {' '.join(argv)}"
    out = done.stdout + done.stderr
    if done.returncode not in (0, 2) or "internal error" in out or "Traceback" in out:
        first = next((line for line in out.splitlines() if "error" in line.lower()), "")[:200]
        return f"exit {done.returncode}: launch {' '.join(argv)}: {first}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", type=Path, default=ROOT / "docs/data/import-corpus-gpu-plan.json")
    parser.add_argument("--only", default="", help="presets whose script name contains this text")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    presets = {name: text for name, text in json.loads(args.plan.read_text())["presets"].items() if args.only in name}
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for k, (name, text) in enumerate(sorted(presets.items())):
            folder = Path(tmp) / str(k)
            folder.mkdir()
            path = folder / (Path(name).stem.replace(".", "_") + ".yaml")
            path.write_text(text)
            paths.append(path)
        work = [(path, command) for path in paths for command in COMMANDS]
        with ThreadPoolExecutor(args.jobs) as pool:
            found = [f for f in pool.map(lambda item: finding(*item), work) if f]
    for line in found:
        print(line)
    print(f"{len(work)} commands on {len(paths)} imported presets: {len(found)} findings")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
