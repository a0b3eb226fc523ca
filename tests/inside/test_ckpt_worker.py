"""The persistent checkpoint writer starts with its writing code imported (launcher/inside/ckpt_worker.py), through
the training processes' start-up hook, and then runs Megatron's own loop."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.megatron

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "launcher" / "inside" / "site"

PROGRAM = """
import pickle, sys
from megatron.core.dist_checkpointing.strategies import async_utils
from launcher.inside import ckpt_worker
caller = async_utils.PersistentAsyncCaller
print("target:", pickle.loads(pickle.dumps(caller.async_loop)).__module__)  # what the writer process is given
if len(sys.argv) > 1:
    raise SystemExit(0)
writer = "megatron.core.dist_checkpointing.strategies.filesystem_async"
print("imported before:", writer in sys.modules)
def megatrons_loop(*args):
    return ("megatron's loop", args, writer in sys.modules)
setattr(caller, ckpt_worker.UPSTREAM_ATTR, staticmethod(megatrons_loop))
print(caller.async_loop(0, "queue"))
"""


def run(env: dict[str, str], *argv: str) -> list[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("MEGATRON_LAUNCH_")}
    full.update({"PYTHONPATH": os.pathsep.join([str(SITE), str(REPO)]), **env})
    result = subprocess.run([sys.executable, "-c", PROGRAM, *argv], env=full, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.splitlines()


def test_the_writer_imports_its_code_when_it_starts_then_runs_megatrons_loop():
    assert run({"MEGATRON_LAUNCH_CKPT_WORKER": "preimport"}) == [
        "target: launcher.inside.ckpt_worker",
        "imported before: False",
        "(\"megatron's loop\", (0, 'queue'), True)",
    ]


def test_without_the_variable_the_writer_is_megatrons():
    assert run({}, "target only") == ["target: megatron.core.dist_checkpointing.strategies.async_utils"]
