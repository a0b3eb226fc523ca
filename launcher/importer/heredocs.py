"""Here-documents as bash reads them, where tree-sitter-bash 0.25 reads them otherwise.

Bash ends a here-document at the first line that is its word (after tabs, for `<<-`), or at the end of the text
(it warns "here-document delimited by end-of-file" and takes the rest as the document). The grammar ends one at a
line that only begins with the word (`<<TRAINING` and a body line `TRAINING_ARGS=(`) and then reads the rest of
the document as commands; and without any end it takes the last line for one. Here the text is written so that the
grammar reads each document as bash does: a word that a body line begins with is lengthened (on the `<<` and on the
line that ends the document; the document's text is unchanged), and a document that no line ends is ended after the
last line. Which `<<` are here-documents is the grammar's call (a `<<'PY'` inside a quoted string is none): a cheap
scan of the text picks the suspects, and one parse settles them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

HEREDOC_START = re.compile(rb"(?<!<)<<(-?)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_.-]*)\2")


def scan(src: bytes) -> Iterator[tuple[re.Match[bytes], int, int, bool]]:
    """(its `<<WORD`, body start, body end, whether a line WORD ends it) of each here-document, roughly as bash finds
    them (a `<<WORD` on a line, the body from the next line to a line that is WORD, or to the end of the text)."""
    at = 0
    while True:
        match = HEREDOC_START.search(src, at)
        if match is None:
            return
        start = src.find(b"\n", match.end())
        if start < 0:
            return
        end_match = _ending(match.group(3), bool(match.group(1))).search(src, start + 1)
        end = end_match.end() if end_match else len(src)
        yield match, start + 1, end, end_match is not None
        at = end


def _ending(word: bytes, dash: bool) -> re.Pattern[bytes]:
    return re.compile(rb"^" + (rb"\t*" if dash else b"") + re.escape(word) + rb"[ \t]*$", re.M)


def _suspect(src: bytes) -> bool:
    """Whether a here-document may be read otherwise by the grammar: one no line ends, or one with a body line that
    begins with its word."""
    for match, start, end, ended in scan(src):
        if not ended:
            return True
        word = match.group(3)
        if re.search(rb"^\t*" + re.escape(word) + rb"[^\s]", src[start:end], re.M):
            return True
    return False


_QUERY: Any = None


def _heredocs(tree: Any) -> list[tuple[Any, Any]]:
    """(heredoc_start, heredoc_end) of each here-document the grammar found, in the text's order."""
    global _QUERY
    import tree_sitter

    if _QUERY is None:
        _QUERY = tree_sitter.Query(tree.language, "(heredoc_redirect (heredoc_start) @s (heredoc_end) @e)")
    found = [(m["s"][0], m["e"][0]) for _, m in tree_sitter.QueryCursor(_QUERY).matches(tree.root_node)
             if m.get("s") and m.get("e")]
    return sorted(found, key=lambda pair: pair[0].start_byte)


def as_bash_reads(src: bytes, parse: Callable[[bytes], Any]) -> tuple[bytes, tuple[int, str] | None]:
    """The text with its here-documents written as the grammar reads them the way bash does; with (the line of its
    `<<`, the word wanted) of a document that no line ends, if one does not."""
    if b"<<" not in src or not _suspect(src):
        return src, None
    edits: list[tuple[int, int, bytes]] = []  # (start, end, new text), apart
    unended: tuple[int, str] | None = None
    found = _heredocs(parse(src))
    for start, end in found:
        quoted = src[start.start_byte:start.end_byte]
        word = quoted.replace(b"'", b"").replace(b'"', b"").replace(b"\\", b"")
        if not re.fullmatch(rb"[A-Za-z_][A-Za-z0-9_.-]*", word):
            continue
        dash = src[max(start.start_byte - 8, 0):start.start_byte].rstrip().endswith(b"<<-")
        body = src.find(b"\n", start.end_byte) + 1
        if body <= 0:
            continue
        stop = _ending(word, dash).search(src, body)
        at = start.start_byte + quoted.find(word)
        if stop is None:  # bash takes the rest of the text (later `<<` are the document's): ended after it
            longer = _longer(word, src[body:])
            unended = (src.count(b"\n", 0, start.start_byte) + 1, word.decode("utf-8", "replace"))
            src = src[:at] + longer + src[at + len(word):]
            src += (b"" if src.endswith(b"\n") else b"\n") + longer + b"\n"
            break
        if src.count(b"\n", 0, end.start_byte) == src.count(b"\n", 0, stop.start()) and \
                src[end.end_byte:end.end_byte + 1] in (b"", b"\n", b" ", b"\t"):
            continue  # the grammar ends it where bash does
        longer = _longer(word, src[body:stop.start()])
        edits.append((at, at + len(word), longer))
        at = stop.start() + len(stop.group(0)) - len(stop.group(0).lstrip(b"\t"))
        edits.append((at, at + len(word), longer))
    for begin, finish, text in sorted(edits, reverse=True):  # the unended one, if any, lies after all of them
        src = src[:begin] + text + src[finish:]
    if unended is None and not found:
        return _ended_by_scan(src)
    return src, unended


def _ended_by_scan(src: bytes) -> tuple[bytes, tuple[int, str] | None]:
    """Where the grammar found no here-document at all (a text it cannot read), the scan's last one that no line
    ends, unless its `<<` sits in a comment or a string of its line."""
    entries = list(scan(src))  # only the last can run to the end of the text
    last = entries[-1] if entries else None
    if last is None or last[3]:
        return src, None
    match = last[0]
    before = src[src.rfind(b"\n", 0, match.start()) + 1:match.start()]
    if re.search(rb"(?:^|\s)#", before) or before.count(b"'") % 2 or before.count(b'"') % 2:
        return src, None
    word = match.group(3)
    longer = _longer(word, src[last[1]:])
    src = src[:match.start(3)] + longer + src[match.end(3):]
    return src + (b"" if src.endswith(b"\n") else b"\n") + longer + b"\n", (
        src.count(b"\n", 0, match.start()) + 1, word.decode("utf-8", "replace"))


def _longer(word: bytes, body: bytes) -> bytes:
    """The word, lengthened until no line of the body begins with it (the grammar's end of a here-document)."""
    lines = body.split(b"\n")
    longer = word
    while any(line.lstrip(b"\t").startswith(longer) for line in lines) and len(longer) < 200:
        longer += b"_"
    return longer
