"""Kubernetes backend: the resolved job as a JobSet (jobset.x-k8s.io/v1alpha2), printed, recorded or applied.

The JobSet is a Python dict built from the ResolvedJob and its Command and written by a YAML serializer
(yaml.safe_dump) or json.dumps, never by pasting text, so a value cannot add a field. Kubernetes itself expands
`$(NAME)` in a container's command, args and env values; every word the launcher writes there is escaped
(`k8s_word`), except the rendezvous endpoint the launcher composes itself (HostFromEnv → `$(MASTER_ADDR):PORT`).

One replicated Job of `nodes` Indexed pods runs one torchrun each, with the resolved argv unchanged; pod 0 is
the JobSet's coordinator and hosts the c10d rendezvous under its stable name in the JobSet's headless service.
A restart of the whole JobSet (failurePolicy.maxRestarts) resumes from the run's checkpoints (--load = --save,
on the PVC): SIGTERM reaches torchrun (PID 1), which forwards it to the ranks, whose --exit-signal-handler saves
a checkpoint within the grace period — resolve decides those settings for Slurm and Kubernetes alike.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from launcher.backends import k8s_pod
from launcher.errors import Problem, UserError
from launcher.megatron import requirements
from launcher.pipeline.command import LAUNCHER_ROOT, Command, entry_script, kernel_summary
from launcher.pipeline.k8s_settings import DEFAULT_PVC, MAX_NAME, K8sSettings, deadline_seconds
from launcher.pipeline.resolve import PREFLIGHT, ResolvedJob
from launcher.pipeline.shell import HostFromEnv
from launcher.runs import cluster_job, k8s_policy, requeue_policy, rundir, secrets
from launcher.runs.atomic import write_text_atomic

MAX_HOST_NAME = (63 - len("-node-0-0.")) // 2  # a JobSet's name, so that its coordinator's host name is a label
API_VERSION = "jobset.x-k8s.io/v1alpha2"  # the schema pinned in tests/fixtures/k8s (JobSet v0.12.0)
MANIFEST_NAME = "jobset.yaml"
REPLICATED_JOB = "node"  # one replicated Job; its pods are the nodes
CONTAINER = "megatron"
FIELD_MANAGER = "megatron-launch"
COORDINATOR = "jobset.sigs.k8s.io/coordinator"  # annotation: pod 0's stable host name, written by JobSet
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
MULTUS = "k8s.v1.cni.cncf.io/networks"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
# Each pod: log into the run directory (its first line names the pod, the machine it runs on and the JobSet), check
# the data files and the packages the settings need, wait (bounded) until the rendezvous host's name resolves, then
# become the supervisor (k8s_pod.py: PID 1, so the kubelet's SIGTERM reaches it; it forwards it to torchrun, which
# forwards it to the ranks, and exits with the code the failure policy reads). Arguments: the number of data files,
# the files, then torchrun's argv. No `$(` and no `$$` in it: Kubernetes would expand them.
ENTRY_SCRIPT = """\
set -u
trap 'echo "megatron-launch: SIGTERM before training started" >&2; exit 143' TERM
attempt=${RESTART_ATTEMPT:-0}
((attempt += 1))
if mkdir -p "$MEGATRON_LAUNCH_LOG_DIR"; then
    exec > >(tee -a "$MEGATRON_LAUNCH_LOG_DIR/node-$NODE_RANK-attempt-$attempt.log") 2>&1
fi
echo "megatron-launch: pod $NODE_RANK of $NNODES ($HOSTNAME), attempt $attempt, on node \
${MEGATRON_LAUNCH_K8S_NODE:-unknown}, jobset ${MEGATRON_LAUNCH_JOBSET:-unknown}, rendezvous host $MASTER_ADDR"
files=$1
shift
status=0
for path in "${@:1:files}"; do
    [[ -r $path ]] || { echo "error: data file $path is not readable in pod $HOSTNAME" >&2; status=2; }
done
((status == 0)) || exit 2
shift "$files"
if [[ -n ${MEGATRON_LAUNCH_NODE_ITEMS:-} ]]; then  # what the settings need, as on a Slurm node
    python3 -c "$MEGATRON_LAUNCH_NODE_CHECK" "$MEGATRON_LAUNCH_NODE_ITEMS" || exit 2
fi
resolves() {  # glibc's resolver, as torchrun will use it; python's where the image has no getent
    if command -v getent >/dev/null; then
        getent hosts "$1" >/dev/null
    else
        python3 -c 'import socket, sys; socket.getaddrinfo(sys.argv[1], None)' "$1" 2>/dev/null
    fi
}
if ((NNODES > 1)); then
    ((deadline = SECONDS + MEGATRON_LAUNCH_DNS_TIMEOUT))
    until resolves "$MASTER_ADDR"; do
        if ((SECONDS >= deadline)); then
            echo "error: $MASTER_ADDR did not resolve in $MEGATRON_LAUNCH_DNS_TIMEOUT s (k8s.dns_timeout)" >&2
            exit 1
        fi
        sleep 2
    done
fi
for name in ${MEGATRON_LAUNCH_UNSET:-}; do  # launcher.env's nulls: not even the image's value reaches a rank
    unset "$name"
done
unset MEGATRON_LAUNCH_UNSET
exec python3 -c "$MEGATRON_LAUNCH_SUPERVISOR" "$@"
"""
INPUT_ERROR = k8s_pod.INPUT_ERROR
MANAGED_ENV = ("NNODES", "NODE_RANK", "RESTART_ATTEMPT", "MASTER_ADDR", "MEGATRON_LAUNCH_DNS_TIMEOUT",
               "MEGATRON_LAUNCH_LOG_DIR", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "MEGATRON_LAUNCH_NODE_CHECK",
               "MEGATRON_LAUNCH_NODE_ITEMS", "MEGATRON_LAUNCH_UNSET", "MEGATRON_LAUNCH_K8S_NODE",
               "MEGATRON_LAUNCH_JOBSET", "MEGATRON_LAUNCH_SUPERVISOR")
# Kubernetes' expansion reads the byte after a `$`: `(` opens a reference, `$` escapes, and any other byte is
# kept, but re-encoded as the character of that byte value, so `$é` (bytes C3 A9) would become `$Ã©`: a `$` before
# a non-ASCII character is escaped too.
_EXPANDED = re.compile(r"\$(?=[$(]|[^\x00-\x7f])")


def k8s_word(word: str) -> str:
    """A word for a container's command, args or env value, exactly as given after Kubernetes' expansion.

    Kubernetes replaces `$(NAME)` by the variable and `$$` by `$`; doubling each `$` before `(`, `$` or a
    non-ASCII character keeps every other text as it is. The launcher's own endpoint word (HostFromEnv) expands
    on purpose."""
    if isinstance(word, HostFromEnv):
        return f"$({word.variable}):{word.port}"
    return _EXPANDED.sub("$$", word)


def default_name(run_dir: Path) -> str:
    """A JobSet name from the run directory's (`345m-20261201T213125Z` → `m345m-261201213125`): a DNS-1035
    label short enough for the coordinator's host name, unique per run directory."""
    match = re.fullmatch(r"(.*)-\d\d(\d{6})T(\d{6})Z(-\d+)?", run_dir.name)
    head, stamp = (match[1], match[2] + match[3] + (match[4] or "")) if match else (run_dir.name, "")
    slug = re.sub(r"[^a-z0-9]+", "-", head.lower()).strip("-") or "run"
    if not slug[0].isalpha():
        slug = "m" + slug
    slug = slug[:MAX_NAME - (len(stamp) + 1 if stamp else 0)].rstrip("-")
    return f"{slug}-{stamp}" if stamp else slug


@dataclass(frozen=True)
class JobSetJob:
    """Everything the JobSet says, decided from the resolved job: what runs, where, and how it restarts."""

    name: str
    namespace: str
    nodes: int
    gpus_per_node: int
    world_size: int
    argv: tuple[str, ...]  # torchrun … script … flags: the resolved command, unchanged
    env: Mapping[str, str]
    run_dir: Path
    settings: K8sSettings
    data_files: tuple[str, ...] = ()  # files this machine cannot see: each pod checks them before torchrun
    node_requirements: str = ""  # JSON of requirements.job_node_items: each pod checks them before torchrun
    preset: str = ""
    about: tuple[str, ...] = ()
    unset: tuple[str, ...] = ()  # launcher.env's nulls: the entry script unsets them before torchrun
    # a resumed run: what its earlier attempts' ends say (machines to keep off, by the Slurm requeue policy's rule)
    resumed: k8s_policy.Resume = k8s_policy.Resume()

    @property
    def mount_path(self) -> str:
        """Where the PVC is mounted: the run root, so the run directory's paths are the same in every pod."""
        return str(self.run_dir.parent)

    @property
    def manifest_path(self) -> Path:
        return self.run_dir / MANIFEST_NAME


def build_job(job: ResolvedJob, command: Command, settings: K8sSettings) -> JobSetJob:
    assert job.run_dir is not None, "a Kubernetes job has a run directory"
    name = settings.name or default_name(job.run_dir)
    if job.existing is not None:  # a JobSet's name is its identity: a new attempt is a new JobSet
        suffix = f"-r{len(job.existing.manifest.get('attempts') or []) + 1}"
        # however many attempts, the coordinator's host name NAME-node-0-0.NAME must fit in a 63-character label
        name = name[:max(1, MAX_HOST_NAME - len(suffix))].rstrip("-") + suffix
    items = requirements.job_node_items(job.megatron, job.layout.vpp, job.entry)
    about = [kernel_summary(job) + ("; each pod checks what the settings need at start" if items else "")] \
        if job.entry == "pretrain_gpt" else []
    about.append(f"runs {job.runtime.describe()}")
    resumed = k8s_policy.resume(job.existing.path, job.existing.manifest) if job.existing is not None \
        else k8s_policy.Resume()
    return JobSetJob(name=name, namespace=settings.namespace, nodes=job.nodes, gpus_per_node=job.gpus_per_node,
                     world_size=job.layout.world_size, argv=tuple(command.argv), env=dict(command.env),
                     run_dir=job.run_dir, settings=settings, data_files=job.unseen_files, preset=job.preset.name,
                     about=tuple(about), node_requirements=json.dumps(items) if items else "", unset=command.unset,
                     resumed=resumed)


def check_job(job: JobSetJob, resolved: ResolvedJob) -> list[Problem]:
    """Everything that would make the JobSet wrong, each with its fix."""
    problems: list[Problem] = []
    s = job.settings
    if job.nodes * job.gpus_per_node != job.world_size:
        problems.append(Problem(
            f"{job.nodes} node(s) x {job.gpus_per_node} GPU(s) = {job.nodes * job.gpus_per_node} ranks, "
            f"but the layout needs world size {job.world_size}",
            f"use --nodes {max(1, job.world_size // max(1, job.gpus_per_node))} or change the layout"))
    if job.nodes > 1 and resolved.preset.launcher.master_addr != "localhost":
        problems.append(Problem(
            f"launcher.master_addr={resolved.preset.launcher.master_addr} does not apply to a Kubernetes job",
            "drop it: the rendezvous host is the JobSet's pod 0, named by its headless service"))
    if Path(job.mount_path) in (Path("/"), Path("/dev"), Path("/dev/shm")):
        problems.append(Problem(f"the run root {job.mount_path} cannot be the PVC's mount point in the pods",
                                "set run_root to a directory of its own, e.g. --set run_root=/runs"))
    for name in (*job.env, *job.unset):
        if name in MANAGED_ENV:
            problems.append(Problem(f"env.{name} is set by the Kubernetes backend itself", "remove it from env"))
    hidden = [name for name, value in job.env.items() if secrets.is_secret(name, value)]
    if hidden and s.secret is None:
        problems.append(Problem(
            f"env.{hidden[0]} is a secret: a Kubernetes job reads it from a Secret, never from the manifest",
            f"kubectl create secret generic NAME -n {s.namespace} --from-literal={hidden[0]}=… (one key per "
            "variable), then --set k8s.secret=NAME"))
    return problems


def warnings_of(job: JobSetJob, resolved: ResolvedJob) -> list[str]:
    """Paths the pods use that the PVC does not hold, and code that must be in the image."""
    found = [*resolved.warnings, *job.resumed.warnings]
    mount = Path(job.mount_path)
    for dest in ("save", "load", "tensorboard_dir"):
        path = resolved.megatron.get(dest)
        if isinstance(path, str) and not Path(path).is_relative_to(mount):
            found.append(f"{dest}={path} is not on the PVC (mounted at {mount}): a restarted pod will not find it")
    if resolved.megatron_path.absolute().is_relative_to(mount):
        found.append(f"Megatron-LM at {resolved.megatron_path} is below the PVC's mount point {mount}: the pods "
                     "run the copy on the PVC, not the image's")
    if str(LAUNCHER_ROOT) in job.env.get("PYTHONPATH", "").split(":"):
        found.append(f"the job imports the launcher's layer spec from {LAUNCHER_ROOT}: the image must hold this "
                     "launcher there (or use an image with Transformer Engine)")
    return found


def notes_of(job: JobSetJob, resolved: ResolvedJob) -> list[str]:
    s = job.settings
    notes = [f"the pods run {entry_script(resolved)} from the image {s.image} (or the PVC): --megatron-path names "
             "Megatron-LM's directory there"]
    notes += job.resumed.notes
    if s.pvc == DEFAULT_PVC:
        notes.append(f"the run directory and checkpoints go to the ReadWriteMany claim {DEFAULT_PVC} (k8s.pvc), "
                     f"which must exist in namespace {s.namespace}")
    return notes


def _env_entry(name: str, value: str, settings: K8sSettings) -> dict[str, Any]:
    if secrets.is_secret(name, value):
        return {"name": name, "valueFrom": {"secretKeyRef": {"name": settings.secret, "key": name}}}
    return {"name": name, "value": k8s_word(value)}


def _field(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def jobset(job: JobSetJob) -> dict[str, Any]:
    """The JobSet object."""
    s = job.settings
    env: list[dict[str, Any]] = [
        {"name": "NNODES", "value": str(job.nodes)},
        _field("NODE_RANK", f"metadata.annotations['{COMPLETION_INDEX}']"),
        _field("RESTART_ATTEMPT", f"metadata.annotations['{RESTART_ATTEMPT}']"),
        _field("MASTER_ADDR", f"metadata.annotations['{COORDINATOR}']"),
        _field("MEGATRON_LAUNCH_K8S_NODE", "spec.nodeName"),  # the machine: what a failure there leaves out
        {"name": "MEGATRON_LAUNCH_JOBSET", "value": job.name},
        {"name": "MEGATRON_LAUNCH_SUPERVISOR", "value": k8s_word(k8s_pod.SUPERVISOR)},
        {"name": "MEGATRON_LAUNCH_DNS_TIMEOUT", "value": str(s.dns_timeout)},
        {"name": "MEGATRON_LAUNCH_LOG_DIR", "value": k8s_word(str(job.run_dir / "logs" / "k8s"))},
        # torchrun's grace between forwarding SIGTERM to its ranks and killing them: time to save a checkpoint
        {"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": str(s.grace_seconds)},
        *([{"name": "MEGATRON_LAUNCH_NODE_CHECK", "value": k8s_word(requirements.NODE_CHECK)},
           {"name": "MEGATRON_LAUNCH_NODE_ITEMS", "value": k8s_word(job.node_requirements)}]
          if job.node_requirements else []),
        *(_env_entry(name, value, s) for name, value in job.env.items()),
        # names only (checked identifiers), split by the entry script
        *([{"name": "MEGATRON_LAUNCH_UNSET", "value": " ".join(job.unset)}] if job.unset else []),
    ]
    limits: dict[str, Any] = {"nvidia.com/gpu": job.gpus_per_node}
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": s.image,
        "command": [k8s_word(word) for word in ("bash", "-c", ENTRY_SCRIPT, "megatron-launch")],
        "args": [str(len(job.data_files)), *map(k8s_word, job.data_files), *map(k8s_word, job.argv)],
        "env": env,
        "resources": {"limits": limits},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "runs", "mountPath": job.mount_path}],
    }
    if s.image_pull_policy:
        container["imagePullPolicy"] = s.image_pull_policy
    if s.rdma_resource:
        limits[s.rdma_resource] = s.rdma_count
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}  # RDMA pins memory
    pod_meta: dict[str, Any] = {"labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER}}
    if s.network_annotation:
        pod_meta["annotations"] = {MULTUS: s.network_annotation}
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": job.nodes,
        "parallelism": job.nodes,
        "backoffLimit": 0,  # a failed pod fails its Job, and the JobSet restarts as a whole (the rendezvous needs all)
        # bad input (2) and Megatron's failed result validation (17): the JobSet's rule below fails it, no restart
        "podFailurePolicy": {"rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": CONTAINER, "operator": "In",
                                                  "values": list(k8s_pod.NOT_RETRIED)}}]},
    }
    if (deadline := deadline_seconds(s)) is not None:
        job_spec["activeDeadlineSeconds"] = deadline
    pod_spec: dict[str, Any] = {}
    if job.resumed.exclude:  # machines an earlier attempt's fault names: the pods are scheduled elsewhere
        pod_spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "NotIn", "values": list(job.resumed.exclude)}]}]}}}
    job_spec["template"] = {
        "metadata": pod_meta,
        "spec": {
            **pod_spec,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": s.grace_seconds,
            "containers": [container],
            "volumes": [
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": s.shm_size}},
                {"name": "runs", "persistentVolumeClaim": {"claimName": s.pvc}},
            ],
        },
    }
    labels = {"app.kubernetes.io/managed-by": FIELD_MANAGER}
    if s.queue:
        labels[KUEUE_QUEUE] = s.queue
    spec: dict[str, Any] = {
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True, "subdomain": job.name},
        "coordinator": {"replicatedJob": REPLICATED_JOB, "jobIndex": 0, "podIndex": 0},
        "failurePolicy": {
            "maxRestarts": s.max_restarts,
            # the old pods are gone (their checkpoint saved) before the new ones start and load it
            "restartStrategy": "BlockingRecreate",
            # exit 2 or 17 (PodFailurePolicy above): restarting cannot help
            "rules": [{"name": "NotRetried", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
        },
        "successPolicy": {"operator": "All"},
        "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": {"spec": job_spec}}],
    }
    if s.ttl_seconds is not None:
        spec["ttlSecondsAfterFinished"] = s.ttl_seconds
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": {"name": job.name, "namespace": job.namespace, "labels": labels,
                     "annotations": {"megatron-launch/preset": job.preset,
                                     "megatron-launch/run-dir": str(job.run_dir)}},
        "spec": spec,
    }


class _Dumper(yaml.SafeDumper):
    """safe_dump, with multi-line text (the entry script) as a readable literal block where YAML allows it."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)


def render_yaml(obj: Mapping[str, Any], about: Sequence[str] = ()) -> str:
    header = "".join(f"# {' '.join(line.split())}\n" for line in ("Generated by megatron-launch.", *about))
    body = yaml.dump(obj, Dumper=_Dumper, sort_keys=False, allow_unicode=False, width=120)
    return header + body


def render_json(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, indent=2) + "\n"


@dataclass(frozen=True)
class Prepared:
    job: JobSetJob
    obj: dict[str, Any]
    warnings: list[str]


def prepare(job: ResolvedJob, command: Command) -> Prepared:
    """The JobSet of a resolved job. Raises UserError (nothing written) for any unusable setting."""
    if job.entry == PREFLIGHT:
        raise UserError("--preflight is not available with --k8s yet",
                        "run the preflight on Slurm or here; the JobSet's torchrun is the same as the training's")
    assert job.target.k8s_settings is not None, "a Kubernetes job is resolved for Kubernetes (resolve.target_for)"
    made = build_job(job, command, job.target.k8s_settings)
    problems = check_job(made, job)
    if problems:
        raise UserError(problems)
    return Prepared(made, jobset(made), warnings_of(made, job))


def find_kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise UserError(Problem("kubectl not found on PATH, so the JobSet cannot be applied",
                                "install kubectl with a kubeconfig for the cluster, or drop --submit to only "
                                "write the manifest"))
    return kubectl


def apply_argv(kubectl: str, manifest: Path) -> list[str]:
    return [kubectl, "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", str(manifest)]


def submit(argv: Sequence[str]) -> str:
    """Server-side apply; kubectl's own line. A refusal is a UserError carrying the API server's message."""
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip() or f"exit code {result.returncode}"
        raise UserError(Problem(f"kubectl refused the JobSet: {message}",
                                "check the k8s settings, the namespace and that the JobSet CRD is installed "
                                "(kubectl get crd jobsets.jobset.x-k8s.io)"))
    return result.stdout.strip()


def record(job: ResolvedJob, made: JobSetJob, text: str, kubectl: str) -> None:
    """The run directory (manifest, preset, command.sh = the kubectl call) with jobset.yaml; for a resumed run,
    an attempt and the new manifest."""
    argv = apply_argv(kubectl, made.manifest_path)
    if job.existing is None:
        submit_command = Command(argv=argv, env={}, script=str(made.manifest_path), script_args=[])
        rundir.create_run_dir(job, submit_command, list(job.preset.overrides), run_dir=made.run_dir,
                              megatron_path=job.megatron_path, extra_files={MANIFEST_NAME: text})
    else:
        rundir.record_attempt(job.existing, argv, {}, job.preset.overrides)
        write_text_atomic(made.manifest_path, text)
        if made.resumed.decision is not None:  # the earlier attempts' end and the machines kept off, as Slurm's
            attempt = len(job.existing.manifest.get("attempts") or []) + 1  # the one record_attempt added
            requeue_policy.record(made.run_dir / "manifest.json", made.name, attempt, made.resumed.decision)


def launch(job: ResolvedJob, command: Command, *, dry_run: bool = False, submit_job: bool = False,
           output_format: str = "text", out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`launch PRESET --k8s`: print the JobSet (dry-run), write it into the run directory, or apply it."""
    # the streams of the moment (the launcher's redacting ones), not those of import time
    out, err = out or sys.stdout, err or sys.stderr
    made = prepare(job, command)
    text = render_yaml(made.obj, made.job.about)
    for note in (*job.notes, *notes_of(made.job, job)):
        print(f"note: {note}", file=err)
    for warning in made.warnings:
        print(f"warning: {warning}", file=err)
    if dry_run:
        out.write(render_json(made.obj) if output_format == "json" else text)
        return 0
    # Megatron-LM is the image's (at megatron_path), not this machine's: no local checkout is required.
    kubectl = find_kubectl() if submit_job else "kubectl"
    record(job, made.job, text, kubectl)
    # --format json: one JSON object on stdout, as for Slurm (the notes and warnings above stay on stderr)
    written = {"run_dir": str(made.job.run_dir), "manifest_path": str(made.job.manifest_path), "dry_run": False,
               "apply": apply_argv(kubectl, made.job.manifest_path), "warnings": list(made.warnings)}
    if not submit_job:
        if output_format == "json":
            out.write(json.dumps({**written, "submitted": []}, indent=2) + "\n")
            return 0
        print(made.job.manifest_path, file=out)
        print(f"note: apply it with: {shlex.join(apply_argv(kubectl, made.job.manifest_path))}", file=err)
        return 0
    try:
        applied = submit(apply_argv(kubectl, made.job.manifest_path))
    except UserError:
        if job.existing is None:  # nothing was created: leave nothing behind
            shutil.rmtree(made.job.run_dir, ignore_errors=True)
        raise
    cluster_job.record_submission(made.job.run_dir, "kubernetes", [f"{made.job.namespace}/{made.job.name}"])
    if output_format == "json":
        out.write(json.dumps({**written, "submitted": [f"{made.job.namespace}/{made.job.name}"],
                              "kubectl": applied}, indent=2) + "\n")
        return 0
    print(applied, file=out)
    print(f"submitted JobSet {made.job.namespace}/{made.job.name}: kubectl get jobset {made.job.name} -n "
          f"{made.job.namespace}; logs in {made.job.run_dir}/logs/k8s", file=err)
    return 0
