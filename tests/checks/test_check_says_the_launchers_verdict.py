"""`launch PRESET --check` says the launcher's own verdict whatever Megatron's side can do: without megatron-core
it is still printed (Megatron is "not asked"), and a warning (a memory estimate above the GPU) is never a bare ok."""

from __future__ import annotations

import json

import pytest

from launcher.checks import megatron_verdict
from launcher.cli import main
from tests.conftest import MEGATRON


@pytest.fixture
def no_megatron_core(monkeypatch):
    monkeypatch.setattr(megatron_verdict, "find_megatron_python", lambda: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def test_check_without_megatron_core_still_says_the_launchers_verdict(capsys, no_megatron_core):
    assert main(["345m", "--check", "--megatron-path", MEGATRON]) == 2
    out = capsys.readouterr().out
    assert "\nlauncher: " in out and "launcher: 1 problem" not in out
    assert "megatron: not asked: Megatron's own checks need megatron-core and torch" in out


def test_check_without_megatron_core_still_lists_the_launchers_problems(capsys, no_megatron_core):
    assert main(["345m", "--check", "--set", "num_attention_heads=7", "--megatron-path", MEGATRON,
                 "--format", "json"]) == 2
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["launcher"]["ok"] is False and verdict["launcher"]["problems"]
    assert verdict["megatron"]["ok"] is None and "megatron-core" in verdict["megatron"]["not_asked"]


def test_check_of_a_job_whose_memory_estimate_is_above_its_gpu_is_no_bare_ok(capsys, no_megatron_core):
    assert main(["345m", "--nodes", "2", "--set", "micro_batch_size=128", "--set", "global_batch_size=256",
                 "--set", "gpu=h200-141gb", "--check", "--megatron-path", MEGATRON]) == 2
    out = capsys.readouterr().out
    assert "launcher: ok" not in out
    assert "launcher: accepted with" in out and "  warning: the memory estimate, ~132.9 GiB per GPU" in out
