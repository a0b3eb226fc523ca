"""The `k8s:` section of a preset: parsed, typed and checked before anything is rendered or applied.

Every value reaches the JobSet through a YAML serializer, so no value can add a field; these checks make the
API server accept what is rendered: names are DNS-1123 (or DNS-1035 where they name a Service), sizes are
Kubernetes quantities, resource names are qualified names. All problems are reported at once (exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from launcher.errors import Problem, UserError, did_you_mean, shown
from launcher.megatron.target import NGC_IMAGE
from launcher.pipeline.field_types import fields_allowing
from launcher.pipeline.slurm_settings import parse_time_limit

# apimachinery's validation: a DNS-1123 label (namespace, PVC, Secret, queue), a DNS-1035 label (a name that
# becomes a Service: the JobSet's headless service is named after it), a DNS-1123 subdomain.
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# resource.Quantity's grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go), as the CRD schemas write it.
QUANTITY = re.compile(r"(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?"
                      r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?")
# An extended resource: a qualified name with a domain prefix (rdma/ib, nvidia.com/hostdev, vpc.amazonaws.com/efa).
RESOURCE_NAME = re.compile(r"(?P<prefix>[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/"
                           r"(?P<name>[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)")
# Multus' k8s.v1.cni.cncf.io/networks in its short form: [namespace/]network[@interface], comma-separated.
MULTUS_NETWORK = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]"
                            r"([-a-z0-9]*[a-z0-9])?)*(@[A-Za-z0-9_.-]{1,15})?")
# An OCI image reference (registry/path:tag@digest): the characters the distribution grammar allows.
IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
# The JobSet controller writes the coordinator's host name `NAME-node-0-0.NAME` as a label value (63 characters at
# most), so a JobSet name may have (63 - len("-node-0-0.")) // 2 characters; a few more are kept for --resume's
# `-rN` suffix.
MAX_NAME = 22
DEFAULT_IMAGE = NGC_IMAGE  # the container the pin was tested in: what --check assumes (TE 2.14.0) is what runs
DEFAULT_PVC = "megatron-runs"
MAX_RESTARTS = 1000  # failurePolicy.maxRestarts is an int32; a typo of thousands of restarts is refused
MAX_SECONDS = 2**31 - 1  # int32 fields (grace period, TTL, deadline)


@dataclass(frozen=True)
class K8sSettings:
    """Where and how a job runs on Kubernetes. Every field can be set in `launcher.k8s:` or by --set k8s.NAME=…"""

    # The container image: it holds torchrun and the kernels (an NGC image: TE and apex), and Megatron-LM at
    # megatron_path unless that is on the PVC. The default is the NGC image the Slurm examples use.
    image: str | None = DEFAULT_IMAGE
    pvc: str | None = DEFAULT_PVC  # an existing ReadWriteMany claim, mounted at the run root in every pod
    namespace: str = "default"
    name: str | None = None  # the JobSet's name (default: from the run directory's name)
    image_pull_policy: str | None = None
    shm_size: str = "64Gi"  # /dev/shm: a memory emptyDir (data loader workers and NCCL share memory through it)
    rdma_resource: str | None = None  # e.g. rdma/ib, nvidia.com/hostdev, vpc.amazonaws.com/efa
    rdma_count: int = 1  # of rdma_resource per pod
    network_annotation: str | None = None  # Multus: k8s.v1.cni.cncf.io/networks on every pod
    queue: str | None = None  # Kueue: kueue.x-k8s.io/queue-name
    secret: str | None = None  # the Secret holding the job's secret environment variables (one key per name)
    max_restarts: int = 3  # failurePolicy.maxRestarts: whole-JobSet restarts, each resuming from the last save
    grace_seconds: int = 300  # SIGTERM → SIGKILL: time for the ranks to save a checkpoint (like slurm.signal_seconds)
    time: str | None = None  # activeDeadlineSeconds of each attempt, in Slurm's time format ("04:00:00")
    ttl_seconds: int | None = 604800  # ttlSecondsAfterFinished: a finished JobSet (and its pods) is deleted then
    dns_timeout: int = 600  # seconds each pod waits for the rendezvous host's name to resolve


K8S_FIELDS = {f.name: f for f in fields(K8sSettings)}
_OPTIONAL = fields_allowing(K8sSettings, type(None))
_INTS = fields_allowing(K8sSettings, int)


def parse_k8s_settings(raw: Mapping[str, Any] | None) -> K8sSettings:
    """Typed settings from a preset's `k8s:` mapping. Raises UserError listing every problem at once."""
    problems: list[Problem] = []
    values: dict[str, Any] = {}
    for name, value in dict(raw or {}).items():
        if name not in K8S_FIELDS:
            hint = did_you_mean(str(name), K8S_FIELDS, prefix="k8s.") or "known: " + ", ".join(sorted(K8S_FIELDS))
            problems.append(Problem(f"unknown Kubernetes setting k8s.{name}", hint))
        elif value is None:
            if name in _OPTIONAL:
                values[name] = None
        elif name in _INTS:
            if isinstance(value, bool) or not isinstance(value, int):
                problems.append(Problem(f"k8s.{name} must be an integer, got {shown(value)}",
                                        f"e.g. --set k8s.{name}={getattr(K8sSettings, name) or 1}"))
            else:
                values[name] = value
        elif name == "time" and isinstance(value, int) and not isinstance(value, bool):
            problems.append(Problem(f"k8s.time must be a quoted string, got the number {value}",
                                    'write e.g. time: "04:00:00"; YAML reads unquoted 4:00:00 as 14400'))
        elif not isinstance(value, str):
            problems.append(Problem(f"k8s.{name} must be a string, got {shown(value)}",
                                    f'quote it in YAML: {name}: "…"'))
        else:
            values[name] = value
    settings = K8sSettings(**values)
    if not problems:
        problems = check_settings(settings)
    if "rdma_count" in values and settings.rdma_resource is None:
        problems.append(Problem(f"k8s.rdma_count={settings.rdma_count} does nothing without k8s.rdma_resource: "
                                "it counts that resource per pod", "add k8s.rdma_resource=NAME (e.g. rdma/ib), or "
                                "drop k8s.rdma_count"))
    if problems:
        raise UserError(problems)
    return settings


def _check_pattern(problems: list[Problem], name: str, value: str | None, pattern: re.Pattern[str], what: str,
                   hint: str, limit: int = 63) -> None:
    if value is not None and not (len(value) <= limit and pattern.fullmatch(value)):
        problems.append(Problem(f"k8s.{name}={shown(value)} is not {what}", hint))


def check_settings(s: K8sSettings) -> list[Problem]:
    problems: list[Problem] = []
    label = "lower-case letters, digits and -, starting and ending with a letter or digit, at most 63 characters"
    if s.image is None:
        problems.append(Problem("a Kubernetes job needs a container image (k8s.image)",
                                f"e.g. --set k8s.image={DEFAULT_IMAGE} (it must hold torchrun, and Megatron-LM at "
                                "--megatron-path unless that is on the PVC)"))
    _check_pattern(problems, "image", s.image, IMAGE, "a container image reference",
                   "registry/repository:tag or …@sha256:digest: letters, digits and . _ / : @ + - only", 4096)
    if s.pvc is None:
        problems.append(Problem("a Kubernetes job needs a ReadWriteMany PersistentVolumeClaim for its run directory "
                                "and checkpoints (k8s.pvc)",
                                "create one (accessModes: [ReadWriteMany]) and --set k8s.pvc=NAME"))
    _check_pattern(problems, "pvc", s.pvc, DNS1123_SUBDOMAIN, "a PersistentVolumeClaim name",
                   "lower-case letters, digits, - and ., at most 253 characters", 253)
    _check_pattern(problems, "namespace", s.namespace, DNS1123_LABEL, "a namespace name (DNS-1123 label)", label)
    _check_pattern(problems, "name", s.name, DNS1035_LABEL, f"a JobSet name of at most {MAX_NAME} characters",
                   f"lower-case letters, digits and -, starting with a letter, at most {MAX_NAME} characters (the "
                   "coordinator's host name NAME-node-0-0.NAME must fit in a 63-character label)", MAX_NAME)
    _check_pattern(problems, "secret", s.secret, DNS1123_SUBDOMAIN, "a Secret name",
                   "lower-case letters, digits, - and ., at most 253 characters", 253)
    _check_pattern(problems, "queue", s.queue, DNS1123_LABEL, "a Kueue LocalQueue name", label)
    _check_pattern(problems, "shm_size", s.shm_size, QUANTITY, "a Kubernetes quantity",
                   'a number with an optional unit, e.g. "64Gi" or "512Mi"', 64)
    if s.shm_size is not None and QUANTITY.fullmatch(s.shm_size) and (
            s.shm_size.startswith("-") or not re.search(r"[1-9]", s.shm_size.split("e")[0].split("E")[0])):
        problems.append(Problem(f"k8s.shm_size={shown(s.shm_size)} is not a positive size",
                                'give the size of /dev/shm, e.g. "64Gi" or "512Mi"'))
    _check_pattern(problems, "rdma_resource", s.rdma_resource, RESOURCE_NAME, "an extended resource name",
                   "DOMAIN/NAME as the device plugin advertises it: rdma/ib, nvidia.com/hostdev, "
                   "vpc.amazonaws.com/efa", 253)
    if s.network_annotation is not None and not (
            len(s.network_annotation) <= 1024
            and all(MULTUS_NETWORK.fullmatch(part.strip()) for part in s.network_annotation.split(","))):
        problems.append(Problem(f"k8s.network_annotation={shown(s.network_annotation)} is not a Multus network list",
                                "comma-separated [namespace/]network[@interface] names, e.g. "
                                "default/ib-net1,default/ib-net2"))
    if s.image_pull_policy is not None and s.image_pull_policy not in PULL_POLICIES:
        problems.append(Problem(f"k8s.image_pull_policy={shown(s.image_pull_policy)} is not a pull policy",
                                f"use one of {', '.join(PULL_POLICIES)}"))
    for name, low, high in (("max_restarts", 0, MAX_RESTARTS), ("rdma_count", 1, 1024),
                            ("grace_seconds", 1, MAX_SECONDS), ("dns_timeout", 1, 86400),
                            ("ttl_seconds", 0, MAX_SECONDS)):
        value = getattr(s, name)
        if value is not None and not low <= value <= high:
            problems.append(Problem(f"k8s.{name}={value} is out of range", f"use {low} to {high}"))
    if s.time is not None:
        try:
            limit = parse_time_limit(s.time)
        except ValueError:
            problems.append(Problem(f"k8s.time={shown(s.time)} is not a time limit",
                                    'use minutes ("90"), "HH:MM:SS", "D-HH:MM:SS" or "UNLIMITED"'))
        else:
            if limit is not None and not 0 < limit <= MAX_SECONDS:  # activeDeadlineSeconds: a positive int
                problems.append(Problem(f"k8s.time={shown(s.time)} is {limit:,} seconds, out of range",
                                        f"use 1 second to {MAX_SECONDS:,} seconds (about 68 years), or UNLIMITED"))
            elif limit is not None and s.grace_seconds >= limit:
                problems.append(Problem(f"k8s.grace_seconds={s.grace_seconds} is not shorter than k8s.time={s.time}",
                                        "use a longer k8s.time or a shorter grace period"))
    return problems


def deadline_seconds(settings: K8sSettings) -> int | None:
    """activeDeadlineSeconds of each attempt, from k8s.time (checked already)."""
    return parse_time_limit(settings.time) if settings.time is not None else None
