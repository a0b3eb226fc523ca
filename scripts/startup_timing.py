"""Where a launch's wall time goes, measured from the moment the command starts (not from torchrun's start).

    python scripts/startup_timing.py --label NAME --out DIR --timeout S [--stop-after REGEX] -- launch ARGS...

Runs the command in its own process group (killed with SIGKILL at the time limit), stamps each output line with
the seconds since the command started, and turns Megatron's own absolute start-up timestamps ("[before
library-setup] datetime: …", printed by rank 0) into the same clock. Writes DIR/NAME.log (stamped lines, the
argument dump left out) and DIR/NAME.json (the milestones), and prints one line per milestone:

  run directory printed   the launcher's own work before torchrun (or the one rank) starts
  first line after the launcher's   the first line not starting with "# " after that: the rank's (a trivial
                          entry's first print) or torchrun's own
  rank program start      torchrun's start-up and the rank's interpreter start
  using world size        Megatron's first line of its own (after the rank's imports and argument parsing)
  after library-setup     the rank's imports (pretrain_gpt.py's module level)
  before megatron-init    argument parsing and validation
  after megatron init     process groups, dataset helpers, JIT warm-up
  training step start     model, optimizer, data
  iteration 1             the first step (compilation); needs log_interval=1
  training done / exit    the last steps, the end-of-run save and the teardown
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

DATETIME = re.compile(r"\[(?P<name>[^\]]+)\] datetime: (?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)")
TIMER = re.compile(r"^\s*(?P<name>startup-[\w-]+|all-reduce-start-timestamps-tensor) \.+: \((?P<min>[\d.]+), "
                   r"(?P<max>[\d.]+)\)")
ITERATION = re.compile(r"iteration\s+(?P<it>\d+)\s*/\s*\d+\s*\|")
HELPERS = re.compile(r"done with dataset index builder\. Compilation time: (?P<s>[\d.]+)")
ARGUMENT_DUMP = re.compile(r"^  \S+ \.{3,} ")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        raise SystemExit("usage: startup_timing.py --label NAME --out DIR --timeout S [--stop-after REGEX] "
                         "-- COMMAND...")
    cut = argv.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--stop-after", type=re.compile, default=None,
                        help="kill the command (SIGKILL, its whole process group) at the first line matching this "
                             "regular expression, e.g. to fill the compiler caches without waiting for the end")
    return parser.parse_args(argv[:cut]), argv[cut + 1:]


def time_command(command: list[str], label: str, out: Path, timeout: float = 120.0,
                 stop_after: re.Pattern[str] | None = None, env: dict[str, str] | None = None) -> dict:
    """Run `command` (its own process group, SIGKILLed at `timeout` s or at the first line matching `stop_after`),
    write OUT/LABEL.log and OUT/LABEL.json, and return the result: its milestones in seconds from the start."""
    out.mkdir(parents=True, exist_ok=True)
    start_wall = time.time()
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", bufsize=1, start_new_session=True,
                            env={**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"})
    killed = False

    def kill(*_: object) -> None:
        nonlocal killed
        killed = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    previous = signal.signal(signal.SIGALRM, kill)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    marks: dict[str, float] = {}
    timers: dict[str, float] = {}
    stamped: list[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            now = time.monotonic() - start
            text = line.rstrip("\n")
            if not ARGUMENT_DUMP.match(text):
                stamped.append(f"{now:8.2f} {text}")
            read_milestones(text, now, start_wall, marks, timers)
            if stop_after is not None and stop_after.search(text) and not killed:
                marks.setdefault("stopped (--stop-after)", now)
                kill()
        code = proc.wait()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    marks["exit"] = time.monotonic() - start
    stopped = "stopped (--stop-after)" in marks
    result = {"label": label, "command": command, "exit_code": code, "killed_at_timeout": killed and not stopped,
              "stopped_after_match": stopped,
              "milestones_s": {k: round(v, 2) for k, v in sorted(marks.items(), key=lambda kv: kv[1])},
              "megatron_startup_timers_s": timers}
    (out / f"{label}.log").write_text("\n".join(stamped) + "\n")
    (out / f"{label}.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def read_milestones(text: str, now: float, start_wall: float, marks: dict[str, float],
                    timers: dict[str, float]) -> None:
    """The milestones one output line gives (its stamp `now`; Megatron's absolute timestamps against
    `start_wall`, the command's start in epoch seconds); the first of each name is kept."""
    if "run directory:" in text:
        marks.setdefault("run directory printed", now)
    elif "run directory printed" in marks and not text.startswith("# "):
        marks.setdefault("first line after the launcher's", now)
    if text.startswith("using world size:"):
        marks.setdefault("using world size (Megatron's first line)", now)
    if (m := DATETIME.search(text)) is not None:
        try:
            at = datetime.strptime(m["ts"], "%Y-%m-%d %H:%M:%S.%f" if "." in m["ts"] else "%Y-%m-%d %H:%M:%S")
            marks.setdefault(m["name"].strip(), round(at.timestamp() - start_wall, 2))
        except ValueError:
            pass
    if (m := TIMER.match(text)) is not None:
        timers[m["name"]] = round(float(m["max"]) / 1000.0, 2)
    if (m := HELPERS.search(text)) is not None:
        timers["dataset-helpers-build"] = float(m["s"])
    if (m := ITERATION.search(text)) is not None:
        marks.setdefault(f"iteration {m['it']} line", now)
    if "fast ops:" in text:
        marks.setdefault("fast ops applied (spec imported)", now)


def print_result(result: dict) -> None:
    """One line per milestone, in order."""
    stopped, killed = result["stopped_after_match"], result["killed_at_timeout"]
    why = " (stopped by --stop-after)" if stopped else " (killed at the time limit)" if killed else ""
    print(f"== {result['label']}: exit {result['exit_code']}{why}, "
          f"{result['milestones_s']['exit']:.1f} s command -> exit", flush=True)
    for name, at in result["milestones_s"].items():
        print(f"   {at:7.2f} s  {name}")
    if result["megatron_startup_timers_s"]:
        print("   Megatron's timers: " + ", ".join(f"{k} {v}" for k, v in result["megatron_startup_timers_s"].items()))


# The breakdown a bench prints: (column, milestone), each in seconds from the command's start.
BREAKDOWN = (
    ("run dir", "run directory printed"),
    ("rank start", "before library-setup"),  # Megatron's stamp of its program's start
    ("library-setup", "after library-setup"),  # the rank's imports done
    ("megatron init", "after megatron is initialized"),
    ("iteration 1", "iteration 1 line"),
    ("training done", "after training is done"),
    ("exit", "exit"),
)


def breakdown_table(results: list[dict]) -> str:
    """One row per timed launch: seconds from the command's start to each BREAKDOWN milestone ("-": not seen)."""
    width = max([len("launch"), *(len(r["label"]) for r in results)])
    lines = [f"{'launch':{width}s}  " + "  ".join(f"{column:>13s}" for column, _ in BREAKDOWN)]
    for result in results:
        marks = result["milestones_s"]
        cells = [f"{marks[name]:13.2f}" if name in marks else f"{'-':>13s}" for _, name in BREAKDOWN]
        note = "" if result["exit_code"] == 0 and not result["killed_at_timeout"] else (
            "  (killed at the time limit)" if result["killed_at_timeout"] else f"  (exit {result['exit_code']})")
        lines.append(f"{result['label']:{width}s}  " + "  ".join(cells) + note)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args, command = parse_args(argv)
    print_result(time_command(command, args.label, args.out, args.timeout, args.stop_after))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
