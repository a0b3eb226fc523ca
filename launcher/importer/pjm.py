"""What Fujitsu's job manager (PJM: Fugaku, Wisteria-Odyssey/Aquarius, other FX and PRIMERGY sites) gives a job from
its own `#PJM` lines, as pjsub reads them.

`#PJM -L node=4` (also `-L "node=2x3x2:torus"`, `--rsc-list "rscgrp=small,node=12"`) asks for that many nodes (a
shape's product); `#PJM --mpi proc=32` for that many MPI processes, `--mpi max-proc-per-node=8` for at most that many
on each node. The job then sees PJM_NODE (its nodes), PJM_MPI_PROC (its processes), PJM_PROC_BY_NODE (processes on
each node: max-proc-per-node, else proc over the nodes, rounded up) and PJM_O_NODEINF, a file of one line per node
(`mpirun -machinefile $PJM_O_NODEINF`, `head -n 1 $PJM_O_NODEINF` for the master address); scripts use them
(`mpiexec -n $PJM_MPI_PROC`, `--map-by ppr:$PJM_PROC_BY_NODE:node`). Wisteria-Aquarius' shared resource groups
take `-L gpu=N` instead of nodes: N GPUs of one node. `#PJM -x NAME=VALUE` puts NAME in the job's environment.

Not carried: the resource group (`rscgrp=`), the time limit (`elapse=`) and the rest of `-L` (frequency, memory,
torus/mesh placement); a process count pjsub would choose itself (no proc and no max-proc-per-node: the site's
default) is not known here.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field

from launcher.importer.words import MAX_COUNT, count, header_directives

NODE_FILE = "PJM_O_NODEINF"
_SHAPE = re.compile(r"([0-9]{1,7}(?:x[0-9]{1,7}){0,2})((?::[\w-]+)*)")  # 4, 2x3, 4x3x2, 12:noncont, 2x3:torus
_NOT_CARRIED = {"rscgrp": "the resource group", "rscunit": "the resource unit", "elapse": "the time limit"}


@dataclass
class Job:
    """What the `#PJM` lines give: the variables pjsub sets, the node file's lines (one per node), what is said."""

    line: int = 0  # of the first line read
    variables: dict[str, str] = field(default_factory=dict)
    nodes: int | None = None  # lines of $PJM_O_NODEINF (None: no node count read)
    said: list[str] = field(default_factory=list)
    not_carried: list[str] = field(default_factory=list)


def _words(words: list[str]) -> list[str]:
    """The words of a directive as pjsub reads them: `-L "node=4"` is `-L node=4` (the shell's quoting)."""
    try:
        return shlex.split(" ".join(words))
    except ValueError:
        return words


def _options(words: list[str], short: str, long: str) -> list[str]:
    """The values given to `-L` / `--rsc-list` (or `--mpi`): `-L v`, `-Lv`, `--rsc-list v`, `--rsc-list=v`."""
    out = []
    for k, word in enumerate(words):
        if word in (short, long) and k + 1 < len(words):
            out.append(words[k + 1])
        elif short and word.startswith(short) and len(word) > len(short) and not word.startswith("--"):
            out.append(word[len(short):])
        elif word.startswith(long + "="):
            out.append(word[len(long) + 1:])
    return out


def directives(text: str) -> Job | None:
    """The job the `#PJM` lines before the first command ask for (pjsub reads no later ones); None without them."""
    job = Job()
    nodes: int | None = None
    shape = ""
    gpus: int | None = None
    procs: int | None = None
    per_node: int | None = None
    seen = False
    for number, raw in header_directives(text, "#PJM"):
        words = _words(raw)
        seen = True
        job.line = job.line or number
        for value in _options(words, "-L", "--rsc-list"):
            for resource in value.split(","):
                name, _, given = resource.strip().partition("=")
                if name == "node":
                    found = _SHAPE.fullmatch(given)
                    sides = [count(side) for side in found.group(1).split("x")] if found else [None]
                    product = math.prod(side for side in sides if side) if all(sides) else 0
                    nodes, shape = (product, given) if 0 < product <= MAX_COUNT else (None, given)
                    if nodes is None:
                        job.not_carried.append(f"node={given}: not a node count pjsub takes; PJM_NODE not known here")
                elif name == "gpu":
                    gpus = count(given)
                    if gpus is None:
                        job.not_carried.append(f"gpu={given}: not a GPU count pjsub takes")
                elif name in _NOT_CARRIED:
                    job.not_carried.append(f"{name}={given} ({_NOT_CARRIED[name]}: the PJM site's, not carried)")
        for value in _options(words, "", "--mpi"):
            for parameter in value.split(","):
                name, _, given = parameter.strip().partition("=")
                if name == "proc":
                    procs = count(given)
                elif name == "max-proc-per-node":
                    per_node = count(given)
        for k, word in enumerate(words[:-1]):  # -x NAME=VALUE: in the job's environment
            if word == "-x":
                for pair in words[k + 1].split(","):
                    name, eq, given = pair.partition("=")
                    if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                        job.variables[name] = given
    if not seen:
        return None
    if nodes is not None:
        job.nodes = nodes
        job.variables["PJM_NODE"] = str(nodes)
        if procs is None and per_node is not None and nodes * per_node <= MAX_COUNT:
            procs = nodes * per_node
        if per_node is None and procs is not None:
            per_node = -(-procs // nodes)  # pjsub's default: the processes spread over the nodes, rounded up
        job.said.append(f"{nodes} node(s)" + (f" ({shape})" if shape != str(nodes) else "")
                        + f": {NODE_FILE} has {nodes} line(s)")
    elif gpus is not None:
        job.said.append(f"{gpus} GPU(s) of one node (gpu={gpus}: a shared node's GPUs; PJM_NODE not known here)")
        if procs is not None and per_node is None:
            per_node = procs
    if procs is not None:
        job.variables["PJM_MPI_PROC"] = str(procs)
    if per_node is not None:
        job.variables["PJM_PROC_BY_NODE"] = str(per_node)
    if (nodes is not None or gpus is not None) and procs is None:
        job.not_carried.append("PJM_MPI_PROC and PJM_PROC_BY_NODE: neither --mpi proc nor max-proc-per-node is "
                               "given (the site's default, not known here)")
    return job
