"""prepare-data under hostile input and concurrency: one writer per output prefix (a lock naming the holder),
and a document too long to tokenize in bounded memory (a 1 GB line) is reported by file:line, not read."""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import subprocess
import sys
import threading
from importlib.util import find_spec
from pathlib import Path

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


# ---- a full disk ----

REPO = Path(__file__).resolve().parents[2]


def _corpus(path: Path, documents: int = 3000) -> Path:
    path.write_text("".join(json.dumps({"text": f"document {n} " + "words " * 20}) + "\n" for n in range(documents)))
    return path


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB file system, so the dataset (≈ 400 KB) fills it part-way (root only; skipped elsewhere)."""
    mount = tmp_path / "full"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True,
                          text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.megatron
@pytest.mark.skipif(find_spec("megatron") is None or find_spec("torch") is None, reason="needs megatron-core")
def test_prepare_data_onto_a_full_disk_exits_2_and_leaves_nothing(tmp_path, tiny_tmpfs):
    corpus = _corpus(tmp_path / "corpus.jsonl")
    result = subprocess.run([sys.executable, "-m", "launcher", "prepare-data", str(corpus), "--output-prefix",
                             str(tiny_tmpfs / "out"), "--tokenizer", "byte", "--workers", "1", "--no-progress"],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert "error: cannot write the dataset" in result.stderr and "No space left on device" in result.stderr
    assert "hint: free space" in result.stderr
    assert os.listdir(tiny_tmpfs) == []  # no .bin/.idx, no temporaries, and the lock is gone


@pytest.mark.megatron
@pytest.mark.skipif(find_spec("megatron") is None or find_spec("torch") is None, reason="needs megatron-core")
def test_a_full_disk_after_the_dataset_is_written_leaves_no_output_and_no_lock(tmp_path, monkeypatch):
    """The last write (the metadata) fails: the .bin/.idx written so far are removed, the lock released."""
    from launcher.dataprep import prepare

    def no_space(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(prepare, "_write_meta", no_space)
    corpus = _corpus(tmp_path / "corpus.jsonl", documents=20)
    with pytest.raises(UserError) as refused:
        prepare_data([str(corpus)], str(tmp_path / "out"), TokenizerSpec("byte"), workers=1, show_progress=False)
    problem = refused.value.problems[0]
    assert "No space left on device" in problem.message and problem.hint.startswith("free space")
    assert sorted(os.listdir(tmp_path)) == ["corpus.jsonl"]


def test_a_lock_that_cannot_be_created_on_a_full_disk_is_a_clean_refusal(tmp_path, monkeypatch):
    from launcher import lock

    real_open = os.open

    def no_space(path, *args, **kwargs):
        if ".lock" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(lock.os, "open", no_space)
    with pytest.raises(UserError) as refused:
        lock.hold(tmp_path / "out.lock", "output prefix out", "wait")
    assert "No space left on device" in refused.value.problems[0].message
    assert refused.value.problems[0].hint == "free space on that file system"


def test_dataset_temporaries_are_new_files_never_a_planted_link(tmp_path):
    from launcher.dataprep import prepare

    temps = prepare._temp_paths(str(tmp_path / "out"))
    assert temps != prepare._temp_paths(str(tmp_path / "out"))  # not guessable ahead
    target = tmp_path / "victim"
    target.write_text("keep")
    os.symlink(target, temps["bin"])
    with pytest.raises(UserError, match="exists already"):
        prepare._reserve(temps)
    assert target.read_text() == "keep"


# ---- the corpus is read as every input is: regular files only, bounded per line and in all ----

def _batches(path, unit="line"):
    return [u for batch in reader.iter_batches(str(path), unit) for u in batch.units]


def test_a_fifo_as_corpus_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "corpus.jsonl"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            _batches(fifo)
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - checked below
            outcome.append(error)

    worker = threading.Thread(target=read, daemon=True)  # a reader that waits for a writer would wait forever
    worker.start()
    worker.join(timeout=30)
    assert outcome, "the reader waited on the FIFO"
    assert isinstance(outcome[0], UserError) and "not a regular file" in outcome[0].problems[0].message


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_as_corpus_is_refused_not_read_forever(device):
    with pytest.raises(UserError, match="not a regular file"):
        _batches(device, "file")


def test_a_corpus_that_grows_while_read_is_refused_not_read_forever(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "BATCH_UNITS", 1)  # a batch per line, so the file can grow between them
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"one\ntwo\n")
    with pytest.raises(UserError, match="grew while it was read"):
        for number, _ in enumerate(reader.iter_batches(str(corpus), "line")):
            assert number < 100, "still reading what was appended after the file was opened"
            with open(corpus, "ab") as handle:
                handle.write(b"more\n" * 1000)


def test_a_huge_line_is_skipped_in_bounded_pieces_and_the_next_lines_are_read(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "MAX_DOCUMENT_BYTES", 1000)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b'{"text": "a"}\n' + b"x" * (3 << 20) + b'\n{"text": "b"}\n')
    units = _batches(corpus)
    assert [(u.line, u.too_long, u.raw) for u in units] == [(1, False, b'{"text": "a"}\n'), (2, True, b""),
                                                           (3, False, b'{"text": "b"}\n')]


def test_a_corpus_is_read_through_the_bounded_reader(tmp_path, monkeypatch):
    """One reader for every input: iter_batches opens its file through launcher.untrusted, not open()."""
    from launcher import untrusted

    opened = []
    real = untrusted.open_binary
    monkeypatch.setattr(untrusted, "open_binary", lambda path, what: opened.append(path) or real(path, what))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a\nb\n")
    assert [u.raw for u in _batches(corpus)] == [b"a", b"b"]
    assert opened == [str(corpus)]


# ---- a .gz is read within a bound of what it inflates to: a gzip bomb is refused, not read for an hour ----

def _gzip_of_zeros(path: Path, mebibytes: int) -> Path:
    import gzip

    with gzip.open(path, "wb", compresslevel=9) as handle:
        for _ in range(mebibytes):
            handle.write(b"\0" * (1 << 20))
    return path


@pytest.mark.parametrize("unit", ["file", "line", "paragraph"])
def test_a_gzip_bomb_is_refused_once_it_inflates_past_its_bound(tmp_path, monkeypatch, unit):
    monkeypatch.setattr(reader, "MIN_INFLATE_LIMIT", 8 << 20)
    bomb = _gzip_of_zeros(tmp_path / "corpus.txt.gz", 64)  # 64 KB that inflates to 64 MiB, ≈ 1,000x
    inflated: list[int] = []
    real = reader._Inflated.readinto
    monkeypatch.setattr(reader._Inflated, "readinto",
                        lambda self, buffer: inflated.append(real(self, buffer)) or inflated[-1])
    with pytest.raises(UserError) as refused:
        _batches(bomb, unit)
    problem = refused.value.problems[0]
    assert "inflates to more than 8,388,608 bytes" in problem.message and "gzip bomb" in problem.message
    assert "gunzip" in problem.hint
    assert sum(inflated) <= (8 << 20) + 1  # it stopped at the bound, not at the end of the stream


def test_the_bound_of_a_gzip_grows_with_its_compressed_size(tmp_path, monkeypatch):
    """MAX_INFLATE_RATIO times the file: a large corpus that compresses as text does is read whole."""
    import gzip

    monkeypatch.setattr(reader, "MIN_INFLATE_LIMIT", 1 << 10)
    lines = b"".join(b'{"text": "%d %s"}\n' % (n, os.urandom(6).hex().encode()) for n in range(50_000))
    corpus = tmp_path / "corpus.jsonl.gz"
    corpus.write_bytes(gzip.compress(lines))
    assert len(lines) > 2 * (1 << 10)  # past the floor: only the ratio lets it through
    assert len(_batches(corpus)) == 50_000
    assert reader.inflate_limit(corpus.stat().st_size) == reader.MAX_INFLATE_RATIO * corpus.stat().st_size


def test_concatenated_gzip_members_count_towards_one_bound(tmp_path, monkeypatch):
    import gzip

    monkeypatch.setattr(reader, "MIN_INFLATE_LIMIT", 4 << 20)
    member = gzip.compress(b"x\n" * (1 << 19), 9)  # 1 MiB each
    corpus = tmp_path / "corpus.txt.gz"
    corpus.write_bytes(member * 8)
    with pytest.raises(UserError, match="inflates to more than 4,194,304 bytes"):
        _batches(corpus, "line")


def test_prepare_data_on_a_gzip_bomb_exits_2_quickly_with_a_hint(tmp_path):
    bomb = _gzip_of_zeros(tmp_path / "corpus.jsonl.gz", 1024)  # 1 MB inflating to 1 GiB, past the 256 MiB floor
    result = subprocess.run([sys.executable, "-m", "launcher", "prepare-data", str(bomb), "--output-prefix",
                             str(tmp_path / "out"), "--tokenizer", "byte", "--workers", "1", "--no-progress"],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 2, result.stderr
    assert "gzip bomb" in result.stderr and "hint:" in result.stderr and "Traceback" not in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["corpus.jsonl.gz"]


@pytest.mark.parametrize("unit", ["line", "paragraph"])
def test_a_line_with_no_end_in_sight_stops_the_reading_at_once(tmp_path, monkeypatch, unit):
    """A sparse 10 GB file, a binary dump: no line end within MAX_SKIPPED_BYTES past the document bound, so the
    file is not read on to its end to find the next line; the error says the rest was not read."""
    monkeypatch.setattr(reader, "MAX_DOCUMENT_BYTES", 1000)
    monkeypatch.setattr(reader, "MAX_SKIPPED_BYTES", 4 << 20)
    corpus = tmp_path / "corpus.txt"
    with open(corpus, "wb") as handle:
        handle.write(b"first\n\n")
        handle.truncate(10 << 30)  # 10 GB of NUL bytes, no newline: read at memory speed, minutes in all
    read: list[int] = []
    real = reader._AsOpened.readinto
    monkeypatch.setattr(reader._AsOpened, "readinto", lambda self, buffer: read.append(real(self, buffer)) or read[-1])
    units = _batches(corpus, unit)
    assert [(u.line, u.too_long, u.rest_unread) for u in units] == [(1, False, False), (3, True, True)]
    assert sum(read) < 16 << 20
    with pytest.raises(reader.BadDocument, match="the rest of the file was not read"):
        reader.unit_text(units[-1], False, "text")


def test_an_overlong_line_that_ends_is_skipped_and_reading_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "MAX_DOCUMENT_BYTES", 1000)
    monkeypatch.setattr(reader, "MAX_SKIPPED_BYTES", 4 << 20)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b"x" * (3 << 20) + b'\n{"text": "b"}\n')
    units = _batches(corpus)
    assert [(u.line, u.too_long, u.rest_unread) for u in units] == [(1, True, False), (2, False, False)]
    with pytest.raises(reader.BadDocument) as error:
        reader.unit_text(units[0], True, "text")
    assert "not read" not in str(error.value)


@pytest.mark.parametrize("line", [b'{"text": ' + b"9" * 100_000 + b"}", b'{"text": "a", "n": -' + b"9" * 5000 + b"}"])
def test_a_json_number_too_long_for_python_is_a_bad_document_not_a_crash(line):
    with pytest.raises(reader.BadDocument, match="a number of more than 4,300 digits"):
        reader.unit_text(reader.Unit(1, line), True, "text")
