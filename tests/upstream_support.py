"""One Megatron worker shared by every test module in the session (its import costs 5-10 s)."""

from __future__ import annotations

import atexit
import time
from dataclasses import replace

import pytest

from launcher.checks.megatron_verdict import Request, UpstreamChecker, find_megatron_python, target_env
from launcher.megatron.pin import Kernels
from launcher.megatron.target import capability
from launcher.pipeline import command
from launcher.pipeline.preset import Preset
from launcher.pipeline.resolve import resolve_settings

_checker: UpstreamChecker | None = None
STARTUP_SECONDS: list[float] = []


def shared_checker() -> UpstreamChecker:
    """The session's worker; skips the test when megatron-core and torch are not installed."""
    global _checker
    if _checker is None:
        if find_megatron_python() is None:
            pytest.skip("needs megatron-core 0.18.0 and torch (pip install -e '.[megatron]')")
        started = time.monotonic()
        _checker = UpstreamChecker()
        STARTUP_SECONDS.append(time.monotonic() - started)
        atexit.register(_checker.close)
    return _checker


def megatron_request(preset: Preset, world_size: int, te: bool, apex: bool) -> Request:
    """The argv and environment the launcher would give pretrain_gpt.py for this preset, as a check request.

    The job's settings decided but not checked, so that presets the launcher rejects can be put to Megatron too."""
    kernels = Kernels(transformer_engine=te, apex=apex, how="preset")
    job, _ = resolve_settings(replace(preset, launcher=replace(preset.launcher, entry="pretrain_gpt")), 1,
                              world_size, kernels=kernels, inherited_env={})
    argv = command.script_args(job.megatron)
    return Request(argv, world_size, target_env(job), apex=apex, te=te, capability=capability(preset.launcher.gpu))


# Imported by the modules that compare with Megatron (autouse there, not in every test):
@pytest.fixture(autouse=True)
def target_env_only(monkeypatch):
    """The launcher reads these from the caller's environment too (a local run inherits it); other test modules
    may set them, so each test of an importing module sees only what its preset declares."""
    for name in ("CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_ALGO", "NVTE_CPU_OFFLOAD_V1"):
        monkeypatch.delenv(name, raising=False)
