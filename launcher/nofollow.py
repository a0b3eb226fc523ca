"""Every file the launcher writes: opened without following a symbolic link, inside a real directory.

A run directory, a report's plots/ or an --output-dir may hold symlinks planted by someone else (or left
dangling by a copy): `logs/attempt-2.log -> ~/.bashrc`. Writing through one would change a file outside
the run. So the directory is opened with O_NOFOLLOW|O_DIRECTORY (a symlinked directory is refused), the file
relative to it with O_NOFOLLOW (a symlinked file is refused), and a whole-file write goes to a fresh
O_EXCL temporary that is renamed over the name (rename replaces a link, never its target).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from launcher import redaction
from launcher.errors import UserError, shown

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _symlink_error(path: Path, what: str) -> UserError:
    return UserError(f"{what} {shown(str(path))} is a symbolic link; the launcher does not write through links",
                     "remove the link (or give another directory), then run again")


def real_dir(path: str | Path, what: str = "directory", create: bool = True) -> Path:
    """`path` as a directory that is not a symbolic link, made (with its parents) when missing. OSError when it
    cannot be made (the caller says what for); UserError for a link or a file in its place."""
    path = Path(path)
    if create and not os.path.lexists(path):
        path.mkdir(parents=True, exist_ok=True)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise _symlink_error(path, what)
    if not stat.S_ISDIR(info.st_mode):
        raise UserError(f"{what} {shown(str(path))} is not a directory", "give a directory")
    return path


@contextmanager
def _directory(path: Path, what: str, follow: bool = False) -> Iterator[int]:
    try:
        fd = os.open(path, _DIR_FLAGS & ~os.O_NOFOLLOW if follow else _DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
            raise _symlink_error(path, what) from None
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def open_file(path: str | Path, mode: str = "w", *, what: str = "file", encoding: str | None = "utf-8",
              errors: str | None = None, buffering: int = -1, user_directory: bool = False) -> IO[Any]:
    """Open `path` for writing: mode "w" (truncate), "a" (append) or "x" (must not exist), "b" for bytes.
    `user_directory`: as for write_atomic.

    OSError as open() raises it (a full disk, a read-only mount); UserError for a symbolic link or a file that
    is not a regular one (a FIFO would block, a device would take the output)."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    flags |= {"w": os.O_TRUNC, "a": os.O_APPEND, "x": os.O_EXCL}[mode.replace("b", "")]
    with _directory(path.parent, "the directory of " + what, follow=user_directory) as parent:
        try:
            fd = os.open(path.name, flags, 0o644, dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _symlink_error(path, what) from None
            raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserError(f"{what} {shown(str(path))} is not a regular file", "remove it, then run again")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    if "b" in mode:
        return os.fdopen(fd, mode.replace("x", "w").replace("a", "a"), buffering=buffering)
    return os.fdopen(fd, mode.replace("x", "w"), encoding=encoding, errors=errors, buffering=buffering)


def write_atomic(path: str | Path, data: str | bytes, *, what: str = "file", mode: int = 0o644,
                 user_directory: bool = False) -> None:
    """Replace `path` with `data` as a whole: a fresh temporary in the same (real) directory, written, flushed to
    the disk and renamed over it. An interrupt, a crash or a full disk leaves the old file (or none), never a part
    or an empty one; a link at `path` is replaced. `user_directory`: the directory is one the user named (import
    -o, prepare-data's output prefix), which may be reached through a link of theirs. Text passes the one secret
    rule first (redaction.for_file): no file the launcher writes holds a secret in clear."""
    path = Path(path)
    payload = redaction.for_file(data).encode("utf-8") if isinstance(data, str) else data
    with _directory(path.parent, "the directory of " + what, follow=user_directory) as parent:
        try:  # a device or FIFO at the name (-o /dev/full) is not a file to replace
            kind = os.lstat(path.name, dir_fd=parent).st_mode
        except FileNotFoundError:
            kind = None
        if kind is not None and not (stat.S_ISREG(kind) or stat.S_ISLNK(kind)):
            raise UserError(f"{what} {shown(str(path))} is not a regular file", "give a file name, then run again")
        temporary = f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                     dir_fd=parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temporary, mode, dir_fd=parent)
            os.replace(temporary, path.name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            try:
                os.unlink(temporary, dir_fd=parent)
            except OSError:
                pass
            raise
