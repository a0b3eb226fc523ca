"""The Megatron checkout's bytecode, compiled before the ranks import it (in parallel, while torchrun starts).

A rank imports ~500 modules of the checkout. Where Python may not write bytecode (PYTHONDONTWRITEBYTECODE, set
in many container images) each rank of each launch compiles them all from source again; elsewhere the first
launch does, one file after another. `python -m compileall -j 0` writes the same `__pycache__/*.pyc` files the
import system would (same interpreter, same optimisation level, timestamp-checked, each written by an atomic
rename), once, on every core; a file whose bytecode is current is skipped, so a warm launch pays a stat per file.
Importing reads bytecode even where writing it is off.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

# What pretrain_gpt.py imports from the checkout: the megatron package and the builders beside the entry script.
CHECKOUT_SOURCES = ("megatron", "pretrain_gpt.py", "gpt_builders.py", "model_provider.py")


def compile_command(megatron_path: Path, env: Mapping[str, str], extra: tuple[Path, ...] = ()) -> list[str] | None:
    """`python3 -m compileall` over the checkout (and `extra` folders), with the python the ranks run; None if the
    checkout cannot take bytecode (not writable) or has nothing to compile."""
    targets = [megatron_path / name for name in CHECKOUT_SOURCES if (megatron_path / name).exists()]
    targets += [path for path in extra if path.is_dir()]
    if not targets or not os.access(megatron_path / "megatron", os.W_OK):
        return None
    return [ranks_python(env), "-m", "compileall", "-q", "-j", "0", *map(str, targets)]


def ranks_python(env: Mapping[str, str]) -> str:
    """The python3 the ranks run (the job's PATH), else this one."""
    return shutil.which("python3", path=env.get("PATH")) or sys.executable


def start(megatron_path: Path, env: Mapping[str, str], extra: tuple[Path, ...] = ()) -> subprocess.Popen | None:
    """Start the compilation in the background; the caller stops it once training is over."""
    argv = compile_command(megatron_path, env, extra)
    if argv is None:
        return None
    try:
        return subprocess.Popen(argv, env=dict(env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None  # the ranks compile what they import, as without the launcher


def stop(process: subprocess.Popen | None) -> None:
    if process is not None and process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # compileall and its worker processes
        except OSError:
            process.kill()
        process.wait()
