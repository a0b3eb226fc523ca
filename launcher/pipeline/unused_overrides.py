"""Launcher settings given with --set that the resolved job does not use: said at once, never dropped quietly.

A preset file's own launcher settings are not judged (one preset serves every backend and world); a --set was typed
for this launch, so one the job cannot act on is most often a forgotten flag (--slurm, --nodes) or a setting another
one decides (--nodes over `nodes`, `micro_batch_size` over `max_micro_batch_size`). Megatron settings that Megatron
never reads are inert_rules'; Slurm and Kubernetes sections on another backend are preset.unused_backend_overrides'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launcher import redaction
from launcher.errors import MAX_SHOWN, clip
from launcher.pipeline.preset import Preset, override_name, unused_backend_overrides
from launcher.pipeline.shell import shell_word


@dataclass(frozen=True)
class JobFacts:
    """What decides whether a launcher setting acts: where and how the resolved job runs."""

    slurm: bool
    kubernetes: bool
    nodes: int
    gpus_per_node: int
    entry: str  # pretrain_gpt, simple_loop or allreduce
    direct: bool  # one process here started without torchrun (pipeline/runner.py)
    resumed: bool  # --resume: the run keeps its own directory
    slurm_rdzv_port: int | None  # slurm.rdzv_port, which decides the port over master_port
    nodes_given: bool  # --nodes on the command line
    gpus_per_node_given: bool  # --gpus-per-node on the command line


def why_unused(name: str, preset: Preset, job: JobFacts) -> str | None:
    """Why launcher setting `name` has no effect on this job; None where it acts."""
    standalone = not (job.slurm or job.kubernetes) and job.nodes == 1  # torchrun --standalone, or no torchrun
    if name == "master_addr":
        if job.slurm:
            return "a Slurm job's rendezvous host is the first node of its allocation"
        if job.kubernetes and job.nodes == 1:
            return "a one-pod Kubernetes job rendezvouses inside its pod"
        if standalone:
            return "a one-node job here rendezvouses on this machine (torchrun --standalone)"
    if name == "master_port":
        if job.slurm and job.slurm_rdzv_port is not None:
            return f"slurm.rdzv_port={job.slurm_rdzv_port} decides the Slurm job's rendezvous port"
        if job.kubernetes and job.nodes == 1:
            return "a one-pod Kubernetes job rendezvouses inside its pod (torchrun --standalone, a free port)"
        if standalone:
            return ("one process here starts without torchrun and binds a free port" if job.direct else
                    "a one-node job here rendezvouses on a free port (torchrun --standalone)")
    if name == "max_micro_batch_size":
        if preset.megatron.get("micro_batch_size") is not None:
            return f"micro_batch_size={preset.megatron['micro_batch_size']} is set, and it decides the micro batch"
        if job.entry == "simple_loop":
            return "upstream's simple loop hard-codes its micro batch"
    if name in ("transformer_engine", "apex") and job.entry == "simple_loop":
        return "upstream's simple loop builds its own layers (Megatron's local spec) whatever the machine has"
    if name in ("slurm.chain", "slurm.requeue", "slurm.max_restarts") and job.slurm and job.entry == "allreduce":
        return "a preflight job runs once: never chained, requeued or restarted"
    if name == "runner" and (job.slurm or job.kubernetes):
        return "a cluster job always starts one torchrun per node"
    if name == "run_root" and job.resumed:
        return "a resumed run stays in its own run directory"
    if name == "nodes" and job.nodes_given and job.nodes != preset.launcher.nodes:
        return f"--nodes decides the node count ({job.nodes})"
    if name == "gpus_per_node" and job.gpus_per_node_given and job.gpus_per_node != preset.launcher.gpus_per_node:
        return f"--gpus-per-node decides the GPUs per node ({job.gpus_per_node})"
    return None


# Settings with the same meaning on both clusters, under each one's name: a preset that states one cluster's and
# runs on the other carries nothing of it by itself.
COUNTERPARTS = (("time", "time", "the time limit"), ("container_image", "image", "the container image"),
                ("max_restarts", "max_restarts", "the restarts"), ("signal_seconds", "grace_seconds",
                                                                      "the time to save before a stop"))


def other_cluster_settings(preset: Preset, job: JobFacts) -> list[str]:
    """A warning for each setting of the other cluster's section that this cluster job has a counterpart of, left
    unset (the preset's `slurm: time:` on a Kubernetes job: no time limit there)."""
    if not (job.slurm or job.kubernetes):
        return []
    mine, theirs = ("slurm", "k8s") if job.slurm else ("k8s", "slurm")
    own, other = getattr(preset.launcher, mine), getattr(preset.launcher, theirs)
    given = {override_name(text) for text in preset.overrides}  # said already
    found = []
    for slurm_name, k8s_name, what in COUNTERPARTS:
        mine_name, their_name = (slurm_name, k8s_name) if job.slurm else (k8s_name, slurm_name)
        if other.get(their_name) is not None and own.get(mine_name) is None and f"{theirs}.{their_name}" not in given:
            found.append(f"{theirs}.{their_name}={other[their_name]} ({what}) is the "
                         f"{'Kubernetes' if theirs == 'k8s' else 'Slurm'} job's; this one runs on "
                         f"{'Slurm' if job.slurm else 'Kubernetes'} and takes {mine}.{mine_name}, which is not set "
                         f"(its default applies); --set {mine}.{mine_name}=… to carry it")
    return found


def unused_overrides(preset: Preset, job: JobFacts) -> list[str]:
    """One warning per --set of a launcher setting this job does not use, with why (the Slurm and Kubernetes
    sections' on another backend included)."""
    warnings = unused_backend_overrides(preset.overrides, job.slurm, job.kubernetes) + other_cluster_settings(preset,
                                                                                                            job)
    for text in preset.overrides:
        name = override_name(text)
        reason = why_unused(name, preset, job)
        if reason is not None:
            warnings.append(f"--set {name} does nothing for this job: {reason}; drop it")
    return list(dict.fromkeys(warnings))


def overrides_not_given_again(manifest: Mapping[str, Any], overrides: Sequence[str]) -> list[str]:
    """The last resumed attempt's --set items that this resume does not give: the run's preset.yaml decides them
    again (an attempt's --set is its own), said so that a setting changed for one attempt (a lower lr after a loss
    spike) is not undone without a word. `manifest`: the run's manifest.json, which anyone may have written."""
    attempts = manifest.get("attempts")
    last = attempts[-1] if isinstance(attempts, list) and attempts else None
    before = last.get("overrides") if isinstance(last, dict) else None
    if not isinstance(before, list):
        return []
    given = {override_name(text) for text in overrides}
    dropped = list(dict.fromkeys(text for text in before[:MAX_RECORDED_OVERRIDES]
                                 if isinstance(text, str) and "=" in text and override_name(text) not in given))
    if not dropped:
        return []
    # as a record is written: an item that sets a secret shows <redacted>, whoever wrote the manifest
    sets = " ".join(f"--set {clip(shell_word(redaction.scrub_assignment(text)), MAX_SHOWN)}"
                    for text in dropped[:20]) + (
        f" and {len(dropped) - 20} more" if len(dropped) > 20 else "")  # as the user would type them
    return [f"the last attempt ran with {sets}, which this resume does not give: the run's preset.yaml decides "
            f"{'them' if len(dropped) > 1 else 'it'} again (repeat {'them' if len(dropped) > 1 else 'it'} to keep "
            "the attempt's value)"]


MAX_RECORDED_OVERRIDES = 1000  # a manifest's list is read within this many items
