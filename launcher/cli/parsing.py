"""The one argument parser of every `launch` subcommand: its errors are `error:`/`hint:` lines and exit 2."""

from __future__ import annotations

import argparse
import math
import re
from typing import NoReturn

from launcher.errors import Problem, UserError, closest, did_you_mean
from launcher.pipeline.node_range import NodeRange, parse_nodes


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors raise UserError (printed by launcher.cli.main as error/hint, exit 2)
    instead of printing the usage text and exiting; a misspelled option or choice gets a "did you mean".

    No abbreviations: `--se=env.HF_TOKEN=…` would be read as --set and escape the redaction of what --set
    holds; an option is spelled out or refused (with its "did you mean")."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_args(self, args=None, namespace=None):
        """--set NAME=VALUE words are taken out first, in one pass: argparse's own handling of a repeated
        option grows with the square of their number (30,000 --set took minutes)."""
        action = self._option_string_actions.get("--set")
        if action is None or not isinstance(action, argparse._AppendAction) or args is None:
            return super().parse_args(args, namespace)
        rest, values = [], []
        words = iter(args)
        for word in words:
            if word == "--":
                rest += [word, *words]
                break
            if word == "--set":
                value = next(words, None)
                if value is None:
                    self.error("argument --set: expected one argument")
                values.append(value)
            elif word.startswith("--set="):
                values.append(word.removeprefix("--set="))
            else:
                rest.append(word)
        parsed = super().parse_args(rest, namespace)
        setattr(parsed, action.dest, [*(getattr(parsed, action.dest) or []), *values])
        return parsed

    def error(self, message: str) -> NoReturn:
        see = f"see {self.prog} --help"
        suggestion = self._suggestion(message)
        raise UserError(f"{self.prog}: {message}", f"{suggestion} ({see})" if suggestion else see)

    def _suggestion(self, message: str) -> str:
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        if unknown:
            # compared without the dashes, which every option shares
            options = {o.lstrip("-"): o for o in self._option_string_actions if o.startswith("--")}
            for word in unknown.group(1).split():
                if word.startswith("-"):
                    near = closest(word.split("=", 1)[0].lstrip("-"), options, cutoff=0.7)
                    if near:
                        return f"did you mean {options[near[0]]}?"
            return ""
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            return did_you_mean(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
        return ""


def positive_number(text: str) -> float:
    """argparse type: a finite number above 0 (a rate, a speed): nan, inf and 1e400 are not measurements."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text!r}")
    return value


def positive(text: str) -> int:
    """argparse type: a whole number of at least 1 (nodes, GPUs, jobs)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def node_count(text: str) -> int | NodeRange:
    """argparse type of --nodes: a whole number of at least 1, or an elastic range MIN-MAX."""
    return parse_nodes(text)


def given(parser: argparse.ArgumentParser, args: argparse.Namespace, option: str) -> bool:
    """Whether `option` was given a value other than its default (a flag set, a list not empty)."""
    action = parser._option_string_actions[option]
    return getattr(args, action.dest) not in (action.default, None, [])


def refuse_idle_options(parser: argparse.ArgumentParser, args: argparse.Namespace,
                        idle: list[tuple[str, bool, str, str]]) -> None:
    """UserError naming every option given where it would do nothing: each (option, does nothing here, why, hint).
    An option accepted and then not acted on would let the user believe it was."""
    problems = [Problem(f"{option} does nothing {why}", hint)
                for option, does_nothing, why, hint in idle if does_nothing and given(parser, args, option)]
    if problems:
        raise UserError(problems)
