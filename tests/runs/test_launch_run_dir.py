"""`launch PRESET` end to end on this machine, with a replaying stand-in for torchrun.

The stand-in prints a recorded Megatron log (tests/fixtures/logs) and writes the checkpoint tracker where
--save points, so the launcher's own part is tested for real: run directory, piping, metrics, verdict, exit
status, resume. Megatron itself runs in the GPU test at the end (marked gpu).
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parents[1] / "fixtures" / "logs"


def stand_in(tmp_path: Path, log: str, exit_code: int = 0, tracker: str | None = "100") -> Path:
    script = tmp_path / "torchrun-replay"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import sys, pathlib
        argv = sys.argv[1:]
        if "--save" in argv and {tracker!r} is not None:
            save = pathlib.Path(argv[argv.index("--save") + 1])
            save.mkdir(parents=True, exist_ok=True)
            (save / "latest_checkpointed_iteration.txt").write_text({tracker!r})
        print("argv:", " ".join(argv), flush=True)
        sys.stdout.write(open({str(FIXTURES / log)!r}).read())
        sys.exit({exit_code})
        """))
    script.chmod(0o755)
    return script


def launch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    megatron = tmp_path / "megatron-lm"
    megatron.mkdir(exist_ok=True)
    (megatron / "pretrain_gpt.py").touch()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "PYTHONPATH": str(ROOT)}
    # --no-doctor: the stand-in needs none of the build tools and packages `launch doctor` checks for (a cluster
    # job runs no doctor here, and is refused the option)
    here = not {"--slurm", "--submit", "--k8s"} & set(args)
    return subprocess.run([sys.executable, "-m", "launcher", *args, "--megatron-path", str(megatron),
                           *(["--no-doctor"] if here else [])],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)


def only_run_dir(tmp_path: Path) -> Path:
    (run_dir,) = (tmp_path / "runs").iterdir()
    return run_dir


def test_a_launch_writes_its_run_directory(tmp_path):
    torchrun = stand_in(tmp_path, "toy_fp32_1gpu.log")
    result = launch(tmp_path, "toy", "--set", f"torchrun={torchrun}", "--set", "train_iters=100")
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    assert run_dir.name.startswith("toy-") and run_dir.name.endswith("Z")
    argv_line = next(line for line in result.stdout.splitlines() if line.startswith("argv:"))
    checkpoints = str(run_dir / "checkpoints")
    assert f"--save {checkpoints}" in argv_line and f"--load {checkpoints}" in argv_line
    assert f"--tensorboard-dir {run_dir / 'tensorboard'}" in argv_line
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["overrides"] == [f"torchrun={torchrun}", "train_iters=100"]
    assert manifest["world"]["world_size"] == 1
    assert (run_dir / "logs" / "attempt-1.log").exists()
    assert len([line for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                if '"iteration"' in line]) == 11
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["outcome"] == "success" and summary["tracker_iteration"] == "100"
    assert "outcome:            success" in result.stdout


def test_exit_code_zero_but_failed_log_exits_1(tmp_path):
    torchrun = stand_in(tmp_path, "bf16_2gpu_nan.log", exit_code=0, tracker=None)
    result = launch(tmp_path, "toy", "--set", f"torchrun={torchrun}")
    assert result.returncode == 1
    assert json.loads((only_run_dir(tmp_path) / "summary.json").read_text())["outcome"] == "failed"


def test_child_exit_code_is_kept(tmp_path):
    torchrun = stand_in(tmp_path, "toy_truncated.log", exit_code=3, tracker=None)
    assert launch(tmp_path, "toy", "--set", f"torchrun={torchrun}").returncode == 3


@pytest.mark.matplotlib  # its end runs launch report (plots)
def test_resume_continues_the_same_directory(tmp_path):
    first = stand_in(tmp_path, "toy_truncated.log", exit_code=1, tracker="50")
    assert launch(tmp_path, "toy", "--set", f"torchrun={first}").returncode == 1
    run_dir = only_run_dir(tmp_path)
    second = stand_in(tmp_path, "toy_resume_sigterm.log", tracker="83")
    result = launch(tmp_path, "--resume", str(run_dir), "--set", f"torchrun={second}")
    assert result.returncode == 0, result.stderr
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [run_dir.name]  # no new directory
    argv_line = next(line for line in result.stdout.splitlines() if line.startswith("argv:"))
    assert f"--load {run_dir / 'checkpoints'}" in argv_line and f"--save {run_dir / 'checkpoints'}" in argv_line
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert len(manifest["attempts"]) == 2
    assert sorted(p.name for p in (run_dir / "logs").iterdir()) == ["attempt-1.log", "attempt-2.log"]
    report = subprocess.run([sys.executable, "-m", "launcher", "report", str(run_dir)], cwd=ROOT,
                            capture_output=True, text=True, check=False, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    # attempt 1 was killed mid-line and then resumed: expected, so the report covers both attempts
    assert report.returncode == 0, report.stderr
    assert "iterations:         83/100 in 2 attempts" in report.stdout  # saved at 83 on SIGTERM, logged up to 80


def test_resume_of_something_else_is_refused(tmp_path):
    result = launch(tmp_path, "--resume", str(tmp_path))
    assert result.returncode == 2 and "is not a run directory" in result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.gpu
def test_toy_on_one_gpu_with_megatron(tmp_path):
    megatron = Path(os.environ.get("MEGATRON_LM_PATH", ROOT / "third_party" / "megatron-lm"))
    if shutil.which("nvidia-smi") is None or not (megatron / "pretrain_gpt.py").exists():
        pytest.skip("needs a GPU and a Megatron-LM checkout")
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "toy", "--gpus-per-node", "1", "--set", "train_iters=30",
         "--set", "log_interval=5", "--megatron-path", str(megatron)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "0"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["outcome"] == "success" and summary["last_iteration"] == 30
    assert summary["tracker_iteration"] == "30" and summary["peak_memory_mb"] > 0
