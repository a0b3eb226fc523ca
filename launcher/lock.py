"""One writer at a time: a lock file holding the holder's pid, refused while another process holds it.

The lock is an flock(2) on the file, so it ends with its process (a killed launcher leaves no stale lock, at most
an unlocked file, which the next run takes over whatever it holds, and says so); the pid inside only names the
holder in the refusal. The file is never half made: the pid is written to a fresh temporary, which is locked
before it is linked (a new lock) or renamed (over an unlocked one left behind) to the lock's name, so the name
always holds a whole pid, and a full disk or an interrupt leaves the name as it was. Nothing is opened through a
symbolic link.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path

from launcher.errors import UserError, shown
from launcher.interrupts import signals_deferred

_held: dict[str, int] = {}  # lock path → descriptor, kept open (and locked) until this process ends
_REMOVE_HINT = "nothing of a run is in it: remove it, then run again"


def hold(path: str | Path, what: str, hint: str) -> str | None:
    """Take the lock at `path` for the rest of this process (or until `release`); UserError naming the holder
    while another process has it, and for a lock that cannot be made (a full disk, a read-only directory).
    Returns what it took over, when the name held a lock file no process held (one a killed process left), for
    the caller to say; None otherwise."""
    key = os.path.abspath(path)
    if key in _held:
        return None
    with signals_deferred():  # Ctrl-C or SIGTERM halfway would leave the temporary beside the lock
        temporary, fd = _new_lock_file(key)
        try:
            left = _put_in_place(temporary, key, what, hint)
        except BaseException:
            os.close(fd)
            _unlink(temporary)
            raise
    _held[key] = fd
    return left


def _new_lock_file(key: str) -> tuple[str, int]:
    """A fresh temporary beside `key` holding this process's pid, already locked by it."""
    directory, name = os.path.split(key)
    temporary = os.path.join(directory, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise _cannot_make(key, exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: no one else can hold it
        pid = f"{os.getpid()}\n".encode()
        if os.write(fd, pid) != len(pid):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    except OSError as exc:
        os.close(fd)
        _unlink(temporary)
        raise _cannot_make(key, exc) from None
    except BaseException:
        os.close(fd)
        _unlink(temporary)
        raise
    return temporary, fd


def _put_in_place(temporary: str, key: str, what: str, hint: str) -> str | None:
    """Give the locked temporary the lock's name: linked where there is none; renamed over one that this process
    could lock (no one holds it: a process that ended without removing it left it), saying what that one was;
    UserError while another holds it."""
    while True:
        try:
            os.link(temporary, key, follow_symlinks=False)
            _unlink(temporary)
            return None
        except FileExistsError:
            pass
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise _cannot_make(key, exc) from None
            _make_empty(key)  # a file system without hard links: an empty lock, at once replaced as one left behind
        old = _open_existing(key)
        if old is None:
            continue  # removed meanwhile by its holder: link again
        try:
            try:
                fcntl.flock(old, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    holder = os.pread(old, 32, 0).decode("ascii", "replace").strip()
                    who = f"process {holder}" if _is_pid(holder) else "another process (it wrote no pid)"
                    raise UserError(f"{what} is in use by {who} (lock {key})", hint) from None
                raise UserError(f"cannot lock {shown(key)}: {exc.strerror or exc}") from None
            if _same_file(old, key):  # still the file at the name, and now this process's to replace
                left = os.pread(old, 32, 0).decode("ascii", "replace").strip()
                try:
                    os.rename(temporary, key)
                except OSError as exc:
                    raise _cannot_make(key, exc) from None
                was = (f"of process {left}, which ended without removing it" if _is_pid(left) else
                       "left empty (by a process stopped while making it)" if not left else "holding no process id")
                return f"the lock file {shown(key)} {was} was taken over"
        finally:
            os.close(old)


_NO_HARD_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK)


def _make_empty(key: str) -> None:
    try:
        os.close(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644))
    except OSError:
        pass  # whatever is there (a link, a FIFO) is named when it is opened for locking


def _is_pid(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 7  # Linux's pid_max is at most 2^22


def _open_existing(key: str) -> int | None:
    """The lock file at `key` opened for locking (None when it is gone); UserError when it is not a regular file."""
    try:  # O_NONBLOCK: a FIFO planted as the lock must not wait for a writer; it is refused below
        fd = os.open(key, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(f"the lock file {shown(key)} is a symbolic link", _REMOVE_HINT) from None
        raise UserError(f"cannot open the lock file {shown(key)}: {exc.strerror or exc}",
                        "is the directory readable?") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UserError(f"the lock file {shown(key)} is not a regular file but {_kind(mode)}", _REMOVE_HINT)
    return fd


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "something else"


def _same_file(fd: int, key: str) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(key, follow_symlinks=False))
    except FileNotFoundError:
        return False


def _cannot_make(key: str, exc: OSError) -> UserError:
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return UserError(f"cannot create the lock file {shown(key)}: {exc.strerror or exc}",
                     "free space on that file system" if full else "is the directory writable?")


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def release(path: str | Path, remove: bool = False) -> None:
    """Give the lock back before this process ends; `remove`: and delete the lock file (while still holding it,
    so a process that opened it meanwhile sees it is gone and makes a new one)."""
    fd = _held.pop(os.path.abspath(path), None)
    if fd is None:
        return
    if remove:
        _unlink(str(path))
    os.close(fd)
