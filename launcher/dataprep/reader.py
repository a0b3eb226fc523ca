"""Split input files into document units for the tokenizer workers; decoding and parsing happen in the workers.

The parent reads raw bytes (cheap) and ships batches of `Unit`s; a worker decodes, parses JSON, pulls the
text field and tokenizes, so an error names the file and line where it happened.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from launcher import untrusted
from launcher.errors import UserError, shown

JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
TEXT_UNITS = ("file", "line", "paragraph")
BATCH_BYTES = 1 << 20  # ~1 MiB of input per worker task: large enough to amortise IPC, small enough to balance
BATCH_UNITS = 512
# One document's bytes: a book is ~1 MB. A longer one (a 1 GB file with no newline) is reported, not read:
# tokenizing it would need ~10x its size in memory at once.
MAX_DOCUMENT_BYTES = 16 << 20
# How far past MAX_DOCUMENT_BYTES a line is read to find its end. A corpus with no newline in gigabytes (a sparse
# file, a binary dump) is not read on to the end for the next line: its first error is reported at once.
MAX_SKIPPED_BYTES = 256 << 20
# What a .gz may inflate to: text and JSON lines compress 3-10x, deflate at most ~1,030x (a gzip bomb: 1 GB of
# zeros that inflates to 1 TB, an hour of reading). The work stays proportional to the file the user gave:
# at most MAX_INFLATE_RATIO times its size (and MIN_INFLATE_LIMIT for a small file), past that an error.
MAX_INFLATE_RATIO = 100
MIN_INFLATE_LIMIT = 256 << 20


@dataclass(frozen=True)
class Unit:
    """One would-be document: raw bytes and where they came from (line is 1-based)."""

    line: int
    raw: bytes
    too_long: bool = False  # longer than MAX_DOCUMENT_BYTES: raw is empty, the rest was skipped unread
    rest_unread: bool = False  # with too_long: no line end within MAX_SKIPPED_BYTES; the file was not read on

@dataclass(frozen=True)
class Batch:
    path: str
    is_json: bool
    units: tuple[Unit, ...]
    end_offset: int  # bytes of the (compressed) file consumed when this batch was cut, for the progress bar


def is_json_input(path: str) -> bool:
    name = path.removesuffix(".gz")
    return name.lower().endswith(JSON_SUFFIXES)


class _AsOpened(io.RawIOBase):
    """A regular file read up to the size it had when opened (the total bound: a corpus someone appends to, or
    one that grows as it is read, is not read forever); more bytes past that end are an error, not data."""

    def __init__(self, path: str) -> None:
        self._file = untrusted.open_binary(path, "input")  # a FIFO or a device is refused, never waited on
        self.path = path
        self.size = self.left = os.fstat(self._file.fileno()).st_size
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.left <= 0:
            if self._file.read(1):
                raise UserError(f"input {shown(self.path)} grew while it was read",
                                "prepare a file that no one is writing (a copy of it)")
            return 0
        data = self._file.read1(min(len(buffer), self.left))  # type: ignore[attr-defined]
        count = len(data)
        memoryview(buffer)[:count] = data
        self.left -= count
        self.consumed += count
        return count

    def close(self) -> None:
        self._file.close()
        super().close()


class _Inflated(io.RawIOBase):
    """The inflated bytes of a .gz, at most `limit` of them: more is an error (a gzip bomb), never read on."""

    def __init__(self, compressed: BinaryIO, path: str, limit: int) -> None:
        self._gzip = gzip.GzipFile(fileobj=compressed)
        self.path, self.limit, self.inflated = path, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        count = self._gzip.readinto(view[:max(1, min(len(view), self.limit + 1 - self.inflated))])
        self.inflated += count
        if self.inflated > self.limit:
            raise UserError(f"input {shown(self.path)} inflates to more than {self.limit:,} bytes (the bound of "
                            f"a .gz: {MAX_INFLATE_RATIO}x its size, at least {MIN_INFLATE_LIMIT >> 20} MiB): a gzip "
                            "bomb, or data too repetitive to be a corpus",
                            "if it is what you mean to train on, decompress it (gunzip -k) and prepare the plain "
                            "file; its size then bounds the work")
        return count

    def close(self) -> None:
        self._gzip.close()
        super().close()


def inflate_limit(compressed_size: int) -> int:
    return max(MIN_INFLATE_LIMIT, MAX_INFLATE_RATIO * compressed_size)


def iter_batches(path: str, text_unit: str) -> Iterator[Batch]:
    """Batches of units of one file: one per JSON line, or per file / line / blank-line paragraph for text.
    Read as every input is (launcher.untrusted): a regular file only, each line bounded (MAX_DOCUMENT_BYTES, the
    rest skipped unread), in all at most the size it had when opened (a .gz: at most inflate_limit of that)."""
    is_json = is_json_input(path)
    try:
        with _AsOpened(path) as raw, io.BufferedReader(raw, 1 << 20) as buffered:
            stream: BinaryIO = buffered
            if path.endswith(".gz"):
                stream = io.BufferedReader(_Inflated(buffered, path, inflate_limit(raw.size)), 1 << 20)
            units = _json_units(stream) if is_json else _text_units(stream, text_unit)
            pending: list[Unit] = []
            size = 0
            for unit in units:
                pending.append(unit)
                size += len(unit.raw)
                if size >= BATCH_BYTES or len(pending) >= BATCH_UNITS:
                    yield Batch(path, is_json, tuple(pending), raw.consumed)
                    pending, size = [], 0
            yield Batch(path, is_json, tuple(pending), raw.consumed)
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        # Not gzip at all, or cut short (a copy that stopped): the documents so far are not the file.
        raise UserError(f"{path} is not a complete gzip file: {err}",
                        "check the file (gzip -t); re-download or re-copy it") from None
    except OSError as err:  # EIO, a file gone stale on NFS: the input, not the launcher
        raise UserError(f"cannot read input {shown(path)}: {err.strerror or err}", "check the file") from None


def _lines(stream: BinaryIO) -> Iterator[tuple[int, bytes | None, bool]]:
    """(line number, line, rest unread) of a stream, each line read with a bound: None for a line longer than
    MAX_DOCUMENT_BYTES (its rest is skipped in bounded pieces, never held). One with no end within
    MAX_SKIPPED_BYTES more is the last: rest unread, the stream is not read on."""
    number = 0
    while line := stream.readline(MAX_DOCUMENT_BYTES + 1):
        number += 1
        if len(line) > MAX_DOCUMENT_BYTES and not line.endswith(b"\n"):
            skipped = 0
            while (rest := stream.readline(1 << 20)) and not rest.endswith(b"\n"):
                skipped += len(rest)
                if skipped > MAX_SKIPPED_BYTES:
                    yield number, None, True
                    return
            yield number, None, False
        else:
            yield number, line, False


def _json_units(stream: BinaryIO) -> Iterator[Unit]:
    for number, line, unread in _lines(stream):
        if line is None:
            yield Unit(number, b"", too_long=True, rest_unread=unread)
        elif line.strip():  # blank lines (e.g. a trailing newline) are not documents
            yield Unit(number, line)


def _text_units(stream: BinaryIO, text_unit: str) -> Iterator[Unit]:
    if text_unit == "file":
        whole = stream.read(MAX_DOCUMENT_BYTES + 1)
        yield Unit(1, b"", too_long=True) if len(whole) > MAX_DOCUMENT_BYTES else Unit(1, whole)
        return
    if text_unit == "line":
        for number, line, unread in _lines(stream):
            if line is None:
                yield Unit(number, b"", too_long=True, rest_unread=unread)
            elif line.strip():
                yield Unit(number, line.rstrip(b"\r\n"))
        return
    # paragraph: blank lines separate documents; the line number is the paragraph's first line
    paragraph: list[bytes] = []
    first, size, too_long, unread = 0, 0, False, False
    for number, line, stopped in _lines(stream):
        unread = stopped  # the last line read: a paragraph it ends is the last one
        if line is None or line.strip():
            if not paragraph and not too_long:
                first = number
            size += len(line) if line is not None else MAX_DOCUMENT_BYTES + 1
            too_long = too_long or size > MAX_DOCUMENT_BYTES
            if not too_long and line is not None:
                paragraph.append(line)
            else:
                paragraph = []
        elif paragraph or too_long:
            yield Unit(first, b"", too_long=True) if too_long else Unit(first, b"".join(paragraph).rstrip(b"\r\n"))
            paragraph, size, too_long = [], 0, False
    if paragraph or too_long:
        yield Unit(first, b"", too_long=True, rest_unread=unread) if too_long else \
            Unit(first, b"".join(paragraph).rstrip(b"\r\n"))


class BadDocument(Exception):
    """A unit that cannot be a document (not UTF-8, not JSON, no text field); the message is for the user."""


def unit_text(unit: Unit, is_json: bool, json_key: str) -> str:
    """The document text of a unit; raises BadDocument with a message fit for the user."""
    if unit.too_long:
        rest = (f"; no line end within {MAX_SKIPPED_BYTES >> 20} MiB after it, so the rest of the file was not read"
                if unit.rest_unread else "")
        raise BadDocument(f"longer than {MAX_DOCUMENT_BYTES:,} bytes (one document){rest}; split it into documents "
                          "(a line each, or --text-unit line/paragraph)")
    try:
        text = unit.raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadDocument(f"not UTF-8 ({err.reason} at byte {err.start})") from None
    if not is_json:
        return text
    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        raise BadDocument(f"not a JSON line ({err.msg}, column {err.colno})") from None
    except RecursionError:
        raise BadDocument("not a JSON line we can read (nested too deeply)") from None
    except ValueError:  # not JSONDecodeError: an integer of more digits than Python converts
        raise BadDocument(f"not a JSON line we can read (a number of more than "
                          f"{sys.get_int_max_str_digits():,} digits)") from None
    if not isinstance(record, dict):
        raise BadDocument(f"expected a JSON object with a {json_key!r} field, got {type(record).__name__}")
    if json_key not in record:
        keys = ", ".join(map(repr, list(record)[:8])) or "none"
        raise BadDocument(f"no {json_key!r} field (fields: {keys})")
    value = record[json_key]
    if not isinstance(value, str):
        raise BadDocument(f"field {json_key!r} is {type(value).__name__}, not a string")
    return value


def input_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


