"""A log's lines, read from its last `limit` bytes where it is longer: a run's failure and its last iterations
are at its end, so a log over the bound is judged by its tail rather than refused. One reader for the batch
script's requeue policy and `launch report`. Plain Python (the standard library only): the requeue policy imports
it with the node's python3.

In a Slurm job's log (runs/slurm_log.py) the tail is opened by an attempt line for the attempt the cut runs
through, so its lines keep their attempt.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import BinaryIO

from launcher.runs import slurm_log

MAX_LINE_BYTES = 1 << 20  # of a longer line, the first MiB is read and the rest skipped
BACK_SCAN_BYTES = 64 << 20  # how far before the cut the attempt line it runs through is looked for
_ATTEMPT = b"megatron-launch: job "


class TailLines:
    """The lines of an open regular file, at most its last `limit` bytes. After iterating: `skipped` (bytes of
    its head left unread; 0 when the whole file was read), `empty` and `ended_with_newline` (as untrusted.Lines).

    With `slurm_job`, a cut log's tail starts with an attempt line: the attempt the cut runs through (the last
    attempt line before the cut, or the one before the first after it, or `attempt`)."""

    def __init__(self, handle: BinaryIO, limit: int, slurm_job: str | None = None, attempt: int | None = None):
        self.handle, self.limit, self.slurm_job, self.attempt = handle, limit, slurm_job, attempt
        self.skipped = 0
        self.empty = True
        self.ended_with_newline = True

    def __iter__(self) -> Iterator[str]:
        handle = self.handle
        size = os.fstat(handle.fileno()).st_size
        start = 0
        if size > self.limit:
            start = size - self.limit
            opening = self._attempt_line(start) if self.slurm_job is not None else None
            handle.seek(start - 1)
            if handle.read(1) != b"\n":  # the cut runs through a line: it is skipped
                first = handle.readline(MAX_LINE_BYTES)
                if not first.endswith(b"\n"):
                    self._skip_rest_of_line(handle)
                start = handle.tell()
            self.skipped = start
            if opening is not None:
                yield opening
        handle.seek(start)
        read = 0
        while read < self.limit:
            raw = handle.readline(MAX_LINE_BYTES)
            if not raw:
                return
            read += len(raw)
            self.empty = False
            self.ended_with_newline = raw.endswith(b"\n")
            if not self.ended_with_newline and len(raw) == MAX_LINE_BYTES:
                read += self._skip_rest_of_line(handle)
            yield raw.decode("utf-8", "replace").rstrip("\r\n")

    def _skip_rest_of_line(self, handle: BinaryIO) -> int:
        skipped = 0
        while (rest := handle.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
            skipped += len(rest)
        self.ended_with_newline = bool(rest)
        return skipped + len(rest)

    def _attempt_line(self, cut: int) -> str | None:
        job, number = self._last_attempt_before(cut)
        if number is None:
            after = self._first_attempt_after(cut)
            if after is not None:
                job, number = after[0], after[1] - 1
        if number is None:
            number = self.attempt
        if number is None or number < 1:
            return None
        return f"megatron-launch: job {job or self.slurm_job or 0} attempt {number} on (the last {self.limit} " \
               "bytes of the log)"

    def _last_attempt_before(self, cut: int) -> tuple[str | None, int | None]:
        """The job and number of the last attempt line that starts before `cut` (up to BACK_SCAN_BYTES back)."""
        low = max(0, cut - BACK_SCAN_BYTES)
        self.handle.seek(low)
        block = self.handle.read(cut - low)
        at = len(block)
        while (at := block.rfind(_ATTEMPT, 0, at)) >= 0:
            if at == 0 and low > 0:
                break  # the start of the block may be mid-line
            if at == 0 or block[at - 1:at] == b"\n":
                end = block.find(b"\n", at)
                line = block[at:end if end >= 0 else len(block)].decode("utf-8", "replace")
                if (found := slurm_log.attempt_of(line)) is not None:
                    return found
        return None, None

    def _first_attempt_after(self, offset: int) -> tuple[str, int] | None:
        """The job and number of the first attempt line after `offset` (a cheap pass: one prefix test a line)."""
        self.handle.seek(offset)
        self.handle.readline(MAX_LINE_BYTES)
        while raw := self.handle.readline(MAX_LINE_BYTES):
            if raw.startswith(_ATTEMPT) and (found := slurm_log.attempt_of(raw.decode("utf-8", "replace"))):
                return found
        return None
