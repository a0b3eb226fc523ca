"""Shell words for the scripts the launcher writes (dry-run, command.sh, sbatch): every value single-quoted,
except the one word the launcher composes itself to expand on each node, the `${MASTER_ADDR}:PORT` endpoint.

That word is a distinct type (HostFromEnv), not recognised by its text: a user's value that merely contains
"${MASTER_ADDR}" (a torchrun path, a preset file name in --rdzv-id) is quoted like any other.
"""

from __future__ import annotations

import shlex
import unicodedata
from collections.abc import Sequence

from launcher.errors import MAX_MESSAGE, clip


class HostFromEnv(str):
    """The rendezvous endpoint `${MASTER_ADDR}:PORT`, when each node learns the first node's name at run time."""

    variable = "MASTER_ADDR"
    port: int

    def __new__(cls, port: int) -> HostFromEnv:
        word = super().__new__(cls, f"${{{cls.variable}}}:{int(port)}")
        word.port = int(port)
        return word

    def shell(self) -> str:
        """The word for a bash script: the variable expands; the port is an int, so nothing else can."""
        return f'"${{{self.variable}}}:{self.port}"'

    def resolve(self, host: str) -> str:
        return f"{host}:{self.port}"


class SlurmWord(str):
    """An option whose value the batch shell expands where the job runs: Slurm's node count and job id, the first
    node of the allocation. Its text is fixed by the launcher (never a user's value)."""

    def __new__(cls, option: str, variables: str) -> SlurmWord:
        word = super().__new__(cls, f"{option}={variables}")
        word.option, word.variables = option, variables
        return word

    option: str
    variables: str

    def shell(self) -> str:
        return f'{self.option}="{self.variables}"'


def expands(word: str) -> bool:
    """Whether a word is one the shell expands at run time (the launcher's own, never a user's)."""
    return isinstance(word, (HostFromEnv, SlurmWord))


def shell_word(word: str) -> str:
    """One argv word for a bash script: quoted, except the words the launcher composes to expand at run time
    (HostFromEnv, SlurmWord). A word with control or invisible characters (a terminal escape, a newline, a bidi
    override, a zero-width space, a byte that is not UTF-8) is written in bash's $'…' quoting, with each of them as
    \\xNN of its bytes: the script shows nothing raw, and bash still
    passes exactly the word."""
    if isinstance(word, (HostFromEnv, SlurmWord)):
        return word.shell()
    if any(_unseen(ch) for ch in word):
        return "$'" + "".join(_ansi_c(ch) for ch in word) + "'"
    return shlex.quote(word)


# Characters that are not seen as what they are: controls (Cc), format characters (Cf: bidi overrides, zero-width
# ones), line and paragraph separators (Zl, Zp), and lone surrogates (Cs: a byte that was not UTF-8, as Python
# decodes arguments with surrogateescape).
_UNSEEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _unseen(ch: str) -> bool:
    return unicodedata.category(ch) in _UNSEEN


def _ansi_c(ch: str) -> str:
    if ch in "\\'":
        return "\\" + ch
    if not _unseen(ch):
        return ch
    if 0xDC80 <= ord(ch) <= 0xDCFF:  # surrogateescape: the byte as it was given, so the word is exactly that
        return f"\\x{ord(ch) - 0xDC00:02x}"
    return "".join(f"\\x{byte:02x}" for byte in ch.encode("utf-8", "surrogatepass"))  # C1: two UTF-8 bytes


def shell_words(argv: Sequence[str]) -> list[str]:
    return [shell_word(word) for word in argv]


def shell_comment(text: object, limit: int = MAX_MESSAGE) -> str:
    """Text for a `#` comment line: one line (a newline would end the comment and start a command), no control
    characters (terminal escapes), cut in the middle when long."""
    flat = "".join(" " if unicodedata.category(ch)[0] in "CZ" else ch for ch in str(text))
    return clip(" ".join(flat.split()), limit)
