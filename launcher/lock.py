"""One writer at a time: a lock file holding the holder's pid, refused while another process holds it.

The lock is an flock(2) on the file, so it ends with its process (a killed launcher leaves no stale lock, at most
an unlocked file); the pid inside only names the holder in the refusal. The lock file is opened without following
a symbolic link.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path

from launcher.errors import UserError, shown

_held: dict[str, int] = {}  # lock path → descriptor, kept open (and locked) until this process ends


def hold(path: str | Path, what: str, hint: str) -> None:
    """Take the lock at `path` for the rest of this process (or until `release`); UserError naming the holder
    while another process has it."""
    key = os.path.abspath(path)
    if key in _held:
        return
    while True:
        fd = _open(key)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.read(fd, 32).decode("ascii", "replace").strip()
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                who = f"process {holder}" if holder.isdigit() else "another process"
                raise UserError(f"{what} is in use by {who} (lock {key})", hint) from None
            raise UserError(f"cannot lock {shown(key)}: {exc.strerror or exc}") from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(key, follow_symlinks=False))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # its holder removed that file while this process waited for it: lock the new one
    _held[key] = fd
    try:  # the holder's pid, for the message another process shows; a full disk does not stop the lock
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError:
        pass


def _open(key: str) -> int:
    try:  # O_NONBLOCK: a FIFO planted as the lock must not wait for a reader; it is refused below
        fd = os.open(key, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(f"the lock file {shown(key)} is a symbolic link", "remove it, then run again") from None
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        raise UserError(f"cannot create the lock file {shown(key)}: {exc.strerror or exc}",
                        "free space on that file system" if full else "is the directory writable?") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"the lock file {shown(key)} is not a regular file (a FIFO, a device or a directory)",
                        "remove it, then run again")
    os.set_blocking(fd, True)
    return fd


def release(path: str | Path, remove: bool = False) -> None:
    """Give the lock back before this process ends; `remove`: and delete the lock file (while still holding it,
    so a process that opened it meanwhile sees it is gone and locks a new one)."""
    fd = _held.pop(os.path.abspath(path), None)
    if fd is None:
        return
    if remove:
        try:
            os.unlink(path)
        except OSError:
            pass
    os.close(fd)
