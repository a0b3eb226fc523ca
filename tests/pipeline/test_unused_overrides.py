"""A launcher setting given with --set that the job does not use is said, with what decides instead: never a
quiet drop. Settings the job uses are not said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import HERE, Placement, resolve, target_for


def _said(preset: str, overrides: list[str], nodes: int | None = 1, gpus: int | None = 1,
          target: Placement = HERE) -> list[str]:
    loaded = load_preset(preset, overrides)
    if target.slurm:  # its settings parsed from the preset, as a launch does
        target = target_for(loaded, slurm=True)
    job = resolve(loaded, nodes, gpus, target=target)
    return [w for w in job.warnings if w.startswith("--set ")]


K8S = Placement(kubernetes=True)


@pytest.mark.parametrize(("overrides", "nodes", "target", "decides"), [
    (["master_addr=node001"], 1, HERE, "rendezvouses on this machine (torchrun --standalone)"),
    (["master_port=1234"], 1, HERE, "binds a free port"),
    (["master_addr=node001"], 2, Placement(slurm=True), "the first node of its allocation"),
    (["slurm.rdzv_port=2000", "master_port=1234"], 2, Placement(slurm=True), "slurm.rdzv_port=2000 decides"),
    (["master_port=1234"], 1, K8S, "rendezvouses inside its pod"),
    (["micro_batch_size=4", "max_micro_batch_size=2"], 1, HERE, "micro_batch_size=4 is set"),
    (["nodes=4"], 2, HERE, "--nodes decides the node count (2)"),
    (["runner=torchrun"], 1, K8S, "a cluster job always starts one torchrun per node"),
], ids=["addr-one-node", "port-one-process", "addr-slurm", "port-slurm-rdzv", "port-one-pod", "max-micro-batch",
        "nodes", "runner-k8s"])
def test_a_launcher_setting_the_job_does_not_use_is_said(overrides, nodes, target, decides) -> None:
    (warning,) = _said("345m", overrides, nodes, 1, target)
    name = overrides[-1].split("=")[0]
    assert warning.startswith(f"--set {name} does nothing for this job: ") and decides in warning, warning


def test_a_slurm_restart_setting_on_a_preflight_job_is_said() -> None:
    preset = load_preset("345m", ["slurm.chain=3", "slurm.max_restarts=5"])
    job = resolve(preset, 2, 1, target=target_for(preset, slurm=True), preflight=True)
    said = [w for w in job.warnings if w.startswith("--set ")]
    assert [w.split(" does nothing")[0] for w in said] == ["--set slurm.chain", "--set slurm.max_restarts"]
    assert all("a preflight job runs once" in w for w in said)


def test_kernel_settings_on_upstreams_simple_loop_are_said() -> None:
    said = _said("toy", ["transformer_engine=true", "launcher.apex=false"], 1, 2)
    assert [w.split(" does nothing")[0] for w in said] == ["--set transformer_engine", "--set apex"]
    assert all("simple loop builds its own layers" in w for w in said)


@pytest.mark.parametrize(("overrides", "nodes", "target"), [
    (["master_addr=node001", "master_port=1234"], 2, HERE),  # several nodes here: torchrun's rendezvous
    (["master_port=1234"], 2, Placement(slurm=True)),  # the Slurm script's port
    (["master_port=1234"], 2, K8S),
    (["max_micro_batch_size=2"], 1, HERE),  # the preset leaves the micro batch open
    (["nodes=2", "gpus_per_node=1"], None, HERE),
    (["nodes=1"], 1, HERE),  # --nodes 1 and --set nodes=1 agree
    (["lr=3e-4", "env.NCCL_DEBUG=INFO", "run_root=/tmp/runs"], 1, HERE),
], ids=["rendezvous-here", "port-slurm", "port-k8s", "max-micro-batch", "world", "world-agrees", "others"])
def test_settings_the_job_uses_are_not_said(overrides, nodes, target) -> None:
    assert _said("345m", overrides, nodes, None if nodes is None else 1, target) == []


def test_run_root_on_a_resumed_run_is_said(launch, tmp_path: Path) -> None:
    code, out, err = launch("345m", "--slurm", "--set", f"run_root={tmp_path}", "--megatron-path", str(tmp_path))
    assert code == 0, err
    run_dir = Path(out.strip()).parent
    code, out, err = launch("--resume", str(run_dir), "--slurm", "--megatron-path", str(tmp_path),
                            "--set", f"run_root={tmp_path / 'elsewhere'}")
    assert code == 0, err
    assert ("warning: --set run_root does nothing for this job: a resumed run stays in its own run directory"
            in err), err
    assert Path(out.strip()).parent == run_dir


@pytest.mark.parametrize(("parse", "raw", "said"), [
    ("slurm", {"container_mounts": ["/lustre:/data"]}, "slurm.container_mounts does nothing without "
                                                        "slurm.container_image"),
    ("slurm", {"requeue": False, "max_restarts": 5}, "slurm.max_restarts=5 does nothing with slurm.requeue=false"),
    ("k8s", {"rdma_count": 4}, "k8s.rdma_count=4 does nothing without k8s.rdma_resource"),
])
def test_a_cluster_setting_that_another_one_makes_idle_is_refused(parse, raw, said) -> None:
    from launcher.errors import UserError
    from launcher.pipeline.k8s_settings import parse_k8s_settings
    from launcher.pipeline.slurm_settings import parse_slurm_settings

    with pytest.raises(UserError) as info:
        (parse_slurm_settings if parse == "slurm" else parse_k8s_settings)(raw)
    assert [p.message for p in info.value.problems if said in p.message], info.value.problems


@pytest.mark.parametrize(("parse", "raw"), [
    ("slurm", {"container_image": "nvcr.io#nvidia/pytorch:24.01-py3", "container_mounts": ["/lustre:/data"]}),
    ("slurm", {"requeue": False}),
    ("slurm", {"requeue": False, "max_restarts": 0}),
    ("k8s", {"rdma_resource": "rdma/ib", "rdma_count": 4}),
])
def test_cluster_settings_that_act_are_accepted(parse, raw) -> None:
    from launcher.pipeline.k8s_settings import parse_k8s_settings
    from launcher.pipeline.slurm_settings import parse_slurm_settings

    (parse_slurm_settings if parse == "slurm" else parse_k8s_settings)(raw)


@pytest.mark.parametrize("gpus", [1, 2], ids=["one-process", "torchrun"])
def test_environment_variables_torchrun_sets_for_each_rank_are_said(gpus) -> None:
    overrides = ["env.RANK=3", "env.WORLD_SIZE=8", "env.NCCL_DEBUG=INFO", "env.MASTER_ADDR=node0"]
    if gpus == 2:
        overrides.append("tensor_model_parallel_size=2")
    job = resolve(load_preset("345m", overrides), 1, gpus)
    (warning,) = [w for w in job.warnings if "never reach" in w]
    assert warning.startswith("env.RANK, env.WORLD_SIZE never reach a rank: torchrun sets them for each rank")
    assert "NCCL_DEBUG" not in warning and "MASTER_ADDR" not in warning


def test_an_imported_script_that_exports_rank_variables_is_told_they_are_not_carried(launch, tmp_path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("export WORLD_SIZE=8\nexport NCCL_DEBUG=INFO\ntorchrun --nproc-per-node 8 pretrain_gpt.py "
                      "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
                      "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --train-iters 10 "
                      "--lr 1e-4 --mock-data --tokenizer-type NullTokenizer --vocab-size 100 --eval-interval 5 "
                      "--eval-iters 1\n")
    code, _, err = launch("import", str(script))
    assert code == 0, err
    # the import leaves torchrun's per-rank variables out and says so (a preset given one is warned, above)
    assert "export WORLD_SIZE=8: torchrun sets it for each rank it starts" in err and "not carried" in err, err
    assert "env.WORLD_SIZE" not in err and "NCCL_DEBUG" in err, err


def test_the_other_clusters_time_limit_and_image_are_said_on_this_one(tmp_path: Path) -> None:
    preset_file = tmp_path / "mine.yaml"
    preset_file.write_text('base: 345m\nlauncher:\n  slurm:\n    time: "04:00:00"\n    container_image: '
                           'nvcr.io/nvidia/pytorch:25.01-py3\n  k8s:\n    max_restarts: 5\n')
    preset = load_preset(str(preset_file))
    on_k8s = resolve(preset, 1, 1, target=target_for(preset, slurm=False, kubernetes=True)).warnings
    assert [w.split(" (")[0] for w in on_k8s if "is the Slurm job's" in w] == [
        "slurm.time=04:00:00", "slurm.container_image=nvcr.io/nvidia/pytorch:25.01-py3"]
    assert any("takes k8s.time, which is not set" in w and "--set k8s.time=" in w for w in on_k8s)
    on_slurm = resolve(preset, 1, 1, target=target_for(preset, slurm=True)).warnings
    assert [w.split(" (")[0] for w in on_slurm if "is the Kubernetes job's" in w] == ["k8s.max_restarts=5"]
    here = resolve(preset, 1, 1).warnings
    assert not any("job's; this one runs on" in w for w in here)


def test_a_counterpart_set_on_both_clusters_is_not_said(tmp_path: Path) -> None:
    preset_file = tmp_path / "mine.yaml"
    preset_file.write_text('base: 345m\nlauncher:\n  slurm:\n    time: "04:00:00"\n  k8s:\n    time: "02:00:00"\n')
    preset = load_preset(str(preset_file))
    warnings = resolve(preset, 1, 1, target=target_for(preset, slurm=False, kubernetes=True)).warnings
    assert not any("job's; this one runs on" in w for w in warnings)


def test_a_resume_that_does_not_give_the_last_attempts_set_again_says_so(launch, tmp_path: Path) -> None:
    code, out, err = launch("345m", "--slurm", "--set", f"run_root={tmp_path}", "--megatron-path", str(tmp_path))
    assert code == 0, err
    run_dir = Path(out.strip()).parent
    resume = ("--resume", str(run_dir), "--slurm", "--megatron-path", str(tmp_path))
    code, out, err = launch(*resume, "--set", "lr=1e-5", "--set", "env.WANDB_API_KEY=abcd1234secret")
    assert code == 0 and "the last attempt ran with" not in err, err
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["attempts"][-1]["overrides"] == ["lr=1e-5", "env.WANDB_API_KEY=<redacted>"]
    code, out, err = launch(*resume, "--set", "lr=1e-5")  # the attempt's lr given again: only the key is said
    assert code == 0, err
    assert ("warning: the last attempt ran with --set 'env.WANDB_API_KEY=<redacted>', which this resume does not "
            "give: the run's preset.yaml decides it again") in err, err
    code, out, err = launch(*resume)
    assert code == 0, err
    assert "warning: the last attempt ran with --set lr=1e-5, which this resume does not give" in err, err
    code, out, err = launch(*resume)  # the last attempt gave none
    assert code == 0 and "the last attempt ran with" not in err, err


def test_a_manifests_recorded_overrides_of_any_shape_are_read_as_strings_only() -> None:
    from launcher.pipeline.unused_overrides import overrides_not_given_again
    for attempts in (None, 7, [], [None], [{"overrides": "lr=1"}], [{"overrides": [1, None, {"a": 1}, "no-sign"]}]):
        assert overrides_not_given_again({"attempts": attempts}, ()) == []
    said = overrides_not_given_again({"attempts": [{"overrides": ["lr=1"] * 5 + ["x=\x1b[31m"]}]}, ("lr=2",))
    assert len(said) == 1 and "\x1b" not in said[0] and "lr=1" not in said[0]


def test_a_manifests_recorded_override_of_a_secret_is_said_without_its_value() -> None:
    from launcher.pipeline.unused_overrides import overrides_not_given_again
    recorded = ["env.DB_PASSWORD=s3cr3t-Pw9", "launcher.env.WANDB_API_KEY=abc123def456", "--set=env.MY_TOKEN=tkn-77x"]
    (said,) = overrides_not_given_again({"attempts": [{"overrides": recorded}]}, ())
    assert not any(value in said for value in ("s3cr3t-Pw9", "abc123def456", "tkn-77x")), said
    assert "--set 'env.DB_PASSWORD=<redacted>'" in said and "WANDB_API_KEY" in said and "MY_TOKEN" in said
