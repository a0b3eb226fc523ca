"""What GNU bc prints for a program of decimal arithmetic (`$(echo "$B*1000000000/1" | bc)`, `$(bc -l <<< "10/4")`).

Numbers are exact decimals with bc's scale rules (POSIX bc, as GNU bc 1.07 computes them): a sum keeps the larger
scale, a product min(a+b, max(scale, a, b)) digits, a quotient `scale` digits, `%` and `^` as bc_modulo and bc_raise
do, `sqrt` max(scale, x's) digits; each result is truncated, never rounded. `-l` starts with scale=20. Printed as bc
prints: `.5`, `-.001`, `0` for any zero, trailing zeros kept. Only this subset is computed: assignments to variables
and to `scale`, `+ - * / % ^`, unary minus, parentheses, `sqrt()`, `;` and newlines between statements. Anything else
(`ibase`/`obase`, comparisons, `length()`, the math library's functions, strings, comments, `quit`, a division by zero,
a fractional exponent, a syntax error) is None, so are results past MAX_DIGITS digits and lines bc would wrap.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from launcher.importer import calc_tokens

MAX_DIGITS = 2_000  # digits of any value computed (a power past it is not computed)
MAX_SCALE = 1_000
MAX_LINE = 60  # bc wraps a line at 69 characters by default (BC_LINE_LENGTH may say otherwise): not computed
MAX_PROGRAM = 10_000
MAX_NESTING = 40  # parentheses, signs and powers inside one another

_TOKEN = re.compile(r"[ \t]*(?:(?P<number>[0-9]+\.?[0-9]*|\.[0-9]+)|(?P<name>[a-z][a-z0-9_]*)|(?P<op>[-+*/%^()=;\n]))")
_KEYWORDS = {"ibase", "obase", "last", "quit", "define", "if", "else", "while", "for", "break", "continue", "return",
             "auto", "print", "read", "halt", "length", "limits", "warranty", "sqrt", "scale"}


class _NotComputed(Exception):
    pass


@dataclass(frozen=True)
class Decimal:
    digits: int  # the value times 10**scale
    scale: int

    def at(self, scale: int) -> int:
        """The value times 10**scale, truncated toward zero."""
        if scale >= self.scale:
            return self.digits * 10 ** (scale - self.scale)
        return _truncated(self.digits, 10 ** (self.scale - scale))

    def truncate(self, scale: int) -> Decimal:
        return Decimal(self.at(scale), scale) if scale < self.scale else self

    def shown(self) -> str:
        if self.digits == 0:
            return "0"
        text = str(abs(self.digits)).rjust(self.scale + 1, "0")
        whole, fraction = text[:len(text) - self.scale], text[len(text) - self.scale:]
        return ("-" if self.digits < 0 else "") + whole.lstrip("0") + ("." + fraction if self.scale else "")


def _truncated(a: int, b: int) -> int:
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b >= 0) else -quotient


def _checked(value: Decimal) -> Decimal:
    if len(str(abs(value.digits))) > MAX_DIGITS or value.scale > MAX_SCALE:
        raise _NotComputed
    return value


def run(args: list[str], text: str) -> str | None:
    """What `bc ARGS` prints with `text` as its input; None where that is not computed here."""
    scale = 0
    for arg in args:
        if arg in ("-l", "--mathlib", "-lq", "-ql"):
            scale = 20
        elif arg not in ("-q", "--quiet"):
            return None  # a file to read, another option
    if len(text) > MAX_PROGRAM:
        return None
    try:
        return _Program(text, scale).run()
    except (_NotComputed, ArithmeticError):
        return None


class _Program:
    def __init__(self, text: str, scale: int):
        self.tokens = self.tokenize(text)
        self.at = 0
        self.scale = scale
        self.variables: dict[str, Decimal] = {}
        self.out: list[str] = []
        self.depth = 0

    @staticmethod
    def tokenize(text: str) -> list[tuple[str, str]]:
        found = calc_tokens.tokens(text, _TOKEN)
        if found is None:
            raise _NotComputed  # a comparison, a string, a comment, `++`, an upper-case digit …
        return found

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.at]

    def take(self) -> tuple[str, str]:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def run(self) -> str:
        while self.peek()[0] != "end":
            if self.peek()[1] in (";", "\n"):
                self.take()
                continue
            self.statement()
            if self.peek()[0] != "end" and self.take()[1] not in (";", "\n"):
                raise _NotComputed  # bc's syntax error
        return "".join(self.out)

    def statement(self) -> None:
        kind, word = self.peek()
        following = self.tokens[self.at + 1][1] if self.at + 1 < len(self.tokens) else ""
        if kind == "name" and following == "=":
            self.take()
            self.take()
            value = self.expression()
            if word == "scale":
                if value.digits < 0 or value.at(0) > MAX_SCALE:
                    raise _NotComputed
                self.scale = value.at(0)
            elif word in _KEYWORDS:
                raise _NotComputed  # ibase, obase: another base
            else:
                self.variables[word] = value
            return
        line = self.expression().shown()
        if len(line) > MAX_LINE:
            raise _NotComputed
        self.out.append(line + "\n")

    def expression(self) -> Decimal:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _NotComputed
        try:
            return self.sum()
        finally:
            self.depth -= 1

    def sum(self) -> Decimal:
        value = self.term()
        while self.peek()[1] in ("+", "-"):
            op = self.take()[1]
            right = self.term()
            scale = max(value.scale, right.scale)
            sign = 1 if op == "+" else -1
            value = _checked(Decimal(value.at(scale) + sign * right.at(scale), scale))
        return value

    def term(self) -> Decimal:
        value = self.power()
        while self.peek()[1] in ("*", "/", "%"):
            op = self.take()[1]
            right = self.power()
            if op == "*":
                value = self.multiply(value, right, self.scale)
            elif op == "/":
                value = self.divide(value, right, self.scale)
            else:  # bc_modulo: a - (a / b) * b, the quotient at scale, the rest at max(a's, b's + scale)
                rest = max(value.scale, right.scale + self.scale)
                product = self.multiply(self.divide(value, right, self.scale), right, rest)
                common = max(rest, value.scale, product.scale)
                value = _checked(Decimal(value.at(common) - product.at(common), common))
        return value

    @staticmethod
    def multiply(a: Decimal, b: Decimal, scale: int) -> Decimal:
        full = a.scale + b.scale
        return _checked(Decimal(a.digits * b.digits, full).truncate(min(full, max(scale, a.scale, b.scale))))

    @staticmethod
    def divide(a: Decimal, b: Decimal, scale: int) -> Decimal:
        if b.digits == 0:
            raise _NotComputed  # bc: "Divide by zero"
        return _checked(Decimal(_truncated(a.digits * 10 ** (b.scale + scale), b.digits * 10 ** a.scale), scale))

    def power(self) -> Decimal:
        base = self.unary()
        if self.peek()[1] != "^":
            return base
        self.take()
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _NotComputed
        try:
            exponent = self.power()
        finally:
            self.depth -= 1
        if exponent.scale != 0:
            raise _NotComputed  # bc warns and drops the fraction
        n = exponent.digits
        if n == 0:
            return Decimal(1, 0)
        if base.scale == 0 and abs(base.digits) <= 1:  # 0, 1, -1: any power is one of them
            exact = Decimal(-1 if base.digits == -1 and n % 2 else abs(base.digits), 0)
        elif abs(n) * (len(str(abs(base.digits))) + base.scale) > MAX_DIGITS:
            raise _NotComputed
        else:
            exact = Decimal(base.digits ** abs(n), base.scale * abs(n))
        if n < 0:
            return self.divide(Decimal(1, 0), exact, self.scale)
        return _checked(exact.truncate(min(base.scale * n, max(self.scale, base.scale))))

    def unary(self) -> Decimal:
        if self.peek()[1] == "-":
            self.take()
            if self.peek()[1] == "-":
                raise _NotComputed  # `--`: bc's decrement
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise _NotComputed
            try:
                value = self.unary()
            finally:
                self.depth -= 1
            return Decimal(-value.digits, value.scale)
        return self.primary()

    def primary(self) -> Decimal:
        kind, word = self.take()
        if kind == "number":
            whole, _, fraction = word.partition(".")
            return _checked(Decimal(int((whole or "0") + fraction), len(fraction)))
        if word == "(":
            value = self.expression()
            if self.take()[1] != ")":
                raise _NotComputed
            return value
        if kind == "name" and word == "sqrt" and self.peek()[1] == "(":
            self.take()
            value = self.expression()
            if self.take()[1] != ")" or value.digits < 0:
                raise _NotComputed
            if value.at(value.scale) in (0, 10 ** value.scale):  # bc_sqrt: 0 and 1 are themselves, at scale 0
                return Decimal(value.digits // 10 ** value.scale, 0)
            scale = max(self.scale, value.scale)
            return _checked(Decimal(math.isqrt(value.digits * 10 ** (2 * scale - value.scale)), scale))
        if kind == "name" and word == "scale" and self.peek()[1] != "(":
            return Decimal(self.scale, 0)
        if kind == "name" and word not in _KEYWORDS and self.peek()[1] != "(":
            return self.variables.get(word, Decimal(0, 0))
        raise _NotComputed
