"""Run directories: `runs/<preset>-<UTC timestamp>/`, one per launch, never overwritten.

Layout:
    preset.yaml      the resolved preset (after base: layering and --set overrides)
    command.sh       the exact environment and command, runnable as is
    manifest.json    versions, commits, hosts, world and layout, overrides, attempts
    logs/            attempt-1.log, attempt-2.log (after --resume), …
    checkpoints/     Megatron --save and --load (the same directory, so a relaunch resumes)
    tensorboard/     Megatron --tensorboard-dir
    metrics.jsonl, summary.json, plots/   written by the monitor and `launch report`

The directory is built under a hidden temporary name in the same root and renamed into place, so a run
directory either exists complete or not at all. Nothing here imports torch: versions come from package
metadata, commits from git.
"""

from __future__ import annotations

import atexit
import dataclasses
import errno
import getpass
import importlib.metadata
import json
import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

import launcher
from launcher import nofollow, untrusted
from launcher.errors import Problem, UserError, shown
from launcher.pipeline.preset import ENTRIES
from launcher.pipeline.resolve import ResumedRun
from launcher.pipeline.run_paths import CHECKPOINTS, TENSORBOARD
from launcher.pipeline.shell import shell_word, shell_words
from launcher.redaction import scrub_record
from launcher.runs import secrets
from launcher.runs.atomic import write_text_atomic

MANIFEST = "manifest.json"
PRESET_FILE = "preset.yaml"
COMMAND_FILE = "command.sh"
RUNNING_FILE = "running.json"  # the launcher's pid and host while a job runs here (`launch runs` reads it)
DEFAULT_ROOT = Path("runs")

# Distribution names to report; the first one installed wins (Transformer Engine ships under several names).
PACKAGES: dict[str, tuple[str, ...]] = {
    "megatron-core": ("megatron-core", "megatron_core"),
    "torch": ("torch",),
    "transformer-engine": ("transformer-engine", "transformer_engine", "transformer-engine-torch",
                           "transformer_engine_torch"),
    "apex": ("apex",),
    "nvidia-resiliency-ext": ("nvidia-resiliency-ext",),
    "tensorboard": ("tensorboard",),
    "wandb": ("wandb",),
}


# ---------------------------------------------------------------------------------------------- naming


def run_dir_name(preset_name: str, now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(preset_name).stem) or "run"
    return f"{safe}-{stamp}"


def new_run_dir_path(root: Path, preset_name: str, now: datetime | None = None) -> Path:
    """A path for a new run directory that does not exist yet (same-second launches get -2, -3, …).

    Only for showing a path (dry-run): a launch reserves its directory with `reserve_run_dir`."""
    base = run_dir_name(preset_name, now)
    candidate, n = Path(root) / base, 2
    while candidate.exists():
        candidate, n = Path(root) / f"{base}-{n}", n + 1
    return candidate


def reserve_run_dir(root: Path, preset_name: str, now: datetime | None = None) -> Path:
    """Create a new, empty run directory and return it; launches in the same second get -2, -3, ….

    mkdir is atomic: of two launches that choose the same name, one gets it and the other takes the next
    suffix. `write_run_dir` later renames the complete directory onto this empty one; if the launch ends
    before that (a failed check, Ctrl-C), the empty directory is removed when the process exits.
    """
    root = Path(root)
    base = run_dir_name(preset_name, now)
    if root.exists() and not root.is_dir():
        raise UserError(Problem(f"run_root {root} is a file, not a directory",
                                "set run_root to a directory (--set run_root=PATH)"))
    created = [path for path in (root, *root.parents) if not path.exists()]
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(storage_problem(f"cannot create run_root {root}", error)) from None
    for path in reversed(created):  # at exit, after the run directory: the folders made for it, if left empty
        atexit.register(release_run_dir, path)
    for n in range(1, 10_000):
        candidate = root / (base if n == 1 else f"{base}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        except OSError as error:
            raise UserError(storage_problem(f"cannot create the run directory {candidate}", error)) from None
        atexit.register(release_run_dir, candidate)
        return candidate
    raise UserError(Problem(f"{root} already holds 10,000 run directories named {base}-N",
                            "set run_root to another directory (--set run_root=PATH)"))


def release_run_dir(path: Path) -> None:
    """Give back a reserved directory that the launch never filled (a filled one stays: it is a record)."""
    try:
        Path(path).rmdir()
    except OSError:
        pass


def storage_problem(what: str, error: OSError) -> Problem:
    """A file-system failure the user can fix (read-only mount, full disk, a file where a directory should be)."""
    reason = error.strerror or str(error)
    if error.errno == errno.ENOSPC or error.errno == errno.EDQUOT:
        hint = "free space on that file system, or set run_root to another one (--set run_root=PATH)"
    else:
        hint = "set run_root to a writable directory (--set run_root=PATH)"
    return Problem(f"{what}: {reason}", hint)


# ---------------------------------------------------------------------------------------------- manifest


def _git(path: Path, *args: str) -> str | None:
    try:
        result = subprocess.run(["git", "-C", str(path), *args], check=False, capture_output=True, text=True,
                                timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def git_commit(path: Path) -> dict[str, Any]:
    """HEAD commit of the checkout at `path` and whether it has local changes (None when not a checkout).

    Only a checkout of its own counts: a plain copy inside another repository (e.g. Megatron-LM files copied into
    a project folder) would otherwise report that repository's commit."""
    top = _git(path, "rev-parse", "--show-toplevel")
    own = top is not None and Path(top).resolve() == Path(path).resolve()
    commit = _git(path, "rev-parse", "HEAD") if own else None
    dirty = None
    if commit is not None:
        status = _git(path, "status", "--porcelain", "--untracked-files=no")
        dirty = bool(status) if status is not None else None
    return {"path": str(path), "commit": commit, "dirty": dirty}


def megatron_checkout_version(path: Path) -> str | None:
    """MAJOR.MINOR.PATCH from the checkout's megatron/core/package_info.py (also works without .git)."""
    text = untrusted.text_or_none(path / "megatron" / "core" / "package_info.py", "package_info.py", 1 << 20)
    if text is None:
        return None
    parts = [re.search(rf"^{name}\s*=\s*(\d+)", text, re.MULTILINE) for name in ("MAJOR", "MINOR", "PATCH")]
    numbers = [m.group(1) for m in parts if m]
    return ".".join(numbers) if len(numbers) == len(parts) else None


def _cuda_version_of_torch() -> str | None:
    """torch.version.cuda, read from torch/version.py without importing torch (seconds and GPU init)."""
    try:
        dist = importlib.metadata.distribution("torch")
        text = untrusted.text_or_none(Path(str(dist.locate_file("torch/version.py"))), "torch/version.py", 1 << 20)
    except importlib.metadata.PackageNotFoundError:
        return None
    if text is None:
        return None
    match = re.search(r"^cuda(?:\s*:\s*\S+)?\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return match.group(1) if match else None


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for label, names in PACKAGES.items():
        versions[label] = None
        for name in names:
            try:
                versions[label] = importlib.metadata.version(name)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    versions["cuda (torch build)"] = _cuda_version_of_torch()
    return versions


def _as_dict(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _as_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _as_dict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_dict(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value



def build_manifest(*, preset_name: str, world: Mapping[str, Any], layout: Any, overrides: Sequence[str],
                   megatron_path: Path | None, hosts: Sequence[str], argv: Sequence[str],
                   env: Mapping[str, str], checkpoint_dir: str | None) -> dict[str, Any]:
    launcher_root = Path(launcher.__file__).resolve().parent.parent
    megatron: dict[str, Any] = (git_commit(megatron_path) if megatron_path else
                                {"path": None, "commit": None, "dirty": None})
    megatron["version"] = megatron_checkout_version(megatron_path) if megatron_path else None
    megatron["expected_commit"] = launcher.MEGATRON_COMMIT
    megatron["matches_pin"] = megatron["commit"] == launcher.MEGATRON_COMMIT if megatron["commit"] else None
    return {
        "format": 1,
        "preset": preset_name,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "launcher": {"version": launcher.__version__, **git_commit(launcher_root)},
        "megatron_lm": megatron,
        "packages": package_versions(),
        "python": platform.python_version(),
        "hosts": list(hosts),
        "user": getpass.getuser(),
        "world": _as_dict(dict(world)),
        "layout": _as_dict(layout),
        "overrides": secrets.redact_argv(overrides),
        "checkpoint_dir": checkpoint_dir,
        "launch_argv": secrets.redact_argv(sys.argv),
        "attempts": [{"started": datetime.now(UTC).isoformat(timespec="seconds"),
                      "argv": list(argv), "env": secrets.redact_env(env)}],
    }


def command_script(argv: Sequence[str], env: Mapping[str, str], workdir: Path | None = None,
                   unset: Sequence[str] = ()) -> str:
    """command.sh: runnable as written on every node. Words are single-quoted, except the launcher's own
    ${MASTER_ADDR} endpoint (a HostFromEnv), which goes in double quotes so that each node fills it in."""
    lines = ["#!/usr/bin/env bash", "# Written by megatron-launch: the exact command of this run.", "set -euo pipefail"]
    if workdir is not None:
        lines.append(f"cd {shlex.quote(str(workdir))}")
    lines += [secrets.shell_export(key, str(value), shell_word) for key, value in env.items()]
    lines += [f"unset {name}" for name in unset]  # launcher.env's nulls (names are checked identifiers)
    lines.append(" ".join(shell_words(argv)))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- create


def write_run_dir(run_dir: Path, *, preset: Mapping[str, Any], manifest: Mapping[str, Any],
                  argv: Sequence[str], env: Mapping[str, str], extra_files: Mapping[str, str] | None = None,
                  unset: Sequence[str] = ()
                  ) -> Path:
    """Create `run_dir` complete or not at all; refuse if it exists (empty, it is this launch's reservation)."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not (run_dir.is_dir() and not any(run_dir.iterdir())):
        raise UserError(Problem(f"run directory {run_dir} already exists; it is never overwritten",
                                f"continue it with --resume {run_dir}, or launch again for a new directory"))
    staging = None
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{run_dir.name}.", dir=run_dir.parent))
        header = f"# Resolved preset of run {run_dir.name} (base: layers and --set overrides applied).\n"
        nofollow.write_atomic(staging / PRESET_FILE, header + yaml.safe_dump(
            secrets.redact_preset(_as_dict(dict(preset))), sort_keys=False), what="run preset")
        nofollow.write_atomic(staging / COMMAND_FILE, command_script(argv, env, unset=unset), what="command.sh",
                              mode=0o755)
        nofollow.write_atomic(staging / MANIFEST, json.dumps(scrub_record(manifest), indent=2) + "\n",
                              what="run manifest")
        for sub in ("logs", CHECKPOINTS, TENSORBOARD):
            (staging / sub).mkdir()
        for name, text in (extra_files or {}).items():
            nofollow.write_atomic(staging / name, text, what=name, mode=0o755 if name.endswith(".sbatch") else 0o644)
        staging.chmod(0o755)  # mkdtemp makes it 0700
        # rename() replaces an empty directory (the reservation) and fails on a non-empty one, so a directory
        # that was filled meanwhile is never replaced.
        os.rename(staging, run_dir)
    except BaseException as error:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError) and error.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise UserError(Problem(f"run directory {run_dir} appeared while this one was being written",
                                    "launch again for a new directory")) from None
        if isinstance(error, OSError):
            raise UserError(storage_problem(f"cannot write the run directory {run_dir}", error)) from None
        raise
    return run_dir


def create_run_dir(job: Any, command: Any, overrides: Sequence[str], root: Path | None = None, *,
                   run_dir: Path | None = None, hosts: Sequence[str] | None = None,
                   megatron_path: Path | None = None, extra_files: Mapping[str, str] | None = None) -> Path:
    """Record a launch: `job` (the ResolvedJob: preset, layout, nodes, gpus_per_node, entry) and `command` (argv, env).

    `run_dir` is the path chosen by `new_run_dir_path` before the command was built (the command already
    points --save/--load/--tensorboard-dir into it); without one a new path under `root` is chosen.
    """
    preset = job.preset
    if run_dir is None:
        run_dir = new_run_dir_path(root or DEFAULT_ROOT, preset.name)
    world = {"nodes": job.nodes, "gpus_per_node": job.gpus_per_node,
             "world_size": job.nodes * job.gpus_per_node}
    megatron_args = dict(getattr(job, "megatron", preset.megatron))  # every setting passed, as the job runs
    manifest = {"entry": getattr(job, "entry", None), **build_manifest(
        preset_name=preset.name, world=world, layout=getattr(job, "layout", None), overrides=overrides,
        megatron_path=megatron_path, hosts=hosts or [socket.gethostname()], argv=command.argv,
        env=command.env, checkpoint_dir=megatron_args.get("save"),
    )}
    # Loadable as a preset again (launch --resume reads it): only the keys a preset file may have.
    launcher_settings = _as_dict(getattr(preset, "launcher", {}))
    if getattr(job, "entry", None) in ENTRIES and isinstance(launcher_settings, dict):
        launcher_settings["entry"] = job.entry  # as resolved (toy on one GPU: pretrain_gpt); not a preflight's
    if isinstance(launcher_settings, dict):  # the world actually used, whatever the preset said
        launcher_settings.update(nodes=job.nodes, gpus_per_node=job.gpus_per_node)
    preset_dict = {"description": getattr(preset, "description", "") or f"{preset.name}, as launched",
                   "launcher": launcher_settings, "megatron": megatron_args}
    return write_run_dir(run_dir, preset=preset_dict, manifest=manifest, argv=command.argv, env=command.env,
                         unset=command.unset, extra_files=extra_files)


# ---------------------------------------------------------------------------------------------- resume


# What --resume and launch report read from a manifest, and the type each must have.
_MANIFEST_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "preset": ((str,), "text"),
    "entry": ((str,), "text"),
    "checkpoint_dir": ((str,), "text (a path)"),
    "attempts": ((list,), "a list"),
    "world": ((dict,), "a mapping"),
}


@dataclasses.dataclass(frozen=True)
class ExistingRun:
    path: Path
    manifest: dict[str, Any]
    preset: dict[str, Any]

    @property
    def checkpoint_dir(self) -> str:
        return self.manifest.get("checkpoint_dir") or str(self.path.absolute() / CHECKPOINTS)

    def resume_megatron_args(self) -> dict[str, Any]:
        """--save = --load = the run's checkpoint directory, plus its tensorboard dir."""
        args = {"save": self.checkpoint_dir, "load": self.checkpoint_dir}
        tensorboard = (self.preset.get("megatron") or {}).get("tensorboard_dir")
        if tensorboard:
            args["tensorboard_dir"] = tensorboard
        return args


def open_run_dir(path: Path) -> ExistingRun:
    """Read an existing run directory; UserError when `path` is not one."""
    path = Path(path)
    hint = "give a directory made by `launch` (it holds manifest.json), e.g. runs/toy-20261129T160150Z"
    if not path.is_dir():
        raise UserError(Problem(f"{path} is not a run directory (it does not exist or is not a directory)", hint))
    for name in (MANIFEST, PRESET_FILE):
        if not (path / name).exists():
            raise UserError(Problem(f"{path} is not a run directory: {name} is missing", hint))
    damaged = "launch a new run; the damaged one is left as it is"
    manifest_text = untrusted.read_utf8(path / MANIFEST, "run manifest")
    try:
        manifest = untrusted.loads_json(manifest_text, MANIFEST)
    except UserError as error:
        raise UserError(Problem(f"{path} is a damaged run directory: {error.problems[0].message}", damaged)) from None
    preset = untrusted.load_yaml(untrusted.read_utf8(path / PRESET_FILE, "run preset"), str(path / PRESET_FILE))
    if not isinstance(manifest, dict) or not isinstance(preset, dict):
        raise UserError(Problem(f"{path} is a damaged run directory: manifest or preset is not a mapping", damaged))
    problems = [f"{key} is {shown(manifest[key])}, not {kind}" for key, (types, kind) in _MANIFEST_TYPES.items()
                if manifest.get(key) is not None and not isinstance(manifest[key], types)]
    megatron = preset.get("megatron")
    if megatron is not None and not isinstance(megatron, dict):
        problems.append(f"{PRESET_FILE}: megatron is {shown(megatron)}, not a mapping")
    if problems:
        raise UserError(Problem(f"{path} is a damaged run directory: {MANIFEST}: {'; '.join(problems)}", damaged))
    return ExistingRun(path=path, manifest=manifest, preset=preset)


def record_attempt(run: ResumedRun, argv: Sequence[str], env: Mapping[str, str],
                   overrides: Sequence[str] = ()) -> None:
    """Append a resumed attempt to the manifest (replaced atomically), with the --set items given for it (the run's
    preset.yaml does not take them: the next --resume says which it does not give again)."""
    manifest = scrub_record(dict(run.manifest))  # read back: it holds what anyone wrote there
    manifest.setdefault("attempts", []).append({
        "started": datetime.now(UTC).isoformat(timespec="seconds"), "argv": list(argv), "env": secrets.redact_env(env),
        "overrides": secrets.redact_argv(overrides),
    })
    try:
        write_text_atomic(run.path / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    except OSError as error:
        raise UserError(storage_problem(f"cannot record the new attempt in {run.path}", error)) from None
