"""Host names read from untrusted text (a job's log, a run record), and the Slurm node names that may reach a
command (scontrol's ExcNodeList, sinfo, #SBATCH --exclude). Plain Python: the requeue policy runs it with the
node's python3 and the standard library only.

A machine's name as a log says it (Megatron's os.uname()[1], torchrun's fully qualified name, NCCL's line prefix)
need not be Slurm's node name (gpu-7.cluster.example for gpu-7; several emulated nodes on one machine): it is
taken only as the name of one of the job's own nodes, exactly or by its first label (`job_node`)."""

from __future__ import annotations

import re
from collections.abc import Iterable

# Slurm's node names in hostlist syntax are words of letters, digits, `-`, `_` and `.` (`,` `[` `]` separate and
# range them); Linux's HOST_NAME_MAX is 64. A machine's fully qualified name may be longer (DNS: 253).
MAX_NODE_NAME = 64
MAX_HOST_NAME = 253
MAX_EXCLUDED = 64  # hosts left out at most: a job that loses more has a cluster problem, not a node problem
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*")


def node_name(text: object) -> str | None:
    """`text` where it is a name Slurm could call a node, else None (spaces, `;`, `$()`, brackets: never)."""
    return text if isinstance(text, str) and len(text) <= MAX_NODE_NAME and _NODE.fullmatch(text) else None


def host_name(text: object) -> str | None:
    """`text` where it is a machine's host name (fully qualified or not), else None."""
    return text if isinstance(text, str) and len(text) <= MAX_HOST_NAME and _NODE.fullmatch(text) else None


def job_node(host: str | None, job_nodes: Iterable[str] | None) -> str | None:
    """The node among `job_nodes` (Slurm's names for the attempt's nodes) that `host`, read from a log, names: the
    same name, or its first label (gpu-7.cluster.example → gpu-7). Without the job's nodes, a valid node name as
    it is (Slurm itself refuses a name it does not know)."""
    if host_name(host) is None or host is None:
        return None
    if job_nodes is None:
        return node_name(host)
    nodes = set(job_nodes)
    for candidate in (host, host.split(".", 1)[0]):
        if candidate in nodes and node_name(candidate):
            return candidate
    return None


def node_names(values: object) -> tuple[list[str], str | None]:
    """The node names of a record's list (a run's manifest excluded_nodes) and what was not taken, in words: a list
    longer than MAX_EXCLUDED is no record the launcher wrote (none taken), a value that is no node name is left."""
    if not isinstance(values, list):
        return [], None if values is None else "not a list"
    if len(values) > MAX_EXCLUDED:
        return [], f"{len(values)} names, more than the {MAX_EXCLUDED} the launcher ever leaves out"
    names = [value for value in values if node_name(value)]
    dropped = len(values) - len(names)
    return list(dict.fromkeys(names)), f"{dropped} value(s) that are no Slurm node name" if dropped else None
