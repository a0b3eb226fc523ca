"""User-facing errors: every problem with its fix, reported together, exit code 2."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MAX_SHOWN = 200  # characters of a user's value quoted in a message
MAX_MESSAGE = 2000  # characters of one rendered message: a huge value never floods the terminal
MAX_PROBLEMS = 50  # problems printed at once


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """repr(value) for a message, cut in the middle when long (values come from user input of any size)."""
    if isinstance(value, (list, tuple, dict, set)) and len(value) > limit:
        return f"<{type(value).__name__} of {len(value):,} items>"
    text = repr(value) if not isinstance(value, BaseException) else str(value) or type(value).__name__
    return clip(text, limit)


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = max(limit // 2 - 10, 1)
    return f"{text[:keep]} …[{len(text) - 2 * keep:,} characters]… {text[-keep:]}"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the user's input, and how to fix it."""

    message: str
    hint: str = ""
    # When Megatron itself would fail: "validate" (argument checks before start-up), "runtime" (model build or
    # mid-training, after minutes on the GPUs), "launcher" (a rule of this launcher, e.g. an entry's limits),
    # "data" (the data or tokenizer files, which Megatron opens only when it builds the datasets).
    stage: str = "validate"

    @property
    def fix(self) -> str:
        """The hint, or, where a refusal was written without one, the fix its message implies: every refusal the
        user sees says what to do (rendered and in JSON)."""
        return self.hint or default_hint(self.message)

    def render(self) -> str:
        return f"error: {clip(self.message, MAX_MESSAGE)}\n  hint: {clip(self.fix, MAX_MESSAGE)}"


_IMPLIED_FIXES = (
    (re.compile(r"must be at least (-?\d+)"), "set it to {0} or more"),
    (re.compile(r"must be (?:positive|greater than 0)"), "give a number greater than 0"),
    (re.compile(r"must be (?:an integer|a whole number)"), "give a whole number, e.g. 1"),
    (re.compile(r"must be a (?:number|float)"), "give a number, e.g. 0.5"),
    (re.compile(r"does not exist|is missing|no such file", re.IGNORECASE), "check the path, then run again"),
    (re.compile(r"not valid YAML|not valid JSON|damaged", re.IGNORECASE),
     "fix the file (or give another one), then run again"),
)


def default_hint(message: str) -> str:
    """The fix a refusal's message implies, for one written without a hint."""
    for pattern, fix in _IMPLIED_FIXES:
        match = pattern.search(message)
        if match:
            return fix.format(*match.groups())
    return "change the value named above and run again (`launch show PRESET` shows every setting as resolved)"


class UserError(Exception):
    """Bad input (preset, override, layout, environment): reported without a traceback, exit 2."""

    def __init__(self, problems: list[Problem] | Problem | str, hint: str = ""):
        if isinstance(problems, str):
            problems = [Problem(problems, hint)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems = list(problems)
        super().__init__("\n".join(p.message for p in self.problems))

    def render(self) -> str:
        lines = [p.render() for p in self.problems[:MAX_PROBLEMS]]
        if len(self.problems) > MAX_PROBLEMS:
            lines.append(f"error: … and {len(self.problems) - MAX_PROBLEMS:,} more problems")
        return "\n".join(lines)

    def as_json(self) -> str:
        """One JSON object for --format json: {"error": first message, "problems": [{message, hint, stage}]}."""
        import json

        return json.dumps({"error": self.problems[0].message if self.problems else "", "exit_code": 2,
                           "problems": [{"message": p.message, "hint": p.fix, "stage": p.stage}
                                        for p in self.problems]}, indent=2)


def closest(name: str, candidates: Iterable[str], n: int = 1, cutoff: float = 0.6) -> list[str]:
    """The candidates spelled most like `name`, best first (none when nothing is close)."""
    return difflib.get_close_matches(name, list(candidates), n=n, cutoff=cutoff)


def did_you_mean(name: str, candidates: Iterable[str], n: int = 1, cutoff: float = 0.6, prefix: str = "") -> str:
    """'did you mean X?' (or 'X or Y' for n > 1) for a misspelled name; '' when nothing is close."""
    close = closest(name, candidates, n, cutoff)
    return f"did you mean {' or '.join(prefix + c for c in close)}?" if close else ""
