"""Small helpers on the words of a command line."""

from __future__ import annotations

import re
from collections.abc import Iterator

MARK = "\x00"  # an unknown value expands to MARK + NAME + MARK (bash_subset)
# More nodes, processes or GPUs than any cluster has: a count past it is no job's (and is not carried)
MAX_COUNT = 1_000_000
_DIGITS = re.compile(r"0*[0-9]{1,7}")  # ASCII only: `\d` and int() also take ٨ and ８, which no job launcher reads


# a scheduler's header directives are read in the script's first lines only
MAX_HEADER_LINES = 2000


def header_directives(text: str, prefix: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, words) of each `PREFIX …` line (`#SBATCH`, `#PBS`, `#$`, `#BSUB`) before the script's first
    command (a scheduler reads no later ones): the words after the prefix, up to a `#` comment."""
    for number, line in enumerate(text.splitlines()[:MAX_HEADER_LINES], 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return
        if stripped.startswith(prefix):
            yield number, stripped[len(prefix):].split("#", 1)[0].split()


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
