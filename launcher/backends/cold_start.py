"""The first launch on a fresh machine: torch's bytecode compiled on every core before the ranks import it.

Where torch was installed without bytecode and Python may not write it beside the sources, the ranks keep their
bytecode in the launcher's cache (pipeline/startup.py). The first launch then compiled torch's modules one after
another inside the rank's imports: on one H200 machine, `import torch, megatron.core, megatron.training` took
22.3 s with an empty cache and 8.5 s once `compileall -j 0` had filled it, and compiling torch's package on 16
cores took 3.3 s (docs/benchmarks.md). So before the ranks start, a cache without torch's bytecode is filled on
every core; with fewer than MIN_CORES cores the ranks compile only what they import, as before. It changes
neither the job, its command nor its results. MEGATRON_LAUNCH_COLD_START=off in the launcher's environment turns it
off (for measuring it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from launcher.pipeline.startup import torch_package

SWITCH_ENV = "MEGATRON_LAUNCH_COLD_START"
MIN_CORES = 8
COMPILE_TIMEOUT_S = 30.0  # 3.3 s measured on 16 cores; past this the ranks compile the rest themselves


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "on") != "off"


def cached_bytecode(prefix: Path, source: Path) -> Path:
    """Where Python looks for `source`'s bytecode under PYTHONPYCACHEPREFIX: the source's absolute folder, mirrored,
    links not resolved (importlib's cache_from_source)."""
    folder = Path(os.path.abspath(source)).parent
    return prefix / folder.relative_to(folder.anchor) / f"{source.stem}.{sys.implementation.cache_tag}.pyc"


def fill_bytecode_cache(env: Mapping[str, str], python: str, cores: int | None = None) -> bool:
    """Compile torch into the ranks' bytecode cache on every core when it has none of torch's yet; True if done."""
    prefix, package = env.get("PYTHONPYCACHEPREFIX"), torch_package()
    if cores is None:
        cores = os.cpu_count() or 1
    if not enabled() or not prefix or package is None or cores < MIN_CORES:
        return False
    if cached_bytecode(Path(prefix), package / "__init__.py").is_file():
        return False
    try:
        process = subprocess.Popen([python, "-m", "compileall", "-q", "-j", "0", str(package)], env=dict(env),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
    except OSError:
        return False  # the ranks compile what they import, as without it
    try:
        process.wait(timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)  # compileall and its worker processes
        process.wait()
        return False
    return True
