r"""What `expr` and `seq` print for known words (`GBS=$(expr $MBS \* $GPUS)`, `for i in $(seq 1 4)`), and `cut` of
known input (`KEY=$(echo $ARG | cut -f1 -d=)`), the way GNU coreutils
computes it; None where it is not computed here (an error, an operator not read, a count too large)."""

from __future__ import annotations

import re
from collections.abc import Callable

INTEGER = re.compile(r"-?[0-9]+")
MAX_SEQ = 10_000  # numbers `seq` may print here
LEVELS = [("|",), ("&",), ("<", "<=", "=", "==", "!=", ">=", ">"), ("+", "-"), ("*", "/", "%")]


class _NotComputed(Exception):
    pass


def expr(args: list[str]) -> str | None:
    """expr(1) of integer arithmetic, comparisons, `|` and `&`, with parentheses."""
    if not args or len(args) > 200:
        return None
    try:
        value, at = _level(args, 0, 0)
    except (_NotComputed, RecursionError):
        return None
    return value + "\n" if at == len(args) else None


def _null(value: str) -> bool:
    return value == "" or bool(INTEGER.fullmatch(value)) and int(value) == 0


def _level(args: list[str], at: int, level: int) -> tuple[str, int]:
    if level == len(LEVELS):
        return _primary(args, at)
    left, at = _level(args, at, level + 1)
    while at < len(args) and args[at] in LEVELS[level]:
        op = args[at]
        right, at = _level(args, at + 1, level + 1)
        left = _apply(op, left, right)
    return left, at


def _primary(args: list[str], at: int) -> tuple[str, int]:
    if at >= len(args):
        raise _NotComputed  # a missing operand: expr's syntax error
    word = args[at]
    if word == "(":
        value, at = _level(args, at + 1, 0)
        if at >= len(args) or args[at] != ")":
            raise _NotComputed
        return value, at + 1
    if word in ("match", "substr", "index", "length", "+", ":") or word == ")":
        raise _NotComputed  # string operators: not read here
    return word, at + 1


def _apply(op: str, left: str, right: str) -> str:
    if op == "|":
        return left if not _null(left) else right if not _null(right) else "0"
    if op == "&":
        return left if not _null(left) and not _null(right) else "0"
    numbers = bool(INTEGER.fullmatch(left) and INTEGER.fullmatch(right))
    if op in LEVELS[2]:
        a: int | str = int(left) if numbers else left
        b: int | str = int(right) if numbers else right
        result = {"<": a < b, "<=": a <= b, "=": a == b, "==": a == b, "!=": a != b, ">=": a >= b,  # type: ignore[operator]
                  ">": a > b}[op]  # type: ignore[operator]
        return "1" if result else "0"
    if not numbers:
        raise _NotComputed  # expr: non-integer argument
    x, y = int(left), int(right)
    if op in "/%" and y == 0:
        raise _NotComputed  # expr: division by zero
    if op == "+":
        return str(x + y)
    if op == "-":
        return str(x - y)
    if op == "*":
        return str(x * y)
    quotient = abs(x) // abs(y) * (1 if (x >= 0) == (y >= 0) else -1)  # C's: toward zero
    return str(quotient) if op == "/" else str(x - quotient * y)


def seq(args: list[str]) -> str | None:
    """seq(1) of integers: [-s SEP] FIRST [INCREMENT] LAST."""
    separator = "\n"
    words = list(args)
    while words and words[0].startswith("-") and not INTEGER.fullmatch(words[0]):
        option = words.pop(0)
        if option == "-s" and words:
            separator = words.pop(0)
        elif option.startswith("-s") and len(option) > 2:
            separator = option[2:]
        elif option == "--":
            break
        else:
            return None  # -w, -f FORMAT: not read here
    if not 1 <= len(words) <= 3 or not all(INTEGER.fullmatch(w) for w in words):
        return None
    numbers = [int(w) for w in words]
    first, step, last = (1, 1, numbers[0]) if len(numbers) == 1 else \
        (numbers[0], 1, numbers[1]) if len(numbers) == 2 else tuple(numbers)
    if step == 0:
        return None
    count = max(0, (last - first) // step + 1)
    if count > MAX_SEQ:
        return None
    values = [str(first + k * step) for k in range(count)]
    return separator.join(values) + "\n" if values else ""


def cut(args: list[str], text: str) -> str | None:
    """cut(1) of fields or characters of known input: -d DELIM -f LIST [-s] [--output-delimiter S], -c LIST.
    A file operand or another option: None (not read here)."""
    delimiter, fields, chars, only_delimited, joiner = "\t", None, None, False, None
    words = list(args)
    while words:
        word = words.pop(0)
        value: str | None = None
        for short, long in (("-d", "--delimiter"), ("-f", "--fields"), ("-c", "--characters"),
                            (None, "--output-delimiter")):
            if word == short or word == long:
                if not words:
                    return None
                value = words.pop(0)
            elif short is not None and word.startswith(short) and len(word) > 2:
                value = word[2:]
            elif word.startswith(long + "="):
                value = word[len(long) + 1:]
            if value is not None:
                if short == "-d":
                    if len(value) != 1:
                        return None
                    delimiter = value
                elif short == "-f":
                    fields = value
                elif short == "-c":
                    chars = value
                else:
                    joiner = value
                break
        if value is not None:
            continue
        if word in ("-s", "--only-delimited"):
            only_delimited = True
        else:
            return None  # a file, -b, --complement …
    if (fields is None) == (chars is None):
        return None
    selected = _ranges(fields if fields is not None else chars or "")
    if selected is None:
        return None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out = []
    for line in lines:
        if chars is not None:
            out.append("".join(c for k, c in enumerate(line, 1) if selected(k)))
        elif delimiter not in line:
            if not only_delimited:
                out.append(line)
        else:
            parts = line.split(delimiter)
            out.append((delimiter if joiner is None else joiner).join(
                p for k, p in enumerate(parts, 1) if selected(k)))
    return "".join(line + "\n" for line in out)


def _ranges(spec: str) -> Callable[[int], bool] | None:
    """cut's LIST: N, N-M, N-, -M, separated by commas; positions count from 1."""
    spans: list[tuple[int, int]] = []
    for part in spec.split(","):
        match = re.fullmatch(r"(\d*)-(\d*)|(\d+)", part)
        if match is None or part == "-":
            return None
        if match.group(3) is not None:
            low = high = int(match.group(3))
        else:
            low = int(match.group(1) or 1)
            high = int(match.group(2)) if match.group(2) else 1 << 62
        if low < 1 or high < low:
            return None
        spans.append((low, high))
    return lambda k: any(low <= k <= high for low, high in spans)


_TR_CLASSES = {"upper": "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "lower": "abcdefghijklmnopqrstuvwxyz", "digit": "0123456789",
               "space": " \t\n\r\x0b\x0c", "blank": " \t"}
_TR_CLASSES["alpha"] = _TR_CLASSES["upper"] + _TR_CLASSES["lower"]
_TR_CLASSES["alnum"] = _TR_CLASSES["alpha"] + _TR_CLASSES["digit"]
_TR_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "v": "\x0b", "f": "\x0c", "a": "\x07", "b": "\x08"}


def _tr_set(spec: str) -> str | None:
    """tr's SET in C locale order: characters, `\\n`-style escapes, ranges a-z and classes [:upper:] …; None for what
    is not read here ([c*n], [=c=], other classes, octal escapes)."""
    out: list[str] = []
    k = 0
    while k < len(spec):
        named = re.match(r"\[:([a-z]+):\]", spec[k:])
        if named:
            if named.group(1) not in _TR_CLASSES:
                return None
            out.append(_TR_CLASSES[named.group(1)])
            k += named.end()
            continue
        if spec[k] == "[" and re.match(r"\[(.\*[0-9]*|=.=)\]", spec[k:]):
            return None
        char = spec[k]
        if char == "\\" and k + 1 < len(spec):
            if spec[k + 1] not in _TR_ESCAPES:
                return None
            char, k = _TR_ESCAPES[spec[k + 1]], k + 1
        if k + 2 < len(spec) and spec[k + 1] == "-" and spec[k + 2] != "\\":
            low, high = ord(char), ord(spec[k + 2])
            if high < low or high - low > 255:
                return None
            out.append("".join(map(chr, range(low, high + 1))))
            k += 3
            continue
        out.append(char)
        k += 1
    return "".join(out)


def tr(args: list[str], text: str) -> str | None:
    """tr(1) of known input: `tr SET1 SET2` (SET2 padded with its last character), `tr -d SET1`, `tr -s SET`, and
    `-s` after a translation (`tr '[:upper:]' '[:lower:]'`, `tr -d ' '`, `tr ',' ' '`); -c and anything else: None."""
    delete = squeeze = False
    words = list(args)
    while words and words[0].startswith("-") and len(words[0]) > 1:
        flags = words.pop(0)
        if flags == "--":
            break
        if not set(flags[1:]) <= {"d", "s"}:
            return None
        delete, squeeze = delete or "d" in flags, squeeze or "s" in flags
    sets = [_tr_set(w) for w in words]
    if not 1 <= len(sets) <= 2 or any(s is None for s in sets) or (delete and squeeze) or (delete and len(sets) != 1):
        return None
    first = sets[0] or ""
    if delete:
        return "".join(c for c in text if c not in first)
    if len(sets) == 2:
        second = sets[1] or ""
        if not second:
            return None
        table = {c: second[min(k, len(second) - 1)] for k, c in enumerate(first)}
        text, squeezing = "".join(table.get(c, c) for c in text), set(second)
    else:
        squeezing = set(first)
    if not squeeze:
        return text if len(sets) == 2 else None
    out: list[str] = []
    for c in text:
        if not (out and c == out[-1] and c in squeezing):
            out.append(c)
    return "".join(out)
