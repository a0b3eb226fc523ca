"""The first launch on a fresh machine: torch's bytecode compiled on every core into the ranks' cache; not on a warm
cache, a small machine, or with the switch off."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.backends import cold_start

REAL_POPEN = subprocess.Popen


def test_the_cached_bytecode_path_is_pythons_own(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")  # a venv's lib64 -> lib: the path is taken as given
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "cache"))
    for source in (tmp_path / "real" / "__init__.py", tmp_path / "linked" / "__init__.py"):
        assert cold_start.cached_bytecode(tmp_path / "cache", source) == \
            Path(importlib.util.cache_from_source(str(source)))


@pytest.fixture
def fake_torch(tmp_path, monkeypatch):
    package = tmp_path / "site" / "torch"
    (package / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.setattr(cold_start, "torch_package", lambda: package)
    runs = []

    class Process:
        pid = -1

        def __init__(self, argv, **options):
            runs.append((argv, options))

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(subprocess, "Popen", Process)
    return package, runs


def test_a_cache_without_torchs_bytecode_is_filled_on_every_core(tmp_path, fake_torch):
    package, runs = fake_torch
    env = {"PYTHONPYCACHEPREFIX": str(tmp_path / "cache")}
    assert cold_start.fill_bytecode_cache(env, "/venv/bin/python3", cores=16)
    (argv, options), = runs
    assert argv == ["/venv/bin/python3", "-m", "compileall", "-q", "-j", "0", str(package)]
    assert options["env"]["PYTHONPYCACHEPREFIX"] == env["PYTHONPYCACHEPREFIX"]  # compiled where the ranks look
    assert options["start_new_session"]  # stopped with its workers if it overruns


def test_nothing_is_compiled_warm_small_without_a_cache_or_switched_off(tmp_path, fake_torch, monkeypatch):
    package, runs = fake_torch
    cache = tmp_path / "cache"
    env = {"PYTHONPYCACHEPREFIX": str(cache)}
    assert not cold_start.fill_bytecode_cache(env, "python3", cores=2)  # the ranks compile only what they import
    assert not cold_start.fill_bytecode_cache({}, "python3", cores=16)  # bytecode beside the sources: not ours
    monkeypatch.setenv(cold_start.SWITCH_ENV, "off")
    assert not cold_start.fill_bytecode_cache(env, "python3", cores=16)
    monkeypatch.delenv(cold_start.SWITCH_ENV)
    warm = cold_start.cached_bytecode(cache, package / "__init__.py")
    warm.parent.mkdir(parents=True)
    warm.write_bytes(b"")
    assert not cold_start.fill_bytecode_cache(env, "python3", cores=16)
    assert runs == []


def test_a_compilation_that_hangs_is_stopped_with_its_workers(tmp_path, fake_torch, monkeypatch):
    monkeypatch.setattr(cold_start, "COMPILE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(cold_start, "torch_package", lambda: tmp_path)  # anything; the command below hangs
    monkeypatch.setattr(subprocess, "Popen", REAL_POPEN)
    script = tmp_path / "python3"
    script.write_text("#!/bin/sh\nsleep 30 & sleep 30\n")
    script.chmod(0o755)
    started = time.monotonic()
    assert not cold_start.fill_bytecode_cache({"PYTHONPYCACHEPREFIX": str(tmp_path / "c")}, str(script), cores=16)
    assert time.monotonic() - started < 10


def test_a_python_that_cannot_start_leaves_the_launch_as_it_was(tmp_path, fake_torch, monkeypatch):
    monkeypatch.setattr(subprocess, "Popen", REAL_POPEN)
    assert not cold_start.fill_bytecode_cache({"PYTHONPYCACHEPREFIX": str(tmp_path / "c")}, str(tmp_path / "none"),
                                              cores=16)
