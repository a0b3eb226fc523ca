r"""What `expr` and `seq` print for known words (`GBS=$(expr $MBS \* $GPUS)`, `for i in $(seq 1 4)`), the way GNU
coreutils computes it; None where it is not computed here (an error, an operator not read, a count too large)."""

from __future__ import annotations

import re

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
