"""Files that readers see whole or not at all: written beside their target, then renamed over it."""

from __future__ import annotations

from pathlib import Path

from launcher.nofollow import write_atomic


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text`; an interrupt or a full disk leaves the old file (or none), never a part.
    Never through a symbolic link (launcher.nofollow)."""
    write_atomic(path, text)
