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


@pytest.mark.parametrize("content", ['{"a": NaN, "<|endoftext|>": 1}', '{"a": 1e400}', '{"a": ' + "9" * 40 + "}",
                                     '{"a": ' * 100 + "1" + "}" * 100])
def test_a_vocab_json_is_read_as_strict_json(tmp_path, content):
    """vocab.json, tokenizer.json, .meta.json and per_split_data_args_path are JSON from someone else: read by the
    one strict reader (no NaN, no 1e400, no 40-digit integer, no nesting past 64), as every record is."""
    (tmp_path / "vocab.json").write_text(content)
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    tokenizer, problems = data.training_tokenizer({"tokenizer_type": "GPT2BPETokenizer",
                                                   "vocab_file": str(tmp_path / "vocab.json"),
                                                   "merge_file": str(tmp_path / "merges.txt")})
    assert tokenizer is None and "is not valid JSON" in problems[0].message


def test_a_meta_json_with_a_nan_is_not_trusted(tmp_path):
    prefix = tmp_path / "corpus"
    write_indexed(prefix, [[1, 2, 300, 256]])
    (tmp_path / "corpus.meta.json").write_text(
        f'{{"format": "{data.META_FORMAT}", "tokenizer": {{"vocab_size": 300, "eod": NaN}}}}')
    assert data.read_meta(str(prefix)) is None
