"""`launch report` writes only into real directories and never through a link, and reads a planted FIFO or
device as a checkpoint tracker without waiting: exit 2, or a report, in seconds."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from launcher import cli

pytest.importorskip("matplotlib")
LOG = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "toy_fp32_1gpu.log"


def _report(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["report", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_symlinked_plot_file_is_replaced_not_written_through(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "loss.png").symlink_to(victim)
    code, _, err = _report(capsys, str(LOG), "--output-dir", str(plots))
    assert code == 0, err
    assert victim.read_text() == "mine\n"
    assert not (plots / "loss.png").is_symlink() and (plots / "loss.png").read_bytes()[:4] == b"\x89PNG"


def test_a_symlinked_output_dir_is_refused(tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "plots").symlink_to(elsewhere)
    code, _, err = _report(capsys, str(LOG), "--output-dir", str(tmp_path / "plots"))
    assert code == 2
    assert err.splitlines()[0] == (f"error: plot directory '{tmp_path / 'plots'}' is a symbolic link; the launcher "
                                   "does not write through links")
    assert list(elsewhere.iterdir()) == []


def _run_dir(tmp_path: Path) -> Path:
    run_dir = tmp_path / "toy-20260101T000000Z"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "checkpoints").mkdir()
    (run_dir / "manifest.json").write_text(json.dumps({"checkpoint_dir": str(run_dir / "checkpoints")}))
    (run_dir / "preset.yaml").write_text("megatron: {seq_length: 64}\n")
    shutil.copy(LOG, run_dir / "logs" / "attempt-1.log")
    return run_dir


def test_a_symlinked_plots_dir_of_a_run_is_refused(tmp_path, capsys):
    run_dir = _run_dir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run_dir / "plots").symlink_to(elsewhere)
    code, _, err = _report(capsys, str(run_dir))
    assert code == 2 and "is a symbolic link" in err
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("planted", ["fifo", "/dev/zero"])
def test_a_planted_checkpoint_tracker_is_no_tracker_and_never_read(tmp_path, capsys, planted):
    """As Megatron's os.path.isfile sees it: no tracker (its next start is from scratch); the run is still reported."""
    run_dir = _run_dir(tmp_path)
    tracker = run_dir / "checkpoints" / "latest_checkpointed_iteration.txt"
    if planted == "fifo":
        os.mkfifo(tracker)
    else:
        tracker.symlink_to(planted)
    code, out, err = _report(capsys, str(run_dir))
    assert code in (0, 1), err
    assert "checkpoint:" in out and "(latest_checkpointed_iteration.txt)" not in out
