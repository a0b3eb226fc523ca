"""An option accepted is an option acted on: given where it would do nothing, it is refused (exit 2, error: and
hint:, every such option at once) before anything is written; --format json gives JSON wherever it is accepted."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.conftest import MEGATRON


@pytest.mark.parametrize(("argv", "option", "why"), [
    (["345m", "--format", "json"], "--format", "(json) for a launch here"),
    (["345m", "--preflight", "--format", "json"], "--format", "(json) for a launch here"),
    (["345m", "--check", "--submit"], "--submit", "with --check"),
    (["345m", "--rehearse", "--slurm", "--chain", "2"], "--chain", "with --check"),
    (["345m", "--slurm", "--no-doctor"], "--no-doctor", "for a cluster job"),
    (["345m", "--k8s", "--dry-run", "--no-doctor"], "--no-doctor", "for a cluster job"),
    (["345m", "--preflight", "--no-doctor"], "--no-doctor", "with --preflight"),
    (["plan", "345m", "--measure-iters", "3"], "--measure-iters", "without --measure"),
    (["plan", "345m", "--measure-layouts", "2"], "--measure-layouts", "without --measure"),
    (["plan", "345m", "--no-doctor"], "--no-doctor", "without --measure"),
    (["plan", "345m", "--megatron-path", MEGATRON], "--megatron-path", "without --measure"),
    (["plan", "345m", "--measurements", "m.json"], "--measurements", "without --refit"),
    (["plan", "345m", "--measure", "--top", "3"], "--top", "with --measure"),
    (["plan", "345m", "--measure", "--tflops", "300"], "--tflops", "with --measure"),
    (["plan", "345m", "--measure", "--tokens", "1B"], "--tokens", "with --measure"),
    (["plan", "345m", "--measure", "--ckpt-write-gbps", "5"], "--ckpt-write-gbps", "with --measure"),
    (["prepare-data", "--build-index", "345m", "--tokenizer", "byte"], "--tokenizer", "with --build-index"),
    (["prepare-data", "--build-index", "345m", "--workers", "2"], "--workers", "with --build-index"),
    (["prepare-data", "--build-index", "345m", "--text-unit", "line"], "--text-unit", "with --build-index"),
    (["prepare-data", "in.jsonl", "--output-prefix", "out", "--tokenizer", "byte", "--set", "lr=1e-4"], "--set",
     "without --build-index"),
    (["prepare-data", "in.jsonl", "--output-prefix", "out", "--tokenizer", "byte", "--nodes", "2"], "--nodes",
     "without --build-index"),
])
def test_an_option_that_would_do_nothing_is_refused(launch, tmp_path, argv, option, why):
    code, out, err = launch(*argv, cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": ""})
    said = json.loads(out)["error"] if "json" in argv else err
    assert code == 2 and f"{option} does nothing {why}" in said, out + err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


def test_every_idle_option_is_named_at_once(launch, tmp_path):
    code, _, err = launch("plan", "345m", "--no-doctor", "--measure-iters", "3", "--measurements", "m.json")
    assert code == 2
    assert [line.split(" does nothing")[0] for line in err.splitlines() if line.startswith("error:")] == [
        "error: --measure-iters", "error: --no-doctor", "error: --measurements"]


@pytest.mark.parametrize("argv", [
    ["345m", "--dry-run", "--format", "json"],
    ["345m", "--slurm", "--dry-run", "--format", "json"],
    ["345m", "--dry-run", "--no-doctor"],
], ids=["dry-run-json", "slurm-json", "dry-run-no-doctor"])
def test_launch_options_that_act_are_accepted(launch, tmp_path, argv):
    code, _, err = launch(*argv, "--megatron-path", MEGATRON, "--set", f"run_root={tmp_path}")
    assert code == 0, err


@pytest.mark.parametrize("argv", [["--top", "2"], ["--tokens", "1B"], ["--measure-iters", "10"]],
                         ids=["top", "tokens", "measure-iters-default"])
def test_plan_options_that_act_are_accepted(launch, argv):
    code, _, err = launch("plan", "345m", *argv)
    assert code == 0, err


@pytest.mark.parametrize("extra", [[], ["--rehearse"], ["--preflight"]], ids=["check", "rehearse", "preflight"])
def test_check_of_a_job_megatron_is_not_asked_about_is_json_when_asked(launch, extra):
    code, out, err = launch("toy", "--check", *extra, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["launcher"]["ok"] is True and data["megatron"]["ok"] is None
    assert "takes no Megatron flags" in data["megatron"]["not_asked"]
    assert ("rehearsal" in data) == bool(extra == ["--rehearse"])


def test_a_rehearsal_not_run_is_said(launch):
    code, out, err = launch("toy", "--rehearse")
    assert code == 0, err
    assert "rehearsal: not run: entry simple_loop takes no Megatron flags" in out


def _fake_kubectl(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "kubectl"
    script.write_text("#!/bin/bash\necho 'jobset.jobset.x-k8s.io/name serverside-applied'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir


@pytest.mark.parametrize("submit", [False, True], ids=["write", "submit"])
def test_a_kubernetes_job_written_or_applied_with_format_json_is_one_json_object(launch, tmp_path, submit):
    env = {"PATH": f"{_fake_kubectl(tmp_path)}:{os.environ['PATH']}"}
    code, out, err = launch("345m", "--k8s", *(["--submit"] if submit else []), "--format", "json",
                            "--set", f"run_root={tmp_path}/runs", env=env)
    assert code == 0, err
    data = json.loads(out)
    manifest = Path(data["manifest_path"])
    assert manifest.is_file() and manifest.parent == Path(data["run_dir"]) and data["dry_run"] is False
    assert data["apply"][-1] == str(manifest)
    assert len(data["submitted"]) == (1 if submit else 0)
    if submit:
        assert data["kubectl"] == "jobset.jobset.x-k8s.io/name serverside-applied"


def test_completion_names_with_a_shell_is_refused(launch):
    code, _, err = launch("completion", "bash", "--names", "presets")
    assert code == 2 and "--names prints names, not a bash script" in err
    code, out, err = launch("completion", "--names", "presets")
    assert code == 0 and "345m" in out.split(), err


def test_a_chain_given_twice_differently_is_refused(launch, tmp_path):
    code, _, err = launch("345m", "--slurm", "--dry-run", "--chain", "2", "--set", "slurm.chain=3",
                          "--set", f"run_root={tmp_path}")
    assert code == 2 and "--chain 2 and --set slurm.chain=3 disagree" in err, err
    code, _, err = launch("345m", "--slurm", "--dry-run", "--chain", "3", "--set", "slurm.chain=3",
                          "--set", f"run_root={tmp_path}", "--megatron-path", MEGATRON)
    assert code == 0, err


def test_a_rehearsal_not_run_for_a_refused_job_is_in_the_json(launch):
    code, out, err = launch("345m", "--rehearse", "--set", "train_iters=0", "--format", "json")
    assert code == 2, err
    assert json.loads(out)["rehearsal"] == {"ok": None, "not_run": "the launcher or Megatron refused the job"}


def test_a_megatron_path_set_beside_the_flag_is_said(launch, tmp_path):
    code, out, err = launch("345m", "--dry-run", "--megatron-path", MEGATRON, "--set", f"megatron_path={tmp_path}")
    assert code == 0, err
    assert f"# warning: --set megatron_path does nothing for this job: --megatron-path decides ({MEGATRON})" in out
