"""A Makefile whose recipe runs the training command (`make train TP=4`), as the bash that make hands the recipe:
make substitutes its variables into the recipe's text before any shell reads it (`$(ARGS)` is ARGS's text, quotes
and all; `NAME ?= v` unless the caller or the environment set NAME; a `NAME=VALUE` argument over every assignment),
`$$` is a `$` for the shell, `$(shell CMD)` is the shell's `$(CMD)`, and a recipe line's leading `@`/`-` are make's.
A Makefile with conditionals or includes is left to the bash reader (its branches are make's, not the shell's)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

_RULE = re.compile(r"^([A-Za-z0-9_./%-][A-Za-z0-9_./% -]*):(?!=)(.*)$")
_ASSIGN = re.compile(r"^(?:(export|override)\s+)?([A-Za-z_][A-Za-z0-9_.-]*)\s*(\?=|:::=|::=|:=|\+=|!=|=)\s*(.*)$")
_DIRECTIVE = re.compile(r"^\s*(ifeq|ifneq|ifdef|ifndef|else|endif|include|-include|sinclude|define|endef)\b")
_REFERENCE = re.compile(r"\$(?:\(([^()$]*)\)|\{([^{}$]*)\}|([A-Za-z@<^*?]))")
_BOUND = 64  # nesting of variable references
_LARGEST = 1_000_000  # characters a recipe expands to (`A = $(B)$(B)`, `B = $(C)$(C)` … doubles at each level)


class _TooLarge(Exception):
    pass


def makefile_script(text: str, positional: Sequence[str], environment: Mapping[str, str] | None) -> str | None:
    """The bash that make runs for the target (the first one that runs a pretrain_*.py, or the one named among
    `positional`), or None when `text` is no Makefile of that shape."""
    if text.lstrip().startswith("#!") or "pretrain_" not in text:
        return None
    try:
        return _script(text, positional, environment)
    except _TooLarge:
        return None  # past the bound: the bash reader, bounded itself, decides


def _script(text: str, positional: Sequence[str], environment: Mapping[str, str] | None) -> str | None:
    lines = _logical_lines(text)
    if any(_DIRECTIVE.match(line) for line in lines):
        return None
    overrides = dict(w.split("=", 1) for w in positional if "=" in w and not w.startswith("-"))
    wanted = [w for w in positional if "=" not in w and not w.startswith("-")]
    values: dict[str, tuple[str, bool]] = {}  # name → (text, recursive)
    appended: dict[str, list[str]] = {}  # name → its text and what `+=` added, not yet joined
    sizes: dict[str, int] = {}  # name → the length of its text once joined
    exported: list[str] = []
    recipes: dict[str, list[str]] = {}
    order: list[str] = []
    current: list[str] | None = None
    for line in lines:
        if line.startswith("\t") and current is not None:
            current.append(line[1:])
            continue
        stripped = line.split("#", 1)[0].rstrip() if not line.startswith("\t") else ""
        if not stripped.strip():
            continue
        assign = _ASSIGN.match(stripped)
        if assign:
            current = None
            prefix, name, op, value = assign.groups()
            if op != "+=" or name not in values:
                _settle(values, appended)
                sizes.pop(name, None)  # set anew: its own length from here
            if prefix == "export":
                exported.append(name)
            if name in overrides:
                continue
            if op == "?=" and (name in values or name in (environment or {})):
                continue
            if op == "+=" and name in values:
                pieces = appended.setdefault(name, [values[name][0]])
                pieces.append(value)  # joined once, by _settle: linear in the file
                sizes[name] = sizes.get(name, len(pieces[0])) + 1 + len(value)
                if sizes[name] > _LARGEST:
                    raise _TooLarge
                continue
            elif op in (":=", "::=", ":::="):
                values[name] = (_expand(value, values, overrides, 0), False)
            elif op == "!=":
                values[name] = (f"$(shell {value})", False)
            else:
                values[name] = (value, True)
            continue
        if stripped.startswith("export "):
            exported += stripped.split()[1:]
            continue
        rule = _RULE.match(stripped)
        if rule is None:
            return None  # not a line of make's that is read here: the bash reader decides
        shared: list[str] = []  # `a b: deps` gives a and b the same recipe
        for target in rule.group(1).split():
            recipes[target] = shared
            order.append(target)
        current = shared
        inline = rule.group(2).partition(";")
        if inline[1]:
            shared.append(inline[2])
    _settle(values, appended)
    target = next((t for t in wanted if t in recipes), None) or next(
        (t for t in order if any("pretrain_" in r for r in recipes[t])), None)
    if target is None or not recipes[target]:
        return None
    script = ["#!/bin/bash"]
    for name in dict.fromkeys(exported):
        if name in overrides or name in values:
            text_of = overrides[name] if name in overrides else _expand(values[name][0], values, overrides, 0)
            script.append(f"export {name}={_quoted(text_of)}")
    for line in recipes[target]:
        body = line.lstrip()
        while body[:1] in ("@", "-", "+"):
            body = body[1:].lstrip()
        script.append(_expand(body.replace("$@", target), values, overrides, 0, recipe=True))
    return "\n".join(script) + "\n"


def _settle(values: dict[str, tuple[str, bool]], appended: dict[str, list[str]]) -> None:
    """What `+=` added, joined into each variable's text (with make's one space)."""
    for name, pieces in appended.items():
        text = " ".join(pieces)
        if len(text) > _LARGEST:
            raise _TooLarge
        values[name] = (text, values[name][1])
    appended.clear()


def _logical_lines(text: str) -> list[str]:
    """Lines with make's backslash continuations joined (a recipe keeps its backslash-newline for the shell); in
    pieces, so that a file of continuations is read in linear time."""
    out: list[str] = []
    parts: list[str] = []
    for raw in text.splitlines():
        if not parts:
            parts.append(raw)
        elif parts[0].startswith("\t"):  # a recipe keeps the shell's continuation
            parts.append("\n" + raw)
        else:  # make joins any other line with one space
            parts[-1] = parts[-1][:-1].rstrip()
            parts.append(" " + raw.lstrip())
        if not (raw.endswith("\\") and not raw.endswith("\\\\")):
            out.append("".join(parts))
            parts = []
    if parts:
        out.append("".join(parts))
    return out


def _expand(text: str, values: Mapping[str, tuple[str, bool]], overrides: Mapping[str, str], depth: int,
            recipe: bool = False) -> str:
    """make's substitution of `$(NAME)`/`${NAME}`; a name make does not define is the environment's, said as the
    shell's `${NAME}`; `$(shell CMD)` is `$(CMD)`; `$$` is left to the recipe's shell as `$`."""
    if depth > _BOUND:
        return text
    out: list[str] = []
    at = 0
    while at < len(text):
        if text.startswith("$$", at):
            out.append("$" if recipe else "$$")
            at += 2
            continue
        match = _REFERENCE.match(text, at)
        if match is None:
            out.append(text[at])
            at += 1
            continue
        inner = match.group(1) if match.group(1) is not None else match.group(2) if match.group(2) is not None \
            else match.group(3)
        at = match.end()
        if inner.startswith("shell "):
            out.append("$(" + _expand(inner[6:], values, overrides, depth + 1) + ")")
        elif inner in overrides:
            out.append(overrides[inner])
        elif inner in values:
            value, recursive = values[inner]
            out.append(_expand(value, values, overrides, depth + 1) if recursive else value)
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", inner):
            out.append("${" + inner + "}")  # the environment's, as make reads it
        else:
            out.append(match.group(0))  # a function of make's (subst, wildcard …): not known here
    if len(out) > _LARGEST or sum(map(len, out)) > _LARGEST:  # once a call: its pieces, then their length
        raise _TooLarge
    return "".join(out)


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
