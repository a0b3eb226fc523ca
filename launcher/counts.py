"""A count written in text (an iteration, an attempt, a job id, an exit status): standard library only, so that the
Slurm batch script's requeue policy (runs/requeue_policy.py, run by the cluster's own python3) can read one too."""

from __future__ import annotations


def count(text: str, digits: int = 18) -> int | None:
    """ASCII digits only, at most `digits` of them; None for anything else ('²' is a digit to str.isdigit() but not
    to int(); 5,000 digits are damage, and more than int() reads)."""
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= digits else None
