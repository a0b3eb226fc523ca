"""scripts/bootstrap.sh on a fresh copy of the checkout, as the README's first command."""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to list the checkout's files")
def test_bootstrap_is_quiet_and_says_how_to_use_launch(tmp_path):
    copy = tmp_path / "megatron-launch"
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        source = REPO / name
        if source.is_file() and not name.startswith("third_party/"):
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    result = subprocess.run(["bash", "scripts/bootstrap.sh"], cwd=copy, capture_output=True, text=True,
                            timeout=600, check=False)
    if result.returncode != 0 and "Python 3.12 not found" in result.stderr:
        pytest.skip("no Python 3.12 on this machine")
    assert result.returncode == 0, result.stderr[-2000:]
    output = result.stdout + result.stderr
    assert "Editable installation" not in output and "*****" not in output  # setuptools' warning box
    assert "source .venv/bin/activate" in result.stdout
    listed = subprocess.run([str(copy / ".venv/bin/launch"), "list"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "175b" in listed.stdout


def test_without_python_3_12_bootstrap_says_how_to_get_it_and_makes_nothing(tmp_path):
    """A PATH with bash and dirname only: no python3.12, no uv, no pyenv, no python3."""
    copy = tmp_path / "megatron-launch"
    (copy / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "bootstrap.sh", copy / "scripts" / "bootstrap.sh")
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("bash", "dirname"):
        (tools / tool).symlink_to(shutil.which(tool))
    result = subprocess.run(["bash", "scripts/bootstrap.sh"], cwd=copy, capture_output=True, text=True,
                            env={"PATH": str(tools), "HOME": str(tmp_path)}, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith("error: Python 3.12 not found") and "hint: uv python install 3.12" in result.stderr
    assert "command not found" not in result.stderr
    assert not (copy / ".venv").exists()
