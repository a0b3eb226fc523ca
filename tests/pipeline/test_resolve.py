"""One resolved job: what the dry-run prints is what a real launch runs, for the target it runs on.

A real `launch` runs here with a recording stand-in for torchrun (it writes its argv and environment to a file
and exits), so the comparison is with the argv the launcher really executes, not with a rebuilt one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from launcher.checks.data import check_job_data
from launcher.errors import UserError
from launcher.megatron.pin import Kernels
from launcher.pipeline.kernels import is_ngc_image, kernels_for
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import HERE, Placement, resolve
from tests.conftest import REPO, without_run_stamp

NO_KERNELS = ["--set", "transformer_engine=false", "--set", "apex=false"]
NGC = "nvcr.io/nvidia/pytorch:25.01-py3"
EIGHT_GPUS = "0,1,2,3,4,5,6,7"  # a run here takes this machine's GPUs; the presets' default world is 1 × 8


def recording_torchrun(tmp_path: Path) -> Path:
    script = tmp_path / "bin" / "torchrun"
    script.parent.mkdir(exist_ok=True)
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, os, sys
        with open(os.environ["TORCHRUN_RECORD"], "w") as handle:
            json.dump({{"argv": ["torchrun", *sys.argv[1:]], "pythonpath": os.environ.get("PYTHONPATH", ""),
                       "cwd": os.getcwd()}}, handle)
        """))
    script.chmod(0o755)
    return script


def fake_megatron(tmp_path: Path) -> Path:
    megatron = tmp_path / "megatron-lm"
    megatron.mkdir(exist_ok=True)
    (megatron / "pretrain_gpt.py").touch()
    (megatron / "examples").mkdir(exist_ok=True)
    (megatron / "examples" / "run_simple_mcore_train_loop.py").touch()
    return megatron


def cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`launch …` as a user types it, in `tmp_path`, with the recording torchrun first on PATH."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": EIGHT_GPUS,
                "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
                "TORCHRUN_RECORD": str(tmp_path / "record.json"), **(env or {})}
    full_env.pop("MEGATRON_LM_PATH", None)
    return subprocess.run([sys.executable, "-m", "launcher", *args, "--megatron-path", str(fake_megatron(tmp_path))],
                          cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=120, check=False)


def dry_run_then_run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[dict, dict, Path]:
    """The dry-run's JSON, what the real launch executed, and the run directory it made."""
    recording_torchrun(tmp_path)
    dry = cli(tmp_path, *args, "--dry-run", "--format", "json", env=env)
    assert dry.returncode == 0, dry.stderr
    assert not (tmp_path / "runs").exists(), "a dry-run names the run directory but does not make it"
    real = cli(tmp_path, *args, "--no-doctor", env=env)
    assert (tmp_path / "record.json").exists(), real.stdout + real.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    return json.loads(dry.stdout), json.loads((tmp_path / "record.json").read_text()), run_dir


def test_a_real_launch_runs_the_argv_its_dry_run_printed(tmp_path):
    """Through torchrun (a one-GPU job starts without it by default: tests/backends/test_direct_run.py)."""
    planned, ran, run_dir = dry_run_then_run(tmp_path, "345m", *NO_KERNELS, "--set", "runner=torchrun")
    assert without_run_stamp(json.dumps(ran["argv"])) == without_run_stamp(json.dumps(planned["argv"]))
    assert f"--save {run_dir}/checkpoints" in " ".join(ran["argv"])  # the directory this launch made
    assert without_run_stamp(planned["run_dir"]) == without_run_stamp(str(run_dir))
    assert ran["pythonpath"].startswith(planned["env"]["PYTHONPATH"])
    assert planned["added"]["transformer_impl"] == "local"
    assert planned["added"]["save"] == f"{planned['run_dir']}/checkpoints"


def test_the_toy_on_two_gpus_runs_its_dry_run_inside_the_run_directory(tmp_path):
    """Upstream's simple loop takes no flags and checkpoints into $PWD/ckpt: the same argv, run in the run dir."""
    planned, ran, run_dir = dry_run_then_run(tmp_path, "toy")
    assert planned["entry"] == "simple_loop" and planned["script_args"] == []
    assert ran["argv"] == planned["argv"] and ran["cwd"] == str(run_dir)


def test_a_multi_node_launch_with_175b_settings_runs_its_dry_run(tmp_path):
    """175B: run-directory settings in the dry-run, and the same argv once MASTER_ADDR is filled in."""
    planned, ran, run_dir = dry_run_then_run(tmp_path, "175b", env={"MASTER_ADDR": "node-0"})
    argv = planned["argv"]
    for flag in ("--save", "--load", "--save-interval", "--tensorboard-dir"):
        assert flag in argv
    assert argv[argv.index("--tensorboard-dir") + 1] == f"{planned['run_dir']}/tensorboard"
    expected = [word.replace("${MASTER_ADDR}", "node-0") for word in argv]
    assert without_run_stamp(json.dumps(ran["argv"])) == without_run_stamp(json.dumps(expected))
    command_sh = (run_dir / "command.sh").read_text()
    assert '"${MASTER_ADDR}:29500"' in command_sh  # recorded for every node, not for this one


def test_command_sh_replays_on_every_node(tmp_path):
    recording_torchrun(tmp_path)
    result = cli(tmp_path, "345m", "--nodes", "2", "--gpus-per-node", "1", "--no-doctor", *NO_KERNELS,
                 env={"MASTER_ADDR": "node-0"})
    assert (tmp_path / "record.json").exists(), result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    (tmp_path / "record.json").unlink()
    bin_path = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    replay = subprocess.run(["bash", str(run_dir / "command.sh")], capture_output=True, text=True, check=False,
                            env={**os.environ, "MASTER_ADDR": "node-7", "PATH": bin_path,
                                 "TORCHRUN_RECORD": str(tmp_path / "record.json")})
    assert replay.returncode == 0, replay.stderr
    argv = json.loads((tmp_path / "record.json").read_text())["argv"]
    assert argv[argv.index("--rdzv-endpoint") + 1] == "node-7:29500"


def test_command_sh_keeps_a_user_address_literal(tmp_path):
    """Only the endpoint the launcher composes expands; a user's master_addr stays single-quoted."""
    recording_torchrun(tmp_path)
    result = cli(tmp_path, "345m", "--nodes", "2", "--gpus-per-node", "1", "--no-doctor", *NO_KERNELS,
                 "--set", "master_addr=node-7")
    assert (tmp_path / "record.json").exists(), result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    command_sh = (run_dir / "command.sh").read_text()
    assert "--rdzv-endpoint node-7:29500 " in command_sh and "MASTER_ADDR}" not in command_sh


@pytest.mark.parametrize("hostile", ["$(touch pwned)", "a;touch pwned", "node 7", "`id`"])
def test_a_master_addr_that_is_no_host_is_refused_before_anything_is_written(tmp_path, hostile):
    recording_torchrun(tmp_path)
    result = cli(tmp_path, "345m", "--nodes", "2", "--gpus-per-node", "1", "--no-doctor", *NO_KERNELS,
                 "--set", f"master_addr={hostile}")
    assert result.returncode == 2 and "must be a host name or IP address" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "record.json").exists() and not (tmp_path / "pwned").exists()
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


# -- kernels of the target -------------------------------------------------------------------------------------


@pytest.mark.parametrize("image", ["nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io#nvidia/nemo:24.07",
                                   "docker://nvcr.io/nvidia/pytorch:24.01-py3"])
def test_ngc_images_ship_te_and_apex(image):
    assert is_ngc_image(image)
    assert kernels_for("auto", "auto", slurm=True, container_image=image) == Kernels(True, True, "NGC image", "2.14.0")


def test_other_images_and_declared_kernels():
    assert not is_ngc_image("nvcr.io/nvidia/pytorch-lookalike:1") and not is_ngc_image("docker.io/me/train:1")
    assert kernels_for(True, False, slurm=True, container_image="docker.io/me/train:1") == Kernels(True, False,
                                                                                                 "preset", "2.14.0")
    assert kernels_for("auto", "auto", slurm=True).how == "login node"


def test_ngc_container_job_uses_te_and_apex_and_warns_about_mounts(launch):
    code, out, err = launch("345m", "--slurm", "--dry-run", "--nodes", "2", "--gpus-per-node", "8",
                            "--set", f"slurm.container_image={NGC}",
                            "--megatron-path", "/opt/megatron-lm")
    assert code == 0, err
    assert ("# kernels (NGC image): with Transformer Engine, with NVIDIA apex; each node checks what the settings "
            "need at job start\n") in out
    training = out[out.index("--kill-on-bad-exit=1"):]  # the node check's hints name such flags as fixes
    for flag in ("--transformer-impl", "--no-gradient-accumulation-fusion", "--spec"):
        assert flag not in training
    assert "# warning: /opt/megatron-lm (the Megatron-LM checkout) is not inside slurm.container_mounts" in out
    assert "warning: /opt/megatron-lm (the Megatron-LM checkout)" in err
    # the image decides, not the login node: the nodes check what the settings need inside the container
    assert f'--ntasks-per-node=1 --container-image={NGC} python3 -c "$node_check"' in out


def test_mounted_paths_are_not_warned_about(launch, tmp_path):
    mounts = f"[/opt/megatron-lm:/opt/megatron-lm, {tmp_path}:{tmp_path}]"
    code, out, err = launch("345m", "--slurm", "--dry-run", "--set", f"slurm.container_image={NGC}",
                            "--set", f"slurm.container_mounts={mounts}", "--set", f"run_root={tmp_path}/runs",
                            "--megatron-path", "/opt/megatron-lm")
    assert code == 0, err
    assert "container_mounts" not in out
    # /opt/megatron-lm is the nodes' (mounted from there); only its absence on this machine is said
    assert [line for line in err.splitlines() if line.startswith("warning")] == [
        "warning: /opt/megatron-lm/pretrain_gpt.py does not exist here: the command needs a Megatron-LM checkout of "
        "432d76b2b8bf there; run `launch fetch-megatron` (the pinned commit into your data directory, remembered), "
        "or give --megatron-path DIR"]


def test_other_image_with_auto_kernels_is_refused(launch):
    code, out, err = launch("345m", "--slurm", "--dry-run", "--set", "slurm.container_image=docker.io/me/train:1")
    assert code == 2 and "Traceback" not in err
    assert "error: cannot tell whether container image docker.io/me/train:1 has transformer_engine and apex" in err
    assert "hint: declare what the image ships: --set transformer_engine=true|false --set apex=true|false" in err
    code, out, err = launch("345m", "--slurm", "--dry-run", "--set", "slurm.container_image=docker.io/me/train:1",
                            "--set", "transformer_engine=true", "--set", "apex=false")
    assert code == 0, err
    assert "# kernels (preset): with Transformer Engine, without NVIDIA apex" in out


def _fake_slurm(tmp_path: Path) -> dict[str, str]:
    """srun that runs its command here (options dropped) and scontrol that names one node: the batch script's
    own start-up logic runs for real."""
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "srun").write_text('#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nexec "$@"\n')
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho node-0\n")
    (bin_dir / "torchrun").write_text("#!/bin/bash\necho TRAINING STARTED\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    python_dir = Path(sys.executable).parent  # python3 without transformer_engine or apex
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{python_dir}{os.pathsep}{os.environ['PATH']}",
            "SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "node-0", "SLURM_NNODES": "1"}


def test_bare_metal_job_checks_the_node_has_the_kernels_its_flags_assume(launch, tmp_path):
    code, out, err = launch("345m", "--slurm", "--dry-run", "--set", "transformer_engine=true", "--set", "apex=true",
                            "--set", f"run_root={tmp_path}/runs")
    assert code == 0, err
    assert ("# kernels (preset): with Transformer Engine, with NVIDIA apex; each node checks what the settings need "
            "at job start") in out
    script = tmp_path / "job.sbatch"
    script.write_text(out)
    job = subprocess.run(["bash", str(script)], env=_fake_slurm(tmp_path), cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, check=False)
    assert job.returncode == 2, job.stdout + job.stderr
    assert "TRAINING STARTED" not in job.stdout
    # the launcher's own message (the one `launch` gives locally before a run), not a stack trace at model build
    assert (f"error: transformer_impl transformer_engine (Megatron's default) needs Transformer Engine, which is not "
            f"installed on {socket.gethostname()} (megatron/core/models/gpt/gpt_layer_specs.py:") in job.stderr
    assert "megatron-launch: attempt 1 ended: not started, a node lacks what the settings need" in job.stdout


def test_bare_metal_auto_kernels_say_they_come_from_the_login_node(launch):
    code, out, err = launch("345m", "--slurm", "--dry-run")
    assert code == 0, err
    assert "# kernels (login node): " in out


# -- data checks where the files are ---------------------------------------------------------------------------

CLUSTER_DATA = ["--set", "mock_data=false", "--set", "data_path=/cluster/data/web_text_document"]


def test_cluster_data_is_a_warning_for_slurm_and_checked_at_job_start(launch, tmp_path):
    code, out, err = launch("345m", "--slurm", "--dry-run", *CLUSTER_DATA, "--set", f"run_root={tmp_path}/runs")
    assert code == 0, err
    files = "/cluster/data/web_text_document.bin, /cluster/data/web_text_document.idx"
    assert f"warning: this machine cannot see the data files {files}" in err
    script = tmp_path / "job.sbatch"
    script.write_text(out)
    job = subprocess.run(["bash", str(script)], env=_fake_slurm(tmp_path), cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, check=False)
    assert job.returncode == 2 and "TRAINING STARTED" not in job.stdout
    # the launcher's own data check, with the message it gives before a run here
    assert "error: data_path: dataset /cluster/data/web_text_document has no /cluster/data/web_text_document.bin" \
        in job.stderr
    # a node that cannot import the launcher still checks that the files are there
    script.write_text(out.replace(" -m launcher.checks.data", " -m not_installed_here.checks.data"))
    job = subprocess.run(["bash", str(script)], env=_fake_slurm(tmp_path), cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, check=False)
    assert job.returncode == 2 and "TRAINING STARTED" not in job.stdout
    assert "error: data file /cluster/data/web_text_document.bin is not readable on" in job.stderr


class _Recording(dict):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)


@pytest.mark.parametrize("settings", [
    {"mock_data": True, "tokenizer_type": "NullTokenizer", "vocab_size": 8},
    {"data_path": ["1 /x/a 1 /x/b"], "split": "98,2,0", "tokenizer_type": "GPT2BPETokenizer", "vocab_file": "/v",
     "merge_file": "/m", "eod_mask_loss": True},
    {"train_data_path": ["/x/a"], "valid_data_path": ["/x/b"], "tokenizer_type": "HuggingFaceTokenizer",
     "tokenizer_model": "/t"},
    {"data_args_path": "/x/list", "per_split_data_args_path": "/x/json", "tokenizer_type": "SentencePieceTokenizer"},
])
def test_the_node_gets_every_setting_the_data_check_reads(settings):
    from launcher.checks.data import DATA_SETTINGS, check_data

    recording = _Recording(settings)
    check_data(recording)
    assert recording.read <= set(DATA_SETTINGS)


def test_missing_data_is_still_refused_before_a_run_here(launch):
    code, out, err = launch("345m", "--dry-run", *CLUSTER_DATA)
    assert code == 2 and "Traceback" not in err
    assert "error: data_path: dataset /cluster/data/web_text_document has no" in err


def test_a_slurm_job_whose_data_is_visible_here_is_fully_checked(tmp_path):
    """Visible files get every check here: a broken pair is an error, not a warning."""
    prefix = tmp_path / "corpus"
    (tmp_path / "corpus.bin").write_bytes(b"")
    (tmp_path / "corpus.idx").write_bytes(b"not an index")
    preset = load_preset("345m", ["mock_data=false", f"data_path={prefix}"])
    with pytest.raises(UserError, match="not a Megatron indexed-dataset index"):
        resolve(preset, 1, 8, target=Placement(slurm=True), run_dir=tmp_path / "run", data_check=check_job_data)


# -- everything decided before the checks ----------------------------------------------------------------------


def test_every_setting_is_decided_before_the_checks(tmp_path):
    preset = load_preset("345m")
    here = resolve(preset, 1, 8, target=HERE, run_dir=tmp_path / "run")
    assert here.megatron["transformer_impl"] == "local"  # no TE: the fallback is part of the job
    assert here.megatron["save"] == str(tmp_path / "run" / "checkpoints")
    assert "exit_signal_handler" not in here.megatron
    slurm = resolve(preset, 1, 8, target=Placement(slurm=True), run_dir=tmp_path / "run")
    assert slurm.megatron["exit_signal_handler"] is True
    preflight = resolve(preset, 1, 8, preflight=True)
    assert preflight.entry == "allreduce" and preflight.run_dir is None
    toy = resolve(load_preset("toy"), 1, 1, run_dir=tmp_path / "toy")
    assert toy.entry == "pretrain_gpt" and toy.megatron["tensor_model_parallel_size"] == 1


def test_launch_plan_estimates_the_job_the_dry_run_prints(launch):
    """Both read the settings resolve decides (micro batch for the world, settings for a missing TE/apex)."""
    code, out, err = launch("345m", "--gpus-per-node", "2", "--dry-run", "--format", "json", *NO_KERNELS)
    assert code == 0, err
    printed = json.loads(out)["estimate"]
    code, out, err = launch("plan", "345m", "--gpus", "2", *NO_KERNELS, "--format", "json")
    assert code == 0, err
    planned = json.loads(out)
    assert planned["layout"]["micro_batch_size"] == 16
    gib = 2 ** 30
    assert round(planned["memory"]["megatron"]["total"] / gib, 2) == printed["megatron_memory_per_gpu_gib"]
    assert round(planned["memory"]["complete"]["total"] / gib, 2) == printed["memory_per_gpu_gib"]
