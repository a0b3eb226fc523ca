"""`launch report` keeps what it needs of a log's iteration lines in memory that does not grow with their number
(docs/hostile-input.md, "Measured"): running numbers for the summary, the two exact medians as counts per distinct
value, a bounded sample for the plots. It used to keep every parsed line (about 1.2 KB each)."""

import gc
import json
import random
import statistics
import tracemalloc
from pathlib import Path

import pytest

from launcher.runs import logparse as lp
from launcher.runs import verdict
from launcher.runs.report import (
    runlog_from_logs,
    series_from_metrics,
    series_from_runlog,
)
from launcher.runs.verdict import Median, RunLog, Thinned

FIXTURES = Path(__file__).parents[1] / "fixtures" / "logs"


def test_thinned_keeps_all_below_its_cap_then_an_even_spread_and_always_the_last():
    small: Thinned[int] = Thinned(8)
    for i in range(7):
        small.add(i)
    assert small.items() == list(range(7))
    for n in (8, 9, 100, 1001, 4096, 65537):
        thinned: Thinned[int] = Thinned(64)
        for i in range(n):
            thinned.add(i)
        kept = thinned.items()
        assert kept[0] == 0 and kept[-1] == n - 1 and kept == sorted(set(kept))
        assert min(n, 32) <= len(kept) <= 65  # all, or between half the cap and the cap, and the last item
        steps = {b - a for a, b in zip(kept[:-2], kept[1:-1], strict=True)}
        assert steps == {thinned.stride}  # evenly spread (the last item may come sooner)


@pytest.mark.parametrize(("max_distinct", "sort_chunk"), [(Median.MAX_DISTINCT, Median.SORT_CHUNK), (3, 4), (3, 1)])
def test_median_is_statistics_median_to_the_bit(max_distinct, sort_chunk, monkeypatch):
    """Counts per distinct value, or (past MAX_DISTINCT of them) the numbers sorted in chunks and merged: the same
    median, -0.0 included."""
    monkeypatch.setattr(Median, "MAX_DISTINCT", max_distinct)
    monkeypatch.setattr(Median, "SORT_CHUNK", sort_chunk)
    rng = random.Random(24)
    pool = [0.0, -0.0, 19.4, 19.5, 20.0, 1e-9, 18912.4, -1.0]
    for _ in range(500):
        numbers = [rng.choice(pool) if rng.random() < 0.8 else rng.uniform(0, 40) for _ in range(rng.randrange(1, 40))]
        median = Median()
        for number in numbers:
            median.add(number)
        assert repr(median.median()) == repr(statistics.median(numbers)), numbers
    assert not Median()
    with pytest.raises(statistics.StatisticsError):
        Median().median()


def iteration_events(n: int, train_iters: int, restart_every: int = 0):
    """n lines as parse_lines gives them (log_interval 1); with restart_every, a resume from a checkpoint
    restart_every // 2 iterations back every restart_every lines."""
    iteration = 0
    for index in range(n):
        iteration += 1
        if restart_every and index and index % restart_every == 0:
            iteration -= restart_every // 2
        yield lp.IterationLine(
            iteration=iteration, train_iters=train_iters, elapsed_ms=19.0 + index % 7, consumed_samples=8 * iteration,
            tflops_per_gpu=0.1 + index % 3, learning_rate=1e-3, global_batch_size=8,
            losses={"lm loss": 5.0 - iteration / train_iters}, loss_scale=1.0, grad_norm=0.5,
            skipped_iterations=(index + 1) % 2, nan_iterations=0)


def retained_bytes(n: int) -> tuple[int, RunLog]:
    """What a RunLog fed n iteration lines holds on to (traced memory once the feeding is done)."""
    gc.collect()
    tracemalloc.start()
    try:
        runlog = RunLog(seq_length=64)
        runlog.start_attempt()
        for event in iteration_events(n, n, restart_every=1000):
            runlog.feed(event)
        gc.collect()
        return tracemalloc.get_traced_memory()[0], runlog
    finally:
        tracemalloc.stop()


def test_runlog_memory_does_not_grow_with_the_number_of_iteration_lines(monkeypatch):
    monkeypatch.setattr(verdict, "PLOT_POINTS", 256)  # a small sample, so that its size does not hide a trend
    monkeypatch.setattr(verdict, "PLOT_RESTARTS", 16)
    small, _ = retained_bytes(5_000)
    large, runlog = retained_bytes(50_000)
    per_line = (large - small) / 45_000
    # nothing per line (the old code kept the lines: 560 bytes each here)
    assert per_line < 2, f"{per_line:.1f} bytes retained per iteration line"
    assert large < 500_000
    series = series_from_runlog(runlog)
    assert len(series.iterations) <= 257 and series.iterations[-1] == runlog.last_line.iteration
    assert len(series.loss) == len(series.tokens_per_s) == len(series.attempts) == len(series.iterations)
    assert len(series.restarts) <= 17 and runlog.restarts.seen == 49
    summary = runlog.summary()
    assert summary.attempts == 50 and summary.last_iteration == 50_000 - 49 * 500
    assert summary.steady_ms_per_iter == 22.0 and summary.steady_tflops_per_gpu == pytest.approx(1.1)
    # 1 skipped on every other line, the first line of each attempt among them; its second repeats it: less 50
    assert summary.skipped_iterations == 25_000 - 50


def test_a_long_log_gives_the_same_summary_and_a_bounded_plot(tmp_path, monkeypatch):
    """An 8,000-line log: the summary as the lines say, the plots get at most PLOT_POINTS of them and the last."""
    monkeypatch.setattr(verdict, "PLOT_POINTS", 512)
    text = (FIXTURES / "toy_fp32_1gpu.log").read_text().splitlines(keepends=True)
    first = next(i for i, line in enumerate(text) if "iteration        1/" in line)
    template = text[first]
    n = 8_000
    with (tmp_path / "long.log").open("w") as out:
        out.writelines(text[:first])
        for it in range(1, n + 1):
            out.write(template.replace("iteration        1/     100", f"iteration {it:>8}/{n:>8}")
                      .replace("18912.4", "18912.4" if it == 1 else f"{19 + it % 5}.0")
                      .replace("4.831200E+00", f"{5 - it / n:.6E}"))
        out.write(f"  successfully saved checkpoint from iteration {n:>7} to /runs/ckpt [ t 1/1, p 1/1 ]\n")
        out.write("[after training is done] datetime: 2026-11-29 16:02:35.013381 \n")
    tracemalloc.start()
    try:
        runlog = runlog_from_logs([tmp_path / "long.log"], 64)
        series = series_from_runlog(runlog)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3_000_000, f"peak {peak:,} bytes"  # the old line objects alone: about 10 MB
    summary = runlog.summary()
    assert summary.outcome == "success" and summary.last_iteration == n and summary.final_loss == pytest.approx(4.0)
    assert summary.steady_ms_per_iter == 21.0
    assert 256 <= len(series.iterations) <= 513
    assert series.iterations[0] == 1 and series.iterations[-1] == n and series.loss[-1] == pytest.approx(4.0)
    assert series.warmup[:2] == [True, False] and not any(series.warmup[2:])


def test_a_long_metrics_file_is_plotted_from_a_bounded_sample(tmp_path, monkeypatch):
    """A run directory whose logs are gone is plotted from metrics.jsonl: read as it goes, thinned the same way."""
    monkeypatch.setattr(verdict, "PLOT_POINTS", 256)
    path = tmp_path / "metrics.jsonl"
    with path.open("w") as out:
        for index in range(20_000):
            attempt = 1 + index // 7_000  # restarts at records 7,000 and 14,000
            out.write(json.dumps({"kind": "iteration", "attempt": attempt, "iteration": index + 1 - 100 * (attempt - 1),
                                  "loss": 5.0, "warmup": index % 7_000 < 2}) + "\n")
            if index % 1000 == 0:
                out.write(json.dumps({"kind": "memory", "rank": 0}) + "\n")
    series = series_from_metrics(path)
    assert len(series.iterations) <= 257
    assert series.iterations[0] == 1 and series.iterations[-1] == 20_000 - 200
    assert series.restarts == [7_001 - 100, 14_001 - 200]
    assert set(series.attempts) == {1, 2, 3} and series.warmup[0]


def test_a_hostile_argument_dump_is_not_kept():
    """Only the settings the verdict reads are kept of the argument dump: a "dump" of 50,000 names costs nothing."""
    runlog = RunLog()
    runlog.feed_attempt(["------------------------ arguments ------------------------",
                         *(f"  name_{i} ........................ {i}" for i in range(50_000)),
                         "  seq_length ...................... 64", "  save ............................ /ckpt",
                         "-------------------- end of arguments ---------------------"])
    assert runlog.arguments == {"seq_length": "64", "save": "/ckpt"}


# -- hostile logs: bounded, never an internal error, never a success that was not seen --------------------------------

def _run_dir(tmp_path: Path) -> Path:
    from launcher.runs.rundir import write_run_dir

    return write_run_dir(tmp_path / "runs" / "toy-20261130T100000Z", preset={"name": "toy"}, argv=["x"], env={},
                         manifest={"preset": "toy", "created": "2026-11-30", "attempts": [{"started": "2026-11-30"}]})


def _report(run_dir: Path):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "launcher", "report", str(run_dir)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}, timeout=60,
                          check=False)


ITERATION = (" [2026-11-29 18:48:21.579751] iteration {it}/{total} | consumed samples: 32 | elapsed time per iteration "
             "(ms): 5.0 | lm loss: 1.0E+01 | number of skipped iterations:   0 | number of nan iterations:   0 |\n")


def test_report_on_iteration_numbers_of_any_length_and_odd_log_names_is_no_internal_error(tmp_path):
    """One run directory holding every case (a report renders plots: one call, not one per case)."""
    run_dir = _run_dir(tmp_path)
    cases = [("9" * 4000, "10"), ("1", "9" * 310), ("9" * 310, "9" * 310), ("٣", "10"), ("2", "10")]
    for number, (it, total) in enumerate(cases, 1):
        (run_dir / "logs" / f"attempt-{number}.log").write_text(ITERATION.format(it=it, total=total))
    for name in ("attempt-².log", "attempt-٣.log", "attempt-" + "9" * 200 + ".log", "attempt-é.log"):
        (run_dir / "logs" / name).write_text(ITERATION.format(it=3, total=10))
    done = _report(run_dir)
    assert done.returncode in (0, 1, 2) and "internal error" not in done.stderr and "Traceback" not in done.stderr


def test_report_on_a_2_gb_log_without_a_newline_answers_at_once(tmp_path):
    """Read from its last GiB (a run's end is at the end of its log), which holds no iteration line."""
    import time

    run_dir = _run_dir(tmp_path)
    with open(run_dir / "logs" / "attempt-1.log", "wb") as handle:
        handle.truncate(2 * 1024**3)  # sparse: no disk used
    started = time.monotonic()
    done = _report(run_dir)
    assert done.returncode == 2 and "no Megatron iteration lines" in done.stderr and "hint:" in done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 30


def _slurm_iteration(n: int, total: int) -> str:
    return (f" [2026-12-01 10:00:00.000000] iteration {n:8d}/{total:8d} | consumed samples: {n * 8:12d} | "
            f"elapsed time per iteration (ms): 300.0 | learning rate: 1.0E-04 | global batch size:     8 | "
            f"lm loss: {10.0 / n:.6E} | loss scale: 1.0 | number of skipped iterations:   0 | "
            f"number of nan iterations:   0 |\n")


def test_a_log_over_the_bound_is_reported_from_its_tail_and_the_output_says_the_head_was_skipped(
        tmp_path, monkeypatch, capsys):
    """As the requeue policy reads it (runs/tail_log.py): the last MAX_LOG_BYTES, not a refusal."""
    from launcher.cli import cmd_report
    from launcher.runs import report

    monkeypatch.setattr(report, "MAX_LOG_BYTES", 64 << 10)
    log = tmp_path / "long.log"
    log.write_text("".join(_slurm_iteration(n, 3000) for n in range(1, 3001)))
    assert log.stat().st_size > 4 * report.MAX_LOG_BYTES
    made = report.make_report([log], tmp_path / "plots")
    assert made.summary.last_iteration == 3000 and made.summary.outcome == "success"
    assert len(made.skipped) == 1 and "bytes skipped" in made.skipped[0] and str(log) in made.skipped[0]
    skipped = int(made.skipped[0].split("its first ")[1].split(" bytes")[0].replace(",", ""))
    assert log.stat().st_size - report.MAX_LOG_BYTES <= skipped < log.stat().st_size - report.MAX_LOG_BYTES + 300
    assert cmd_report([str(log), "--output-dir", str(tmp_path / "plots")]) == 0
    out = capsys.readouterr().out
    assert "skipped:            " in out and "bytes skipped (over the 65,536-byte bound)" in out
    small = tmp_path / "small.log"
    small.write_text(_slurm_iteration(1, 1))
    assert report.make_report([small], tmp_path / "plots").skipped == []


def test_a_slurm_log_over_the_bound_keeps_its_attempts_and_the_failure_at_its_end(tmp_path, monkeypatch):
    """The tail is opened by the attempt the cut runs through: its lines, and the job's standard error's, keep
    their attempt, and the failure at the end is classified as the requeue policy classifies it."""
    from launcher.runs import report
    from launcher.runs.rundir import write_run_dir

    monkeypatch.setattr(report, "MAX_LOG_BYTES", 64 << 10)
    run_dir = write_run_dir(tmp_path / "runs" / "345m-20261201T100000Z", preset={"name": "345m", "megatron": {}},
                            manifest={"checkpoint_dir": str(tmp_path / "ckpt")}, argv=["sbatch", "job.sbatch"],
                            env={})
    monkeypatch.setenv("PATH", str(tmp_path / "no-sacct"))  # the attempts' states from the log alone
    (run_dir / "slurm-7.out").write_text(
        "megatron-launch: job 7 attempt 1 on n1\n" + _slurm_iteration(1, 3000)
        + "megatron-launch: attempt 1 ended: training failed with exit status 1; requeued\n"
        "megatron-launch: job 7 attempt 2 on n1\n" + "".join(_slurm_iteration(n, 3000) for n in range(2, 1500)))
    (run_dir / "slurm-7.err").write_text(
        "megatron-launch: job 7 attempt 1 on n1\n" + "noise\n" * 20_000
        + "megatron-launch: job 7 attempt 2 on n1\n" + "x\n" * 40_000
        + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    made = report.make_report([run_dir], tmp_path / "plots")
    assert made.attempts == ["attempt 2 (job 7): no end recorded (running, or cut off)"]
    assert made.summary.last_iteration == 1499
    assert made.failures[-1]["reason"] == "CUDA out of memory"
    assert [note.split(":")[0] for note in made.skipped] == [str(run_dir / "slurm-7.out"),
                                                              str(run_dir / "slurm-7.err")]


def test_a_line_the_monitor_fails_to_read_never_makes_a_success(tmp_path, monkeypatch):
    import io

    from launcher.runs.monitor import Monitor

    monitor = Monitor(tmp_path, out=io.StringIO(), tty=False)
    lines = (FIXTURES / "toy_fp32_1gpu.log").read_text().splitlines()
    for line in lines[:5]:
        monitor.feed(line)

    def broken(text: str) -> None:
        raise OverflowError("int too large to convert to float")

    monkeypatch.setattr(monitor, "_read", broken)
    monitor.feed(lines[5])  # not raised: training goes on
    monkeypatch.undo()
    for line in lines[6:]:
        monitor.feed(line)
    summary = monitor.close(exit_code=0)
    assert summary.outcome == "failed" and any("could not read the log line" in r for r in summary.reasons)


def test_a_run_the_launcher_stopped_is_never_a_success(tmp_path):
    import io

    from launcher.runs.monitor import Monitor

    monitor = Monitor(tmp_path, out=io.StringIO(), tty=False)
    for line in (FIXTURES / "toy_fp32_1gpu.log").read_text().splitlines():
        monitor.feed(line)
    assert monitor.close(exit_code=None).outcome == "failed"


def test_a_310_digit_iteration_line_is_not_progress(tmp_path):
    import io

    from launcher.runs.monitor import Monitor

    monitor = Monitor(tmp_path, out=io.StringIO(), tty=False)
    monitor.feed(ITERATION.format(it="9" * 310, total="9" * 310))
    assert monitor.close(exit_code=0).outcome == "failed"


def test_a_full_disk_never_leaves_half_a_metrics_line(tmp_path, monkeypatch):
    import errno
    import io
    import os

    from launcher.runs import monitor as monitor_module
    from launcher.runs.monitor import Monitor

    monitor = Monitor(tmp_path, out=io.StringIO(), tty=False)
    lines = (FIXTURES / "toy_fp32_1gpu.log").read_text().splitlines()
    fed = 0
    while not (tmp_path / "metrics.jsonl").stat().st_size:
        monitor.feed(lines[fed])
        fed += 1
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:
        if len(data) > 8:
            return real_write(fd, data[:len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(monitor_module.os, "write", half_then_full)
    with pytest.raises(OSError):
        for line in lines[fed:]:
            monitor.feed(line)
    monkeypatch.undo()
    text = (tmp_path / "metrics.jsonl").read_text()
    assert text.endswith("\n") and all(json.loads(line) for line in text.splitlines())


_LONG = 60_000  # under logparse.MAX_LINE: a line this long is still read
HOSTILE_LINES = {
    "an iteration field without a colon": " iteration 60/ 100 | lm loss: 2.0 | " + "x" * _LONG,
    "an iteration field of spaces": " iteration 1/ 2 |" + " " * _LONG + "x",
    "a validation field without its value": "validation loss at iteration 5 |" + " a" * (_LONG // 2),
    "a loaded-checkpoint line repeating its words": "successfully loaded checkpoint from x [ t " * (_LONG // 42),
    "a loaded-checkpoint line of many [ t ]": "successfully loaded checkpoint from x" + " [ t ]" * (_LONG // 6),
    "NCCL WARN repeated": "NCCL WARN " * (_LONG // 10),
    "ProcessGroupNCCL repeated": "ProcessGroupNCCL " * (_LONG // 17),
}


@pytest.mark.parametrize("line", HOSTILE_LINES.values(), ids=HOSTILE_LINES.keys())
def test_a_long_hostile_line_is_read_in_time_linear_in_its_length(line):
    """Each pattern over a log line is linear in its length: one that backtracks from each repetition of its
    first words (`A.*B`, a lazy field) took seconds to minutes a line (report, the monitor, the requeue policy)."""
    import time

    from launcher.runs import triage

    started = time.process_time()
    lp.LogParser().feed(line)
    triage.AttemptReader().feed(line)
    assert time.process_time() - started < 1.0


@pytest.mark.parametrize("folder, name", [("logs", "attempt-{}.log"), (".", "slurm-{}.out"),
                                          ("logs/k8s", "node-0-attempt-{}.log")])
def test_a_run_folder_of_more_files_than_any_run_writes_is_refused_not_listed_whole(tmp_path, capsys, monkeypatch,
                                                                                      folder, name):
    """A run directory's folders are listed within a bound (runs/entries.py, MAX_ENTRIES; 50 here for speed):
    millions of attempt logs, Slurm logs or pod logs are a clear refusal, not minutes of opening each."""
    from launcher.cli import main
    from launcher.runs import entries

    monkeypatch.setattr(entries, "MAX_ENTRIES", 50)
    run_dir = _run_dir(tmp_path)
    (run_dir / folder).mkdir(parents=True, exist_ok=True)
    for number in range(1, 52):
        (run_dir / folder / name.format(number)).write_text(ITERATION.format(it=number, total=100))
    assert main(["report", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "holds more than 50 entries" in err and "Traceback" not in err
    assert "hint: move away what does not belong there" in err
