"""prepare-data end to end: corpora made here are tokenized, written with megatron-core, read back, trained on
by GPTDataset/BlendedDataset on CPU; bad input is refused with file:line and leaves no files behind."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from launcher.checks.data import check_data, read_meta
from launcher.dataprep.prepare import prepare_data
from launcher.dataprep.text_tokenizers import TokenizerSpec
from launcher.errors import UserError

pytestmark = [
    pytest.mark.megatron,
    pytest.mark.skipif(find_spec("megatron") is None or find_spec("torch") is None,
                       reason="needs megatron-core and torch"),
]
BYTE = TokenizerSpec("byte")
REPO = Path(__file__).resolve().parents[2]


def make_documents(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "δέλτα", "东京", "naïve", "tab\there", "new\nline", "emoji 🙂", "x"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 60))) for _ in range(count)]


def write_jsonl(path: Path, texts: list[str], key: str = "text") -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        # every other line keeps non-ASCII characters raw, the rest escape them (both are valid JSON)
        handle.writelines(json.dumps({key: text, "id": number}, ensure_ascii=bool(number % 2)) + "\n"
                          for number, text in enumerate(texts))
    return path


def read_back(prefix: Path) -> list[list[int]]:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    dataset = IndexedDataset(str(prefix))
    return [dataset[i].tolist() for i in range(len(dataset))]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "launcher", "prepare-data", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def listing(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def test_byte_round_trip_every_document_identical(tmp_path):
    texts = make_documents(300, seed=1) + [""]  # the empty document is left out, as upstream does
    corpus = write_jsonl(tmp_path / "corpus.jsonl", texts)
    result = prepare_data([str(corpus)], str(tmp_path / "out"), BYTE, workers=1, show_progress=False)
    documents = read_back(tmp_path / "out")
    assert len(documents) == result.documents == 300 and result.skipped_empty == 1
    for text, tokens in zip(texts, documents, strict=False):
        assert tokens[-1] == 256 and 256 not in tokens[:-1]
        assert bytes(tokens[:-1]).decode("utf-8") == text
    assert result.tokens == sum(len(t.encode()) + 1 for t in texts if t)
    assert result.dtype == "uint16"
    meta = read_meta(str(tmp_path / "out"))
    assert meta["tokenizer"] == {"kind": "byte", "vocab_size": 257, "eod": 256}
    assert listing(tmp_path) == {"corpus.jsonl", "out.bin", "out.idx", "out.meta.json"}


def test_worker_processes_write_the_same_bytes_in_input_order(tmp_path):
    first = write_jsonl(tmp_path / "a.jsonl", make_documents(2500, seed=2))
    second = tmp_path / "b.txt"
    one_line_each = [text.replace("\n", " ") for text in make_documents(900, seed=3)]
    second.write_text("\n".join(one_line_each), encoding="utf-8")
    inputs = [str(first), str(second)]
    prepare_data(inputs, str(tmp_path / "one"), BYTE, workers=1, text_unit="line", show_progress=False)
    prepare_data(inputs, str(tmp_path / "three"), BYTE, workers=3, text_unit="line", show_progress=False)
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"one{suffix}").read_bytes() == (tmp_path / f"three{suffix}").read_bytes()
    assert len(read_back(tmp_path / "three")) == 2500 + 900


@pytest.mark.parametrize(("unit", "expected"), [
    ("file", ["p1 a\np1 b\n\n\np2 a\n"]),
    ("line", ["p1 a", "p1 b", "p2 a"]),
    ("paragraph", ["p1 a\np1 b", "p2 a"]),
])
def test_plain_text_units(tmp_path, unit, expected):
    source = tmp_path / "notes.txt"
    source.write_text("p1 a\np1 b\n\n\np2 a\n", encoding="utf-8")
    prepare_data([str(source)], str(tmp_path / "out"), BYTE, text_unit=unit, workers=1, show_progress=False)
    assert [bytes(doc[:-1]).decode() for doc in read_back(tmp_path / "out")] == expected


def test_gzip_jsonl_and_custom_key(tmp_path):
    import gzip

    texts = make_documents(50, seed=4)
    with gzip.open(tmp_path / "c.jsonl.gz", "wt", encoding="utf-8") as handle:
        for text in texts:
            handle.write(json.dumps({"content": text}) + "\n")
    prepare_data([str(tmp_path / "c.jsonl.gz")], str(tmp_path / "out"), BYTE, json_key="content",
                 workers=2, show_progress=False)
    assert [bytes(doc[:-1]).decode() for doc in read_back(tmp_path / "out")] == texts


def tiny_gpt2_files(directory: Path) -> tuple[Path, Path]:
    """A GPT-2-format vocab/merges pair over the byte-level alphabet of "hello world" (Ġ is the space)."""
    symbols = ["h", "e", "l", "o", "Ġ", "w", "r", "d"]
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or"),
              ("Ġwor", "l"), ("Ġworl", "d")]
    vocab = {token: i for i, token in enumerate(symbols + [a + b for a, b in merges] + ["<|endoftext|>"])}
    vocab_file, merge_file = directory / "vocab.json", directory / "merges.txt"
    vocab_file.write_text(json.dumps(vocab), encoding="utf-8")
    merge_file.write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    return vocab_file, merge_file


def test_gpt2_bpe_from_local_files(tmp_path):
    pytest.importorskip("tokenizers")
    vocab_file, merge_file = tiny_gpt2_files(tmp_path)
    vocab = json.loads(vocab_file.read_text())
    corpus = write_jsonl(tmp_path / "c.jsonl", ["hello world", "world hello", "hello"])
    spec = TokenizerSpec("gpt2", vocab_file=str(vocab_file), merge_file=str(merge_file))
    result = prepare_data([str(corpus)], str(tmp_path / "out"), spec, workers=2, show_progress=False)
    eod = vocab["<|endoftext|>"]
    assert (result.vocab_size, result.eod) == (len(vocab), eod)
    # every merge applies to "hello" and " world"; "world" without its leading space only merges "o r"
    assert read_back(tmp_path / "out") == [
        [vocab["hello"], vocab["Ġworld"], eod],
        [vocab["w"], vocab["or"], vocab["l"], vocab["d"], vocab["Ġ"], vocab["hello"], eod],
        [vocab["hello"], eod],
    ]
    assert result.megatron_args == {"tokenizer_type": "NullTokenizer", "vocab_size": len(vocab)}


def test_hf_tokenizer_directory_with_configured_eos(tmp_path):
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[UNK]", "the", "cat", "sat", "<eos>", "</s>"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    directory = tmp_path / "tok"
    directory.mkdir()
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "</s>"}}))
    corpus = write_jsonl(tmp_path / "c.jsonl", ["the cat sat", "cat dog"])
    result = prepare_data([str(corpus)], str(tmp_path / "out"), TokenizerSpec("hf", tokenizer_dir=str(directory)),
                          workers=1, show_progress=False)
    assert result.eod == words.index("</s>")
    assert read_back(tmp_path / "out") == [[1, 2, 3, 5], [2, 0, 5]]


def gpt_config(prefixes, weights, cache: Path, vocab_size: int = 257, split: str = "90,10,0"):
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig
    from megatron.core.tokenizers import MegatronTokenizer

    tokenizer = MegatronTokenizer.from_pretrained(metadata_path={"library": "null-text"}, vocab_size=vocab_size)
    return GPTDatasetConfig(random_seed=1234, sequence_length=64, blend=(prefixes, weights), split=split,
                            tokenizer=tokenizer, reset_position_ids=False, reset_attention_mask=False,
                            eod_mask_loss=True, path_to_cache=str(cache))


def test_gpt_dataset_on_prepared_data_on_cpu(tmp_path):
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset

    texts = make_documents(400, seed=5)
    corpus = write_jsonl(tmp_path / "c.jsonl", texts)
    prepare_data([str(corpus)], str(tmp_path / "out"), BYTE, workers=2, show_progress=False)
    config = gpt_config([str(tmp_path / "out")], None, tmp_path / "cache")
    train, valid, _test = BlendedMegatronDatasetBuilder(GPTDataset, [200, 20, 0], lambda: True, config).build()
    assert len(train) >= 200 and len(valid) >= 20
    stream = b"\x00".join(t.encode() for t in texts)
    for i in range(0, 200, 37):
        sample = train[i]
        tokens = sample["tokens"].tolist()
        assert len(tokens) == 64 and max(tokens) <= 256
        # a sample runs through documents in shuffled order: cut at EOD, every piece is a stretch of one
        # document, and every piece between two EODs is a whole document
        pieces = bytes(0 if t == 256 else t for t in tokens).split(b"\x00")
        assert all(piece in stream for piece in pieces)
        assert all(piece.decode() in texts for piece in pieces[1:-1])
        eod_positions = [p for p, t in enumerate(tokens) if t == 256]
        assert all(sample["loss_mask"][p] == 0 for p in eod_positions)
    assert any(name.endswith("shuffle_index.npy") for name in os.listdir(tmp_path / "cache"))


def test_blend_of_two_corpora(tmp_path):
    from megatron.core.datasets.blended_dataset import BlendedDataset
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset

    english = write_jsonl(tmp_path / "en.jsonl", ["the quick brown fox " * (i % 7 + 1) for i in range(300)])
    digits = write_jsonl(tmp_path / "num.jsonl", ["0123456789 " * (i % 5 + 1) for i in range(300)])
    for source, prefix in ((english, "en"), (digits, "num")):
        prepare_data([str(source)], str(tmp_path / prefix), BYTE, workers=1, show_progress=False)
    blend = [str(tmp_path / "en"), str(tmp_path / "num")]
    args = {"data_path": ["0.25", blend[0], "0.75", blend[1]], "split": "90,10,0",
            "tokenizer_type": "NullTokenizer", "vocab_size": 257}
    assert check_data(args) == []
    config = gpt_config(blend, [0.25, 0.75], tmp_path / "cache")
    train, _valid, _test = BlendedMegatronDatasetBuilder(GPTDataset, [400, 40, 0], lambda: True, config).build()
    assert isinstance(train, BlendedDataset)
    ids = [int(train[i]["dataset_id"]) for i in range(400)]
    assert 0.15 < ids.count(0) / 400 < 0.35
    for i in range(0, 400, 23):
        text = bytes(t for t in train[i]["tokens"].tolist() if t != 256).decode("latin-1")
        digits_only = set(text) <= set("0123456789 ")
        assert digits_only == (ids[i] == 1)


def test_vocabulary_larger_than_the_models(tmp_path):
    pytest.importorskip("tokenizers")
    vocab_file, merge_file = tiny_gpt2_files(tmp_path)
    corpus = write_jsonl(tmp_path / "c.jsonl", ["hello world"])
    spec = TokenizerSpec("gpt2", vocab_file=str(vocab_file), merge_file=str(merge_file))
    result = prepare_data([str(corpus)], str(tmp_path / "out"), spec, workers=1, show_progress=False)
    args = {"data_path": [str(tmp_path / "out")], "split": "1", "tokenizer_type": "NullTokenizer"}
    problems = check_data({**args, "vocab_size": result.vocab_size - 1})
    assert len(problems) == 1 and f"vocabulary of {result.vocab_size}" in problems[0].message
    assert f"--set tokenizer_type=NullTokenizer --set vocab_size={result.vocab_size}" in problems[0].hint
    assert check_data({**args, "vocab_size": result.vocab_size}) == []


# ---- bad input: a clear error, exit 2, nothing written ----

def test_bad_json_lines_and_missing_field_name_file_and_line(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "fine"}\n\n{"text": "also fine"\n{"body": "no text"}\n[1, 2]\n{"text": 5}\n')
    with pytest.raises(UserError) as caught:
        prepare_data([str(corpus)], str(tmp_path / "out"), BYTE, workers=2, show_progress=False)
    lines = [p.message for p in caught.value.problems]
    assert lines[0].startswith(f"{corpus}:3: not a JSON line")
    assert lines[1].startswith(f"{corpus}:4: no 'text' field (fields: 'body')")
    assert lines[2].startswith(f"{corpus}:5: expected a JSON object")
    assert lines[3].startswith(f"{corpus}:6: field 'text' is int")
    assert listing(tmp_path) == {"c.jsonl"}


def test_not_utf8_is_reported_with_its_line(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"good line\nbad \xff line\n")
    with pytest.raises(UserError) as caught:
        prepare_data([str(corpus)], str(tmp_path / "out"), BYTE, text_unit="line", workers=1, show_progress=False)
    assert caught.value.problems[0].message.startswith(f"{corpus}:2: not UTF-8")
    assert listing(tmp_path) == {"c.txt"}


def test_only_empty_documents(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", ["", ""])
    with pytest.raises(UserError, match="every document was empty"):
        prepare_data([str(corpus)], str(tmp_path / "out"), BYTE, workers=1, show_progress=False)
    assert listing(tmp_path) == {"c.jsonl"}


def test_cli_bad_inputs_exit_2_without_files(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    bad = run_cli("missing.jsonl", "empty.jsonl", "--output-prefix", "nodir/out", "--tokenizer", "byte",
                  cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "error: input missing.jsonl does not exist" in bad.stderr
    assert "error: input empty.jsonl is empty" in bad.stderr
    assert "output directory" not in bad.stderr  # a missing one is made once the inputs are good
    assert not (tmp_path / "nodir").exists()

    no_files = run_cli("empty.jsonl", "--output-prefix", "out", "--tokenizer", "gpt2", cwd=tmp_path)
    assert no_files.returncode == 2 and "--tokenizer gpt2 needs --vocab-file" in no_files.stderr
    assert listing(tmp_path) == {"empty.jsonl"}


def test_cli_existing_prefix_refused_unless_overwrite(tmp_path):
    write_jsonl(tmp_path / "c.jsonl", ["first corpus"])
    first = run_cli("c.jsonl", "--output-prefix", "out", "--tokenizer", "byte", "--no-progress", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert (f"--set mock_data=false --set data_path={tmp_path / 'out'} --set split=98,2,0 "
            "--set tokenizer_type=NullTokenizer --set vocab_size=257") in first.stdout
    assert "Warning" not in first.stderr  # megatron-core's import-time TE/apex warnings are not shown
    before = (tmp_path / "out.bin").read_bytes()

    write_jsonl(tmp_path / "c.jsonl", ["second, longer corpus"])
    refused = run_cli("c.jsonl", "--output-prefix", "out", "--tokenizer", "byte", cwd=tmp_path)
    assert refused.returncode == 2 and "already exists" in refused.stderr and "--overwrite" in refused.stderr
    assert (tmp_path / "out.bin").read_bytes() == before

    replaced = run_cli("c.jsonl", "--output-prefix", "out", "--tokenizer", "byte", "--overwrite",
                       "--format", "json", cwd=tmp_path)
    assert replaced.returncode == 0, replaced.stderr
    assert json.loads(replaced.stdout)["documents"] == 1
    assert bytes(read_back(tmp_path / "out")[0][:-1]) == b"second, longer corpus"
    assert listing(tmp_path) == {"c.jsonl", "out.bin", "out.idx", "out.meta.json"}


HIDE_INSTALLED_MEGATRON = """
import importlib.machinery, sys

class HideInstalledMegatron:  # as if megatron-core were not installed: only non-site-packages paths are searched
    def find_spec(self, name, path=None, target=None):
        if name != "megatron":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, [p for p in sys.path if "-packages" not in p])
        if spec is None:
            raise ModuleNotFoundError("No module named 'megatron'", name=name)
        return spec

sys.meta_path.insert(0, HideInstalledMegatron())
from launcher.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("with_checkout", [True, False], ids=["checkout", "nothing"])
def test_without_megatron_core_the_checkouts_copy_is_used(tmp_path, with_checkout):
    import megatron

    checkout = tmp_path / "Megatron-LM"
    checkout.mkdir()
    if with_checkout:  # a checkout's megatron/ package: here the installed one, linked
        (checkout / "megatron").symlink_to(list(megatron.__path__)[0])
    corpus = write_jsonl(tmp_path / "c.jsonl", ["hello", "world"])
    env = {**os.environ, "MEGATRON_LM_PATH": str(checkout), "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", HIDE_INSTALLED_MEGATRON, "prepare-data", str(corpus),
                             "--output-prefix", str(tmp_path / "out"), "--tokenizer", "byte", "--no-progress"],
                            env=env, capture_output=True, text=True, timeout=300)
    if with_checkout:
        assert result.returncode == 0, result.stderr
        assert (tmp_path / "out.bin").is_file() and (tmp_path / "out.idx").is_file()
    else:
        assert result.returncode == 2 and "prepare-data needs megatron-core" in result.stderr
        assert "MEGATRON_LM_PATH" in result.stderr and not (tmp_path / "out.bin").exists()
        # a command that works: the launcher installs from its checkout, it is on no package index
        assert f"-m pip install -e '{REPO}[megatron]'" in result.stderr or \
            f"-m pip install -e {REPO}[megatron]" in result.stderr
        assert "megatron-launch[megatron]" not in result.stderr


HIDE_TORCH_TOO = HIDE_INSTALLED_MEGATRON.replace(
    "class HideInstalledMegatron:",
    """class HideTorch:  # as if torch were not installed either
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            raise ModuleNotFoundError("No module named 'torch'", name=name)
        return None

sys.meta_path.insert(0, HideTorch())

class HideInstalledMegatron:""")


def test_without_torch_a_checkout_is_not_offered_as_the_way_out(tmp_path):
    import megatron

    checkout = tmp_path / "Megatron-LM"
    checkout.mkdir()
    (checkout / "megatron").symlink_to(list(megatron.__path__)[0])
    corpus = write_jsonl(tmp_path / "c.jsonl", ["hello"])
    env = {**os.environ, "MEGATRON_LM_PATH": str(checkout), "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", HIDE_TORCH_TOO, "prepare-data", str(corpus),
                             "--output-prefix", str(tmp_path / "out"), "--tokenizer", "byte", "--no-progress"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "No module named 'torch'" in result.stderr, result.stderr
    assert "point MEGATRON_LM_PATH" not in result.stderr and "[megatron]" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out.bin").exists()


def test_a_missing_output_directory_is_made(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", ["a document", "another"])
    prepare_data([str(corpus)], str(tmp_path / "data" / "new" / "corpus"), BYTE, workers=1, show_progress=False)
    assert {p.name for p in (tmp_path / "data" / "new").iterdir()} >= {"corpus.bin", "corpus.idx"}


def test_an_output_directory_under_a_file_is_refused(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", ["a document"])
    (tmp_path / "plain").write_text("")
    with pytest.raises(UserError, match="cannot be made: .*plain is not a directory"):
        prepare_data([str(corpus)], str(tmp_path / "plain" / "sub" / "corpus"), BYTE, workers=1, show_progress=False)
