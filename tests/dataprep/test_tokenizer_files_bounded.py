"""prepare-data reads the tokenizer's files itself, as every input is read (a regular file, bounded, UTF-8), and
hands the tokenizers library their text: its own reader waited on a FIFO and read a 10 GB file until it aborted."""

from __future__ import annotations

import json
import os

import pytest

from launcher.dataprep.text_tokenizers import TokenizerSpec, build_tokenizer
from launcher.errors import UserError

from .test_dataprep_prepare import tiny_gpt2_files

pytest.importorskip("tokenizers")


def _sparse(path, size=10 << 30):
    path.unlink(missing_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(size)


def test_merges_read_here_tokenize_as_the_library_reads_them(tmp_path):
    from tokenizers import models

    vocab_file, merge_file = tiny_gpt2_files(tmp_path)
    ours = build_tokenizer(TokenizerSpec("gpt2", vocab_file=str(vocab_file), merge_file=str(merge_file)))
    library = models.BPE.from_file(str(vocab_file), str(merge_file))
    for word in ("hello", "Ġworld", "wor", "hellohello"):
        assert [t.id for t in ours.tokenizer.model.tokenize(word)] == [t.id for t in library.tokenize(word)]


@pytest.mark.parametrize("damage", ["sparse 10 GB", "fifo", "dev zero", "not utf-8", "three words"])
def test_a_damaged_merges_file_is_a_user_error(tmp_path, damage):
    vocab_file, merge_file = tiny_gpt2_files(tmp_path)
    if damage == "sparse 10 GB":
        _sparse(merge_file)
    elif damage == "fifo":
        merge_file.unlink()
        os.mkfifo(merge_file)
    elif damage == "dev zero":
        merge_file.unlink()
        merge_file.symlink_to("/dev/zero")
    elif damage == "not utf-8":
        merge_file.write_bytes(b"#version: 0.2\nh \xff\n")
    else:
        merge_file.write_text("#version: 0.2\nh e l\n")
    with pytest.raises(UserError) as refused:
        build_tokenizer(TokenizerSpec("gpt2", vocab_file=str(vocab_file), merge_file=str(merge_file)))
    assert "merges" in refused.value.problems[0].message or "merge-file" in refused.value.problems[0].message


@pytest.mark.parametrize("damage", ["sparse 10 GB", "dev zero", "deep json"])
def test_a_damaged_tokenizer_json_is_a_user_error(tmp_path, damage):
    directory = tmp_path / "tok"
    directory.mkdir()
    path = directory / "tokenizer.json"
    if damage == "sparse 10 GB":
        _sparse(path)
    elif damage == "dev zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_text('{"model": ' * 10000 + "{}" + "}" * 10000)
    with pytest.raises(UserError, match="tokenizer.json"):
        build_tokenizer(TokenizerSpec("hf", tokenizer_dir=str(directory)))


def test_a_tokenizer_json_read_here_still_builds(tmp_path):
    from tokenizers import Tokenizer, models

    directory = tmp_path / "tok"
    directory.mkdir()
    Tokenizer(models.WordLevel({"[UNK]": 0, "</s>": 1}, unk_token="[UNK]")).save(str(directory / "tokenizer.json"))
    assert build_tokenizer(TokenizerSpec("hf", tokenizer_dir=str(directory))).eod == 1
    assert json.loads((directory / "tokenizer.json").read_text())["model"]["type"] == "WordLevel"
