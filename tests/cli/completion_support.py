"""The bash completion script run as bash runs it: COMP_WORDS set, the completion function called, COMPREPLY read."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def bash_complete(script: Path, *words: str) -> list[str]:
    line = " ".join(f"'{w}'" for w in words)
    probe = (f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _megatron_launch; "
             'printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return done.stdout.split()
