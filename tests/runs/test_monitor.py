"""The monitor and the end-of-run verdict, fed with the log fixtures line by line."""

import io
import json

import pytest

from launcher.runs import logparse as lp
from launcher.runs.monitor import Monitor
from launcher.runs.verdict import RunLog


def summarize(lines, **kwargs):
    runlog = RunLog()
    for event in lp.parse_lines(lines):
        runlog.feed(event)
    return runlog.summary(**kwargs)


def feed_all(monitor, lines):
    for line in lines:
        monitor.feed(line + "\n")


def test_metrics_jsonl_and_plain_progress(tmp_path, log_fixture):
    out = io.StringIO()
    monitor = Monitor(tmp_path, out=out, tty=False)
    lines = log_fixture("toy_fp32_1gpu.log")
    feed_all(monitor, lines)
    summary = monitor.close(exit_code=0)

    records = [json.loads(r) for r in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    iterations = [r for r in records if r["kind"] == "iteration"]
    assert [r["iteration"] for r in iterations] == [1, *range(10, 101, 10)]
    assert [r["warmup"] for r in iterations[:3]] == [True, True, False]
    # tokens/s = global batch 8 × seq 64 (from the argument dump) / seconds per iteration
    assert iterations[-1]["tokens_per_s"] == pytest.approx(8 * 64 / 0.0194, rel=1e-3)
    assert {"lr", "grad_norm", "tflops_per_gpu", "skipped_iterations", "nan_iterations"} <= set(iterations[0])
    assert [r["max_allocated_mb"] for r in records if r["kind"] == "memory"] == [58.92, 60.07]

    text = out.getvalue()
    assert "[launch] 100/100 (100%) | loss 4.3120" in text
    first_progress = next(t for t in text.splitlines() if t.startswith("[launch] 1/100"))
    assert first_progress.endswith("ETA ?")  # iteration 1 time is start-up: no honest ETA yet
    assert "outcome:            success" in text
    assert (tmp_path / "logs" / "attempt-1.log").read_text().splitlines() == lines
    assert json.loads((tmp_path / "summary.json").read_text())["outcome"] == "success" == summary.outcome


def test_tty_progress_bar_replaces_iteration_lines(tmp_path, log_fixture):
    out = io.StringIO()
    monitor = Monitor(tmp_path, out=out, tty=True)
    feed_all(monitor, log_fixture("toy_fp32_1gpu.log"))
    monitor.close(exit_code=0)
    text = out.getvalue()
    assert "iteration       50/     100 |" not in text  # shown as the bar instead
    assert "100/100" in text and "loss 4.3120" in text and "\r" in text
    assert "validation loss at iteration 50" in text  # other lines still printed


def test_steady_throughput_excludes_the_first_two_lines(log_fixture):
    summary = summarize(log_fixture("toy_fp32_1gpu.log"))
    assert summary.steady_ms_per_iter == pytest.approx(19.8, abs=0.3)  # not 18912 ms / 1912 ms start-up
    assert summary.final_loss == pytest.approx(4.312)
    assert summary.peak_memory_mb == 60.07 and summary.theoretical_memory_mb == pytest.approx(0.43)
    assert summary.checkpoints_saved == [100]
    assert summary.validation == {"validation lm loss": pytest.approx(4.3301), "test lm loss": pytest.approx(4.3356)}


def test_two_line_attempt_subtracts_the_first_iteration():
    def line(it, ms):
        return lp.IterationLine(iteration=it, train_iters=100, elapsed_ms=ms, global_batch_size=8)
    runlog = RunLog(seq_length=64)
    runlog.feed(line(1, 1000.0))
    runlog.feed(line(10, 118.0))  # 10 iterations averaged, iteration 1 (1000 ms) among them
    assert runlog.steady_ms_per_iter() == pytest.approx((10 * 118.0 - 1000.0) / 9)


def test_fp16_skips_are_not_double_counted(log_fixture):
    summary = summarize(log_fixture("fp16_8gpu_loss_scale_skips.log"))
    # per-line counts 1,4,4,0,0,1,0: the first line (iteration 1) is not reset, so the 4 at iteration 5 repeats it
    assert summary.skipped_iterations == 9
    assert summary.final_loss == pytest.approx(9.67)
    assert summary.outcome == "failed" and "without an exit line" in summary.reasons[0]


def test_nan_run_fails_even_with_exit_code_zero(log_fixture):
    summary = summarize(log_fixture("bf16_2gpu_nan.log"), exit_code=0)
    assert summary.outcome == "failed" and summary.nan_iterations == 3
    assert any("NaN" in reason for reason in summary.reasons)


def test_signal_exit_with_checkpoint_is_stopped(log_fixture):
    summary = summarize(log_fixture("toy_resume_sigterm.log"), exit_code=0)
    assert summary.outcome == "stopped" and summary.checkpoints_saved == [83]


def test_success_needs_the_tracker_file_to_follow_the_last_save(tmp_path, log_fixture):
    lines = log_fixture("toy_fp32_1gpu.log")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100\n")
    assert summarize(lines, checkpoint_dir=tmp_path).outcome == "success"
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("50\n")  # async save never finalised
    behind = summarize(lines, checkpoint_dir=tmp_path)
    assert behind.outcome == "failed" and "latest_checkpointed_iteration.txt" in behind.reasons[0]
    assert summarize(lines, exit_code=1).outcome == "failed"
    (tmp_path / "latest_checkpointed_iteration.txt").unlink()  # the log says saved, the disk disagrees
    missing = summarize(lines, checkpoint_dir=tmp_path)
    assert missing.outcome == "failed" and "does not exist" in missing.reasons[0]
    # a checkpoint directory not visible from here (another machine's disk) is not held against the run
    assert summarize(lines, checkpoint_dir=tmp_path / "elsewhere").outcome == "success"


def test_end_of_training_without_the_final_save_fails(log_fixture):
    lines = [line for line in log_fixture("toy_fp32_1gpu.log") if "ing checkpoint" not in line and "saved" not in line]
    summary = summarize(lines)
    assert summary.outcome == "failed" and "no successful checkpoint save" in summary.reasons[0]


def test_traceback_fails_the_run(log_fixture):
    lines = log_fixture("toy_fp32_1gpu.log")[:60] + [
        "[rank0]: Traceback (most recent call last):",
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ]
    summary = summarize(lines, exit_code=0)
    assert summary.outcome == "failed" and "OutOfMemoryError: CUDA out of memory" in summary.reasons[0]


def test_a_resume_is_a_new_attempt_in_the_same_run_dir(tmp_path, log_fixture):
    first = Monitor(tmp_path, out=io.StringIO(), tty=False)
    feed_all(first, log_fixture("toy_truncated.log"))
    first.close(exit_code=1)
    second = Monitor(tmp_path, out=io.StringIO(), tty=False)
    feed_all(second, log_fixture("toy_resume_sigterm.log"))
    second.close(exit_code=0)
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["attempt-1.log", "attempt-2.log"]
    attempts = {json.loads(r).get("attempt") for r in (tmp_path / "metrics.jsonl").read_text().splitlines()}
    assert attempts == {1, 2, None}  # each attempt's records carry its number; memory records carry none


def test_a_logged_exception_without_traceback_is_not_a_crash(log_fixture):
    lines = log_fixture("toy_fp32_1gpu.log")
    lines.insert(40, "ValueError: optional fused kernel unavailable, using the fallback")
    assert summarize(lines, exit_code=0).outcome == "success"


def test_resumed_run_summary_covers_every_attempt(tmp_path, log_fixture):
    """The H200 SIGTERM + resume pair: summary.json after the resume speaks of the whole run."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "attempt-1.log").write_text("\n".join(log_fixture("h200_345m_sigterm.log")) + "\n")
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("60\n")
    monitor = Monitor(tmp_path, checkpoint_dir=checkpoints, out=io.StringIO(), tty=False)
    assert monitor.log_path.name == "attempt-2.log"
    feed_all(monitor, log_fixture("h200_345m_resumed.log"))
    summary = monitor.close(exit_code=0)
    # attempt 1's torchrun SignalException is that attempt's; the run as a whole reached its end
    assert summary.outcome == "success", summary.reasons
    assert summary.attempts == 2 and summary.checkpoints_saved == [21, 60]
    records = [json.loads(r) for r in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {r["attempt"] for r in records if r["kind"] == "iteration"} == {2}  # attempt 1's were written then


def test_error_a_resume_got_past_does_not_fail_the_run(tmp_path, log_fixture):
    crashed = [*log_fixture("toy_fp32_1gpu.log")[:60], "Traceback (most recent call last):",
               "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    runlog = RunLog()
    runlog.start_attempt()
    for event in lp.parse_lines(crashed):
        runlog.feed(event)
    assert runlog.summary(exit_code=1).outcome == "failed"
    runlog.start_attempt()
    for event in lp.parse_lines(log_fixture("toy_fp32_1gpu.log")):
        runlog.feed(event)
    assert runlog.summary(exit_code=0).outcome == "success"


def _shown_on_a_terminal(run_dir, lines, columns: int) -> str:
    """What a pseudo-terminal of `columns` columns (0: one nobody sized) shows of a run's output."""
    import fcntl
    import os
    import pty
    import struct
    import termios
    import threading

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    shown: list[bytes] = []

    def read() -> None:  # drain as it is written: a full pty buffer would block the monitor
        while True:
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            shown.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    with os.fdopen(follower, "w", buffering=1) as terminal:
        monitor = Monitor(run_dir, out=terminal)
        assert monitor.tty
        feed_all(monitor, lines)
        monitor.close(exit_code=0)
    reader.join(5)
    os.close(leader)
    return b"".join(shown).decode("utf-8", errors="replace")


@pytest.mark.parametrize("columns", [120, 0])
def test_progress_line_follows_whether_the_output_is_a_terminal(tmp_path, log_fixture, columns):
    """Not told, the monitor asks its output: a terminal gets the one live line (iteration, loss, tokens/s,
    ETA, redrawn with \\r), also one that reports no width; a pipe or file gets plain [launch] lines. (A check that
    the feature works as the README says; it passes on the main this branch started from.)"""
    pytest.importorskip("tqdm")
    lines = log_fixture("toy_fp32_1gpu.log")
    plain = io.StringIO()
    monitor = Monitor(tmp_path / "plain", out=plain)
    feed_all(monitor, lines)
    monitor.close(exit_code=0)
    assert "\r" not in plain.getvalue() and "[launch] 100/100 (100%) | loss 4.3120" in plain.getvalue()

    text = _shown_on_a_terminal(tmp_path / "tty", lines, columns)
    bar = [part for part in text.split("\r") if "100/100 [" in part]
    assert bar and "loss 4.3120 | " in bar[-1] and " tok/s" in bar[-1], text[-2000:]
    assert "[launch] 100/100" not in text  # the plain line is for pipes only


def test_the_progress_eta_works_out_its_median_at_most_once_a_second(tmp_path, monkeypatch):
    # a log of many short lines, each with its own time, must stay linear (the median is over every line so far)
    from launcher.runs import monitor as monitor_module

    clock = iter(range(10**6))
    monkeypatch.setattr(monitor_module.time, "monotonic", lambda: next(clock) * 0.001)  # a line every 1 ms
    monitor = Monitor(tmp_path, out=io.StringIO(), tty=False)
    calls = []
    real = monitor.runlog.steady_ms_per_iter
    monkeypatch.setattr(monitor.runlog, "steady_ms_per_iter", lambda: calls.append(1) or real())
    for i in range(1, 3001):
        monitor.feed(f" [2026-11-29 16:03:09.153432] iteration {i:>8}/    3000 | consumed samples: {8 * i:>12} | "
                     f"elapsed time per iteration (ms): {1000 + i / 7:.4f} | learning rate: 9.755283E-04 | "
                     "global batch size:     8 | lm loss: 4.720100E+00 | loss scale: 1.0 | grad norm: 0.379 | "
                     "number of skipped iterations:   0 | number of nan iterations:   0 |\n")
    assert monitor.runlog.line_count == 3000
    assert 3 <= len(calls) <= 10  # the first lines (no steady time yet), then once per simulated second
