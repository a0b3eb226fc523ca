"""Tokenizers for `launch prepare-data`, all offline: byte-level, GPT-2 BPE from local files, a HF directory.

Each one is described by a small picklable `TokenizerSpec` so worker processes can rebuild it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from launcher import untrusted
from launcher.errors import Problem, UserError

TOKENIZER_KINDS = ("byte", "gpt2", "hf")

# GPT-2's end-of-document token (id 50256 in the released vocabulary).
GPT2_EOD_TOKEN = "<|endoftext|>"
# Tried in order when a HF tokenizer directory does not name its eos token.
COMMON_EOD_TOKENS = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|eot_id|>")

MAX_TOKENIZER_FILE_BYTES = 256 << 20  # a tokenizer.json is a few MiB; the largest ones (250k vocab) ~30 MiB


class TextTokenizer(Protocol):
    vocab_size: int
    eod: int

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...


@dataclass(frozen=True)
class TokenizerSpec:
    """What to build; picklable, so each worker process builds its own copy."""

    kind: str
    vocab_file: str | None = None
    merge_file: str | None = None
    tokenizer_dir: str | None = None
    eod_token: str | None = None

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for name in ("vocab_file", "merge_file", "tokenizer_dir", "eod_token"):
            value = getattr(self, name)
            if value is not None:
                out[name] = os.path.abspath(value) if name != "eod_token" else value
        return out

    def megatron_args(self, vocab_size: int, eod: int) -> dict[str, Any]:
        """Megatron settings that train on data made by this tokenizer, offline, with what the README installs.

        Pretraining reads only token ids, the vocabulary size and the end-of-document id, which Megatron's
        NullTokenizer gives without any file or package. Megatron at the pin builds GPT2BPETokenizer and
        HuggingFaceTokenizer through `transformers`' AutoTokenizer (GPT2BPETokenizer asks the Hugging Face hub
        for "gpt2" even with local vocab and merges files: megatron_hf_tokenizer.py), which no extra installs.
        """
        args: dict[str, Any] = {"tokenizer_type": "NullTokenizer", "vocab_size": vocab_size}
        if eod != vocab_size - 1:  # NullTokenizer's default EOD is the last id
            args["null_tokenizer_eod_id"] = eod
        return args


class ByteTokenizer:
    """UTF-8 bytes are the ids 0..255; 256 is the end of a document. Needs no files."""

    vocab_size = 257
    eod = 256

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [list(text.encode("utf-8")) for text in texts]


@dataclass
class HFTokenizer:
    """A `tokenizers.Tokenizer` (Rust, offline) plus the id of its end-of-document token."""

    tokenizer: Any
    eod: int
    vocab_size: int = field(init=False)

    def __post_init__(self) -> None:
        self.vocab_size = self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        return [encoding.ids for encoding in encodings]


def check_spec(spec: TokenizerSpec) -> list[Problem]:
    """Every problem with the tokenizer options and files, without building anything."""
    problems: list[Problem] = []
    if spec.kind not in TOKENIZER_KINDS:
        return [Problem(f"unknown tokenizer {spec.kind!r}", f"use one of: {', '.join(TOKENIZER_KINDS)}")]
    if spec.kind == "byte":
        if spec.vocab_file or spec.merge_file or spec.tokenizer_dir:
            problems.append(Problem("--tokenizer byte takes no files",
                                    "drop --vocab-file/--merge-file/--tokenizer-dir"))
        if spec.eod_token:
            problems.append(Problem("--tokenizer byte has a fixed end-of-document id (256)", "drop --eod-token"))
    elif spec.kind == "gpt2":
        for flag, path in (("--vocab-file", spec.vocab_file), ("--merge-file", spec.merge_file)):
            if not path:
                problems.append(Problem(f"--tokenizer gpt2 needs {flag}",
                                        "pass the GPT-2 vocab.json and merges.txt files"))
            else:
                problems.extend(_readable_file(path, flag))
        if spec.tokenizer_dir:
            problems.append(Problem("--tokenizer-dir is for --tokenizer hf", "drop it, or use --tokenizer hf"))
    else:
        if not spec.tokenizer_dir:
            problems.append(Problem("--tokenizer hf needs --tokenizer-dir",
                                    "pass a directory that holds tokenizer.json"))
        elif not os.path.isdir(spec.tokenizer_dir):
            problems.append(Problem(f"tokenizer directory {spec.tokenizer_dir} does not exist"))
        else:
            problems.extend(_readable_file(os.path.join(spec.tokenizer_dir, "tokenizer.json"), "--tokenizer-dir",
                                           hint="only fast tokenizers (tokenizer.json) are supported"))
        if spec.vocab_file or spec.merge_file:
            problems.append(Problem("--vocab-file/--merge-file are for --tokenizer gpt2",
                                    "drop them, or use --tokenizer gpt2"))
    return problems


def build_tokenizer(spec: TokenizerSpec) -> TextTokenizer:
    """Build the tokenizer, or raise UserError saying what is wrong with its files."""
    problems = check_spec(spec)
    if problems:
        raise UserError(problems)
    if spec.kind == "byte":
        return ByteTokenizer()
    try:
        import tokenizers  # noqa: F401  (the Rust tokenizers package: offline, no transformers)
    except ImportError as err:
        raise UserError(f"--tokenizer {spec.kind} needs the `tokenizers` package ({err})",
                        "pip install tokenizers") from err
    if spec.kind == "gpt2":
        return _build_gpt2(spec)
    return _build_hf_dir(spec)


def _build_gpt2(spec: TokenizerSpec) -> HFTokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab_file, merge_file = str(spec.vocab_file), str(spec.merge_file)
    vocab = _load_json(vocab_file, "--vocab-file")
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
        raise UserError(f"{vocab_file} is not a GPT-2 vocab.json (a JSON object of token → id)")
    # the files are read here, bounded (the Rust reader would wait on a FIFO and read /dev/zero until it aborts)
    merges = _merges(_read_text(merge_file, "--merge-file"), merge_file)
    try:
        model = models.BPE(vocab, merges)
    except Exception as err:  # the Rust side reports malformed files as plain Exception
        raise UserError(f"cannot read GPT-2 BPE files {vocab_file} / {merge_file}: {err}") from err
    tokenizer = Tokenizer(model)
    # GPT-2: byte-level pre-tokenizer with the GPT-2 split regex, no prefix space.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    eod_token = spec.eod_token or GPT2_EOD_TOKEN
    if eod_token not in vocab:
        raise UserError(f"the end-of-document token {eod_token!r} is not in {vocab_file}",
                        "pass --eod-token with a token the vocabulary has")
    return HFTokenizer(tokenizer, eod=vocab[eod_token])


def _build_hf_dir(spec: TokenizerSpec) -> HFTokenizer:
    from tokenizers import Tokenizer

    directory = Path(str(spec.tokenizer_dir))
    text = _read_text(str(directory / "tokenizer.json"), "tokenizer.json")
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as err:
        raise UserError(f"cannot read {directory / 'tokenizer.json'}: {err}") from err
    candidates = [spec.eod_token] if spec.eod_token else [*_configured_eos(directory), *COMMON_EOD_TOKENS]
    for token in candidates:
        token_id = tokenizer.token_to_id(token)
        if token_id is not None:
            return HFTokenizer(tokenizer, eod=token_id)
    raise UserError(f"no end-of-document token found in {directory}: tried {', '.join(map(repr, candidates))}",
                    "pass --eod-token with the token that ends a document")


def _configured_eos(directory: Path) -> list[str]:
    """The eos token named by tokenizer_config.json, if any (a string or {"content": …})."""
    config_path = directory / "tokenizer_config.json"
    if not config_path.is_file():
        return []
    config = _load_json(str(config_path), "tokenizer_config.json")
    eos = config.get("eos_token") if isinstance(config, dict) else None
    if isinstance(eos, dict):
        eos = eos.get("content")
    return [eos] if isinstance(eos, str) else []


def _read_text(path: str, what: str) -> str:
    try:  # a regular file of bounded size, UTF-8
        return untrusted.read_utf8(path, what, MAX_TOKENIZER_FILE_BYTES)
    except UserError as err:
        raise UserError(f"cannot read {what} {path}: {err.problems[0].message}",
                        "give the tokenizer's own files (tokenizer.json; vocab.json and merges.txt)") from None


def _merges(text: str, path: str) -> list[tuple[str, str]]:
    """merges.txt as the tokenizers library reads it (BPE::read_file): a `#version` line skipped, every other
    line two tokens separated by one space."""
    merges = []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, 1):
        line = line.removesuffix("\r")
        if line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise UserError(f"{path} is not a GPT-2 merges.txt: line {number} is not two tokens separated by a space",
                            "give the merges.txt that belongs to the vocab.json")
        merges.append((parts[0], parts[1]))
    return merges


def _load_json(path: str, what: str) -> Any:
    try:  # a regular file of bounded size (a FIFO or /dev/zero is refused), strict JSON
        return untrusted.read_json(path, what, MAX_TOKENIZER_FILE_BYTES)
    except UserError as err:
        raise UserError(f"cannot read {what} {path}: {err.problems[0].message}",
                        "give the tokenizer's own files (tokenizer.json, tokenizer_config.json)") from None


def _readable_file(path: str, flag: str, hint: str = "") -> list[Problem]:
    if not os.path.isfile(path):
        return [Problem(f"{flag}: {path} does not exist or is not a file", hint)]
    if not os.access(path, os.R_OK):
        return [Problem(f"{flag}: {path} is not readable", hint)]
    return []
