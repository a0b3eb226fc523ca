"""Split a script that tree-sitter-bash cannot read whole into the parts it can and the parts it cannot.

tree-sitter-bash 0.25 lacks a few constructs bash runs (`for i in 1 2; { …; }`, some extglob patterns); where it
meets one, its error recovery may swallow the rest of the file into one ERROR node, training command included. Bash
itself reads a script one complete command at a time, so an unreadable command does not make the ones around it
unreadable. This module finds, for each error, the smallest run of whole lines around it that the grammar cannot
read such that the lines before it and the lines after it parse on their own, and gives every part in order: the
readable ones with their syntax tree, the unreadable ones with their text (the reader names them and treats what
they may assign as unknown).

Work is bounded: every parse counts its bytes against a budget (a few times the script's size); past it, or past
MAX_REGIONS unreadable parts, the rest of the text is one unreadable part.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_REGIONS = 200
MAX_START_TRIES = 4  # candidate starts of an unreadable part tried (each one parse of the text before it)
MAX_EXTENSIONS = 64  # times an unreadable part grows over a closing word that belongs to it

# words that close or continue a construct; in command position outside their construct bash stops with "syntax
# error near unexpected token", where tree-sitter-bash reads a command named `fi` (a lone `fi` after a `for …; {`
# part belongs to that part when the part left an `if` open): each with the words that open and close what it ends
_IF = (rb"\bif\b", rb"\bfi\b")
_LOOP = (rb"\b(?:for|while|until|select)\b", rb"\bdone\b")
_CASE = (rb"\bcase\b", rb"\besac\b")
_GROUP = (rb"\{", rb"\}")
CLOSERS = {"fi": [_IF], "then": [_IF], "else": [_IF], "elif": [_IF], "do": [_LOOP], "done": [_LOOP], "esac": [_CASE],
           "}": [_GROUP]}
# the start of an ERROR's text that closes something: a case item's end, a subshell's or group's end
ERROR_CLOSERS = {b";;": [_CASE], b";&": [_CASE], b")": [(rb"\(", rb"\)"), _CASE], b"}": [_GROUP]}


@dataclass(frozen=True)
class Part:
    """Lines `row` … of the text (0-based, from the start of the text given to `parts`): `text` is their bytes (the
    first line whole, the last up to its newline), `tree` their syntax tree when readable, else None; `error_row`:
    where in the text the grammar first failed (for an unreadable part)."""

    row: int
    text: bytes
    tree: Any | None
    error_row: int = 0

    @property
    def last_row(self) -> int:
        return self.row + max(self.text.count(b"\n") - (self.text.endswith(b"\n")), 0)


@dataclass(frozen=True)
class _Error:
    row: int
    # "closer" (a closing word read as a command), "error" (an ERROR node), "missing" (a MISSING token), "redirect"
    # (a redirection whose target the grammar took from a later line)
    kind: str
    text: bytes


def _is_blank_error(node: Any, src: bytes) -> bool:
    """An ERROR of blanks and backslashes only: a line continuation at the end of the text, which bash accepts."""
    return not src[node.start_byte:node.end_byte].replace(b"\\", b"").strip()


def first_error(root: Any, src: bytes) -> _Error | None:
    """The first thing, in the text's order, that bash would not read as the grammar does: an ERROR that is not a
    bare line continuation, a MISSING token, a closing word run as a command at the top level, a redirection whose
    target is on a later line."""
    found = _first_grammar_error(root, src)
    redirect = _redirect_past_line_end(root, src)
    if redirect is not None and (found is None or redirect.row <= found.row):
        return redirect
    return found


def _redirect_past_line_end(root: Any, src: bytes) -> _Error | None:
    """A redirection operator that ends its line (`CKPT=<Specify path>`, a template's placeholder): bash takes the
    target from the same line and stops with "syntax error near unexpected token `newline'"; the grammar takes the
    next line's words as the target, and the command written there is lost in it."""
    stack = [root]
    first: _Error | None = None
    while stack:
        node = stack.pop()
        if node.type == "file_redirect":
            targets = node.children_by_field_name("destination")
            if targets:
                between = src[node.start_byte:targets[0].start_byte].replace(b"\\\n", b"")
                if b"\n" in between and (first is None or node.start_point[0] < first.row):
                    first = _Error(node.start_point[0], "redirect", b"")
        stack.extend(node.children)
    return first


def _first_grammar_error(root: Any, src: bytes) -> _Error | None:
    if root.type == "ERROR":  # the grammar read nothing of the text as a program
        return _inner_error(root, src)
    for child in root.children:
        leading = _leading_command(child)
        if leading is not None and not leading.has_error:
            name = leading.child_by_field_name("name")
            word = src[name.start_byte:name.end_byte] if name is not None else b""
            if word.decode("utf-8", "replace") in CLOSERS:
                return _Error(leading.start_point[0], "closer", word)
        if child.is_missing or child.type == "ERROR" or child.has_error:
            found = _inner_error(child, src)
            if found is not None:
                return found
    return None


def _leading_command(node: Any) -> Any:
    """The simple command a statement starts with (`done < cfg`, `fi | tee`, `esac && x`), if it starts with one."""
    for _ in range(64):
        if node.type == "command":
            return node
        if node.type not in ("redirected_statement", "pipeline", "list") or not node.children:
            return None
        node = node.children[0]
    return None


def _inner_error(node: Any, src: bytes) -> _Error | None:
    """The first, innermost problem under `node` (an ERROR may start long before the text it could not read),
    walked without recursion."""
    fallback: _Error | None = None
    stack = [node]
    while stack:
        current = stack.pop()
        if current.is_missing:
            return _Error(current.start_point[0], "missing", b"")
        inner = [c for c in current.children if c.is_missing or c.type == "ERROR" or c.has_error]
        if current.type == "ERROR" and not _is_blank_error(current, src):
            here = _Error(current.start_point[0], "error", src[current.start_byte:current.end_byte].lstrip()[:3])
            if not inner:
                return here
            fallback = fallback or here
        stack.extend(reversed(inner))
    return fallback


class _Lines:
    def __init__(self, src: bytes):
        self.src = src
        self.starts = [0] + [m.end() for m in re.finditer(rb"\n", src)]
        if self.starts[-1] == len(src) and len(self.starts) > 1:
            self.starts.pop()  # no line after the final newline
        self.count = len(self.starts)

    def offset(self, row: int) -> int:
        return self.starts[row] if row < self.count else len(self.src)

    def row_of(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset) - 1


class _Budget:
    def __init__(self, parse: Callable[[bytes], Any], limit: int):
        self.parse_text, self.limit, self.spent = parse, limit, 0

    def parse(self, text: bytes) -> Any:
        self.spent += len(text) + 1
        return self.parse_text(text)

    def allows(self, text: bytes) -> bool:
        return self.spent + len(text) + 1 <= self.limit

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.limit


def parts(src: bytes, parse: Callable[[bytes], Any], heredocs: Callable[[bytes], list[tuple[int, int]]]) -> list[Part]:
    """The text in order: readable parts (with their tree) and the unreadable parts between them. `heredocs` gives
    the (start, end) bytes of each here-document's body (a part never starts or ends inside one)."""
    budget = _Budget(parse, len(src) + 1_000_000)
    out: list[Part] = []
    pos_row, rest = 0, src
    tree = budget.parse(rest)
    regions = 0
    while True:
        error = first_error(tree.root_node, rest)
        if error is None:
            if rest:
                out.append(Part(pos_row, rest, tree))
            return out
        lines = _Lines(rest)
        if budget.exhausted or regions >= MAX_REGIONS:
            out.append(Part(pos_row, rest, None, pos_row + error.row))
            return out
        regions += 1
        bodies = heredocs(rest) if b"<<" in rest else []
        start, before = _start(tree, rest, lines, error.row, budget, bodies)
        if start > 0:
            out.append(Part(pos_row, rest[:lines.offset(start)], before))
        end, tree = _end(tree, rest, lines, start, error, budget, heredocs)
        out.append(Part(pos_row + start, rest[lines.offset(start):lines.offset(end)], None, pos_row + error.row))
        if end >= lines.count or tree is None:
            return out
        pos_row, rest = pos_row + end, rest[lines.offset(end):]


def _start(tree: Any, src: bytes, lines: _Lines, error_row: int, budget: _Budget,
           bodies: list[tuple[int, int]]) -> tuple[int, Any]:
    """The first line of the unreadable part: the latest start of a statement at or before the error such that
    the lines before it parse whole (no construct left open, no line continued into the part, no here-document
    cut); with their tree."""
    rows: set[int] = set()
    for child in tree.root_node.children:
        rows.add(child.start_point[0])
        if child.type == "ERROR":
            rows.update(grand.start_point[0] for grand in child.children)
    candidates = [r for r in rows if 0 < r <= error_row and _inside(bodies, lines.offset(r)) is None]
    for row in sorted(candidates, reverse=True)[:MAX_START_TRIES]:
        head = src[:lines.offset(row)]
        if not budget.allows(head):
            break
        if head.rstrip(b"\r\n").endswith((b"\\", b"|", b"&&")):
            continue  # the line before continues into this one
        head_tree = budget.parse(head)
        if first_error(head_tree.root_node, head) is None:
            return row, head_tree
    return 0, None


def _end(tree: Any, src: bytes, lines: _Lines, start: int, error: _Error, budget: _Budget,
         heredocs: Callable[[bytes], list[tuple[int, int]]]) -> tuple[int, Any]:
    """The line after the unreadable part, and the tree of the text from there: the part ends after the error's
    line, past any token, here-document or continued line that goes on after it, and past the closing words (`fi`,
    `done`, `}` …) of what it opened."""
    if error.kind == "missing":
        return lines.count, None  # a construct left open to the end of the text
    # the redirection's statement, as the grammar read it, spans the next line: bash's ends with the operator's line
    end = error.row + 1 if error.kind == "redirect" else \
        _past_spans(tree, src, lines, error.row + 1, heredocs(src) if b"<<" in src else [])
    for _ in range(MAX_EXTENSIONS):
        after = src[lines.offset(end):]
        if end >= lines.count or not budget.allows(after):
            return lines.count, None
        after_tree = budget.parse(after)
        found = first_error(after_tree.root_node, after)
        if found is None or not (found.row == 0 or _closes(found, src[lines.offset(start):lines.offset(end)])):
            return end, after_tree
        # the text after begins inside the part (its first line is broken too) or closes what the part opened
        end += _past_spans(after_tree, after, _Lines(after), found.row + 1,
                           heredocs(after) if b"<<" in after else [])
    return lines.count, None


def _closes(error: _Error, part: bytes) -> bool:
    """Whether the closing word the text after the part begins with ends something the part left open (it opens
    more of that construct than it closes, counted on its words: a rough count, for text the grammar cannot read)."""
    pairs = CLOSERS.get(error.text.decode("utf-8", "replace"), []) if error.kind == "closer" else next(
        (p for c, p in ERROR_CLOSERS.items() if error.kind == "error" and error.text.startswith(c)), [])
    return any(len(re.findall(opening, part)) > len(re.findall(closing, part)) for opening, closing in pairs)


def _past_spans(tree: Any, src: bytes, lines: _Lines, row: int, bodies: list[tuple[int, int]]) -> int:
    """The first line at or after `row` that starts outside every node the grammar read whole that spans a line end
    (a string, a here-document, a command substitution, a compound command; a node holding an error is the broken
    reading's, not one), every here-document body, and every line continued by `\\`, `|`, `&&` or `||`."""
    while row < lines.count:
        cut = lines.offset(row) - 1  # the newline that ends the line before
        moved = row
        node = tree.root_node.descendant_for_byte_range(cut, cut + 1)
        spans: list[int] = []
        while node is not None and node.type != "program":
            if node.type == "ERROR":
                spans.clear()  # what lies inside an ERROR is the broken reading's
            elif node.start_byte <= cut and node.end_byte > cut + 1 and not node.has_error:
                spans.append(node.end_byte)
            node = node.parent
        if spans:
            moved = max(moved, lines.row_of(max(spans) - 1) + 1)
        body_end = _inside(bodies, cut + 1)
        if body_end is not None:
            moved = max(moved, lines.row_of(body_end - 1) + 1)
        if src[lines.offset(row - 1):cut].rstrip().endswith((b"\\", b"|", b"&&")):
            moved = max(moved, row + 1)
        if moved == row:
            return row
        row = moved
    return lines.count


def _inside(bodies: list[tuple[int, int]], offset: int) -> int | None:
    """The end of the here-document body that holds `offset`, if one does (bodies are sorted and apart)."""
    k = bisect.bisect_right(bodies, (offset, len(bodies) and bodies[-1][1] + 1)) - 1
    if k >= 0 and bodies[k][0] <= offset < bodies[k][1]:
        return bodies[k][1]
    return None


# -- what an unreadable part may assign --------------------------------------------------------------------------

_ASSIGNED = re.compile(
    rb"(?:^|(?<=[\s;&|(){}`'\"]))(?:(?:export|declare|local|readonly|typeset)(?:[ \t]+-[A-Za-z]+)*[ \t]+)?"
    rb"([A-Za-z_][A-Za-z0-9_]*)(?:\[[^\]\n]{0,200}\])?\+?=")
_LOOP_NAME = re.compile(rb"\b(?:for|select)[ \t]+([A-Za-z_][A-Za-z0-9_]*)\b")
_DEFAULT_ASSIGN = re.compile(rb"\$\{([A-Za-z_][A-Za-z0-9_]*):?=")  # ${TP:=4}
_SOURCES = re.compile(rb"(?:^|(?<=[\s;&|({]))(?:source|\.)[ \t]+[^\s;&|]")
_PRINTF_V = re.compile(rb"\bprintf[ \t]+-v[ \t]+([A-Za-z_][A-Za-z0-9_]*)")
_READERS = re.compile(rb"\b(?:read|mapfile|readarray|unset|getopts)\b([^\n;&|<>]*)")
_FUNCTION = re.compile(rb"(?:^|(?<=[\s;&|]))(?:function[ \t]+([A-Za-z_][\w.:-]*)|([A-Za-z_][\w.:-]*)[ \t]*\(\)[ \t]*)")


def assigned_names(text: bytes) -> set[str]:
    """Every name the text may give a value (or unset), read from its words as broadly as they allow: what an
    unreadable part may change (more rather than fewer: a name too many is said unknown, one too few is a silent
    error)."""
    names = {m.group(1) for pattern in (_ASSIGNED, _LOOP_NAME, _PRINTF_V, _DEFAULT_ASSIGN)
             for m in pattern.finditer(text)}
    for match in _READERS.finditer(text):
        names.update(w for w in match.group(1).split() if re.fullmatch(rb"[A-Za-z_][A-Za-z0-9_]*", w))
    return {n.decode() for n in names}


def defined_functions(text: bytes) -> set[str]:
    return {(m.group(1) or m.group(2)).decode() for m in _FUNCTION.finditer(text)}


def sources(text: bytes) -> bool:
    """Whether the text may source a file (`source f`, `. f`): then any name may change."""
    return _SOURCES.search(text) is not None
