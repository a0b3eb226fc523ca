"""Slurm backend: render a batch script (templates/sbatch.sh.j2), write it into the run directory, submit it.

Rendering is a pure function of a BatchJob; only `write_batch_script` and `submit` touch the world. Every
value reaches the script through the `q` filter (shlex.quote) or, on #SBATCH lines that sbatch parses
itself and cannot be quoted, through the `sbatch` filter, which refuses anything outside a safe character set.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from launcher.errors import Problem, UserError
from launcher.slurm_settings import SlurmSettings, check_environment, check_shell_value

TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "templates"
TEMPLATE_NAME = "sbatch.sh.j2"
SCRIPT_NAME = "job.sbatch"
# Paths on #SBATCH lines: no spaces, quotes or `%` (Slurm's own pattern character).
SBATCH_PATH = re.compile(r"[A-Za-z0-9_.,:@+=/-]+")
SBATCH_VALUE = re.compile(r"[A-Za-z0-9_.,:@%+=/-]+")
MAX_CHAIN = 100


@dataclass(frozen=True)
class BatchJob:
    """Everything the batch script says: what runs (torchrun + script + args + env), where and how long."""

    title: str
    job_name: str
    nodes: int
    gpus_per_node: int
    torchrun: tuple[str, ...]
    script: str
    script_args: tuple[str, ...]
    run_dir: Path
    settings: SlurmSettings = field(default_factory=SlurmSettings)
    env: Mapping[str, str] = field(default_factory=dict)
    rdzv_port: int = 29500
    chain: int = 1
    world_size: int | None = None

    @property
    def script_path(self) -> Path:
        return self.run_dir / SCRIPT_NAME

    @property
    def log_dir(self) -> str:
        return str(self.run_dir)

    @property
    def script_arg_lines(self) -> list[str]:
        """The script's argv as quoted shell words, one `--flag value...` group per line, for reading."""
        lines: list[list[str]] = []
        for arg in self.script_args:
            if arg.startswith("--") or not lines:
                lines.append([])
            lines[-1].append(shlex.quote(arg))
        return [" ".join(words) for words in lines]


def _sbatch_filter(value: object) -> str:
    text = str(value)
    if not SBATCH_VALUE.fullmatch(text):
        # Values are checked before rendering; reaching this means a check is missing, not bad user input.
        raise ValueError(f"unsafe value for an #SBATCH line: {text!r}")
    return text


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["sbatch"] = _sbatch_filter
    return env


def check_job(job: BatchJob) -> list[Problem]:
    """Every problem that would make the script wrong or unsafe, each with its fix."""
    problems: list[Problem] = []
    if job.nodes < 1 or job.gpus_per_node < 1:
        problems.append(Problem(f"a Slurm job needs at least 1 node and 1 GPU per node, "
                                f"got {job.nodes} node(s) x {job.gpus_per_node} GPU(s)"))
    if job.world_size is not None and job.nodes * job.gpus_per_node != job.world_size:
        problems.append(Problem(
            f"{job.nodes} node(s) x {job.gpus_per_node} GPU(s) = {job.nodes * job.gpus_per_node} ranks, "
            f"but the layout needs world size {job.world_size}",
            f"use --nodes {max(1, job.world_size // max(1, job.gpus_per_node))} or change the layout",
        ))
    if not 1 <= job.chain <= MAX_CHAIN:
        problems.append(Problem(f"--chain {job.chain} is out of range", f"use 1 to {MAX_CHAIN} jobs"))
    if not 1 <= job.rdzv_port <= 65535:
        problems.append(Problem(f"rendezvous port {job.rdzv_port} is not a TCP port", "use 1024 to 65535"))
    if not SBATCH_PATH.fullmatch(str(job.run_dir)):
        problems.append(Problem(
            f"run directory {str(job.run_dir)!r} cannot be written on an #SBATCH --output line",
            "use a path of letters, digits and _ . , : @ + = / - only (no spaces, quotes or %)",
        ))
    if not SBATCH_VALUE.fullmatch(job.job_name) or "%" in job.job_name:
        problems.append(Problem(f"job name {job.job_name!r} is not a valid Slurm job name",
                                "set slurm.job_name to letters, digits and . _ + - only"))
    problems.extend(check_environment(job.env))
    for word in job.torchrun:
        check_shell_value("torchrun", word, problems)
    check_shell_value("script", job.script, problems)
    for arg in job.script_args:
        # Megatron arguments may hold Python expressions (--moe-layer-freq "([1]*3+[0])"); they are quoted,
        # so only characters that would break the script's lines are refused.
        if any(ord(ch) < 32 for ch in arg):
            problems.append(Problem(f"argument {arg!r} contains a control character (newline, tab, ...)"))
    return problems


def render_batch_script(job: BatchJob) -> str:
    """The batch script's text. Raises UserError (nothing written) when any value is unusable."""
    problems = check_job(job)
    if problems:
        raise UserError(problems)
    return _environment().get_template(TEMPLATE_NAME).render(job=job, s=job.settings)


def write_batch_script(job: BatchJob, text: str | None = None) -> Path:
    """Render (if needed) and write the script atomically into the run directory; returns its path.

    Rendering happens first, so an error leaves no file and no directory behind.
    """
    text = render_batch_script(job) if text is None else text
    created = not job.run_dir.exists()
    job.run_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(dir=job.run_dir, prefix=".job.", suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, job.script_path)
    except BaseException:
        if created:
            shutil.rmtree(job.run_dir, ignore_errors=True)
        raise
    return job.script_path


def find_sbatch() -> str:
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise UserError(Problem("sbatch not found on PATH, so the job cannot be submitted",
                                "run on a Slurm login node, or drop --submit to only write the script"))
    return sbatch


def submit(job: BatchJob, sbatch: str | None = None, extra_args: Sequence[str] = ()) -> list[str]:
    """Write the script and submit it `job.chain` times (singleton-chained); returns the job ids.

    A refusal by sbatch is reported as a UserError carrying sbatch's own message; the files this call
    created are removed again.
    """
    sbatch = sbatch or find_sbatch()
    text = render_batch_script(job)
    created = not job.run_dir.exists()
    path = write_batch_script(job, text)
    job_ids: list[str] = []
    for _ in range(job.chain):
        result = subprocess.run([sbatch, "--parsable", *extra_args, str(path)],
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            if not job_ids:
                _remove(path, job.run_dir if created else None)
            message = (result.stderr or result.stdout).strip() or f"exit code {result.returncode}"
            submitted = f" after submitting {', '.join(job_ids)}" if job_ids else ""
            raise UserError(Problem(f"sbatch refused the job{submitted}: {message}",
                                    f"check the slurm settings; the script is {path}" if job_ids else
                                    "check the slurm settings (partition, account, time, GPUs per node)"))
        # --parsable prints "jobid" or "jobid;cluster".
        job_ids.append(result.stdout.strip().split(";")[0])
    return job_ids


def _remove(path: Path, run_dir: Path | None) -> None:
    path.unlink(missing_ok=True)
    if run_dir is not None:
        shutil.rmtree(run_dir, ignore_errors=True)
