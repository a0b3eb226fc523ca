"""A real launch here with a run directory: write it, run the command (torchrun, or the one rank directly) through
the Monitor, judge the end.

    ResolvedJob, Command ──execute()──► run directory written, the command started, its output through the Monitor
"""

from __future__ import annotations

import json
import os
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from launcher.backends import bytecode, cold_start, local
from launcher.errors import Problem, UserError
from launcher.megatron import dataset_helpers
from launcher.pipeline.command import Command
from launcher.pipeline.environment import LAUNCHER_ROOT
from launcher.pipeline.resolve import ResolvedJob
from launcher.runs import rundir
from launcher.runs.atomic import write_text_atomic
from launcher.runs.monitor import Monitor

# Exit status when the child exited 0 but its log shows a failure (Megatron exits 0 on several failures).
EXIT_FAILED_DESPITE_ZERO = 1


def execute(job: ResolvedJob, command: Command, *, extra_files: dict[str, str] | None = None,
            out: IO[str] | None = None) -> int:
    """Write (or extend) the run directory, run the command here through the monitor, return the exit status."""
    assert job.run_dir is not None, "a training run has a run directory"
    out = out or sys.stdout
    local.runnable_argv(command)  # the checks local.run makes, before anything is written
    if job.existing is None:
        rundir.create_run_dir(job, command, list(job.preset.overrides), run_dir=job.run_dir,
                              megatron_path=job.megatron_path, extra_files=extra_files)
    else:
        rundir.record_attempt(job.existing, command.argv, command.env, job.preset.overrides)
    print(f"# run directory: {job.run_dir}", file=out, flush=True)
    save = job.megatron.get("save")
    try:
        monitor = Monitor(job.run_dir, checkpoint_dir=Path(save) if save else None,
                          seq_length=job.megatron.get("seq_length"), out=out, rank_status=command.direct)
    except OSError as error:
        raise UserError(rundir.storage_problem(f"cannot write the run's log in {job.run_dir}", error)) from None
    # The simple loop writes its checkpoint to $PWD/ckpt: run it inside the run directory.
    cwd = str(job.run_dir) if job.entry == "simple_loop" else None
    code, failure, closing = None, None, None
    running = _mark_running(job.run_dir)
    env = local.process_environment(job.environment)
    if cold_start.fill_bytecode_cache(env, bytecode.ranks_python(env)):
        _say("# bytecode: torch compiled on every core into the launcher's cache (its first launch here)", out)
    helpers = _prepare_helpers(job, env, out)
    compiling = bytecode.start(job.megatron_path, env, (LAUNCHER_ROOT / "launcher" / "inside",)) \
        if job.entry == "pretrain_gpt" else None
    try:
        code = local.run(command, env, cwd=cwd, on_line=monitor.feed)
    except OSError as error:  # the log or metrics could not be written; local.run has stopped training
        failure = error
    finally:
        if helpers is not None:
            helpers.stop()
        bytecode.stop(compiling)
        try:
            summary = monitor.close(code)
        except OSError as error:  # the summary (printed all the same) or a log's last bytes
            closing = error
        # running.json stays where this attempt's summary could not be written: an earlier attempt's summary.json
        # must not pass for this attempt's (`launch runs` reads the gone pid as a failed attempt)
        if running is not None and closing is None:
            try:
                running.unlink(missing_ok=True)
            except OSError:  # the run root went read-only: `launch runs` judges the gone pid as failed anyway
                pass
    if failure is not None:
        raise UserError(rundir.storage_problem(
            f"cannot write the run's records in {job.run_dir}, so training was stopped", failure))
    if closing is not None:  # training ran to its end: say so, and how to get the record written later
        raise UserError(Problem(
            f"training ended (exit status {code}), but its records in {job.run_dir} could not be completed: "
            f"{closing.strerror or closing}; the summary printed above is not in summary.json",
            f"make {job.run_dir} writable again (or free space), then `launch report {job.run_dir}` writes "
            "summary.json from the run's log"))
    _say(f"# report: launch report {job.run_dir}", out)
    assert code is not None, "local.run returned, or its failure was raised above"
    if code == 0 and summary.outcome == "failed":
        return EXIT_FAILED_DESPITE_ZERO
    return code


def _prepare_helpers(job: ResolvedJob, env: dict[str, str], out: IO[str]) -> dataset_helpers.Preparation | None:
    """pretrain_gpt.py's rank 0 compiles the dataset helpers at start unless the checkout has them built."""
    if job.entry != "pretrain_gpt":
        return None
    preparation = dataset_helpers.prepare(job.megatron_path, env)
    said = {"cache": "copied from the launcher's cache", "wheel": "copied from the installed megatron-core wheel",
            "building": "building once into the launcher's cache, while training starts"}.get(preparation.how)
    if said:
        _say(f"# dataset helpers: {said} ({preparation.detail})", out)
    return preparation


def _mark_running(run_dir: Path) -> Path | None:
    """running.json: this launcher's pid and host while it runs the job (`launch runs` shows it running, or
    failed once that process is gone without a summary). Best effort: the run does not depend on it."""
    path = run_dir / rundir.RUNNING_FILE
    record = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": datetime.now(UTC).isoformat(timespec="seconds")}
    try:
        write_text_atomic(path, json.dumps(record) + "\n")
    except OSError:
        return None
    return path


def _say(text: str, out: IO[str]) -> None:
    try:
        print(text, file=out, flush=True)
    except OSError:  # the terminal is gone (a hangup); the run directory has everything
        pass
