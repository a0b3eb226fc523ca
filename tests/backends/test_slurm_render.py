"""Slurm batch scripts without a cluster: rendering, golden files, quoting, validation, no partial files.

Regenerate the golden files after an intended change:  UPDATE_GOLDEN=1 pytest tests/backends/test_slurm_render.py
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from slurm_support import GOLDEN_DIR, GOLDEN_RUNS, PRESETS, REPO, render_preset

from launcher.backends import slurm
from launcher.errors import UserError
from launcher.pipeline.command import slurm_torchrun
from launcher.pipeline.node_range import NodeRange
from launcher.pipeline.slurm_settings import parse_slurm_settings, parse_time_limit
from tests.golden_files import assert_matches_golden

# Each golden file: (preset, overrides, nodes, GPUs per node, preflight).
GOLDEN_CASES = {
    **{name: (name, (), None, None, False) for name in PRESETS},
    "345m-2x2-preflight": ("345m", (), 2, 2, True),
    "345m-container-chain": ("345m", (
        "slurm.container_image=nvcr.io#nvidia/pytorch:24.01-py3",
        "slurm.container_mounts=[/lustre/data:/data, /lustre/ckpt:/ckpt:rw]",
        "slurm.partition=batch", "slurm.account=llm", "slurm.qos=high", "slurm.time=04:00:00",
        "slurm.exclusive=true", "slurm.extra_sbatch=[--mail-type=END, --constraint=h100]",
        "slurm.chain=3", "slurm.signal=USR2", "slurm.signal_seconds=600", "slurm.max_restarts=5",
        "env.NCCL_SOCKET_IFNAME=^lo,docker0", "env.NCCL_DEBUG=WARN", "save=/shared/ckpt/345m",
        "save_interval=500", "global_batch_size=256", "transformer_engine=false", "apex=false",
    ), 4, 8, False),
    # An NGC image ships TE and apex; the repo paths the job needs are mounted, the run directory is not.
    "345m-ngc": ("345m", ("slurm.container_image=nvcr.io/nvidia/pytorch:25.01-py3",
                          "slurm.container_mounts=[/opt/megatron-lm:/opt/megatron-lm]"), 2, 8, False),
    # --nodes 2-4: Slurm grants 2, 3 or 4 nodes; 3 gives DP 6, which the global batch 32 does not split.
    "345m-elastic": ("345m", (), NodeRange(2, 4), 2, False),
    # Data on the cluster's file system: checked on the node at job start.
    "345m-cluster-data": ("345m", ("mock_data=false", "data_path=/cluster/data/web_text_document",
                                   "split=98,2,0"), None, None, False),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_scripts(case):
    name, overrides, nodes, gpus, preflight = GOLDEN_CASES[case]
    _, text = render_preset(name, overrides, nodes, gpus, preflight=preflight)
    text = text.replace(str(Path(sys.executable).parent), "/opt/venv/bin")  # whichever venv runs the tests
    text = text.replace(str(REPO), "/opt/megatron-launch")  # where this checkout is must not matter
    assert_matches_golden(text, GOLDEN_DIR / f"{case}.sbatch", f"{case}: rendered script", __file__)


@pytest.mark.parametrize("golden", sorted(GOLDEN_DIR.glob("*.sbatch")), ids=lambda p: p.stem)
def test_golden_scripts_are_valid_bash(golden):
    result = subprocess.run(["bash", "-n", str(golden)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_every_golden_file_has_a_case():
    assert {p.stem for p in GOLDEN_DIR.glob("*.sbatch")} == set(GOLDEN_CASES)


def _sbatch_options(text: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in text.splitlines() if line.startswith("#SBATCH ")]


def test_script_follows_the_plan():
    job, text = render_preset("345m", ("slurm.time=1:00:00", "slurm.signal_seconds=120"), 2, 2)
    options = _sbatch_options(text)
    assert "--nodes=2" in options and "--ntasks-per-node=1" in options and "--gpus-per-node=2" in options
    assert "--time=1:00:00" in options and "--signal=B:USR1@120" in options and "--requeue" in options
    assert f"--output={GOLDEN_RUNS}/345m/slurm-%j.out" in options
    assert "--nproc-per-node=2" in text and '--rdzv-endpoint="$head_node:$rdzv_port"' in text
    assert "export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=120" in text
    # Requeue needs Megatron to checkpoint on the forwarded SIGTERM and to resume from the same directory.
    args = job.script_args
    assert "--exit-signal-handler" in args
    assert args[args.index("--save") + 1] == args[args.index("--load") + 1] == f"{GOLDEN_RUNS}/345m/checkpoints"
    assert "--save-interval" in args


def test_preset_save_and_load_are_kept():
    job, _ = render_preset("345m", ("save=/ckpt/a", "save_interval=50"), 2, 2)
    args = job.script_args
    assert args[args.index("--save") + 1] == "/ckpt/a" == args[args.index("--load") + 1]
    assert args[args.index("--save-interval") + 1] == "50"


def test_a_different_exit_signal_is_refused():
    with pytest.raises(UserError, match="exit_signal=SIGUSR1 would never fire"):
        render_preset("345m", ("exit_signal=SIGUSR1",), 2, 2)


def test_requeue_off_and_chain():
    _, text = render_preset("345m", ("slurm.requeue=false", "slurm.chain=2"), 2, 2)
    options = _sbatch_options(text)
    assert "--no-requeue" in options and "--dependency=singleton" in options
    assert "max_restarts=0" in text
    _, single = render_preset("345m", (), 2, 2)
    assert not any(o.startswith("--dependency") for o in _sbatch_options(single))


def test_preflight_runs_the_preflight_script_with_the_same_rendezvous():
    _, train_text = render_preset("345m", (), 2, 2)
    check, check_text = render_preset("345m", (), 2, 2, preflight=True)
    assert check.script == str(REPO / "launcher" / "inside" / "allreduce.py") and check.script_args == ()
    assert check.job_name == "megatron-345m-preflight" and "--no-requeue" in _sbatch_options(check_text)
    launch_lines = [line for line in train_text.splitlines() if "--rdzv" in line or "--nnodes" in line]
    assert launch_lines and all(line in check_text.splitlines() for line in launch_lines)


# -- the script's shell text, run with stand-ins for srun/scontrol/scancel that record what they receive ----

NASTY_ARGS = ("--data-path", "$(touch PWNED1)", "--x", "`touch PWNED2`", "; touch PWNED3", "a b'c\"d",
              "--moe-layer-freq", "([1]*3+[0]*1)")


def _stub_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stubs = {
        # srun: record argv (NUL-separated) and two exported variables, then succeed.
        "srun": 'printf "%s\\0" "$@" > "$RECORD/argv"; printf "%s" "$NCCL_SOCKET_IFNAME" > "$RECORD/ifname"',
        "scontrol": 'if [ "$1" = show ]; then echo n1; echo n2; else echo "$*" >> "$RECORD/scontrol"; fi',
        "scancel": 'echo "$*" >> "$RECORD/scancel"',
        "squeue": 'echo "$*" >> "$RECORD/squeue"',  # no step left running: the requeue may go ahead
    }
    for name, body in stubs.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def test_every_value_reaches_srun_verbatim_and_nothing_runs(tmp_path):
    job = slurm.BatchJob(
        title="quoting", job_name="quoting", nodes=2, gpus_per_node=2,
        torchrun=tuple(slurm_torchrun("/opt/venv/bin/torchrun", 2)),
        script="/opt/megatron-lm/pretrain_gpt.py", script_args=NASTY_ARGS, run_dir=tmp_path / "run",
        env={"NCCL_SOCKET_IFNAME": "^lo,docker0"}, rdzv_port=29511,
    )
    path = slurm.write_batch_script(job)
    record = tmp_path / "record"
    record.mkdir()
    env = {**os.environ, "PATH": f"{_stub_bin(tmp_path)}:{os.environ['PATH']}", "RECORD": str(record),
           "SLURM_JOB_ID": "42", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "n[1-2]"}
    result = subprocess.run(["bash", str(path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    argv = (record / "argv").read_text().split("\0")[:-1]
    assert argv == [
        "--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "/opt/venv/bin/torchrun", "--nnodes=2",
        "--nproc-per-node=2", "--rdzv-backend=c10d", "--rdzv-endpoint=n1:29511", "--rdzv-id=42",
        "/opt/megatron-lm/pretrain_gpt.py", *NASTY_ARGS,
    ]
    assert (record / "ifname").read_text() == "^lo,docker0"
    assert not list(tmp_path.glob("PWNED*"))
    assert not (record / "scontrol").exists()  # no signal, so no requeue


def test_signal_is_forwarded_and_the_job_requeued_within_budget(tmp_path):
    """The trap: SIGUSR1 to the batch shell → scancel --signal=TERM to the steps → requeue (budget permitting)."""
    job = slurm.BatchJob(
        title="trap", job_name="trap", nodes=1, gpus_per_node=1, torchrun=tuple(slurm_torchrun("torchrun", 1)),
        script="train.py",
        script_args=(), run_dir=tmp_path / "run", settings=parse_slurm_settings({"max_restarts": 2}),
    )
    path = slurm.write_batch_script(job)
    bin_dir = _stub_bin(tmp_path)
    # This srun runs until it gets SIGTERM, as a training step would, and exits 143 like torchrun;
    # scancel --signal=TERM <job> delivers that TERM to it, by its pid.
    (bin_dir / "srun").write_text('#!/bin/bash\ntrap "exit 143" TERM\necho $$ > "$RECORD/srun.pid"\n'
                                  'while :; do sleep 0.05; done\n')
    (bin_dir / "scancel").write_text('#!/bin/bash\necho "$*" >> "$RECORD/scancel"\n'
                                     'kill -TERM "$(cat "$RECORD/srun.pid")"\n')
    record = tmp_path / "record"
    record.mkdir()
    for restart, requeued in ((0, True), (1, True), (2, False)):
        for f in record.iterdir():
            f.unlink()
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORD": str(record),
               "SLURM_JOB_ID": "77", "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "n1",
               "SLURM_RESTART_COUNT": str(restart)}
        proc = subprocess.Popen(["bash", str(path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        _wait_for_file(record / "srun.pid")
        proc.send_signal(signal.SIGUSR1)  #, as Slurm sends it before the time limit
        _, err = proc.communicate(timeout=30)
        assert (record / "scancel").read_text().split() == ["--signal=TERM", "77"]
        if requeued:
            assert proc.returncode == 0 and (record / "scontrol").read_text().split() == ["requeue", "77"], err
        else:
            assert proc.returncode == 143 and not (record / "scontrol").exists()
            assert "2 of 2 restarts used" in err


def _wait_for_file(path: Path, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


# -- validation ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 5400), ("30:15", 1815), ("1:00:00", 3600), ("04:00:00", 14400), ("2-0", 172800),
    ("1-12:30", 131400), ("1-00:00:01", 86401), ("UNLIMITED", None), ("infinite", None),
])
def test_time_limits(text, seconds):
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", ["", "1h", "1:2:3:4", "01:60:00", "1-24:00", "-5", "1:00:60", "one", "1.5"])
def test_bad_time_limits(text):
    with pytest.raises(ValueError):
        parse_time_limit(text)


def _problems(raw: dict) -> str:
    with pytest.raises(UserError) as info:
        parse_slurm_settings(raw)
    return info.value.render()


def test_settings_report_every_problem_at_once():
    text = _problems({
        "partiton": "gpu", "time": "4h", "signal": "TERM", "exclusive": "yes", "max_restarts": -1,
        "extra_sbatch": ["--nodes=4", "--comment=a b"], "container_image": "img;reboot",
        "container_mounts": ["/a:/b,/c:/d"], "account": "$(id)",
    })
    for expected in ("did you mean slurm.partition?", "slurm.time='4h' is not a Slurm time limit",
                     "slurm.signal='TERM'", "slurm.exclusive must be bool", "max_restarts=-1",
                     "sets an option the launcher writes itself", "'--comment=a b' is not a plain #SBATCH",
                     "slurm.container_image='img;reboot' contains shell metacharacters", "holds a comma",
                     "slurm.account='$(id)' is not a valid Slurm name"):
        assert expected in text, text


def test_yaml_number_time_is_refused_with_the_reason():
    assert "YAML reads unquoted 4:00:00 as 14400" in _problems({"time": 14400})


def test_signal_must_come_before_the_time_limit():
    assert "not shorter than slurm.time=00:05:00 (300 s)" in _problems({"time": "00:05:00", "signal_seconds": 300})


@pytest.mark.parametrize(("field", "value", "message"), [
    ("env", {"A": "$(reboot)"}, "env.A='$(reboot)' contains shell metacharacters"),
    ("env", {"1X": "v"}, "'1X' is not a valid shell name"),
    ("run_dir", Path("/tmp/my runs/x"), "cannot be written on an #SBATCH --output line"),
    ("run_dir", Path("/tmp/100%/x"), "cannot be written on an #SBATCH --output line"),
    ("job_name", "a%j", "not a valid Slurm job name"),
    ("nodes", 3, "3 node(s) x 2 GPU(s) = 6 ranks, but the layout needs world size 4"),
    ("chain", 0, "out of range"),
    ("rdzv_port", 70000, "is not a TCP port"),
    ("script_args", ("--x", "a\nb"), "control character"),
    ("torchrun", ("torchrun;id",), "torchrun='torchrun;id' contains shell metacharacters"),
])
def test_bad_jobs_are_refused_and_write_nothing(tmp_path, field, value, message):
    good = slurm.BatchJob(title="t", job_name="t", nodes=2, gpus_per_node=2,
                          torchrun=tuple(slurm_torchrun("torchrun", 2)),
                          script="/m/pretrain_gpt.py", script_args=("--lr", "1"), run_dir=tmp_path / "run",
                          world_size=4)
    slurm.render_batch_script(good)
    bad = replace(good, **{field: value})
    with pytest.raises(UserError) as info:
        slurm.write_batch_script(bad)
    assert message in info.value.render()
    assert not bad.run_dir.exists() and not good.run_dir.exists()


# -- the command line ------------------------------------------------------------------------------------------

def test_cli_dry_run_prints_the_script_and_writes_nothing(launch, tmp_path):
    code, out, err = launch("345m", "--slurm", "--dry-run", "--nodes", "2", "--gpus-per-node", "2",
                            "--set", "slurm.time=1:00:00", "--set", f"run_root={tmp_path}/runs")
    assert code == 0, err
    assert out.startswith("#!/bin/bash\n") and "#SBATCH --time=1:00:00" in out
    assert not (tmp_path / "runs").exists()


def test_cli_writes_the_script_into_a_new_run_directory(launch, tmp_path):
    code, out, err = launch("345m", "--slurm", "--nodes", "2", "--gpus-per-node", "2", "--set",
                            f"run_root={tmp_path}/runs")
    assert code == 0, err
    path = Path(out.strip())
    assert path.parent.parent == tmp_path / "runs" and path.name == "job.sbatch"
    assert f"--output={path.parent}/slurm-%j.out" in path.read_text()
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0
    # The run directory records the launch; its command.sh is the submission, and the ranks save into it.
    manifest = json.loads((path.parent / "manifest.json").read_text())
    assert manifest["world"] == {"nodes": 2, "gpus_per_node": 2, "world_size": 4}
    assert (path.parent / "command.sh").read_text().splitlines()[-1] == f"sbatch {path}"
    assert f"--save {path.parent}/checkpoints" in path.read_text()


@pytest.mark.parametrize(("args", "message"), [
    (["--slurm", "--set", "slurm.partition=gpu;reboot"], "is not a valid Slurm name"),
    (["--slurm", "--set", "slurm.time=25:00:00:00"], "is not a Slurm time limit"),
    (["--slurm", "--set", "env.X=`id`"], "contains shell metacharacters"),
    (["--slurm", "--nodes", "3", "--gpus-per-node", "1"], "world size"),
    (["--chain", "2"], "--chain applies to Slurm jobs only"),
    (["--slurm", "--preflight", "--chain", "2"], "--chain does not apply to --preflight"),
])
def test_cli_bad_input_exits_2_without_files(launch, tmp_path, args, message):
    code, out, err = launch("175b", *args, "--set", f"run_root={tmp_path}/runs")
    assert code == 2, out + err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_cli_submit_without_sbatch_exits_2_without_files(launch, tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    code, _, err = launch("345m", "--submit", "--nodes", "2", "--gpus-per-node", "2", "--set",
                          f"run_root={tmp_path}/runs", env={"PATH": str(bare)})
    assert code == 2
    assert "sbatch not found" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_local_preflight_dry_run_uses_the_preflight_script(launch):
    code, out, err = launch("345m", "--preflight", "--dry-run", "--gpus-per-node", "2")
    assert code == 0, err
    assert shlex.quote(str(REPO / "launcher" / "inside" / "allreduce.py")) in out
    assert "pretrain_gpt.py" not in out and "--num-layers" not in out


def _launch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120, check=False)


def test_jobs_ask_for_the_whole_nodes_cpus_and_memory_by_default():
    result = _launch("345m", "--slurm", "--dry-run", "--megatron-path", "/opt/megatron-lm")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "#SBATCH --exclusive" in lines and "#SBATCH --mem=0" in lines


def test_shared_nodes_request_cpus_and_memory_and_are_warned_without_cpus():
    shared = _launch("345m", "--slurm", "--dry-run", "--megatron-path", "/opt/megatron-lm",
                     "--set", "slurm.exclusive=false", "--set", "slurm.cpus_per_task=32", "--set", "slurm.mem=480G")
    lines = shared.stdout.splitlines()
    assert "#SBATCH --exclusive" not in lines
    assert "#SBATCH --cpus-per-task=32" in lines and "#SBATCH --mem=480G" in lines
    bare = _launch("345m", "--slurm", "--dry-run", "--megatron-path", "/opt/megatron-lm",
                   "--set", "slurm.exclusive=false", "--set", "slurm.mem=null")
    assert bare.returncode == 0 and "--mem" not in bare.stdout
    assert "without slurm.cpus_per_task" in bare.stderr


def test_memory_and_cpus_are_validated_and_not_smuggled_through_extra_sbatch():
    with pytest.raises(UserError) as err:
        parse_slurm_settings({"mem": "lots", "cpus_per_task": 0, "extra_sbatch": ["--cpus-per-task=4"]})
    text = err.value.render()
    assert "slurm.mem='lots' is not a Slurm memory size" in text and "cpus_per_task=0" in text
    assert "use slurm.cpus_per_task instead" in text
    assert parse_slurm_settings({"mem": 0}).mem == "0"
