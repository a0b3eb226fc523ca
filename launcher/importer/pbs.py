"""What PBS gives a job from its own `#PBS -l` lines, what Slurm's `scontrol show hostnames` prints for the job, and
the line filters a script counts its hosts with.

PBS Pro's `#PBS -l select=2:ngpus=4` asks for 2 chunks (each a node where the chunk takes a node's GPUs, as on
ALCF Polaris or ABCI 3.0); Torque's `#PBS -l nodes=2:ppn=8` for 2 nodes of 8 slots. The job's host file
($PBS_NODEFILE) then holds one line per MPI slot: `mpiprocs` (default 1) per chunk, `ppn` per Torque node. Scripts
count their nodes from it (`NNODES=$(wc -l < $PBS_NODEFILE)`, `$(sort -u $PBS_NODEFILE | wc -l)`): its host names
are not known here, its number of lines is. Each line is an unknown value of its own (`${host 2 of
$PBS_NODEFILE}`), so a count of lines is known and a host name never is.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from launcher.importer.words import count, header_directives

NODE_FILE = "PBS_NODEFILE"
HOST_LABEL = "host {} of ${}"  # one line of a scheduler's node file or host list: a host name not known here
# Slurm's host list prints the same way: `scontrol show hostnames $SLURM_JOB_NODELIST`, one host a line, one line a
# node of the job (SLURM_JOB_NUM_NODES, known from the #SBATCH lines)
NODE_LIST = "SLURM_JOB_NODELIST"
_HOST = re.compile(r"host \d+ of \$(?:PBS_NODEFILE|PJM_O_NODEINF|SLURM_JOB_NODELIST)")  # PBS's, PJM's, Slurm's
MAX_LINES = 100_000
FILTERS = ("wc", "sort", "uniq", "head", "tail", "cat")


def directives(text: str) -> tuple[int, dict[str, str], list[str], str] | None:
    """(line of the first count, the variables PBS sets, the node file's host labels one per line, what was read)
    from the `#PBS -l` lines before the first command (qsub reads no later ones); None without a node count."""
    first, chunks, torque = 0, 0, False
    per_chunk: int | None = 1  # None: a count that is none (ppn=0, mpiprocs=-1)
    slots: int | None = 1
    for number, words in header_directives(text, "#PBS"):
        for k, word in enumerate(words):
            value = words[k + 1] if word == "-l" and k + 1 < len(words) else word[2:] if word.startswith("-l") \
                else ""
            for resource in value.split(","):
                select = re.fullmatch(r"select=([0-9]{1,9})((?::[\w.-]+=[\w.-]+)*)", resource)
                nodes = re.fullmatch(r"nodes=([0-9]{1,9})((?::[\w.-]+(?:=[\w.-]+)?)*)", resource)
                if select:
                    first, chunks = first or number, count(select.group(1)) or 0
                    mpiprocs = re.search(r":mpiprocs=([^:]*)", select.group(2))
                    # mpiprocs=0: a chunk without MPI processes (no line); not a count: none read
                    per_chunk = count(mpiprocs.group(1), least=0) if mpiprocs else 1
                elif nodes:
                    first, chunks, torque = first or number, count(nodes.group(1)) or 0, True
                    ppn = re.search(r":ppn=([^:]*)", nodes.group(2))
                    slots = count(ppn.group(1)) if ppn else 1
    if not chunks or per_chunk is None or slots is None or chunks * max(per_chunk, slots) > MAX_LINES:
        return None
    repeat = slots if torque else per_chunk
    hosts = host_lines(NODE_FILE, chunks, repeat)
    variables = {"PBS_NUM_NODES": str(chunks), "PBS_NUM_PPN": str(slots), "PBS_NP": str(chunks * slots)} \
        if torque else {}
    said = (f"{chunks} node(s) of {slots} slot(s)" if torque else
            f"{chunks} chunk(s), each a node, of {per_chunk} MPI slot(s)") + f": {NODE_FILE} has {len(hosts)} line(s)"
    return first, variables, hosts, said


def host_lines(node_file: str, hosts: int, repeat: int = 1) -> list[str]:
    """The labels of a node file's lines: `hosts` hosts, each on `repeat` lines in a row; at most MAX_LINES (every
    caller names a larger file as not read: a count from a directive never sizes a list unchecked)."""
    if hosts < 0 or repeat < 0 or hosts * repeat > MAX_LINES:
        raise ValueError(f"a node file of {hosts} x {repeat} lines is past {MAX_LINES:,}")
    return [HOST_LABEL.format(k, node_file) for k in range(1, hosts + 1) for _ in range(repeat)]


def slurm_hostnames(args: list[str], nodes: str | None, node_list: list[str]) -> list[str] | None:
    """The host labels `scontrol show hostnames [LIST]` prints in a job of `nodes` nodes, one a line, where LIST is
    the job's own (absent, or one of `node_list`: $SLURM_JOB_NODELIST, $SLURM_NODELIST); None otherwise."""
    if args[:2] not in (["show", "hostnames"], ["show", "hostname"]) or len(args) > 3 or \
            (len(args) == 3 and args[2] not in node_list):
        return None
    found = count(nodes) if nodes is not None else None
    if found is None or found > MAX_LINES:
        return None
    return host_lines(NODE_LIST, found)


def is_host(name: str) -> bool:
    """Whether an unknown value is one host line of a node file or host list: one word, whatever its name is."""
    return bool(_HOST.fullmatch(name))


def line_structured(text: str, unknown_parts: Callable[[str], list[str]]) -> bool:
    """Whether every unknown part of `text` is one host line of the node file (so its lines can be counted)."""
    return all(_HOST.fullmatch(part) for part in unknown_parts(text))


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def filtered(program: str, args: list[str], text: str) -> str | None:
    """What `wc -l`, `sort [-u]`, `uniq`, `head -n N` / `head -N`, `tail -n N`, `cat` print for `text` on standard
    input; None for another program or option (not computed here)."""
    lines = _lines(text)
    if program == "wc" and args == ["-l"]:
        return f"{len(lines)}\n"
    if program == "sort" and args in ([], ["-u"]):
        kept = sorted(set(lines)) if args else sorted(lines)
    elif program == "uniq" and not args:
        kept = [line for k, line in enumerate(lines) if k == 0 or lines[k - 1] != line]
    elif program in ("head", "tail") and (len(args) == 2 and args[0] == "-n" or len(args) == 1 and
                                          re.fullmatch(r"-n?[0-9]+", args[0])):
        # the count as GNU reads it: `head -n -1` is all lines but the last, `tail -n +2` from the second on
        # (both were read as 1 and 2 lines)
        count = re.fullmatch(r"([+-]?)([0-9]+)", args[1] if len(args) == 2 else re.sub(r"^-n?", "", args[0]))
        if count is None or count.group(1) == "+" and program == "head":
            return None
        n, sign = int(count.group(2)), count.group(1)
        if program == "head":
            kept = lines[:max(len(lines) - n, 0)] if sign == "-" else lines[:n]
        else:
            kept = lines[max(n - 1, 0):] if sign == "+" else lines[max(len(lines) - n, 0):] if n else []
    elif program == "cat" and not args:
        kept = lines
    else:
        return None
    return "".join(line + "\n" for line in kept)
