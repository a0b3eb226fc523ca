"""The token list of a one-line calculator program (bc's, awk's BEGIN block) as the importer computes them."""

from __future__ import annotations

import re


def tokens(text: str, token: re.Pattern[str]) -> list[tuple[str, str]] | None:
    """(kind, text) for each match of `token`'s named groups, blanks between them skipped, ending with ("end", "");
    None where text is left that no group reads, or at `--`/`++` (neither program's arithmetic is computed with
    them)."""
    found_tokens: list[tuple[str, str]] = []
    at = 0
    while True:
        while at < len(text) and text[at] in " \t":
            at += 1
        if at >= len(text):
            return [*found_tokens, ("end", "")]
        found = token.match(text, at)
        if found is None or text.startswith(("--", "++"), at):
            return None
        kind = found.lastgroup or ""
        found_tokens.append((kind, found.group(kind)))
        at = found.end()
