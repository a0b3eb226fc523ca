"""`launch report`: PNG plots and summary from a run directory or from plain (e.g. Slurm) log files."""

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.runs.monitor import Monitor
from launcher.runs.report import make_report
from launcher.runs.rundir import write_run_dir

pytestmark = pytest.mark.matplotlib  # every report here draws its plots

FIXTURES = Path(__file__).parents[1] / "fixtures" / "logs"
ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_valid_png(path: Path) -> None:
    from matplotlib.image import imread

    assert path.read_bytes()[:8] == PNG_MAGIC
    pixels = imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels.std() > 0  # something was drawn


def report_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", "report", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=False)


def new_run_dir(tmp_path: Path, *logs: str) -> Path:
    run_dir = write_run_dir(tmp_path / "runs" / "toy-20261129T160150Z", preset={"name": "toy", "megatron": {
        "seq_length": 64}}, manifest={"checkpoint_dir": str(tmp_path / "runs" / "ckpt")}, argv=["x"], env={})
    for name in logs:
        monitor = Monitor(run_dir, out=io.StringIO(), tty=False)
        for line in (FIXTURES / name).read_text().splitlines():
            monitor.feed(line)
        monitor.close(0)
    return run_dir


def test_plots_from_a_run_directory_with_two_attempts(tmp_path):
    run_dir = new_run_dir(tmp_path, "toy_fp32_1gpu.log", "toy_resume_sigterm.log")
    report = make_report([run_dir])
    assert [p.name for p in report.plots] == ["loss.png", "throughput.png", "lr.png"]
    for plot in report.plots:
        assert plot.parent == run_dir / "plots"
        assert_valid_png(plot)
    # logged every 10 iterations up to 80, then saved at 83 on SIGTERM: it reached 83
    assert report.summary.attempts == 2 and report.summary.last_iteration == 83
    assert json.loads((run_dir / "summary.json").read_text())["attempts"] == 2


def test_cli_on_slurm_style_log_files(tmp_path):
    log = tmp_path / "slurm-4242.out"
    shutil.copy(FIXTURES / "fp16_8gpu_loss_scale_skips.log", log)
    result = report_cli(str(log), "--format", "json", cwd=tmp_path)
    assert result.returncode == 1, result.stderr  # the log ends at iteration 30 of 500: a failed run
    data = json.loads(result.stdout)
    assert data["summary"]["outcome"] == "failed"
    assert data["summary"]["skipped_iterations"] == 9
    assert data["summary"]["steady_tokens_per_s"] == pytest.approx(64 * 1024 / 0.5505, rel=1e-3)
    for plot in data["plots"]:
        assert tmp_path / plot == tmp_path / "plots" / "slurm-4242" / Path(plot).name
        assert_valid_png(tmp_path / plot)


def test_cli_text_summary(tmp_path):
    result = report_cli(str(FIXTURES / "toy_fp32_1gpu.log"), "--output-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "outcome:            success" in result.stdout and "final loss:         4.3120" in result.stdout
    assert "plots:" in result.stdout and (tmp_path / "loss.png").exists()


@pytest.mark.parametrize(("target", "message"), [
    ("garbled", "no Megatron iteration lines"),
    ("truncated", "is truncated"),
    ("not-a-run-dir", "is not a run directory"),
    ("missing", "does not exist"),
    ("empty-metrics", "holds no iteration metrics"),
    ("bad-metrics", "is not JSON"),
])
def test_bad_input_exits_2_with_a_message(tmp_path, target, message):
    if target == "garbled":
        path = FIXTURES / "garbled.log"
    elif target == "truncated":
        path = FIXTURES / "toy_truncated.log"
    elif target == "not-a-run-dir":
        path = tmp_path
    elif target == "missing":
        path = tmp_path / "nope.log"
    else:
        path = new_run_dir(tmp_path)
        (path / "metrics.jsonl").write_text("" if target == "empty-metrics" else '{"kind": "iteration", "it\n')
    result = report_cli(str(path), "--output-dir", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_partial_reports_a_truncated_log(tmp_path):
    result = report_cli(str(FIXTURES / "toy_truncated.log"), "--partial", "--output-dir", str(tmp_path))
    assert result.returncode == 1, result.stderr  # reported in full; the run it shows ended without an exit line
    assert "iterations:         40/100" in result.stdout
    assert_valid_png(tmp_path / "loss.png")


def test_summarize_without_plots(tmp_path):
    from launcher.runs.report import summarize

    run_dir = new_run_dir(tmp_path, "toy_fp32_1gpu.log")
    assert summarize(run_dir).last_iteration == 100
    assert not (run_dir / "plots").exists()
    killed = summarize([FIXTURES / "toy_truncated.log"])  # partial accepted: the verdict is what is wanted
    assert killed.outcome == "failed" and killed.last_iteration == 40


def launch_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=False)


def test_peak_memory_counts_the_save_reports_and_iterations_the_saved_one(tmp_path):
    """The shrunk 175b log prints memory before/after save_checkpoint (higher than after iteration 1), and
    logs iteration 1 only, then saves at 3: it reached 3 of 3."""
    result = launch_cli("report", str(FIXTURES / "h200_175b_shrunk_tp2.log"), "--format", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)["summary"]
    assert summary["peak_memory_mb"] == 39341.67
    assert (summary["last_iteration"], summary["train_iters"]) == (3, 3)


def test_plots_of_log_files_go_to_plots_in_the_current_directory(tmp_path):
    result = launch_cli("report", str(FIXTURES / "toy_fp32_1gpu.log"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "plots" / "toy_fp32_1gpu").iterdir()) == [
        "loss.png", "lr.png", "throughput.png"]
    assert not (FIXTURES / "toy_fp32_1gpu-report").exists()


def test_report_on_a_slurm_run_directory_never_submitted(tmp_path):
    made = launch_cli("toy", "--slurm", "--set", f"run_root={tmp_path}", "--megatron-path", str(tmp_path))
    assert made.returncode == 0, made.stderr
    run_dir = Path(made.stdout.strip()).parent
    result = launch_cli("report", str(run_dir))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "Slurm batch script (written) that has not run" in result.stderr
    assert f"sbatch {run_dir}/job.sbatch" in result.stderr and "--resume" not in result.stderr


def test_throughput_plot_separates_attempts_and_names_the_run(tmp_path):
    from launcher.runs.report import PlotInfo, runlog_from_logs, series_from_runlog

    runlog = runlog_from_logs([FIXTURES / "toy_fp32_1gpu.log", FIXTURES / "toy_resume_sigterm.log"], 64)
    series = series_from_runlog(runlog)
    assert series.restarts == [51]  # the resumed attempt starts again after its checkpoint at 50
    assert PlotInfo("toy-20261129T160150Z", "toy").title == "toy-20261129T160150Z"
    assert PlotInfo("slurm-42", "345m", "h200-141gb").title == "slurm-42 (preset 345m)"
    from launcher.runs.report import write_plots

    for plot in write_plots(series, tmp_path, PlotInfo("slurm-42", "345m", "h200-141gb")):
        assert_valid_png(plot)


def _report_without_matplotlib(*args: str) -> subprocess.CompletedProcess:
    hide = ("import sys; sys.modules['matplotlib'] = None; from launcher.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", hide, "report", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=False)


def test_report_without_matplotlib_gives_the_summary_and_says_plots_need_the_extra(tmp_path):
    """matplotlib is the optional [report] extra: without it, the summary still comes, and how to add plots."""
    result = _report_without_matplotlib(str(FIXTURES / "toy_fp32_1gpu.log"), "--output-dir", str(tmp_path))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "outcome:            success" in result.stdout and "final loss:         4.3120" in result.stdout
    plots = next(line for line in result.stdout.splitlines() if line.startswith("plots:"))
    assert plots.startswith("plots:              none (plots need matplotlib, the [report] extra: ")
    assert f"{ROOT}[report]" in plots and list(tmp_path.iterdir()) == []
    as_json = json.loads(_report_without_matplotlib(str(FIXTURES / "toy_fp32_1gpu.log"), "--format", "json",
                                                    "--output-dir", str(tmp_path)).stdout)
    assert as_json["plots"] == [] and as_json["plots_unavailable"].startswith("plots need matplotlib")
    assert as_json["summary"]["final_loss"] == pytest.approx(4.312)


def test_a_failed_runs_report_exits_1(tmp_path):
    result = report_cli(str(FIXTURES / "bf16_2gpu_nan.log"), "--output-dir", str(tmp_path))
    assert result.returncode == 1
    assert result.stdout.startswith("outcome:            failed (result validation failed at iteration 37")


def test_matplotlib_warnings_do_not_reach_the_output(tmp_path):
    """Upstream's simple loop logs no throughput: the empty tokens/s legend makes matplotlib warn (not our
    output, and nothing the user can act on)."""
    result = subprocess.run([sys.executable, "-m", "launcher", "report",
                             str(FIXTURES / "h200_toy_simple_loop_2gpu.log"), "--output-dir", str(tmp_path)],
                            capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0 and result.stderr == "", result.stderr


SUMMARY = {"outcome": "failed", "reasons": ["exit code 1"], "last_iteration": 40, "train_iters": 100,
           "final_loss": 4.5, "steady_ms_per_iter": 19.8, "steady_tokens_per_s": 25858.6, "steady_tflops_per_gpu": 0.1,
           "peak_memory_mb": 60.0, "theoretical_memory_mb": 0.4, "checkpoints_saved": [], "tracker_iteration": "50",
           "skipped_iterations": 0, "nan_iterations": 0, "validation": {}, "attempts": 1, "exit_code": 1,
           "startup": {"start_to_first_iteration_s": 0.1}, "failure": {"class": None, "reason": "x"}}


@pytest.mark.parametrize("member", sorted(SUMMARY))
@pytest.mark.parametrize("value", ["x", ["a"], {"a": 1}, -1.5, None, True])
def test_a_summary_json_member_of_another_type_is_refused_never_an_internal_error(tmp_path, capsys, member, value):
    """A run that has only its metrics and summary.json: the summary is data; each member is checked for its type."""
    from launcher.cli import main

    run_dir = new_run_dir(tmp_path)
    (run_dir / "metrics.jsonl").write_text('{"kind": "iteration", "iteration": 10, "loss": 5.0, "attempt": 1}\n')
    (run_dir / "summary.json").write_text(json.dumps({**SUMMARY, member: value}))
    status = main(["report", str(run_dir), "--output-dir", str(tmp_path / "plots")])
    err = capsys.readouterr().err
    assert "internal error" not in err
    assert status in (0, 1) or (status == 2 and "error:" in err and "hint:" in err)
