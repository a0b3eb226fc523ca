"""`launch fetch-megatron`: the pinned commit from a git repository or a tarball (local sources only, never the
internet), remembered in the config file that later launches read; dry-runs warn when the checkout is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from launcher import MEGATRON_COMMIT
from launcher.megatron import pin

REPO = Path(__file__).resolve().parents[2]
REAL_CHECKOUT = Path(os.environ.get("MEGATRON_LM_PATH") or REPO / "third_party" / "megatron-lm")


def launch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """The CLI from a directory that is not the repository, with its own config and data directories."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_DATA_HOME": str(tmp_path / "data"), "HOME": str(tmp_path)}
    for name in ("MEGATRON_LM_PATH", "MEGATRON_LAUNCH_MEGATRON_SOURCE"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def commit_tarball(tmp_path: Path) -> Path:
    """What GitHub's archive/<commit>.tar.gz holds: one folder Megatron-LM-<commit>/ with the sources."""
    tree = tmp_path / "src" / f"Megatron-LM-{MEGATRON_COMMIT}"
    (tree / "examples").mkdir(parents=True, exist_ok=True)
    (tree / "pretrain_gpt.py").write_text("print('pretrain')\n")
    (tree / "examples" / "run_simple_mcore_train_loop.py").write_text("print('loop')\n")
    archive = tmp_path / f"{MEGATRON_COMMIT}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree, arcname=tree.name)
    return archive


def test_tarball_fetch_lands_in_the_data_directory_and_is_remembered(tmp_path):
    done = launch(tmp_path, "fetch-megatron", "--source", str(commit_tarball(tmp_path)))
    assert done.returncode == 0, done.stderr
    where = tmp_path / "data" / "megatron-launch" / f"megatron-lm-{MEGATRON_COMMIT[:7]}"
    assert done.stdout.splitlines()[0] == f"Megatron-LM {MEGATRON_COMMIT[:12]} is in {where} (tarball)"
    assert (where / "pretrain_gpt.py").read_text() == "print('pretrain')\n"
    config = tmp_path / "config" / "megatron-launch" / "config.json"
    assert json.loads(config.read_text()) == {"megatron_path": str(where)}
    assert [p.name for p in where.parent.iterdir()] == [where.name]  # no staging directory left behind
    # what it says comes before it: every source of the lookup, the submodule too
    said = done.stdout.splitlines()[-1]
    assert all(s in said for s in ("--megatron-path", "launcher.megatron_path", "$MEGATRON_LM_PATH", "submodule"))
    assert (str(pin.SUBMODULE) in said) == (pin.SUBMODULE / "pretrain_gpt.py").is_file()
    # later launches use it (a populated submodule of this source tree comes first): the dry-run names its
    # pretrain_gpt.py and warns about nothing
    used = pin.SUBMODULE if (pin.SUBMODULE / "pretrain_gpt.py").is_file() else where
    dry = launch(tmp_path, "345m", "--dry-run")
    assert dry.returncode == 0 and f"  {used}/pretrain_gpt.py \\" in dry.stdout, dry.stderr
    assert "does not exist here" not in dry.stderr
    doctor = launch(tmp_path, "doctor", "--format", "json")
    checkout = next(f for f in json.loads(doctor.stdout) if f["check"] == "megatron-lm checkout")
    assert checkout["status"] == "ok" and checkout["detail"].startswith(f"{used} at {MEGATRON_COMMIT[:12]}")
    # a second fetch into the same place is a no-op, not an error
    again = launch(tmp_path, "fetch-megatron", "--source", str(commit_tarball(tmp_path)))
    assert again.returncode == 0 and again.stdout.startswith(f"Megatron-LM {MEGATRON_COMMIT[:12]} is already in ")


@pytest.mark.skipif(not (REAL_CHECKOUT / ".git").exists(), reason="needs a local git checkout of Megatron-LM")
def test_git_fetch_checks_out_the_pinned_commit_into_the_given_directory(tmp_path):
    target = tmp_path / "mlm"
    done = launch(tmp_path, "fetch-megatron", str(target), "--source", str(REAL_CHECKOUT))
    assert done.returncode == 0, done.stderr
    head = subprocess.run(["git", "-C", str(target), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert head.stdout.strip() == MEGATRON_COMMIT
    assert (target / "pretrain_gpt.py").is_file()


def test_a_repository_without_the_pinned_commit_is_refused_and_leaves_nothing(tmp_path):
    source = tmp_path / "other"
    source.mkdir()
    git = ["git", "-C", str(source), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(source)], check=True)
    (source / "pretrain_gpt.py").write_text("")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    done = launch(tmp_path, "fetch-megatron", str(tmp_path / "mlm"), "--source", str(source))
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {source} does not have the pinned commit {MEGATRON_COMMIT[:12]}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]  # no half-made checkout, no config


def test_missing_checkout_is_a_warning_in_dry_runs_and_slurm_scripts(tmp_path):
    absent = tmp_path / "nowhere"
    expected = (f"warning: {absent}/pretrain_gpt.py does not exist here: the command needs a Megatron-LM checkout "
                f"of {MEGATRON_COMMIT[:12]} there; run `launch fetch-megatron`")
    for extra in ([], ["--slurm", "--dry-run"], ["--slurm"]):
        done = launch(tmp_path, "345m", "--dry-run" if not extra else "--nodes", *([] if not extra else ["1"]),
                      "--megatron-path", str(absent), *extra)
        assert done.returncode == 0, done.stderr
        assert expected in done.stderr, (extra, done.stderr)
    data = json.loads(launch(tmp_path, "345m", "--dry-run", "--format", "json", "--megatron-path",
                             str(absent)).stdout)
    assert any(w.startswith(f"{absent}/pretrain_gpt.py does not exist here") for w in data["warnings"])


def test_megatron_path_falls_back_to_the_remembered_checkout(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("MEGATRON_LM_PATH", raising=False)
    monkeypatch.setattr(pin, "SUBMODULE", tmp_path / "empty-submodule")
    assert pin.megatron_path(None, None) == tmp_path / "empty-submodule"
    (tmp_path / "megatron-launch").mkdir()
    (tmp_path / "megatron-launch" / "config.json").write_text(json.dumps({"megatron_path": "/opt/mlm"}))
    assert pin.megatron_path(None, None) == Path("/opt/mlm")
    assert pin.megatron_path("/given", None) == Path("/given")
    monkeypatch.setenv("MEGATRON_LM_PATH", "/from/env")
    assert pin.megatron_path(None, None) == Path("/from/env")


@pytest.mark.skipif((pin.SUBMODULE / "pretrain_gpt.py").is_file(), reason="this clone's submodule is populated")
def test_a_clone_with_an_empty_submodule_is_told_the_git_command_that_fills_it(tmp_path):
    dry = launch(tmp_path, "345m", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    fill = f"git -C {REPO} submodule update --init third_party/megatron-lm"
    warning = next(line for line in dry.stderr.splitlines() if "does not exist here" in line)
    assert "launch fetch-megatron" in warning and warning.endswith(fill)
    doctor = launch(tmp_path, "doctor")
    assert fill in doctor.stdout
    # a checkout named elsewhere is not this clone's submodule: no git command for it
    elsewhere = launch(tmp_path, "345m", "--dry-run", "--megatron-path", str(tmp_path / "absent"))
    assert "does not exist here" in elsewhere.stderr and "submodule update" not in elsewhere.stderr
