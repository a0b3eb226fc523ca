"""A real (non-editable) install works: built from a clean copy of the tree, installed into a throwaway
directory, and run from another directory, `launch` finds its shipped presets, argument catalog and templates."""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.install


def clean_copy(destination: Path) -> Path:
    """The files git would put in a fresh clone of this working tree (tracked and new, not ignored ones)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if name.startswith("third_party/") or not (source.exists() or source.is_symlink()):
            continue  # the Megatron checkout is not part of the package; deleted files are not in a clone
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)
    return destination


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    if shutil.which("git") is None:
        pytest.skip("needs git to list the tree's files")
    source = clean_copy(tmp_path_factory.mktemp("clone"))
    target = tmp_path_factory.mktemp("site")
    # Without network, build with this environment's setuptools when it has one.
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *isolation,
                           "--target", str(target), str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return target


def run_installed(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("MEGATRON_LM_PATH", None)
    return subprocess.run([sys.executable, str(site / "bin" / "launch"), *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def test_installed_launcher_is_the_one_that_runs(installed, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(installed)}
    where = subprocess.run([sys.executable, "-c", "import launcher; print(launcher.__file__)"], env=env,
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert Path(where.strip()).is_relative_to(installed)


def test_installed_list_shows_the_shipped_presets(installed, tmp_path):
    done = run_installed(installed, "list", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for name in ("toy", "345m", "175b"):
        assert f"\n{name} " in done.stdout


@pytest.mark.parametrize("preset", ["175b", "toy"])
def test_installed_dry_run_works_from_another_directory(installed, tmp_path, preset):
    done = run_installed(installed, preset, "--dry-run", "--megatron-path", "/opt/megatron-lm", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"# megatron-launch: preset {preset} ") and "torchrun" in done.stdout


def test_installed_slurm_script_renders(installed, tmp_path):
    done = run_installed(installed, "345m", "--slurm", "--dry-run", "--megatron-path", "/opt/megatron-lm",
                         cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("#!/bin/bash") and "#SBATCH" in done.stdout
