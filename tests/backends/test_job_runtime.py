"""The Python and torchrun a job runs are the launcher's decision, said in the script: on Slurm's nodes as they are,
this launcher's Python and the torchrun beside it (not whatever the submitting shell has on PATH); in a container,
the image's; `launcher.torchrun` always wins."""

from __future__ import annotations

import sys
from pathlib import Path

from slurm_support import render_preset

from launcher.pipeline.runtime import runtime_for

VENV_BIN = str(Path(sys.executable).parent)


def fake_venv(tmp_path: Path, with_torchrun: bool) -> str:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.touch(mode=0o755)
    if with_torchrun:
        (bin_dir / "torchrun").touch(mode=0o755)
    return str(python)


def test_slurm_on_bare_nodes_runs_this_pythons_torchrun(tmp_path):
    python = fake_venv(tmp_path, with_torchrun=True)
    runtime = runtime_for("torchrun", slurm=True, python=python)
    assert (runtime.python, runtime.torchrun) == (python, str(Path(python).parent / "torchrun"))


def test_without_a_torchrun_beside_this_python_both_come_from_the_nodes_path(tmp_path):
    runtime = runtime_for("torchrun", slurm=True, python=fake_venv(tmp_path, with_torchrun=False))
    assert (runtime.python, runtime.torchrun) == ("python3", "torchrun") and "nodes' PATH" in runtime.how


def test_a_container_runs_the_images_python_and_torchrun(tmp_path):
    runtime = runtime_for("torchrun", slurm=True, container_image="nvcr.io/nvidia/pytorch:26.04-py3",
                          python=fake_venv(tmp_path, with_torchrun=True))
    assert (runtime.python, runtime.torchrun) == ("python3", "torchrun") and "container image" in runtime.how


def test_launcher_torchrun_names_the_torchrun(tmp_path):
    runtime = runtime_for("/opt/tr/torchrun", slurm=True, python=fake_venv(tmp_path, with_torchrun=True))
    assert runtime.torchrun == "/opt/tr/torchrun"


def test_the_batch_script_runs_and_names_the_resolved_python_and_torchrun():
    _, text = render_preset("345m", ("optimizer=muon",))
    lines = text.splitlines()
    assert f"    {VENV_BIN}/torchrun \\" in lines and "    torchrun \\" not in lines
    assert f' {VENV_BIN}/python -c "$node_check" ' in text and ' python3 -c "$node_check"' not in text
    assert f"# runs python {VENV_BIN}/python, torchrun {VENV_BIN}/torchrun (this launcher's Python and the " \
           "torchrun beside it)" in lines


def test_a_container_batch_script_runs_the_images_python_and_torchrun():
    _, text = render_preset("345m", ("optimizer=muon", "slurm.container_image=nvcr.io/nvidia/pytorch:26.04-py3"))
    assert "    torchrun \\" in text.splitlines() and ' python3 -c "$node_check" ' in text
    assert "# runs python python3, torchrun torchrun (the container image's, from its PATH)" in text
