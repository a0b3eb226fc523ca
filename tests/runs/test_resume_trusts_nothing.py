"""`launch --resume RUN_DIR` treats the directory as data: no program, environment, write target or hang comes
from it; it says what it takes from it; one resume at a time; --set save/tensorboard_dir are honoured."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from launcher.errors import shown
from tests.runs.test_launch_run_dir import launch, only_run_dir, stand_in


@pytest.fixture
def first_run(tmp_path: Path) -> tuple[Path, Path]:
    """A run directory whose first attempt (a replaying torchrun stand-in) saved at iteration 50; and the stand-in."""
    torchrun = stand_in(tmp_path, "toy_truncated.log", exit_code=1, tracker="50")
    assert launch(tmp_path, "toy", "--set", f"torchrun={torchrun}").returncode == 1
    return only_run_dir(tmp_path), torchrun


def _edit_preset(run_dir: Path, change) -> None:
    path = run_dir / "preset.yaml"
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))


def _evil_program(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "evil-ran"
    evil = tmp_path / "evil"
    evil.write_text(f"#!/bin/sh\ntouch {marker}\n")
    evil.chmod(0o755)
    return evil, marker


def resume(tmp_path: Path, run_dir: Path, torchrun: Path, *args: str):
    """launch --resume RUN_DIR, naming the program again (a run directory never chooses it)."""
    return launch(tmp_path, "--resume", str(run_dir), "--set", f"torchrun={torchrun}", *args)


def test_a_torchrun_planted_in_the_run_preset_is_refused_and_never_runs(first_run, tmp_path):
    run_dir, torchrun = first_run
    evil, marker = _evil_program(tmp_path)
    _edit_preset(run_dir, lambda d: d["launcher"].update(torchrun=str(evil)))
    result = launch(tmp_path, "--resume", str(run_dir))
    assert result.returncode == 2
    assert result.stderr.splitlines()[:2] == [
        f"error: {run_dir}/preset.yaml sets torchrun='{evil}': a resumed run does not take a program, or what is "
        "loaded into it, from the run directory",
        "  hint: give it on the command line if you mean it: --set torchrun=…"]
    assert not marker.exists()


def _agreeing_manifest(run_dir: Path, torchrun: str, env: dict) -> None:
    """The manifest edited to agree with the planted preset: it is in the same directory, so it proves nothing."""
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    argv = manifest["attempts"][0]["argv"]
    argv[argv.index("--nnodes") - 1] = torchrun
    manifest["attempts"][0]["env"].update(env)
    path.write_text(json.dumps(manifest))


def test_a_torchrun_the_manifest_agrees_with_is_still_refused(first_run, tmp_path):
    run_dir, torchrun = first_run
    evil, marker = _evil_program(tmp_path)
    _edit_preset(run_dir, lambda d: d["launcher"].update(torchrun=str(evil)))
    _agreeing_manifest(run_dir, str(evil), {})
    result = launch(tmp_path, "--resume", str(run_dir))
    assert result.returncode == 2 and f"preset.yaml sets torchrun='{evil}'" in result.stderr
    assert not marker.exists()


@pytest.mark.parametrize("name, value", [
    ("LD_PRELOAD", "/tmp/evil.so"), ("BASH_ENV", "/tmp/evil.sh"), ("PYTHONPATH", "/tmp/evil"),
    ("PYTHONSTARTUP", "/tmp/evil.py"), ("LD_LIBRARY_PATH", "/tmp/evil"), ("PATH", "/tmp/evil:/usr/bin"),
    ("NCCL_NET_PLUGIN", "/tmp/evil.so"), ("ENV", "/tmp/evil.sh"), ("NODE_OPTIONS", "--require /tmp/evil.js"),
    # where torch.compile's cache of compiled kernels is loaded from (TMPDIR/torchinductor_$USER), a file of NCCL
    # settings (NCCL_NET_PLUGIN among them), the compiler a JIT build runs
    ("TMPDIR", "/tmp/evil"), ("USER", "other"), ("NCCL_CONF_FILE", "/tmp/evil.conf"),
    ("NVCC_PREPEND_FLAGS", "-ccbin /tmp/evil"),
    # torch.load then unpickles a checkpoint in full (a pickle runs code); Hugging Face's remote-code modules
    ("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1"), ("HF_MODULES_CACHE", "/tmp/evil"),
])
def test_a_loader_variable_planted_in_the_run_preset_is_refused(first_run, tmp_path, name, value):
    run_dir, torchrun = first_run
    _edit_preset(run_dir, lambda d: d["launcher"].setdefault("env", {}).update({name: value}))
    _agreeing_manifest(run_dir, str(torchrun), {name: value})
    result = resume(tmp_path, run_dir, torchrun)
    assert result.returncode == 2
    assert f"error: {run_dir}/preset.yaml sets env.{name}='{value}': a resumed run does not take" in result.stderr
    assert f"  hint: give it on the command line if you mean it: --set env.{name}=…" in result.stderr
    given = resume(tmp_path, run_dir, torchrun, "--set", f"env.{name}={value}")
    assert "a resumed run does not take" not in given.stderr


@pytest.mark.parametrize("backend", ["--slurm", "--k8s"])
@pytest.mark.parametrize("name, planted", [
    ("torchrun", lambda d, evil: d["launcher"].update(torchrun=evil)),
    ("env.LD_PRELOAD", lambda d, evil: d["launcher"].setdefault("env", {}).update(LD_PRELOAD=evil)),
    ("megatron_path", lambda d, evil: d["launcher"].update(megatron_path=evil)),
    ("spec", lambda d, evil: d["megatron"].update(spec=["evil_module", "layer_spec"])),
    # Hugging Face's AutoTokenizer then imports the tokenizer directory's own Python
    ("trust_remote_code", lambda d, evil: d["megatron"].update(trust_remote_code=True, tokenizer_model=evil)),
    ("k8s.image", lambda d, evil: d["launcher"].setdefault("k8s", {}).update(image="evil.example/x:1")),
    # a Python import path Megatron imports and calls (the custom FP8 recipe's quantizer factory)
    ("fp8_quantizer_factory", lambda d, evil: d["megatron"].update(fp8_quantizer_factory="evil_module.factory")),
    # the claim mounted at the run root in the pods (checkpoints loaded, code where megatron_path is on it), the
    # Secret whose keys become the job's environment (someone else's credentials), the namespace naming both
    ("k8s.pvc", lambda d, evil: d["launcher"].setdefault("k8s", {}).update(pvc="other-team-runs")),
    ("k8s.secret", lambda d, evil: d["launcher"].setdefault("k8s", {}).update(secret="other-team-keys")),
    ("k8s.namespace", lambda d, evil: d["launcher"].setdefault("k8s", {}).update(namespace="other-team")),
    ("slurm.container_image", lambda d, evil: d["launcher"].setdefault("slurm", {}).update(
        container_image="evil.example/x:1")),
    # #SBATCH options that choose what runs: a loader variable exported to the job, the batch script's working
    # directory (its `python3 -m` imports from there first), a container
    ("slurm.extra_sbatch", lambda d, evil: d["launcher"].setdefault("slurm", {}).update(
        extra_sbatch=["--mail-type=END", f"--export=ALL,LD_PRELOAD={evil}"])),
    ("slurm.extra_sbatch", lambda d, evil: d["launcher"].setdefault("slurm", {}).update(
        extra_sbatch=f"--chdir={Path(evil).parent}")),
    ("slurm.extra_sbatch", lambda d, evil: d["launcher"].setdefault("slurm", {}).update(
        extra_sbatch=["--container-image=evil.example/x:1"])),
])
def test_a_program_planted_in_a_cluster_run_is_refused(tmp_path, backend, name, planted):
    """A run made for Slurm or Kubernetes records no torchrun argv to compare with: the rule holds anyway."""
    made = launch(tmp_path, "toy", backend, "--set", f"run_root={tmp_path}/runs", "--gpus-per-node", "2")
    assert made.returncode == 0, made.stderr
    run_dir = only_run_dir(tmp_path)
    evil, marker = _evil_program(tmp_path)
    _edit_preset(run_dir, lambda d: planted(d, str(evil)))
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "--resume", str(run_dir), backend], cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}, capture_output=True,
        text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"preset.yaml sets {name}=" in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists()


def test_a_setting_given_again_on_the_command_line_is_taken(first_run, tmp_path):
    run_dir, torchrun = first_run
    other = stand_in(tmp_path, "toy_resume_sigterm.log", tracker="83")
    _edit_preset(run_dir, lambda d: d["launcher"].update(torchrun="/nowhere/torchrun"))
    result = launch(tmp_path, "--resume", str(run_dir), "--set", f"torchrun={other}")
    assert result.returncode == 0, result.stderr


def test_resume_honours_set_save_and_tensorboard_dir_and_says_where_it_writes(first_run, tmp_path):
    run_dir, torchrun = first_run
    save, board = tmp_path / "elsewhere" / "ckpt", tmp_path / "elsewhere" / "tb"
    result = resume(tmp_path, run_dir, torchrun, "--set", f"save={save}", "--set", f"tensorboard_dir={board}")
    assert result.returncode in (0, 1), result.stderr
    argv_line = next(line for line in result.stdout.splitlines() if line.startswith("argv:"))
    assert f"--save {save}" in argv_line and f"--tensorboard-dir {board}" in argv_line
    assert f"--load {run_dir / 'checkpoints'}" in argv_line  # it continues from the run's own checkpoints
    assert (f"# note: resuming {run_dir}: its preset.yaml gives the settings, its manifest the checkpoint "
            f"directory (load {run_dir / 'checkpoints'}, save {save}); outside the run directory: save {save}, "
            f"tensorboard_dir {board}") in result.stdout


@pytest.mark.parametrize("elsewhere", ["other-ckpt", "run/../../other-ckpt"])
def test_a_checkpoint_dir_moved_in_the_manifest_is_loaded_only_when_given_again(first_run, tmp_path, elsewhere):
    """torch_dist's .metadata is read by pickle.load: a checkpoint elsewhere is code chosen by the run directory."""
    run_dir, torchrun = first_run
    other = str(run_dir / elsewhere) if elsewhere.startswith("run/") else str(tmp_path / elsewhere)
    other = other.replace(f"{run_dir}/run/", f"{run_dir}/")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["checkpoint_dir"] = other
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    refused = resume(tmp_path, run_dir, torchrun)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"error: {run_dir}/manifest.json names the checkpoint load={shown(other)}, outside the run directory: " \
        "Megatron unpickles a checkpoint's metadata" in refused.stderr
    assert "  hint: give it on the command line if you mean to load it: --set load=…" in refused.stderr
    given = resume(tmp_path, run_dir, torchrun, "--set", f"load={other}", "--set", f"save={other}")
    assert "outside the run directory: Megatron" not in given.stderr
    assert f"outside the run directory: load {other}, save {other}" in given.stdout


def test_a_pretrained_checkpoint_outside_the_run_is_loaded_only_when_given_again(first_run, tmp_path):
    run_dir, torchrun = first_run
    other = tmp_path / "someone-elses-ckpt"
    _edit_preset(run_dir, lambda d: d["megatron"].update(pretrained_checkpoint=str(other)))
    refused = resume(tmp_path, run_dir, torchrun)
    assert refused.returncode == 2
    assert f"preset.yaml names the checkpoint pretrained_checkpoint={shown(str(other))}, outside" in refused.stderr
    inside = run_dir / "checkpoints"
    _edit_preset(run_dir, lambda d: d["megatron"].update(pretrained_checkpoint=str(inside)))
    assert "names the checkpoint" not in resume(tmp_path, run_dir, torchrun).stderr


def test_a_second_resume_of_one_run_is_refused_while_the_first_holds_it(first_run, tmp_path):
    run_dir, torchrun = first_run
    fd = os.open(run_dir / ".launch.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"4242\n")
        result = resume(tmp_path, run_dir, torchrun)
    finally:
        os.close(fd)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (f"error: run directory {run_dir} is in use by process 4242 "
                                             f"(lock {run_dir}/.launch.lock)")
    assert len(json.loads((run_dir / "manifest.json").read_text())["attempts"]) == 1


@pytest.mark.parametrize("left", [b"", b"4242\n"], ids=["empty", "stale pid"])
def test_a_lock_file_left_by_a_crashed_launch_does_not_block_the_next_resume(first_run, tmp_path, left):
    run_dir, torchrun = first_run
    (run_dir / ".launch.lock").write_bytes(left)  # no process holds it: the launch that wrote it is gone
    result = resume(tmp_path, run_dir, torchrun)
    assert result.returncode == 1 and "error:" not in result.stderr  # the stand-in's attempt ran, and failed
    assert len(json.loads((run_dir / "manifest.json").read_text())["attempts"]) == 2
    said = ("of process 4242, which ended without removing it" if left else
            "left empty (by a process stopped while making it)")
    assert f"note: the lock file {shown(str(run_dir / '.launch.lock'))} {said} was taken over" in result.stderr
    # this launch removed its own lock as it ended: one found later was left by a launch that was killed
    assert not (run_dir / ".launch.lock").exists()
    assert not [name for name in os.listdir(run_dir) if name.endswith(".tmp")]


def test_every_attempt_is_recorded(first_run, tmp_path):
    run_dir, torchrun = first_run
    for _ in range(2):
        resume(tmp_path, run_dir, torchrun)
    assert len(json.loads((run_dir / "manifest.json").read_text())["attempts"]) == 3


def test_a_dangling_attempt_log_link_is_never_written_through(first_run, tmp_path):
    run_dir, torchrun = first_run
    outside = tmp_path / "outside.txt"
    (run_dir / "logs" / "attempt-2.log").symlink_to(outside)
    result = resume(tmp_path, run_dir, torchrun)
    assert result.returncode == 2
    assert f"error: earlier attempt log '{run_dir}/logs/attempt-2.log' is a symbolic link" in result.stderr
    assert not outside.exists()


def test_a_symlinked_metrics_file_is_refused(first_run, tmp_path):
    run_dir, torchrun = first_run
    outside = tmp_path / "outside.jsonl"
    outside.write_text("mine\n")
    (run_dir / "metrics.jsonl").unlink()
    (run_dir / "metrics.jsonl").symlink_to(outside)
    result = resume(tmp_path, run_dir, torchrun)
    assert result.returncode == 2
    assert f"error: metrics file '{run_dir}/metrics.jsonl' is a symbolic link" in result.stderr
    assert outside.read_text() == "mine\n"


@pytest.mark.parametrize("where", ["checkpoints/latest_checkpointed_iteration.txt", "logs/attempt-1.log"])
def test_a_fifo_in_the_run_directory_does_not_hang_a_resume(first_run, tmp_path, where):
    run_dir, torchrun = first_run
    (run_dir / where).unlink()
    os.mkfifo(run_dir / where)
    quiet = stand_in(tmp_path, "toy_resume_sigterm.log", tracker=None)  # it writes no tracker itself
    result = launch(tmp_path, "--resume", str(run_dir), "--set", f"torchrun={quiet}")  # times out after 120 s
    if where.endswith(".log"):  # an earlier attempt's log: refused before training
        assert result.returncode == 2
        assert "not a regular file" in result.stderr
    else:  # the tracker, read at the end: no tracker, as Megatron's os.path.isfile sees it; the run's record stays
        summary = json.loads((run_dir / "summary.json").read_text())
        assert result.returncode == 1 and summary["outcome"] == "failed" and summary["tracker_iteration"] is None
        assert any("latest_checkpointed_iteration.txt does not exist" in r for r in summary["reasons"])


def test_a_resumed_attempt_that_printed_nothing_is_not_a_success(first_run, tmp_path):
    run_dir, torchrun = first_run
    silent = tmp_path / "silent"
    silent.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        """))
    silent.chmod(0o755)
    result = launch(tmp_path, "--resume", str(run_dir), "--set", f"torchrun={silent}")
    assert result.returncode == 1, result.stdout
    assert json.loads((run_dir / "summary.json").read_text())["outcome"] != "success"


def test_a_fifo_as_the_lock_is_refused_not_waited_on(first_run, tmp_path):
    run_dir, torchrun = first_run
    os.mkfifo(run_dir / ".launch.lock")
    result = resume(tmp_path, run_dir, torchrun)
    assert result.returncode == 2 and "not a regular file" in result.stderr and "hint:" in result.stderr


PLANTED_SECRETS = {"WANDB_API_KEY": "wandbsecretvalue0123456789abcdef", "DB_URL": "postgres://u:S3cretDbPassw0rd@db/x",
                   "HF_TOKEN": "plainlookingvalue42"}


def _plant_secrets_in_manifest(run_dir: Path) -> None:
    """A manifest holding secrets in clear, as an older launcher or someone else may have written it."""
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["overrides"] = [f"launcher.env.{name}={value}" for name, value in PLANTED_SECRETS.items()]
    manifest["launch_argv"] += ["--set", f"env.HF_TOKEN={PLANTED_SECRETS['HF_TOKEN']}"]
    manifest["attempts"][0]["env"].update(PLANTED_SECRETS)
    manifest["notes"] = {"api_key": PLANTED_SECRETS["HF_TOKEN"], "argv": [f"HF_TOKEN={PLANTED_SECRETS['HF_TOKEN']}"]}
    path.write_text(json.dumps(manifest))


def test_a_resume_writes_back_no_secret_it_found_in_clear_in_the_manifest(first_run, tmp_path):
    run_dir, torchrun = first_run
    _plant_secrets_in_manifest(run_dir)
    resume(tmp_path, run_dir, torchrun)
    text = (run_dir / "manifest.json").read_text()
    manifest = json.loads(text)
    assert len(manifest["attempts"]) == 2  # the resume was recorded
    for value in [*PLANTED_SECRETS.values(), "S3cretDbPassw0rd"]:
        assert value not in text
    assert manifest["attempts"][0]["env"]["WANDB_API_KEY"] == "<redacted>"
    assert manifest["notes"] == {"api_key": "<redacted>", "argv": ["HF_TOKEN=<redacted>"]}


@pytest.mark.parametrize(("extra", "chosen"), [
    (["--mail-type=END", "--constraint=h100", "--exclude=node7", "--reservation=big"], None),
    (["--mail-type=END", "--export=ALL,LD_PRELOAD=/tmp/evil.so"], ["--export=ALL,LD_PRELOAD=/tmp/evil.so"]),
    ("--chdir=/tmp/evil", ["--chdir=/tmp/evil"]),
    (["--export-file=/tmp/env", "--get-user-env", "--container-mounts=/tmp:/x", "--bb=x"],
     ["--export-file=/tmp/env", "--get-user-env", "--container-mounts=/tmp:/x", "--bb=x"]),
    (["--some-future-option=1"], ["--some-future-option=1"]),  # not known to place the job: given again, or refused
])
def test_only_sbatch_options_that_place_the_job_are_taken_from_a_run(tmp_path, extra, chosen):
    from launcher.pipeline.preset import load_preset
    from launcher.runs.tracking import program_settings

    preset = tmp_path / "p.yaml"
    preset.write_text(json.dumps({"base": "toy", "launcher": {"slurm": {"extra_sbatch": extra}}}))
    assert program_settings(load_preset(str(preset))).get("slurm.extra_sbatch") == chosen


@pytest.mark.parametrize(("name", "value"), [
    ("fp8_quantizer_factory", "evil_module.factory"), ("fp4_quantizer_factory", "evil_module.factory"),
    # a YAML whose agent classes Megatron's RL imports (`pkg.mod.Class`) or executes (`file.py:Class`)
    ("langrl_env_config", "/tmp/envs.yaml"), ("spec", ["evil_module", "layer_spec"])])
def test_megatron_settings_that_name_python_choose_the_program(tmp_path, name, value):
    from launcher.pipeline.preset import load_preset
    from launcher.runs.tracking import program_settings

    preset = tmp_path / "p.yaml"
    preset.write_text(json.dumps({"base": "toy", "megatron": {name: value}}))
    assert name in program_settings(load_preset(str(preset)))
