"""What a job's Megatron settings need on the target, read from launcher/data/megatron_requirements.json.

That file is derived from the pinned Megatron source by scripts/derive_requirements.py (each row cites the line
that raises or asserts, and the line naming the minimum version); tests/megatron/test_requirements_table.py
regenerates it from the installed megatron-core. A row says: when these settings hold (on Megatron's effective
settings, launcher.megatron.effective), the target needs Transformer Engine (≥ a version), an apex extension, a
Python package (≥ a version), another setting, a layout condition, or cannot run at this pin at all.

Who checks what, with the same messages:
- the launcher's rules (pipeline/target_rules.requirements): TE, apex, settings, layouts, unsupported — the
  kernels of the target are known when the job is resolved;
- Python packages: before a local launch (checks.doctor.preflight, this machine), on every node at job start
  (the batch script runs NODE_CHECK), and in `launch --check` against the packages the preset declares.
No torch is imported: versions come from importlib.metadata.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from launcher.errors import Problem

TE_PACKAGE = "transformer-engine"
# importlib.metadata names TE goes by: pip's sdist, NGC's build, and the per-CUDA wheels.
TE_DISTRIBUTIONS = ("transformer-engine", "transformer_engine", "transformer-engine-cu12", "transformer-engine-cu13")
NAMES = {TE_PACKAGE: "Transformer Engine", "apex": "NVIDIA apex"}


@dataclass(frozen=True)
class Requirement:
    id: str
    when: Mapping[str, Any]
    needs: Mapping[str, Any]
    cite: str
    why: str
    fix: str
    version_cite: str | None = None
    enforced_by: str | None = None  # a launcher rule that already says it in its own words

    @property
    def kind(self) -> str:
        """te | apex | package | setting | layout | unsupported"""
        if self.needs.get("package") == TE_PACKAGE:
            return "te"
        for kind in ("apex", "setting", "layout", "unsupported"):
            if kind in self.needs:
                return kind
        return "package"

    @property
    def min_version(self) -> str | None:
        return self.needs.get("min_version")

    @property
    def package(self) -> str:
        return str(self.needs.get("package") or "apex")

    def applies(self, settings: Mapping[str, Any]) -> bool:
        return all(holds(settings.get(dest), test) for dest, test in self.when.items())

    def condition(self, settings: Mapping[str, Any], given: Mapping[str, Any] | None = None) -> str:
        """'async_save with async_strategy nvrx (Megatron's default)': the settings that make the row apply (an
        exclusion, `{"not": …}`, is no cause and is not named)."""
        parts = []
        for dest, test in self.when.items():
            if isinstance(test, dict) and "not" in test:
                continue
            value = settings.get(dest)
            text = dest if value is True else f"{dest} {_shown(value)}"
            if given is not None and given.get(dest) is None:
                text += " (Megatron's default)"
            parts.append(text)
        return " with ".join(parts)

    def when_example(self) -> dict[str, Any]:
        """Settings that make the row apply (the first choice of each `in`), to describe it."""
        out: dict[str, Any] = {}
        for dest, test in self.when.items():
            if isinstance(test, dict):
                out[dest] = "/".join(map(str, test["in"])) if "in" in test else wanted_value(test)
            else:
                out[dest] = test
        return out

    def wanted(self) -> str:
        """'nvidia-resiliency-ext >= 0.6.0', 'Transformer Engine', "apex's scaled_masked_softmax_cuda"."""
        if self.kind == "apex":
            return f"NVIDIA apex's {self.needs['apex']} extension"
        name = NAMES.get(self.package, self.package)
        return f"{name} >= {self.min_version}" if self.min_version else name


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def holds(value: Any, test: Any) -> bool:
    """Whether a setting's value passes a test of the table: a value, true/false, or
    {"in"|"gt"|"between"|"given"|"not": …}."""
    if isinstance(test, dict):
        if "in" in test:
            return value in test["in"]
        if "gt" in test:
            return _number(value) and value > test["gt"]
        if "between" in test:  # exclusive bounds
            low, high = test["between"]
            return _number(value) and low < value < high
        if "given" in test:  # set to something: not unset, off, empty or Megatron's "none"
            unset = value is None or value is False or value in ("", "none") or value == []
            return unset is not test["given"]
        if "not" in test:
            return value != test["not"]
    if isinstance(test, bool):
        return bool(value) is test
    return bool(value == test)


def wanted_value(test: Any) -> str:
    """A test of holds() in words: 'true', 'set', '> 1', 'in rope, none', 'in (0.0, 1.0)'."""
    if isinstance(test, dict):
        if "in" in test:
            return "in " + ", ".join(_shown(v) for v in test["in"])
        if "gt" in test:
            return f"> {test['gt']}"
        if "between" in test:
            return f"in ({test['between'][0]}, {test['between'][1]})"
        if "given" in test:
            return "set" if test["given"] else "unset"
        if "not" in test:
            return f"other than {_shown(test['not'])}"
    return "unset" if test is None else _shown(test)


def _shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@cache
def _data() -> dict[str, Any]:
    return json.loads(resources.files("launcher").joinpath("data/megatron_requirements.json").read_text())


@cache
def table() -> tuple[Requirement, ...]:
    return tuple(Requirement(id=r["id"], when=r["when"], needs=r["needs"], cite=r["cite"], why=r["why"],
                             fix=r["fix"], version_cite=r.get("version_cite"), enforced_by=r.get("enforced_by"))
                 for r in _data()["requirements"])


def highest_te_version() -> str | None:
    """The newest TE any `is_te_min_version` check of the pin asks for (the scan's answer)."""
    return _data()["guards"]["highest_te_version"]


def applicable(settings: Mapping[str, Any], kinds: Iterable[str] | None = None) -> list[Requirement]:
    """The rows whose settings hold (pass Megatron's effective settings)."""
    wanted = set(kinds) if kinds is not None else None
    return [r for r in table() if r.applies(settings) and (wanted is None or r.kind in wanted)]


PACKAGE_KINDS = ("te", "apex", "package")  # what an installation has or lacks (the others are rules)


@dataclass(frozen=True)
class Inventory:
    """What the target has: Transformer Engine (and its version), a full NVIDIA apex, other distributions."""

    te: bool
    apex: bool
    te_version: str | None = None  # None: present at an unknown version (or absent)
    packages: Mapping[str, str] = field(default_factory=dict)  # distribution → version ("" if unknown)
    apex_modules: frozenset[str] | None = None  # the apex extensions found, where looked up one by one

    def has(self, requirement: Requirement) -> tuple[bool, str | None]:
        """(present, the version found when it is too old)."""
        kind = requirement.kind
        if kind == "apex":
            found = self.apex_modules
            return (self.apex if found is None else requirement.needs["apex"] in found), None
        if kind == "te":
            present, version = self.te, self.te_version
        else:
            present = requirement.package in self.packages
            version = self.packages.get(requirement.package) or None
        if not present:
            return False, None
        if requirement.min_version and version and older(version, requirement.min_version):
            return False, version
        return True, None


def older(found: str, wanted: str) -> bool:
    try:
        return Version(found).release < Version(wanted).release
    except InvalidVersion:
        return False  # an unreadable version is not proof of an old one


def missing_problem(requirement: Requirement, settings: Mapping[str, Any], given: Mapping[str, Any] | None,
                    found: str | None, where: str = "", extra_hint: str = "") -> Problem:
    """The one message for a missing or too old package, wherever it is checked (`where`: ' on node1')."""
    condition = requirement.condition(settings, given)
    if found:
        text = f"{condition} needs {requirement.wanted()}, but {found} is installed{where}"
    else:
        text = f"{condition} needs {requirement.wanted()}, which is not installed{where}"
    return Problem(f"{text} ({requirement.cite})", requirement.fix + extra_hint, stage="launcher")


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - broken metadata must not stop a check
        return None


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _module_in(directory: Path, name: str) -> bool:
    """Whether a top-level module `name` sits in `directory` (a source file, a package or an extension)."""
    try:
        return ((directory / f"{name}.py").is_file() or (directory / name / "__init__.py").is_file()
                or any(directory.glob(f"{name}.*.so")))
    except OSError:
        return False


def apex_modules_here(job_paths: Iterable[str] = ()) -> frozenset[str]:
    """The table's apex extensions this interpreter imports, or the job's own PYTHONPATH entries hold (the
    launcher's apex-free stand-in, pipeline/environment.APEX_FREE)."""
    names = {str(r.needs["apex"]) for r in table() if r.kind == "apex"}
    return frozenset(name for name in names
                     if _has_module(name) or any(_module_in(Path(p), name) for p in job_paths if p))


def te_version_here() -> str | None:
    return next((v for v in map(_version, TE_DISTRIBUTIONS) if v), None)


def packages_here() -> dict[str, str]:
    """The table's Python packages this interpreter has: distribution → version ("" when only the module is
    found). Bounded: only the names the table uses are looked up."""
    found = {}
    for requirement in table():
        if requirement.kind != "package" or requirement.package in found:
            continue
        version = _version(requirement.package)
        if version is not None or _has_module(str(requirement.needs["module"])):
            found[requirement.package] = version or ""
    return found


def package_problems(settings: Mapping[str, Any], inventory: Inventory, given: Mapping[str, Any] | None = None,
                     kinds: Iterable[str] = ("package",), where: str = "", extra_hint: str = "") -> list[Problem]:
    """Every applicable row of these kinds the inventory does not meet."""
    problems = []
    for requirement in applicable(settings, kinds):
        present, found = inventory.has(requirement)
        if not present:
            problems.append(missing_problem(requirement, settings, given, found, where, extra_hint))
    return problems


def job_node_items(megatron: Mapping[str, Any], vpp: int | None, entry: str) -> list[dict[str, Any]]:
    """What every node (a Slurm node, a Kubernetes pod) of a job checks at start, from Megatron's effective
    settings; none for the simple loop and the all-reduce, which take no Megatron settings."""
    if entry != "pretrain_gpt":
        return []
    from launcher.megatron.effective import effective_settings

    return node_items(effective_settings(megatron, vpp).settings, megatron)


def node_items(settings: Mapping[str, Any], given: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """What every node checks at job start: each installed-package row of the job, with its messages (the
    missing one, and the too-old one whose {found} the node fills in)."""
    items = []
    for requirement in applicable(settings, PACKAGE_KINDS):
        modules = [requirement.needs["apex"]] if requirement.kind == "apex" else [requirement.needs["module"]]
        distributions = list(TE_DISTRIBUTIONS) if requirement.kind == "te" else (
            [requirement.package] if requirement.kind == "package" else [])
        missing = missing_problem(requirement, settings, given, None, " on {host}")
        old = missing_problem(requirement, settings, given, "{found}", " on {host}")
        items.append({"modules": modules, "distributions": distributions, "min_version": requirement.min_version,
                      "missing": missing.render(), "old": old.render()})
    return items


# Runs on each node as `python3 -c NODE_CHECK ITEMS_JSON` (no launcher import, no torch, about 50 ms): exit 2
# with the launcher's own message for each requirement the node does not meet.
NODE_CHECK = r"""
import importlib.metadata as md, importlib.util as iu, json, re, socket, sys
host, status = socket.gethostname(), 0
def version(names):
    for name in names:
        try:
            return md.version(name)
        except Exception:
            pass
def release(text):
    return tuple(int(p) for p in re.findall(r"\d+", text.split("+")[0])[:3])
for item in json.loads(sys.argv[1]):
    try:
        present = all(iu.find_spec(m) is not None for m in item["modules"])
    except (ImportError, ValueError):
        present = False
    found = version(item["distributions"]) if present and item["min_version"] else None
    if not present:
        message = item["missing"]
    elif found and release(found) < release(item["min_version"]):
        message = item["old"].replace("{found}", found)
    else:
        continue
    print(message.replace("{host}", host), file=sys.stderr)
    status = 2
sys.exit(status)
"""
