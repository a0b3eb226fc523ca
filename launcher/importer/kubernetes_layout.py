"""The layout a Kubernetes manifest gives its training pods: how many nodes, how many GPUs each.

In a cluster job every pod is one node of the run: Kubeflow's PyTorchJob counts the `replicas` of its Master and
Worker together (the operator gives torchrun that count as PET_NNODES) and its `nprocPerNode` processes per pod
(PET_NPROC_PER_NODE); an MPIJob's Worker `replicas` are the nodes (its Launcher pod only starts mpirun) and its
`slotsPerWorker` the ranks per node; a JobSet runs `replicas` × `parallelism` pods of each replicated job, a Volcano
Job (batch.volcano.sh) `replicas` pods of each task (`spec.tasks`; a batch Job has none), Kubeflow Trainer's
TrainJob `trainer.numNodes` pods of `numProcPerNode` ranks (its runtime gives torchrun both), a LeaderWorkerSet
`leaderWorkerTemplate.size` pods in each group (leader and workers: one run; each of its `replicas` groups is another
run of the same size). Where the
job names no per-node count, the pod's GPU limit (`nvidia.com/gpu`, `amd.com/gpu`) is it: one rank per GPU. A count
the manifest leaves to a placeholder (`replicas: ${NUM_NODES}`) is not known here and is named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from launcher.importer.words import MAX_COUNT, count

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
MAX_GROUPS = 100  # replicated jobs or tasks of one manifest read (work bounded); past it, no count of nodes


@dataclass
class ManifestLayout:
    counts: dict[str, int] = field(default_factory=dict)  # nodes, gpus_per_node: what the manifest says
    notes: list[str] = field(default_factory=list)  # counts it leaves unknown


def _count(value: Any) -> int | None:
    """A count as a manifest writes it: an int, or a string of ASCII digits (`nprocPerNode: "8"`); 0 too (a
    PyTorchJob without workers); not a float, a bool, `"٤"` or one past MAX_COUNT."""
    return count(value.strip() if isinstance(value, str) else value, least=0)


def _get(node: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _pod_gpus(pod_template: Any) -> int | None:
    """The GPUs one pod asks for: the largest GPU limit (else request) of its containers."""
    found = []
    containers = _get(pod_template, "spec", "containers")
    for container in containers if isinstance(containers, list) else []:
        for where in ("limits", "requests"):
            for resource in GPU_RESOURCES:
                gpus = _count(_get(container, "resources", where, resource))
                if gpus:
                    found.append(gpus)
    return max(found) if found else None


class _Reader:
    def __init__(self) -> None:
        self.layout = ManifestLayout()

    def replicas(self, role: str, spec: Any, default: int = 1) -> int | None:
        value = spec.get("replicas", default) if isinstance(spec, dict) else None
        count = _count(value)
        if count is None:
            self.layout.notes.append(f"{role} replicas {value!r}: not a count known here (each replica is one "
                                     "node of the run); give the preset's launcher.nodes")
        return count

    def count(self, what: str, value: Any) -> int | None:
        """The manifest's count of nodes `value`, named where it is none known here (`numNodes: ${N}`)."""
        given = _count(value)
        if given is None:
            self.layout.notes.append(f"{what} {value!r}: not a count known here (each pod is one node of the run); "
                                     "give the preset's launcher.nodes")
        return given

    def per_node(self, what: str, value: Any, pods: list[Any]) -> None:
        given = _count(value) or None  # nprocPerNode: 0 starts nothing: no count either
        if value is not None and given is None and value not in ("auto", "gpu"):
            self.layout.notes.append(f"{what} {value!r}: not a count known here; give the preset's "
                                     "launcher.gpus_per_node")
        if given is None:  # one rank per GPU of the pod ("auto"/"gpu" on a GPU pod)
            gpus = {g for g in map(_pod_gpus, pods) if g is not None}
            given = gpus.pop() if len(gpus) == 1 else None
            if len(gpus) > 1:  # a preset runs the same number on every node: the world differs whichever is taken
                self.layout.notes.append(f"{what}: its pods ask for different numbers of GPUs "
                                         f"({', '.join(map(str, sorted(gpus)))}), one rank each; a preset gives "
                                         "every node the same: give the preset's launcher.gpus_per_node and nodes, "
                                         "and check the world size")
        if given:
            self.layout.counts["gpus_per_node"] = given

    def unread(self, what: str, groups: list[Any]) -> list[int | None]:
        """[None] (no count of nodes) where the manifest has more groups of pods than are read, else []."""
        if len(groups) <= MAX_GROUPS:
            return []
        self.layout.notes.append(f"{what}: {len(groups):,}, of which the first {MAX_GROUPS} are read; the pods of "
                                 "the others are not counted: give the preset's launcher.nodes")
        return [None]

    def nodes(self, counts: list[int | None]) -> None:
        total = sum(c for c in counts if c is not None)
        if counts and all(c is not None for c in counts) and 0 < total <= MAX_COUNT:
            self.layout.counts["nodes"] = total
        elif total > MAX_COUNT:
            self.layout.notes.append(f"{total:,} pods in all: more nodes than a cluster has (at most {MAX_COUNT:,} "
                                     "are read); give the preset's launcher.nodes")


def manifest_layout(document: Any) -> ManifestLayout:
    """The nodes and GPUs per node of the job `document` describes (a PyTorchJob, MPIJob, JobSet, Volcano Job, TrainJob,
    LeaderWorkerSet, batch Job or Pod)."""
    reader = _Reader()
    kind, spec = _get(document, "kind"), _get(document, "spec")
    if not isinstance(spec, dict):
        return reader.layout
    if kind == "PyTorchJob" and isinstance(spec.get("pytorchReplicaSpecs"), dict):
        roles = {r: s for r, s in spec["pytorchReplicaSpecs"].items() if isinstance(s, dict)}
        reader.nodes([reader.replicas(f"PyTorchJob {role}", s) for role, s in roles.items()])
        per_node = spec.get("nprocPerNode", _get(spec, "elasticPolicy", "nProcPerNode"))
        reader.per_node("PyTorchJob nprocPerNode", per_node, [s.get("template") for s in roles.values()])
    elif kind == "MPIJob" and isinstance(spec.get("mpiReplicaSpecs"), dict):
        worker = spec["mpiReplicaSpecs"].get("Worker")
        if isinstance(worker, dict):
            reader.nodes([reader.replicas("MPIJob Worker", worker)])
            reader.per_node("MPIJob slotsPerWorker", spec.get("slotsPerWorker"), [worker.get("template")])
    elif kind == "JobSet" and isinstance(spec.get("replicatedJobs"), list):
        counts, pods = [], []
        for job in spec["replicatedJobs"][:MAX_GROUPS]:
            pod = _get(job, "template", "spec", "template")
            if _pod_gpus(pod) is None:
                continue  # a job without GPUs (a coordinator, a data loader) is no node of the run
            given = _get(job, "template", "spec", "parallelism")
            parallelism = 1 if given is None else _count(given)
            replicas = reader.replicas(f"JobSet {_get(job, 'name') or 'job'}", job)
            counts.append(None if replicas is None or parallelism is None else replicas * parallelism)
            pods.append(pod)
        reader.nodes(counts + reader.unread("JobSet replicatedJobs", spec["replicatedJobs"]))
        reader.per_node("JobSet", None, pods)
    elif kind == "Job" and isinstance(spec.get("tasks"), list):  # Volcano's Job: pods of each task, as a JobSet's
        counts, pods = [], []
        for task in spec["tasks"][:MAX_GROUPS]:
            pod = _get(task, "template")
            if _pod_gpus(pod) is None:
                continue  # a task without GPUs (a parameter server, a launcher) is no node of the run
            counts.append(reader.replicas(f"Volcano Job task {_get(task, 'name') or 'task'}", task))
            pods.append(pod)
        reader.nodes(counts + reader.unread("Volcano Job tasks", spec["tasks"]))
        reader.per_node("Volcano Job", None, pods)
    elif kind == "TrainJob" and isinstance(spec.get("trainer"), dict):
        trainer = spec["trainer"]
        if "numNodes" in trainer:
            reader.nodes([reader.count("TrainJob trainer.numNodes", trainer["numNodes"])])
        else:  # the runtime's (ClusterTrainingRuntime) number of nodes: not in this manifest
            reader.layout.notes.append("TrainJob without trainer.numNodes: its training runtime's number of nodes, "
                                       "not known here; give the preset's launcher.nodes")
        resources = trainer.get("resourcesPerNode")
        reader.per_node("TrainJob trainer.numProcPerNode", trainer.get("numProcPerNode"),
                        [{"spec": {"containers": [{"resources": resources}]}}])
    elif kind == "LeaderWorkerSet" and isinstance(spec.get("leaderWorkerTemplate"), dict):
        group = spec["leaderWorkerTemplate"]
        reader.nodes([reader.count("LeaderWorkerSet leaderWorkerTemplate.size", group.get("size", 1))])
        groups = _count(spec.get("replicas", 1))
        if groups != 1:
            reader.layout.notes.append(f"LeaderWorkerSet replicas {spec.get('replicas')!r}: groups of pods each "
                                       "running the job on its own (one group is the run read here)")
        pods = [group.get(t) for t in ("leaderTemplate", "workerTemplate") if _pod_gpus(group.get(t)) is not None]
        reader.per_node("LeaderWorkerSet", None, pods)
    elif kind == "Job":
        reader.nodes([_count(spec.get("parallelism", 1))])
        reader.per_node("Job", None, [spec.get("template")])
    elif kind == "Pod":
        reader.nodes([1])
        reader.per_node("Pod", None, [document])
    return reader.layout
