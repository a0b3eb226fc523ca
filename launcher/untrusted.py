"""Reading input the launcher does not control: files with a size bound, YAML with bounded work.

Every failure is a UserError naming the file (and line), never a Python exception: a preset, a run directory's
files and --set values are all user input. YAML anchors and aliases are allowed (they are ordinary YAML), but
a document may expand to at most MAX_NODES values, so a few hundred bytes of nested aliases ("billion laughs")
are refused instead of growing into gigabytes wherever the value is later printed or walked.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from launcher.counts import count  # noqa: F401 (untrusted.count: read by many)
from launcher.errors import UserError, clip, shown

MAX_FILE_BYTES = 8 * 1024 * 1024  # a preset or manifest is a few KiB; this only stops runaway reads
MAX_DEPTH = 64  # nesting of mappings and lists; presets use three or four levels
MAX_NODES = 100_000  # values in a document after alias expansion (a data_path blend may list thousands)
# characters of all scalars after alias expansion: one 7 MB string aliased 99,000 times is within MAX_NODES but
# would be 700 GB wherever it is printed or passed on
MAX_EXPANDED_CHARS = 2 * MAX_FILE_BYTES


MAX_LINE_BYTES = 1 << 20  # one line of a log as read; the rest of a longer one is dropped (no log line is a MiB)


class TooLarge(UserError):
    """Input refused for its size (bytes, nesting, values after alias expansion), not for its syntax."""


def _open_regular(path: str | Path, what: str) -> int:
    """A descriptor of a regular file opened for reading; UserError for anything else (missing, a device such
    as /dev/zero, a FIFO, a directory)."""
    name = shown(str(path))
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; the check below refuses it anyway.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UserError(f"{what} {name} does not exist") from None
    except OSError as exc:
        raise UserError(f"cannot read {what} {name}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"cannot read {what} {name}: not a regular file", "give a file, not a directory or device")
    os.set_blocking(fd, True)
    return fd


class Lines:
    """The lines of a regular file of at most `limit` bytes, read as they are needed (memory: one line),
    each at most MAX_LINE_BYTES; `ended_with_newline` tells, after the last line, whether the file did."""

    def __init__(self, path: str | Path, what: str, limit: int = MAX_FILE_BYTES) -> None:
        self.path, self.what, self.limit = path, what, limit
        self.ended_with_newline = True
        self.empty = True

    def _too_large(self) -> UserError:
        return UserError(f"{self.what} {shown(str(self.path))} is larger than {self.limit:,} bytes",
                         "is this the right file?")

    def __iter__(self) -> Iterator[str]:
        fd = _open_regular(self.path, self.what)
        if os.fstat(fd).st_size > self.limit:  # refused before reading a byte of it
            os.close(fd)
            raise self._too_large()
        size = 0
        with os.fdopen(fd, "rb") as handle:
            while True:
                raw = handle.readline(MAX_LINE_BYTES)
                if not raw:
                    return
                size += len(raw)
                if size > self.limit:
                    raise self._too_large()
                self.empty = False
                self.ended_with_newline = raw.endswith(b"\n")
                if not self.ended_with_newline and len(raw) == MAX_LINE_BYTES:
                    while (rest := handle.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                        size += len(rest)  # the rest of an overlong line is skipped, still counted
                        if size > self.limit:  # (a file that grows while read, without a newline)
                            raise self._too_large()
                    size += len(rest)
                    self.ended_with_newline = bool(rest)
                yield raw.decode("utf-8", errors="replace").rstrip("\r\n")


def open_binary(path: str | Path, what: str) -> BinaryIO:
    """A regular file opened for reading bytes (a FIFO, a device or a directory is refused, never waited on)."""
    return os.fdopen(_open_regular(path, what), "rb")


def read_bytes(path: str | Path, what: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; UserError for anything else (missing, a device
    such as /dev/zero, a FIFO, a directory, too big)."""
    name = shown(str(path))
    fd = _open_regular(path, what)
    try:
        info = os.fstat(fd)
        if info.st_size > limit:
            raise UserError(f"{what} {name} is {info.st_size:,} bytes; at most {limit:,} are read",
                            "is this the right file?")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # grew while being read
                raise UserError(f"{what} {name} is larger than {limit:,} bytes", "is this the right file?")
        return b"".join(chunks)
    except OSError as exc:
        raise UserError(f"cannot read {what} {name}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def bytes_or_none(path: str | Path, what: str, limit: int = MAX_FILE_BYTES) -> bytes | None:
    """read_bytes where a file that cannot be read only means "not known" (a checkout's marker, its version file,
    a source to hash): None for a missing one, a link loop, a FIFO, a device, a directory or one over `limit`."""
    try:
        return read_bytes(path, what, limit)
    except UserError:
        return None


def text_or_none(path: str | Path, what: str, limit: int = MAX_FILE_BYTES) -> str | None:
    """bytes_or_none as UTF-8 text; None too for bytes that are not UTF-8."""
    data = bytes_or_none(path, what, limit)
    try:
        return data.decode("utf-8") if data is not None else None
    except UnicodeDecodeError:
        return None


def _utf8(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{name} is not UTF-8 text (byte {exc.start})", "save it as UTF-8 text") from None


def read_utf8(path: str | Path, what: str, limit: int = MAX_FILE_BYTES) -> str:
    """read_bytes, as UTF-8 text."""
    return _utf8(read_bytes(path, what, limit), f"{what} {shown(str(path))}")


def read_stream_utf8(stream: BinaryIO, what: str, limit: int = MAX_FILE_BYTES) -> str:
    """At most `limit` bytes of an open stream (standard input), as UTF-8 text; UserError for more, for bytes that
    are not UTF-8, or for a stream that cannot be read (a directory given as `< DIR`)."""
    try:
        data = stream.read(limit + 1)
    except OSError as exc:
        raise UserError(f"cannot read {what}: {exc.strerror or exc}", "give a file's text") from None
    if len(data) > limit:
        raise TooLarge(f"{what} is larger than {limit:,} bytes", "is this the right file?")
    return _utf8(data, what)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{clip(text, 40)} is beyond a float's range")
    return value


MAX_INT_DIGITS = 30  # an iteration count, a pid, a byte count: no record holds a larger integer


def _bounded_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS and len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text):,} digits")
    return int(text)


def _too_deep(value: Any, text: str | None = None) -> bool:
    if text is not None and text.count("[") + text.count("{") <= MAX_DEPTH:
        return False  # no deeper than the brackets it holds (a typical record: a few dozen)
    # only containers are visited (a record is mostly strings and numbers: a manifest's argv, a metrics line)
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack += [(child, depth + 1) for child in children if isinstance(child, (dict, list))]
    return False


_STRICT = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite, parse_int=_bounded_int)
_SPACE = re.compile(r"[ \t\n\r]*")


def loads_json(text: str | bytes, what: str) -> Any:
    """Strict JSON from input the launcher does not control: NaN, Infinity, numbers beyond a float (1e400) or
    integers of more than MAX_INT_DIGITS digits, and nesting deeper than MAX_DEPTH are refused (UserError), so
    every value read can be written again as valid JSON and used in arithmetic."""
    try:
        if isinstance(text, bytes):
            text = text.decode(json.detect_encoding(text), "surrogatepass")  # as json.loads reads bytes
        value = _STRICT.decode(text)
    except RecursionError:
        raise UserError(f"{what} is not valid JSON: nesting deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError and the refusals above
        raise UserError(f"{what} is not valid JSON: {clip(str(exc), 120)}", "is this the right file?") from None
    if _too_deep(value, text):
        raise UserError(f"{what} is not valid JSON: nesting deeper than {MAX_DEPTH} levels")
    return value


def json_object_head(text: str, what: str, wanted: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The members of a JSON object that are whole in `text`, its first part (read_head of a larger file), each
    value strict as loads_json reads it; the object's cut end is not an error, its damaged start is. With
    `wanted`, reading stops once those members are found (the rest is not parsed)."""
    members: dict[str, Any] = {}
    at = _SPACE.match(text).end()  # type: ignore[union-attr]
    if not text.startswith("{", at):
        raise UserError(f"{what} is not a JSON object", "is this the right file?")
    at += 1
    try:
        while True:
            at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
            if text.startswith("}", at) or at >= len(text):
                return members
            key, at = _STRICT.raw_decode(text, at)
            at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
            if not text.startswith(":", at):
                return members
            value, at = _STRICT.raw_decode(text, _SPACE.match(text, at + 1).end())  # type: ignore[union-attr]
            if not isinstance(key, str) or _too_deep(value):
                return members
            members[key] = value
            if wanted and wanted <= members.keys():
                return members
            at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
            if not text.startswith(",", at):
                return members
            at += 1
    except (ValueError, RecursionError):  # the cut (or a damaged member): the members before it stand
        return members


def read_json(path: str | Path, what: str, limit: int = MAX_FILE_BYTES) -> Any:
    """A regular file of at most `limit` bytes holding strict JSON (loads_json)."""
    return loads_json(read_utf8(path, what, limit), f"{what} {shown(str(path))}")


def read_head(path: str | Path, what: str, size: int) -> tuple[bytes, int]:
    """The first `size` bytes of a regular file and the file's whole size (a FIFO or a device is refused)."""
    fd = _open_regular(path, what)
    try:
        whole = os.fstat(fd).st_size
        chunks, left = [], size
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), whole
    except OSError as exc:
        raise UserError(f"cannot read {what} {shown(str(path))}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_tail(path: str | Path, what: str, size: int) -> bytes:
    """The last `size` bytes of a regular file (a FIFO, a device or a directory is refused, never waited on)."""
    fd = _open_regular(path, what)
    try:
        end = os.fstat(fd).st_size
        os.lseek(fd, max(0, end - size), os.SEEK_SET)
        chunks, left = [], size
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise UserError(f"cannot read {what} {shown(str(path))}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


class _Constructor(yaml.constructor.SafeConstructor):
    """SafeConstructor that refuses repeated keys (or, where `repeated` is a list, records each and keeps the later
    value, as PyYAML does), and turns a value PyYAML cannot build (2024-13-45 as a date, `!!int abc`, a 5,000-digit
    number) into a YAML error with its position."""

    repeated: list[tuple[str, int, int]] | None = None

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except (yaml.YAMLError, RecursionError):
            raise
        except Exception as exc:  # noqa: BLE001 - any constructor failure is the document's fault
            value = node.value if isinstance(node, yaml.ScalarNode) else node.tag
            # A ValueError says why (month must be in 1..12); anything else is PyYAML's internals.
            why = f" ({clip(str(exc).split(';')[0], 100)})" if isinstance(exc, ValueError) else ""
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {shown(value)} as {node.tag.rsplit(':', 1)[-1]}{why}",
                node.start_mark) from None

    def construct_mapping(self, node, deep=False):
        # Only the keys written in this mapping: a key that overrides one merged in with `<<: *base` is fine.
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    earlier = first.setdefault(key, key_node)
                except TypeError:
                    continue  # an unhashable key: the base class reports it
                if earlier is not key_node and self.repeated is not None:  # the later value wins, and is told
                    self.repeated.append((shown(key), earlier.start_mark.line + 1, key_node.start_mark.line + 1))
                elif earlier is not key_node:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {shown(key)} appears twice in one mapping, at line "
                                    f"{earlier.start_mark.line + 1} and line {key_node.start_mark.line + 1}",
                        key_node.start_mark)
        return super().construct_mapping(node, deep)


# libyaml's parser when PyYAML has it: the pure-Python scanner takes ~1.4 µs a character (11 s for a file at
# MAX_FILE_BYTES); the C one reads the same in a fraction of a second. Both refuse control characters.
_Parser: Any = getattr(getattr(yaml, "cyaml", None), "CParser", None) if yaml.__with_libyaml__ else None


if _Parser is not None:
    class _Loader(_Parser, _Constructor, yaml.resolver.Resolver):
        def __init__(self, stream: str) -> None:
            _Parser.__init__(self, stream)
            _Constructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
else:  # pragma: no cover - PyYAML without libyaml
    class _Loader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser,  # type: ignore[no-redef]
                  yaml.composer.Composer, _Constructor, yaml.resolver.Resolver):
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.composer.Composer.__init__(self)
            _Constructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)


def _refuse_deep(root: yaml.Node, source: str) -> None:
    """Nesting deeper than MAX_DEPTH is refused (walked without recursion: the document is still untrusted)."""
    stack = [(root, 1)]
    deepest: dict[int, int] = {}  # a node shared through aliases is walked again only when reached deeper
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:  # a bound, not a syntax error: a reader that falls back to another format stops here
            raise TooLarge(f"{source} is not valid YAML at line {node.start_mark.line + 1}: nesting deeper than "
                           f"{MAX_DEPTH} levels", "is this the right file?")
        if deepest.get(id(node), 0) >= depth:
            continue
        deepest[id(node)] = depth
        if isinstance(node, yaml.SequenceNode):
            stack += [(child, depth + 1) for child in node.value]
        elif isinstance(node, yaml.MappingNode):
            stack += [(child, depth + 1) for pair in node.value for child in pair]


def _expanded_size(root: yaml.Node) -> tuple[int, int]:
    """(values, characters of scalars) in the document once every alias is expanded; stops counting past
    MAX_NODES values or MAX_EXPANDED_CHARS characters."""
    sizes: dict[int, tuple[int, int]] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> tuple[int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise yaml.composer.ComposerError(None, None, "an alias refers to a value that contains it",
                                              node.start_mark)
        open_nodes.add(key)
        total, chars = 1, 0
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children, chars = [], len(str(node.value))
        for child in children:
            values, text = size(child)
            total, chars = total + values, chars + text
            if total > MAX_NODES or chars > MAX_EXPANDED_CHARS:
                break
        open_nodes.discard(key)
        sizes[key] = (total, chars)
        return total, chars

    return size(root)


def load_yaml(text: str, source: str, repeated: list[tuple[str, int, int]] | None = None) -> Any:
    """One YAML document from user input; UserError (with the line) for anything PyYAML or the bounds refuse.
    A key repeated in one mapping is refused, unless `repeated` is a list: then each (key, first line, later line)
    is appended to it and the later value is kept (for files another program reads with PyYAML's own loader)."""
    loader = None
    try:
        loader = _Loader(text)  # its reader already refuses control characters
        loader.repeated = repeated
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_deep(node, source)
        values, chars = _expanded_size(node)
        if values > MAX_NODES:
            raise TooLarge(f"{source} expands to more than {MAX_NODES:,} values (aliases nested in aliases?)",
                            "write the values out, or use fewer nested aliases")
        if chars > MAX_EXPANDED_CHARS:
            raise TooLarge(f"{source} expands to more than {MAX_EXPANDED_CHARS:,} characters of values (a long "
                            "value repeated through aliases?)", "write the values out, or use fewer aliases")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        reason = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc).splitlines()[0]
        lines = text.splitlines()
        line = lines[where.line] if where is not None and where.line < len(lines) else ""
        tab = "\t" in reason or "\t" in line  # PyYAML's "found character '\t' that cannot start any token"
        hint = ("YAML indents with spaces, never tabs: use spaces" if tab else
                "keep one of them: a mapping holds each key once (later settings go under the first)"
                if "appears twice" in reason else "")
        if "nesting depth" in reason:  # libyaml's own limit (1,000 levels): a bound, as MAX_DEPTH is
            raise TooLarge(f"{source} is not valid YAML{at}: nesting deeper than {MAX_DEPTH} levels") from None
        raise UserError(f"{source} is not valid YAML{at}: {reason}", hint) from None
    except RecursionError:
        raise TooLarge(f"{source} is not valid YAML: nesting deeper than {MAX_DEPTH} levels") from None
    finally:
        if loader is not None:
            loader.dispose()
