"""An elastic node count (`--nodes MIN-MAX`): the range asked for, and the counts in it the job may start with.

Slurm grants a count in the range when the job starts (and again at each requeue); Megatron then derives the data
parallel size and the number of micro batches per step from the world size, keeping the global batch. Only the
counts at which every check holds are valid (pipeline/elastic.py judges each); the batch script refuses the others
at job start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.errors import UserError

MAX_COUNTS = 1024  # node counts judged for one range: bounded work on any input
_RANGE = re.compile(r"(\d{1,7})\s*[-:]\s*(\d{1,7})")


@dataclass(frozen=True)
class NodeRange:
    low: int
    high: int

    def __str__(self) -> str:
        return f"{self.low}-{self.high}"


def parse_nodes(text: str) -> int | NodeRange:
    """`N` or `MIN-MAX` (also `MIN:MAX`, torchrun's spelling); MIN = MAX is the plain count."""
    text = text.strip()
    if text.isascii() and text.isdigit() and len(text) <= 7:
        count = int(text)
        if count < 1:
            raise UserError(f"--nodes must be at least 1, got {count}", "for example --nodes 2, or --nodes 2-4")
        return count
    match = _RANGE.fullmatch(text)
    if not match:
        raise UserError(f"--nodes takes a count or a range MIN-MAX, got {text!r}", "for example --nodes 2-4")
    low, high = int(match.group(1)), int(match.group(2))
    if low < 1 or high < low:
        raise UserError(f"--nodes {text}: the range must go from at least 1 up (MIN <= MAX)",
                        f"for example --nodes {max(1, min(low, high))}-{max(1, low, high)}")
    if high - low + 1 > MAX_COUNTS:
        raise UserError(f"--nodes {text} spans {high - low + 1:,} node counts; at most {MAX_COUNTS:,} are judged",
                        f"narrow the range, e.g. --nodes {low}-{low + MAX_COUNTS - 1}")
    return low if low == high else NodeRange(low, high)


@dataclass(frozen=True)
class NodeCount:
    """One node count the job may start with, and the layout Megatron derives there."""

    nodes: int
    world_size: int
    dp: int
    num_microbatches: int

    def describe(self, global_batch: int, micro_batch: int) -> str:
        return (f"{self.nodes} node(s): world {self.world_size}, DP {self.dp}, {self.num_microbatches} micro "
                f"batch(es) of {micro_batch} per step (global batch {global_batch} kept)")


@dataclass(frozen=True)
class ElasticNodes:
    """What `--nodes MIN-MAX` resolved to: the counts that work and why the others do not."""

    requested: NodeRange
    valid: tuple[NodeCount, ...]  # ascending
    refused: tuple[tuple[int, str], ...] = ()  # (count, the first reason), ascending

    @property
    def low(self) -> int:
        return self.valid[0].nodes

    @property
    def high(self) -> int:
        return self.valid[-1].nodes

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(c.nodes for c in self.valid)

    @property
    def contiguous(self) -> bool:
        """Every count from the lowest valid one to the highest works (torchrun may form any of them)."""
        return self.counts == tuple(range(self.low, self.high + 1))

    @property
    def slurm_nodes(self) -> str:
        """Slurm's --nodes: the range restricted to its valid ends."""
        return f"{self.low}-{self.high}" if self.low != self.high else str(self.low)

    def summary(self) -> str:
        counts = ", ".join(str(n) for n in self.counts)
        text = f"nodes {self.requested} (elastic): starts with {counts} node(s)"
        if (self.low, self.high) != (self.requested.low, self.requested.high):
            text += f"; the range is restricted to {self.slurm_nodes}"
        return text

    def refusals(self, limit: int = 6) -> list[str]:
        """Why the refused counts do not work, one line each (the first `limit`)."""
        lines = [f"{count} node(s): {why}" for count, why in self.refused[:limit]]
        if len(self.refused) > limit:
            lines.append(f"and {len(self.refused) - limit} more count(s)")
        return lines

    def as_dict(self) -> dict:
        return {"requested": str(self.requested), "slurm_nodes": self.slurm_nodes,
                "valid": [{"nodes": c.nodes, "world_size": c.world_size, "dp": c.dp,
                           "num_microbatches": c.num_microbatches} for c in self.valid],
                "refused": [{"nodes": n, "why": why} for n, why in self.refused]}
