"""Kubernetes manifests: every pod of a training job is one node of the run (a PyTorchJob's Master and Worker
replicas together, an MPIJob's Worker replicas, a JobSet's replicas × parallelism), and the per-node process count
is nprocPerNode / slotsPerWorker or the pod's GPU limit; the world-size check and its hints then hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from launcher.cli.job import JobRequest, job_as_declared, job_for
from launcher.importer.build import import_source
from launcher.importer.report import check_import
from launcher.pipeline.preset import load_preset

MODEL = ["--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "2048",
         "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size", "64",
         "--train-iters", "100", "--lr", "1e-4", "--bf16", "--mock-data", "--tokenizer-type", "NullTokenizer",
         "--vocab-size", "50257", "--eval-interval", "100", "--eval-iters", "1"]


def container(command: list[str], gpus: object = 8) -> dict:
    limits = {"nvidia.com/gpu": gpus} if gpus is not None else {}
    return {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": command,
            "resources": {"limits": limits}}


def pod(command: list[str], gpus: object = 8) -> dict:
    return {"spec": {"containers": [container(command, gpus)]}}


def pytorchjob(master: object, workers: object, command: list[str], nproc: object = None, gpus: object = 8) -> dict:
    spec: dict = {"pytorchReplicaSpecs": {
        "Master": {"replicas": master, "template": pod(command, gpus)},
        "Worker": {"replicas": workers, "template": pod(command, gpus)}}}
    if nproc is not None:
        spec["nprocPerNode"] = nproc
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "gpt"}, "spec": spec}


def layout_of(manifest: dict | list[dict]) -> dict:
    docs = manifest if isinstance(manifest, list) else [manifest]
    text = "---\n".join(yaml.safe_dump(d) for d in docs) if len(docs) > 1 else yaml.safe_dump(docs[0])
    imported = import_source(text, "job.yaml")
    return {**{k: imported.launcher.get(k) for k in ("nodes", "gpus_per_node")}, "notes": imported.not_carried,
            "imported": imported}


def torchrun(*layout: str) -> list[str]:
    return ["torchrun", *layout, "pretrain_gpt.py", "--tensor-model-parallel-size", "8",
            "--pipeline-model-parallel-size", "4", *MODEL]


@pytest.mark.parametrize(("master", "workers", "nproc", "gpus", "expected"), [
    (1, 3, "8", 8, (4, 8)),  # nprocPerNode as the operator's string
    (1, 3, None, 8, (4, 8)),  # no nprocPerNode: one rank per GPU of the pod
    (1, 1, 4, "4", (2, 4)),
    (1, 0, "auto", 8, (1, 8)),
])
def test_a_pytorchjob_counts_master_and_worker_pods_as_nodes(master, workers, nproc, gpus, expected):
    found = layout_of(pytorchjob(master, workers, torchrun(), nproc, gpus))
    assert (found["nodes"], found["gpus_per_node"]) == expected


def test_the_training_commands_own_counts_win_and_a_disagreement_is_named():
    found = layout_of(pytorchjob(1, 3, torchrun("--nnodes", "2", "--nproc_per_node", "8"), "8"))
    assert (found["nodes"], found["gpus_per_node"]) == (2, 8)
    assert any("the Kubernetes job gives nodes 4, the training command 2" in n for n in found["notes"])


def test_a_placeholder_replica_count_is_named_not_guessed():
    found = layout_of(pytorchjob("${NUM_NODES}", 1, torchrun(), "8"))
    assert found["nodes"] is None and found["gpus_per_node"] == 8
    assert any("PyTorchJob Master replicas '${NUM_NODES}': not a count known here" in n for n in found["notes"])


def test_an_mpijob_counts_its_workers_not_its_launcher():
    command = ["mpirun", "-np", "16", "python", "pretrain_gpt.py", "--tensor-model-parallel-size", "8", *MODEL]
    job = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "gpt"},
           "spec": {"slotsPerWorker": 8, "mpiReplicaSpecs": {
               "Launcher": {"replicas": 1, "template": pod(command, None)},
               "Worker": {"replicas": 2, "template": pod(["sleep", "infinity"])}}}}
    found = layout_of(job)
    assert (found["nodes"], found["gpus_per_node"]) == (2, 8)


def test_an_mpijob_total_process_count_is_spread_over_its_worker_pods():
    command = ["mpirun", "-np", "8", "python", "pretrain_gpt.py", "--tensor-model-parallel-size", "8", *MODEL]
    job = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "gpt"},
           "spec": {"slotsPerWorker": 4, "mpiReplicaSpecs": {
               "Launcher": {"replicas": 1, "template": pod(command, None)},
               "Worker": {"replicas": 2, "template": pod(["sleep", "infinity"], 4)}}}}
    found = layout_of(job)
    assert (found["nodes"], found["gpus_per_node"]) == (2, 4)


def test_a_jobset_counts_replicas_times_parallelism_of_its_gpu_jobs():
    gpu_job = {"name": "workers", "replicas": 2, "template": {"spec": {
        "parallelism": 2, "completions": 2, "template": pod(torchrun("--nproc-per-node", "8"))}}}
    coordinator = {"name": "coordinator", "replicas": 1, "template": {"spec": {"template": pod(["redis"], None)}}}
    job = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "gpt"},
           "spec": {"replicatedJobs": [coordinator, gpu_job]}}
    found = layout_of(job)
    assert (found["nodes"], found["gpus_per_node"]) == (4, 8)


@pytest.mark.parametrize(("replicas", "expected"), [(4, (5, 8)), ("${N}", (None, 8))])
def test_a_volcano_job_counts_the_pods_of_its_gpu_tasks(replicas, expected):
    # Volcano's Job is kind Job too, but its pods are `replicas` of each task (it has no batch Job's parallelism)
    master = {"name": "master", "replicas": 1, "template": pod(torchrun())}
    worker = {"name": "worker", "replicas": replicas, "template": pod(torchrun())}
    server = {"name": "data", "replicas": 2, "template": pod(["redis"], None)}
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "gpt"},
           "spec": {"minAvailable": 5, "schedulerName": "volcano", "tasks": [master, worker, server]}}
    found = layout_of(job)
    assert (found["nodes"], found["gpus_per_node"]) == expected
    assert expected[0] or any("Volcano Job task worker replicas '${N}'" in n for n in found["notes"])


def test_a_multi_document_manifest_reads_the_training_jobs_layout():
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "etcd"}, "spec": {"ports": []}}
    found = layout_of([service, pytorchjob(1, 3, torchrun(), "8")])
    assert (found["nodes"], found["gpus_per_node"]) == (4, 8)


def test_the_world_size_hint_of_a_manifest_too_small_for_its_layout_holds(tmp_path: Path):
    # TP 8 · PP 4 needs 32 GPUs; the job has two pods of 8
    imported = layout_of(pytorchjob(1, 1, torchrun(), "8"))["imported"]
    preset = tmp_path / "job.yaml"
    preset.write_text(imported.text)
    outcome = check_import(imported, preset, job_as_declared)
    (problem,) = [p for p in outcome.problems if "world size" in p.message]
    assert "world size 16 = 2 node(s) × 8 GPUs" in problem.message
    nodes = re.search(r"--nodes (\d+) \(", problem.hint)
    assert nodes and int(nodes.group(1)) == 4, problem.hint
    _, after = job_for(load_preset(str(preset)), JobRequest(int(nodes.group(1)), run_dir=False, local=False,
                                                             judge=True))
    assert not [p for p in after if "world size" in p.message], [p.render() for p in after]


@pytest.mark.parametrize(("trainer", "expected"), [
    ({"numNodes": 4, "numProcPerNode": 8}, (4, 8)),
    ({"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}}, (2, 4)),  # one rank per GPU
    ({"numNodes": "${NODES}", "numProcPerNode": 8}, (None, 8)),
    ({"numProcPerNode": 8}, (None, 8)),  # the training runtime's node count
])
def test_a_kubeflow_trainjob_runs_num_nodes_pods_of_num_proc_per_node_ranks(trainer, expected):
    # Kubeflow Trainer v2: the runtime gives torchrun PET_NNODES and PET_NPROC_PER_NODE (was one node of the preset's 8)
    job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "gpt"},
           "spec": {"runtimeRef": {"name": "torch-distributed"},
                    "trainer": {**trainer, "image": "nvcr.io/nvidia/pytorch:25.01-py3", "command": torchrun()}}}
    found = layout_of(job)
    assert (found["nodes"], found["gpus_per_node"]) == expected
    assert expected[0] or any("TrainJob" in n and "launcher.nodes" in n for n in found["notes"])


# a group size not known here: the fewest nodes the layout (TP 8 · PP 4) needs, said as the preset's own choice
@pytest.mark.parametrize(("size", "replicas", "expected"), [(4, 1, (4, 8)), (2, 3, (2, 8)), ("${N}", 1, (4, 8))])
def test_a_leaderworkerset_group_is_one_run_of_size_pods(size, replicas, expected):
    command = ["bash", "-c", "torchrun --nnodes $(LWS_GROUP_SIZE) --node_rank $(LWS_WORKER_INDEX) "
               + " ".join(torchrun("--nproc_per_node", "8")[1:])]
    job = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "gpt"},
           "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size, "workerTemplate": pod(command)}}}
    found = layout_of(job)
    assert (found["nodes"], found["gpus_per_node"]) == expected
    assert (replicas == 1) != any("LeaderWorkerSet replicas" in n for n in found["notes"])
    assert isinstance(size, int) != any(n.startswith("nodes 4: the script's node count is decided where it runs")
                                        for n in found["notes"])
