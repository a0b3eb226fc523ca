"""check_data and its parts, on hand-written .idx/.bin files: no torch, no megatron needed."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.checks.data import (
    INDEX_MAGIC,
    check_data,
    check_prefix,
    check_split,
    parse_blend,
    read_index,
    split_ranges,
    training_tokenizer,
)


def write_indexed(prefix: Path, documents: list[list[int]], dtype_code: int = 8, itemsize: int = 2) -> None:
    """Megatron's .idx layout (header, lengths int32, pointers int64, document indices int64) and the .bin."""
    fmt = {2: "<H", 4: "<i"}[itemsize]
    lengths = [len(doc) for doc in documents]
    pointers, offset = [], 0
    for length in lengths:
        pointers.append(offset)
        offset += length * itemsize
    doc_indices = list(range(len(documents) + 1))
    with open(f"{prefix}.idx", "wb") as idx:
        idx.write(INDEX_MAGIC + struct.pack("<Q", 1) + struct.pack("<B", dtype_code))
        idx.write(struct.pack("<QQ", len(lengths), len(doc_indices)))
        idx.write(b"".join(struct.pack("<i", n) for n in lengths))
        idx.write(b"".join(struct.pack("<q", p) for p in pointers))
        idx.write(b"".join(struct.pack("<q", d) for d in doc_indices))
    with open(f"{prefix}.bin", "wb") as data:
        data.write(b"".join(struct.pack(fmt, token) for doc in documents for token in doc))


def messages(problems) -> str:
    return "\n".join(p.message for p in problems)


def test_parse_blend_forms():
    assert parse_blend(["a", "b", "c"]) == (["a", "b", "c"], None, [])
    assert parse_blend("0.3 data/a 0.7 data/b") == (["data/a", "data/b"], [0.3, 0.7], [])
    _prefixes, _weights, problems = parse_blend(["1", "data/a", "data/b"])
    assert problems and "weight before every prefix" in problems[0].hint
    _, _, problems = parse_blend(["-1", "data/a", "2", "data/b"])
    assert "non-negative" in messages(problems)
    _, _, problems = parse_blend([])
    assert "empty" in messages(problems)


@pytest.mark.parametrize("split", ["949,50,1", "98,2", "100", "98/2/0", "0.9, 0.1, 0"])
def test_good_splits(split):
    assert check_split(split) == []


@pytest.mark.parametrize("split", ["90,x", "1,2,3,4", "0,0,0", "0,50,50", "-1,2,3"])
def test_bad_splits(split):
    assert check_split(split), split


def test_read_index_and_prefix_ok(tmp_path):
    prefix = tmp_path / "corpus"
    docs = [[1, 2, 3, 256], [7, 256], [9, 9, 9, 9, 256]]
    write_indexed(prefix, docs)
    summary = read_index(str(prefix))
    assert (summary.dtype, summary.sequences, summary.documents) == ("uint16", 3, 4)
    assert summary.bin_bytes == 2 * sum(map(len, docs))
    assert check_prefix(str(prefix), "data_path") == []


def test_prefix_missing_truncated_and_foreign(tmp_path):
    missing = check_prefix(str(tmp_path / "nope"), "data_path")
    assert "has no" in messages(missing) and "prepare-data" in missing[0].hint

    prefix = tmp_path / "corpus"
    write_indexed(prefix, [[1, 2, 3], [4, 5]])
    with open(f"{prefix}.bin", "r+b") as data:
        data.truncate(4)
    assert "bytes but its .idx describes" in messages(check_prefix(str(prefix), "data_path"))

    (tmp_path / "text.idx").write_bytes(b"not an index at all, long enough to hold a header")
    (tmp_path / "text.bin").write_bytes(b"")
    assert "bad header" in messages(check_prefix(str(tmp_path / "text"), "data_path"))


def test_sources_mock_and_real_not_both(tmp_path):
    prefix = tmp_path / "corpus"
    write_indexed(prefix, [[1, 2, 256]])
    base = {"tokenizer_type": "NullTokenizer", "vocab_size": 257}
    assert check_data({**base, "mock_data": True}) == []
    assert check_data({**base, "data_path": [str(prefix)], "split": "100,0,0"}) == []
    both = check_data({**base, "mock_data": True, "data_path": [str(prefix)]})
    assert "both mock data" in messages(both)
    neither = check_data(base)
    assert "no training data" in messages(neither)
    two_real = check_data({**base, "data_path": [str(prefix)], "train_data_path": [str(prefix)]})
    assert "Megatron takes one source" in messages(two_real)


def test_every_problem_at_once(tmp_path):
    problems = check_data({"tokenizer_type": "NullTokenizer", "data_path": f"1 {tmp_path}/a 1 {tmp_path}/b",
                           "split": "90,y"})
    text = messages(problems)
    assert "needs vocab_size" in text
    assert f"{tmp_path}/a" in text and f"{tmp_path}/b" in text
    assert "split '90,y'" in text


def test_token_ids_beyond_model_vocabulary_without_meta(tmp_path):
    prefix = tmp_path / "corpus"
    write_indexed(prefix, [[1, 2, 300, 256]])
    args = {"data_path": [str(prefix)], "tokenizer_type": "NullTokenizer", "vocab_size": 257, "split": "1"}
    assert "holds token id 300" in messages(check_data(args))
    assert check_data({**args, "vocab_size": 301}) == []


def test_data_args_path_file_is_read(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    write_indexed(good, [[1, 256]])
    listing = tmp_path / "blend.txt"
    listing.write_text(f"0.5 {good}\n0.5 {bad}\n")
    problems = check_data({"data_args_path": str(listing), "tokenizer_type": "NullTokenizer", "vocab_size": 257})
    assert messages(problems).count("has no") == 1 and str(bad) in messages(problems)


def test_tokenizer_files(tmp_path):
    _, problems = training_tokenizer({"tokenizer_type": "GPT2BPETokenizer"})
    assert "needs vocab_file and merge_file" in messages(problems)
    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps({"a": 0, "b": 1, "<|endoftext|>": 2}))
    merges = tmp_path / "merges.txt"
    merges.write_text("#version: 0.2\na b\n")
    tokenizer, problems = training_tokenizer({"tokenizer_type": "GPT2BPETokenizer", "vocab_file": str(vocab),
                                              "merge_file": str(merges)})
    assert problems == [] and (tokenizer.vocab_size, tokenizer.eod) == (3, 2)
    _, problems = training_tokenizer({"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": str(tmp_path)})
    assert "no tokenizer.json" in messages(problems)
    _, problems = training_tokenizer({"tokenizer_type": "SentencePieceTokenizer"})
    assert "needs tokenizer_model" in messages(problems)
    _, problems = training_tokenizer({"tokenizer_type": "Gpt2"})
    assert "unknown tokenizer_type" in messages(problems)


def test_check_data_imports_neither_torch_nor_megatron():
    code = ("import sys; from launcher.checks.data import check_data; "
            "check_data({'mock_data': True, 'tokenizer_type': 'NullTokenizer', 'vocab_size': 8}); "
            "assert 'torch' not in sys.modules and 'megatron' not in sys.modules, sorted(sys.modules)")
    repo = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=False,
                         env={**os.environ, "PYTHONPATH": str(repo)})
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("blend", ["nan corpus", "1e999 corpus", "inf corpus 1 corpus", "1e308 corpus 1e308 corpus",
                                   "9" * 5000 + " corpus"])
def test_blend_weights_that_are_not_finite_are_refused(blend):
    """Megatron's float() reads nan, inf and 1e999 as weights, then normalizes by their sum."""
    _prefixes, _weights, problems = parse_blend(blend)
    assert problems and "are not finite numbers with a finite sum" in problems[0].message


@pytest.mark.parametrize("split", ["nan,1,1", "inf,1,0", "1e999", "9" * 5000, "1e308,1e308,0"])
def test_a_split_that_is_not_finite_is_refused(split):
    [problem] = check_split(split)
    assert "not finite" in problem.message and len(problem.message) < 400


def test_a_split_that_gets_no_document_is_refused_since_megatron_would_never_finish_its_index(tmp_path):
    """2 documents at 98,2,0: the valid split's bounds round to document 2..2; Megatron builds it anyway, with 0
    tokens an epoch, and loops adding epochs (the job hangs at start)."""
    prefix = tmp_path / "corpus"
    write_indexed(prefix, [[1, 2, 256], [3, 256]])
    base = {"tokenizer_type": "NullTokenizer", "vocab_size": 257, "data_path": [str(prefix)]}
    [problem] = check_data({**base, "split": "98,2,0"})
    assert f"split '98,2,0' gives the valid split none of the 2 document(s) of {prefix}" in problem.message
    assert problem.hint.endswith("--set split=98,0,0")
    assert check_data({**base, "split": "50,50,0"}) == []
    # without a split, validate_args uses its legacy 969,30,1: both small splits get nothing of 2 documents
    assert "gives the valid and test splits none" in messages(check_data(base))
    write_indexed(prefix, [[1, 256]] * 100)
    assert check_data({**base, "split": "98,2,0"}) == []


@pytest.mark.megatron
@pytest.mark.parametrize("split", ["98,2,0", "969, 30, 1", "1,1,1", "90/10", "0.5,0.25,0.25", "100,0,0", "7"])
def test_the_documents_each_split_takes_are_megatrons(split):
    config = pytest.importorskip("megatron.core.datasets.blended_megatron_dataset_config")
    matrix = config.convert_split_vector_to_split_matrix(config.parse_and_normalize_split(split))
    for count in (1, 2, 3, 7, 10, 33, 100, 1001):
        megatron = [None if b is None else range(int(round(b[0] * float(count))), int(round(b[1] * float(count))))
                    for b in matrix]
        assert split_ranges(split, count) == megatron, (split, count)
