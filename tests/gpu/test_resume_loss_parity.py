"""A run resumed from a checkpoint reproduces the uninterrupted run's losses (docs/loss-after-resume.md).

4 layers of the 345m shape on one GPU (the feature matrix's base settings), log_interval 1: a straight run to 10
that saves at 5, then a second launch that loads iteration 5 and trains 6-10. The losses of 6-10 are compared per
iteration, with Megatron's carry-over of the first iteration after a start taken out of the second line
(launcher/runs/loss_windows.py): without that, iteration 7 of the resumed run prints the mean of 6 and 7.

- deterministic_mode (Megatron's --deterministic-mode: torch.use_deterministic_algorithms, NCCL_ALGO=Tree; cuBLAS
  then needs CUBLAS_WORKSPACE_CONFIG): the printed lines 6 and 8-10 are the same text (bitwise equal losses),
  and 7, recovered from two printed numbers of 7 significant digits, agrees to 1e-6 relative;
- Megatron's defaults (not deterministic): every loss agrees to 1e-3 relative (the feature matrix saw 6 and 8-10
  agree to 0.001 on an H200).

Passed on one H200 on 2026-12-02 (docs/loss-after-resume.md); skipped without CUDA or the Megatron-LM checkout.
"""

from __future__ import annotations

import sys

import pytest

from launcher.runs import logparse
from launcher.runs.loss_windows import window_losses
from tests.gpu.conftest import REPO, Run, needs_gpus

sys.path.insert(0, str(REPO / "scripts"))
import feature_matrix  # noqa: E402  (its BASE settings: one place for the matrix's run shape)

pytestmark = needs_gpus(1)

SAVE = [*feature_matrix.BASE, "save_interval=5"]  # checkpoints at 5 and 10, format torch, no async save
DETERMINISTIC = ["deterministic_mode=true", "env.NCCL_ALGO=Tree", "env.CUBLAS_WORKSPACE_CONFIG=:4096:8",
                 "cross_entropy_loss_fusion=false"]


def sets(settings: list[str]) -> list[str]:
    return [word for setting in settings for word in ("--set", setting)]


def logged(run: Run) -> list[logparse.IterationLine]:
    assert run.code == 0, run.stdout[-4000:]
    assert run.summary()["outcome"] == "success", run.summary()
    return run.iterations()


@pytest.mark.parametrize(("extra", "exact"), [
    pytest.param(DETERMINISTIC, True, id="deterministic"),
    pytest.param([], False, id="defaults"),
])
def test_a_resumed_run_reproduces_the_uninterrupted_runs_losses(launch_gpu, extra, exact):
    straight_run = launch_gpu("345m", *sets([*SAVE, *extra]), gpus=1)
    straight = logged(straight_run)
    assert straight_run.tracker() == 10
    checkpoints = straight_run.run_dir / "checkpoints"
    resumed_run = launch_gpu("345m", *sets([*feature_matrix.BASE, *extra, "ckpt_step=5", f"load={checkpoints}"]),
                             gpus=1)
    resumed = logged(resumed_run)
    assert any(f"successfully loaded checkpoint from {checkpoints}" in line for line in resumed_run.log_lines())
    assert [line.iteration for line in straight] == list(range(1, 11))
    assert [line.iteration for line in resumed] == list(range(6, 11))

    # each run is one process start: the carry-over sits in its second line (straight: 2, resumed: 7)
    expected = window_losses(straight, log_interval=1)[5:]
    got = window_losses(resumed, log_interval=1)
    if exact:
        assert [line.losses["lm loss"] for line in resumed if line.iteration != 7] == \
               [line.losses["lm loss"] for line in straight[5:] if line.iteration != 7]
        assert got == pytest.approx(expected, rel=1e-6, abs=0)
    else:
        assert got == pytest.approx(expected, rel=1e-3, abs=0)
    # the printed line 7 is what Megatron's rule says it is: the mean of 6 and 7
    assert resumed[1].losses["lm loss"] == pytest.approx((got[0] + got[1]) / 2, rel=1e-6)
