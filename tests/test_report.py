"""`launch report`: PNG plots and summary from a run directory or from plain (e.g. Slurm) log files."""

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.runs.monitor import Monitor
from launcher.runs.report import make_report
from launcher.runs.rundir import write_run_dir

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
ROOT = Path(__file__).resolve().parent.parent
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_valid_png(path: Path) -> None:
    from matplotlib.image import imread

    assert path.read_bytes()[:8] == PNG_MAGIC
    pixels = imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels.std() > 0  # something was drawn


def report_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", "report", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)


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
    assert report.summary.attempts == 2 and report.summary.last_iteration == 80
    assert json.loads((run_dir / "summary.json").read_text())["attempts"] == 2


def test_cli_on_slurm_style_log_files(tmp_path):
    log = tmp_path / "slurm-4242.out"
    shutil.copy(FIXTURES / "fp16_8gpu_loss_scale_skips.log", log)
    result = report_cli(str(log), "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["summary"]["skipped_iterations"] == 9
    assert data["summary"]["steady_tokens_per_s"] == pytest.approx(64 * 1024 / 0.5505, rel=1e-3)
    for plot in data["plots"]:
        assert Path(plot).parent == tmp_path / "slurm-4242-report"
        assert_valid_png(Path(plot))


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
    assert result.returncode == 0, result.stderr
    assert "iterations:         40/100" in result.stdout
    assert_valid_png(tmp_path / "loss.png")


def test_summarize_without_plots(tmp_path):
    from launcher.runs.report import summarize

    run_dir = new_run_dir(tmp_path, "toy_fp32_1gpu.log")
    assert summarize(run_dir).last_iteration == 100
    assert not (run_dir / "plots").exists()
    killed = summarize([FIXTURES / "toy_truncated.log"])  # partial accepted: the verdict is what is wanted
    assert killed.outcome == "failed" and killed.last_iteration == 40
