"""A process start that trained 0 iterations is never summarised as plain success.

Megatron exits 0 when its training loop never runs (training.py train(): `while iteration < args.train_iters`):
a checkpoint loaded at or past train_iters, no training data, every iteration in iterations_to_skip. Its log then
holds the checkpoint load and "after training is done", and no iteration line. The starts here are the recorded
H200 resume (tests/fixtures/logs/h200_345m_resumed.log: loads iteration 21, trains to 60 of 60) cut before its first
step, with the iteration it loads changed."""

import io
import re

from launcher.runs.monitor import Monitor
from launcher.runs.verdict import RunLog

RESUMED = "h200_345m_resumed.log"


def idle_start(log_fixture, loaded: int, sample_based: bool = False) -> list[str]:
    """The resumed run's start up to its first step, loading `loaded`, then the end of training and nothing else.
    `sample_based`: its argument dump as a train_samples job prints it (train_iters None, 1920 samples of 32)."""
    lines = log_fixture(RESUMED)
    first_step = next(i for i, line in enumerate(lines) if "[before the start of training step]" in line)
    start = [line.replace("] at iteration 21", f"] at iteration {loaded}") for line in lines[:first_step + 1]]
    if sample_based:
        start = [re.sub(r"^(  train_iters \.+ )60$", r"\g<1>None", line) for line in start]
        start = [re.sub(r"^(  train_samples \.+ )None$", r"\g<1>1920", line) for line in start]
        assert sum(line.endswith((" None", " 1920")) and line.startswith(("  train_iters ", "  train_samples "))
                   for line in start) == 2
    return [*start, "[after training is done] datetime: 2026-11-29 18:57:35.110592 "]


def summary_of(*attempts: list[str]):
    runlog = RunLog()
    for lines in attempts:
        runlog.feed_attempt(lines)
    return runlog.summary(exit_code=0)


def test_a_start_whose_checkpoint_is_at_train_iters_says_it_trained_nothing(log_fixture):
    summary = summary_of(log_fixture(RESUMED), idle_start(log_fixture, 60))
    # the run reached its end in the first attempt; the second (a chained job after the end) trained nothing
    assert summary.outcome == "success"
    assert summary.reasons == ["the last attempt: 0 iterations trained: the checkpoint it loaded is at iteration 60 "
                               "and train_iters is 60, so nothing was left to train (raise train_iters to train "
                               "further)"]
    assert summary.render().splitlines()[0].startswith("outcome:            success (the last attempt: 0 iterations")


def test_a_start_that_trained_nothing_before_its_train_iters_fails(log_fixture):
    # loaded 40 of 60 and the loop ran no step (no training data, or every iteration skipped): not a success,
    # although the earlier attempt's lines reached 60 and Megatron printed "after training is done"
    summary = summary_of(log_fixture(RESUMED), idle_start(log_fixture, 40))
    assert summary.outcome == "failed"
    assert summary.reasons == ["the last attempt: 0 iterations trained after loading the checkpoint at iteration 40: "
                               "no iteration was logged"]


def test_a_start_that_trained_is_plain_success(log_fixture):
    summary = summary_of(idle_start(log_fixture, 60)[:-1], log_fixture(RESUMED))
    assert summary.outcome == "success" and summary.reasons == []


def test_a_single_start_with_nothing_left_says_why_and_not_a_missing_save(log_fixture):
    summary = summary_of(idle_start(log_fixture, 60))
    assert summary.outcome == "failed"
    assert summary.reasons == ["0 iterations trained: the checkpoint it loaded is at iteration 60 and train_iters is "
                               "60, so nothing was left to train (raise train_iters to train further)"]


def test_a_sample_based_start_counts_its_iterations_from_the_samples(log_fixture):
    # Megatron prints train_iters None for a train_samples job: 1920 // 32 = 60 iterations (update_train_iters)
    summary = summary_of(log_fixture(RESUMED), idle_start(log_fixture, 60, sample_based=True))
    assert summary.outcome == "success"
    assert "train_iters is 60, so nothing was left" in summary.reasons[0]
    summary = summary_of(log_fixture(RESUMED), idle_start(log_fixture, 59, sample_based=True))
    assert summary.outcome == "failed"


def test_a_resumed_run_directory_records_the_idle_attempt(tmp_path, log_fixture):
    """Through the monitor a launch here runs: summary.json of the second attempt says it trained nothing."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "attempt-1.log").write_text("\n".join(log_fixture(RESUMED)) + "\n")
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("60\n")
    monitor = Monitor(tmp_path, checkpoint_dir=checkpoints, out=io.StringIO(), tty=False)
    for line in idle_start(log_fixture, 40):
        monitor.feed(line + "\n")
    summary = monitor.close(exit_code=0)
    assert summary.outcome == "failed" and "0 iterations trained" in summary.reasons[-1]
    assert "0 iterations trained" in (tmp_path / "summary.json").read_text()


def test_launch_report_says_the_attempt_trained_nothing(tmp_path, log_fixture, launch):
    resumed, idle = tmp_path / "attempt-1.log", tmp_path / "attempt-2.log"
    resumed.write_text("\n".join(log_fixture(RESUMED)) + "\n")
    idle.write_text("\n".join(idle_start(log_fixture, 60)) + "\n")
    code, out, err = launch("report", str(resumed), str(idle))
    assert code == 0, err
    assert out.splitlines()[0].startswith("outcome:            success (the last attempt: 0 iterations trained")
    code, out, err = launch("report", str(idle))
    assert code == 2 and "0 iterations trained: the checkpoint it loaded is at iteration 60" in err, err
