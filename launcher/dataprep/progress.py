"""A small progress bar on stderr: redrawn in place on a terminal, a line every few seconds otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total_bytes: int, stream: TextIO | None = None, enabled: bool = True):
        self.total_bytes = max(total_bytes, 1)
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.is_tty = enabled and self.stream.isatty()
        self.started = time.monotonic()
        self.last_drawn = 0.0
        self.bytes_done = 0
        self.documents = 0
        self.tokens = 0

    def advance(self, bytes_done: int, documents: int, tokens: int) -> None:
        self.bytes_done = min(bytes_done, self.total_bytes)
        self.documents, self.tokens = documents, tokens
        now = time.monotonic()
        # a terminal is redrawn 5 times a second; logs (CI, Slurm) get a line every 10 s
        if self.enabled and now - self.last_drawn >= (0.2 if self.is_tty else 10.0):
            self.last_drawn = now
            self._draw(final=False)

    def finish(self) -> None:
        if self.enabled:
            self._draw(final=True)

    def interrupt(self) -> None:
        """End an in-place bar with a newline so that error messages start on their own line."""
        if self.is_tty and self.last_drawn:
            self.stream.write("\n")
            self.stream.flush()

    def _draw(self, final: bool) -> None:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        fraction = 1.0 if final else self.bytes_done / self.total_bytes
        filled = int(fraction * 30)
        bar = "#" * filled + "." * (30 - filled)
        rate = self.bytes_done / elapsed / 1e6
        text = (f"[{bar}] {fraction:4.0%}  {self.documents:,} docs  {self.tokens:,} tokens  "
                f"{rate:.1f} MB/s  {elapsed:.1f}s")
        if self.is_tty:
            self.stream.write("\r" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
