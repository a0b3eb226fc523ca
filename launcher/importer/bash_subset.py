"""Read the subset of bash that training scripts are written in, without executing anything.

Assignments (scalars, arrays `A=(…)`, `A+=(…)`), `export`, `$VAR`, `${VAR}`, `${VAR:-default}`, `${A[@]}`,
`$((…))` arithmetic, quoting, comments, line continuations and `if [[ … ]]` blocks whose condition compares
known strings are understood; every other line is reported as not carried, with the reason. Word expansion
follows bash: unquoted expansions split on whitespace and keep any quote characters inside the value
("--split '99,1,0'" in an array reaches the program with the quotes), quoted ones do not split.

Positional parameters ($1 …) and unset variables without a default stay unresolved: they expand to a
marker that names them, so callers can tell a path the user must fill in from a value.
Work is bounded: input size, value length and arithmetic are capped.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

MAX_SCRIPT_CHARS = 1_000_000
MAX_VALUE_CHARS = 100_000
MARK = "\x00"  # an unresolved ${NAME} expands to MARK + NAME + MARK
UNRESOLVED = re.compile(f"{MARK}([^{MARK}]*){MARK}")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=")


class ShellSyntaxError(ValueError):
    pass


def unresolved_names(text: str) -> list[str]:
    return UNRESOLVED.findall(text)


def show(text: str) -> str:
    """A value for people: unresolved parts as ${NAME}."""
    return UNRESOLVED.sub(lambda m: "${" + m.group(1) + "}", text)


# -- tokens ---------------------------------------------------------------------------------------------------

@dataclass
class Part:
    kind: str  # "lit" | "var" (text = what is inside ${…} or the name) | "arith" | "cmd" (command substitution)
    text: str
    quoted: bool


@dataclass
class Word:
    parts: list[Part]
    line: int

    def literal(self) -> str | None:
        """The word's text when it holds no expansion (quotes removed), else None."""
        if any(p.kind != "lit" for p in self.parts):
            return None
        return "".join(p.text for p in self.parts)

    def raw_prefix(self) -> str:
        """Unquoted literal text at the start (to recognise NAME= assignments)."""
        out = ""
        for p in self.parts:
            if p.kind != "lit" or p.quoted:
                break
            out += p.text
        return out


@dataclass
class Op:
    text: str  # "\n", ";", "&&", "||", "|", "&", "(", ")", redirections
    line: int


def _matching(text: str, start: int, open_: str, close: str) -> int:
    """Index just past the bracket that closes the one before `start` (nesting and quotes respected)."""
    depth, i = 1, start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "'" :
            end = text.find("'", i + 1)
            i = len(text) if end < 0 else end + 1
            continue
        if ch == open_:
            depth += 1
        elif ch == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ShellSyntaxError(f"unclosed {open_!r}")


def _dollar(text: str, i: int, quoted: bool) -> tuple[Part, int]:
    """The expansion starting at text[i] == '$'."""
    if text.startswith("$((", i):
        end = _matching(text, i + 3, "(", ")")
        if end >= len(text) or text[end] != ")":
            raise ShellSyntaxError("unclosed $((")
        return Part("arith", text[i + 3:end - 1], quoted), end + 1
    if text.startswith("$(", i):
        end = _matching(text, i + 2, "(", ")")
        return Part("cmd", text[i + 2:end - 1], quoted), end
    if text.startswith("${", i):
        end = _matching(text, i + 2, "{", "}")
        return Part("var", text[i + 2:end - 1], quoted), end
    match = NAME.match(text, i + 1)
    if match:
        return Part("var", match.group(0), quoted), match.end()
    if i + 1 < len(text) and (text[i + 1].isdigit() or text[i + 1] in "@*#?$!-"):
        return Part("var", text[i + 1], quoted), i + 2
    return Part("lit", "$", quoted), i + 1


def tokenize(text: str) -> list[Word | Op]:
    if len(text) > MAX_SCRIPT_CHARS:
        raise ShellSyntaxError(f"the script has {len(text):,} characters; at most {MAX_SCRIPT_CHARS:,} are read")
    tokens: list[Word | Op] = []
    i, line = 0, 1
    parts: list[Part] = []
    start_line = 1

    def end_word() -> None:
        nonlocal parts
        if parts:
            tokens.append(Word(parts, start_line))
            parts = []

    while i < len(text):
        ch = text[i]
        if ch == "\\" and text.startswith("\\\n", i):  # line continuation
            i, line = i + 2, line + 1
            continue
        if ch in " \t\r":
            end_word()
            i += 1
            continue
        if ch == "\n":
            end_word()
            tokens.append(Op("\n", line))
            i, line = i + 1, line + 1
            continue
        if ch == "#" and not parts:  # a comment starts only at the beginning of a word
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        if not parts:
            start_line = line
        if ch in ";&|()<>":
            end_word()
            for op in ("&&", "||", ";;", ">>", "2>&1", "&>", ";", "&", "|", "(", ")", "<", ">"):
                if text.startswith(op, i):
                    tokens.append(Op(op, line))
                    i += len(op)
                    break
            continue
        if ch == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise ShellSyntaxError(f"line {line}: unclosed single quote")
            parts.append(Part("lit", text[i + 1:end], True))
            line += text.count("\n", i, end)
            i = end + 1
            continue
        if ch == '"':
            i += 1
            buf = ""
            while True:
                if i >= len(text):
                    raise ShellSyntaxError(f"line {line}: unclosed double quote")
                c = text[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and i + 1 < len(text) and text[i + 1] in '"\\$`\n':
                    if text[i + 1] != "\n":
                        buf += text[i + 1]
                    else:
                        line += 1
                    i += 2
                    continue
                if c == "$":
                    if buf:
                        parts.append(Part("lit", buf, True))
                        buf = ""
                    part, i = _dollar(text, i, True)
                    parts.append(part)
                    continue
                if c == "`":
                    end = text.find("`", i + 1)
                    if end < 0:
                        raise ShellSyntaxError(f"line {line}: unclosed backquote")
                    parts.append(Part("cmd", text[i + 1:end], True))
                    i = end + 1
                    continue
                if c == "\n":
                    line += 1
                buf += c
                i += 1
            parts.append(Part("lit", buf, True))
            continue
        if ch == "\\":
            parts.append(Part("lit", text[i + 1:i + 2], True))
            i += 2
            continue
        if ch == "$":
            part, i = _dollar(text, i, False)
            parts.append(part)
            continue
        if ch == "`":
            end = text.find("`", i + 1)
            if end < 0:
                raise ShellSyntaxError(f"line {line}: unclosed backquote")
            parts.append(Part("cmd", text[i + 1:end], False))
            i = end + 1
            continue
        j = i
        while j < len(text) and text[j] not in " \t\r\n;&|()<>'\"\\$`":
            j += 1
        parts.append(Part("lit", text[i:j], False))
        i = j
    end_word()
    tokens.append(Op("\n", line))
    return tokens


# -- expansion ------------------------------------------------------------------------------------------------

ARITH_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
             ast.Div: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


@dataclass
class Shell:
    scalars: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str]] = field(default_factory=dict)
    exports: dict[str, str] = field(default_factory=dict)

    def lookup(self, name: str) -> str | None:
        if name in self.arrays:
            return self.arrays[name][0] if self.arrays[name] else ""
        return self.scalars.get(name)

    def var(self, inner: str) -> list[str] | str:
        """${inner}: a list for array-all expansions ("${A[@]}"), else a string (unresolved → marker)."""
        array = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]", inner)
        if array:
            name = array.group(1)
            if name in self.arrays:
                return list(self.arrays[name])
            value = self.scalars.get(name)
            return [value] if value is not None else []
        count = re.fullmatch(r"#([A-Za-z_][A-Za-z0-9_]*)(\[[@*]\])?", inner)
        if count:
            name = count.group(1)
            return str(len(self.arrays[name])) if count.group(2) and name in self.arrays else \
                str(len(self.lookup(name) or ""))
        default = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(:?)([-=+?])(.*)", inner, re.S)
        if default:
            name, colon, op, word = default.groups()
            value = self.lookup(name)
            unset = value is None or (colon and value == "")
            if op in "-=":
                if value is not None and not unset:
                    return value
                text = self.expand_text(word)
                if op == "=" and not name.isdigit():
                    self.scalars[name] = text
                return text
            if op == "+":
                return "" if unset else self.expand_text(word)
            return value if value is not None and not unset else MARK + name + MARK
        if NAME.fullmatch(inner) or inner.isdigit() or inner in "@*#?$!-":
            value = self.lookup(inner)
            return value if value is not None else MARK + inner + MARK
        return MARK + inner + MARK  # ${X/a/b}, ${X:0:3}, …: not evaluated

    def expand_text(self, text: str) -> str:
        """A default word inside ${X:-word}: expanded, quotes removed, not split."""
        tokens = [t for t in tokenize(text) if isinstance(t, Word)]
        return " ".join(self.assign_value(t) for t in tokens)

    def arith(self, expression: str) -> str:
        text = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", r"\1", expression)
        try:
            tree = ast.parse(text.strip(), mode="eval")
            return str(self._arith_node(tree.body))
        except (SyntaxError, ValueError, ZeroDivisionError, KeyError, OverflowError):
            return MARK + f"(({expression.strip()}))" + MARK

    def _arith_node(self, node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            value = self.lookup(node.id)
            if value is None or not re.fullmatch(r"-?\d+", value.strip()):
                raise KeyError(node.id)
            return int(value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self._arith_node(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in ARITH_OPS:
            left, right = self._arith_node(node.left), self._arith_node(node.right)
            if isinstance(node.op, ast.Pow) and (right > 64 or abs(left) > 2 ** 20):
                raise ValueError("exponent too large")
            return ARITH_OPS[type(node.op)](left, right)
        raise ValueError("not arithmetic")

    def fields(self, word: Word) -> list[str]:
        """Bash word expansion: quoted parts stay together; unquoted expansions split on whitespace."""
        out: list[str] = []
        current: str | None = None  # None: no field started yet

        def add(text: str) -> None:
            nonlocal current
            current = (current or "") + text

        for part in word.parts:
            if part.kind == "lit":
                add(part.text)
                continue
            if part.kind == "arith":
                value: list[str] | str = self.arith(part.text)
            elif part.kind == "cmd":
                value = MARK + "$(" + part.text.strip() + ")" + MARK
            else:
                value = self.var(part.text)
            if isinstance(value, list):  # "${A[@]}" (one field per element) or unquoted ${A[@]} (then split)
                pieces = value if part.quoted else [w for v in value for w in v.split()]
                for k, piece in enumerate(pieces):
                    if k:
                        out.append(current or "")
                        current = ""
                    add(piece)
                if not pieces and part.quoted and current is None:
                    pass
                continue
            if part.quoted:
                add(value)
                continue
            pieces = value.split()
            if not pieces:
                continue
            if value[:1].isspace() and current is not None:
                out.append(current)
                current = None
            for k, piece in enumerate(pieces):
                if k:
                    out.append(current or "")
                    current = ""
                add(piece)
            if value[-1:].isspace():
                out.append(current or "")
                current = None
        if current is not None:
            out.append(current)
        if sum(map(len, out)) > MAX_VALUE_CHARS:
            raise ShellSyntaxError(f"line {word.line}: a value grows beyond {MAX_VALUE_CHARS:,} characters")
        return out

    def assign_value(self, word: Word) -> str:
        """The right-hand side of NAME=value: expanded but not split."""
        text = ""
        for part in word.parts:
            if part.kind == "lit":
                text += part.text
            elif part.kind == "arith":
                text += self.arith(part.text)
            elif part.kind == "cmd":
                text += MARK + "$(" + part.text.strip() + ")" + MARK
            else:
                value = self.var(part.text)
                text += " ".join(value) if isinstance(value, list) else value
        if len(text) > MAX_VALUE_CHARS:
            raise ShellSyntaxError(f"line {word.line}: a value grows beyond {MAX_VALUE_CHARS:,} characters")
        return text


# -- statements -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ScriptCommand:
    argv: list[str]
    line: int


@dataclass
class Reading:
    """What the script does, as far as it can be known without running it."""

    commands: list[ScriptCommand] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line, why it was not carried)
    shell: Shell = field(default_factory=Shell)
    depth: int = 0  # sh -c nesting


def _statements(tokens: list[Word | Op]) -> Iterator[list[Word | Op]]:
    """Split at newlines and ';' (keeping && / || inside a statement); an array assignment spans lines."""
    current: list[Word | Op] = []
    depth = 0
    for token in tokens:
        if isinstance(token, Op) and token.text == "(":
            depth += 1
        elif isinstance(token, Op) and token.text == ")":
            depth = max(0, depth - 1)
        if isinstance(token, Op) and token.text in ("\n", ";") and depth == 0:
            if current:
                yield current
            current = []
            continue
        if isinstance(token, Op) and token.text == "\n":
            continue  # a newline inside ( … )
        current.append(token)
    if current:
        yield current


def _line(statement: list[Word | Op]) -> int:
    return statement[0].line


def _text(statement: list[Word | Op]) -> str:
    words = []
    for token in statement:
        if isinstance(token, Op):
            words.append(token.text)
        else:
            words.append("".join(("$" + ("{" + p.text + "}" if p.kind == "var" else "((" + p.text + "))"
                                  if p.kind == "arith" else "(" + p.text + ")")) if p.kind != "lit" else p.text
                                 for p in token.parts))
    return " ".join(words)


def read_script(text: str) -> Reading:
    reading = Reading()
    statements = list(_statements(tokenize(text)))
    _run_block(statements, reading, active=True)
    return reading


BLOCK_STARTS = {"if": "fi", "for": "done", "while": "done", "until": "done", "case": "esac"}
CLOSERS = set(BLOCK_STARTS.values())
MAX_NESTING = 3  # sh -c "…" inside sh -c "…": read at most this deep


def _first(statement: list[Word | Op]) -> str | None:
    return statement[0].literal() if isinstance(statement[0], Word) else None


def _run_block(statements: list[list[Word | Op]], reading: Reading, active: bool) -> None:
    i = 0
    while i < len(statements):
        statement = statements[i]
        head = _first(statement)
        if head in BLOCK_STARTS:
            end = _block_end(statements, i)
            if head == "if":
                _run_if(statements[i:end + 1], reading, active)
            elif active:
                reading.skipped.append((_line(statement), f"a {head} loop is not run: {_text(statement)}"))
            i = end + 1
            continue
        if head and NAME.fullmatch(head) and len(statement) >= 3 and isinstance(statement[1], Op) and \
                statement[1].text == "(" and isinstance(statement[2], Op) and statement[2].text == ")":  # name() {
            end = i
            while end < len(statements) and _first(statements[end]) != "}":
                end += 1
            if active:
                reading.skipped.append((_line(statement), f"function {head} is not run"))
            i = end + 1
            continue
        if active:
            _run_simple(statement, reading)
        i += 1


def _block_end(statements: list[list[Word | Op]], start: int) -> int:
    """The statement that closes the block opened at `start` (if…fi, for/while/until…done, case…esac)."""
    open_blocks: list[str] = []
    for j in range(start, len(statements)):
        head = _first(statements[j])
        if head in BLOCK_STARTS:
            open_blocks.append(BLOCK_STARTS[head])
        elif head in CLOSERS and open_blocks:
            open_blocks.pop()
        if not open_blocks:
            return j
    opener = _first(statements[start]) or ""
    raise ShellSyntaxError(f"line {_line(statements[start])}: {opener} without {BLOCK_STARTS.get(opener, 'its end')}")


def _run_if(block: list[list[Word | Op]], reading: Reading, active: bool) -> None:
    """if COND; then …; [elif COND; then …;] [else …;] fi — only conditions on known strings are decided."""
    branches: list[tuple[list[Word | Op] | None, list[list[Word | Op]]]] = []
    depth = 0
    for statement in block:
        head = _first(statement)
        body_start = statement
        if depth == 0 and head in ("if", "elif"):
            cond, rest = _split_then(statement[1:])
            branches.append((cond, []))
            body_start = rest
        elif depth == 0 and head == "else":
            branches.append((None, []))
            body_start = statement[1:]
        elif depth == 0 and head == "fi":
            break
        else:
            if head in BLOCK_STARTS:
                depth += 1
            if head in BLOCK_STARTS.values():
                depth -= 1
        if body_start:
            if _first(body_start) == "then":
                body_start = body_start[1:]
            if body_start:
                branches[-1][1].append(body_start)
    if not active:
        return
    for condition, body in branches:
        verdict = True if condition is None else _condition(condition, reading.shell)
        if verdict is None and condition is not None:
            reading.skipped.append((_line(block[0]), f"if {_text(condition)}: the condition cannot be decided without "
                                                     "running the script; no branch carried"))
            return
        if verdict:
            _run_block(body, reading, active=True)
            return


def _split_then(tokens: list[Word | Op]) -> tuple[list[Word | Op], list[Word | Op]]:
    for k, token in enumerate(tokens):
        if isinstance(token, Word) and token.literal() == "then":
            return tokens[:k], tokens[k + 1:]
    return tokens, []


def _condition(tokens: list[Word | Op], shell: Shell) -> bool | None:
    """[[ a == b ]], [ -n x ], [ -z x ], !, &&, || over known strings; None when undecidable."""
    result: bool | None = None
    pending = None
    group: list[Word | Op] = []

    def decide(group: list[Word | Op]) -> bool | None:
        words = [shell.assign_value(t) if isinstance(t, Word) else t.text for t in group]
        negate = False
        while words and words[0] == "!":
            negate, words = not negate, words[1:]
        if words[:1] in (["[["], ["["]) and words[-1:] in (["]]"], ["]"]):
            words = words[1:-1]
        else:
            return None
        if any(unresolved_names(w) for w in words):
            return None
        value: bool | None
        if len(words) == 3 and words[1] in ("==", "=", "!="):
            value = (words[0] == words[2]) != (words[1] == "!=")
        elif len(words) == 2 and words[0] in ("-n", "-z"):
            value = bool(words[1]) == (words[0] == "-n")
        elif len(words) == 1:
            value = bool(words[0])
        else:
            return None
        return value != negate

    for token in [*tokens, Op("end", 0)]:
        if isinstance(token, Op) and token.text in ("&&", "||", "end"):
            value = decide(group)
            group = []
            if pending is None:
                result = value
            elif pending == "&&":
                result = None if None in (result, value) and not (result is False or value is False) else \
                    bool(result and value)
            else:
                result = None if None in (result, value) and not (result is True or value is True) else \
                    bool(result or value)
            pending = token.text
        else:
            group.append(token)
    return result


def _run_simple(statement: list[Word | Op], reading: Reading) -> None:
    shell = reading.shell
    line = _line(statement)
    words = [t for t in statement if isinstance(t, Word)]
    if any(isinstance(t, Op) and t.text not in ("(", ")") for t in statement):
        reading.skipped.append((line, f"not carried (pipes, redirections and command lists are not run): "
                                      f"{show(_text(statement))}"))
        return
    exported = False
    if words and words[0].literal() in ("export", "declare", "local", "readonly", "typeset"):
        exported = words[0].literal() == "export"
        words = words[1:]
        statement = statement[1:]
        while words and (words[0].literal() or "").startswith("-"):
            words, statement = words[1:], statement[1:]
    first = statement[0] if statement else None
    if isinstance(first, Word) and ASSIGNMENT.match(first.raw_prefix()):
        _assign(statement, reading, exported)
        return
    if exported:
        for word in words:
            name = word.literal()
            if name and name in shell.scalars:
                shell.exports[name] = shell.scalars[name]
        return
    argv = [f for w in words for f in shell.fields(w)]
    inner = _shell_c(argv)
    if inner is not None and reading.depth < MAX_NESTING:  # srun … bash -c "python pretrain_gpt.py …"
        nested = Reading(shell=shell, depth=reading.depth + 1)
        try:
            _run_block(list(_statements(tokenize(inner))), nested, active=True)
        except ShellSyntaxError as exc:
            reading.skipped.append((line, f"the command string of {show(' '.join(argv[:2]))} … -c: {exc}"))
            return
        reading.commands += [ScriptCommand(c.argv, line) for c in nested.commands]
        reading.skipped += [(line, why) for _, why in nested.skipped]
        return
    if argv:
        reading.commands.append(ScriptCommand(argv, line))


def _shell_c(argv: list[str]) -> str | None:
    """The command string of `… sh -c STRING` (a launcher such as srun may come first)."""
    for k, word in enumerate(argv[:-1]):
        if word.rsplit("/", 1)[-1] in ("sh", "bash"):
            rest = argv[k + 1:]
            for m, option in enumerate(rest[:-1]):
                if option == "-c":
                    return rest[m + 1]
                if not option.startswith("-"):
                    break
    return None


def _assign(statement: list[Word | Op], reading: Reading, exported: bool) -> None:
    shell = reading.shell
    first = statement[0]
    assert isinstance(first, Word)
    match = ASSIGNMENT.match(first.raw_prefix())
    assert match
    name, append = match.group(1), bool(match.group(2))
    rest = statement[1:]
    if isinstance(first, Word) and len(first.raw_prefix()) == match.end() and len(first.parts) == 1 and \
            rest and isinstance(rest[0], Op) and rest[0].text == "(":
        elements = [f for t in rest[1:] if isinstance(t, Word) for f in shell.fields(t)]
        shell.arrays[name] = (shell.arrays.get(name, []) if append else []) + elements
        shell.scalars.pop(name, None)
        return
    # NAME=value: strip the NAME= prefix from the first literal part
    consumed = match.end()
    parts = []
    for part in first.parts:
        if consumed > 0 and part.kind == "lit" and not part.quoted:
            take = min(consumed, len(part.text))
            consumed -= take
            if part.text[take:]:
                parts.append(Part("lit", part.text[take:], False))
            continue
        parts.append(part)
    value = shell.assign_value(Word(parts, first.line))
    if UNRESOLVED.fullmatch(value) and not value.startswith(MARK + "$("):
        value = MARK + name + MARK  # DATA_PATH=$5: name the variable the script's reader knows
    if append:
        if name in shell.arrays:
            shell.arrays[name].append(value)
            return
        value = (shell.scalars.get(name) or "") + value
    shell.scalars[name] = value
    shell.arrays.pop(name, None)
    if exported:
        shell.exports[name] = value
    elif name in shell.exports:
        shell.exports[name] = value
    if len(rest) > 0:
        reading.skipped.append((first.line, f"a command after an assignment is not run: {show(_text(statement))}"))
