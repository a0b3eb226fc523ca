"""What pyproject.toml declares against what the launcher imports, and the lock file against both."""

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def declared(group: str | None = None) -> dict[str, Requirement]:
    lines = PROJECT["dependencies"] if group is None else PROJECT["optional-dependencies"][group]
    return {Requirement(line).name.lower(): Requirement(line) for line in lines}


def imported_modules() -> set[str]:
    names = set()
    for path in (REPO / "launcher").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"launcher"}


def test_every_imported_distribution_is_declared():
    everything = {name for group in [None, *PROJECT["optional-dependencies"]] for name in declared(group)}
    owners = importlib.metadata.packages_distributions()
    missing = {}
    for module in imported_modules():
        dists = {d.lower() for d in owners.get(module, [])}
        # megatron-core provides `megatron`; transformer_engine and apex are optional kernels, detected
        if module in ("transformer_engine", "apex", "transformers") or not dists:
            continue
        if not dists & everything:
            missing[module] = sorted(dists)
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"
    assert "numpy" in declared() and "packaging" in declared()


def test_matplotlib_is_an_optional_extra_and_torch_is_bounded():
    assert "matplotlib" not in declared() and "matplotlib" in declared("report")
    torch = declared("megatron")["torch"].specifier
    assert torch.contains("2.6.0") and not torch.contains("99.0")  # an upper bound: what was tested
    assert str(declared("megatron")["megatron-core"].specifier) == "==0.18.0"


def test_lock_file_pins_what_pyproject_allows():
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    versions = {p["name"]: p["version"] for p in lock["package"] if "version" in p}
    assert versions["megatron-core"] == "0.18.0"
    assert declared("megatron")["torch"].specifier.contains(Version(versions["torch"]))
    for name in ("pyyaml", "jinja2", "numpy", "packaging", "matplotlib"):
        assert name in versions, name
