"""The one secret rule, for every output: a secret's value never reaches stdout, stderr, JSON or a file.

A secret is an environment variable whose name contains KEY, TOKEN, SECRET, PASSWORD, PASSWD or CREDENTIAL.
Its value is remembered where the launcher first reads it (a preset's or --set's launcher.env, `launch import`'s
exports); `scrub` then replaces each remembered value (also as JSON, repr() and shell quoting would spell it)
with <redacted> in any text. `launch`'s stdout and stderr pass through `scrub` (RedactingStream), so an error
message, a dry-run or a Slurm refusal that quotes a value cannot print a secret; writers of files call
launcher.runs.secrets, which redacts by name, and scrub what they copy from elsewhere (logs, tracebacks).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, TextIO

REDACTED = "<redacted>"
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
# A shorter value ("1", "on") would redact ordinary words everywhere; no real key or token is that short.
MIN_SECRET_CHARS = 4
MAX_REMEMBERED = 1000

_remembered: set[str] = set()


def is_secret(env_name: str) -> bool:
    return bool(SECRET_NAME.search(env_name))


def remember(name: str, value: Any) -> None:
    """Note `value` as a secret when `name` is a secret's name, in each spelling an output may give it."""
    text = str(value)
    if not is_secret(str(name)) or len(text) < MIN_SECRET_CHARS or text == REDACTED:
        return
    if len(_remembered) >= MAX_REMEMBERED:
        return
    _remembered.update({text, json.dumps(text)[1:-1], repr(text)[1:-1], shlex.quote(text)})


def scrub(text: str) -> str:
    """`text` with every remembered secret value replaced by <redacted> (longest first: a value that contains
    another is replaced whole)."""
    if not _remembered or not text:
        return text
    for secret in sorted(_remembered, key=len, reverse=True):
        if len(secret) >= MIN_SECRET_CHARS and secret in text:
            text = text.replace(secret, REDACTED)
    return text


# C0/C1 control characters other than newline and tab: a value holding ESC [ … could recolour, retitle or
# rewrite the user's terminal. The launcher's own output never needs them.
_TERMINAL_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """`text` with control characters written as \\xNN (visible, inert)."""
    return _TERMINAL_CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class RedactingStream:
    """A text stream that scrubs what is written to it before the real stream (the terminal, a pipe) sees it:
    secrets become <redacted>, control characters \\xNN (terminal_safe).

    Writes are line-buffered here, so a secret split across two write() calls is still found."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            done, _, self._pending = self._pending.rpartition("\n")
            self._stream.write(terminal_safe(scrub(done)) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._stream.write(terminal_safe(scrub(self._pending)))
            self._pending = ""
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding … of the real stream
        return getattr(self._stream, name)
