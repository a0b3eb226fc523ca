"""Each logged loss as the mean over its own logging window, undoing Megatron's carry-over after a start.

Megatron prints the mean loss since the previous printed line, except after a (re)start: the first iteration
of every process is printed but its sums are not reset (training.py:2376-2377, `should_reset = not
is_first_iteration`), so the next line averages that first iteration in once more. With log_interval 1 the
second line after every start is the mean of two iterations: a run loaded at iteration 5 prints iteration 7 as
(loss 6 + loss 7) / 2, while the uninterrupted run prints loss 7 alone (docs/loss-after-resume.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from launcher.runs.logparse import IterationLine


def window_losses(lines: Sequence[IterationLine], log_interval: int, key: str = "lm loss") -> list[float | None]:
    """The loss of each line of ONE process start (an attempt), over that line's own window of iterations.

    Only the second line changes, and only where the first fell on a log_interval boundary (then the second's
    window holds one iteration of the first's): its sum less the first iteration's loss, over one iteration
    fewer. Skipped iterations add nothing to Megatron's sums, so they are left out of the counts."""
    values = [line.losses.get(key) for line in lines]
    if len(lines) < 2 or log_interval < 1:
        return values
    first, second = lines[0], lines[1]
    carried = first.iteration % log_interval == 0 and not first.skipped_iterations
    first_loss, second_loss = values[0], values[1]
    if not carried or first_loss is None or second_loss is None:
        return values
    counted = second.iteration - first.iteration + 1 - (second.skipped_iterations or 0)
    if counted > 1:
        values[1] = (counted * second_loss - first_loss) / (counted - 1)
    return values
