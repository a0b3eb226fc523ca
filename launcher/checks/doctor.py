"""`launch doctor`: is this machine ready to run the pinned Megatron? Each check says ok / warn / fail and
how to fix it.

Fast by design: package versions come from installed metadata and module specs, never from importing
torch; only the opt-in torch probe (`launch doctor --torch`) imports torch, in a child process.
`job_findings()` is the subset `launch PRESET` runs before training, judged against its resolved job.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from launcher import MEGATRON_COMMIT, MEGATRON_CORE_VERSION, install_command, untrusted
from launcher.checks.capacity import capacity_findings
from launcher.checks.finding import Finding, Status
from launcher.errors import Problem, UserError
from launcher.megatron.dataset_helpers import will_build
from launcher.megatron.fetch import GIT_SOURCE as MEGATRON_URL
from launcher.megatron.pin import (
    COMMIT_MARKER,
    MAX_MARKER_BYTES,
    SUBMODULE,
    default_fetch_dir,
    has_module,
    submodule_hint,
)
from launcher.pipeline.environment import CONNECTIONS, uses_fsdp
from launcher.runs.rundir import git_commit

# Modules built by NVIDIA apex's --cpp_ext/--cuda_ext that Megatron's default fusions import.
APEX_EXTENSIONS = {
    "fused_weight_gradient_mlp_cuda": "gradient accumulation fusion (pass --no-gradient-accumulation-fusion)",
    "scaled_masked_softmax_cuda": "masked softmax fusion (pass --no-masked-softmax-fusion)",
    "scaled_upper_triang_masked_softmax_cuda": "causal masked softmax fusion (--no-masked-softmax-fusion)",
    "amp_C": "multi-tensor optimizer kernels (torch fallback is slower)",
    "fused_layer_norm_cuda": "fused layer norm (torch fallback is used)",
}
# Files only NVIDIA apex has; the PyPI project called `apex` (a 2013 Pyramid toolkit) has none of them.
NVIDIA_APEX_MARKERS = ("normalization/fused_layer_norm.py", "optimizers/fused_adam.py", "transformer")
SUBPROCESS_TIMEOUT_S = 20
# Only when neither megatron-core nor this launcher is installed with metadata (a bare checkout on PYTHONPATH):
# what megatron-core 0.18.0's metadata says.
FALLBACK_PYTHON = ">=3.12"
FALLBACK_TORCH = ">=2.6.0"


@dataclass(frozen=True)
class Context:
    """What the checks look at; tests point it at throwaway directories and environments."""

    megatron_path: Path = SUBMODULE
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    python: str = sys.executable
    torch_probe: bool = False


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, ...]:
    try:
        return Version(version).release
    except InvalidVersion:
        return ()


def _run(argv: list[str], cwd: Path | None = None, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    try:
        done = subprocess.run(argv, cwd=cwd, env=None if env is None else dict(env), check=False,
                              capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return done.returncode, (done.stdout.strip() or done.stderr.strip())


def _megatron_core_requirements() -> tuple[SpecifierSet, SpecifierSet]:
    """(Requires-Python, torch's specifier) as megatron-core's installed metadata states them, else as the
    launcher's own metadata states them for the pinned release (no hand-kept copies of upstream's numbers)."""
    for dist in ("megatron-core", "megatron-launch"):
        try:
            meta = importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        python = SpecifierSet(meta.metadata.get("Requires-Python") or "")
        torch = SpecifierSet()
        for text in meta.requires or []:
            requirement = Requirement(text)
            # megatron-core's own torch line has no marker; the launcher's sits in its [megatron] extra
            extra_ok = requirement.marker is None or requirement.marker.evaluate({"extra": "megatron"})
            if requirement.name == "torch" and extra_ok:
                torch &= requirement.specifier
        return python, torch
    return SpecifierSet(FALLBACK_PYTHON), SpecifierSet(FALLBACK_TORCH)


def _megatron_extra() -> str:
    """The README's install of megatron-core, torch, tokenizers and pybind11, into this launcher's own Python."""
    return install_command("megatron")


def check_python(ctx: Context) -> list[Finding]:
    version = platform.python_version()
    wanted, _ = _megatron_core_requirements()
    if wanted.contains(version, prereleases=True):
        return [Finding("python", "ok", f"{version} ({sys.executable})")]
    return [Finding("python", "fail", f"{version}: megatron-core {MEGATRON_CORE_VERSION} requires Python {wanted}",
                    "create the environment with python3.12: python3.12 -m venv .venv (scripts/bootstrap.sh)")]


def check_torch(ctx: Context) -> list[Finding]:
    version = _version("torch")
    _, wanted = _megatron_core_requirements()
    if version is None:
        return [Finding("torch", "fail", "not installed", _megatron_extra())]
    try:
        # a local build tag (+cu130, +cpu) says how it was built, not which release it is
        fits = wanted.contains(Version(version).public, prereleases=True)
    except InvalidVersion:
        return [Finding("torch", "warn", f"{version}: not a version number this check can compare")]
    if not fits:
        return [Finding("torch", "fail", f"{version}: megatron-core {MEGATRON_CORE_VERSION} needs torch{wanted}",
                        _megatron_extra())]
    return [Finding("torch", "ok", version)]


def check_gpus(ctx: Context) -> list[Finding]:
    """Visible GPUs from nvidia-smi (no torch import); CUDA_VISIBLE_DEVICES narrows what a job sees."""
    if shutil.which("nvidia-smi", path=ctx.env.get("PATH")) is None:
        return [Finding("gpus", "warn", "nvidia-smi not found: no NVIDIA driver on this machine",
                        "fine on a login node; run `launch doctor` on a compute node (srun launch doctor)")]
    code, out = _run(["nvidia-smi", "-L"], env=ctx.env)
    gpus = [line for line in out.splitlines() if line.startswith("GPU ")]
    if code != 0 or not gpus:
        return [Finding("gpus", "fail", f"nvidia-smi found no GPU: {out[:200]}",
                        "check the driver (nvidia-smi) and that the job was given GPUs (--gpus-per-node)")]
    visible = ctx.env.get("CUDA_VISIBLE_DEVICES")
    note = f"; CUDA_VISIBLE_DEVICES={visible}" if visible is not None else ""
    return [Finding("gpus", "ok", f"{len(gpus)} GPU(s): {gpus[0].split(' (UUID')[0]}{note}")]


def check_megatron_core(ctx: Context) -> list[Finding]:
    version = _version("megatron-core")
    wanted = ".".join(map(str, Version(MEGATRON_CORE_VERSION).release[:2]))
    if version is None:
        return [Finding("megatron-core", "warn", "not installed: `launch --check` cannot ask Megatron itself",
                        _megatron_extra())]
    if _release(version)[:2] != Version(MEGATRON_CORE_VERSION).release[:2]:
        return [Finding("megatron-core", "warn",
                        f"{version}, but the pinned Megatron-LM {MEGATRON_COMMIT[:12]} is {wanted}.x: "
                        "flag names and checks may differ",
                        _megatron_extra())]
    return [Finding("megatron-core", "ok", version)]


def check_megatron_checkout(ctx: Context) -> list[Finding]:
    path = ctx.megatron_path
    clone = (f"launch fetch-megatron (the pinned commit into {default_fetch_dir()}, remembered), or git clone "
             f"{MEGATRON_URL} DIR && git -C DIR checkout {MEGATRON_COMMIT[:12]} and point at it with "
             f"--megatron-path DIR / MEGATRON_LM_PATH=DIR{submodule_hint(path)}")
    if not (path / "pretrain_gpt.py").is_file():
        return [Finding("megatron-lm checkout", "fail", f"no pretrain_gpt.py in {path}", clone)]
    head = git_commit(path)["commit"]
    if head is None and (path / ".git").exists():
        code, message = _run(["git", "-C", str(path), "rev-parse", "HEAD"])
        if code != 0:  # a checkout git will not read, e.g. another user's files ("dubious ownership")
            fix = (f"git config --global --add safe.directory {path}" if "safe.directory" in message
                   else f"repair or re-clone the checkout: {clone}")
            return [Finding("megatron-lm checkout", "warn",
                            f"git cannot read {path}, its commit is unknown: {message.splitlines()[0][:200]}", fix)]
    marker = path / COMMIT_MARKER
    if head is None and (untrusted.text_or_none(marker, "commit marker", MAX_MARKER_BYTES) or "").strip() \
            == MEGATRON_COMMIT:
        return [Finding("megatron-lm checkout", "ok", f"{path} at {MEGATRON_COMMIT[:12]} (launch fetch-megatron's "
                        "tarball)")]
    if head is None:
        return [Finding("megatron-lm checkout", "warn",
                        f"{path} is not a git checkout of its own; its commit is unknown",
                        f"use a git checkout of {MEGATRON_COMMIT[:12]}: {clone}")]
    if head != MEGATRON_COMMIT:
        return [Finding("megatron-lm checkout", "fail",
                        f"{path} is at {head[:12]}, not the pinned {MEGATRON_COMMIT[:12]}: "
                        "the launcher's flags are proven for the pinned commit only",
                        f"git -C {path} fetch origin && git -C {path} checkout {MEGATRON_COMMIT[:12]}")]
    return [Finding("megatron-lm checkout", "ok", f"{path} at {MEGATRON_COMMIT[:12]}")]


def check_transformer_engine(ctx: Context) -> list[Finding]:
    version = _version("transformer-engine") or _version("transformer_engine")
    if version is None and not has_module("transformer_engine"):
        return [Finding("transformer-engine", "warn",
                        "not installed: use --transformer-impl local and keep context parallel at 1",
                        f"{shlex.quote(sys.executable)} -m pip install --no-build-isolation "
                        "'transformer-engine[pytorch]' (or use an NGC container)")]
    return [Finding("transformer-engine", "ok", f"{version or 'unknown version'} (installed)")]


def check_apex(ctx: Context) -> list[Finding]:
    spec = importlib.util.find_spec("apex") if has_module("apex") else None
    if spec is None:
        return [Finding("apex", "warn",
                        "NVIDIA apex not installed: pass --no-gradient-accumulation-fusion "
                        "--no-masked-softmax-fusion (torch fallbacks are used elsewhere)",
                        "build NVIDIA apex with --cpp_ext --cuda_ext, or use an NGC container")]
    roots = [Path(p) for p in (spec.submodule_search_locations or [])]
    if not any((root / marker).exists() for root in roots for marker in NVIDIA_APEX_MARKERS):
        where = roots[0] if roots else spec.origin
        return [Finding("apex", "fail",
                        f"the `apex` at {where} is not NVIDIA apex (it looks like the unrelated PyPI "
                        "project of that name) and hides the real one",
                        "pip uninstall -y apex, then build NVIDIA apex from https://github.com/NVIDIA/apex")]
    missing = [name for name in APEX_EXTENSIONS if not has_module(name)]
    if missing:
        needs = "; ".join(f"{name}: {APEX_EXTENSIONS[name]}" for name in missing)
        return [Finding("apex", "warn", f"NVIDIA apex without its CUDA extensions: {needs}",
                        "rebuild apex: pip install -v --no-build-isolation "
                        "--config-settings '--build-option=--cpp_ext' --config-settings "
                        "'--build-option=--cuda_ext' git+https://github.com/NVIDIA/apex")]
    return [Finding("apex", "ok", f"NVIDIA apex with CUDA extensions ({_version('apex') or 'unknown version'})")]


def check_helper_build(ctx: Context) -> list[Finding]:
    """Global rank 0 runs `make -C megatron/core/datasets`; the Makefile calls `python3 -m pybind11
    --includes` and `python3-config --extension-suffix`, so those must belong to the training python."""
    path_var = ctx.env.get("PATH")
    findings = []
    for tool, package in (("make", "make"), ("g++", "g++")):
        if shutil.which(tool, path=path_var) is None:
            findings.append(Finding("dataset helpers", "fail", f"`{tool}` not found on PATH",
                                    f"apt-get install {package} (Megatron compiles helpers.cpp at start)"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    python3 = shutil.which("python3", path=path_var)
    building = True
    if python3 is None:
        findings.append(Finding("dataset helpers", "fail", "`python3` not found on PATH",
                                f"put the training interpreter's directory first on PATH ({Path(ctx.python).parent})"))
    elif building := will_build(ctx.megatron_path, suffix):  # the Makefile asks pybind11 only when it compiles
        # launch puts this interpreter first on the training's PATH when it has torch (backends.local
        # training_path), so python3 here is the training's python; the fixes name that one interpreter.
        code, out = _run([python3, "-m", "pybind11", "--includes"], env=ctx.env)
        if code != 0:
            code, prefix = _run([python3, "-c", "import sys; print(sys.executable)"], env=ctx.env)
            training = prefix if code == 0 and prefix else python3
            # with the extra in this launcher's environment, launch puts its python first for training
            findings.append(Finding("dataset helpers", "fail",
                                    f"pybind11 is not importable by the training python ({training})",
                                    _megatron_extra()))
    config = shutil.which("python3-config", path=path_var)
    if config is None:
        findings.append(Finding("dataset helpers", "fail", "`python3-config` not found on PATH",
                                "install the Python headers (apt-get install python3-dev, or use a venv of a "
                                "python built with them)"))
    else:
        code, out = _run([config, "--extension-suffix"], env=ctx.env)
        if code != 0 or out != suffix:
            findings.append(Finding("dataset helpers", "fail",
                                    f"python3-config ({config}) is for another python: suffix {out!r}, "
                                    f"this one is {suffix!r}",
                                    f"{_megatron_extra()} (with torch in this environment, launch puts "
                                    "this interpreter's python3 and python3-config first on the training's PATH)"))
    datasets = ctx.megatron_path / "megatron" / "core" / "datasets"
    if datasets.is_dir() and not os.access(datasets, os.W_OK):
        built = datasets / f"helpers_cpp{suffix}"
        if not built.exists():
            findings.append(Finding("dataset helpers", "fail", f"{datasets} is not writable and not built",
                                    f"build once where writable: make -C {datasets}"))
    if not findings:
        checked = "make, g++, pybind11 and python3-config match this python"
        if python3 is not None and not building:
            checked = ("make, g++ and python3-config match this python (the helpers are built or come from the "
                       "launcher's cache: no compilation, so no pybind11 needed)")
        findings.append(Finding("dataset helpers", "ok", checked))
    return findings


def check_nccl(ctx: Context) -> list[Finding]:
    for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"):
        version = _version(dist)
        if version:
            return [Finding("nccl", "ok", f"{dist} {version} (wheel used by torch)")]
    return [Finding("nccl", "warn", "no nvidia-nccl wheel found; torch may use a system NCCL",
                    "run `launch doctor --torch` to read the version torch links")]


def check_cuda_connections(ctx: Context, needs_one: bool | None = None) -> list[Finding]:
    """Megatron asserts CUDA_DEVICE_MAX_CONNECTIONS=1 for TP or CP > 1 on GPUs older than Blackwell."""
    value = ctx.env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if value == "1":
        return [Finding("CUDA_DEVICE_MAX_CONNECTIONS", "ok", "1")]
    if needs_one:
        return [Finding("CUDA_DEVICE_MAX_CONNECTIONS", "fail",
                        f"{value!r}, but tensor/context parallelism on Hopper and older requires 1",
                        "export CUDA_DEVICE_MAX_CONNECTIONS=1 (or set it under launcher.env in the preset)")]
    return [Finding("CUDA_DEVICE_MAX_CONNECTIONS", "warn" if value is not None else "ok",
                    f"{value!r}; runs with TP or CP > 1 need 1 (the launcher sets it for them)",
                    "unset it, or export CUDA_DEVICE_MAX_CONNECTIONS=1")]


TORCH_PROBE = r"""
import json, importlib
out = {}
import torch
out["torch"] = torch.__version__
out["cuda_build"] = torch.version.cuda
out["cuda_available"] = torch.cuda.is_available()
out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
out["devices"] = [torch.cuda.get_device_name(i) for i in range(out["device_count"])]
out["capability"] = list(torch.cuda.get_device_capability(0)) if out["device_count"] else None
try:
    out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
except Exception as exc:
    out["nccl"] = None
try:
    te = importlib.import_module("transformer_engine")
    importlib.import_module("transformer_engine.pytorch")
    out["te"] = getattr(te, "__version__", "unknown")
except Exception as exc:
    out["te_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def check_torch_runtime(ctx: Context) -> list[Finding]:
    """Import torch (and Transformer Engine) in a child process: CUDA, GPUs, NCCL as torch sees them."""
    _, out = _run([ctx.python, "-c", TORCH_PROBE], env=ctx.env)
    line = out.splitlines()[-1] if out else ""
    try:
        probe: dict[str, Any] = json.loads(line)
    except json.JSONDecodeError:
        return [Finding("torch import", "fail", f"importing torch failed: {out[-300:]}",
                        f"reinstall torch for this python: {_megatron_extra()} --force-reinstall")]
    findings = [Finding("torch import", "ok", f"torch {probe['torch']} built for CUDA {probe['cuda_build']}")]
    if not probe["cuda_available"]:
        findings.append(Finding("cuda", "fail", "torch.cuda.is_available() is False: Megatron requires CUDA",
                                "run on a GPU node with a driver that supports "
                                f"CUDA {probe['cuda_build']} (nvidia-smi)"))
    else:
        major = probe["capability"][0]
        findings.append(Finding("cuda", "ok", f"{probe['device_count']} GPU(s), {probe['devices'][0]}, "
                                f"sm_{major}{probe['capability'][1]}"))
    findings.append(Finding("nccl (torch)", "ok" if probe.get("nccl") else "warn",
                            probe.get("nccl") or "torch reports no NCCL",
                            "install a CUDA build of torch (it bundles NCCL)"))
    if "te" in probe:
        findings.append(Finding("transformer-engine import", "ok", probe["te"]))
    elif _version("transformer-engine") or has_module("transformer_engine"):
        findings.append(Finding("transformer-engine import", "fail", probe["te_error"][:300],
                                "reinstall transformer-engine against this torch, or use --transformer-impl local"))
    return findings


def check_setting_packages(ctx: Context) -> list[Finding]:
    """The Python packages of the requirements table (from Megatron's source): which settings need each, and
    whether this Python has it. A missing one is a warning here; a job whose settings need it stops before launch."""
    from launcher.megatron import requirements

    here = requirements.packages_here()
    needed: dict[str, list[str]] = {}
    for row in requirements.table():
        if row.kind == "package":
            needed.setdefault(row.package, []).append(row.condition(row.when_example()))
    present = [f"{package} {here[package]}".strip() for package in needed if package in here]
    missing = [f"{package} (for {'; '.join(settings)})" for package, settings in needed.items() if package not in here]
    if not missing:
        return [Finding("setting packages", "ok", ", ".join(present))]
    return [Finding("setting packages", "warn", "not installed: " + ", ".join(missing) +
                    (f"; installed: {', '.join(present)}" if present else ""),
                    "pip install the ones your settings need; a job that needs a missing one stops before launch")]


Check = Callable[[Context], list[Finding]]
CHECKS: dict[str, Check] = {
    "python": check_python,
    "torch": check_torch,
    "gpus": check_gpus,
    "megatron-core": check_megatron_core,
    "megatron-lm": check_megatron_checkout,
    "transformer-engine": check_transformer_engine,
    "apex": check_apex,
    "dataset-helpers": check_helper_build,
    "nccl": check_nccl,
    "cuda-connections": check_cuda_connections,
    "setting-packages": check_setting_packages,
}


def run_checks(ctx: Context, names: Iterable[str] | None = None) -> list[Finding]:
    findings: list[Finding] = []
    for name in names or CHECKS:
        findings.extend(CHECKS[name](ctx))
    if ctx.torch_probe:
        findings.extend(check_torch_runtime(ctx))
    return findings


def job_connections(job: Any) -> Finding:
    """CUDA_DEVICE_MAX_CONNECTIONS as the job's ranks get it: resolve decided and judged it (environment.py)."""
    value = job.environment.get(CONNECTIONS)
    if value is None:
        why = " (FSDP wants it unset or > 1)" if uses_fsdp(job.arg) else ""
        return Finding(CONNECTIONS, "ok", f"unset, as the job leaves it{why}")
    return Finding(CONNECTIONS, "ok", f"{value}, as the job sets it")


def job_findings(job: Any, ctx: Context, capacity: bool = True) -> list[Finding]:
    """The checks that matter for one resolved job, judged against the settings and environment it will run with
    (`ctx.env`: its processes' environment). Never imports torch. Without `capacity`, no memory or disk check (a
    job whose layout is refused has no estimate)."""
    findings = run_checks(ctx, ["python", "torch", "megatron-lm", "dataset-helpers"])
    findings.append(job_connections(job))
    findings += capacity_findings(job, ctx.env) if capacity else []
    if job.entry != "pretrain_gpt":  # the simple loop builds its own model: only the environment matters
        return findings
    job_paths = job.environment.exported.get("PYTHONPATH", "").split(":")
    return findings + requirement_findings(job.megatron, ctx, job_paths)  # the messages of the job's node check


def requirement_findings(megatron_args: Mapping[str, Any], ctx: Context, job_paths: Iterable[str] = ()
                         ) -> list[Finding]:
    """What the settings need (the requirements table) against this machine's installation and the job's own
    PYTHONPATH entries (`job_paths`): the same messages as the job's check on a node. Megatron's effective settings
    decide (async_save off ⇒ no nvrx needed)."""
    from launcher.megatron import requirements
    from launcher.megatron.effective import effective_settings

    settings = effective_settings(megatron_args).settings
    here = requirements.Inventory(te=check_transformer_engine(ctx)[0].status == "ok", apex=has_module("apex"),
                                  te_version=requirements.te_version_here(), packages=requirements.packages_here(),
                                  apex_modules=requirements.apex_modules_here(job_paths))
    findings = []
    for row in requirements.applicable(settings, requirements.PACKAGE_KINDS):
        present, found = here.has(row)
        if not present:
            problem = requirements.missing_problem(row, settings, megatron_args, found)
            name = {"te": "transformer-engine", "apex": "apex"}.get(row.kind, row.package)
            findings.append(Finding(name, "fail", problem.message, problem.hint))
    return findings


def launch_verdict(findings: Iterable[Finding]) -> tuple[list[str], list[Problem]]:
    """What a launch here says of its job_findings before torchrun starts: the warnings, and the problems that stop
    it. One function for the launch and for the dry-run of a job meant for this machine (checks.target_verdict),
    so both say the same."""
    findings = list(findings)
    warnings = [f"{f.check}: {f.detail}" for f in findings if f.status == "warn"]
    failed = [Problem(f"{f.check}: {f.detail}", f.fix, stage="launcher") for f in findings if f.status == "fail"]
    if failed:
        failed[-1] = Problem(failed[-1].message, failed[-1].hint + "; or skip these checks with --no-doctor",
                             stage="launcher")
    return warnings, failed


def check_before_launch(job: Any, process_env: Mapping[str, str]) -> None:
    """Before `launch PRESET` starts torchrun: stop on a failing check, print warnings, stay quiet if all ok.
    `process_env` is what the training processes will get (the local backend's process_environment); what the
    settings need on this machine is the requirements table (requirement_findings)."""
    warnings, failed = launch_verdict(job_findings(job, Context(megatron_path=job.megatron_path, env=process_env)))
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if failed:
        raise UserError(failed)


def worst(findings: Iterable[Finding]) -> Status:
    statuses = {f.status for f in findings}
    return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "ok"
