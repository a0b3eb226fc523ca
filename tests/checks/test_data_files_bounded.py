"""The data check reads a dataset's .bin as every input is read: a regular file within the scan bound. numpy's
own reader took the path, so a .bin swapped for a FIFO after the size check would wait for a writer forever."""

from __future__ import annotations

import os
import signal

import pytest

from launcher.checks import data
from launcher.checks.data import read_index

from .test_dataprep_check import write_indexed


@pytest.fixture
def no_hang():
    def expire(*_):
        raise TimeoutError("the reader waited")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_the_largest_token_is_read_from_the_bin(tmp_path):
    prefix = tmp_path / "corpus"
    write_indexed(prefix, [[1, 2, 300, 256]])
    assert data._largest_token(str(prefix), read_index(str(prefix))) == 300


@pytest.mark.parametrize("how", ["fifo", "dev zero", "grown past the bound"])
def test_a_bin_that_is_no_regular_file_within_the_bound_is_not_scanned(tmp_path, no_hang, how, monkeypatch):
    prefix = tmp_path / "corpus"
    write_indexed(prefix, [[1, 2, 300, 256]])
    index = read_index(str(prefix))
    bin_file = tmp_path / "corpus.bin"
    bin_file.unlink()
    if how == "fifo":
        os.mkfifo(bin_file)
    elif how == "dev zero":
        bin_file.symlink_to("/dev/zero")
    else:
        monkeypatch.setattr(data, "MAX_SCAN_BYTES", 64)
        bin_file.write_bytes(b"\x01\x00" * 64)
    assert data._largest_token(str(prefix), index) is None
