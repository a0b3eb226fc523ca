"""Tokenization progress on stderr: on a terminal the same tqdm bar as a training run's monitor, elsewhere (CI,
Slurm logs) a plain line every few seconds."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

PLAIN_LINE_SECONDS = 10.0


class Progress:
    def __init__(self, total_bytes: int, stream: TextIO | None = None, enabled: bool = True):
        self.total_bytes = max(total_bytes, 1)
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.started = time.monotonic()
        self.last_line = self.started
        self.bytes_done = 0
        self.documents = 0
        self.tokens = 0
        self._bar: Any = None
        if enabled and self.stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=self.total_bytes, file=self.stream, unit="B", unit_scale=True,
                             dynamic_ncols=True, leave=True)

    def advance(self, bytes_done: int, documents: int, tokens: int) -> None:
        self.bytes_done = min(bytes_done, self.total_bytes)
        self.documents, self.tokens = documents, tokens
        if self._bar is not None:
            self._bar.update(self.bytes_done - self._bar.n)
            self._bar.set_postfix_str(f"{documents:,} docs, {tokens:,} tokens", refresh=False)
        elif self.enabled and time.monotonic() - self.last_line >= PLAIN_LINE_SECONDS:
            self.last_line = time.monotonic()
            self._line(self.bytes_done / self.total_bytes)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.update(self.total_bytes - self._bar.n)
            self._bar.close()
        elif self.enabled:
            self._line(1.0)

    def interrupt(self) -> None:
        """End a terminal bar so that error messages start on their own line."""
        if self._bar is not None:
            self._bar.close()

    def _line(self, fraction: float) -> None:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.bytes_done / elapsed / 1e6
        self.stream.write(f"{fraction:4.0%}  {self.documents:,} docs  {self.tokens:,} tokens  {rate:.1f} MB/s  "
                          f"{elapsed:.1f}s\n")
        self.stream.flush()
