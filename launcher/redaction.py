"""The one secret rule, for every output: a secret's value never reaches stdout, stderr, JSON or a file.

A secret is an environment variable whose name contains KEY, TOKEN (not TOKENIZER…, …TOKENS), SECRET, PASSWORD,
PASSWD, PASSPHRASE or CREDENTIAL, or has PASS, PAT, AUTH, COOKIE, DSN, WEBHOOK or PRIVATE as a word of it (DB_PASS,
GH_PAT), or whose value has the form of a well-known credential whatever the name (hf_…, ghp_…, github_pat_…,
glpat-…, sk-…, xox?-…, AKIA…/ASIA…, AIza…, nvapi-…). Its value is remembered where the launcher first reads it (a
preset's or --set's launcher.env, `launch import`'s exports); `scrub` then replaces each remembered value (also as
JSON, repr() and shell quoting would spell it), and any credential-shaped word, with <redacted> in any text.
`launch`'s stdout and stderr pass through `scrub` (RedactingStream), so an error message, a dry-run or a Slurm
refusal that quotes a value cannot print a secret; writers of files call launcher.runs.secrets, which redacts
by this rule, and scrub what they copy from elsewhere (logs, tracebacks).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, TextIO

REDACTED = "<redacted>"
# TOKEN, but not a tokenizer's setting (TOKENIZERS_PARALLELISM) nor a count of tokens (MAX_TOKENS)
SECRET_NAME = re.compile(r"KEY|TOKEN(?!IZER|S(?:_|$))|SECRET|PASSW(?:OR)?D|PASSPHRASE|CREDENTIAL"
                         r"|(?:^|_)(?:PASS|PAT|AUTH|COOKIE|DSN|WEBHOOK|PRIVATE)(?:_|$)", re.IGNORECASE)
# Credentials recognisable by their form (Hugging Face, GitHub, GitLab, OpenAI-style, Slack, AWS, Google, NVIDIA
# NGC): such a value is a secret under any variable name.
SECRET_VALUE = re.compile(r"(?<![\w/.-])(?:hf_[A-Za-z0-9]{30,40}|gh[pousr]_[A-Za-z0-9]{36}|github_pat_\w{60,}"
                          r"|glpat-[\w-]{20}|sk-(?:proj-)?[\w-]{32,}|xox[abprs]-[\w-]{10,}|(?:AKIA|ASIA)[0-9A-Z]{16}"
                          r"|AIza[\w-]{35}|nvapi-[\w-]{40,})(?![\w-])")
# A password in a URL's userinfo (postgres://user:pw@host/db, https://user:token@host) or in a registry login
# written before an image (user:token@registry/image): the part after the colon is a secret under any name.
# Without a scheme only the registry form counts (a host, then a path): `B:USR1@300` (sbatch's --signal) is no login.
USERINFO = re.compile(r"(?:(?P<user>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:<>]*):(?P<password>[^\s/@<>]+|<redacted>)"
                      r"@(?=[\w\[])"
                      r"|(?P<login>(?<![\w/.:@-])[^\s/@:<>]*):(?P<token>[^\s/@<>]+|<redacted>)"
                      r"@(?=[\w-]+(?:\.[\w-]+)*(?::\d+)?/))")
# A shorter value ("1", "on") would redact ordinary words everywhere; no real key or token is that short.
MIN_SECRET_CHARS = 4
MAX_REMEMBERED = 1000

_remembered: set[str] = set()
_secret_names: set[str] = set()  # variables made secrets by their value (remember), for checks by name later


def is_secret(env_name: str, value: Any = None) -> bool:
    """Whether the variable `env_name` (holding `value`, where the caller has it) is a secret."""
    return bool(SECRET_NAME.search(env_name)) or env_name in _secret_names or (
        value is not None and has_secret_form(str(value)))


def has_secret_form(text: str) -> bool:
    """Whether `text` holds a credential by its form: a known token's shape, or a password in a URL's userinfo."""
    return SECRET_VALUE.search(text) is not None or any(
        (match.group("password") or match.group("token")) != REDACTED for match in USERINFO.finditer(text))


def remember(name: str, value: Any) -> None:
    """Note `value` as a secret when the variable is one (by its name or its value), in each spelling an output
    may give it; a variable that is a secret by its value is a secret by its name from then on."""
    text = str(value)
    if not is_secret(str(name), text) or len(text) < MIN_SECRET_CHARS or text == REDACTED:
        return
    if len(_remembered) >= MAX_REMEMBERED:
        return
    _secret_names.add(str(name))
    _remembered.update({text, json.dumps(text)[1:-1], repr(text)[1:-1], shlex.quote(text)})


def forget_all() -> None:
    """Forget every remembered secret (a new command in the same process: the tests' in-process CLI runs)."""
    _remembered.clear()
    _secret_names.clear()


def scrub(text: str) -> str:
    """`text` with every remembered secret value replaced by <redacted> (longest first: a value that contains
    another is replaced whole), and any credential-shaped word (SECRET_VALUE) too, wherever it came from."""
    if not text:
        return text
    for secret in sorted(_remembered, key=len, reverse=True):
        if len(secret) >= MIN_SECRET_CHARS and secret in text:
            text = text.replace(secret, REDACTED)
    text = SECRET_VALUE.sub(REDACTED, text)
    return USERINFO.sub(lambda m: f"{m.group('user') or m.group('login')}:{REDACTED}@", text) if "@" in text else text


def for_file(text: str) -> str:
    """Text as a file the launcher writes may hold it: every secret (remembered, or by its form, URL passwords
    included) replaced. Every writer of a file passes its text through here (launcher.nofollow.write_atomic)."""
    return scrub(text)


def scrub_values(value: Any) -> Any:
    """`value` (a mapping, list or scalar as a file records it) with every string scrubbed, keys included."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub_values(k): scrub_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_values(v) for v in value]
    return value


# A word that sets an environment variable: `env.NAME=value` or `launcher.env.NAME=value` (a --set, also spelt
# --set=…), or `NAME=value` with a variable's name (an `env` argument, a line of an env file).
ASSIGNMENT = re.compile(r"(?:--set=)?\s*(?:(?:launcher\.)?env\.(?P<name>[^=]*)|(?P<var>[A-Za-z_][A-Za-z0-9_]*))=")


def scrub_assignment(word: str) -> str:
    """`env.HF_TOKEN=abc` or `HF_TOKEN=abc` → `…=<redacted>` when the variable is a secret (by name or value)."""
    match = ASSIGNMENT.match(word)
    if match and is_secret(match.group("name") or match.group("var"), word[match.end():]):
        return word[:match.end()] + REDACTED
    return word


def scrub_record(value: Any, key: str = "") -> Any:
    """A record (a run's manifest) as a file may hold it, whoever wrote what was read back: the text value of a
    secret-named member, and the value of a word that sets a secret variable, are <redacted>; every other string
    is scrubbed (scrub). A null, a number or a truth value is kept: it hides nothing."""
    if isinstance(value, str):
        return REDACTED if key and is_secret(key, value) else scrub(scrub_assignment(value))
    if isinstance(value, dict):
        return {scrub(str(k)): scrub_record(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_record(v) for v in value]
    return value


# C0/C1 control characters other than newline and tab: a value holding ESC [ … could recolour, retitle or
# rewrite the user's terminal. And characters that change what a line seems to say without being seen: bidi
# overrides and isolates (U+202A-E, U+2066-9: "Trojan Source"), zero-width ones (U+200B-F, U+2060-4, U+FEFF, U+180E,
# U+034F, U+061C, soft hyphen) and line/paragraph separators (U+2028/9, U+0085: a new line the eye does not see).
# The launcher's own output never needs them.
_TERMINAL_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u034f\u061c\u115f\u1160\u180e\u200b-\u200f"
                                r"\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]")


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def terminal_safe(text: str) -> str:
    """`text` with control and invisible characters written as \\xNN / \\uNNNN (visible, inert)."""
    return _TERMINAL_CONTROLS.sub(lambda m: _escaped(m.group()), text)


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
