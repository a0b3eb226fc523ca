"""Shell words for the scripts the launcher writes (dry-run, command.sh, sbatch): every value single-quoted,
except the words the launcher composed itself to expand on each node (the ${MASTER_ADDR} endpoint)."""

from __future__ import annotations

import shlex
from collections.abc import Collection, Sequence


def shell_words(argv: Sequence[str], expand: Collection[int] = ()) -> list[str]:
    """`expand` words go in double quotes so that the shell fills in their ${VAR}; they hold no other $, ` or \\."""
    return [f'"{word}"' if i in expand else shlex.quote(word) for i, word in enumerate(argv)]
