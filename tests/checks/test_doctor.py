"""`launch doctor` and the pre-flight subset, each fault planted in a throwaway environment: a PyPI-style
`apex` on PYTHONPATH, a missing or foreign Megatron-LM checkout (a tmp git repo), a PATH without the
dataset-helper build tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from launcher import MEGATRON_COMMIT
from launcher.checks.doctor import (
    Context,
    check_cuda_connections,
    check_helper_build,
    check_megatron_checkout,
    job_findings,
)
from launcher.megatron.pin import SUBMODULE, Kernels

REPO = Path(__file__).resolve().parents[2]


def doctor(*args: str, pythonpath: list[Path] = (), env: dict | None = None) -> tuple[int, dict[str, dict]]:
    """Run `launch doctor --format json` as a user would; findings keyed by check name (first of each)."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), str(REPO)])
    proc = subprocess.run([sys.executable, "-m", "launcher", "doctor", "--format", "json", *args],
                          check=False, capture_output=True, text=True, env=full_env, cwd=REPO, timeout=120)
    findings: dict[str, dict] = {}
    for finding in json.loads(proc.stdout):
        findings.setdefault(finding["check"], finding)
    return proc.returncode, findings


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}).stdout.strip()


@pytest.fixture
def foreign_checkout(tmp_path: Path) -> tuple[Path, str]:
    """A git repo that looks like Megatron-LM (it has pretrain_gpt.py) at some other commit."""
    repo = tmp_path / "Megatron-LM"
    repo.mkdir()
    (repo / "pretrain_gpt.py").write_text("# not the pinned Megatron\n")
    git(repo, "init", "-q")
    git(repo, "add", "pretrain_gpt.py")
    git(repo, "commit", "-q", "-m", "some other commit")
    return repo, git(repo, "rev-parse", "HEAD")


def test_pypi_apex_is_told_apart_from_nvidia_apex(tmp_path):
    fake = tmp_path / "site"
    (fake / "apex").mkdir(parents=True)
    # The PyPI project `apex` 0.9.10dev is a Pyramid toolkit: views and models, no fused kernels.
    (fake / "apex" / "__init__.py").write_text('"""Pyramid toolkit (Velruse, Flash Messages, CSRF)."""\n')
    (fake / "apex" / "views.py").write_text("def login(request):\n    return {}\n")
    rc, findings = doctor(pythonpath=[fake])
    assert rc == 1
    apex = findings["apex"]
    assert apex["status"] == "fail"
    assert "not NVIDIA apex" in apex["detail"] and str(fake / "apex") in apex["detail"]
    assert "pip uninstall -y apex" in apex["fix"]


def test_nvidia_apex_without_cuda_extensions_is_a_warning(tmp_path):
    site = tmp_path / "site"
    (site / "apex" / "normalization").mkdir(parents=True)
    (site / "apex" / "__init__.py").write_text("")
    (site / "apex" / "normalization" / "fused_layer_norm.py").write_text("")
    (site / "amp_C.py").write_text("")  # one extension present, the others missing
    _, findings = doctor(pythonpath=[site])
    apex = findings["apex"]
    assert apex["status"] == "warn"
    assert "fused_weight_gradient_mlp_cuda" in apex["detail"] and "amp_C:" not in apex["detail"]
    assert "--cuda_ext" in apex["fix"]


def test_missing_megatron_checkout_fails_with_the_fetch_command(tmp_path):
    rc, findings = doctor("--megatron-path", str(tmp_path / "nowhere"))
    assert rc == 1
    checkout = findings["megatron-lm checkout"]
    assert checkout["status"] == "fail"
    assert str(tmp_path / "nowhere") in checkout["detail"]
    assert "launch fetch-megatron" in checkout["fix"] and MEGATRON_COMMIT[:12] in checkout["fix"]


def test_checkout_at_another_commit_fails_naming_both_commits(foreign_checkout):
    repo, head = foreign_checkout
    rc, findings = doctor(env={"MEGATRON_LM_PATH": str(repo)})
    assert rc == 1
    checkout = findings["megatron-lm checkout"]
    assert checkout["status"] == "fail"
    assert head[:12] in checkout["detail"] and MEGATRON_COMMIT[:12] in checkout["detail"]
    assert f"git -C {repo} fetch origin && git -C {repo} checkout {MEGATRON_COMMIT[:12]}" == checkout["fix"]


def test_checkout_that_is_not_a_git_repo_is_a_warning(tmp_path):
    (tmp_path / "pretrain_gpt.py").write_text("")
    (finding,) = check_megatron_checkout(Context(megatron_path=tmp_path))
    assert finding.status == "warn" and "not a git checkout" in finding.detail


def test_copy_inside_another_repository_is_not_taken_for_that_repositorys_commit(foreign_checkout):
    repo, _ = foreign_checkout
    copy = repo / "third_party" / "megatron-lm"  # Megatron's files copied into a project's own git tree
    copy.mkdir(parents=True)
    (copy / "pretrain_gpt.py").write_text("")
    (finding,) = check_megatron_checkout(Context(megatron_path=copy))
    assert finding.status == "warn" and "not a git checkout of its own" in finding.detail


def test_checkout_git_refuses_to_read_names_gits_reason(foreign_checkout, monkeypatch):
    repo, _ = foreign_checkout
    monkeypatch.setenv("GIT_DIR", str(repo / "nowhere"))  # git fails inside the checkout, as for another owner
    (finding,) = check_megatron_checkout(Context(megatron_path=repo))
    assert finding.status == "warn" and f"git cannot read {repo}" in finding.detail


@pytest.mark.skipif(not (SUBMODULE / ".git").exists(), reason="the Megatron-LM submodule is not checked out")
def test_pinned_submodule_is_ok():
    (finding,) = check_megatron_checkout(Context(megatron_path=SUBMODULE))
    assert finding.status == "ok", finding


def test_helper_build_needs_make_and_gxx_on_path(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python3").symlink_to(sys.executable)
    findings = check_helper_build(Context(megatron_path=tmp_path, env={"PATH": str(bare)}))
    failed = {f.detail for f in findings if f.status == "fail"}
    assert "`make` not found on PATH" in failed
    assert "`g++` not found on PATH" in failed
    assert "`python3-config` not found on PATH" in failed


def test_helper_build_catches_python3_config_of_another_python(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python3").symlink_to(sys.executable)
    config = bare / "python3-config"
    config.write_text("#!/bin/sh\necho .cpython-39-x86_64-linux-gnu.so\n")
    config.chmod(0o755)
    findings = check_helper_build(Context(megatron_path=tmp_path, env={"PATH": str(bare)}))
    (mismatch,) = [f for f in findings if "python3-config" in f.detail]
    assert mismatch.status == "fail" and ".cpython-39-x86_64-linux-gnu.so" in mismatch.detail


def test_cuda_device_max_connections_must_be_one_for_tensor_parallel():
    (bad,) = check_cuda_connections(Context(env={"CUDA_DEVICE_MAX_CONNECTIONS": "8"}), needs_one=True)
    assert bad.status == "fail" and "'8'" in bad.detail
    (fine,) = check_cuda_connections(Context(env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"}), needs_one=True)
    assert fine.status == "ok"
    (unset,) = check_cuda_connections(Context(env={}), needs_one=False)
    assert unset.status == "ok"


def test_job_findings_judge_the_runs_own_flags(tmp_path):
    """Megatron's defaults need TE and apex's kernels; the flags for a machine without them pass."""
    from launcher.pipeline import resolve
    from launcher.pipeline.preset import load_preset

    ctx = Context(megatron_path=tmp_path, env=dict(os.environ))
    with_kernels = resolve.resolve(load_preset("345m"), 1, 1, kernels=Kernels(True, True, "preset"))
    defaults = {f.check: f for f in job_findings(with_kernels, ctx) if f.status == "fail"}
    plain = resolve.resolve(load_preset("345m"), 1, 1, kernels=Kernels(False, False, "preset"))
    without = [f for f in job_findings(plain, ctx) if f.check in ("apex", "transformer-engine") and f.status == "fail"]
    has_te = any((Path(p) / "transformer_engine").exists() for p in sys.path if p)
    if not has_te:
        assert "transformer-engine" in defaults
        assert "transformer_impl: local" in defaults["transformer-engine"].fix
    assert not without


def test_doctor_is_fast_and_never_imports_torch():
    code = ("import sys, time\n"
            "t = time.monotonic()\n"
            "from launcher.checks import doctor\n"
            "doctor.run_checks(doctor.Context())\n"
            "assert 'torch' not in sys.modules, 'doctor imported torch'\n"
            "print(time.monotonic() - t)\n")
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout) < 5.0


def test_doctor_text_output_has_a_status_per_line_and_a_summary():
    proc = subprocess.run([sys.executable, "-m", "launcher", "doctor"], check=False, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    lines = [line for line in proc.stdout.splitlines() if not line.startswith(" ")]
    assert lines[-1] in ("doctor: ok", "doctor: warn", "doctor: fail")
    assert all(line.split()[0] in ("ok", "warn", "fail") for line in lines[:-1])
    assert proc.returncode == (1 if lines[-1] == "doctor: fail" else 0)


def test_launch_stops_before_torchrun_when_preflight_fails(tmp_path):
    """A planted fault (no `make` on PATH) stops `launch PRESET` with the fix, before any process starts."""
    checkout = tmp_path / "megatron"
    checkout.mkdir()
    (checkout / "pretrain_gpt.py").write_text("raise SystemExit('must not run')\n")
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python3").symlink_to(sys.executable)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": str(bare), "MEGATRON_LM_PATH": str(checkout)}
    workdir = tmp_path / "work"
    workdir.mkdir()
    proc = subprocess.run([sys.executable, "-m", "launcher", "345m", "--gpus-per-node", "1"], check=False,
                          capture_output=True, text=True, env=env, cwd=workdir, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "error: dataset helpers: `make` not found on PATH" in proc.stderr
    assert "--no-doctor" in proc.stderr
    assert "warning: megatron-lm checkout" in proc.stderr  # not a git checkout: said, but not fatal
    assert "must not run" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(workdir.iterdir()) == []  # no run directory was started


@pytest.mark.megatron
def test_versions_come_from_megatron_cores_own_metadata(monkeypatch):
    """Python and torch requirements are read from megatron-core's metadata (packaging compares them)."""
    import importlib.metadata

    from launcher.checks import doctor as doc

    python, torch = doc._megatron_core_requirements()
    meta = importlib.metadata.distribution("megatron-core").metadata
    assert str(python) == meta["Requires-Python"]
    assert torch.contains("2.6.0") and not torch.contains("2.5.1")
    monkeypatch.setattr(doc, "_version", lambda name: "2.5.1+cu121" if name == "torch" else None)
    (finding,) = doc.check_torch(Context())
    assert finding.status == "fail" and "needs torch>=2.6" in finding.detail
    monkeypatch.setattr(doc, "_version", lambda name: "2.14.1+cu130" if name == "torch" else None)
    assert doc.check_torch(Context())[0].status == "ok"  # the local tag (+cu130) does not confuse it


def test_training_path_puts_this_interpreters_python3_first_and_nothing_else(tmp_path):
    from launcher.backends.local import training_path

    path = training_path("/usr/bin:/bin")
    first = path.split(os.pathsep)[0]
    assert path.endswith("/usr/bin:/bin") and training_path(path) == path
    assert sorted(os.listdir(first)) in (["python3"], ["python3", "python3-config"])  # torchrun: the user's PATH
    ran = subprocess.run([os.path.join(first, "python3"), "-c", "import sys; print(sys.prefix)"],
                         capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == sys.prefix  # the venv itself, not its base Python


def test_doctor_from_a_venv_that_is_not_activated_gives_one_consistent_fix(tmp_path):
    """`.venv/bin/launch doctor` with PATH lacking the venv: the training's python3 is this interpreter (the
    launcher puts it first), so there is no 'activate' advice and no pip for some other python3."""
    code, found = doctor(env={"PATH": "/usr/bin:/bin"})
    helpers = found["dataset helpers"]
    assert "activate" not in helpers["fix"] and "is not this interpreter" not in helpers["detail"]
    if helpers["status"] != "ok" and "pybind11" in helpers["detail"]:
        assert helpers["fix"].startswith(sys.executable)


def helpers_checkout(root: Path, built: bool) -> Path:
    """A checkout's dataset folder with helpers.cpp, and a current build of it when `built`."""
    datasets = root / "megatron" / "core" / "datasets"
    datasets.mkdir(parents=True)
    (datasets / "helpers.cpp").write_text("// the source\n")
    (datasets / "Makefile").write_text("default:\n")
    if built:
        (datasets / f"helpers_cpp{sysconfig.get_config_var('EXT_SUFFIX')}").write_bytes(b"built")
    return root


def test_pybind11_is_asked_for_only_when_the_helpers_will_be_compiled(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGATRON_LAUNCH_CACHE_DIR", str(tmp_path / "cache"))  # no cached build
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python3 = bin_dir / "python3"  # a training python without pybind11
    python3.write_text(f"#!/bin/sh\n[ \"$2\" = pybind11 ] && exit 1\nexec {sys.executable} \"$@\"\n")
    python3.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    fresh = check_helper_build(Context(megatron_path=helpers_checkout(tmp_path / "fresh", built=False), env=env))
    assert any("pybind11 is not importable" in f.detail for f in fresh)  # make will compile: pybind11 is needed
    built = check_helper_build(Context(megatron_path=helpers_checkout(tmp_path / "built", built=True), env=env))
    assert not any("pybind11 is not importable" in f.detail for f in built)
