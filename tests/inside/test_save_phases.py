"""The per-save phase line: each step of Megatron's save timed on the training thread, nothing else changed."""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.megatron

from launcher.inside.megatron_ext import save_phases  # noqa: E402


def test_the_line_gives_each_step_its_nested_ones_and_the_rest_as_other():
    phases = save_phases.Phases()
    phases.times.update({"state dict": 0.1, "dist save": 1.0, "plan": 0.3, "to torch": 0.2,
                         "hand-off to the writer": 0.5, "copy to host": 0.1, "wait for the previous write": 0.3})
    line = phases.line(30, 2.0)
    assert line.startswith("> megatron-launch save phases, iteration 30: 2.000 s = state dict 0.100 + dist save "
                           "1.000 (to torch 0.200, plan 0.300) + hand-off to the writer 0.500 (wait for the "
                           "previous write 0.300, copy to host 0.100)")
    assert line.endswith("+ other 0.400")


def test_a_timed_function_counts_only_while_a_save_runs_and_returns_its_result():
    calls = []
    timed = save_phases.timed(lambda x: calls.append(x) or x * 2, "plan")
    save_phases.PHASES.times.clear()
    assert timed(3) == 6 and "plan" not in save_phases.PHASES.times
    save_phases.PHASES.active = True
    try:
        assert timed(4) == 8
    finally:
        save_phases.PHASES.active = False
    assert calls == [3, 4] and save_phases.PHASES.times["plan"] >= 0.0


def test_installed_once_and_only_when_asked(monkeypatch):
    pytest.importorskip("megatron.training")
    monkeypatch.delenv(save_phases.SAVE_PHASES_ENV, raising=False)
    assert save_phases.install_from_environment() is False
    from megatron.training import training

    assert not getattr(training.save_checkpoint_and_time, "_megatron_launch_phases", False)
