"""The stages import only from earlier stages (cli → backends → dataprep → checks → runs → estimate/importer →
pipeline → megatron/inside → errors and the root helpers), and no modules import each other in a circle, lazily or
not. Two stages of one rank (estimate and importer, megatron and inside) do not import each other at all."""

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "launcher"
# Later stages have higher ranks; a module may import its own stage or a lower one, never a peer of its rank.
RANKS = {
    "errors": 0, "untrusted": 0, "interrupts": 0, "gpus": 0, "redaction": 0, "nofollow": 0, "lock": 0,
    "slurm_names": 0, "counts": 0,
    "": 0,  # launcher/__init__.py
    "megatron": 1, "inside": 1,
    "pipeline": 2,
    "estimate": 3, "importer": 3,
    "runs": 4,  # run directories, their records and reports
    "checks": 5,  # what a job needs, judged before it runs (reads run records: git commit of a checkout)
    "dataprep": 6,  # data preparation (checks its files with checks.data)
    "backends": 7,  # where a job runs: here (with its run directory), Slurm, Kubernetes
    "cli": 8,
    "__main__": 9,  # python -m launcher: the cli
}
ROOT_RANK = 0  # the root helpers are many small stages of one rank that may use each other


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Every launcher module `path` imports, anywhere in it (a function-level import counts the same)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("launcher")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("launcher"):
            for alias in node.names:  # `from launcher.pipeline import resolve` imports the module resolve
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return found


@functools.cache
def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {name: {m for m in imports_of(path, modules) if m != name and not name.startswith(m + ".")}
            for name, path in paths.items()}


def test_every_package_has_a_stage():
    assert {stage(m) for m in import_graph()} <= set(RANKS)


@pytest.mark.parametrize("module", sorted(import_graph()))
def test_a_module_imports_no_later_stage(module):
    later = sorted(m for m in import_graph()[module] if RANKS[stage(m)] > RANKS[stage(module)])
    assert later == [], f"{module} (stage {stage(module) or 'root'}) imports later stages: {later}"


@pytest.mark.parametrize("module", sorted(import_graph()))
def test_a_module_imports_no_peer_stage_of_its_rank(module):
    rank = RANKS[stage(module)]
    peers = sorted(m for m in import_graph()[module]
                   if stage(m) != stage(module) and RANKS[stage(m)] == rank != ROOT_RANK)
    assert peers == [], f"{module} (stage {stage(module)}) imports a peer stage of the same rank: {peers}"


def test_no_modules_import_each_other_in_a_circle():
    graph = import_graph()
    circles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                circles.append(" → ".join([*path[path.index(nxt):], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert circles == []
