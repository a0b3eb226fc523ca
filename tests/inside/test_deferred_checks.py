"""The fast path's NaN/Inf checks: Megatron's fatal verdicts read back later, never lost, never a per-step sync."""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.megatron

from launcher.inside.megatron_ext.deferred_checks import DeferredVerdicts, deferrable, install  # noqa: E402

LOSS_NAN = "found NaN in local forward loss calculation"


def test_a_rejected_result_stops_the_run_naming_its_iteration_and_megatrons_message():
    verdicts = DeferredVerdicts()
    verdicts.add(0, torch.isnan(torch.tensor(1.0)), LOSS_NAN)
    verdicts.add(1, torch.isnan(torch.tensor(float("nan"))), LOSS_NAN)
    with pytest.raises(RuntimeError, match=r"iteration 2: Unexpected result \(message='found NaN in local"):
        verdicts.drain()


def test_finite_results_pass_and_leave_nothing_pending():
    verdicts = DeferredVerdicts()
    for iteration in range(5):
        verdicts.add(iteration, torch.isinf(torch.tensor(2.0)), "found Inf in local grad norm")
    verdicts.drain()
    assert verdicts.open is None and not verdicts.in_flight


def test_a_verdict_still_open_at_the_end_is_read_by_drain():
    verdicts = DeferredVerdicts()
    verdicts.add(7, torch.isinf(torch.tensor(float("inf"))), "found Inf in local grad norm")
    assert verdicts.open is not None  # its step has not closed yet: nothing read so far
    with pytest.raises(RuntimeError, match="iteration 8"):
        verdicts.drain()


class _Machine:
    def __init__(self, mode):
        self.mode = mode


def test_only_megatrons_fatal_nan_and_inf_checks_of_disabled_mode_on_the_gpu_are_deferred():
    from megatron.core.rerun_state_machine import RerunMode

    loss = torch.tensor(1.0)
    disabled, validating = _Machine(RerunMode.DISABLED), _Machine(RerunMode.VALIDATE_RESULTS)
    assert not deferrable(disabled, loss, torch.isnan, True)  # a CPU tensor: reading it costs no GPU sync
    if torch.cuda.is_available():
        on_gpu = loss.cuda()
        assert deferrable(disabled, on_gpu, torch.isnan, True)
        assert not deferrable(validating, on_gpu, torch.isnan, True)  # a rerun needs the answer now
        assert not deferrable(disabled, on_gpu, torch.isnan, False)
        assert not deferrable(disabled, on_gpu, lambda x: x > 10, True)


def test_install_patches_megatron_once_and_keeps_its_other_checks():
    from megatron.core.rerun_state_machine import RerunMode, RerunStateMachine

    install()
    assert install() is False
    assert RerunStateMachine.validate_result._megatron_launch_deferred
    machine = RerunStateMachine(mode=RerunMode.DISABLED)
    seen = []
    # not deferrable (a CPU tensor, or a check other than isnan/isinf): Megatron's own path judges it at once
    machine.validate_result(torch.tensor(1.0), lambda x: seen.append(float(x)) or False, "spiky loss", fatal=False)
    assert seen == [1.0]
