"""The checkout's bytecode is compiled before the ranks import it, also where Python may not write bytecode itself
(PYTHONDONTWRITEBYTECODE): each rank of each launch would otherwise compile Megatron's ~500 modules again."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from launcher.backends import bytecode
from launcher.pipeline import startup


def fake_checkout(tmp_path: Path) -> Path:
    package = tmp_path / "megatron-lm" / "megatron" / "core"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("VALUE = 1\n")
    (tmp_path / "megatron-lm" / "pretrain_gpt.py").write_text("import megatron.core\n")
    return tmp_path / "megatron-lm"


def test_bytecode_is_written_for_every_module_even_with_bytecode_writing_off(tmp_path):
    checkout = fake_checkout(tmp_path)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    process = bytecode.start(checkout, env)
    assert process is not None and process.wait(timeout=60) == 0
    for source in ("megatron/__init__.py", "megatron/core/__init__.py", "pretrain_gpt.py"):
        assert Path(importlib.util.cache_from_source(str(checkout / source))).is_file(), source
    # and an interpreter that may not write bytecode reads it: the module's source is not compiled again
    probe = ("import sys, megatron.core, importlib.util as u, os; "
             "print(os.path.exists(u.cache_from_source(megatron.core.__file__)), sys.dont_write_bytecode)")
    seen = subprocess.run([sys.executable, "-c", probe], env={**env, "PYTHONPATH": str(checkout)},
                          capture_output=True, text=True, check=True)
    assert seen.stdout.split() == ["True", "True"]


def test_a_checkout_that_cannot_take_bytecode_is_left_alone(tmp_path):
    checkout = fake_checkout(tmp_path)
    (checkout / "megatron").chmod(0o555)
    try:
        if os.access(checkout / "megatron", os.W_OK):  # root writes anyway: nothing to show
            return
        assert bytecode.compile_command(checkout, os.environ) is None
    finally:
        (checkout / "megatron").chmod(0o755)


def test_the_compilation_uses_the_ranks_python_and_every_core(tmp_path):
    checkout = fake_checkout(tmp_path)
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python3").write_text("#!/bin/sh\n")
    (shim / "python3").chmod(0o755)
    argv = bytecode.compile_command(checkout, {"PATH": str(shim)})
    assert argv is not None and argv[:6] == [str(shim / "python3"), "-m", "compileall", "-q", "-j", "0"]
    assert str(checkout / "megatron") in argv and str(checkout / "pretrain_gpt.py") in argv


def test_a_launch_here_compiles_the_checkout_while_torchrun_starts(tmp_path):
    checkout = fake_checkout(tmp_path)
    source = str(checkout / "megatron" / "core" / "__init__.py")
    torchrun = tmp_path / "torchrun"
    # where this process (the job's environment: PYTHONDONTWRITEBYTECODE; the launcher's bytecode cache unless torch
    # was installed with its bytecode) reads the module's bytecode from
    torchrun.write_text(f"#!{sys.executable}\nimport importlib.util, os, time\n"
                        f"pyc = importlib.util.cache_from_source({source!r})\nend = time.time() + 60\n"
                        "while not os.path.exists(pyc) and time.time() < end:\n    time.sleep(0.1)\n"
                        "print('bytecode there:', os.path.exists(pyc), pyc, flush=True)\n")
    torchrun.chmod(0o755)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1",
           "MEGATRON_LAUNCH_CACHE_DIR": str(tmp_path / "cache")}
    argv = [sys.executable, "-m", "launcher", "toy", "--gpus-per-node", "1", "--set", f"torchrun={torchrun}",
            "--set", f"run_root={tmp_path / 'runs'}", "--megatron-path", str(checkout), "--no-doctor"]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "bytecode there: True" in result.stdout, result.stdout + result.stderr
    if startup.installation_has_bytecode():  # torch's installed bytecode is read: the checkout's goes beside it
        assert f"{checkout / 'megatron' / 'core' / '__pycache__'}" in result.stdout
    else:  # the launcher's cache, not the checkout
        assert f"{tmp_path / 'cache' / 'pycache'}" in result.stdout
