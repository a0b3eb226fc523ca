"""Small helpers on the words of a command line."""

from __future__ import annotations

import re

MARK = "\x00"  # an unknown value expands to MARK + NAME + MARK (bash_subset)
# More nodes, processes or GPUs than any cluster has: a count past it is no job's (and is not carried)
MAX_COUNT = 1_000_000
_DIGITS = re.compile(r"0*[0-9]{1,7}")  # ASCII only: `\d` and int() also take ٨ and ８, which no job launcher reads


def base_name(word: str) -> str:
    """The last part of a path, as a program is named on a command line (`/usr/bin/srun` → srun)."""
    return word.rsplit("/", 1)[-1]


def count(word: object, least: int = 1) -> int | None:
    """A node, process or GPU count as a job launcher, scheduler or manifest gives it (`-np 16`, `--nodes=2`,
    `replicas: "4"`): ASCII digits from `least` to MAX_COUNT; None for anything else (0 where `least` is 1, -1,
    1e9, 99999999999, a non-ASCII digit, a word with spaces)."""
    if isinstance(word, bool) or not isinstance(word, (int, str)):
        return None
    if isinstance(word, str):
        if not _DIGITS.fullmatch(word):
            return None
        word = int(word)
    return word if least <= word <= MAX_COUNT else None


def is_count(word: str, least: int = 1) -> bool:
    return count(word, least) is not None
