"""The one bounded tail reader of run logs (runs/tail_log.py), shared by `launch report` and the requeue policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.runs.tail_log import TailLines


def lines_of(path: Path, limit: int, **kwargs) -> tuple[list[str], TailLines]:
    with open(path, "rb") as handle:
        reader = TailLines(handle, limit, **kwargs)
        return list(reader), reader


@pytest.mark.parametrize("limit", range(1, 40))
def test_only_whole_lines_of_the_last_limit_bytes_are_read(tmp_path, limit):
    path = tmp_path / "log"
    text = "".join(f"line {n}\n" for n in range(6))  # 7 bytes a line
    path.write_text(text)
    lines, reader = lines_of(path, limit)
    whole = [line for line in text.splitlines() if text.index(line) >= len(text) - limit]
    assert lines == whole
    assert reader.skipped == len(text) - 7 * len(whole)


def test_a_cut_slurm_log_opens_with_the_attempt_the_cut_runs_through(tmp_path):
    path = tmp_path / "slurm-9.out"
    path.write_text("megatron-launch: job 9 attempt 1 on n1\nx\nmegatron-launch: job 9 attempt 4 on n1\n"
                    + "y\n" * 100 + "megatron-launch: job 9 attempt 5 on n1\nz\n")
    lines, _ = lines_of(path, 100, slurm_job="9")
    assert lines[0].startswith("megatron-launch: job 9 attempt 4 on ") and lines[-1] == "z"
    lines, _ = lines_of(path, 1000, slurm_job="9")  # not cut: as written
    assert lines[0] == "megatron-launch: job 9 attempt 1 on n1"


def test_a_cut_with_no_attempt_line_before_it_takes_the_one_before_the_first_after_it_or_the_given(tmp_path):
    path = tmp_path / "slurm-9.out"
    path.write_text("y\n" * 100 + "megatron-launch: job 9 attempt 3 on n1\nz\n")
    assert lines_of(path, 60, slurm_job="9")[0][0].startswith("megatron-launch: job 9 attempt 2 on ")
    path.write_text("y\n" * 100)
    assert lines_of(path, 60, slurm_job="9", attempt=6)[0][0].startswith("megatron-launch: job 9 attempt 6 on ")
    assert lines_of(path, 60, slurm_job="9")[0][0] == "y"


def test_an_overlong_line_is_cut_to_its_first_mib(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"a" * (3 << 20) + b"\nb\n")
    lines, reader = lines_of(path, 8 << 20)
    assert [len(line) for line in lines] == [1 << 20, 1] and reader.skipped == 0 and reader.ended_with_newline
