"""Small helpers on the words of a command line."""

from __future__ import annotations


def base_name(word: str) -> str:
    """The last part of a path, as a program is named on a command line (`/usr/bin/srun` → srun)."""
    return word.rsplit("/", 1)[-1]
