"""`launch import -` reads standard input as a file is read: bounded, UTF-8, a stream that fails is a user error."""

import errno
import io
import sys

import pytest

from launcher.errors import UserError
from launcher.importer import run
from launcher.untrusted import TooLarge


def _stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape"))


def test_a_script_on_stdin_is_read_whole(monkeypatch):
    _stdin(monkeypatch, b"torchrun pretrain_gpt.py --num-layers 2\n")
    assert run.read_input(["-", "x"]) == ("torchrun pretrain_gpt.py --num-layers 2\n", "standard input", ["x"])


def test_bytes_that_are_not_utf8_are_refused_not_carried_as_surrogates(monkeypatch):
    _stdin(monkeypatch, b"torchrun pretrain_gpt.py --lr \xff\xfe\n")
    with pytest.raises(UserError, match="standard input is not UTF-8 text"):
        run.read_input(["-"])


def test_more_than_the_bound_is_refused_not_cut(monkeypatch):
    _stdin(monkeypatch, b"#" * (run.MAX_SOURCE_BYTES + 1))
    with pytest.raises(TooLarge, match="larger than 1,000,000 bytes"):
        run.read_input(["-"])


class _Unreadable(io.RawIOBase):
    """What `launch import - < DIR` gives once the process runs: a descriptor whose reads fail with EISDIR."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        raise IsADirectoryError(errno.EISDIR, "Is a directory")


def test_a_stream_that_cannot_be_read_is_a_user_error(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(_Unreadable())))
    with pytest.raises(UserError, match="cannot read standard input: Is a directory"):
        run.read_input(["-"])
