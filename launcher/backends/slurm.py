"""Slurm backend: render a batch script (templates/sbatch.sh.j2), write it into the run directory, submit it.

Rendering is a pure function of a BatchJob; only `write_batch_script` and `submit` touch the world. Every
value reaches the script through the `q` filter (shlex.quote), on #SBATCH lines that sbatch parses itself and
cannot be quoted through the `sbatch` filter, which refuses anything outside a safe character set, and in
comments through `comment` (one line, no control characters). The environment's `finalize` hook lets only
those filters' output (ShellSafe) and integers into the script: a value left unfiltered fails every render,
so a forgotten filter is found by the first test, not by a user's hostile file name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import jinja2

from launcher import nofollow
from launcher.checks.capacity import checkpoint_space
from launcher.checks.data import DATA_SETTINGS
from launcher.errors import Problem, UserError
from launcher.megatron import requirements
from launcher.megatron.pin import require_checkout
from launcher.pipeline.command import LAUNCHER_ROOT, Command, flag_lines, kernel_summary
from launcher.pipeline.preset import override_name
from launcher.pipeline.resolve import PREFLIGHT, ResolvedJob
from launcher.pipeline.shell import expands, shell_comment, shell_word
from launcher.pipeline.slurm_settings import MAX_CHAIN, SlurmSettings, check_environment, check_shell_value
from launcher.runs import cluster_job, rundir, secrets

TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "templates"
TEMPLATE_NAME = "sbatch.sh.j2"
SCRIPT_NAME = "job.sbatch"
# How far above `save` a directory must exist on the submitting node for its free space to be judged: the run
# directory's checkpoints (run_root/RUN/checkpoints) are two levels below run_root, which exists.
SAVE_LEVELS = 2
# Paths on #SBATCH lines: no spaces, quotes or `%` (Slurm's own pattern character).
SBATCH_PATH = re.compile(r"[A-Za-z0-9_.,:@+=/-]+")
SBATCH_VALUE = re.compile(r"[A-Za-z0-9_.,:@%+=/-]+")


class ShellSafe(str):
    """Text a template filter has made safe to stand in the batch script where it is placed."""


class UnfilteredValue(Exception):
    """A template let a value through without a filter: a bug in the template, found at the first render."""


@dataclass(frozen=True)
class BatchJob:
    """Everything the batch script says: what runs (torchrun + script + args + env), where and how long."""

    title: str
    job_name: str
    nodes: int
    gpus_per_node: int
    torchrun: tuple[str, ...]  # the command's torchrun and its options, up to the entry script
    script: str
    script_args: tuple[str, ...]
    run_dir: Path
    settings: SlurmSettings = field(default_factory=SlurmSettings)
    env: Mapping[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()  # removed from every rank's environment (launcher.env's nulls)
    rdzv_port: int = 29500
    chain: int = 1
    world_size: int | None = None
    about: tuple[str, ...] = ()  # header comment lines: kernels and where they were judged, warnings
    unseen_files: tuple[str, ...] = ()  # data files the login node could not see: checked on the node first
    data_settings: str = "{}"  # JSON of the settings check_data reads, for the same check on the node
    # JSON of launcher.megatron.requirements.node_items: the packages (and versions) the settings need, which
    # every node checks at job start with NODE_CHECK; "" when there are none
    node_requirements: str = ""
    python: str = "python3"  # the job's Python (pipeline.runtime): runs the checks on each node before torchrun
    # --nodes MIN-MAX: Slurm's --nodes range, and each node count the job may start with and what it says then
    node_range: str = ""
    elastic: tuple[tuple[int, str], ...] = ()

    @property
    def nodes_option(self) -> str:
        return self.node_range or str(self.nodes)

    @property
    def elastic_counts(self) -> str:
        return ", ".join(str(count) for count, _ in self.elastic)

    @property
    def script_path(self) -> Path:
        return self.run_dir / SCRIPT_NAME

    @property
    def log_dir(self) -> str:
        return str(self.run_dir)

    @property
    def script_arg_lines(self) -> list[str]:
        """The script's argv as quoted shell words, one `--flag value...` group per line, for reading."""
        return [ShellSafe(line) for line in flag_lines(self.script_args)]

    @property
    def torchrun_words(self) -> list[str]:
        """The command's torchrun words for the script, one a line; Slurm's own expand on the node."""
        return [ShellSafe(shell_word(word)) for word in self.torchrun]

    @property
    def export_lines(self) -> list[str]:
        """`export NAME=value` for every rank; a secret is taken from the submitting environment instead."""
        exports = [ShellSafe(secrets.shell_export(name, value, shell_word)) for name, value in self.env.items()]
        return [*exports, *(ShellSafe(f"unset {name}") for name in self.unset)]  # names are checked identifiers


def build_job(job: ResolvedJob, command: Command, settings: SlurmSettings, chain: int | None = None,
              title: str | None = None) -> BatchJob:
    """The batch job for a resolved job and the command its ranks run."""
    name = settings.job_name or f"megatron-{job.preset.name}"
    assert job.run_dir is not None, "a Slurm job has a run directory"
    items = requirements.job_node_items(job.megatron, job.layout.vpp, job.entry)
    about = [kernel_summary(job) + ("; each node checks what the settings need at job start" if items else "")] \
        if job.entry == "pretrain_gpt" else []
    about.append(f"runs {job.runtime.describe()}")
    about += [f"warning: {w}" for w in (*job.warnings, *unmounted_paths(job, command, settings))]
    return BatchJob(
        title=title or f"preset {job.preset.name}",
        job_name=name,
        nodes=job.nodes,
        gpus_per_node=job.gpus_per_node,
        torchrun=tuple(command.argv[:command.argv.index(command.script)]),
        script=command.script,
        script_args=tuple(command.script_args),
        run_dir=job.run_dir,
        settings=settings,
        env=dict(command.env),
        unset=command.unset,
        rdzv_port=job.rdzv_port,
        chain=chain or settings.chain,
        world_size=job.layout.world_size,
        about=tuple(" ".join(line.split()) for line in about),  # one comment line each, whatever they hold
        unseen_files=job.unseen_files,
        data_settings=json.dumps({k: v for k in DATA_SETTINGS if (v := job.megatron.get(k)) is not None}),
        python=job.runtime.python,
        node_requirements=json.dumps(items) if items else "",
        **_elastic_fields(job),
    )


def _elastic_fields(job: ResolvedJob) -> dict[str, Any]:
    """--nodes MIN-MAX: Slurm's range (restricted to the counts that work) and the line each count says at the
    start of an attempt."""
    if job.elastic is None:
        return {}
    layout = job.layout
    return {"node_range": job.elastic.slurm_nodes,
            "elastic": tuple((c.nodes, c.describe(layout.global_batch_size, layout.micro_batch_size))
                             for c in job.elastic.valid)}


def unmounted_paths(job: ResolvedJob, command: Command, settings: SlurmSettings) -> list[str]:
    """Paths on this machine that the job reads or writes but the container does not mount."""
    if not settings.container_image:
        return []
    targets = [Path(mount.split(":")[1] if ":" in mount else mount) for mount in settings.container_mounts]
    needed = {command.script: "the entry script", str(job.megatron_path): "the Megatron-LM checkout",
              str(job.run_dir): "the run directory"}
    for entry in filter(None, command.env.get("PYTHONPATH", "").split(":")):
        needed.setdefault(entry, "the launcher, on PYTHONPATH" if Path(entry) == LAUNCHER_ROOT else "on PYTHONPATH")
    missing = {path: what for path, what in needed.items()
               if not any(Path(path).is_relative_to(target) for target in targets)}
    # one warning per tree: the checkout covers the entry script inside it
    missing = {path: what for path, what in missing.items()
               if not any(Path(path).is_relative_to(other) for other in missing if other != path)}
    return [f"{path} ({what}) is not inside slurm.container_mounts, so the container may not see it; add e.g. "
            f"{path}:{path}" for path, what in missing.items()]


def _sbatch_filter(value: object) -> ShellSafe:
    text = str(value)
    if not SBATCH_VALUE.fullmatch(text):
        # Values are checked before rendering; reaching this means a check is missing, not bad user input.
        raise ValueError(f"unsafe value for an #SBATCH line: {text!r}")
    return ShellSafe(text)


def _comment_filter(value: object) -> ShellSafe:
    """Text for a `#` comment: a newline (or any control character) must not end the comment."""
    return ShellSafe(shell_comment(value))


def _finalize(value: object) -> object:
    if isinstance(value, ShellSafe) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise UnfilteredValue(f"{value!r} reached the batch script without a filter (q, sbatch, comment or words)")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        finalize=_finalize,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = lambda value: ShellSafe(shell_word(str(value)))
    env.filters["words"] = lambda values: ShellSafe(" ".join(shell_word(str(v)) for v in values))
    env.filters["sbatch"] = _sbatch_filter
    env.filters["comment"] = _comment_filter
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
        problems.append(Problem(f"chain of {job.chain} jobs (--chain or slurm.chain) is out of range",
                                f"use 1 to {MAX_CHAIN} jobs"))
    if not 1 <= job.rdzv_port <= 65535:
        problems.append(Problem(f"rendezvous port {job.rdzv_port} (slurm.rdzv_port or master_port) is not a TCP port",
                                "use 1024 to 65535"))
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
        if not expands(word):  # the launcher's own run-time words ($SLURM_NNODES, …) are not values
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
    return _environment().get_template(TEMPLATE_NAME).render(job=job, s=job.settings, launcher_root=LAUNCHER_ROOT,
                                                                node_check=requirements.NODE_CHECK)


def write_batch_script(job: BatchJob, text: str | None = None) -> Path:
    """Render (if needed) and write the script atomically into the run directory; returns its path.

    Rendering happens first, so an error leaves no file and no directory behind.
    """
    text = render_batch_script(job) if text is None else text
    created = not job.run_dir.exists()
    job.run_dir.mkdir(parents=True, exist_ok=True)
    try:
        nofollow.write_atomic(job.script_path, text, what="batch script", mode=0o755)
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


def submit(script: Path, sbatch: str, secret_env: Mapping[str, str] | None = None) -> str:
    """Submit a written batch script; its job id. A refusal is a UserError carrying sbatch's own message.

    `secret_env` reaches the job through sbatch's environment (it exports the submitter's by default): the
    script itself names secrets but does not hold them."""
    env = {**os.environ, **(secret_env or {})}
    result = subprocess.run([sbatch, "--parsable", str(script)], capture_output=True, text=True, check=False,
                            env=env)
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip() or f"exit code {result.returncode}"
        raise UserError(Problem(f"sbatch refused the job: {message}",
                                "check the slurm settings (partition, account, time, GPUs per node)"))
    # --parsable prints "jobid" or "jobid;cluster".
    return result.stdout.strip().split(";")[0]


@dataclass(frozen=True)
class PreparedJob:
    job: BatchJob
    notes: list[str]


def prepare_job(job: ResolvedJob, command: Command, *, chain: int | None = None) -> PreparedJob:
    """The batch job for a resolved job (training, or the preflight check with the same torchrun), and notes.

    Raises UserError for the Slurm settings; the job itself is checked when it is rendered.
    """
    settings = job.target.slurm_settings
    assert settings is not None, "a Slurm job is resolved for Slurm (resolve.target_for)"
    name = job.preset.name
    title = f"preset {name}"
    if job.entry == PREFLIGHT:  # resolve gave it settings that run once (no requeue, no chain)
        if chain and chain > 1:
            raise UserError("--chain does not apply to --preflight", "a preflight job runs once; drop --chain")
        title = f"preflight of preset {name} (all-reduce over every rank, no training)"
    set_here = any(override_name(o) == "slurm.chain" for o in job.preset.overrides)
    if chain and set_here and chain != settings.chain:  # one of the two would be dropped
        raise UserError(f"--chain {chain} and --set slurm.chain={settings.chain} disagree",
                        "give the number of chained jobs once: --chain K")
    notes = list(job.notes)
    if not settings.exclusive and settings.cpus_per_task is None:
        notes.append(f"slurm.exclusive=false without slurm.cpus_per_task: Slurm may give each node's task (a torchrun "
                     f"with {job.gpus_per_node} ranks and their data loaders) a single CPU; set slurm.cpus_per_task")
    return PreparedJob(build_job(job, command, settings, chain=chain, title=title), notes)


def record(job: ResolvedJob, batch: BatchJob, text: str) -> None:
    """Write the run directory (manifest, resolved preset, command.sh = the sbatch call) with the script in it;
    for a resumed run, add an attempt and replace its script."""
    submit_command = Command(argv=["sbatch", str(batch.script_path)], env=dict(batch.env),
                             script=str(batch.script_path), script_args=[])
    if job.existing is None:
        rundir.create_run_dir(job, submit_command, list(job.preset.overrides), run_dir=batch.run_dir,
                              megatron_path=job.megatron_path, extra_files={SCRIPT_NAME: text})
    else:
        rundir.record_attempt(job.existing, submit_command.argv, submit_command.env,
                              job.preset.overrides)
        write_batch_script(batch, text)


def check_resume_before_submit(job: ResolvedJob) -> Any:
    """The checkpoint under the job's --load against the job, where this machine sees it (checks/resume.py): a
    refusal stops the submission before anything waits in the queue; None where the job loads nothing."""
    from launcher.checks.megatron_python import find_megatron_python
    from launcher.checks.resume import check_job

    resume = check_job(job, find_megatron_python())
    if resume is not None and not resume.ok:
        raise UserError([Problem(f"resume: {item.message}", item.hint) for item in resume.refused])
    return resume


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (OSError, ValueError, AttributeError):
        return False


def check_checkpoint_space(job: ResolvedJob) -> str | None:
    """Before sbatch: the checkpoints against the free space under `save` as this node sees it, when it sees that
    file system (a shared one; SAVE_LEVELS): a first save that cannot fit would end the job after its queue wait
    and its first interval of training (175B: ~2.4 TB per checkpoint). Raises UserError then; a warning's text
    when not all the checkpoints the run keeps fit."""
    found = checkpoint_space(job, levels=SAVE_LEVELS)
    if found is not None and found.status == "fail":
        raise UserError(Problem(f"{found.check}: {found.detail}", found.fix))
    return f"{found.check}: {found.detail}" if found is not None and found.status == "warn" else None


def launch(job: ResolvedJob, command: Command, *, dry_run: bool = False, submit_job: bool = False,
           chain: int | None = None, out: TextIO | None = None, err: TextIO | None = None, as_json: bool = False,
           warnings: Sequence[str] = ()) -> int:
    """`launch PRESET --slurm`: print the script (dry-run), write it into the run directory, or submit it.
    With `as_json`, one JSON object on `out` (script or its path, job ids, notes, warnings) instead of text;
    `warnings` are the caller's (e.g. a Megatron-LM checkout missing here), said like the job's own."""
    # the streams of the moment (the launcher's redacting ones), not those of import time
    out, err = out or sys.stdout, err or sys.stderr
    made = prepare_job(job, command, chain=chain)
    batch = made.job
    text = render_batch_script(batch)
    said_warnings = [*(line.removeprefix("warning: ") for line in batch.about if line.startswith("warning: ")),
                     *warnings]
    result: dict[str, Any] = {"run_dir": str(batch.run_dir), "script_path": str(batch.script_path),
                              "chain": batch.chain, "notes": list(made.notes), "warnings": said_warnings}
    if not as_json:
        for note in made.notes:
            print(f"note: {note}", file=err)
        # a script printed to a terminal says its warnings in its header: once there, not twice
        for warning in list(warnings) if dry_run and _is_terminal(out) else said_warnings:
            print(f"warning: {warning}", file=err)
    if dry_run:
        if as_json:
            out.write(json.dumps({**result, "dry_run": True, "script": text}, indent=2) + "\n")
        else:
            out.write(text)
        return 0
    sbatch = find_sbatch() if submit_job else ""
    if submit_job and job.entry != PREFLIGHT:
        require_checkout(job.megatron_path, job.entry)
        if (space := check_checkpoint_space(job)) is not None:
            result["warnings"].append(space)
            if not as_json:
                print(f"warning: {space}", file=err)
        resume = check_resume_before_submit(job)
        if resume is not None:
            result["resume"] = resume.as_dict()
            for item in resume.items:
                if item.level == "warn":
                    result["warnings"].append(f"resume: {item.message}")
                    if not as_json:
                        print(f"warning: resume: {item.message}", file=err)
    record(job, batch, text)
    if not submit_job:
        if as_json:
            out.write(json.dumps({**result, "dry_run": False, "submitted": []}, indent=2) + "\n")
            return 0
        print(batch.script_path, file=out)
        if batch.chain > 1:
            print(f"note: submit it {batch.chain} times; each waits for the previous (--dependency=singleton)",
                  file=err)
        return 0
    job_ids: list[str] = []
    secret_env = {name: value for name, value in batch.env.items() if secrets.is_secret(name, value)}
    try:
        for _ in range(batch.chain):  # the script's --dependency=singleton orders them
            job_ids.append(submit(batch.script_path, sbatch, secret_env))
    except UserError as exc:
        if job_ids:  # once a job is queued, its directory is its record
            cluster_job.record_submission(batch.run_dir, "slurm", job_ids)
            raise UserError([*exc.problems, Problem(f"already submitted: {', '.join(job_ids)}")]) from None
        if job.existing is None:  # nothing queued: leave nothing behind
            shutil.rmtree(batch.run_dir, ignore_errors=True)
        raise
    cluster_job.record_submission(batch.run_dir, "slurm", job_ids)  # `launch runs`: submitted, not written
    if as_json:
        logs = [str(batch.run_dir / f"slurm-{job_id}.out") for job_id in job_ids]
        out.write(json.dumps({**result, "dry_run": False, "submitted": job_ids, "logs": logs}, indent=2) + "\n")
        return 0
    for job_id in job_ids:
        print(job_id, file=out)
        print(f"submitted job {job_id}: script {batch.script_path}, log {batch.run_dir}/slurm-{job_id}.out",
              file=err)
    return 0
