"""prepare-data under hostile input and concurrency: one writer per output prefix (a lock naming the holder),
and a document too long to tokenize in bounded memory (a 1 GB line) is reported by file:line, not read."""

from __future__ import annotations

import fcntl
import io
import os
from importlib.util import find_spec

import pytest

from launcher.dataprep import reader
from launcher.dataprep.prepare import prepare_data
from launcher.dataprep.text_tokenizers import TokenizerSpec
from launcher.errors import UserError


@pytest.mark.megatron
@pytest.mark.skipif(find_spec("megatron") is None or find_spec("torch") is None, reason="needs megatron-core")
def test_a_second_prepare_data_to_one_prefix_is_refused_while_the_first_writes(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one document\n")
    fd = os.open(tmp_path / "out.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"777\n")
        with pytest.raises(UserError) as refused:
            prepare_data([str(corpus)], str(tmp_path / "out"), TokenizerSpec("byte"), workers=1,
                         show_progress=False)
    finally:
        os.close(fd)
    assert refused.value.problems[0].message == f"output prefix {tmp_path / 'out'} is in use by process 777 " \
                                                f"(lock {tmp_path / 'out.lock'})"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "out.lock"]


def test_a_line_longer_than_a_document_may_be_is_skipped_unread(monkeypatch):
    monkeypatch.setattr(reader, "MAX_DOCUMENT_BYTES", 1000)
    stream = io.BytesIO(b'{"text": "short"}\n' + b"x" * 5000 + b"\n" + b'{"text": "after"}\n')
    units = list(reader._json_units(stream))
    assert [(u.line, u.too_long) for u in units] == [(1, False), (2, True), (3, False)]
    with pytest.raises(reader.BadDocument, match="longer than 1,000 bytes"):
        reader.unit_text(units[1], True, "text")


@pytest.mark.parametrize("unit", ["file", "line", "paragraph"])
def test_text_units_are_bounded_too(monkeypatch, unit):
    monkeypatch.setattr(reader, "MAX_DOCUMENT_BYTES", 1000)
    units = list(reader._text_units(io.BytesIO(b"y" * 5000), unit))
    assert [u.too_long for u in units] == [True] and units[0].raw == b""
