"""What Flux (LLNL's El Capitan, Tuolumne, Tioga, Lassen's Flux; `flux batch`) gives a batch script from its own
`# flux:` lines (flux-batch(1), SUBMISSION DIRECTIVES: a prefix of non-alphanumeric characters, then `flux:` or
`FLUX:`; shell quoting; `#` starts a comment; only before the first line that is not one).

Flux sets no count in the batch script's environment (flux-environment(7), INITIAL PROGRAM ENVIRONMENT: FLUX_JOB_NNODES
and the like are unset); a script asks the instance instead: `$(flux resource list -n -o {nnodes})`, `$(flux getattr
size)` (one broker a node). Those print the `-N`/`--nodes` of the lines; the job's GPUs (`-g` per slot, whole nodes
with `--exclusive`) are the nodes', not known here.
"""

from __future__ import annotations

import re
import shlex

from launcher.importer.words import MAX_HEADER_LINES, count

_SENTINEL = re.compile(r"#[^\w\s]*\s*(?:flux|FLUX):(.*)")
_NODES = {"-N", "--nodes"}


def directives(text: str) -> tuple[int, int | None, list[str]] | None:
    """(line of the first directive, the nodes asked for, what was not read) from the `# flux:` lines before the
    first command; None without one."""
    first, nodes, unread = 0, None, []
    for number, line in enumerate(text.splitlines()[:MAX_HEADER_LINES], 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        found = _SENTINEL.fullmatch(stripped)
        if not found:
            continue
        first = first or number
        try:
            words = shlex.split(found.group(1), comments=True)
        except ValueError:
            unread.append(f"line {number}: not read (its quoting is not closed)")
            continue
        for k, word in enumerate(words):
            name, eq, value = word.partition("=")
            attached = re.fullmatch(r"-N(.+)", word)
            if attached:
                name, value = "-N", attached.group(1)
            elif not eq:
                value = words[k + 1] if k + 1 < len(words) else ""
            if name in _NODES:
                nodes = count(value)
                if nodes is None:
                    unread.append(f"{name} {value}: not a node count flux batch takes")
    return (first, nodes, unread) if first else None


def asks_nodes(args: list[str]) -> bool:
    """Whether `flux ARGS` prints the batch instance's node count alone: `resource list -n -o {nnodes}` (also
    `-no {nnodes}`, `--no-header --format={nnodes}`) or `getattr size`."""
    if args == ["getattr", "size"]:
        return True
    if args[:2] != ["resource", "list"]:
        return False
    rest = " ".join(args[2:])
    return rest in ("-n -o {nnodes}", "-no {nnodes}", "-n -o{nnodes}", "-no{nnodes}", "--no-header -o {nnodes}",
                    "--no-header --format={nnodes}", "-n --format={nnodes}", "-o {nnodes} -n", "--format={nnodes} -n")
