"""What a checkpoint directory holds, as Megatron would find it when it loads: the tracker file
(latest_checkpointed_iteration.txt), the iteration directory it names, the format on disk (torch_dist: a valid
metadata.json; torch: mp_rank_0* directories; torch_dcp: a .metadata file), and the settings Megatron stored
with it (its args, iteration, checkpoint version, content metadata).

Finding the files needs no torch. Reading the stored settings does (they are pickled): that runs
launcher/inside/checkpoint_args.py under the Megatron interpreter, which reads them with
torch.load(weights_only=True) and an allowlist, never the weights. Every file here is someone else's data:
each read is bounded and none follows a program, a loader or a path it names.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from launcher import untrusted
from launcher.errors import UserError, shown
from launcher.pipeline.load_rules import INT64_MAX, TRACKER  # checkpointing.py get_checkpoint_tracker_filename

READER = Path(__file__).resolve().parent.parent / "inside" / "checkpoint_args.py"
MAX_SMALL_FILE = 64 * 1024  # the tracker and metadata.json are a few bytes
MAX_ENTRIES = 10_000  # entries of an iteration directory looked at (a torch checkpoint has one per model shard)
READ_SECONDS = 120  # torch's import plus a memory-mapped load of one file


@dataclass(frozen=True)
class StoredCheckpoint:
    """One checkpoint directory as found. `found` is False where Megatron would start from scratch."""

    load: str
    found: bool = False
    why_not: str = ""  # no checkpoint: what is missing, or what Megatron meets at load where `damaged`
    damaged: bool = False  # a tracker file is there, but Megatron stops (or exits) at load instead of resuming
    iteration: int | None = None
    release: bool = False
    directory: str = ""  # the iteration directory (iter_0000100 or release)
    format: str = ""  # torch_dist | torch | torch_dcp | "" (unknown)
    backend: dict[str, Any] = field(default_factory=dict)  # torch_dist metadata.json
    file: str = ""  # the file that holds the stored settings (common.pt, mp_rank_00/model_optim_rng.pt)
    args: dict[str, Any] | None = None  # what Megatron stored: its args, as plain values
    content_metadata: dict[str, Any] | None = None
    checkpoint_version: Any = None
    keys: tuple[str, ...] | None = None  # the stored file's top-level entries (model, optimizer, rng_state, …)
    unread: str = ""  # why the stored settings could not be read (format, file, no torch, unsafe content)

    def as_dict(self) -> dict[str, Any]:
        return {"load": self.load, "found": self.found, "why_not": self.why_not or None, "damaged": self.damaged,
                "iteration": self.iteration, "release": self.release, "directory": self.directory or None,
                "format": self.format or None, "backend": self.backend or None,
                "checkpoint_version": self.checkpoint_version, "content_metadata": self.content_metadata,
                "args_read": self.args is not None, "unread": self.unread or None}




def find(load: str | Path, step: int | None = None) -> StoredCheckpoint:
    """The checkpoint Megatron would load from `load`: its tracker, iteration directory and format (no torch),
    judged as megatron/training/checkpointing.py reads them: no tracker file (os.path.isfile) is a fresh start; a
    tracker that is there but leads nowhere is `damaged`, since Megatron then stops at load. `step`: the job's
    ckpt_step, which Megatron loads in place of the tracker's iteration (with or without a tracker)."""
    load = str(load)
    root = Path(load)
    if not root.is_dir():
        return StoredCheckpoint(load, why_not=f"{load} does not exist" if not root.exists() else
                                f"{load} is not a directory")
    tracker = root / TRACKER
    if step and not tracker.is_file():
        return _iteration_directory(load, root / f"iter_{step:07d}", step, False, f"ckpt_step {step} names")
    if not tracker.is_file():
        return StoredCheckpoint(load, why_not=f"no {TRACKER} in {load}")
    try:
        text = untrusted.read_utf8(tracker, "checkpoint tracker file", MAX_SMALL_FILE).strip()
    except UserError as error:
        return _damaged(load, f"{error.problems[0].message}: Megatron cannot read it at load")
    try:
        iteration, release = int(text), False  # read_metadata's own reading: int(), else 'release'
    except ValueError:
        iteration, release = 0, text == "release"
        if not release:
            return _damaged(load, f"{tracker} holds {shown(text[:80])}, not an iteration: Megatron prints 'ERROR: "
                            "Invalid metadata file' at load and exits with status 0, having trained nothing")
    if iteration < 0:
        return _damaged(load, f"{tracker} holds iteration {iteration}: Megatron stops at load ('error parsing "
                        "metadata file')")
    if iteration > INT64_MAX:
        return _damaged(load, f"{tracker} holds {shown(text[:80])}, beyond a 64-bit iteration: Megatron stops at "
                        "load (the iteration is all-reduced as a torch.long)")
    if step:  # _load_base_checkpoint: ckpt_step replaces the tracker's iteration
        iteration, named = step, f"ckpt_step {step} names"
    else:
        named = f"{tracker} names"
    directory = root / ("release" if release else f"iter_{iteration:07d}")
    return _iteration_directory(load, directory, iteration, release, named)


def _iteration_directory(load: str, directory: Path, iteration: int, release: bool, named: str) -> StoredCheckpoint:
    """The checkpoint in the iteration (or release) directory Megatron loads, as _get_checkpoint_format finds it."""
    if not directory.is_dir():
        return _damaged(load, f"{named} {'the release' if release else f'iteration {iteration}'}, but "
                        f"{directory} is missing: Megatron stops at load (FileNotFoundError)",
                        iteration=iteration, release=release)
    entries = _names(directory)
    backend, bad_metadata = _backend(directory / "metadata.json")
    if bad_metadata:
        return _damaged(load, f"{directory / 'metadata.json'} {bad_metadata}: Megatron stops at load reading it",
                        iteration=iteration, release=release)
    if backend:
        fmt, file = "torch_dist", directory / "common.pt"
    elif any(e.startswith("mp_rank_0") for e in entries):
        fmt, file = "torch", _rank0_file(directory, entries)
    elif ".metadata" in entries:
        fmt, file = "torch_dcp", None
    else:
        return _damaged(load, f"{directory} holds no checkpoint Megatron knows (no metadata.json, mp_rank_* or "
                        ".metadata): Megatron stops at load ('unknown checkpoint format')", iteration=iteration,
                        release=release)
    if file is not None and not file.is_file():
        return _damaged(load, f"{file} is missing: Megatron stops at load" + (
            " ('could not load the checkpoint', exit status 0, having trained nothing)" if fmt == "torch" else ""),
            iteration=iteration, release=release)
    unread = "" if file is not None else \
        f"the {fmt} format keeps its settings in torch.distributed.checkpoint's own files: not read here"
    return StoredCheckpoint(load, found=True, iteration=iteration, release=release, directory=str(directory),
                            format=fmt, backend=backend, unread=unread, file=str(file or ""))


def _damaged(load: str, why: str, **facts: Any) -> StoredCheckpoint:
    return StoredCheckpoint(load, why_not=why, damaged=True, **facts)


def read(load: str | Path, python: str | None, step: int | None = None) -> StoredCheckpoint:
    """find(), then the stored settings through the Megatron interpreter `python` (None: no such interpreter)."""
    found = find(load, step)
    if not found.found or found.unread:
        return found
    base, file = found, found.file
    if python is None:
        return _with(base, unread="reading its stored settings needs torch, which this Python cannot import")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    try:
        done = subprocess.run([python, "-I", str(READER), file], capture_output=True, text=True, env=env,
                              timeout=READ_SECONDS, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return _with(base, unread=f"reading {file} took more than {READ_SECONDS} s")
    except OSError as error:
        return _with(base, unread=f"cannot start {python}: {error.strerror or error}")
    try:
        reply = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}
    except (json.JSONDecodeError, RecursionError):
        reply = {}
    if not isinstance(reply, dict) or not reply:
        tail = " ".join(done.stderr.split()[-40:])
        return _with(base, unread=f"the reader exited with {done.returncode}: {shown(tail, 400)}")
    if reply.get("error") and reply.get("damaged") is True:  # torch cannot read it: nor can Megatron at load
        said = " ".join(str(reply["error"]).split())[:400]
        return _with(base, found=False, damaged=True, why_not=f"{said}: Megatron stops at load reading it")
    if reply.get("error"):
        return _with(base, unread=str(reply["error"]))
    args = reply.get("args")
    return _with(base, args=args if isinstance(args, dict) else None,
                 unread="" if isinstance(args, dict) else f"{file} holds no args",
                 content_metadata=reply.get("content_metadata") if isinstance(reply.get("content_metadata"), dict)
                 else None, checkpoint_version=reply.get("checkpoint_version"),
                 keys=tuple(str(k) for k in reply["keys"]) if isinstance(reply.get("keys"), list) else None,
                 iteration=reply["iteration"] if isinstance(reply.get("iteration"), int) else found.iteration)


def _with(base: StoredCheckpoint, **changes: Any) -> StoredCheckpoint:
    return replace(base, **changes)


def _names(directory: Path) -> list[str]:
    names = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                names.append(entry.name)
                if len(names) >= MAX_ENTRIES:
                    break
    except OSError:
        pass
    return names


CHECKPOINTING_CONFIG = {"sharded_backend": str, "sharded_backend_version": int, "common_backend": str,
                        "common_backend_version": int}  # dist_checkpointing.core.CheckpointingConfig's fields


def _backend(path: Path) -> tuple[dict[str, Any], str]:
    """metadata.json of a torch_dist checkpoint as dist_checkpointing.maybe_load_config reads it: ({}, "") where
    there is none (not torch_dist), else its fields, or what makes Megatron fail on it (not JSON, fields that
    CheckpointingConfig(**config) refuses)."""
    if not path.exists():
        return {}, ""
    try:
        value = json.loads(untrusted.read_utf8(path, "checkpoint metadata", MAX_SMALL_FILE))
    except UserError as error:
        return {}, f"cannot be read ({error.problems[0].message})"
    except (ValueError, RecursionError) as error:  # ValueError: JSONDecodeError, or an integer of 4,300+ digits
        return {}, f"is not JSON ({shown(str(error), 80)})"
    if not isinstance(value, dict):
        return {}, "holds no JSON object"
    unknown = sorted(set(value) - set(CHECKPOINTING_CONFIG))
    if unknown or "sharded_backend" not in value:
        return {}, (f"holds fields Megatron's CheckpointingConfig does not take ({shown(', '.join(unknown), 80)})"
                    if unknown else "names no sharded_backend")
    return {str(k): v for k, v in value.items() if isinstance(v, (str, int, float, bool))}, ""


def _rank0_file(directory: Path, entries: list[str]) -> Path:
    """model_optim_rng.pt of tensor rank 0, pipeline rank 0 (megatron find_checkpoint_rank_0's order)."""
    for name in ("mp_rank_00", "mp_rank_00_000", "mp_rank_00_000_000"):
        if name in entries:
            return directory / name / "model_optim_rng.pt"
    first = sorted(e for e in entries if e.startswith("mp_rank_00"))
    return directory / (first[0] if first else "mp_rank_00") / "model_optim_rng.pt"
