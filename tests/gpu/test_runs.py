"""The issue's runs on real GPUs, through `launch` as a user types it (skipped without CUDA GPUs).

Each test starts real training (tens of seconds to minutes); they run on any CUDA machine with enough GPUs.
"""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from tests.gpu.conftest import RUN_TIMEOUT_S, Run, launch_argv, launch_env, needs_gpus, run_dir_of

SHORT = ["--set", "eval_iters=0"]  # no validation passes: the checks are about training


def assert_loss_falls(iterations, *, by: float = 0.5) -> None:
    losses = [line.lm_loss for line in iterations if line.lm_loss is not None]
    assert len(losses) >= 2, f"too few loss values: {losses}"
    assert losses[-1] < losses[0] - by, f"loss did not fall by {by}: {losses[0]} -> {losses[-1]}"


def assert_trained(run: Run, iters: int) -> dict:
    assert run.code == 0, run.stdout[-4000:]
    summary = run.summary()
    assert summary["outcome"] == "success", summary
    assert summary["last_iteration"] == iters
    return summary


@pytest.mark.parametrize("gpus", [pytest.param(2, marks=needs_gpus(2))])
def test_toy_upstream_simple_loop_saves_and_reloads(launch_gpu, gpus):
    run = launch_gpu("toy", gpus=gpus)
    assert run.code == 0, run.stdout[-4000:]
    log = "\n".join(run.log_lines())
    assert "Iteration 4: Losses reduced" in log
    assert "Successfully loaded the model" in log
    assert (run.run_dir / "ckpt").is_dir()


@pytest.mark.parametrize("gpus", [pytest.param(1, marks=needs_gpus(1))])
def test_toy_one_gpu_fallback_learns(launch_gpu, gpus):
    run = launch_gpu("toy", "--set", "train_iters=100", gpus=gpus)
    assert_trained(run, 100)
    assert_loss_falls(run.iterations(), by=0.2)  # ln 100 = 4.6 at the start


@pytest.mark.parametrize(("gpus", "extra"), [
    pytest.param(1, [], marks=needs_gpus(1), id="1gpu"),
    pytest.param(2, ["--set", "global_batch_size=64"], marks=needs_gpus(2), id="dp2"),  # same work per GPU
    pytest.param(2, ["--set", "tensor_model_parallel_size=2"], marks=needs_gpus(2), id="tp2"),
])
def test_345m_trains(launch_gpu, gpus, extra):
    run = launch_gpu("345m", "--set", "train_iters=50", *SHORT, *extra, gpus=gpus)
    summary = assert_trained(run, 50)
    # 11.0 at the start; the preset warms the learning rate up over 3,200 steps, so ~10 after 50
    assert_loss_falls(run.iterations(), by=0.5)
    assert summary["steady_tokens_per_s"] > 0
    assert summary["peak_memory_mb"] > 0


@pytest.mark.parametrize("gpus", [pytest.param(2, marks=needs_gpus(2))])
def test_175b_flags_run_shrunk_to_two_gpus(launch_gpu, gpus):
    """The 175b preset's flags, with only layers, parallel sizes and the batch shrunk (and no sequence
    parallelism, which torch's LayerNorm fallback cannot do where TE and apex are missing)."""
    shrink = ["num_layers=2", "tensor_model_parallel_size=2", "pipeline_model_parallel_size=1",
              "global_batch_size=16", "train_samples=48", "transformer_engine=auto", "apex=auto",
              "no_save_optim=true", "no_save_rng=true",  # the end-of-run save: 4.3B weights only
              "log_interval=1"]
    run = launch_gpu("175b", "--nodes", "1", "--gpus-per-node", str(gpus), *SHORT,
                     *(w for item in shrink for w in ("--set", item)), *no_sp_without_kernels(), gpus=gpus)
    assert_trained(run, 3)


def no_sp_without_kernels() -> list[str]:
    from launcher.megatron.pin import detect_kernels

    te, apex = detect_kernels()
    return [] if (te or apex) else ["--set", "sequence_parallel=false"]


@pytest.mark.parametrize("gpus", [pytest.param(1, marks=needs_gpus(1))])
def test_345m_resumes_after_sigterm(run_root, gpus):
    """SIGTERM → Megatron's exit-signal handler saves; `launch --resume` continues from the saved iteration."""
    args = ["345m", "--set", "train_iters=60", "--set", "exit_signal_handler=true", *SHORT]
    env = launch_env(gpus, run_root)
    proc = subprocess.Popen(launch_argv(*args, run_root=run_root), env=env, cwd=run_root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    deadline = time.time() + RUN_TIMEOUT_S
    for line in proc.stdout:
        lines.append(line)
        if " iteration       20/" in line:
            proc.send_signal(signal.SIGTERM)
            break
        assert time.time() < deadline, "no iteration 20 in time"
    rest, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    first = Run(proc.returncode, "".join(lines) + rest, run_dir_of("".join(lines)))
    saved = first.tracker()
    assert saved is not None and 20 <= saved < 60, first.stdout[-4000:]
    assert first.summary()["outcome"] == "stopped", first.summary()
    before = {line.iteration: line.lm_loss for line in first.iterations()}

    second = subprocess.run(launch_argv("--resume", str(first.run_dir), run_root=run_root), env=env,
                            cwd=run_root, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    resumed = Run(second.returncode, second.stdout + second.stderr, first.run_dir)
    assert_trained(resumed, 60)
    log = "\n".join(resumed.log_lines(attempt=2))
    assert f"successfully loaded checkpoint from {first.run_dir / 'checkpoints'}" in log
    assert f"at iteration {saved}" in log
    after = resumed.iterations(attempt=2)
    assert after[0].iteration == saved + 1  # the first line after a resume is its first iteration
    # Continuous loss: the resumed run starts near where the first one stopped, far below the initial 11.
    last_before = before[max(before)]
    assert after[0].lm_loss < last_before + 0.5, (last_before, after[0].lm_loss)
    assert_loss_falls([*first.iterations(), *after], by=0.5)
