"""Megatron's C++ dataset helpers, built once per source and reused by every checkout and launch here.

Global rank 0 runs `make -C megatron/core/datasets` at start (initialize._compile_dependencies): a fresh checkout
compiles helpers.cpp with g++ -O3, ~10 s on the H200 machine, inside the start-up of the first run. Before a
launch here the launcher puts an up-to-date `helpers_cpp<EXT_SUFFIX>` into the checkout, so that make finds
nothing to do:

1. already built and newer than helpers.cpp: nothing to do;
2. the launcher's cache holds a build of this exact source (sha256 of helpers.cpp and the Makefile, and the
   Python's extension suffix): copied in;
3. an installed megatron-core wheel ships the same helpers.cpp prebuilt: copied in (and cached);
4. otherwise `make` builds it in the cache in the background while torchrun starts (the ranks' imports take longer
   than the build); it is copied in when done. Should rank 0 get there first, it builds its own, as without the
   launcher: both files are whole builds of the same source, and each lands by an atomic rename or by make.

Only files the current user owns and no one else can write are taken from the cache (they are loaded as code).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sysconfig
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Literal

from launcher import untrusted
from launcher.megatron.pin import cache_dir

SOURCE = "helpers.cpp"
MAKEFILE = "Makefile"
MAX_SOURCE_BYTES = 8 << 20  # helpers.cpp is ~30 KB: a checkout's file is read within a bound, never a FIFO's wait


def _source(path: Path) -> bytes | None:
    """A source file of the checkout to hash; None when it is not a regular file within the bound."""
    return untrusted.bytes_or_none(path, "Megatron source", MAX_SOURCE_BYTES)
BUILD_TIMEOUT_S = 600


def datasets_dir(megatron_path: Path) -> Path:
    return megatron_path / "megatron" / "core" / "datasets"


def built_name(suffix: str | None = None) -> str:
    """The file make writes: helpers_cpp + this Python's extension suffix (the training Python is this one)."""
    return "helpers_cpp" + (suffix if suffix is not None else str(sysconfig.get_config_var("EXT_SUFFIX")))


def source_key(datasets: Path, suffix: str) -> str | None:
    """The cache key of a checkout's helpers: its source, its Makefile, the extension suffix; None without source."""
    digest = hashlib.sha256()
    source = _source(datasets / SOURCE)
    makefile = _source(datasets / MAKEFILE) if os.path.lexists(datasets / MAKEFILE) else b""
    if source is None or makefile is None:
        return None
    digest.update(source)
    digest.update(b"\0" + makefile if makefile else b"\0")
    digest.update(b"\0" + suffix.encode())
    return digest.hexdigest()[:32]


def is_up_to_date(datasets: Path, suffix: str) -> bool:
    """What make decides (the built file exists and is not older than the source), and the file is a whole build:
    make, killed while it linked, leaves a cut file newer than the source, which it would never build again."""
    built = datasets / built_name(suffix)
    try:
        newer = built.stat().st_mtime >= (datasets / SOURCE).stat().st_mtime
    except OSError:
        return False
    return newer and is_whole_build(built)


_ELF_MAGIC = b"\x7fELF"


def is_whole_build(path: Path) -> bool:
    """Not an empty or cut file: an ELF shared object holds its section table at its end (GNU ld), so a file that
    ends before that table (or inside the header) was cut while written. A file of another format is taken as
    whole (nothing here tells otherwise)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            header = handle.read(64)
    except OSError:
        return False
    if size == 0 or (_ELF_MAGIC.startswith(header[:4]) and len(header) < 64):
        return False  # empty, or cut inside the ELF header
    if not header.startswith(_ELF_MAGIC):
        return True
    wide = header[4] == 2
    order: Literal["little", "big"] = "little" if header[5] == 1 else "big"
    table, entry_size, entries = (header[0x28:0x30], header[0x3A:0x3C], header[0x3C:0x3E]) if wide else \
        (header[0x20:0x24], header[0x2E:0x30], header[0x30:0x32])
    end = int.from_bytes(table, order) + int.from_bytes(entry_size, order) * int.from_bytes(entries, order)
    return size >= end


def _trusted(path: Path) -> bool:
    """A regular file (not a link), and it and its directory belong to this user and no one else can write them."""
    try:
        for item in (path, path.parent):
            info = item.lstat()
            if info.st_uid != os.getuid() or info.st_mode & 0o022:
                return False
        return path.is_file() and not path.is_symlink()
    except OSError:
        return False


def _install(built: Path, target: Path) -> None:
    """Copy `built` over `target` by an atomic rename: readers and make see the old file, none, or the new one."""
    fd, temporary = tempfile.mkstemp(prefix=".helpers-", suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        shutil.copyfile(built, temporary)
        os.chmod(temporary, 0o755)
        with open(temporary, "rb") as handle:  # on the disk before the name says it is there (a crash, power)
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def wheel_build(source_digest: str, suffix: str) -> Path | None:
    """The prebuilt helpers of an installed megatron-core wheel whose helpers.cpp is byte for byte this one."""
    try:
        dist = metadata.distribution("megatron-core")
    except metadata.PackageNotFoundError:
        return None
    folder = Path(str(dist.locate_file("megatron/core/datasets")))
    source = _source(folder / SOURCE)
    if source is None:
        return None
    same = hashlib.sha256(source).hexdigest() == source_digest
    built = folder / built_name(suffix)
    return built if same and built.is_file() else None


def will_build(megatron_path: Path, suffix: str | None = None, cache: Path | None = None) -> bool:
    """Whether a launch here leaves a compilation to make (prepare() finds no current build, no cache entry and no
    identical wheel build, or cannot install one): only then does the Makefile run `python3 -m pybind11`. True
    where it cannot tell."""
    suffix = suffix if suffix is not None else str(sysconfig.get_config_var("EXT_SUFFIX"))
    datasets = datasets_dir(megatron_path)
    if not (datasets / SOURCE).is_file():
        return True
    if is_up_to_date(datasets, suffix):
        return False
    key = source_key(datasets, suffix)
    if key is None or not os.access(datasets, os.W_OK):
        return True
    cached = (cache or cache_dir()) / "dataset-helpers" / key / built_name(suffix)
    if _trusted(cached) and is_whole_build(cached):
        return False
    source = _source(datasets / SOURCE)
    if source is None:
        return True
    digest = hashlib.sha256(source).hexdigest()
    return wheel_build(digest, suffix) is None


@dataclass
class Preparation:
    """What prepare() did; a background build runs until wait() or stop()."""

    how: str  # "built" | "cache" | "wheel" | "building" | "skipped"
    detail: str = ""
    _thread: threading.Thread | None = None
    _process: list[subprocess.Popen] = field(default_factory=list)

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def stop(self) -> None:
        """End a build still running (the launch is over; the next one starts it again)."""
        for process in self._process:
            if process.poll() is None:
                process.kill()
                process.wait()
        self.wait()


def prepare(megatron_path: Path, env: Mapping[str, str], cache: Path | None = None,
            suffix: str | None = None) -> Preparation:
    """Make the checkout's dataset helpers up to date before rank 0 runs make (see the module's doc)."""
    suffix = suffix if suffix is not None else str(sysconfig.get_config_var("EXT_SUFFIX"))
    datasets = datasets_dir(megatron_path)
    if not (datasets / SOURCE).is_file() or is_up_to_date(datasets, suffix):
        return Preparation("built")
    if not os.access(datasets, os.W_OK):
        return Preparation("skipped", f"{datasets} is not writable")  # the doctor says so before launch
    _remove_cut_build(datasets / built_name(suffix))  # else rank 0's make would take it as up to date
    key = source_key(datasets, suffix)
    if key is None:
        return Preparation("skipped", f"cannot read {datasets / SOURCE}")
    entry = (cache or cache_dir()) / "dataset-helpers" / key
    cached = entry / built_name(suffix)
    target = datasets / built_name(suffix)
    try:
        _remove_cut_build(cached)
        if _trusted(cached):
            _install(cached, target)
            return Preparation("cache", str(cached))
        source = _source(datasets / SOURCE)
        if source is None:
            raise OSError(f"cannot read {datasets / SOURCE} (a regular file of at most {MAX_SOURCE_BYTES:,} bytes)")
        digest = hashlib.sha256(source).hexdigest()
        prebuilt = wheel_build(digest, suffix)
        entry.mkdir(mode=0o700, parents=True, exist_ok=True)
        if prebuilt is not None:
            _install(prebuilt, target)
            _install(prebuilt, cached)
            return Preparation("wheel", str(prebuilt))
    except OSError as error:
        return Preparation("skipped", str(error))
    return _build_in_background(datasets, entry, cached, target, env)


def _remove_cut_build(path: Path) -> None:
    """Remove a build cut while it was written (a killed make or copy, a power cut): no one may load it."""
    if os.path.lexists(path) and path.is_file() and not path.is_symlink() and not is_whole_build(path):
        path.unlink(missing_ok=True)


def _build_in_background(datasets: Path, entry: Path, cached: Path, target: Path,
                         env: Mapping[str, str]) -> Preparation:
    """make in a private copy of the source under the cache entry; the result goes to the cache, then the checkout."""
    try:
        work = Path(tempfile.mkdtemp(prefix="build-", dir=entry))
        for name in (SOURCE, MAKEFILE):
            shutil.copyfile(datasets / name, work / name)
        # LIBEXT: the name this Python imports (the Makefile asks python3-config, which the doctor checks)
        process = subprocess.Popen(["make", "-s", "-C", str(work), f"LIBEXT={cached.name.removeprefix('helpers_cpp')}"],
                                   env=dict(env), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as error:
        return Preparation("skipped", f"cannot start make: {error}")
    preparation = Preparation("building", str(cached), _process=[process])

    def finish() -> None:
        try:
            code = process.wait(timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        try:
            built = work / cached.name
            if code == 0 and built.is_file():
                _install(built, cached)
                if not is_up_to_date(datasets, cached.name.removeprefix("helpers_cpp")):
                    _install(cached, target)
        except OSError:
            pass  # rank 0 builds its own, as without the launcher
        finally:
            shutil.rmtree(work, ignore_errors=True)

    preparation._thread = threading.Thread(target=finish, name="dataset-helpers-build", daemon=True)
    preparation._thread.start()
    return preparation
