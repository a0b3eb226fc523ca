"""Every `--set` recipe `launch prepare-data` prints trains offline with what the README installs: Megatron's own
verdict (`launch 345m … --check`) accepts it, and on a GPU it runs 3 iterations."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from launcher.checks.data import check_data

REPO = Path(__file__).resolve().parents[2]
needs_megatron = pytest.mark.skipif(find_spec("megatron") is None or find_spec("torch") is None,
                                    reason="needs megatron-core and torch")
needs_tokenizers = pytest.mark.skipif(find_spec("tokenizers") is None, reason="needs tokenizers")
pytestmark = pytest.mark.megatron  # prepare-data writes through megatron-core's IndexedDatasetBuilder


def launch(*args: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    env.pop("MEGATRON_LM_PATH", None)
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def gpt2_files(directory: Path) -> list[str]:
    """A GPT-2-format vocab/merges pair over the letters of "hello world" (Ġ is the space)."""
    symbols = ["h", "e", "l", "o", "Ġ", "w", "r", "d"]
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or")]
    vocab = {token: i for i, token in enumerate(symbols + [a + b for a, b in merges] + ["<|endoftext|>"])}
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (directory / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    return ["--vocab-file", str(directory / "vocab.json"), "--merge-file", str(directory / "merges.txt")]


def hf_dir(directory: Path) -> list[str]:
    """A word-level tokenizer.json whose end-of-document token is not the last id (so the recipe must say it)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[UNK]", "</s>", "hello", "world", "the", "cat"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    (directory / "tok").mkdir()
    tokenizer.save(str(directory / "tok" / "tokenizer.json"))
    (directory / "tok" / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    return ["--tokenizer-dir", str(directory / "tok")]


TOKENIZERS = {"byte": lambda _d: [], "gpt2": gpt2_files, "hf": hf_dir}


def printed_recipe(tmp_path: Path, kind: str) -> list[str]:
    """Run prepare-data as a user does and return the `--set` words of its `train on it: launch PRESET …` line."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": "hello world " * (i % 7 + 1)}) + "\n" for i in range(400)))
    done = launch("prepare-data", str(corpus), "--output-prefix", str(tmp_path / "data"), "--tokenizer", kind,
                  *TOKENIZERS[kind](tmp_path), "--no-progress", "--workers", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("train on it: launch PRESET "))
    return shlex.split(line.removeprefix("train on it: launch PRESET "))


def as_settings(words: list[str]) -> dict[str, str]:
    return dict(word.split("=", 1) for word in words if word != "--set")


@needs_megatron
@needs_tokenizers
@pytest.mark.parametrize("kind", sorted(TOKENIZERS))
def test_recipe_needs_no_file_or_package_beyond_the_readme(tmp_path, kind):
    settings = as_settings(printed_recipe(tmp_path, kind))
    # NullTokenizer: the ids, the vocabulary and EOD, no transformers and no hub (GPT2BPETokenizer needs both)
    assert settings["tokenizer_type"] == "NullTokenizer"
    expected_vocab = {"byte": "257", "gpt2": "16", "hf": "6"}[kind]
    assert settings["vocab_size"] == expected_vocab
    assert settings.get("null_tokenizer_eod_id") == ("1" if kind == "hf" else None)


@needs_megatron
@needs_tokenizers
@pytest.mark.parametrize("kind", sorted(TOKENIZERS))
def test_printed_recipe_passes_megatrons_own_check(tmp_path, kind):
    recipe = printed_recipe(tmp_path, kind)
    done = launch("345m", *recipe, "--check", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "\nmegatron: ok" in done.stdout, done.stdout


@needs_megatron
def test_check_refuses_gpt2_bpe_that_needs_the_hub(tmp_path):
    """GPT2BPETokenizer with local files still asks the hub for "gpt2" (and needs transformers): --check says so."""
    words = gpt2_files(tmp_path)
    done = launch("345m", "--set", "tokenizer_type=GPT2BPETokenizer", "--set", f"vocab_file={words[1]}",
                  "--set", f"merge_file={words[3]}", "--check", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "megatron: globals: ValueError: Unable to instantiate HuggingFace AutoTokenizer for gpt2" in done.stdout


@pytest.mark.skipif(find_spec("transformers") is not None, reason="transformers is installed here")
def test_launcher_refuses_autotokenizer_types_without_transformers(tmp_path):
    words = gpt2_files(tmp_path)
    problems = check_data({"mock_data": True, "tokenizer_type": "GPT2BPETokenizer", "vocab_file": words[1],
                           "merge_file": words[3]})
    assert [p.message for p in problems] == [
        f"tokenizer_type GPT2BPETokenizer needs the transformers package, which this Python ({sys.executable}) "
        "lacks; and Megatron builds GPT2BPETokenizer from the Hugging Face hub's gpt2 files even with vocab_file "
        "set, which needs the network (or the hub's cache)"]
    assert problems[0].hint.startswith("use tokenizer_type=NullTokenizer with vocab_size=N")
    hf = check_data({"mock_data": True, "tokenizer_type": "HuggingFaceTokenizer",
                     "tokenizer_model": hf_dir(tmp_path)[1]} if find_spec("tokenizers") else
                    {"mock_data": True, "tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": "org/name"})
    assert [p.message for p in hf] == [
        f"tokenizer_type HuggingFaceTokenizer needs the transformers package, which this Python "
        f"({sys.executable}) lacks"]
    # inside a container the image brings its own packages: the node checks them at job start
    assert check_data({"mock_data": True, "tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": "org/name"},
                      python_here=False) == []


@pytest.mark.gpu
@pytest.mark.skipif(find_spec("torch") is None, reason="needs torch")
@needs_tokenizers
@pytest.mark.parametrize("kind", sorted(TOKENIZERS))
def test_printed_recipe_trains_three_iterations(tmp_path, kind):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    megatron = os.environ.get("MEGATRON_LM_PATH") or str(REPO / "third_party" / "megatron-lm")
    if not (Path(megatron) / "pretrain_gpt.py").is_file():
        pytest.skip("needs the Megatron-LM checkout (MEGATRON_LM_PATH)")
    recipe = printed_recipe(tmp_path, kind)
    small = ["--set", "num_layers=2", "--set", "hidden_size=64", "--set", "num_attention_heads=4",
             "--set", "seq_length=64", "--set", "max_position_embeddings=64", "--set", "train_iters=3",
             "--set", "global_batch_size=4", "--set", "micro_batch_size=4", "--set", "eval_iters=0",
             "--set", "log_interval=1", "--set", f"run_root={tmp_path / 'runs'}"]
    done = launch("345m", "--gpus-per-node", "1", "--megatron-path", megatron, *recipe, *small, cwd=tmp_path,
                  timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " iteration        3/       3 |" in done.stdout + done.stderr
