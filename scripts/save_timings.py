"""Each checkpoint save of a run, from its training log: how long it stopped the training loop, and how long after
it began the checkpoint was complete on storage.

    python scripts/save_timings.py RUN_DIR [RUN_DIR ...]    # prints a table; --json for JSON

Read from the lines Megatron prints (its `save-checkpoint` timer, `saving checkpoint at iteration` and
`successfully saved checkpoint` with their timestamps) and, where the run had MEGATRON_LAUNCH_SAVE_PHASES=1, the
launcher's per-save phase lines (launcher/inside/megatron_ext/save_phases.py).
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from pathlib import Path

TIMER = re.compile(r"save-checkpoint \.+: \(([\d.]+), ([\d.]+)\)")
STAMP = r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\]"
SAVING = re.compile(STAMP + r" saving checkpoint at iteration\s+(\d+)")
SAVED = re.compile(STAMP + r" successfully saved checkpoint from iteration\s+(\d+)")
PHASES = re.compile(r"> megatron-launch save phases, iteration (\d+): (.*)")
STORED = re.compile(r"> megatron-launch save of iteration (\d+) complete on storage ([\d.]+) s after it began "
                    r"\(finalised on the training thread in ([\d.]+) s")
WRITER = re.compile(r"> megatron-launch checkpoint writer: ([\d.]+) GiB written and synced in ([\d.]+) s")
OVERLAP = "Starting a checkpoint save before previous has finished"
WORKER = re.compile(r"Async Caller Started in ([\d.]+) seconds")


def _time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f")


def saves(log_text: str) -> dict:
    """{'saves': [{iteration, blocking_s, durable_s, phases, ...}], 'worker_start_s', 'overlapping_saves'}."""
    rows: list[dict] = []
    began: dict[int, datetime] = {}
    by_iteration: dict[int, dict] = {}
    worker = None
    overlaps = 0
    for line in log_text.splitlines():
        if m := SAVING.search(line):
            it = int(m[2])
            began[it] = _time(m[1])
            row = {"iteration": it}
            rows.append(row)
            by_iteration[it] = row
        elif (m := TIMER.search(line)) and rows:
            rows[-1]["blocking_s"] = round(float(m[2]) / 1000.0, 3)
        elif m := SAVED.search(line):
            it = int(m[2])
            if it in began and it in by_iteration:
                by_iteration[it]["durable_s"] = round((_time(m[1]) - began[it]).total_seconds(), 2)
        elif m := PHASES.search(line):
            if int(m[1]) in by_iteration:
                by_iteration[int(m[1])]["phases"] = m[2]
        elif m := STORED.search(line):
            if int(m[1]) in by_iteration:
                by_iteration[int(m[1])]["finalize_s"] = float(m[3])
        elif m := WRITER.search(line):
            unwritten = [row for row in rows if "write_s" not in row]
            if unwritten:
                unwritten[0].update(written_gib=float(m[1]), write_s=float(m[2]))
        elif OVERLAP in line:
            overlaps += 1
        elif m := WORKER.search(line):
            worker = float(m[1])
    return {"saves": rows, "worker_start_s": worker, "overlapping_saves": overlaps}


def run_saves(run_dir: Path) -> dict:
    text = "\n".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").glob("attempt-*.log")))
    result = saves(text)
    summary = run_dir / "summary.json"
    if summary.is_file():
        data = json.loads(summary.read_text())
        result["steady_tokens_per_s"] = data.get("steady_tokens_per_s")
        result["startup"] = data.get("startup")
        result["outcome"] = data.get("outcome")
    return result


def render(name: str, result: dict) -> str:
    lines = [f"{name}: worker started in {result.get('worker_start_s')} s at launch; "
             f"{result.get('overlapping_saves')} save(s) began before the previous write ended; "
             f"steady {result.get('steady_tokens_per_s')} tokens/s"]
    for row in result["saves"]:
        lines.append(f"  iteration {row['iteration']:>5}: blocked {row.get('blocking_s', '?')} s, complete on "
                     f"storage {row.get('durable_s', '?')} s after it began"
                     + (f" (finalise {row['finalize_s']} s)" if "finalize_s" in row else "")
                     + (f"; the writer wrote {row['written_gib']} GiB in {row['write_s']} s" if "write_s" in row
                        else ""))
        if "phases" in row:
            lines.append(f"      {row['phases']}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    as_json = "--json" in argv
    dirs = [Path(a) for a in argv if a != "--json"]
    if not dirs:
        print(__doc__, file=sys.stderr)
        return 2
    results = {str(d): run_saves(d) for d in dirs}
    print(json.dumps(results, indent=1) if as_json else "\n".join(render(k, v) for k, v in results.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
