"""Run the job here (torchrun, or the one rank started directly): signals forwarded to it, its exit status
returned."""

from __future__ import annotations

import atexit
import functools
import importlib.util
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from launcher.errors import UserError
from launcher.inside.parent_death import DieWithParent
from launcher.pipeline.command import Command
from launcher.pipeline.environment import JobEnvironment
from launcher.pipeline.shell import HostFromEnv

# SIGHUP too: a closed terminal must stop training the same way, not kill the launcher and orphan the ranks.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
# After the launcher itself fails (e.g. its log cannot be written): time for torchrun to stop its ranks (or for
# the one rank started directly to act on SIGTERM).
STOP_GRACE_SECONDS = 30


def visible_gpus() -> int:
    """GPUs this machine offers, without importing torch: CUDA_VISIBLE_DEVICES, else nvidia-smi."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def training_path(path_var: str | None) -> str:
    """PATH for training processes started here: a directory whose `python3` is this interpreter (and whose
    `python3-config` is its base Python's) comes first, when this interpreter has torch.

    Megatron's dataset-helper build runs `python3 -m pybind11` and `python3-config`; with `.venv/bin/launch`
    and no activated venv those would be another Python's. Only those two names are put first: torchrun and
    everything else resolve through PATH as the user set it. Without torch here (e.g. a pipx install of the
    launcher alone) PATH is left as it is."""
    path_var = path_var if path_var is not None else os.defpath
    if importlib.util.find_spec("torch") is None:
        return path_var
    shim = _python_dir()
    parts = path_var.split(os.pathsep) if path_var else []
    if shim is None or parts[:1] == [shim]:
        return path_var
    return os.pathsep.join([shim, *parts])


@functools.cache
def _python_dir() -> str | None:
    """A directory of this process's own with `python3` (exec of this interpreter: a symlink would lose the venv)
    and `python3-config`; None where it cannot be written.

    It is made fresh by mkdtemp (mode 0700, so no other user can plant or change a program in it) and removed when
    the launcher exits: a directory with a predictable name in a shared $TMPDIR could be someone else's."""
    config = Path(sys.base_prefix) / "bin" / "python3-config"
    tools = {"python3": sys.executable, **({"python3-config": str(config)} if config.exists() else {})}
    try:
        directory = Path(tempfile.mkdtemp(prefix="megatron-launch-python-"))
    except OSError:
        return None
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    try:
        for name, target in tools.items():
            tool = directory / name
            tool.write_text(f'#!/bin/sh\nexec {shlex.quote(target)} "$@"\n')
            tool.chmod(0o700)
    except OSError:
        return None
    return str(directory)


def process_environment(environment: JobEnvironment) -> dict[str, str]:
    """The whole environment of the training processes started here: the job's (environment.for_process),
    with PATH from training_path."""
    return environment.for_process(training_path(environment.inherited.get("PATH")))


def resolved_argv(command: Command) -> list[str]:
    if not command.expand:
        return command.argv
    addr = os.environ.get("MASTER_ADDR")
    if not addr:
        raise UserError("a multi-node run needs MASTER_ADDR (the first node's hostname)",
                        "export MASTER_ADDR=<first node> on every node, or --set master_addr=HOST")
    return [w.resolve(addr) if isinstance(w, HostFromEnv) else w for w in command.argv]


def runnable_argv(command: Command) -> list[str]:
    """The argv to start, after the checks that need no child process: MASTER_ADDR, its program on PATH (a direct
    run's python3 on the PATH the process gets: training_path)."""
    argv = resolved_argv(command)
    _require_program(command, training_path(os.environ.get("PATH")) if command.direct else None)
    return argv


def _require_program(command: Command, path: str | None) -> None:
    """The command's program (torchrun, or a direct run's python3) found on `path` (None: this process's PATH)."""
    program = command.argv[0]
    if shutil.which(program, path=path) is None:
        raise UserError(f"{program} is not on PATH", "put a Python 3 with torch on PATH, or --set runner=torchrun"
                        if command.direct else "install torch in this environment, or --set torchrun=PATH")


def run(command: Command, env: Mapping[str, str], cwd: str | None = None, stdout=None,
        on_line: Callable[[str], None] | None = None) -> int:
    """Start torchrun (or the one rank, command.direct), pass SIGINT/SIGTERM/SIGHUP/SIGUSR* on to it, return its
    exit status (128+N if killed by signal N).

    With `on_line`, the child's stdout and stderr are read line by line and handed to it (the run monitor)
    instead of going straight to the terminal. If `on_line` raises, the child is stopped before the error
    goes on: training must not continue unrecorded. `env` is the processes' whole environment (the job's:
    process_environment).
    """
    argv = runnable_argv(command)
    env = dict(env)
    _require_program(command, env.get("PATH"))
    # torchrun starts each rank in a session of its own, so a terminal's Ctrl-C reaches a rank once, from torchrun;
    # a rank started directly gets the same: its own session, and the signals forwarded below. The handlers are in
    # place before it starts: a signal that comes while it starts is passed on once it has (none is lost, and the
    # launcher never dies of one, leaving a rank that no terminal reaches).
    # A launcher killed by SIGKILL (`kill -9`, the out-of-memory killer, a harness's timeout), which no handler
    # sees, must not leave its job training on unrecorded, holding the GPUs: torchrun gets SIGTERM (it stops its
    # ranks), a rank started directly is killed.
    with_parent = DieWithParent(signal.SIGKILL if command.direct else signal.SIGTERM)
    started: list[subprocess.Popen] = []
    early: list[int] = []
    previous = {sig: signal.signal(sig, lambda s, _f: started[0].send_signal(s) if started else early.append(s))
                for sig in FORWARDED}
    lines: IO[str] | None = None  # the child's output, when it goes to on_line
    try:
        if on_line is not None:
            env.setdefault("PYTHONUNBUFFERED", "1")  # progress must arrive as it happens, not in 8 KiB blocks
            started.append(subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                            text=True, errors="replace", bufsize=1, start_new_session=command.direct,
                                            preexec_fn=with_parent))
            lines = started[0].stdout
        else:
            started.append(subprocess.Popen(argv, env=env, cwd=cwd, stdout=stdout,
                                            stderr=subprocess.STDOUT if stdout else None,
                                            start_new_session=command.direct, preexec_fn=with_parent))
    except BaseException:
        _restore(previous)
        raise
    child = started[0]
    for sig in early:
        child.send_signal(sig)
    try:
        if on_line is not None and lines is not None:
            for line in lines:
                on_line(line)
        code = child.wait()
    except BaseException:
        stop(child)
        raise
    finally:
        _restore(previous)
    sys.stdout.flush()
    return 128 - code if code < 0 else code


def _restore(handlers: Mapping[signal.Signals, Any]) -> None:
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def stop(child: subprocess.Popen) -> None:
    """SIGTERM (torchrun passes it to the ranks; a rank started directly gets it itself), then SIGKILL if it is
    still running after the grace time."""
    if child.stdout is not None:
        child.stdout.close()  # a child blocked on a full pipe must not wait for a reader that is gone
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
