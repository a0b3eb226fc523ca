"""`launch fetch-megatron`: the pinned Megatron-LM commit into a directory, by git or as a tarball of that commit.

The source is GitHub unless told otherwise (`--source`, $MEGATRON_LAUNCH_MEGATRON_SOURCE): a git URL or local
repository, or a .tar.gz of the commit (GitHub's `archive/<commit>.tar.gz`, a URL or a local file). Everything
lands in a temporary directory beside the destination and is renamed into place only when complete, so an
interrupt or a failed download leaves nothing half-written.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
import zlib
from pathlib import Path
from typing import IO, Any

from launcher import MEGATRON_COMMIT, untrusted
from launcher.errors import UserError, shown
from launcher.megatron.pin import COMMIT_MARKER, ENTRY_SCRIPTS

GIT_SOURCE = "https://github.com/NVIDIA/Megatron-LM.git"
TARBALL_SOURCE = f"https://github.com/NVIDIA/Megatron-LM/archive/{MEGATRON_COMMIT}.tar.gz"
SOURCE_ENV = "MEGATRON_LAUNCH_MEGATRON_SOURCE"
MAX_TARBALL_BYTES = 2 << 30  # the commit's tarball is ~10 MB; a runaway download stops here
MAX_UNPACKED_BYTES = 8 << 30  # what it unpacks to: ~100 MB
MAX_TARBALL_MEMBERS = 200_000  # files in it: ~5,000
# One read of the unpacked stream: tarfile reads a header (a long name, pax records) whole, as its size says; GitHub's
# are under a KiB. A header of gigabytes (a few KB compressed) would be read into memory in one piece.
MAX_HEADER_BYTES = 64 << 20
TARBALL_SUFFIXES = (".tar.gz", ".tgz", ".tar")


def default_source() -> str:
    """$MEGATRON_LAUNCH_MEGATRON_SOURCE, else GitHub: by git where git is installed, else the commit's tarball."""
    return os.environ.get(SOURCE_ENV) or (GIT_SOURCE if shutil.which("git") else TARBALL_SOURCE)


def is_tarball(source: str) -> bool:
    return source.split("?")[0].endswith(TARBALL_SUFFIXES)


def fetch(destination: Path, source: str, log=print) -> str:
    """Put the pinned commit at `destination` (which must not exist); returns how ("git" or "tarball")."""
    destination = destination.absolute()
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=destination.parent, prefix=f".{destination.name}.partial-"))
    try:
        how = "tarball" if is_tarball(source) else "git"
        tree = staging / "megatron-lm"
        if how == "tarball":
            _from_tarball(source, staging, tree, log)
        else:
            _from_git(source, tree, log)
        if not (tree / ENTRY_SCRIPTS["pretrain_gpt"]).is_file():
            raise UserError(f"{source} holds no {ENTRY_SCRIPTS['pretrain_gpt']}: not a Megatron-LM source",
                            f"give --source a Megatron-LM repository or a tarball of {MEGATRON_COMMIT[:12]}")
        os.replace(tree, destination)
        return how
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}  # never wait for a password on a terminal
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)


def _from_git(source: str, tree: Path, log) -> None:
    if shutil.which("git") is None:
        raise UserError("git is not installed", f"install git, or fetch the tarball: --source {TARBALL_SOURCE}")
    log(f"fetching Megatron-LM {MEGATRON_COMMIT[:12]} from {source} (git)")
    tree.mkdir()
    _git("init", "--quiet", cwd=tree)
    # Only the pinned commit, without history; a server that refuses to fetch a commit by id gets a full clone.
    shallow = _git("fetch", "--quiet", "--depth", "1", source, MEGATRON_COMMIT, cwd=tree)
    if shallow.returncode != 0:
        full = _git("fetch", "--quiet", source, cwd=tree)
        if full.returncode != 0:
            raise UserError(f"git cannot fetch {source}: {_last_line(full.stderr or shallow.stderr)}",
                            f"check the network or the URL; or give a local copy: --source DIR_OR_TARBALL "
                            f"(or {SOURCE_ENV})")
    checkout = _git("-c", "advice.detachedHead=false", "checkout", "--quiet", MEGATRON_COMMIT, cwd=tree)
    if checkout.returncode != 0:
        raise UserError(f"{source} does not have the pinned commit {MEGATRON_COMMIT[:12]}: "
                        f"{_last_line(checkout.stderr)}", f"use NVIDIA's repository ({GIT_SOURCE}) or a mirror of it")


def _from_tarball(source: str, staging: Path, tree: Path, log) -> None:
    archive = staging / "source.tar.gz"
    if os.path.lexists(source):
        _copy_bounded(source, archive)
    else:
        log(f"downloading Megatron-LM {MEGATRON_COMMIT[:12]} from {source}")
        try:
            with urllib.request.urlopen(source, timeout=60) as response, open(archive, "wb") as out:
                copied = 0
                while chunk := response.read(1 << 20):
                    copied += len(chunk)
                    if copied > MAX_TARBALL_BYTES:
                        raise UserError(f"{source} is larger than {MAX_TARBALL_BYTES >> 30} GiB: not the tarball of "
                                        "one Megatron-LM commit")
                    out.write(chunk)
        except (OSError, ValueError) as err:
            raise UserError(f"cannot download {source}: {shown(err)}",
                            "check the network or the URL; or download it elsewhere and give the file: "
                            "--source FILE.tar.gz") from None
    try:
        with _Unpacked(archive, source) as stream, tarfile.open(fileobj=stream, mode="r:") as tar:  # type: ignore[call-overload]
            members = _members_within_bounds(tar, source)
            tops = {member.name.split("/")[0] for member in members}
            # no links out, no device files, no absolute paths
            tar.extractall(staging / "unpacked", members=members, filter="data")
    except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as err:
        raise UserError(f"{source} is not a readable tarball: {shown(err)}") from None
    if not (staging / "unpacked").is_dir():
        raise UserError(f"{source} is an empty tarball", f"give a tarball of Megatron-LM {MEGATRON_COMMIT[:12]}")
    # GitHub's tarball holds one folder, Megatron-LM-<commit>/
    root = staging / "unpacked" / tops.pop() if len(tops) == 1 else staging / "unpacked"
    if not root.is_dir() or root.is_symlink():  # one file alone: the checks below find no pretrain_gpt.py in it
        root = staging / "unpacked"
    os.replace(root, tree)
    (tree / COMMIT_MARKER).write_text(MEGATRON_COMMIT + "\n", encoding="utf-8")
    if MEGATRON_COMMIT not in source and MEGATRON_COMMIT[:12] not in source:
        log(f"note: {source} does not name the commit; the launcher takes it as {MEGATRON_COMMIT[:12]}")


class _Unpacked:
    """The tar stream of an archive (gzip, bzip2, xz or none, told by its first bytes) as tarfile reads it, within
    bounds: at most MAX_UNPACKED_BYTES and its headers in all, at most MAX_HEADER_BYTES a read. Without them a few
    MB could make tarfile inflate terabytes (hours), or hold one header of gigabytes in memory."""

    def __init__(self, archive: Path, source: str) -> None:
        self.source = source
        self.limit = MAX_UNPACKED_BYTES + (MAX_TARBALL_MEMBERS + 2) * 3 * tarfile.BLOCKSIZE
        with open(archive, "rb") as probe:
            magic = probe.read(6)
        opener: Any = (gzip.GzipFile if magic.startswith(b"\x1f\x8b") else bz2.BZ2File if magic.startswith(b"BZh")
                       else lzma.LZMAFile if magic.startswith(b"\xfd7zXZ\x00") else open)
        self._file: IO[bytes] = opener(archive, "rb")

    def _refuse(self, what: str) -> UserError:
        return UserError(f"{self.source} {what}: not the tarball of one Megatron-LM commit",
                         "give the commit's .tar.gz (about 10 MB, about 5,000 files)")

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > MAX_HEADER_BYTES:
            raise self._refuse(f"has a record of more than {MAX_HEADER_BYTES >> 20} MiB to read at once "
                               "(a tar header is under a KiB)")
        if self._file.tell() + size > self.limit:
            raise self._refuse(f"unpacks to more than {self.limit:,} bytes")
        return self._file.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        target = offset if whence == 0 else self._file.tell() + offset if whence == 1 else None
        if target is None or target > self.limit:  # from the end: tarfile does not, a decompressor would inflate all
            raise self._refuse(f"unpacks to more than {self.limit:,} bytes")
        return self._file.seek(target)

    def tell(self) -> int:
        return self._file.tell()

    def __enter__(self) -> _Unpacked:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._file.close()


def _copy_bounded(source: str, archive: Path) -> None:
    """A local tarball copied as every input is read: a regular file only (a FIFO or /dev/zero would never end),
    at most MAX_TARBALL_BYTES."""
    copied = 0
    with untrusted.open_binary(source, "--source") as handle, open(archive, "wb") as out:
        if os.fstat(handle.fileno()).st_size > MAX_TARBALL_BYTES:
            copied = MAX_TARBALL_BYTES  # refused before a byte is copied
        while copied <= MAX_TARBALL_BYTES and (chunk := handle.read(1 << 20)):
            copied += len(chunk)
            out.write(chunk)
        if copied > MAX_TARBALL_BYTES or handle.read(1):
            raise UserError(f"{source} is larger than {MAX_TARBALL_BYTES >> 30} GiB: not the tarball of one "
                            "Megatron-LM commit", "give the commit's .tar.gz (about 10 MB)")


def _members_within_bounds(tar: tarfile.TarFile, source: str) -> list[tarfile.TarInfo]:
    """The archive's members, counted before anything is unpacked: a few kilobytes that inflate to terabytes of
    zeros, or millions of empty files, are refused rather than written out."""
    members, size = [], 0
    for member in tar:
        members.append(member)
        size += member.size
        if len(members) > MAX_TARBALL_MEMBERS or size > MAX_UNPACKED_BYTES:
            raise UserError(f"{source} unpacks to more than {MAX_TARBALL_MEMBERS:,} files or "
                            f"{MAX_UNPACKED_BYTES >> 30} GiB: not the tarball of one Megatron-LM commit",
                            "give the commit's .tar.gz (about 10 MB, about 5,000 files)")
    return members


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"
