"""The files of a run directory's folders, listed within a bound (the standard library only: the batch script's
requeue policy reads Slurm logs with the node's python3)."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from launcher.errors import UserError, shown

MAX_ENTRIES = 100_000  # a run's logs/: one file an attempt (a pod each on Kubernetes); past this, damage


def within(entries: Iterable[os.DirEntry[str]], directory: str | Path, what: str, hint: str,
           limit: int | None = None) -> Iterator[os.DirEntry[str]]:
    """A directory's entries as scandir gives them, refused (UserError) at the first past `limit` (MAX_ENTRIES when
    None): a directory of millions of files is never read, listed or sorted whole. `what`: what no more of can be
    there."""
    limit = MAX_ENTRIES if limit is None else limit
    for number, entry in enumerate(entries):
        if number >= limit:
            raise UserError(f"{shown(str(directory))} holds more than {limit:,} entries: more than {what}", hint)
        yield entry


def listed(directory: str | Path, pattern: str, what: str) -> list[Path]:
    """The entries of `directory` whose names match `pattern` (fnmatch, case-sensitive), in no order; [] where it
    cannot be listed (missing, not a directory); refused past MAX_ENTRIES entries in all (`within`)."""
    found = []
    try:
        with os.scandir(directory) as entries:
            for entry in within(entries, directory, f"any run's {what}",
                                "move away what does not belong there, then run again"):
                if fnmatch.fnmatchcase(entry.name, pattern):
                    found.append(Path(entry.path))
    except OSError:
        return []
    return found
