"""A checkpoint's tracker file (latest_checkpointed_iteration.txt) is read as Megatron reads it, bounded, and never
shown as it is: a FIFO, a device or a directory is no tracker (os.path.isfile), an iteration is int() of the text from
0 to 2^63-1 or 'release', anything else a tracker Megatron cannot load, named so, whatever bytes or lines it holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.runs import verdict
from launcher.runs.verdict import TRACKER_FILE, UNREADABLE_TRACKER, checkpoint_failures, read_tracker


@pytest.mark.parametrize(("content", "read"), [
    (b"50\n", "50"), (b" 7 ", "7"), (b"release", "release"), (b"1_000", "1000"), ("\u0663".encode(), "3"),
    (str((1 << 63) - 1).encode(), str((1 << 63) - 1)),
])
def test_what_megatron_reads_as_an_iteration_is_read_the_same(tmp_path, content, read):
    (tmp_path / TRACKER_FILE).write_bytes(content)
    assert read_tracker(tmp_path) == read


@pytest.mark.parametrize("content", [
    b"", b"-5", b"1e9", b"0x10", b"nan", b"12\nverdict: success", b"\xff\xfe", b"\x00", b"\x1b[2J50",
    str(1 << 63).encode(), b"9" * 4000, b"9" * 5000, b"9" * (1 << 20),
])
def test_a_tracker_megatron_cannot_load_is_named_never_shown(tmp_path, content):
    (tmp_path / TRACKER_FILE).write_bytes(content)
    read = read_tracker(tmp_path)
    assert read is not None and read.startswith(UNREADABLE_TRACKER) and "\n" not in read and "verdict" not in read
    assert checkpoint_failures([50], True, True, tmp_path, read) == [
        f"the log reports a checkpoint at iteration 50, but {tmp_path / TRACKER_FILE} is {read}: Megatron's next "
        "load stops there"]


@pytest.mark.parametrize("kind", ["directory", "fifo", "dev-zero", "link-loop", "dangling"])
def test_what_is_no_regular_file_is_no_tracker_and_never_waited_on(tmp_path, kind):
    tracker = tmp_path / TRACKER_FILE
    if kind == "directory":
        tracker.mkdir()
    elif kind == "fifo":
        os.mkfifo(tracker)
    elif kind == "dev-zero":
        tracker.symlink_to("/dev/zero")
    elif kind == "link-loop":
        tracker.symlink_to(tracker)
    else:
        tracker.symlink_to(tmp_path / "nowhere")
    assert read_tracker(tmp_path) is None


def test_a_sparse_tracker_of_gigabytes_is_not_read(tmp_path):
    with (tmp_path / TRACKER_FILE).open("wb") as handle:
        handle.truncate(10 << 30)
    assert read_tracker(tmp_path) == f"{UNREADABLE_TRACKER} (not a regular file of at most " \
                                      f"{verdict.MAX_TRACKER_BYTES:,} bytes)"


def test_the_summary_says_an_unloadable_tracker_without_calling_it_an_iteration(tmp_path: Path):
    (tmp_path / TRACKER_FILE).write_bytes(b"12\nfake line")
    text = verdict.RunLog().summary(tmp_path).render()
    assert f"checkpoint:         {UNREADABLE_TRACKER}" in text and "fake line" not in text
