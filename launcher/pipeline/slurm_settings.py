"""The `slurm:` section of a preset: parsed, typed and checked before anything is rendered or submitted.

Values that end up on `#SBATCH` lines cannot be shell-quoted (sbatch parses those lines itself), so they
must match a strict character set. Values that end up in shell commands are quoted when rendered, and
additionally may not contain shell metacharacters, so a preset can never smuggle a command into the script.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from launcher.errors import Problem, UserError, did_you_mean
from launcher.pipeline.environment import is_env_name
from launcher.pipeline.field_types import fields_allowing

# Slurm names (partition, account, qos, job name) and #SBATCH option values.
SBATCH_NAME = re.compile(r"[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*")
SBATCH_MEMORY = re.compile(r"\d+[KMGT]?", re.IGNORECASE)
SBATCH_EXTRA = re.compile(r"--[a-z][a-z0-9-]*(=[A-Za-z0-9_.,:@%+=/-]+)?")
# Characters that mean something to a shell beyond a plain word. `#`, `^`, `,`, `:`, `=`, `@` stay allowed:
# they are common in NCCL settings (NCCL_SOCKET_IFNAME=^lo) and pyxis images (nvcr.io#nvidia/pytorch:24.01).
SHELL_METACHARACTERS = frozenset(";&|<>()$`\\\"'*?[]{}!~\n\r\t ")

# The signals a batch shell may trap. TERM and INT are what Slurm itself sends on scancel, preemption and
# requeue, so a trap on them could not tell "time is nearly up" from "you are being cancelled".
TRAPPABLE_SIGNALS = ("USR1", "USR2")
# sbatch stores the warning time in 16 bits.
MAX_SIGNAL_SECONDS = 65535
# Longest --chain: a guard against a typo submitting thousands of jobs.
MAX_CHAIN = 100

# Options the launcher writes itself; setting them through `extra_sbatch` would contradict the script.
MANAGED_OPTIONS = {
    "nodes": "--nodes", "ntasks": "--nodes", "ntasks-per-node": "--nodes",
    "gpus-per-node": "--gpus-per-node", "gres": "--gpus-per-node", "gpus": "--gpus-per-node",
    "job-name": "slurm.job_name", "partition": "slurm.partition", "account": "slurm.account",
    "qos": "slurm.qos", "time": "slurm.time", "exclusive": "slurm.exclusive", "signal": "slurm.signal",
    "cpus-per-task": "slurm.cpus_per_task", "mem": "slurm.mem", "mem-per-cpu": "slurm.mem",
    "mem-per-gpu": "slurm.mem",
    "requeue": "slurm.requeue", "no-requeue": "slurm.requeue", "dependency": "--chain (slurm.chain)",
    "output": "the run directory", "error": "the run directory", "open-mode": "the run directory",
}


@dataclass(frozen=True)
class SlurmSettings:
    """Where and how a job runs on Slurm. Every field can be set in a preset's `slurm:` section or by --set."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    job_name: str | None = None
    # Resources of the one task per node (a torchrun with all its ranks and their data loaders). By default the
    # whole node: --exclusive gives every CPU, --mem=0 all the memory (without them Slurm may hand out 1 CPU).
    # On clusters that share nodes: exclusive=false with cpus_per_task (and mem) sized for the ranks.
    exclusive: bool = True
    cpus_per_task: int | None = None
    mem: str | None = "0"  # --mem: all of the node's memory; e.g. "480G"; null to leave it to the cluster
    extra_sbatch: tuple[str, ...] = ()
    signal: str = "USR1"
    signal_seconds: int = 300
    requeue: bool = True
    max_restarts: int = 3
    container_image: str | None = None
    container_mounts: tuple[str, ...] = ()
    rdzv_port: int | None = None  # default: launcher.master_port
    chain: int = 1  # jobs submitted one after another (--dependency=singleton); --chain overrides


def parse_time_limit(text: str) -> int | None:
    """Seconds in a Slurm time limit; None for no limit. Raises ValueError for anything sbatch would reject.

    Slurm's forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED/INFINITE.
    """
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if not match:
        raise ValueError(text)
    days, first, second, third = match.groups()
    if days is not None:
        hours, minutes, seconds = int(first), int(second or 0), int(third or 0)
        if hours >= 24:
            raise ValueError(text)
    elif third is not None:
        hours, minutes, seconds = int(first), int(second), int(third)
    else:
        hours, minutes, seconds = 0, int(first), int(second or 0)
    # The first field may be large (90 = 90 minutes); the ones after it are clock fields.
    later = [minutes, seconds] if (days is not None or third is not None) else [seconds]
    if any(value >= 60 for value in later):
        raise ValueError(text)
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def shell_metacharacters(value: str) -> str:
    """The shell metacharacters in a value, in order of appearance, shown readably ('' if none)."""
    found = dict.fromkeys(ch for ch in value if ch in SHELL_METACHARACTERS or ord(ch) < 32)
    return " ".join(repr(ch) for ch in found)


def check_shell_value(setting: str, value: str, problems: list[Problem]) -> None:
    """Reject metacharacters in a value that reaches the script's shell commands (it is quoted as well)."""
    bad = shell_metacharacters(value)
    if bad:
        problems.append(Problem(
            f"{setting}={value!r} contains shell metacharacters ({bad})",
            "these values are pasted into the batch script's commands; use plain paths and words",
        ))


def check_environment(env: Mapping[str, str | None]) -> list[Problem]:
    """Problems with environment variables the batch script exports on every node."""
    problems: list[Problem] = []
    for name, value in env.items():
        if not is_env_name(name):
            problems.append(Problem(f"environment variable name {name!r} is not a valid shell name",
                                    "use letters, digits and underscores, not starting with a digit"))
        if value is not None:  # None: unset, nothing is written
            check_shell_value(f"env.{name}", value, problems)
    return problems


def _check_type(name: str, value: Any, expected: type, problems: list[Problem]) -> bool:
    # bool is an int in Python; a YAML `yes` must not pass as a count.
    if isinstance(value, expected) and not (expected is int and isinstance(value, bool)):
        return True
    problems.append(Problem(f"slurm.{name} must be {expected.__name__}, got {type(value).__name__} {value!r}"))
    return False


def _as_tuple(name: str, value: Any, problems: list[Problem]) -> tuple[str, ...] | None:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return tuple(value)
    problems.append(Problem(f"slurm.{name} must be a string or a list of strings, got {value!r}"))
    return None


def _check_name(name: str, value: str, problems: list[Problem]) -> None:
    if not SBATCH_NAME.fullmatch(value):
        problems.append(Problem(
            f"slurm.{name}={value!r} is not a valid Slurm name",
            "letters, digits and . _ + - only (commas between several); it is written on an #SBATCH line",
        ))


def _check_extra(option: str, problems: list[Problem]) -> None:
    if not SBATCH_EXTRA.fullmatch(option):
        problems.append(Problem(
            f"slurm.extra_sbatch entry {option!r} is not a plain #SBATCH option",
            "write one long option per entry, e.g. --mail-type=END or --constraint=h100; "
            "values may hold letters, digits and _ . , : @ % + = / - only",
        ))
        return
    key = option[2:].split("=", 1)[0]
    if key in MANAGED_OPTIONS:
        problems.append(Problem(f"slurm.extra_sbatch entry {option!r} sets an option the launcher writes itself",
                                f"use {MANAGED_OPTIONS[key]} instead"))


def parse_slurm_settings(raw: Mapping[str, Any] | None) -> SlurmSettings:
    """Typed settings from a preset's `slurm:` mapping. Raises UserError listing every problem at once."""
    raw = dict(raw or {})
    known = {f.name: f for f in fields(SlurmSettings)}
    problems: list[Problem] = []
    values: dict[str, Any] = {}
    for name, value in raw.items():
        if name not in known:
            hint = did_you_mean(name, known, prefix="slurm.") or "known: " + ", ".join(sorted(known))
            problems.append(Problem(f"unknown Slurm setting slurm.{name}", hint))
            continue
        if value is None:
            if name in ("mem", "cpus_per_task"):
                values[name] = None  # `--set slurm.mem=null`: request nothing, the cluster decides
            continue
        if name in fields_allowing(SlurmSettings, tuple):
            items = _as_tuple(name, value, problems)
            if items is not None:
                values[name] = items
        elif name in fields_allowing(SlurmSettings, bool):
            if _check_type(name, value, bool, problems):
                values[name] = value
        elif name == "mem" and isinstance(value, int) and not isinstance(value, bool):
            values[name] = str(value)  # YAML reads mem: 0 as a number; Slurm's unit default is MB
        elif name in fields_allowing(SlurmSettings, int):
            if _check_type(name, value, int, problems):
                values[name] = value
        elif name == "time" and isinstance(value, int) and not isinstance(value, bool):
            # YAML 1.1 reads an unquoted 4:00:00 as the number 14400, so a bare number is ambiguous.
            problems.append(Problem(
                f"slurm.time must be a quoted string, got the number {value}",
                'write e.g. time: "04:00:00" or time: "240" (minutes); YAML reads unquoted 4:00:00 as 14400',
            ))
        elif _check_type(name, value, str, problems):
            values[name] = value
    settings = SlurmSettings(**values)
    problems.extend(_check_settings(settings))
    if "max_restarts" in values and settings.max_restarts and not settings.requeue:
        problems.append(Problem(f"slurm.max_restarts={settings.max_restarts} does nothing with slurm.requeue=false: "
                                "a job that is not requeued never restarts",
                                "drop slurm.max_restarts, or let the job be requeued (slurm.requeue=true)"))
    if problems:
        raise UserError(problems)
    return settings


def _check_settings(settings: SlurmSettings) -> list[Problem]:
    problems: list[Problem] = []
    for name in ("partition", "account", "qos", "job_name"):
        value = getattr(settings, name)
        if value is not None:
            _check_name(name, value, problems)
    for option in settings.extra_sbatch:
        _check_extra(option, problems)
    if settings.mem is not None and not SBATCH_MEMORY.fullmatch(settings.mem):
        problems.append(Problem(f"slurm.mem={settings.mem!r} is not a Slurm memory size",
                                'use a number with an optional unit K, M, G or T (e.g. "480G"), or "0" for all of '
                                "the node's memory"))
    if settings.cpus_per_task is not None and settings.cpus_per_task < 1:
        problems.append(Problem(f"slurm.cpus_per_task={settings.cpus_per_task} must be at least 1"))
    limit = None
    if settings.time is not None:
        try:
            limit = parse_time_limit(settings.time)
        except ValueError:
            problems.append(Problem(
                f"slurm.time={settings.time!r} is not a Slurm time limit",
                'use minutes ("90"), "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS" or "UNLIMITED"',
            ))
    if settings.signal not in TRAPPABLE_SIGNALS:
        problems.append(Problem(
            f"slurm.signal={settings.signal!r} cannot be used for the time-limit warning",
            f"use one of {', '.join(TRAPPABLE_SIGNALS)} (Slurm itself sends TERM on cancel and requeue)",
        ))
    if not 1 <= settings.signal_seconds <= MAX_SIGNAL_SECONDS:
        problems.append(Problem(f"slurm.signal_seconds={settings.signal_seconds} is out of range",
                                f"use 1 to {MAX_SIGNAL_SECONDS} seconds before the time limit"))
    elif limit is not None and settings.signal_seconds >= limit:
        problems.append(Problem(
            f"slurm.signal_seconds={settings.signal_seconds} is not shorter than slurm.time={settings.time} "
            f"({limit} s): the job would be told to stop as soon as it starts",
            f"use a longer slurm.time or slurm.signal_seconds below {limit}",
        ))
    if settings.max_restarts < 0:
        problems.append(Problem(f"slurm.max_restarts={settings.max_restarts} must be 0 or more"))
    if settings.container_image is not None:
        check_shell_value("slurm.container_image", settings.container_image, problems)
    if settings.container_mounts and settings.container_image is None:
        problems.append(Problem("slurm.container_mounts does nothing without slurm.container_image: the mounts are "
                                "the container's, and the job runs on the node itself",
                                "add slurm.container_image=IMAGE, or drop slurm.container_mounts"))
    for mount in settings.container_mounts:
        check_shell_value("slurm.container_mounts", mount, problems)
        if "," in mount:
            problems.append(Problem(f"slurm.container_mounts entry {mount!r} holds a comma",
                                    "give each mount as its own list entry (SRC:DST[:FLAGS])"))
    return problems
