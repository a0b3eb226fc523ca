"""Megatron's second logged loss after a start averages the first iteration in again (training.py:2376-2377);
window_losses takes it back out, so a resumed run's losses compare with the uninterrupted run's line by line.
The numbers are the feature matrix's checkpoint row (docs/benchmarks.md): loaded at 5, Megatron printed
12.214 for iteration 7, the mean of iteration 6's 13.663 and iteration 7's 10.764."""

from __future__ import annotations

import pytest

from launcher.runs.logparse import IterationLine
from launcher.runs.loss_windows import window_losses


def lines(*pairs: tuple[int, float], skipped: dict[int, int] | None = None) -> list[IterationLine]:
    return [IterationLine(iteration, 10, losses={"lm loss": loss}, skipped_iterations=(skipped or {}).get(iteration, 0))
            for iteration, loss in pairs]


def test_the_second_line_after_a_resume_loses_the_first_iteration_it_averaged_in():
    resumed = lines((6, 13.663), (7, 12.2135), (8, 8.592), (9, 8.438), (10, 8.026))
    assert window_losses(resumed, log_interval=1) == pytest.approx([13.663, 10.764, 8.592, 8.438, 8.026])


def test_a_fresh_start_is_corrected_the_same_way():
    assert window_losses(lines((1, 11.0), (2, 10.5)), log_interval=1) == pytest.approx([11.0, 10.0])


def test_with_a_longer_interval_the_window_holds_one_iteration_more_only_when_the_start_was_on_a_boundary():
    # resumed at 99 with log_interval 10: iteration 100 is printed alone, 110 averaged 100..110 (11 iterations)
    on_boundary = lines((100, 5.0), (110, (5.0 + 10 * 4.0) / 11))
    assert window_losses(on_boundary, log_interval=10) == pytest.approx([5.0, 4.0])
    # resumed at 104: 105 printed alone, 110 averages 105..110, which is its own window since 104: unchanged
    within = lines((105, 5.0), (110, 4.2))
    assert window_losses(within, log_interval=10) == [5.0, 4.2]


def test_skipped_iterations_add_nothing_to_megatrons_sums():
    # an fp16 overflow skipped one of iterations 101..110: the mean is over the 10 counted ones (100 included)
    skipped = lines((100, 5.0), (110, (5.0 + 9 * 4.0) / 10), skipped={110: 1})
    assert window_losses(skipped, log_interval=10) == pytest.approx([5.0, 4.0])
    # a skipped first iteration was never added in: nothing to take out
    first_skipped = lines((6, 13.0), (7, 10.0), skipped={6: 1})
    assert window_losses(first_skipped, log_interval=1) == [13.0, 10.0]


def test_lines_without_a_loss_are_left_alone():
    assert window_losses([IterationLine(6, 10), IterationLine(7, 10, losses={"lm loss": 9.0})], 1) == [None, 9.0]
    assert window_losses(lines((6, 1.0)), 1) == [1.0]
