"""Bash's arithmetic (`$((…))`, `((…))`, `let`, `declare -i`, subscripts, `[[ A -eq B ]]`) evaluated as bash 5 does.

The text is what bash evaluates: its `$X`, `${…}` and `$(…)` already replaced by their values (so `$A*2` with A="2+3"
is 2+3*2). The grammar and precedence are bash's (expr.c): unary `- + ! ~` bind tighter than `**`, `**` and the
assignments and `?:` group to the right, `&&`, `||` and `?:` do not evaluate the side they skip; numbers are 64-bit
two's complement (wrapping on overflow), constants `0x1F`, `017` (octal), `BASE#DIGITS`; a variable's value is itself
an expression, evaluated where it is used. What bash refuses (a division by zero, `08`, a negative exponent, a syntax
error) raises Refused; a variable whose value is not known raises whatever the caller's `value` raises. Work is bounded:
the caller's `step` is called per token and per operation, and nesting is at most MAX_NESTING deep.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

MAX_NESTING = 40
WORD = 1 << 64
LOW = -(1 << 63)


class Refused(Exception):
    """Bash refuses the expression (its error: the command it is part of is not run)."""


class Variables(Protocol):
    def value(self, name: str, index: int | None) -> str:
        """The variable's text ("" when unset); raises when it is not known."""

    def assign(self, name: str, index: int | None, number: int) -> None: ...

    def evaluate(self, text: str) -> int:
        """A variable's value used as a number: an expression of its own (bounded by the caller)."""

    def step(self) -> None: ...


def wrap(value: int) -> int:
    value %= WORD
    return value - WORD if value >= -LOW else value


_TOKEN = re.compile(r"\s*(?:(?P<number>[0-9][0-9A-Za-z#@_]*)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|"
                    r"(?P<op><<=|>>=|\*\*|<<|>>|<=|>=|==|!=|&&|\|\||\+\+|--|[-+*/%&^|]=|[-+*/%<>=!~&^|?:(),\[\]]))")
_ASSIGN = {"=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "^=", "|="}
# binding power of each binary operator (bash's precedence, lowest first); `**` and the assignments group rightwards
_BINARY = {",": 1, **{op: 2 for op in _ASSIGN}, "?": 3, "||": 4, "&&": 5, "|": 6, "^": 7, "&": 8, "==": 9, "!=": 9,
           "<": 10, ">": 10, "<=": 10, ">=": 10, "<<": 11, ">>": 11, "+": 12, "-": 12, "*": 13, "/": 13, "%": 13,
           "**": 14}
_RIGHT = {"**", "?", *_ASSIGN}


def constant(text: str) -> int:
    """bash's strlong: decimal, 0-led octal, 0x hex, BASE#DIGITS (2..64; @ is 62, _ is 63)."""
    base, found, value, at = 10, False, 0, 0
    if text.startswith("0"):
        if len(text) == 1:
            return 0
        at, found = 1, True
        if text[1] in "xX":
            base, at = 16, 2
        else:
            base = 8
    while at < len(text):
        c = text[at]
        at += 1
        if c == "#":
            if found:
                raise Refused(f"{text}: invalid number")
            if not 2 <= value <= 64:
                raise Refused(f"{text}: invalid arithmetic base")
            if at >= len(text):
                raise Refused(f"{text}: invalid integer constant")
            base, value, found = value, 0, True
            continue
        if c.isdigit():
            digit = ord(c) - ord("0")
        elif "a" <= c <= "z":
            digit = ord(c) - ord("a") + 10
        elif "A" <= c <= "Z":
            digit = ord(c) - ord("A") + (10 if base <= 36 else 36)
        else:
            digit = 62 if c == "@" else 63
        if digit >= base:
            raise Refused(f"{text}: value too great for base")
        value = wrap(value * base + digit)
    return value


@dataclass
class _Token:
    kind: str  # "number", "name", "op", "end"
    text: str
    index: str | None = None  # a name's [subscript], as written


def _tokens(text: str, step: Callable[[], None]) -> list[_Token]:
    out: list[_Token] = []
    at = 0
    while True:
        step()
        while at < len(text) and text[at] in " \t\n":
            at += 1
        if at >= len(text):
            out.append(_Token("end", ""))
            return out
        found = _TOKEN.match(text, at)
        if found is None:
            raise Refused(f"{text[at:]}: syntax error in expression")
        at = found.end()
        if found.group("number"):
            out.append(_Token("number", found.group("number")))
        elif found.group("name"):
            token = _Token("name", found.group("name"))
            if text.startswith("[", at):  # a subscript: up to its matching bracket
                depth, end = 0, at
                while end < len(text):
                    depth += {"[": 1, "]": -1}.get(text[end], 0)
                    if depth == 0:
                        break
                    end += 1
                if end >= len(text):
                    raise Refused(f"{text}: bad array subscript")
                token.index, at = text[at + 1:end], end + 1
            out.append(token)
        else:
            op = found.group("op")
            if op in ("++", "--"):
                previous = out[-1] if out else None
                if previous is not None and previous.kind == "name":
                    op = "post" + op
                elif re.match(r"\s*[A-Za-z_]", text[at:]):
                    op = "pre" + op
                else:  # `1++2`, `--5`: two signs, as bash ungets the second
                    at -= 1
                    op = op[0]
            out.append(_Token("op", op))


# an expression tree: ("num", n) ("var", name, index) ("un", op, x) ("bin", op, a, b) ("?", c, a, b)
# ("set", op, name, index, x) ("inc", op, name, index)
Node = tuple


class _Parser:
    def __init__(self, tokens: list[_Token], step: Callable[[], None]):
        self.tokens, self.at, self.step, self.depth = tokens, 0, step, 0

    def peek(self) -> _Token:
        return self.tokens[self.at]

    def take(self) -> _Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def expression(self, least: int = 0) -> Node:
        self.step()
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _TooDeep()
        try:
            left = self.operand()
            while True:
                token = self.peek()
                power = _BINARY.get(token.text, 0) if token.kind == "op" else 0
                if power <= least:
                    return left
                self.take()
                op = token.text
                if op == "?":
                    middle = self.expression(0)
                    if self.take().text != ":":
                        raise Refused("`:' expected for conditional expression")
                    left = ("?", left, middle, self.expression(power - 1))
                elif op in _ASSIGN:
                    if left[0] != "var":
                        raise Refused("attempted assignment to non-variable")
                    left = ("set", op, left[1], left[2], self.expression(power - 1))
                else:
                    left = ("bin", op, left, self.expression(power - 1 if op in _RIGHT else power))
        finally:
            self.depth -= 1

    def operand(self) -> Node:
        token = self.take()
        if token.kind == "number":
            return ("num", constant(token.text))
        if token.kind == "name":
            following = self.peek()
            if following.kind == "op" and following.text in ("post++", "post--"):
                self.take()
                return ("inc", following.text, token.text, token.index)
            return ("var", token.text, token.index)
        if token.text in ("-", "+", "!", "~"):
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise _TooDeep()
            try:
                return ("un", token.text, self.operand())
            finally:
                self.depth -= 1
        if token.text in ("pre++", "pre--"):
            name = self.take()
            if name.kind != "name":
                raise Refused("assignment requires lvalue")
            return ("inc", token.text, name.text, name.index)
        if token.text == "(":
            inside = self.expression(0)
            if self.take().text != ")":
                raise Refused("missing `)'")
            return inside
        raise Refused("syntax error: operand expected")


class _TooDeep(Exception):
    pass


class TooDeep(Exception):
    """Nested past MAX_NESTING: not evaluated (no value is claimed)."""


def evaluate(text: str, variables: Variables) -> int:
    """The value of `text` (the whole of `$((text))`, of one `let` argument, …): 0 when it is blank, as bash."""
    try:
        tokens = _tokens(text, variables.step)
        if tokens[0].kind == "end":
            return 0
        parser = _Parser(tokens, variables.step)
        tree = parser.expression(0)
        if parser.peek().kind != "end":
            raise Refused(f"{text}: syntax error in expression")
        return _Evaluation(variables).run(tree)
    except _TooDeep:
        raise TooDeep(text) from None


class _Evaluation:
    def __init__(self, variables: Variables):
        self.variables = variables
        self.depth = 0

    def index(self, written: str | None) -> int | None:
        return None if written is None else self.variables.evaluate(written)

    def read(self, name: str, index: str | None) -> int:
        return self.variables.evaluate(self.variables.value(name, self.index(index)))

    def run(self, node: Node) -> int:
        self.variables.step()
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _TooDeep()
        try:
            return self.node(node)
        finally:
            self.depth -= 1

    def node(self, node: Node) -> int:
        kind = node[0]
        if kind == "num":
            return int(node[1])
        if kind == "var":
            return self.read(node[1], node[2])
        if kind == "un":
            value = self.run(node[2])
            return {"-": wrap(-value), "+": value, "!": int(value == 0), "~": wrap(~value)}[node[1]]
        if kind == "inc":
            _, op, name, written = node
            index = self.index(written)
            old = self.variables.evaluate(self.variables.value(name, index))
            new = wrap(old + (1 if op.endswith("++") else -1))
            self.variables.assign(name, index, new)
            return new if op.startswith("pre") else old
        if kind == "?":
            return self.run(node[2]) if self.run(node[1]) else self.run(node[3])
        if kind == "set":
            _, op, name, written, right = node
            index = self.index(written)
            # `b += …`: b's value is read before the right side runs (which may change it), as bash reads it
            before = None if op == "=" else self.variables.evaluate(self.variables.value(name, index))
            value = self.run(right)
            if before is not None:
                value = binary(op[:-1], before, value)
            self.variables.assign(name, index, value)
            return value
        _, op, left, right = node
        if op == "&&":
            return int(self.run(left) != 0 and self.run(right) != 0)
        if op == "||":
            return int(self.run(left) != 0 or self.run(right) != 0)
        if op == ",":
            self.run(left)
            return self.run(right)
        return binary(op, self.run(left), self.run(right))


def binary(op: str, a: int, b: int) -> int:
    if op in ("/", "%"):
        if b == 0:
            raise Refused("division by 0")
        if a == LOW and b == -1:  # bash's special case: no trap
            return LOW if op == "/" else 0
        quotient = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # C truncates toward zero
        return wrap(quotient) if op == "/" else wrap(a - quotient * b)
    if op == "**":
        if b < 0:
            raise Refused("exponent less than 0")
        return wrap(pow(a, b, WORD))
    if op in ("<<", ">>"):  # the machine's shift: the count taken modulo 64
        return wrap(a << (b & 63)) if op == "<<" else a >> (b & 63)
    table: dict[str, Callable[[int, int], int]] = {
        "+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y, "&": lambda x, y: x & y,
        "|": lambda x, y: x | y, "^": lambda x, y: x ^ y, "==": lambda x, y: int(x == y),
        "!=": lambda x, y: int(x != y), "<": lambda x, y: int(x < y), ">": lambda x, y: int(x > y),
        "<=": lambda x, y: int(x <= y), ">=": lambda x, y: int(x >= y)}
    return wrap(table[op](a, b))
