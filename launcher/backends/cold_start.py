"""The first launch on a fresh machine: torch's bytecode compiled on every core, its libraries read ahead.

Where torch was installed without bytecode and Python may not write it beside the sources, the ranks keep their
bytecode in the launcher's cache (pipeline/startup.py). The first launch then compiled torch's modules one after
another inside the rank's imports: on one H200 machine, `import torch, megatron.core, megatron.training` took
22.3 s with an empty cache and 8.5 s once `compileall -j 0` had filled it, and compiling torch's package on 16
cores took 3.3 s (docs/benchmarks.md). So before the ranks start, a cache without torch's bytecode is filled on
every core; with fewer than MIN_CORES cores the ranks compile only what they import, as before.

On a fresh machine the rank's imports also wait on the disk, page by page, for torch's and CUDA's shared
libraries (a few GB). posix_fadvise(WILLNEED) asks the kernel to read them in the background from the launch on; on
a warm machine the pages are cached and the call costs nothing. Neither changes the job, its command or its results.
MEGATRON_LAUNCH_COLD_START=off in the launcher's environment turns both off (for measuring them).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

SWITCH_ENV = "MEGATRON_LAUNCH_COLD_START"
MIN_CORES = 8
COMPILE_TIMEOUT_S = 120.0
MAX_LIBRARIES = 500  # shared objects read ahead, at most (torch's and the nvidia-* wheels' are ~60)
# Libraries a training rank does not load, or touches a page of at most: reading them would only compete for the disk.
NOT_READ = ("cufft", "cusolver", "cusparse", "curand", "cufile", "cupti", "nvperf", "pcsampling", "nvblas",
            "nvshmem", "nvJitLink", ".alt.", "checkpoint", "nvtx", "gomp")


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "on") != "off"


def torch_package() -> Path | None:
    """torch's package folder as this interpreter finds it, without importing it."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent


def cached_bytecode(prefix: Path, source: Path) -> Path:
    """Where Python looks for `source`'s bytecode under PYTHONPYCACHEPREFIX (the source's absolute folder, mirrored)."""
    folder = source.resolve().parent
    return prefix / folder.relative_to(folder.anchor) / f"{source.stem}.{sys.implementation.cache_tag}.pyc"


def fill_bytecode_cache(env: Mapping[str, str], python: str, cores: int | None = None) -> bool:
    """Compile torch into the ranks' bytecode cache on every core when it has none of torch's yet; True if done."""
    prefix, package = env.get("PYTHONPYCACHEPREFIX"), torch_package()
    cores = os.cpu_count() or 1 if cores is None else cores
    if not enabled() or not prefix or package is None or cores < MIN_CORES:
        return False
    if cached_bytecode(Path(prefix), package / "__init__.py").is_file():
        return False
    try:
        subprocess.run([python, "-m", "compileall", "-q", "-j", "0", str(package)], env=dict(env),
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=COMPILE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False  # the ranks compile what they import, as without it
    return True


def shared_libraries(package: Path) -> list[Path]:
    """torch's shared libraries and those of the nvidia-* wheels beside it (CUDA, cuBLAS, cuDNN, NCCL)."""
    folders = [package / "lib"]
    nvidia = package.parent / "nvidia"
    try:
        folders += sorted(p / "lib" for p in nvidia.iterdir() if p.is_dir()) if nvidia.is_dir() else []
    except OSError:
        pass
    found: list[Path] = []
    for folder in folders:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if ".so" in name and not any(part in name for part in NOT_READ) and len(found) < MAX_LIBRARIES:
                found.append(folder / name)
    return found


def _advise(paths: list[Path]) -> None:
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            continue
        try:
            if os.path.isfile(path):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


def read_libraries_ahead() -> threading.Thread | None:
    """Ask the kernel to read torch's and CUDA's shared libraries into the page cache, in a daemon thread."""
    package = torch_package()
    if not enabled() or package is None or not hasattr(os, "posix_fadvise"):
        return None
    thread = threading.Thread(target=_advise, args=(shared_libraries(package),), name="read-ahead", daemon=True)
    thread.start()
    return thread
