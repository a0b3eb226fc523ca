"""The files of a run directory's folders, listed within a bound (the standard library only: the batch script's
requeue policy reads Slurm logs with the node's python3)."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from launcher.errors import UserError, shown

MAX_ENTRIES = 100_000  # a run's logs/: one file an attempt (a pod each on Kubernetes); past this, damage


def listed(directory: str | Path, pattern: str, what: str) -> list[Path]:
    """The entries of `directory` whose names match `pattern` (fnmatch, case-sensitive), in no order; [] where it
    cannot be listed (missing, not a directory). Reading stops at MAX_ENTRIES entries in all: a directory of
    millions of files is refused, never listed and sorted whole."""
    found = []
    try:
        with os.scandir(directory) as entries:
            for number, entry in enumerate(entries):
                if number >= MAX_ENTRIES:
                    raise UserError(f"{shown(str(directory))} holds more than {MAX_ENTRIES:,} entries: more than "
                                    f"any run's {what}", "move away what does not belong there, then run again")
                if fnmatch.fnmatchcase(entry.name, pattern):
                    found.append(Path(entry.path))
    except OSError:
        return []
    return found
