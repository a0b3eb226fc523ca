import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MEGATRON = "/opt/megatron-lm"  # a fixed path, so printed commands are the same on every machine


@pytest.fixture
def launch():
    """Run the CLI as a user types it: a subprocess, returning (exit code, stdout, stderr)."""

    def run(*args: str, env: dict | None = None, cwd: str | Path | None = None):
        full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        full_env.pop("MEGATRON_LM_PATH", None)
        for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"):  # the header says what they make the
            full_env.pop(name, None)  # launcher add, so printed commands would depend on the machine
        proc = subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True,
                              env=full_env, cwd=cwd or REPO, timeout=120)
        return proc.returncode, proc.stdout, proc.stderr

    return run


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


RUN_STAMP = re.compile(r"-\d{8}T\d{6}Z(-\d+)?\b")


def without_run_stamp(text: str) -> str:
    """A run directory's UTC timestamp (runs/345m-20261201T132904Z) replaced: the launch decides it, not the test;
    and the free space of its file system, which each command reads and other writers move in between."""
    return FREE_SPACE.sub("has N free", RUN_STAMP.sub("-YYYYMMDDTHHMMSSZ", text))


FREE_SPACE = re.compile(r"has [0-9.]+ [kMGTP]?B free")


FIXTURE_LOGS = Path(__file__).parent / "fixtures" / "logs"


@pytest.fixture(autouse=True)
def no_secret_remembered_by_another_test():
    """Secrets a test's command remembered stay with that test: a value remembered elsewhere (e.g. "False") would
    be redacted in this one's output."""
    from launcher import redaction

    redaction.forget_all()
    yield
    redaction.forget_all()


@pytest.fixture
def log_fixture():
    """Lines of a recorded Megatron log in tests/fixtures/logs (see its README)."""

    def read(name: str) -> list[str]:
        return (FIXTURE_LOGS / name).read_text(errors="replace").splitlines()

    return read


# What each marker needs installed: a marked test skips cleanly without it (CI with every extra runs them all).
MARKER_NEEDS = {"megatron": ("megatron.training", "torch"), "matplotlib": ("matplotlib",)}


# Under pytest-xdist (scripts/test.sh runs `-n 2 --dist loadgroup`) a group runs on one worker, in file order.
# Each file is one group unless it names its own, so a module's fixtures are built once and its tests keep their
# order; every test of the local Slurm clusters is one group, so no two of them share the machine at once.
SERIAL_MARKERS = ("slurm",)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config, items):
    import importlib.util

    missing = {marker: [m for m in modules if importlib.util.find_spec(m) is None]
               for marker, modules in MARKER_NEEDS.items()}
    for item in items:
        for marker, absent in missing.items():
            if absent and item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=f"needs {', '.join(absent)} (marker {marker})"))
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue  # a file that names its own group (files sharing a session fixture)
        serial = next((marker for marker in SERIAL_MARKERS if item.get_closest_marker(marker)), None)
        item.add_marker(pytest.mark.xdist_group(serial or item.nodeid.split("::", 1)[0]))


@pytest.fixture(autouse=True)
def no_bytecode_settings_of_this_machine(monkeypatch):
    """PYTHONDONTWRITEBYTECODE (set on some machines) makes a job keep its bytecode in the launcher's cache
    (pipeline/startup.py): printed commands and golden files must not depend on the machine they are made on."""
    for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"):
        monkeypatch.delenv(name, raising=False)


ATTENTION_VARIABLES = ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN")


@pytest.fixture(autouse=True)
def no_attention_variables_left_by_another_test():
    """Megatron's model build writes NVTE_*_ATTN into os.environ (language_module._set_attention_backend), and the
    launcher judges the environment a launch inherits: a model built in-process by one test must not make another
    test's job look as if the user had exported them."""
    saved = {name: os.environ.pop(name) for name in ATTENTION_VARIABLES if name in os.environ}
    yield
    for name in ATTENTION_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update(saved)
