"""Cloud task files whose shell block runs the training command: a SkyPilot task (`run:`, with `num_nodes:`,
`resources: accelerators: H100:8` and `envs:`) and a dstack task (`type: task`, `commands:`, `nodes:`,
`resources: gpu: H100:8`, `env:`). The block is the script; the variables the platform gives it
(SKYPILOT_NUM_NODES, SKYPILOT_NUM_GPUS_PER_NODE; DSTACK_NODES_NUM, DSTACK_GPUS_PER_NODE, DSTACK_GPUS_NUM) are read
from the file's counts where it gives one, and a node's own (its rank, the head's address) stay unknown, as they are
until it runs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from launcher.importer.words import count

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class TaskFile:
    script: str
    environment: dict[str, str] = field(default_factory=dict)  # what the platform and the file's env give the block
    counts: dict[str, int] = field(default_factory=dict)  # nodes, gpus_per_node
    notes: list[str] = field(default_factory=list)
    platform: set[str] = field(default_factory=set)  # the platform's variables: read, not carried into the preset


def task_file(data: Any) -> TaskFile | None:
    """The task `data` (a parsed YAML document) describes, or None when it is no SkyPilot or dstack task that runs
    something."""
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("run"), str) and {"resources", "num_nodes", "setup", "envs", "workdir", "file_mounts"} & set(
            data):
        return _skypilot(data)
    if data.get("type") == "task" and isinstance(data.get("commands"), list):
        return _dstack(data)
    return None


def _skypilot(data: dict[Any, Any]) -> TaskFile:
    found = TaskFile(data["run"])
    envs = data.get("envs")
    for name, value in (envs.items() if isinstance(envs, dict) else ()):
        if isinstance(name, str) and _NAME.fullmatch(name) and isinstance(value, (str, int, float)) \
                and not isinstance(value, bool):
            found.environment[name] = str(value)
    nodes = 1 if data.get("num_nodes") is None else count(data.get("num_nodes"))
    per_node = _accelerators(data.get("resources"))
    _counted(found, "SkyPilot", nodes, per_node, "SKYPILOT_NUM_NODES", "SKYPILOT_NUM_GPUS_PER_NODE")
    return found


def _dstack(data: dict[Any, Any]) -> TaskFile:
    found = TaskFile("\n".join(str(c) for c in data["commands"][:10_000] if isinstance(c, (str, int, float))))
    env = data.get("env")
    items = env.items() if isinstance(env, dict) else (
        (str(e).partition("=")[0], str(e).partition("=")[2]) for e in env if "=" in str(e)) if isinstance(
        env, list) else ()
    for name, value in items:
        if isinstance(name, str) and _NAME.fullmatch(name) and isinstance(value, (str, int, float)) \
                and not isinstance(value, bool):
            found.environment[name] = str(value)
    nodes = 1 if data.get("nodes") is None else count(data.get("nodes"))
    resources = data.get("resources")
    per_node = _gpus(resources.get("gpu")) if isinstance(resources, dict) else None
    _counted(found, "dstack", nodes, per_node, "DSTACK_NODES_NUM", "DSTACK_GPUS_PER_NODE")
    if nodes is not None and per_node is not None:
        found.environment.setdefault("DSTACK_GPUS_NUM", str(nodes * per_node))
        found.platform.add("DSTACK_GPUS_NUM")
    return found


def _counted(found: TaskFile, platform: str, nodes: int | None, per_node: int | None, nodes_name: str,
             per_node_name: str) -> None:
    for setting, value, name in (("nodes", nodes, nodes_name), ("gpus_per_node", per_node, per_node_name)):
        if value is None:
            found.notes.append(f"{platform} task: its {setting.replace('_', ' ')} is not a count this file gives "
                               f"(${name} is the platform's, not known here)")
        else:
            found.counts[setting] = value
            found.environment.setdefault(name, str(value))
            found.platform.add(name)


def _accelerators(resources: Any) -> int | None:
    """SkyPilot's `accelerators: H100:8` (or `{H100: 8}`): the GPUs of each node; a list or set of alternatives, or
    none at all, is not one count."""
    given = resources.get("accelerators") if isinstance(resources, dict) else None
    if isinstance(given, dict) and len(given) == 1:  # `{A100-80GB}` (a set of one, YAML's mapping to null): one
        value = next(iter(given.values()))
        return 1 if value is None else count(value)
    return _gpus(given) if isinstance(given, str) and not given.strip().startswith("{") else None


def _gpus(given: Any) -> int | None:
    """`H100:8`, `80GB:8`, `8`, or `{name: H100, count: 8}`: the count; a range (`2..8`) is not one."""
    if isinstance(given, dict):
        return count(given.get("count")) if given.get("count") is not None else None
    if isinstance(given, int) and not isinstance(given, bool):
        return count(given)
    if isinstance(given, str):
        if ":" in given:
            return count(given.rpartition(":")[2].strip())
        return count(given.strip()) if given.strip().isdigit() else 1  # `H100`, `24GB`: one GPU of that kind
    return None
