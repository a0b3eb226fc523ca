"""What awk prints for a program that is only a BEGIN block of arithmetic (`$(awk "BEGIN { printf \"%.0f\",
sqrt($WORLD_SIZE) }")`, `awk -v bs=$BS 'BEGIN {print bs * 2}'`), where the awks a cluster may have (gawk, mawk, the
one true awk, busybox) print the same: double-precision numbers; `print` writes an integral value as an integer and
any other with `%.6g`; printf's `%d %i %f %e %g %s`. An integral value of 2**31 or more printed as a number is not
computed (mawk 1.3 prints 2147483648 as 2.14748e+09, gawk as 2147483648; mawk's `%d` stops at 2147483647), nor
`**` (mawk has none). Only this subset is computed: `-v NAME=VALUE`,
`print`, `printf`, assignments, `+ - * / % ^`, unary signs, parentheses, concatenation, strings, `sqrt() int()
exp() log()`; anything else (input rules, fields, comparisons, other functions, a division by zero, an infinite or
undefined result) is None.
"""

from __future__ import annotations

import math
import re

from launcher.importer import calc_tokens

MAX_PROGRAM = 10_000
MAX_NESTING = 40
MAX_OUTPUT = 10_000
INTEGER_PRINTED = 2**31  # below it every awk prints an integral number as an integer

_TOKEN = re.compile(r"[ \t]*(?:(?P<number>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)|"
                    r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<string>\"(?:[^\"\\\n]|\\[\"\\nt/])*\")|"
                    r"(?P<op>[-+*/%^(),;{}=\n]))")
_FUNCTIONS = {"sqrt": math.sqrt, "int": lambda x: math.copysign(float(math.trunc(x)), x), "exp": math.exp,
              "log": math.log}
_KEYWORDS = {"BEGIN", "END", "print", "printf", "getline", "if", "else", "while", "for", "do", "break", "continue",
             "next", "exit", "return", "function", "delete", "in", "NR", "NF", "FS", "OFS", "ORS", "RS", "FILENAME",
             "CONVFMT", "OFMT", "SUBSEP", "RSTART", "RLENGTH", "ENVIRON", "ARGV", "ARGC", "FNR"}
_FORMAT = re.compile(r"%([-+ #0]*)([0-9]*)(?:\.([0-9]*))?([a-zA-Z%])")
_NUMERIC = re.compile(r"[ \t\n]*[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")

Value = float | str


class _NotComputed(Exception):
    pass


def run(args: list[str], stdin: str | None = None) -> str | None:
    """What `awk ARGS` prints; None where that is not computed here."""
    variables: dict[str, Value] = {}
    k = 0
    while k < len(args) and args[k].startswith("-") and args[k] != "-":
        option = args[k]
        value = args[k + 1] if option in ("-v", "-F") and k + 1 < len(args) else option[2:]
        k += 2 if option in ("-v", "-F") else 1
        if option.startswith("-v"):
            name, eq, text = value.partition("=")
            if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or "\\" in text:
                return None
            variables[name] = text
        elif not option.startswith("-F"):  # the field separator is not read by a BEGIN block
            return None
    if k != len(args) - 1 or len(args[k]) > MAX_PROGRAM:
        return None  # no program, or files to read
    try:
        return _Program(args[k], variables).run()
    except (_NotComputed, ArithmeticError, ValueError):
        return None


def _number(value: Value) -> float:
    if isinstance(value, float):
        return value
    found = _NUMERIC.match(value)
    return float(found.group(0)) if found else 0.0


def _text(value: Value) -> str:
    """A value as awk writes it (print's OFMT and the conversion's CONVFMT, both %.6g by default)."""
    if isinstance(value, str):
        return value
    if math.isinf(value) or math.isnan(value):
        raise _NotComputed
    if value == math.trunc(value):
        if abs(value) >= INTEGER_PRINTED or math.copysign(1.0, value) < 0 and value == 0:
            raise _NotComputed  # the awks differ (and on -0)
        return str(int(value))
    return f"{value:.6g}"


class _Program:
    def __init__(self, text: str, variables: dict[str, Value]):
        self.tokens = self.tokenize(text)
        self.at = 0
        self.variables = variables
        self.out: list[str] = []
        self.depth = 0

    @staticmethod
    def tokenize(text: str) -> list[tuple[str, str]]:
        found = calc_tokens.tokens(text, _TOKEN)
        if found is None:
            raise _NotComputed  # a comparison, a field, a regular expression, `++` …
        return found

    def peek(self, ahead: int = 0) -> tuple[str, str]:
        return self.tokens[min(self.at + ahead, len(self.tokens) - 1)]

    def take(self) -> tuple[str, str]:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def expect(self, word: str) -> None:
        if self.take()[1] != word:
            raise _NotComputed

    def skip_separators(self) -> None:
        while self.peek()[1] in ("\n", ";"):
            self.take()

    def run(self) -> str:
        self.skip_separators()
        self.expect("BEGIN")
        while self.peek()[1] == "\n":
            self.take()
        self.expect("{")
        self.skip_separators()
        while self.peek()[1] != "}":
            self.statement()
            if self.peek()[1] not in ("\n", ";", "}"):
                raise _NotComputed
            self.skip_separators()
        self.take()
        self.skip_separators()
        if self.peek()[0] != "end":
            raise _NotComputed  # another rule: input is read
        return "".join(self.out)

    def statement(self) -> None:
        kind, word = self.peek()
        if word in ("print", "printf"):
            self.take()
            grouped = self.peek()[1] == "(" and self.closes_list()
            if grouped:
                self.take()
            items = [self.expression()]
            while self.peek()[1] == ",":
                self.take()
                items.append(self.expression())
            if grouped:
                self.expect(")")
            if word == "print":
                self.out.append(" ".join(_text(v) for v in items) + "\n")
            else:
                self.out.append(_printf(_text(items[0]), items[1:]))
            if sum(map(len, self.out)) > MAX_OUTPUT:
                raise _NotComputed
            return
        if kind == "name" and word not in _KEYWORDS and self.peek(1)[1] == "=":
            self.take()
            self.take()
            self.variables[word] = self.expression()
            return
        raise _NotComputed

    def closes_list(self) -> bool:
        """`print (a, b)` / `printf("%d", x)`: the parenthesis holds the whole list (it closes at the statement's
        end), not a first operand (`print (1+2)*3`)."""
        depth, k = 0, self.at
        while k < len(self.tokens):
            word = self.tokens[k][1]
            depth += {"(": 1, ")": -1}.get(word, 0)
            if depth == 0:
                return self.tokens[k + 1][1] in ("\n", ";", "}", "") if k + 1 < len(self.tokens) else True
            k += 1
        return False

    def deeper(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _NotComputed

    def expression(self) -> Value:
        self.deeper()
        try:
            value = self.sum()
            while self.starts_operand():
                right = self.sum()
                value = _text(value) + _text(right)
            return value
        finally:
            self.depth -= 1

    def starts_operand(self) -> bool:
        kind, word = self.peek()
        return kind in ("number", "string") or word == "(" or (kind == "name" and word not in _KEYWORDS)

    def sum(self) -> Value:
        value = self.term()
        while self.peek()[1] in ("+", "-"):
            op = self.take()[1]
            right = _number(self.term())
            value = _number(value) + right if op == "+" else _number(value) - right
        return value

    def term(self) -> Value:
        value = self.unary()
        while self.peek()[1] in ("*", "/", "%"):
            op = self.take()[1]
            left, right = _number(value), _number(self.unary())
            if op != "*" and right == 0:
                raise _NotComputed  # awk: division by zero
            value = left * right if op == "*" else left / right if op == "/" else math.fmod(left, right)
        return value

    def unary(self) -> Value:
        if self.peek()[1] in ("-", "+", "!"):
            op = self.take()[1]
            if op == "!":
                raise _NotComputed
            self.deeper()
            try:
                value = _number(self.unary())
            finally:
                self.depth -= 1
            return -value if op == "-" else value
        return self.power()

    def power(self) -> Value:
        base = self.primary()
        if self.peek()[1] != "^":
            return base
        self.take()
        self.deeper()
        try:
            exponent = _number(self.unary())  # right-associative, a sign allowed: 2^-1
        finally:
            self.depth -= 1
        value = math.pow(_number(base), exponent)
        if math.isinf(value) or math.isnan(value):
            raise _NotComputed
        return value

    def primary(self) -> Value:
        kind, word = self.take()
        if kind == "number":
            return float(word)
        if kind == "string":
            return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), word[1:-1])
        if word == "(":
            value = self.expression()
            self.expect(")")
            return value
        if kind == "name" and word in _FUNCTIONS and self.peek()[1] == "(":
            self.take()
            argument = _number(self.expression())
            self.expect(")")
            value = _FUNCTIONS[word](argument)
            if math.isinf(value) or math.isnan(value):
                raise _NotComputed
            return value
        if kind == "name" and word not in _KEYWORDS and self.peek()[1] != "(":
            return self.variables.get(word, "")
        raise _NotComputed


def _printf(form: str, values: list[Value]) -> str:
    out, at, k = [], 0, 0
    for found in _FORMAT.finditer(form):
        out.append(form[at:found.start()])
        at = found.end()
        flags, width, precision, conversion = found.groups()
        if conversion == "%":
            out.append("%")
            continue
        if "*" in found.group(0) or conversion not in "dieEfgGs":
            raise _NotComputed
        value = values[k] if k < len(values) else ""
        k += 1
        spec = "%" + flags + width + ("." + precision if precision is not None else "")
        if conversion in "di":
            number = _number(value)
            if math.isinf(number) or math.isnan(number) or abs(number) >= INTEGER_PRINTED:  # mawk's %d stops there
                raise _NotComputed
            out.append((spec + "d") % math.trunc(number))
        elif conversion == "s":
            out.append((spec + "s") % _text(value))
        else:
            number = _number(value)
            if math.isinf(number) or math.isnan(number):
                raise _NotComputed
            out.append((spec + conversion) % number)
    out.append(form[at:])
    if "\\" in "".join(out):
        raise _NotComputed
    return "".join(out)
