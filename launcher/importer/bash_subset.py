"""Read what `bash SCRIPT` would run, without running anything.

The syntax is tree-sitter-bash's (a maintained, complete grammar: pipelines, redirections, lists, compound
commands, functions, here-documents, every expansion); this module owns only the evaluation of what can be known
without running the script: assignments (scalars, arrays, `export A=1 B=2`, `NAME=v cmd` prefixes, `env A=1 cmd`),
parameter expansions (`${X:-d}`, `${X//a/b}`, `${X#p}`, `${#X}`, `${X:0:3}`, `${X^^}`, `${!X}`, arrays), arithmetic
(`$((…))`, `$[…]`, `((…))`, 64-bit as bash), tests (`[ ]`, `[[ ]]`, `test`: strings, globs, `-eq -lt …`), `if`,
`case`, `&&`/`||`, `for` over known words, functions the script defines (their `echo`/`printf` output is what
`$(f)` gives), `eval` of a string the script built and `bash -c '…'` (read as the script they are).

Whatever needs the world (a file test, a command's output, a variable the caller sets, `$1` when no argument is
given) is unknown: it expands to a marker that names it (MARK + name + MARK), and a branch that depends on it is
never chosen. Its line is recorded in `Reading.undecided` with the variables whose value then depends on it (they
become unknown) and the flags written in its branches, so that the import can name what it could not carry.

Work is bounded: input size, value length, evaluation steps, loop iterations and nesting are capped.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import decimal
import fnmatch
import functools
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from launcher import redaction, untrusted
from launcher.errors import UserError
from launcher.importer import arithmetic, awk, bc, coreutils, flux, heredocs, legacy, pbs, pjm, recovery
from launcher.importer.words import MARK, MAX_COUNT, MAX_HEADER_LINES, base_name, header_directives, is_count
from launcher.megatron import args as megatron_args

MAX_SCRIPT_CHARS = 1_000_000
MAX_VALUE_CHARS = 100_000
MAX_STEPS = 100_000  # nodes evaluated over the whole reading (loops, functions, eval included); real scripts: < 3,000
MAX_DEPTH = 60  # nesting of evaluation: compound commands, substitutions, eval, function calls
MAX_LOOP = 1_000  # iterations of one loop
ASSOC_BUCKETS = 1_024  # bash's hash table of an associative array (assoc.h), which sets the order of its keys
MAX_BASH_CHECKS = 16  # texts given to `bash -n` (see _Reader.bash_accepts)
# files sourced to set up the software environment, not the run's settings: not read, and the values a script
# leaves unset after them keep their defaults (a virtualenv's bin/activate, conda's activate and deactivate, conda.sh,
# Lmod's init/bash, ~/.bashrc, /etc/profile…, Ascend's and oneAPI's set_env.sh / setvars.sh)
ENVIRONMENT_SETUP = re.compile(r"(?:^|/)(?:activate|deactivate|conda\.sh|mamba\.sh|\.bashrc|\.bash_profile|\.profile|"
                               r"set_env\.sh|setvars\.sh|init/bash|modules\.sh|lmod\.sh)$|^/etc/")
UNRESOLVED = re.compile(f"{MARK}([^{MARK}]*){MARK}")
WHOLE = "\x02"  # before a test operand that is one word whatever its unknown part holds (a quoted one)
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
FLAG = re.compile(r"(?<![\w-])--[A-Za-z][A-Za-z0-9_-]*")
ENTRY_WORD = re.compile(r"\.py$")  # the script a runner starts: what follows it are its own flags
WORD_SPLIT = re.compile(f"(?:{MARK}[^{MARK}]*{MARK}|[^\\s{MARK}])+")
DEFAULT_IFS = " \t\n"
# what bash itself keeps (the positional parameters, $0, the sourced files' stack, IFS): a sourced file not read is not
# taken to change them (see _Reader.source_not_read)
# names the environment a script runs in usually holds (see _Reader.from_environment)
ENVIRONMENT_NAMES = re.compile(r"PATH|HOME|USER|LOGNAME|SHELL|PWD|OLDPWD|HOSTNAME|LANG|LC_\w+|TERM|TMPDIR|"
                               r"LD_LIBRARY_PATH|LD_PRELOAD|PYTHONPATH|CPATH|LIBRARY_PATH|MANPATH|PKG_CONFIG_PATH|"
                               r"MODULEPATH|VIRTUAL_ENV|(?:SLURM|PBS|PJM|LSB|OMPI|PMI|PMIX|CUDA|NCCL|CONDA|LMOD)_\w+")
NOT_SET_BY_SOURCE = {"#", "@", "*", "0", "BASH_SOURCE", "IFS"}
MAX_TAINT_SOURCES = 8  # sourced files not read named as what a value depends on
MAY_SET = ("what it sets is unknown (from here on an unset variable is unknown, and a value set before it may be the "
           "file's)")


def _split(value: str, ifs: str) -> tuple[list[str], bool, bool]:
    """Bash's field splitting of an unquoted expansion: (fields, a delimiter leads, a delimiter ends). The script's
    own IFS decides (IFS=, splits `a,b` in two and `a b` not at all); an unknown part is never split apart."""
    if ifs == DEFAULT_IFS or MARK in value or MARK in ifs:
        return WORD_SPLIT.findall(value), value[:1].isspace(), value[-1:].isspace()
    if not ifs:
        return ([value] if value else []), False, False
    blank = "".join(c for c in ifs if c in DEFAULT_IFS)
    other = "".join(c for c in ifs if c not in DEFAULT_IFS)
    core = value.strip(blank) if blank else value
    if not core:
        return [], bool(value), bool(value)
    around = f"[{re.escape(blank)}]*" if blank else ""
    delimiters = ([f"{around}[{re.escape(other)}]{around}"] if other else []) + (
        [f"[{re.escape(blank)}]+"] if blank else [])
    fields = re.split("|".join(delimiters), core)
    if other and fields and fields[-1] == "":
        fields.pop()  # a delimiter at the end ends the last field, it does not start an empty one
    # a delimiter in front ends what came before in the word (`p${S}` with S=",x" gives p and x…); an empty first
    # field stands for it
    leading = value[:1] in ifs and not (fields and fields[0] == "" and core[:1] in other)
    return fields, leading, value[-1:] in ifs
INT64 = 1 << 64


# The job manager's directory the job was submitted from (Slurm, PBS, LSF, PJM, Grid Engine) when the caller's
# environment does not give it: a script reads its files from there, and the import reads it as run from its own
# directory (the one it is submitted from, as its users run it).
SUBMIT_DIRECTORIES = ("SLURM_SUBMIT_DIR", "PBS_O_WORKDIR", "LS_SUBCWD", "PJM_O_WORKDIR", "SGE_O_WORKDIR")

class ShellSyntaxError(ValueError):
    pass


def unresolved_names(text: str) -> list[str]:
    names = UNRESOLVED.findall(text)
    if not names and MARK in text:  # a marker split apart: still unknown, never a value
        return ["?"]
    return names


def show(text: str) -> str:
    """A value for people: unknown parts as ${NAME}."""
    return UNRESOLVED.sub(lambda m: "${" + m.group(1) + "}", text).replace(MARK, "")


def remember_secret(name: str, value: str) -> None:
    """A variable the script sets that is a secret (DB_PASSWORD=pw, exported or not): its value is shown in no
    note and no file (a command that uses it, `mysql --password=$DB_PASSWORD`, is named with <redacted>). Only a
    value that can be a credential: a number, a path, a flag, a variable's name or a word of eight characters or
    fewer that a variable such as KEY_SIZE=1024, AUTH_FILE=/etc/auth, USE_AUTH=true or a loop's KEY=NUM_NODES
    holds would be scrubbed from every setting that has it."""
    if len(value) > 8 and not re.search(r"[\s/]", value) and not re.fullmatch(r"[0-9.eE+-]+|-.*|[A-Z][A-Z0-9_]*",
                                                                             value) \
            and not unresolved_names(value) and value not in public_words() and redaction.is_secret(name, value):
        redaction.remember(name, value)


# The words of a file's text: a name, or any other character (a quote, `:`, `=`): linear, whatever the quotes
_WRITTEN_TOKEN = re.compile(r"[\w.-]+|\S")
_WRITTEN_VALUE = re.compile(r"""[ \t]*("(?:[^"\\\n]|\\.){0,4096}"|'[^'\n]{0,4096}'|[^\s,;}\]]{1,4096})""")


def remember_written_secrets(text: str) -> None:
    """A file the script writes (a DeepSpeed JSON, a YAML, an env or INI file) whose secret-named member holds a value
    (`"api_key": "…"`, `hf_token: …`, `PASSWORD=…`, at any depth): the value is remembered as a secret variable's is
    (remember_secret), so the notes that show the file's text, and the preset, show <redacted> in its place."""
    if not redaction.SECRET_NAME.search(text):
        return
    last: list[re.Match[str] | None] = [None, None]  # the two tokens before this one
    read_to = 0  # the end of the last value taken: a name inside it is part of that value
    for token in _WRITTEN_TOKEN.finditer(text):
        earlier, last = last, [last[1], token]
        if token.group() not in (":", "="):
            continue
        name = earlier[1] if earlier[1] is not None and earlier[1].group() in ('"', "'") else None
        name = earlier[0] if name is not None else earlier[1]
        if name is None or name.start() < read_to or not redaction.SECRET_NAME.search(name.group()) \
                or not re.fullmatch(r"[\w.-]+", name.group()):
            continue
        found = _WRITTEN_VALUE.match(text, token.end())
        if found is None:
            continue
        read_to = found.end()
        value = found.group(1)
        if value[:1] == '"':
            with contextlib.suppress(UserError):
                value = str(untrusted.loads_json(value, "a value"))
        remember_secret(name.group(), value.strip("\"'"))


@lru_cache(maxsize=1)
def public_words() -> frozenset[str]:
    """The values Megatron's flags choose from (allgather, alltoall, RMSNorm, …), and forks' names for them:
    published words, no credential, whatever the variable holding them is called (TOKEN_DISPATCHER_TYPE=allgather
    was taken for a secret, and the preset's moe_token_dispatcher_type written as <redacted>)."""
    words = {str(choice) for arg in megatron_args.catalog().values() for choice in arg.choices or ()}
    return frozenset(words | {given for _, given in legacy.choices()})


def _unknown(name: str) -> str:
    return MARK + re.sub(r"\s+", " ", name.replace(MARK, "")).strip()[:80] + MARK


# -- the result -------------------------------------------------------------------------------------------------

# a test that a file or a command's output decides, whatever the variables it reads: `[ -e "$F" ]`, `$(…)`
CALLER_ONLY_UNSURE = re.compile(r"(?:^|\s)-[bcdefghkprsuwxGLNOS]\s|\$\(|`")


def _test_spans(node: Any) -> list[tuple[int, int]]:
    """The byte spans of the tests inside a construct: an if's or elif's condition (what comes before `then`), a
    while's or until's (before `do`), a case's word and its items' patterns."""
    spans: list[tuple[int, int]] = []
    stack = [node]
    while stack:
        current = stack.pop()
        children = current.children
        if current.type in ("if_statement", "elif_clause", "while_statement", "until_statement"):
            stop = "then" if current.type in ("if_statement", "elif_clause") else "do_group"
            for child in children[1:]:
                if child.type == stop:
                    break
                spans.append((child.start_byte, child.end_byte))
        elif current.type in ("case_statement", "case_item"):
            spans += [(child.start_byte, child.end_byte)
                      for k, child in enumerate(children) if current.field_name_for_child(k) == "value"]
        stack.extend(children)
    return spans


@dataclass(frozen=True)
class Undecided:
    """A construct whose outcome needs the world (a file, a command's output, the caller's environment)."""

    line: int
    what: str  # the construct as written (its first line), e.g. `if [ "$NODES" -gt 1 ]`
    names: tuple[str, ...] = ()  # variables whose value depends on it (now unknown)
    flags: tuple[str, ...] = ()  # --flags written in its branches
    arguments: bool = False  # it depends on the script's arguments ($1 …, $#)
    # the words each branch leaves in a variable it decides (`LOAD="--load ckpt"` in one, "" in the other): what the
    # unknown `$LOAD` of the training command may be
    # (not compared: the same construct met again, e.g. in each turn of a loop, is one construct)
    values: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = field(default=(), compare=False)
    # every variable it decides was only added to, with flags its text names (`CMD="$CMD --wandb-project p"`): of the
    # words read from them, only those flags depend on it, not what the variables held before
    appends: bool = field(default=False, compare=False)
    # flags of no release the pin knows (a fork's) that its branches may put among the training command's own flags
    # (set by training_command.undecided_for): each decides what the run is, as such a flag written there would
    unknown_flags: tuple[str, ...] = field(default=(), compare=False)
    # flags its branches put before what a variable held (`CMD="nsys profile --output p $CMD"`): a wrapper's
    wraps: tuple[str, ...] = field(default=(), compare=False)
    # the variables its test reads that the script never sets (`if [ -z "$FP32" ]`): the caller's environment, which
    # `launch import --env NAME=VALUE` gives; empty where the test also needs a file or a command's output
    environment: tuple[str, ...] = field(default=(), compare=False)
    # how to decide it where neither the arguments nor the environment do (a sourced file not read: give the file)
    decide: str = field(default="", compare=False)
    sourced: bool = field(default=False, compare=False)  # a file sourced and not read, which may change any value

    def how_to_decide(self) -> str:
        """The way to decide it that the user has: the script's arguments, the caller's variables it reads, or what
        `decide` says."""
        if self.decide:
            return f" ({self.decide})"
        if self.arguments:
            return " (it depends on the script's arguments: give them after the script's name)"
        if self.environment:
            return (" (it reads the caller's environment: give what the script runs with, "
                    + " ".join(f"--env {name}=VALUE" for name in self.environment) + ")")
        return ""

    def describe(self) -> str:
        out = f"line {self.line}: {self.what}: cannot be decided without running the script" + self.how_to_decide()
        if self.names:
            out += "; it sets " + ", ".join(self.names)
        if self.flags:
            out += "; its branches give " + " ".join(self.flags)
        return out


@dataclass(frozen=True)
class ScriptCommand:
    argv: list[str]
    line: int
    env: dict[str, str] = field(default_factory=dict)  # NAME=value prefixes and `env NAME=value`
    under: tuple[Undecided, ...] = ()  # undecided branches the command sits in
    depends: dict[int, tuple[Undecided, ...]] = field(default_factory=dict)  # argv index → what its value needs
    # `srun -N 2 --ntasks-per-node 8 bash -c "python pretrain_gpt.py …"`: the words before the shell that runs the
    # command, whose process counts are the job's
    outer: list[str] = field(default_factory=list)
    # undecided branches behind words that expanded to nothing here (`$EXTRA`, which a branch may fill with flags)
    absent: tuple[Undecided, ...] = ()
    # undecided branches behind the training flags of a command string it was read from (`eval $CMD`, where the
    # words after the entry script depended on them)
    among_flags: tuple[Undecided, ...] = ()
    where: str | None = "."  # the directory it runs in, as _Reader.where: the files it names that the script wrote


# the words of a value that came from values a sourced file not read may have changed, each group with those files
Taint = list[tuple[frozenset[str], tuple[Undecided, ...]]]


@dataclass
class Shell:
    scalars: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str]] = field(default_factory=dict)
    exports: dict[str, str] = field(default_factory=dict)
    functions: dict[str, Any] = field(default_factory=dict)  # name → body node
    uncertain: dict[str, tuple[Undecided, ...]] = field(default_factory=dict)  # variable → what its value needs

    def copy(self) -> Shell:
        # arrays are never changed in place (each change makes a new list), so a copy may share them
        return Shell(dict(self.scalars), dict(self.arrays), dict(self.exports), dict(self.functions),
                     dict(self.uncertain))

    def lookup(self, name: str) -> str | None:
        if name in self.arrays:
            return self.arrays[name][0] if self.arrays[name] else ""
        return self.scalars.get(name)


@dataclass
class Reading:
    """What the script does, as far as it can be known without running it."""

    commands: list[ScriptCommand] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line, why it was not carried)
    undecided: list[Undecided] = field(default_factory=list)  # branches that hold something and were not chosen
    shell: Shell = field(default_factory=Shell)
    stopped: tuple[int, str] | None = None  # (line, why) where bash stops: `exit`, a syntax error
    slurm: dict[str, int] = field(default_factory=dict)  # the script's #SBATCH counts: nodes, ntasks-per-node, …
    lsf_nodes: int | None = None  # `#BSUB -nnodes N`: the nodes of an LSF job (jsrun runs on each)
    # (nodes, MPI slots on each) of a PBS or PJM job (`select=2:mpiprocs=4`, `node=4` with `--mpi proc=16`)
    job_slots: tuple[int, int] | None = None
    flux_nodes: int | None = None  # `# flux: -N N`: the nodes of a Flux batch job (`flux resource list` prints it)
    # (first line, last line) of each part the grammar could not read (bash can) that names a pretrain_*.py: a
    # training command may be inside it
    unread_entry: list[tuple[int, int, int]] = field(default_factory=list)  # (first, last, where the error is)
    # names the script gives a value of its own (`X=4`, `read X`), so that the caller's environment (--env) does not
    # decide them; `X=${X:-4}` is not one
    set_by_script: frozenset[str] = frozenset()
    # NAME → the variable not known whose value NAME holds (`LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK`); "" where
    # NAME is also set otherwise
    copies: dict[str, str] = field(default_factory=dict)
    unended_heredocs: list[int] = field(default_factory=list)  # lines of a `<<WORD` no line ends (it takes the rest)
    # path (as the script names it) → (its text, the line that wrote it) of each file the script writes whose text is
    # known (`cat > ds_config.json <<EOF … EOF`, `echo '{…}' > f.json`): what a training flag given it reads
    written: dict[str, tuple[str, int]] = field(default_factory=dict)
    # of those, path → the lines of sourced files not read that may have changed the values it was written from
    written_unsure: dict[str, tuple[int, ...]] = field(default_factory=dict)


# -- parsing --------------------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _parser() -> Any:
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


class _Exit(Exception):
    def __init__(self, line: int = 0, why: str = "", code: int | None = 1):
        super().__init__(why)
        self.line, self.why = line, why
        self.code = code  # the exit status, None where it is not known (`exit` alone, `exit $RC`)


class _Break(Exception):
    """break / continue (continue: `again`)."""

    def __init__(self, again: bool, levels: int = 1):
        super().__init__()
        self.again = again
        self.levels = levels  # `break 2`: this loop and the one around it


class _Return(Exception):
    pass


class _Unknown(Exception):
    """An arithmetic or test operand that is not known."""


WORDISH = {"word", "number", "string", "raw_string", "ansi_c_string", "translated_string", "concatenation",
           "simple_expansion", "expansion", "command_substitution", "arithmetic_expansion", "process_substitution",
           "extglob_pattern", "regex", "brace_expression", "special_variable_name", "variable_name",
           "test_operator"}
EXPANSIONS = {"string", "raw_string", "ansi_c_string", "translated_string", "simple_expansion", "expansion",
              "command_substitution", "arithmetic_expansion", "process_substitution", "concatenation"}
DECLARATIONS = ("export", "declare", "local", "readonly", "typeset")
SHELLS = ("sh", "bash", "dash", "zsh")
# sbatch options that take a value as the next word (`sbatch -p gpu job.sbatch`: the script is job.sbatch)
SBATCH_VALUE_OPTIONS = {"-p", "-A", "-J", "-t", "-N", "-n", "-o", "-e", "-d", "-q", "-c", "-w", "-x", "-G",
                        "--partition", "--account", "--job-name", "--time", "--nodes", "--ntasks", "--output",
                        "--error", "--dependency", "--qos", "--gres", "--array", "--mem", "--chdir"}


# What sbatch sets in the job's environment from the script's own #SBATCH lines (sbatch(1), OUTPUT ENVIRONMENT
# VARIABLES); a script written for sbatch reads them (`torchrun --nnodes $SLURM_NNODES`).
SBATCH_ENV = {"nodes": ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"), "ntasks-per-node": ("SLURM_NTASKS_PER_NODE",),
              "gpus-per-node": ("SLURM_GPUS_PER_NODE", "SLURM_GPUS_ON_NODE"), "cpus-per-task": ("SLURM_CPUS_PER_TASK",),
              "ntasks": ("SLURM_NTASKS", "SLURM_NPROCS"), "gpus": ("SLURM_GPUS",)}
SBATCH_SHORT = {"-N": "nodes", "-n": "ntasks", "-c": "cpus-per-task", "-G": "gpus"}


def slurm_directives(text: str, reading: Reading, shell: Shell | None = None, at: int | None = None,
                     command_line: Sequence[str] = ()) -> None:
    """The #SBATCH lines before the script's first command (sbatch reads no later ones) → the SLURM_* variables
    sbatch gives the job, set as known values (in `shell`, else the reading's); said with their line (or `at`: the
    line where a job file the script wrote is submitted). `command_line`: the options sbatch is given there
    (`sbatch -N 4 job.sh`), which win over the lines."""
    found: dict[str, str] = {}
    first = 0
    lines = [*header_directives(text, "#SBATCH"), *([(at or 1, list(command_line))] if command_line else [])]
    for number, words in lines:
        for k, word in enumerate(words):
            name, eq, value = word.partition("=")
            if not eq and word[:2] in SBATCH_SHORT and len(word) > 2:
                name, value = word[:2], word[2:]  # -N2, -n16: a short option's value written next to it
            elif not eq:
                value = words[k + 1] if k + 1 < len(words) else ""
            option = SBATCH_SHORT.get(name, name.removeprefix("--"))
            if option in SBATCH_ENV and unresolved_names(value):  # `sbatch -N $NODES job.sh`: not known here
                reading.slurm.pop(option, None)
                found.update({variable: _unknown(variable) for variable in SBATCH_ENV[option]})
                continue
            if option == "nodes" and re.fullmatch(r"[0-9]+-[0-9]+", value):  # --nodes=2-4: as many as sbatch finds
                low, high = value.split("-")
                given = f"between {low} and {high} nodes, as many as it finds free" if is_count(low) and \
                    is_count(high) and int(low) <= int(high) else "no node range it takes (sbatch refuses it)"
                reading.skipped.append((number, f"--nodes={value}: sbatch gives the job {given}: SLURM_NNODES is not "
                                                "known here, and a job launcher that runs on each node of the job "
                                                "(srun without -N) runs on that many (give --nodes)"))
                continue
            gres = re.search(r"(?:^|,)gpu(?::[\w.-]+)?:([0-9]+)(?:,|$)", value) if option == "gres" else None
            typed = re.fullmatch(r"[\w.-]+:([0-9]+)", value) if option in ("gpus-per-node", "gpus") else None
            gres, typed = (gres if gres and is_count(gres.group(1)) else None,
                           typed if typed and is_count(typed.group(1)) else None)
            if gres:  # --gres=gpu:a100:4,nvme:1 sets only the count on the node (no SLURM_GPUS_PER_NODE)
                first = first or number
                reading.slurm["gpus-per-node"] = int(gres.group(1))
                found["SLURM_GPUS_ON_NODE"] = gres.group(1)
            elif typed:  # --gpus-per-node=mi250:8: the variable keeps the type, as sbatch gives it
                first = first or number
                if option == "gpus-per-node":
                    reading.slurm[option] = int(typed.group(1))
                    found.update({"SLURM_GPUS_PER_NODE": value, "SLURM_GPUS_ON_NODE": typed.group(1)})
                else:
                    found["SLURM_GPUS"] = value
            elif option in SBATCH_ENV and is_count(value):
                first = first or number
                reading.slurm[option] = int(value)
                for variable in SBATCH_ENV[option]:
                    found[variable] = value
            elif option in SBATCH_ENV and value[:1].isdigit():  # sbatch refuses --nodes=0, 99999999999, ٨
                reading.skipped.append((number, f"{name}={value}: not a count sbatch takes (1 to {MAX_COUNT:,}); "
                                                f"{', '.join(SBATCH_ENV[option])} not known here"))
    counts = reading.slurm
    if "ntasks" not in counts and "nodes" in counts and "ntasks-per-node" in counts:
        found["SLURM_NTASKS"] = found["SLURM_NPROCS"] = str(counts["nodes"] * counts["ntasks-per-node"])
    if found:
        (shell or reading.shell).scalars.update(found)
        said = ", ".join(f"{k}={show(v)}" for k, v in found.items())
        reading.skipped.append((first if at is None else at, "read as sbatch runs it: " + said
                                + (" from the #SBATCH lines and sbatch's own command line" if command_line else
                                   " from the #SBATCH lines (sbatch's own command line may change them)")))


# Grid Engine resource types that take whole nodes (ABCI's rt_F and rt_AF, TSUBAME 4.0's node_f): `#$ -l node_f=16`
# gives the job 16 hosts, NHOSTS in its environment (a script reads it: NUM_NODES=$NHOSTS)
GRID_ENGINE_FULL_NODES = re.compile(r"(?:rt_F|rt_AF|node_f)=([0-9]{1,7})")


def grid_engine_directives(text: str, reading: Reading) -> None:
    """The `#$ -l …` lines before the script's first command (qsub reads no later ones) → NHOSTS, as a known value."""
    for number, words in header_directives(text, "#$"):
        for k, word in enumerate(words[:-1]):
            resources = words[k + 1].split(",") if word == "-l" else []  # -l rt_AF=2,h_rt=1:00:00
            for found in filter(None, map(GRID_ENGINE_FULL_NODES.fullmatch, resources)):
                if not is_count(found.group(1)):
                    continue  # node_f=0: no node
                reading.slurm["nodes"] = int(found.group(1))
                given = {"NHOSTS": found.group(1)}
                kind = found.group(0).partition("=")[0]
                if kind.startswith("rt_"):  # ABCI also names the resource type (`[[ $SGE_RESOURCE_TYPE == rt_AF ]]`)
                    given["SGE_RESOURCE_TYPE"] = kind
                reading.shell.scalars.update(given)
                said = ", ".join(f"{k}={v}" for k, v in given.items())
                reading.skipped.append((number, f"read as qsub runs it: {said} from the #$ lines "
                                                "(qsub's own command line may change it)"))


def lsf_directives(text: str, reading: Reading) -> None:
    """`#BSUB -nnodes N` before the first command (IBM LSF on Summit, Lassen, Sierra: whole nodes) → the job's nodes."""
    for number, line in enumerate(text.splitlines()[:MAX_HEADER_LINES], 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        found = re.fullmatch(r"#BSUB\s+-nnodes\s+([0-9]{1,7})(?:\s.*)?", stripped)
        if found and is_count(found.group(1)):
            reading.lsf_nodes = int(found.group(1))
            reading.skipped.append((number, f"read as bsub runs it: {reading.lsf_nodes} node(s) from the #BSUB lines "
                                            "(bsub's own command line may change them)"))


def pbs_directives(text: str, reading: Reading, reader: _Reader) -> None:
    """The `#PBS -l select=N…` / `nodes=N:ppn=P` lines → Torque's PBS_NUM_* variables and the node file's lines."""
    found = pbs.directives(text)
    if found is None:
        return
    line, variables, hosts, said = found
    reading.shell.scalars.update(variables)
    if hosts:  # the job's nodes and MPI slots on each (its node file's lines per host)
        reading.job_slots = (len(set(hosts)), len(hosts) // len(set(hosts)))
    reader.known_files[_unknown(pbs.NODE_FILE)] = "".join(_unknown(host) + "\n" for host in hosts)
    given = ", ".join(f"{k}={v}" for k, v in variables.items())
    reading.skipped.append((line, f"read as qsub runs it: {said}" + (f", {given}" if given else "")
                                  + " from the #PBS lines (qsub's own command line may change them)"))


def pjm_directives(text: str, reading: Reading, reader: _Reader) -> None:
    """The `#PJM` lines (Fujitsu's job manager) → PJM_NODE, PJM_MPI_PROC, PJM_PROC_BY_NODE, the node file's lines."""
    job = pjm.directives(text)
    if job is None:
        return
    reading.shell.scalars.update(job.variables)
    if job.nodes is not None and is_count(job.variables.get("PJM_PROC_BY_NODE", "")):  # its nodes, processes on each
        reading.job_slots = (job.nodes, int(job.variables["PJM_PROC_BY_NODE"]))
    if job.nodes is not None and job.nodes <= pbs.MAX_LINES:
        reader.known_files[_unknown(pjm.NODE_FILE)] = "".join(
            _unknown(host) + "\n" for host in pbs.host_lines(pjm.NODE_FILE, job.nodes))
    given = ", ".join(f"{k}={show(v)}" for k, v in job.variables.items())
    reading.skipped.append((job.line, "read as pjsub runs it: " + "; ".join([*job.said, *([given] if given else [])])
                            + " from the #PJM lines (pjsub's own command line may change them)"
                            + "".join(f"; {n}" for n in job.not_carried)))


def flux_directives(text: str, reading: Reading) -> None:
    """The `# flux:` lines of a `flux batch` script → its nodes, which `flux resource list -n -o {nnodes}` prints."""
    found = flux.directives(text)
    if found is None:
        return
    line, nodes, unread = found
    reading.flux_nodes = nodes
    said = f"{nodes} node(s), which `flux resource list -n -o {{nnodes}}` and `flux getattr size` print" if nodes \
        else "no node count (-N), so the job's nodes are not known here"
    reading.skipped.append((line, f"read as flux batch runs it: {said} from the # flux: lines (flux batch's own "
                                  "command line may change them)" + "".join(f"; {u}" for u in unread)))


def read_script(text: str, positional: Sequence[str] = (), path: Path | None = None,
                environment: Mapping[str, str] | None = None) -> Reading:
    """What `bash SCRIPT positional…` would run; $1 … and $# are the positional arguments given; `path`: the script's
    file, next to which the files it sources (`source config.sh`) are read (None: none is read); `environment`: the
    variables the user says the script runs with (`TP=8 bash SCRIPT`), exported as bash inherits them; any other
    variable the script reads and does not set stays unknown."""
    if len(text) > MAX_SCRIPT_CHARS:
        raise ShellSyntaxError(f"the script has {len(text):,} characters; at most {MAX_SCRIPT_CHARS:,} are read")
    if MARK in text:
        raise ShellSyntaxError("the script holds a NUL byte (a binary file?)")
    reading = Reading()
    reader = _Reader(reading, positional, path)
    for name, value in (environment or {}).items():
        reading.shell.scalars[name] = value
        reading.shell.exports[name] = value
    slurm_directives(text, reading)
    grid_engine_directives(text, reading)
    pbs_directives(text, reading, reader)
    lsf_directives(text, reading)
    pjm_directives(text, reading, reader)
    flux_directives(text, reading)
    keep_the_callers_values(environment or {}, reading)
    try:
        reader.given = {name: _state_of(reading.shell, name)
                        for name in [*reading.shell.scalars, *reading.shell.arrays]}
        reader.run_source(text, line_offset=0)
    except _Exit as exc:
        reading.stopped = (exc.line, exc.why) if exc.line else None
    except (_Break, _Return):
        pass
    except RecursionError:
        raise ShellSyntaxError("the script nests more deeply than can be read") from None
    reader.script_names  # noqa: B018 (scans what is left to scan)
    reading.written = {path: ("".join(text for text, _ in chunks), reader.written_at.get(path, 0))
                       for path, chunks in reader.written.items() if chunks}
    reading.written_unsure = {path: tuple(sorted(lines)) for path, lines in reader.written_unsure.items()
                              if path in reading.written}
    reading.set_by_script = frozenset(reader.names_fixed)
    reading.copies = dict(reader.copies)
    return reading


def keep_the_callers_values(environment: Mapping[str, str], reading: Reading) -> None:
    """--env NAME=VALUE is the environment the script runs with (`SLURM_JOB_NUM_NODES=1 bash job.sh`, as a sweep runs
    a job file under `srun --nodes=1`): a value the scheduler lines (#SBATCH, #$, #PBS …) gave the same name does not
    replace it; said, with the value the lines would give."""
    for name, value in environment.items():
        replaced = reading.shell.scalars.get(name)
        if replaced is None or replaced == value:
            continue
        reading.shell.scalars[name] = reading.shell.exports[name] = value
        reading.skipped.append((1, f"{name}={show(value)}: as given (--env), over the {show(replaced)} the job "
                                   "file's scheduler lines give it (as the job runs where it is run with that value)"))


@dataclass
class _Capture:
    out: list[str] = field(default_factory=list)
    known: bool = True
    why: str = ""


class _Reader:
    def __init__(self, reading: Reading, positional: Sequence[str], path: Path | None = None):
        self.reading = reading
        self.directory = path.parent if path is not None else None
        # where the script is as it runs: its own directory at first (the import's assumption), moved by `cd DIR`,
        # `pushd DIR`, `popd` of a known DIR; None after one whose DIR is not known here (cwd_why: that command)
        self.cwd: Path | None = self.directory
        self.cwd_why = ""
        # the same place as a path from the script's own directory ("." there), also where that directory is not
        # known (the script given as text): the files the script writes are kept by it (written_place). A `cd` to a
        # directory not known starts a place of its own (unknown_place), where the files written after it are found
        # again until the next `cd`; None where that place is left by `..`
        self.where: str | None = "."
        self.unknown_places = 0
        self.in_heredoc = False  # expanding a here-document's text, where bash joins $* by blanks
        self.single_quotes_kept = False  # reading the word of "${X:-word}" (double-quoted), where ' is text
        self.pushed: list[tuple[Path | None, str, str | None]] = []  # pushd's stack of directories
        # why the command being run gets none of the exported variables (`sudo bash x.sh`, `env -i …`), else ""
        self.env_dropped = ""
        # the script and the files being sourced, outermost first: a file that sources one of them is not read again
        self.sourcing: list[str] = [os.path.realpath(path)] if path is not None else []
        self.sourced_chars = 0  # of every file sourced: together at most MAX_SCRIPT_CHARS
        self.unread_sources = 0  # `source FILE` lines passed whose file was not read: any unset name may be its
        # what the caller and the job's scheduler gave (--env, #SBATCH …) before the script ran: a file not read may
        # change those too, but they are not the script's own values (see source_not_read)
        self.given: dict[str, tuple[Any, ...]] = {}
        self.shell = reading.shell
        self.positional: list[str] | None = list(positional) if positional else None
        self.steps = 0
        self.depth = 0
        self.src = b""
        self.whole = b""  # all of the text being read (self.src: the part of it being read)
        self.unread_functions: dict[str, str] = {}  # a function defined in lines not read → those lines
        self.bash_verdicts: dict[bytes, bool] = {}  # text → whether `bash -n` accepts it
        self.line_offset = 0
        self.fixed_line: int | None = None  # inside eval / bash -c: every command is on the outer line
        self.capture: _Capture | None = None
        self.errexit = False  # `set -e`: a command that fails on its own line ends the script
        self.input_forked: Any = None  # the command whose unseen input file is being read as present (input_unseen)
        self.nounset = False  # `set -u`: expanding a variable known to be unset ends the script
        self.noglob = False  # `set -f`: no pathname expansion
        self.tail_failed = False  # the last `a && b` list read ran its last command, which failed (see fails)
        # words after a redirection (`cmd a > log b c`): the grammar puts b and c in the redirection; bash passes
        # them to cmd, after a
        self.redirect_words: list[Any] = []
        self.stdin: str | None = None  # the known text of a here-string or here-document given to `read`/`mapfile`
        self.normal_path = False  # the last `&&` list's status is unknown only for commands read on their normal path
        self.under: tuple[Undecided, ...] = ()
        self.outer: list[str] = []  # the launcher words around the `bash -c` being read
        self.absent: tuple[Undecided, ...] = ()  # of the command being read (ScriptCommand.absent)
        # of the command being read, each word (blank-split) that holds a value a sourced file not read may change
        self.command_taint: dict[str, tuple[Undecided, ...]] = {}
        # what the string being run by eval, bash -c or a remote shell depends on: each command read from it may
        # carry the flags those constructs give (they are added to its ScriptCommand.absent)
        self.through: tuple[Undecided, ...] = ()
        self.through_flags: tuple[Undecided, ...] = ()  # of those, what decides the words after its entry script
        self.through_sourced: dict[str, tuple[Undecided, ...]] = {}  # its words from values a file not read may set
        self.element: str | None = None  # the array element an operation of ${A[@]…} is applied to
        self.getopts_at = 1  # getopts: the letter of a grouped `-ab` it reads next
        self.status: bool | None = True  # of the last `a && b` list read, when it is known
        # the last command is known to have failed (its redirection refused, a `return` bash refuses): status 1
        self.failed = False
        self.loops = 0  # loops around the command being read (break and continue outside one do nothing)
        self.functions = 0  # function calls around it
        self.sources = 0  # sourced files around it (`return` ends a function or a sourced file, else bash refuses it)
        # files the script writes from here-documents (`cat > job.sbatch <<EOF`), to read when it runs them
        self.written: dict[str, list[tuple[str, int]]] = {}  # path → [(text, line offset of its here-document)]
        self.written_at: dict[str, int] = {}  # path → the line of the command that wrote it first (or anew)
        # path → the lines of sourced files not read that may have changed the values it was written from
        self.written_unsure: dict[str, set[int]] = {}
        # files whose lines the job's scheduler gives (PBS's node file: its number of lines), by their path's value
        self.known_files: dict[str, str] = {}
        self.touched: set[Undecided] | None = None  # undecided items the word being expanded depends on
        self.touched_names: set[str] | None = None  # the variables it reads
        # NAME → (its value's state, word → the sourced files not read that may have changed it): see source_not_read
        self.taint: dict[str, tuple[tuple[Any, ...], Taint]] = {}
        self.value_word_sets: dict[str, tuple[tuple[Any, ...], frozenset[str]]] = {}  # NAME → (state, its words)
        self.locals: list[dict[str, tuple[str | None, list[str] | None]]] = []
        self.noted_arguments = False
        self.from_arguments: set[str] = set()  # variables set from $1 … while no argument was given
        self.current_line = 1
        self.names_seen: set[str] = set()  # every name the script assigns, anywhere (see script_names)
        self.names_fixed: set[str] = set()  # of them, those it sets whatever the caller's environment holds
        self.pending_names: list[tuple[Any, bytes]] = []  # sources parsed, not yet scanned for names
        if self.positional is not None:  # without any, $# stays unknown: a script run by hand is usually given some
            self.set_positional(self.positional)
        self.capture_cwd: str | None = None  # `cd DIR` inside $(…): for the `pwd` after it
        # `declare -n REF=NAME`: REF names NAME (reading and assigning REF is NAME); "" where NAME is not known
        self.refs: dict[str, str] = {}
        # NAME → the variable not known whose value NAME holds as a plain copy ("" where NAME is also set otherwise)
        self.copies: dict[str, str] = {}
        self.ifs_unset = False
        # `declare -i N` / `-l` / `-u`: each later assignment to N is arithmetic / lowered / raised (bash's attributes)
        self.attributes: dict[str, str] = {}
        if path is not None:  # `bash /abs/train.sh`: $0 and ${BASH_SOURCE[0]} name the file (its siblings are read)
            self.shell.scalars["0"] = os.path.abspath(path)
            self.shell.arrays["BASH_SOURCE"] = [os.path.abspath(path)]

    # -- bookkeeping ------------------------------------------------------------------------------------------
    def step(self, cost: int = 1) -> None:
        self.steps += cost
        if self.steps > MAX_STEPS:
            raise ShellSyntaxError(f"reading the script takes more than {MAX_STEPS:,} steps (a loop or recursion?)")

    def line(self, node: Any) -> int:
        if self.fixed_line is not None:
            return self.fixed_line
        return node.start_point[0] + 1 + self.line_offset

    def branch_text(self, node: Any) -> str:
        """The construct's text without its tests (`if [ "$1" == "--save-to-pvc" ]`, `case $1 in --tp)`): the words
        a test compares with are not flags its branches give."""
        text = bytearray(self.src[node.start_byte:node.end_byte])
        for start, end in _test_spans(node):
            text[start - node.start_byte:end - node.start_byte] = b" " * (end - start)
        return text.decode("utf-8", "replace")

    def text(self, node: Any) -> str:
        return self.src[node.start_byte:node.end_byte].decode("utf-8", "replace")

    def start(self, node: Any) -> int:
        """Where a node's own text begins (the grammar counts the blanks and line continuation before `$X` inside a
        string as its)."""
        if node.type not in EXPANSIONS or node.type in ("string", "raw_string", "concatenation"):
            return int(node.start_byte)
        head = self.src[node.start_byte:node.end_byte]
        found = [k for k in (head.find(b"$"), head.find(b"`"), head.find(b"<("), head.find(b">(")) if k >= 0]
        return node.start_byte + (min(found) if found else 0)

    def first_line(self, node: Any) -> str:
        text = self.text(node).strip().splitlines()[0] if self.text(node).strip() else ""
        return show(text[:120])

    def skip(self, node: Any, why: str) -> None:
        self.reading.skipped.append((self.line(node), why))

    def deeper(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.depth -= 1
            raise ShellSyntaxError(f"the script nests more than {MAX_DEPTH} levels deep")

    # -- sources ----------------------------------------------------------------------------------------------
    def run_source(self, text: str, line_offset: int, fixed_line: int | None = None) -> None:
        """Parse `text` and run it here (the script, an eval'd string, a bash -c string)."""
        if len(text) > MAX_SCRIPT_CHARS:
            raise ShellSyntaxError(f"a command string grows beyond {MAX_SCRIPT_CHARS:,} characters")
        saved = (self.src, self.line_offset, self.fixed_line, self.whole)
        self.whole = _brace_inner_names(text.encode("utf-8", "surrogateescape"))
        self.fixed_line = fixed_line if fixed_line is not None else saved[2]
        if b"<<" in self.whole:
            self.whole, unended = heredocs.as_bash_reads(self.whole, _parser().parse)
            if unended is not None:
                where = fixed_line if fixed_line is not None else unended[0] + line_offset
                self.reading.unended_heredocs.append(where)
                self.reading.skipped.append((where, f"the here-document of line {where} is never ended (no line "
                                                    f"{show(unended[1])}): bash reads the rest of the script as its "
                                                    "text, not as commands (and warns: delimited by end-of-file)"))
        try:
            # where the grammar cannot read a part, the parts around it are read on their own (recovery.py)
            pieces = recovery.parts(self.whole, _parser().parse, _heredoc_bodies)
            for piece in pieces:  # every name the text assigns, before any is read (see script_names)
                if piece.tree is not None:
                    self.pending_names.append((piece.tree, piece.text))
                else:
                    unread = recovery.assigned_names(piece.text)
                    self.names_seen |= unread
                    self.names_fixed |= unread
            self.deeper()
            try:
                for piece in pieces:
                    self.src, self.line_offset = piece.text, line_offset + piece.row
                    if piece.tree is not None:
                        self.block(piece.tree.root_node.children)
                    else:
                        self.unreadable(piece)
            finally:
                self.depth -= 1
        finally:
            self.src, self.line_offset, self.fixed_line, self.whole = saved

    # -- statements -------------------------------------------------------------------------------------------
    def block(self, nodes: Sequence[Any]) -> None:
        named = [node for node in nodes if node.is_named]
        for k, node in enumerate(named):
            if node.type == "ERROR" and not self.real_error(node):
                continue
            after = named[k + 1] if k + 1 < len(named) else None
            # the grammar may end a command early and put the rest of its line in an ERROR beside it
            glued = after is not None and after.type == "ERROR" and after.start_point[0] == node.end_point[0] and \
                self.real_error(after)
            if self.real_error(node) or glued:
                self.unparsable(node)
                continue
            self.statement(node)
            if self.errexit and self.capture is None and self.fails(node):
                raise _Exit(self.line(node), f"set -e, and {self.first_line(node)} fails")

    def set_errexit(self, options: list[str]) -> None:
        """`set -e`, `set -euo pipefail`, `set -o errexit` turn errexit on; `set +e`, `set +o errexit` off; the same
        for nounset (`set -u`, `-o nounset`) and noglob (`set -f`, `-o noglob`)."""
        for k, word in enumerate(options):
            if word == "--":
                return
            if word in ("-o", "+o") and k + 1 < len(options) and options[k + 1] in ("errexit", "nounset", "noglob"):
                setattr(self, options[k + 1], word == "-o")
            elif re.fullmatch(r"[-+][a-zA-Z]+", word):
                if "e" in word:
                    self.errexit = word[0] == "-"
                if "u" in word:
                    self.nounset = word[0] == "-"
                if "f" in word:
                    self.noglob = word[0] == "-"

    def from_environment(self, name: str) -> bool:
        """A variable the environment may well hold whatever the script did (PATH, LD_LIBRARY_PATH, a scheduler's
        SLURM_*), or one the script exports (`export PATH=/x:$PATH`): read unset, it is not known to be unset."""
        return bool(ENVIRONMENT_NAMES.fullmatch(name)) or re.search(
            rb"(?:export|declare\s+-\w*x\w*)\s+(?:[^\n;]*\s)?" + re.escape(name.encode()) + rb"(?![\w])",
            self.whole) is not None

    def unbound(self, name: str) -> None:
        """set -u: expanding a variable known to be unset ends the script (bash: "NAME: unbound variable", status 1);
        inside $(…) only the substitution ends, and what it prints is not known."""
        if not self.nounset or name in ("@", "*", "#", "?", "$", "!", "-", "0") or self.from_environment(name):
            return
        if self.capture is not None:
            self.capture.known = False
            self.capture.why = self.capture.why or f"set -u, and ${name} is unset"
            return
        raise _Exit(self.current_line, f"set -u, and ${name} is unset (bash: unbound variable)")

    def fails(self, node: Any) -> bool:
        """Whether a command on its own line is known to fail: a test or an arithmetic command found false, or
        `false` (a program's status is not known; a list's, which set -e reads only at its end, is not read)."""
        if node.type in ("test_command", "subshell", "list") or node.type == "compound_statement" and \
                node.children and node.children[0].type == "((":
            return self.status is False and (node.type != "list" or self.tail_failed)
        name = node.child_by_field_name("name") if node.type == "command" else None
        return name is not None and self.text(name) == "false" and len(node.named_children) == 1

    def real_error(self, node: Any) -> bool:
        """A syntax error bash would report: not a line continuation at the end of the file (bash accepts that, the
        grammar makes it an ERROR)."""
        if not node.has_error and node.type != "ERROR":
            return False
        stack = [node]
        while stack:
            child = stack.pop()
            if child.is_missing or (child.type == "ERROR" and self.text(child).replace("\\", "").strip()):
                return True
            stack.extend(child.children)
        return False

    def unparsable(self, node: Any) -> None:
        """A command the grammar cannot parse, inside a part it reads (see unreadable)."""
        rows = node.end_point[0] - node.start_point[0] - (node.end_point[1] == 0)
        self.not_read(self.line(node), self.line(node) + max(rows, 0), self.text(node), self.line(_first_error(node)))

    def unreadable(self, piece: recovery.Part) -> None:
        """Lines the grammar cannot read, between parts it reads (recovery.parts)."""
        first = self.fixed_line if self.fixed_line is not None else self.line_offset + 1
        last = first if self.fixed_line is not None else first + piece.last_row - piece.row
        near = first if self.fixed_line is not None else first + piece.error_row - piece.row
        self.not_read(first, last, piece.text.decode("utf-8", "replace"), near)

    def not_read(self, line: int, last: int, text: str, near: int) -> None:
        """Lines `line`…`last` that the grammar cannot read (`near`: where it failed). Where bash cannot either
        (`CKPT=<Specify path>` in a template), bash stops the script there; where bash can (a construct the grammar
        lacks: `for i in 1 2; { …; }`), the lines are not read. Either way the rest is read on, loudly: the lines are
        named, what they may assign is unknown, a function they define is not called, and a training command in them
        is said to be there."""
        raw = text.encode("utf-8", "surrogateescape")
        names = tuple(sorted(recovery.assigned_names(raw)))
        flags = tuple(sorted(set(FLAG.findall(text))))
        shown = show(next((t.strip() for t in text.splitlines() if t.strip()), "")[:120])
        where = f"line {line}" if last <= line else f"lines {line}-{last}"
        unknown = f", with {', '.join(names)} unknown" if names else ""
        if self.bash_accepts():
            item = Undecided(line, f"{where}, which the grammar cannot read ({shown})", names, flags)
            if re.search(r"pretrain_\w*\.py", text):
                self.reading.unread_entry.append((line, last, near))
            through = f", through line {last}" if last > line else ""
            self.reading.skipped.append((line, f"not read{through}: bash accepts this, the grammar this import "
                                               f"reads bash with does not (near line {near}){unknown}: {shown}"))
        else:
            item = Undecided(line, f"a line bash cannot parse ({shown})", names, flags)
            self.reading.skipped.append((line, f"bash cannot parse this (a syntax error: bash stops the script here); "
                                               f"read on as if it were fixed{unknown}: {shown}"))
            if self.reading.stopped is None:
                self.reading.stopped = (line, "a syntax error")
        for name in names:
            self.shell.scalars[name] = _unknown(name)
            self.shell.arrays.pop(name, None)
            self.shell.uncertain[name] = (*self.shell.uncertain.get(name, ()), item)
        if recovery.sources(raw):  # a file sourced there may set any name
            self.source_not_read(line, f"{where}, which sources a file ({shown})",
                                 "the lines are not read: write them another way, or set what they decide")
        for function in recovery.defined_functions(raw):
            self.shell.functions.pop(function, None)
            self.unread_functions[function] = where
        if names or flags:
            self.reading.undecided.append(item)

    def bash_accepts(self) -> bool:
        """bash's verdict on the text being read (`bash -n`), asked once per text and for at most MAX_BASH_CHECKS
        texts (each is a process; a script of many eval'd strings the grammar cannot read would start thousands):
        past that, a part the grammar cannot read is said to be the grammar's, not bash's, failure."""
        verdict = self.bash_verdicts.get(self.whole)
        if verdict is None:
            verdict = _bash_accepts(self.whole) if len(self.bash_verdicts) < MAX_BASH_CHECKS else True
            self.bash_verdicts[self.whole] = verdict
        return verdict

    def statement(self, node: Any) -> None:
        self.step()
        self.current_line = self.line(node)
        kind = node.type
        self.deeper()
        try:
            handler = getattr(self, "st_" + kind, None)
            if handler is not None:
                handler(node)
            elif kind in ("comment", "heredoc_body", "heredoc_start", "heredoc_end"):
                pass
            elif kind == "ERROR" or node.is_missing:
                self.skip(node, f"bash cannot parse this: {self.first_line(node)}")
            elif kind in ("test_command", "negated_command"):
                pass  # a test alone changes nothing
            else:
                self.skip(node, f"not carried ({kind.replace('_', ' ')}): {self.first_line(node)}")
        finally:
            self.depth -= 1

    def st_compound_statement(self, node: Any) -> None:
        if node.children and node.children[0].type == "((":
            self.arith_statement(node)
            return
        self.block(node.children)

    def st_program(self, node: Any) -> None:
        self.block(node.children)

    def st_subshell(self, node: Any) -> None:
        """( … ): a copy of the shell; an `exit` in it ends the subshell only, with its status (`( exit 1 )` fails,
        and ends a script under set -e)."""
        saved, options = self.shell.copy(), (self.errexit, self.nounset, self.loops)
        place = self.cwd, self.cwd_why, self.where, list(self.pushed)  # a `cd` inside it is the subshell's only
        self.status = None
        try:
            self.block(node.children)
        except _Exit as exc:
            self.status = None if exc.code is None else exc.code == 0
            self.failed = self.status is False
        finally:
            self.restore(saved)
            self.errexit, self.nounset, self.loops = options
            self.cwd, self.cwd_why, self.where, self.pushed = place

    def restore(self, saved: Shell) -> None:
        self.shell.scalars, self.shell.arrays, self.shell.exports = saved.scalars, saved.arrays, saved.exports
        self.shell.functions, self.shell.uncertain = saved.functions, saved.uncertain

    def st_variable_assignment(self, node: Any) -> None:
        self.assign(node, export=False)

    def st_variable_assignments(self, node: Any) -> None:
        for child in node.named_children:
            if child.type == "variable_assignment":
                self.assign(child, export=False)

    def st_declaration_command(self, node: Any) -> None:
        keyword = node.children[0].type
        options = [self.text(c) for c in node.named_children if c.type == "word" and self.text(c)[:1] in ("-", "+")]
        export = keyword == "export" or any("x" in o for o in options if not o.startswith("+"))
        is_local = keyword == "local" and bool(self.locals)
        associative = any("A" in o for o in options if o.startswith("-"))
        reference = any("n" in o for o in options if o.startswith("-"))
        given = "".join(c for o in options if o.startswith("-") for c in o if c in "ilu")
        taken = "".join(c for o in options if o.startswith("+") for c in o if c in "ilu")
        for child in node.named_children:
            if (given or taken) and (child.type == "variable_assignment" or child.type in WORDISH):
                target = self.assignment_name(child)[0] if child.type == "variable_assignment" else self.text(child)
                if NAME.fullmatch(target):
                    kept = "".join(c for c in self.attributes.get(target, "") if c not in taken + given)
                    # -l and -u exclude each other: the last given wins
                    self.attributes[target] = kept.replace("l" if "u" in given else "u" if "l" in given else "", "") \
                        + given
            if reference and child.type == "variable_assignment":
                if is_local:
                    self.make_local(self.assignment_name(child)[0])
                self.declare_reference(child)
                continue
            if associative and (child.type == "variable_assignment" or child.type in WORDISH and
                                NAME.fullmatch(self.text(child))):
                self.declare_associative(child)
                continue
            if child.type == "variable_assignment":
                name = self.assignment_name(child)[0]
                if is_local:
                    self.make_local(name)
                self.assign(child, export=export)  # declare -i N=2+3: arithmetic (see attributes)
            elif child.type in WORDISH:
                for word in self.fields(child):
                    if word.startswith("-"):
                        continue
                    name, equals, assigned = word.partition("=")
                    if equals and NAME.fullmatch(name):  # export "$KEY"="$VALUE": an assignment once expanded
                        remember_secret(name, assigned)
                        if is_local:
                            self.make_local(name)
                        self.shell.scalars[name] = assigned
                        self.shell.arrays.pop(name, None)
                        if export or name in self.shell.exports:
                            self.shell.exports[name] = assigned
                        self.note_uncertain(name, set(), keep=False)
                        continue
                    if equals and unresolved_names(name):
                        self.reading.skipped.append((self.line(child), f"{keyword} {show(word)}: which variable it "
                                                     "sets is not known without running the script"))
                        continue
                    if is_local:
                        self.make_local(word)
                    if export and NAME.fullmatch(word):
                        value = self.shell.lookup(word)
                        self.shell.exports[word] = value if value is not None else _unknown(word)

    def declare_associative(self, node: Any) -> None:
        """`declare -A P=([tp]=2 [pp]=4)` / `declare -A P`: an associative array, kept as one scalar per key under
        the name `P[key]` (so that forks and merges treat each key as the variables they are) and `P[]` for the
        array itself (bash allows no empty key)."""
        name = self.assignment_name(node)[0] if node.type == "variable_assignment" else self.text(node)
        for table in (self.shell.scalars, self.shell.arrays):
            for key in [k for k in table if k == name or k.startswith(name + "[")]:
                del table[key]
        self.shell.scalars[name + "[]"] = ""
        value = node.child_by_field_name("value") if node.type == "variable_assignment" else None
        if value is None or value.type != "array":
            return
        for element in value.named_children:
            if element.type == "comment":
                continue
            raw = self.src[self.start(element):element.end_byte]
            match = re.fullmatch(rb"\[(.+?)\]=(.*)", raw, re.S)
            if match is None:  # `P=(a b)` under -A: not a key=value list
                self.shell.scalars[name + "[]"] = _unknown(name)
                continue
            key = self.word_text(match.group(1))
            self.shell.scalars[f"{name}[{key}]"] = self.word_text(match.group(2)) if match.group(2) else ""

    def associative(self, name: str) -> bool:
        return name + "[]" in self.shell.scalars

    def associative_entries(self, name: str) -> dict[str, str]:
        begin = name + "["
        return {k[len(begin):-1]: v for k, v in self.shell.scalars.items() if k.startswith(begin) and k != name + "[]"}

    def resolve(self, name: str) -> str:
        """The variable a name reference names (`declare -n R=MODEL`: R is MODEL), else the name itself."""
        for _ in range(10):  # bash refuses a reference to itself; a chain is followed
            if name not in self.refs or not self.refs[name]:
                return name
            name = self.refs[name]
        return name

    def declare_reference(self, child: Any) -> None:
        """`declare -n REF=NAME` / `local -n R=$1`: what REF reads and assigns is NAME's; where NAME is not known,
        REF is unknown and an assignment through it is named."""
        if child.type != "variable_assignment":
            return
        name = self.assignment_name(child)[0]
        value_node = child.child_by_field_name("value")
        target = self.joined(value_node) if value_node is not None else ""
        self.refs[name] = target if NAME.fullmatch(target) and target != name else ""
        if not self.refs[name]:
            self.shell.scalars[name] = _unknown(name)
            self.skip(child, f"a name reference to a variable not known ({self.first_line(child)}): what is "
                             "assigned through it is not known")

    def make_local(self, name: str) -> None:
        scope = self.locals[-1]
        if name not in scope:
            scope[name] = (self.shell.scalars.get(name), self.shell.arrays.get(name))

    def st_unset_command(self, node: Any) -> None:
        for child in node.named_children:
            for word in self.fields(child):
                element = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[(.+)\]", word)
                if element and element.group(1) in self.shell.arrays:  # unset 'A[1]': one element of an array
                    self.unset_element(element.group(1), element.group(2))
                    continue
                self.ifs_unset = self.ifs_unset or word == "IFS"
                for table in (self.shell.scalars, self.shell.arrays, self.shell.exports, self.shell.functions):
                    table.pop(word, None)
                for key in [k for k in self.shell.scalars if k.startswith(word + "[")]:
                    del self.shell.scalars[key]  # an associative array's keys (P[key]), or the one key named

    def unset_element(self, name: str, index: str) -> None:
        """bash's arrays are sparse: unsetting the last element shortens the array; any other leaves a hole, which
        this reading does not hold (the array is then unknown rather than shifted)."""
        array = self.shell.arrays[name]
        try:
            k = self.arith_text(index)
        except _Unknown:
            k = None
        if k is not None and k < 0:
            k += len(array)
        if k is not None and (k >= len(array) or k < 0):
            return
        self.shell.arrays[name] = array[:-1] if k == len(array) - 1 else [_unknown(name)]

    def st_function_definition(self, node: Any) -> None:
        name = node.child_by_field_name("name")
        body = node.child_by_field_name("body")
        if name is not None and body is not None:
            self.shell.functions[self.text(name)] = (body, self.src, self.line_offset)

    def st_pipeline(self, node: Any) -> None:
        if self.capture is not None and len(node.named_children) > 1:
            self.captured_pipeline(node.named_children)
            return
        for child in node.named_children:  # `torchrun … |& tee log`: each part runs
            self.statement(child)

    def captured_pipeline(self, stages: list[Any]) -> None:
        """`KEY=$(echo $ARG | cut -f1 -d=)`: what each stage prints is the next one's input, known while every
        stage's output is (a filter such as `cut` computes it from known input; any other program makes it unknown)."""
        outer = self.capture
        assert outer is not None
        saved_stdin = self.stdin
        text = saved_stdin
        try:
            for stage in stages:
                self.capture = _Capture()
                self.stdin = text
                self.statement(stage)
                if not self.capture.known:
                    outer.known = False
                    outer.why = outer.why or self.capture.why
                    return
                text = "".join(self.capture.out)
            outer.out.append(text or "")
        finally:
            self.capture = outer
            self.stdin = saved_stdin

    def redirect_failure(self, redirects: Sequence[Any]) -> str | None:
        """Why bash refuses one of these redirections before it runs the command they belong to (which then does not
        run; status 1): a target that expands to no word or to several (`> $LOG` with LOG empty or unset, `> $W`
        with W="a b": "ambiguous redirect"), or to an empty word (`> "$LOG"`: no such file). None where each target
        is one word, or is not known (the caller's variable)."""
        for redirect in redirects:
            targets = redirect.children_by_field_name("destination") if redirect.type == "file_redirect" else []
            if not targets:
                continue
            operator = self.src[redirect.start_byte:targets[0].start_byte].decode("utf-8", "replace").strip()
            target = self.text(targets[0])
            if operator.endswith("&") and not operator.startswith("&") and re.fullmatch(r"[0-9]+-?|-", target):
                continue  # 2>&1, >&2, <&-: a descriptor, not a file
            words = self.fields(targets[0])
            if any(unresolved_names(word) for word in words):
                continue
            if len(words) != 1:
                return (f"{show(target)}: ambiguous redirect (it expands to {len(words) or 'no'} "
                        f"word{'' if len(words) == 1 else 's'})")
            if not words[0]:
                return f"{show(target)}: no such file (it expands to an empty word)"
        return None

    @staticmethod
    def missing_name(node: Any) -> bool:
        """A command of assignments and redirections only (`X=1 > $LOG`; the grammar gives it a missing name)."""
        name = node.child_by_field_name("name")
        return name is None or name.is_missing or any(c.is_missing for c in name.children)

    def refused_redirect(self, node: Any, redirects: Sequence[Any], assignments: Sequence[Any]) -> bool:
        """A command whose redirection bash refuses (redirect_failure) is not run: said, its status 1, set -e ends
        the script there; the assignments of a line without a command (`X=1 > $LOG`) still happen, as in bash."""
        why = self.redirect_failure(redirects)
        if why is None:
            return False
        for assignment in assignments:
            self.statement(assignment)
        self.status, self.failed = False, True
        self.skip(node, f"not run: bash refuses its redirection, {why}, and does not run the command (status 1): "
                        f"{self.first_line(node)}")
        if self.errexit and self.capture is None:
            raise _Exit(self.line(node), f"set -e, and the redirection of {self.first_line(node)} fails")
        return True

    def input_unseen(self, redirects: Sequence[Any]) -> str | None:
        """The file a `< FILE` of these redirections reads that this import cannot see (not one the script wrote,
        not a scheduler's node file, not a device): whether bash finds it is decided where the script runs."""
        for redirect in redirects:
            target = redirect.child_by_field_name("destination")
            if target is None:
                continue
            operator = self.src[redirect.start_byte:target.start_byte].decode("utf-8", "replace").strip()
            if operator.lstrip("0123456789") != "<":
                continue
            words = self.fields(target)
            if len(words) != 1 or unresolved_names(words[0]) or words[0].startswith("/dev/"):
                continue
            if self.file_text(words[0]) is None:
                return words[0]
        return None

    def may_stop_at_input(self, node: Any, redirects: Sequence[Any], assignments: Sequence[Any],
                          rerun: Callable[[], None]) -> bool:
        """Under set -e, a command reading a file this import cannot see (`DATA=/data/<path>_text_document`, a
        template's placeholder, is `DATA=/data/` reading the file `path`): where the file is missing bash refuses the
        redirection (the assignments of a line without a command still happen) and ends the script there. Both are
        read (undecided_fork; `rerun` reads the command as if the file were there), and said."""
        unseen = self.input_unseen(redirects) if self.errexit and self.capture is None else None
        if unseen is None or self.input_forked is node:
            return False

        def missing() -> None:
            for assignment in assignments:
                self.statement(assignment)
            raise _Exit(self.line(node), f"set -e, and {show(unseen)}, the input of {self.first_line(node)}, is "
                                         "missing")

        def present() -> None:
            saved, self.input_forked = self.input_forked, node
            try:
                rerun()
            finally:
                self.input_forked = saved

        self.undecided_fork(node, [present, missing], include_nothing=False,
                            what=f"{self.first_line(node)} reads {show(unseen)}, a file this import cannot see; "
                                 "set -e ends the script here where it is missing")
        return True

    def st_redirected_statement(self, node: Any) -> None:
        body = node.child_by_field_name("body")
        redirects = [c for c in node.named_children if c.type == "file_redirect"]
        if self.may_stop_at_input(node, redirects, [body] if body is not None and body.type.startswith(
                "variable_assignment") else [], lambda: self.st_redirected_statement(node)):
            return
        if body is not None and body.type == "pipeline" and body.named_children:
            # the grammar hangs `a | b > $LOG` on the whole pipeline; the redirection is b's: a runs whatever it is
            last = body.named_children[-1]
            if self.redirect_failure(redirects) is not None:
                for stage in body.named_children[:-1]:
                    self.statement(stage)
                self.refused_redirect(last, redirects, ())
                return
        elif self.refused_redirect(node, redirects,
                                   [body] if body is not None and body.type.startswith("variable_assignment") else []):
            return
        heredoc = next((c for c in node.named_children if c.type == "heredoc_redirect"), None)
        if body is not None and heredoc is not None and body.type == "command" and self.heredoc_is_script(body):
            self.run_heredoc(body, heredoc)
            return
        if body is not None and heredoc is not None and body.type == "command" and self.write_heredoc(node, body,
                                                                                                    heredoc):
            return
        if self.capture is not None and body is not None and heredoc is not None and body.type == "command" \
                and self.print_heredoc(node, body, heredoc):
            return
        herestring = next((c for c in node.named_children if c.type == "herestring_redirect"), None)
        if body is not None and body.type == "while_statement" and (heredoc is not None or herestring is not None):
            # while read …; do …; done <<EOF / <<< "$LINES": the loop reads the document's records one by one
            if heredoc is not None:
                text_node = next((c for c in heredoc.named_children if c.type == "heredoc_body"), None)
                text = self.heredoc_text(heredoc, text_node) if text_node is not None else ""
            elif herestring is not None and herestring.named_children:
                text = self.joined(herestring.named_children[0]) + "\n"
            else:
                text = "\n"
            with self.reading_input(text):
                self.statement(body)
            return
        if body is not None and body.type in ("command", "while_statement") and heredoc is None and \
                herestring is None:
            # `NNODES=$(wc -l < $PBS_NODEFILE)`, `read TP PP < tp.txt` of a file the script wrote, `while read …;
            # done < list.txt`: a file whose text is known is the command's input
            given = [c for c in node.named_children if c.type == "file_redirect"
                     and self.src[c.start_byte:c.end_byte].lstrip()[:1] == b"<"]
            target = given[0].child_by_field_name("destination") if len(given) == 1 else None
            words = self.fields(target) if target is not None else []
            lines = self.file_text(words[0]) if len(words) == 1 else None
            if lines is not None:
                with self.reading_input(lines):
                    self.statement(body)
                return
        if body is not None and body.type == "command" and self.capture is None:
            if self.print_to_file(node, body):
                return
            self.overwritten(node)
        if body is not None and heredoc is not None and body.type == "command" and (
                self.first_word(body) in READERS or self.capture is not None and self.first_word(body) == "bc"):
            # read -r -d '' ARGS <<'EOF' … EOF, $(bc <<EOF … EOF): the document is its input
            document = next((c for c in heredoc.named_children if c.type == "heredoc_body"), None)
            with self.reading_input(self.heredoc_text(heredoc, document) if document is not None else ""):
                self.statement(body)
            return
        if body is not None and body.type == "command":
            self.redirect_words = [word for c in node.named_children if c.type == "file_redirect"
                                   for word in c.children_by_field_name("destination")[1:]]
        try:
            if body is not None:
                self.statement(body)
        finally:
            self.redirect_words = []

    def file_text(self, path: str) -> str | None:
        """The text of a file whose text is known: one the script wrote (`echo 4 > tp.txt`, `cat > f <<EOF`), or a
        scheduler's node file (known_files); None for any other."""
        key = self.written_file(path)
        if key is not None:
            return "".join(text for text, _ in self.written[key])
        return self.known_files.get(path)

    def written_path(self, word: str) -> str | None:
        """The file `word` names where the script is now, as the script's writes are kept (written_place)."""
        return written_place(word, self.where)

    def written_file(self, word: str) -> str | None:
        """The key of the file the script wrote that `word` names where the script is now; None for any other."""
        key = self.written_path(word)
        return key if key is not None and key in self.written else None

    def forget_written(self, word: str) -> None:
        """A file the script wrote is written anew by a command whose output is not known, or removed: its text is
        no longer known; in a directory not known, any file of that name may be the one."""
        key = self.written_path(word)
        if key is None:
            for other in [k for k in self.written if os.path.basename(k) == os.path.basename(word)]:
                del self.written[other]
        else:
            self.written.pop(key, None)

    def overwritten(self, node: Any) -> None:
        """`python gen.py > ds.json`: a file the script wrote is written again by a command whose output is not
        known: its text is no longer known."""
        for redirect in node.named_children:
            target = redirect.child_by_field_name("destination") if redirect.type == "file_redirect" else None
            operator = self.src[redirect.start_byte:target.start_byte].strip() if target is not None else b""
            if target is not None and operator.lstrip(b"0123456789").startswith((b">", b"&>")) and \
                    not operator.endswith(b"&"):
                self.forget_written(self.joined(target))

    def filter_lines(self, program: str, args: list[str]) -> str | None:
        """What a line filter prints (pbs.filtered) for the known files it names, or for its input where every
        line of it is known to be one line."""
        texts = {a: self.file_text(a) for a in args}
        files = [a for a in args if texts[a] is not None]
        options = [a for a in args if texts[a] is None]
        # a filter reads every line of a node file of up to pbs.MAX_LINES: its work is charged to the reading's
        # steps by size (one a KB), so a loop of `sort -u $PBS_NODEFILE` over a large job ends with the step limit
        self.step(1 + sum(len(texts[f] or "") for f in files) // 1000 + len(self.stdin or "") // 1000)
        if files and program != "wc":  # `wc -l FILE` also prints the file's name
            text = "".join(texts[f] or "" for f in files)
        elif not files and self.stdin is not None and pbs.line_structured(self.stdin, unresolved_names):
            text = self.stdin
        else:
            return None
        return None if any(unresolved_names(o) for o in options) else pbs.filtered(program, options, text)

    def first_word(self, command: Any) -> str:
        name = command.child_by_field_name("name")
        return self.text(name) if name is not None else ""

    def write_heredoc(self, node: Any, command: Any, heredoc: Any) -> bool:
        """`cat > job.sbatch <<EOF … EOF` (or `>>`): the file's text is kept, to be read where the script runs it
        (`sbatch job.sbatch`, `bash job.sh`)."""
        name = command.child_by_field_name("name")
        if name is None or self.fields(name) != ["cat"] or len(command.named_children) != 1:
            return False
        # `cat > job.sh <<EOF` or `cat <<EOF > job.sh` (the grammar puts that redirection inside the here-document's)
        redirects = [c for c in [*node.named_children, *heredoc.named_children] if c.type == "file_redirect"]
        if len(redirects) != 1 or self.src[redirects[0].start_byte:redirects[0].end_byte].lstrip()[:1] != b">":
            return False
        target = redirects[0].child_by_field_name("destination")
        word = self.joined(target) if target is not None else MARK
        path = self.written_path(word)
        if path is None:  # written in a directory not known here: nothing is read from it
            self.forget_written(word)
            return True
        body = next((c for c in heredoc.named_children if c.type == "heredoc_body"), None)
        # a path with an unknown part ($SCRATCH/run/job.sbatch) is still the same file where the script names it
        # again with the same words
        names = self.begin_reading()
        try:
            text = self.heredoc_text(heredoc, body) if body is not None else ""
        finally:
            self.end_touch()
        appended = self.src[redirects[0].start_byte:redirects[0].end_byte].lstrip().startswith(b">>")
        chunks = self.written.get(path, []) if appended else []
        self.note_written_taint(path, names, text, appended)
        remember_written_secrets(text)
        offset = self.line(body) - 1 if body is not None else self.line(node)
        self.written[path] = [*chunks, (text, offset)]
        if not chunks:
            self.written_at[path] = self.line(node)
        if sum(len(t) for t, _ in self.written[path]) > MAX_SCRIPT_CHARS:
            raise ShellSyntaxError(f"a written file grows beyond {MAX_SCRIPT_CHARS:,} characters")
        return True

    def print_to_file(self, node: Any, command: Any) -> bool:
        """`echo '{"train_batch_size": 8}' > ds.json` (or printf, `>>`): the file's text is what the command prints,
        kept where it is known (as write_heredoc keeps a here-document's); a file written otherwise is not."""
        redirects = [c for c in node.named_children if c.type in ("file_redirect", "heredoc_redirect",
                                                                   "herestring_redirect")]
        if self.first_word(command) not in ("echo", "printf") or len(redirects) != 1 or \
                redirects[0].type != "file_redirect":
            return False
        operator = self.src[redirects[0].start_byte:redirects[0].end_byte].lstrip()
        target = redirects[0].child_by_field_name("destination")
        if not operator.startswith(b">") or operator.startswith(b">&") or target is None:
            return False
        word = self.joined(target)
        path = self.written_path(word)
        capture = self.capture = _Capture()
        names = self.begin_reading()
        self.redirect_words = redirects[0].children_by_field_name("destination")[1:]  # `echo a > f b`: echo's too
        try:
            self.statement(command)
        finally:
            self.capture, self.redirect_words = None, []
            self.end_touch()
        if path is None:  # written in a directory not known here: nothing is read from it
            self.forget_written(word)
            return True
        chunks = self.written.get(path, []) if operator.startswith(b">>") else []
        self.note_written_taint(path, names, "".join(capture.out), bool(chunks))
        remember_written_secrets("".join(capture.out))
        if capture.known and not any(unresolved_names(t) for t in capture.out):
            self.written[path] = [*chunks, ("".join(capture.out), self.line(node) - 1)]
            if not chunks:
                self.written_at[path] = self.line(node)
        else:
            self.written.pop(path, None)  # its text is not known: nothing is read from it
        if sum(len(t) for t, _ in self.written.get(path, [])) > MAX_SCRIPT_CHARS:
            raise ShellSyntaxError(f"a written file grows beyond {MAX_SCRIPT_CHARS:,} characters")
        return True

    def note_written_taint(self, path: str, names: set[str], text: str, appended: bool) -> None:
        """A file written from values a sourced file not read may have changed: the lines of those files."""
        lines = {item.line for items in self.tainted(names, [text]).values() for item in items}
        kept = self.written_unsure.get(path, set()) if appended else set()
        if lines | kept:
            self.written_unsure[path] = lines | kept
        else:
            self.written_unsure.pop(path, None)

    def print_heredoc(self, node: Any, command: Any, heredoc: Any) -> bool:
        """`$(cat <<EOF … EOF)`: what the substitution captures is the here-document's text."""
        name = command.child_by_field_name("name")
        if name is None or self.fields(name) != ["cat"] or len(command.named_children) != 1 or any(
                c.type == "file_redirect" for c in node.named_children) or self.capture is None:
            return False
        body = next((c for c in heredoc.named_children if c.type == "heredoc_body"), None)
        if body is None or any(c.type not in ("heredoc_start", "heredoc_body", "heredoc_end")
                               for c in heredoc.named_children):
            return False  # the grammar read the document's lines as words (a quoted `<<'EOF'` inside $(…)): unknown
        self.capture.out.append(self.heredoc_text(heredoc, body))
        return True

    def heredoc_text(self, heredoc: Any, body: Any) -> str:
        start = next((c for c in heredoc.named_children if c.type == "heredoc_start"), None)
        quoted = start is not None and any(q in self.text(start) for q in "'\"\\")
        text = self.text(body) if quoted else self.expand_heredoc(body)
        if self.src[heredoc.start_byte:heredoc.end_byte].startswith(b"<<-"):  # <<-: leading tabs are stripped
            text = "\n".join(line.lstrip("\t") for line in text.split("\n"))
        return text

    def run_written(self, node: Any, argv: list[str]) -> bool:
        """`sbatch job.sbatch ARGS`, `bash job.sh ARGS`, `./job.sh ARGS` of a file the script wrote: read it as the
        script that runs, with its arguments."""
        program = base_name(argv[0])
        k = _script_at(argv, lambda word: self.written_file(word) is not None)
        key = self.written_file(argv[k]) if k is not None else None
        if k is None or key is None:
            return False
        chunks = self.written[key]
        saved_positional, saved_outer = self.positional, self.outer
        self.positional = argv[k + 1:]
        self.set_positional(self.positional)
        shell = next((m for m in range(k) if base_name(argv[m]) in SHELLS), k)
        if program in RUNS_A_COMMAND:  # the wrapper's counts are the job's (srun -N 2 … bash runner.sh)
            self.outer = [*saved_outer, *argv[:shell]]
        try:  # its own bash: an exit there ends only that one
            text = "".join(t for t, _ in chunks)
            if program == "sbatch":  # the job file's #SBATCH lines and sbatch's options give its SLURM_* variables
                slurm_directives(text, self.reading, self.shell, self.line(node), command_line=argv[1:k])
            self.new_shell(node, text, f"{show(argv[k])}, written by the script",
                        line_offset=chunks[0][1] if len(chunks) == 1 else None)
        except _Exit:
            pass
        finally:
            self.positional, self.outer = saved_positional, saved_outer
            self.set_positional(saved_positional or [])
            if saved_positional is None:
                self.shell.scalars.pop("#", None)
        return True

    def script_file(self, word: str) -> Path | None:
        """The file next to the script that `word` names as a script to run (`inner.sh`, `$DIR/job.slurm` of a known
        DIR): a known path with a script's suffix, relative to where the script is as it runs (its directory, or
        where a `cd` moved it) or absolute, that is a file."""
        if self.directory is None or MARK in word or not SCRIPT_SUFFIX.search(word):
            return None
        place = Path(word) if word.startswith("/") else self.cwd / word if self.cwd is not None else None
        return place if place is not None and place.is_file() else None

    def place_not_known(self, word: str) -> bool:
        """`word` names a script file relative to a directory a `cd` moved to that is not known here."""
        return self.directory is not None and self.cwd is None and MARK not in word and not word.startswith("/") \
            and bool(SCRIPT_SUFFIX.search(word))

    def run_script_file(self, node: Any, argv: list[str], env: dict[str, str] | None = None) -> bool:
        """`bash inner.sh ARGS`, `./train.sh ARGS`, `sbatch job.slurm`, `mpirun -n 4 bash inner.sh` of a file next to
        the script: read it as bash runs it (never run), with its arguments, in a shell of its own that starts with
        the variables exported to it and those given on its line (`LAYERS=6 bash inner.sh`, `env LAYERS=6 …`; a
        value the outer script only assigned is not the inner one's), within the same bounds as the files the
        script sources. The variables it exports are the training command's."""
        k = _script_at(argv, lambda word: self.script_file(word) is not None)
        path = self.script_file(argv[k]) if k is not None else None
        if k is None or path is None:
            unplaced = _script_at(argv, self.place_not_known)
            if unplaced is None:
                return False
            self.skip(node, f"{show(argv[unplaced])}, run by the script: not read (it runs in the directory that "
                            f"{self.cwd_why} moves to, which is not known here; a file of that name next to the "
                            "script may be another); what it runs is not known")
            return False  # named as a script the import does not open, as one that is not there
        if os.path.realpath(path) in self.sourcing:
            return False
        what = f"{show(argv[k])}, run by the script"
        try:
            text = untrusted.read_utf8(path, "script file", max(MAX_SCRIPT_CHARS - self.sourced_chars, 0))
        except UserError as exc:
            self.skip(node, f"{what}: not read ({exc.problems[0].message}); what it runs is not known")
            return True
        if MARK in text:
            self.skip(node, f"{what}: not read (it holds a NUL byte: a binary file?); what it runs is not known")
            return True
        self.sourced_chars += len(text)
        outer, positional, saved = self.outer, self.positional, self.shell
        given = {} if self.env_dropped else dict(saved.exports)
        if self.env_dropped and saved.exports:
            self.skip(node, f"{what}: read without the variables the script exports ({self.env_dropped} passes "
                            f"none of them: {', '.join(sorted(saved.exports)[:6])}"
                            f"{', …' if len(saved.exports) > 6 else ''}"
                            f"{'; its sudoers may keep some' if self.env_dropped.startswith('sudo') else ''})")
        given.update(env or {})
        child = Shell(dict(given), {"BASH_SOURCE": [os.path.abspath(path)]}, dict(given), {},
                      {name: why for name, why in saved.uncertain.items() if name in given and name not in (env or {})})
        child.scalars["0"] = os.path.abspath(path)
        self.shell, self.positional = child, argv[k + 1:]
        self.set_positional(self.positional)
        if base_name(argv[0]) not in (*SHELLS, "sbatch") and k > 0:  # mpirun -n 4 bash inner.sh: the job's counts
            self.outer = [*outer, *argv[:next((m for m in range(k) if base_name(argv[m]) in SHELLS), k)]]
        self.sourcing.append(os.path.realpath(path))
        try:
            if base_name(argv[0]) == "sbatch":  # its #SBATCH lines and sbatch's options give its SLURM_* variables
                slurm_directives(text, self.reading, self.shell, self.line(node), command_line=argv[1:k])
            self.new_shell(node, text, what)
        except _Exit:
            pass
        finally:
            self.sourcing.pop()
            self.shell, self.positional, self.outer = saved, positional, outer
            saved.exports.update({name: value for name, value in child.exports.items()
                                  if saved.exports.get(name) != value})
        return True

    def run_sudo(self, node: Any, argv: list[str], env: dict[str, str],
                 depends: dict[int, tuple[Undecided, ...]]) -> None:
        """`sudo [-E] [-u USER] [NAME=value …] COMMAND`: the command runs; without -E (--preserve-env) sudo's
        env_reset passes none of the variables exported to it (its sudoers may keep some: read without them)."""
        k, keep, place = 1, False, (self.cwd, self.cwd_why, self.where)  # -i, -D DIR: the command's place
        while k < len(argv) and argv[k].startswith("-"):
            word = argv[k]
            if word == "--":
                k += 1
                break
            if word in ("-E", "--preserve-env") or word.startswith("--preserve-env="):
                keep = True
            elif word in ("-i", "--login", "-s", "--shell"):  # a login shell starts in the user's home
                self.cwd, self.cwd_why, self.where = None, f"`sudo {word}`", self.unknown_place()
            k += 2 if word in ("-u", "-g", "-p", "-r", "-t", "-C", "-D", "-U", "-T", "--user", "--group",
                               "--host", "--prompt", "--role", "--type", "--close-from", "--chdir",
                               "--other-user", "--command-timeout") else 1
            if word in ("-D", "--chdir") or word.startswith("--chdir="):
                self.change_directory(["sudo -D", word.partition("=")[2] or " ".join(argv[k - 1:k])])
        given = dict(env) if keep else {}
        while k < len(argv) and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", argv[k]):
            key, _, value = argv[k].partition("=")
            given[key] = value
            k += 1
        if k >= len(argv):
            self.cwd, self.cwd_why, self.where = place
            return
        saved = self.env_dropped
        self.env_dropped = saved if keep else "sudo without -E"
        try:
            self.run_argv(node, argv[k:], given, {i - k: d for i, d in depends.items() if i >= k})
        finally:
            self.env_dropped = saved
            self.cwd, self.cwd_why, self.where = place

    def change_directory(self, argv: list[str]) -> None:
        """`cd DIR`, `pushd DIR`, `popd` as bash moves the script: relative to where it is; one whose DIR is not
        known here (`cd $WORKDIR`, `cd` alone: the home directory, `cd -`) leaves the place not known."""
        program, operands = base_name(argv[0]), [a for a in argv[1:] if a not in ("-L", "-P", "-e", "--")]
        if program == "popd":
            if self.pushed and not operands:
                self.cwd, self.cwd_why, self.where = self.pushed.pop()
            elif operands:  # popd +N / -N: an entry of the stack (not followed)
                self.cwd, self.cwd_why, self.where = None, f"`{show(' '.join(argv))}`", self.unknown_place()
            # an empty stack: bash says so and stays where it is
            return
        if program == "pushd":
            self.pushed.append((self.cwd, self.cwd_why, self.where))
        target = operands[0] if len(operands) == 1 else ""
        submitted = next((target[len(name) + 2:] for name in SUBMIT_DIRECTORIES
                          if target.startswith(f"{MARK}{name}{MARK}")), None)
        if submitted is not None and MARK not in submitted and self.directory is not None:
            # the directory the job was submitted from: where the import reads the script as run from
            self.cwd, self.cwd_why = Path(os.path.normpath(self.directory / submitted.lstrip("/"))), ""
            self.where = os.path.normpath(submitted.lstrip("/") or ".")
        elif not target or MARK in target or target.startswith(("~", "-", "+")):
            self.cwd, self.cwd_why, self.where = None, f"`{show(' '.join(argv))}`", self.unknown_place()
        elif target.startswith("/"):
            self.cwd, self.where = Path(os.path.normpath(target)), os.path.normpath(target)
        else:
            if self.cwd is not None:
                self.cwd = Path(os.path.normpath(self.cwd / target))
            if self.where is not None:
                self.where = _below(self.where, target)

    def unknown_place(self) -> str:
        self.unknown_places += 1
        return f"{MARK}a directory not known ({self.unknown_places}){MARK}"

    def heredoc_is_script(self, command: Any) -> bool:
        name = command.child_by_field_name("name")
        words = self.fields(name) if name is not None else []
        return bool(words) and base_name(words[0]) in (*SHELLS, "sbatch")

    def run_heredoc(self, command: Any, heredoc: Any) -> None:
        """`sbatch <<EOF … EOF`, `bash <<EOF`: the here-document is the script that runs."""
        body = next((c for c in heredoc.named_children if c.type == "heredoc_body"), None)
        if body is None:
            return
        text = self.heredoc_text(heredoc, body)
        name = command.child_by_field_name("name")
        words = self.fields(name) if name is not None else []
        if words and base_name(words[0]) == "sbatch":  # the job's #SBATCH lines and sbatch's options give its SLURM_*
            options = self.word_fields(command.children_by_field_name("argument"))
            slurm_directives(text, self.reading, self.shell, self.line(command), command_line=options)
        try:  # the here-document is its own script: an exit there ends only that one
            self.new_shell(body, text, "the here-document", line_offset=self.line(body) - 1)
        except _Exit:
            pass

    def expand_heredoc(self, body: Any) -> str:
        out, at = [], body.start_byte
        for child in body.named_children:
            if child.type in EXPANSIONS:
                out.append(self.heredoc_literal(self.src[at:self.start(child)].decode("utf-8", "replace")))
                saved, self.in_heredoc = self.in_heredoc, True
                try:
                    out.append(self.joined(child))
                finally:
                    self.in_heredoc = saved
                at = child.end_byte
        out.append(self.heredoc_literal(self.src[at:body.end_byte].decode("utf-8", "replace")))
        return "".join(out)

    def heredoc_literal(self, text: str) -> str:
        """Text of a here-document between the expansions the grammar finds: it does not find the special
        parameters (`$1`, `$@`, `$#` of `cat <<EOF` in a function), which bash expands there too."""
        def special(match: re.Match[str]) -> str:
            if len(match.group(1)) % 2:  # an escaped dollar: \$1 stays $1
                return match.group(0)
            if match.group(2) == "*" and self.positional is not None:  # bash joins $* in a here-document by blanks
                return match.group(1) + " ".join(self.positional)
            kind, value, _ = self.variable(match.group(2), quoted=True)
            return match.group(1) + self.flat(kind, value)
        return _unescape_heredoc(re.sub(r"(\\*)\$([0-9@*#])", special, text))

    def st_list(self, node: Any) -> None:
        """a && b, a || b: a test decides whether the right side runs; after a command whose status is not known,
        `&&` runs it (the normal path) and `||` may run it (undecided), and so may what follows a list whose status is
        not known (`command -v nvcc && X=1 || X=2` leaves X undecided)."""
        children = [c for c in node.children if c.is_named or c.type in ("&&", "||")]
        left, op, right = children[0], children[1].type if len(children) > 1 else "&&", children[-1]
        saved, self.errexit = self.errexit, False  # set -e reads a list's last command only (`f || true`)
        try:
            verdict = self.run_for_status(left)  # `false && A=1 || A=2`: the left list fails, so A=2 runs
        finally:
            self.errexit = saved
        # `sync && cd /work && torchrun …` is read as ((sync && cd) && torchrun): a left list whose status is
        # unknown only for a command it read on its normal path is such a command too
        normal_path = left.type != "list" or self.normal_path
        went_on = False
        if verdict is None and op == "&&" and not self.is_test(left) and normal_path:
            # `cd /work && torchrun …`: the normal path of a command whose status is not known is read as run;
            # the list's status stays unknown, so an alternative after it (`cmd && A=1 || A=2`) is not chosen
            went_on = self.went_on(right, self.run_for_status(right))
            self.status = None
        elif verdict is None:
            self.undecided_fork(node, [lambda: self.statement(right)], include_nothing=True,
                                what=self.first_line(node))
            self.status = None
        elif verdict == (op == "&&"):
            self.status = self.run_for_status(right)
            went_on = self.status is None and self.went_on(right, None)
        else:
            self.status = verdict
        self.normal_path = went_on
        # set -e ends the script on a list only where its last command ran and failed (`true && false`)
        self.tail_failed = verdict == (op == "&&") and self.status is False

    def went_on(self, node: Any, status: bool | None) -> bool:
        """Whether `node`, read for `a && node`, succeeded or is not known only as a command on its normal path
        (not a test that is not decided, nor a list that chose between alternatives)."""
        if status is True:
            return True
        return status is None and not self.is_test(node) and (node.type != "list" or self.normal_path)

    def run_for_status(self, node: Any) -> bool | None:
        """Run a part of `a && b || c` and give its exit status: a test's verdict, a list's, an assignment's or a
        builtin's that cannot fail on known words (echo, export, mkdir -p …); any other command's (a function, a
        program: `command -v nvcc && X=1 || X=2`) is not known without running it (None)."""
        if self.is_test(node):
            return self.condition([node])
        self.failed = False
        self.statement(node)
        if self.failed:  # e.g. its redirection failed: not run, status 1
            return False
        if node.type == "list":
            return self.status
        if node.type in ("variable_assignment", "variable_assignments", "declaration_command"):
            return True
        if node.type == "command":
            name = node.child_by_field_name("name")
            return True if name is not None and self.text(name) in SUCCEEDS else None
        return None

    def is_test(self, node: Any) -> bool:
        if node.type in ("test_command", "negated_command") or (node.type == "compound_statement" and
                                                                node.children and node.children[0].type == "(("):
            return True
        if node.type == "list":
            return all(self.is_test(c) for c in node.named_children)
        if node.type == "command":
            name = node.child_by_field_name("name")
            if name is None:
                return False
            if self.text(name) in ("test", "[", "true", "false", ":", "getopts"):
                return True
            if "$" in self.text(name) and name.named_children:  # `$USE_FP16 && …`: true or false, run
                words = self.fields(name.named_children[0])
                return len(words) == 1 and words[0] in ("test", "[", "true", "false", ":")
        return False

    def st_test_command(self, node: Any) -> None:
        """A test on its own line (`[[ $M =~ ^([0-9]+)B$ ]]`): its verdict sets BASH_REMATCH and the status."""
        self.status = self.verdict(node)

    def st_negated_command(self, node: Any) -> None:
        for child in node.named_children:
            if not self.is_test(child):
                self.statement(child)

    # -- if / case / loops ------------------------------------------------------------------------------------
    def st_if_statement(self, node: Any) -> None:
        branches: list[tuple[list[Any] | None, list[Any]]] = []
        conditions: list[Any] = []
        body: list[Any] = []
        state = "cond"
        for child in node.children:
            if child.type == "if":
                continue
            if child.type == "then":
                state = "body"
                continue
            if child.type in ("fi",):
                break
            if child.type in ("elif_clause", "else_clause"):
                if state in ("body", "cond"):
                    branches.append((conditions, body))
                    conditions, body, state = [], [], "done"
                branches.extend(self.clause(child))
                continue
            if not child.is_named:
                continue
            (conditions if state == "cond" else body).append(child)
        if state != "done":
            branches.append((conditions, body))
        self.choose(node, branches)

    def clause(self, node: Any) -> list[tuple[list[Any] | None, list[Any]]]:
        if node.type == "else_clause":
            return [(None, [c for c in node.children if c.is_named])]
        conditions: list[Any] = []
        body: list[Any] = []
        state = "cond"
        for child in node.children:
            if child.type == "then":
                state = "body"
            elif child.is_named:
                (conditions if state == "cond" else body).append(child)
        return [(conditions, body)]

    def choose(self, node: Any, branches: list[tuple[list[Any] | None, list[Any]]]) -> None:
        """The first branch whose condition holds runs; once a condition cannot be decided, that branch and every
        later one are possible: none is chosen (each is read on a copy and the results merged)."""
        for k, (conditions, body) in enumerate(branches):
            verdict = True if conditions is None else self.condition(conditions)
            if verdict is None:
                rest = branches[k:]
                has_else = rest[-1][0] is None
                self.undecided_fork(node, [_runner(self.block, b) for _, b in rest],
                                    include_nothing=not has_else, what=self.first_line(node))
                return
            if verdict:
                self.block(body)
                return

    def st_case_statement(self, node: Any) -> None:
        value_node = node.child_by_field_name("value")
        names = self.begin_reading()
        try:
            value = self.joined(value_node) if value_node is not None else ""
        finally:
            self.end_touch()
        items = [c for c in node.named_children if c.type == "case_item"]
        if unresolved_names(value) or self.tainted(names, [value]):  # see verdict
            catch_all = any(self.case_patterns(item) == ["*"] for item in items)
            self.undecided_fork(node, [self.case_from(node, items, k) for k in range(len(items))],
                                include_nothing=not catch_all, what=self.first_line(node))
            return
        k = 0
        while k < len(items):
            item = items[k]
            for pattern in self.case_patterns(item):
                try:
                    matched = not unresolved_names(pattern) and _glob_match(value, pattern)
                except _Unknown:
                    pattern = _unknown(pattern)
                    matched = False
                if unresolved_names(pattern):
                    self.undecided_fork(node, [self.case_from(node, items, i) for i in range(k, len(items))],
                                        include_nothing=True, what=self.first_line(node))
                    return
                if matched:
                    break
            else:
                k += 1
                continue
            self.block(self.case_body(item))
            # `;&` runs the next body too, `;;&` goes on testing the next patterns, `;;` ends the case
            while _terminator(item) == ";&" and k + 1 < len(items):
                k += 1
                item = items[k]
                self.block(self.case_body(item))
            if _terminator(item) != ";;&":
                return
            k += 1

    def case_from(self, node: Any, items: list[Any], k: int) -> Callable[[], None]:
        """The branch of a case whose value is not known that starts at item k: its body, the bodies after it while
        they end in `;&`, and, after a `;;&`, any of the items after that (or none)."""
        def run() -> None:
            j = k
            self.block(self.case_body(items[j]))
            while _terminator(items[j]) == ";&" and j + 1 < len(items):
                j += 1
                self.block(self.case_body(items[j]))
            if _terminator(items[j]) == ";;&" and j + 1 < len(items):
                later = items[j + 1:]
                catch_all = any(self.case_patterns(item) == ["*"] for item in later)
                self.undecided_fork(node, [self.case_from(node, items, i) for i in range(j + 1, len(items))],
                                    include_nothing=not catch_all, what=self.first_line(node))
        return run

    def case_patterns(self, item: Any) -> list[str]:
        out = []
        for k, child in enumerate(item.children):
            if child.type == ")":
                break
            if item.field_name_for_child(k) == "value" and child.is_named:
                out.append(self.pattern(child))
        return out

    def case_body(self, item: Any) -> list[Any]:
        seen = False
        body = []
        for k, child in enumerate(item.children):
            if child.type == ")" and not seen:
                seen = True
                continue
            if seen and child.is_named and item.field_name_for_child(k) != "value":
                body.append(child)
        return body

    def st_for_statement(self, node: Any) -> None:
        variable = node.child_by_field_name("variable")
        body = node.child_by_field_name("body")
        values = [c for k, c in enumerate(node.children) if node.field_name_for_child(k) == "value"]
        name = self.text(variable) if variable is not None else ""
        has_in = any(c.type == "in" for c in node.children)
        words: list[str] = []
        if has_in:
            words = self.word_fields(values)
        elif self.positional is not None:
            words = list(self.positional)
        else:
            self.without_arguments()
            words = []
        if body is None:
            return
        # `select NAME in …` reads the choice from the terminal: which word, and how many times, is not known
        chosen_at_run_time = node.children[0].type == "select"
        if chosen_at_run_time or any(unresolved_names(w) for w in words) or len(words) > MAX_LOOP:
            def once() -> None:
                self.shell.scalars[name] = _unknown(name)
                self.block(body.children)
            self.undecided_fork(node, [once], include_nothing=True, what=self.first_line(node))
            return
        for word in words:
            self.shell.scalars[name] = word
            self.shell.arrays.pop(name, None)
            if not self.loop_body(body):
                return

    def st_while_statement(self, node: Any) -> None:
        conditions = [c for k, c in enumerate(node.children)
                      if node.field_name_for_child(k) == "condition" and c.is_named]
        body = node.child_by_field_name("body")
        until = node.children[0].type == "until"
        if body is None:
            return
        for _ in range(MAX_LOOP):
            verdict = self.condition(conditions)
            if verdict is not None and until:
                verdict = not verdict
            if verdict is False:
                return
            if verdict is None:
                self.undecided_fork(node, [lambda: self.block(body.children)], include_nothing=True,
                                    what=self.first_line(node))
                return
            if not self.loop_body(body):
                return
        self.skip(node, f"a loop runs more than {MAX_LOOP} times; the rest is not read: {self.first_line(node)}")

    def loop_body(self, body: Any) -> bool:
        """One iteration; False after `break`."""
        self.loops += 1
        try:
            self.block(body.children)
        except _Break as exc:
            if exc.levels > 1 and self.loops > 1:  # leaves the loops around this one too (as many as there are)
                raise _Break(exc.again, exc.levels - 1) from None
            return exc.again
        finally:
            self.loops -= 1
        return True

    def st_c_style_for_statement(self, node: Any) -> None:
        body = node.child_by_field_name("body")
        # each part may be a comma list (`i=0, j=10`): the grammar gives each expression of it under the field
        parts: dict[str, list[Any]] = {"initializer": [], "condition": [], "update": []}
        for k, child in enumerate(node.children):
            field_name = node.field_name_for_child(k)
            if field_name in parts and child.is_named:
                parts[field_name].append(child)

        def each(name: str) -> int | None:
            value = None
            for expression in parts[name]:
                value = self.arith_node(expression)
            return value  # of the last, as bash's comma operator
        if body is None:
            return
        try:
            each("initializer")
            for _ in range(MAX_LOOP):
                if each("condition") == 0:
                    return
                if not self.loop_body(body):
                    return
                each("update")
        except _Unknown:
            self.undecided_fork(node, [lambda: self.block(body.children)], include_nothing=True,
                                what=self.first_line(node))
            return
        self.skip(node, f"a loop runs more than {MAX_LOOP} times; the rest is not read: {self.first_line(node)}")

    def undecided_fork(self, node: Any, branches: list[Callable[[], None]], include_nothing: bool, what: str) -> None:
        """Read each possible branch on a copy of the shell; what all the branches that go on agree on is kept,
        a variable they disagree on becomes unknown, and the construct is recorded with its line."""
        base = self.shell
        label = Undecided(self.line(node), what)
        outcomes: list[Shell] = [base.copy()] if include_nothing else []
        commands_before = len(self.reading.commands)
        saved_under = self.under
        self.under = (*saved_under, label)
        exited = 0
        try:
            for branch in branches:
                self.steps += (len(base.scalars) + len(base.arrays)) // 20  # a copy (and its merge) costs its size
                self.shell = base.copy()
                try:
                    branch()
                    outcomes.append(self.shell)
                except _Exit:
                    exited += 1
                except (_Break, _Return):
                    outcomes.append(self.shell)  # the branch leaves its loop or function here
        finally:
            self.under = saved_under
            self.shell = base
        if not outcomes:
            raise _Exit(label.line, "every branch ends the script")
        names = sorted(_changed(base, outcomes))
        differing = [n for n in names if len({_state_of(s, n) for s in outcomes}) > 1]
        flags = sorted(set(FLAG.findall(self.branch_text(node))))
        referenced = re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[#@*])", what)
        arguments = self.positional is None and any(n.isdigit() or n in "#@*" or n in self.from_arguments
                                                     for n in referenced)
        values = tuple((n, tuple(_words_of(_state_of(s, n)) for s in outcomes)) for n in differing
                       if not _only_appended(_state_of(base, n), [_state_of(s, n) for s in outcomes]))
        appends = bool(differing) and not values and all(
            _added_flags_named(_state_of(base, n), [_state_of(s, n) for s in outcomes], set(flags)) for n in differing)
        wraps: set[str] = set()
        for n in differing:
            held = _state_of(base, n)[0]
            for s in outcomes:
                value = _state_of(s, n)[0]
                if held and value and not value.startswith(held) and _added_to(held, value) is not None:
                    wraps.update(FLAG.findall(value[:-len(held)]))
        decided = Undecided(label.line, what, tuple(differing), tuple(flags), arguments, values, appends,
                            wraps=tuple(sorted(wraps)), environment=self.caller_variables(what))
        # the commands read under the branches carry the finished record
        for k in range(commands_before, len(self.reading.commands)):
            command = self.reading.commands[k]
            self.reading.commands[k] = dataclasses.replace(
                command, under=tuple(decided if u is label else u for u in command.under))
        for name in names:
            states = [_state_of(s, name) for s in outcomes]
            if len(set(states)) == 1:
                _set_state(base, name, states[0])
                continue
            before = tuple(self.shell.uncertain.get(name, ()))
            if not _only_appended(_state_of(base, name), states):
                # the branches give different values: none is chosen
                if name in base.arrays or any(name in s.arrays for s in outcomes):
                    base.arrays[name] = [_unknown(name)]
                    base.scalars.pop(name, None)
                else:
                    base.scalars[name] = _unknown(name)
                    base.arrays.pop(name, None)
                if name in base.exports or any(name in s.exports for s in outcomes):
                    base.exports[name] = _unknown(name)
            elif not _added_flags_named(_state_of(base, name), states, set(flags)):
                # a branch adds what its text does not name (`ARGS+=(--$key $value)` of a `while read` loop over a
                # file): what it held before stays, and an unknown part after it stands for what was added
                if name in base.arrays:
                    base.arrays[name] = [*base.arrays[name], _unknown(name)]
                else:
                    base.scalars[name] = (base.scalars.get(name) or "") + " " + _unknown(name)
            # else: a branch only adds to it (ARGS+=(--wandb-project x)): what it held before stays, and what the
            # branches add is named with the construct (its flags)
            base.uncertain[name] = (*before, decided)
        for s in outcomes:
            for fname, fbody in s.functions.items():
                base.functions.setdefault(fname, fbody)
        why = decided.describe()
        if exited:
            why += f"; {exited} of its branches end the script"
        self.reading.skipped.append((decided.line, why.split(": ", 1)[1]))
        if differing or flags or len(self.reading.commands) > commands_before:
            self.reading.undecided.append(decided)

    # -- conditions -------------------------------------------------------------------------------------------
    def condition(self, nodes: list[Any]) -> bool | None:
        """The verdict of the last of the condition's statements, when it can be known (set -e does not end the
        script in a condition, nor in a function it calls)."""
        verdict: bool | None = None
        saved, self.errexit = self.errexit, False
        try:
            for node in nodes:
                verdict = self.verdict(node)
        finally:
            self.errexit = saved
        return verdict

    def verdict(self, node: Any) -> bool | None:
        """A condition's verdict, None where it is not known: also where it reads a value that a sourced file not
        read may have changed (`NODES=1; source cluster.sh; if [ $NODES -gt 1 ]`)."""
        names = self.begin_reading()
        try:
            value = self.known_verdict(node)
        finally:
            self.end_touch()
        return None if self.tainted(names, ["?"]) else value

    def known_verdict(self, node: Any) -> bool | None:
        self.step()
        kind = node.type
        if kind == "test_command":
            if node.children and node.children[0].type == "((":
                return self.arith_verdict(node)
            if self.unclosed_bracket(node):
                return False
            return self.test_words(self.test_tokens(node), double=node.children[0].type == "[[")
        if kind == "compound_statement" and node.children and node.children[0].type == "((":
            return self.arith_verdict(node)
        if kind == "negated_command":
            inner = [c for c in node.named_children]
            value = self.condition(inner)
            return None if value is None else not value
        if kind == "list":
            children = [c for c in node.children if c.is_named or c.type in ("&&", "||")]
            left = self.verdict(children[0])
            right = self.verdict(children[-1])
            if children[1].type == "&&":
                return False if False in (left, right) else (None if None in (left, right) else True)
            return True if True in (left, right) else (None if None in (left, right) else False)
        if kind == "command":
            name = node.child_by_field_name("name")
            # the name's own node: `if $USE_FP16; then` runs true or false (command_name reads as its text)
            words = [w for c in node.children if c.is_named and c.type not in ("variable_assignment", "file_redirect",
                                                                                "herestring_redirect")
                     for w in self.fields(c.named_children[0] if c.type == "command_name" and c.named_children
                                          else c)]
            if name is None or not words:
                return None
            if words[0] in ("true", ":"):
                return True
            if words[0] == "false":
                return False
            if words[0] == "test":
                return self.test_words(words[1:], double=False)
            if words[0] == "[" and words[-1:] == ["]"]:
                return self.test_words(words[1:-1], double=False)
            if words[0] == "getopts" and len(words) >= 3 and NAME.fullmatch(words[2]):
                return self.getopts(words[1], words[2], words[3:] if len(words) > 3 else None)
            if words[0] == "read":  # `while IFS=, read -r k v; do …; done <<EOF`: a record read, or the end
                env = {self.assignment_name(c)[0]: self.joined(c.child_by_field_name("value"))
                       for c in node.children if c.type == "variable_assignment"
                       and c.child_by_field_name("value") is not None}
                return self.read(words, env)
            return None  # a command's success is not known without running it
        if kind in ("variable_assignment",):
            self.statement(node)
            return True
        if kind == "redirected_statement":  # `if cmd > $LOG; then`: a redirection bash refuses fails the command
            body = node.child_by_field_name("body")
            redirects = [c for c in node.named_children if c.type == "file_redirect"]
            if body is not None and body.type != "pipeline" and self.refused_redirect(node, redirects, ()):
                return False
        return None

    def unclosed_bracket(self, node: Any) -> bool:
        """`[ $X -eq 1]`: the grammar closes the test at the `]` that ends the last word, bash gives `[` the word
        `1]` and no `]` of its own, and the test fails (`[: missing ']'`, status 2) whatever the values; said once."""
        close = node.children[-1] if node.children else None
        if node.children[0].type != "[" or close is None or close.type != "]" or \
                self.src[close.start_byte - 1:close.start_byte] in (b" ", b"\t", b"\n"):
            return False
        said = (self.line(node), f"{self.first_line(node)}: its last word holds the `]`, so bash's [ finds no "
                                 "closing ] and fails (status 2: missing `]'), whatever the values")
        if said not in self.reading.skipped:
            self.reading.skipped.append(said)
        return True

    def getopts(self, spec: str, name: str, given: list[str] | None) -> bool | None:
        """`while getopts "t:p:" opt`: bash's getopts over the script's arguments (OPTIND, OPTARG, grouped -ab)."""
        if given is None and self.positional is None:
            self.without_arguments()
        args = given if given is not None else (self.positional or [])
        if unresolved_names(spec) or any(unresolved_names(a) for a in args):
            return None
        try:
            index = int(self.shell.scalars.get("OPTIND", "1"))
        except ValueError:
            return None
        silent = spec.startswith(":")
        self.shell.scalars.pop("OPTARG", None)
        if index < 1 or index > len(args) or not args[index - 1].startswith("-") or args[index - 1] in ("-", "--"):
            if 0 < index <= len(args) and args[index - 1] == "--":
                index += 1
            self.shell.scalars.update({name: "?", "OPTIND": str(index)})
            return False
        word = args[index - 1]
        at = self.getopts_at if self.getopts_at < len(word) else 1
        letter = word[at]
        at += 1
        done = at >= len(word)
        position = spec.find(letter) if letter != ":" else -1
        if position < 0:  # not an option of the script: `?` (silent: OPTARG is the letter)
            self.shell.scalars[name] = "?"
            if silent:
                self.shell.scalars["OPTARG"] = letter
        elif spec[position + 1:position + 2] == ":":  # takes a value: the rest of the word, or the next word
            if not done:
                self.shell.scalars.update({name: letter, "OPTARG": word[at:]})
            elif index < len(args):
                self.shell.scalars.update({name: letter, "OPTARG": args[index]})
                index += 1
            else:
                self.shell.scalars[name] = ":" if silent else "?"
                if silent:
                    self.shell.scalars["OPTARG"] = letter
            done = True
        else:
            self.shell.scalars[name] = letter
        self.getopts_at = 1 if done else at
        self.shell.scalars["OPTIND"] = str(index + 1 if done else index)
        return True

    def arith_verdict(self, node: Any) -> bool | None:
        try:
            return self.arith_node(node) != 0
        except _Unknown:
            return None

    def test_tokens(self, node: Any) -> list[str]:
        """A [ ] / [[ ]] test flattened to its words (operators as written, operands expanded: split in `[ ]`, not in
        `[[ ]]`); the grammar's tree for `[ ]` does not follow test(1)'s precedence, so the words are evaluated here."""
        out: list[str] = []
        double = bool(node.children) and node.children[0].type == "[["

        def walk(n: Any) -> None:
            self.step()
            if n.type in ("[", "]", "[[", "]]"):
                return
            if n.type == "binary_expression" and double and (self.regex_side(n, walk, out)
                                                              or self.pattern_side(n, walk, out)):
                return
            if n.type == "unary_expression" and len(n.children) == 2 and not n.children[0].is_named and \
                    n.children[0].end_byte == n.children[1].start_byte and n.children[1].type in WORDISH:
                # `-4`, `!x`: the grammar cuts a sign off its word; bash's word is the two together
                sign, operand = self.text(n.children[0]), n.children[1]
                fields = [self.joined(operand)] if double else self.fields(operand)
                out.extend([sign + (fields[0] if fields else ""), *fields[1:]])
                return
            if n.type in ("binary_expression", "unary_expression", "parenthesized_expression", "postfix_expression",
                          "ternary_expression") or (not n.is_named and n.child_count):
                for child in n.children:
                    walk(child)
                return
            if not n.is_named or n.type == "test_operator":
                out.append(self.text(n))
                return
            if n.type in ("extglob_pattern", "regex") and double:
                out.append("\x01" + self.pattern(n))  # a pattern, not a string
                return
            # `[ $X != x ]`: test(1) is a command, its operands are split like any command's words (X empty: `[ != x ]`,
            # an error; X="a b": two operands); `[[ ]]` does not split
            fields = [self.joined(n)] if double else self.fields(n)
            if not double and n.type == "string" and len(fields) == 1 and MARK in fields[0]:
                fields = [WHOLE + fields[0]]  # `[ -n "$DIR/save" ]`: one operand whatever the unknown part holds
            out.extend(fields)

        for child in node.children:
            walk(child)
        for k, word in enumerate(out[:-1]):  # -v NAME: whether NAME is set, where that is known
            if word == "-v" and (k == 0 or out[k - 1] in ("!", "(", "&&", "||", "-a", "-o")) and \
                    NAME.fullmatch(out[k + 1]):
                name = out[k + 1]
                known = self.shell.lookup(name) is not None or not self.unset(name)
                if known:
                    out[k:k + 2] = ["-n", "x" if self.shell.lookup(name) is not None else ""]
        return out

    def pattern_side(self, node: Any, walk: Callable[[Any], None], out: list[str]) -> bool:
        """`[[ $X == *"bf16"* ]]`, `[[ $X == "$Y"* ]]`: the right side of == / != is one pattern, however the grammar
        cuts it (a glob, a quoted part matched literally, an expansion), read whole here."""
        ops = [k for k, c in enumerate(node.children) if self.text(c) in ("==", "=", "!=") and not c.is_named
               or c.type == "test_operator" and self.text(c) in ("==", "=", "!=")]
        if not ops:
            return False
        at = ops[0]
        for child in node.children[:at]:
            walk(child)
        out.append(self.text(node.children[at]))
        rights = [c for c in node.children[at + 1:] if c.is_named]
        out.append("\x01" + "".join(self.pattern(c) for c in rights))
        return True

    def regex_side(self, node: Any, walk: Callable[[Any], None], out: list[str]) -> bool:
        """`[[ $N =~ $PATTERN ]]`, `[[ $X =~ ^"a.b"$ ]]`: the right side of =~ as bash matches it, an unquoted
        expansion's value being a regular expression and a quoted part matching literally (the grammar keeps
        `${PATTERN}` as regex text, which matched the name's own spelling)."""
        ops = [k for k, c in enumerate(node.children) if self.text(c) == "=~" and not c.is_named]
        if not ops:
            return False
        at = ops[0]
        for child in node.children[:at]:
            walk(child)
        out.append("=~")
        out.append("\x01" + "".join(self.regex(c) for c in node.children[at + 1:] if c.is_named))
        return True

    def regex(self, node: Any) -> str:
        text = self.text(node)
        if node.type == "regex" and not EXPANDS_OR_QUOTES.search(text):
            return self.pattern(node)
        if node.type == "regex":  # read again as the word it is; one the grammar cannot read as a word is unknown
            return str(self.reparsed(text.encode(), self.regex_parts, functools.partial(_unknown, text)))
        return self.regex_parts(node)

    def regex_parts(self, node: Any) -> str:
        out = []
        for kind, value, quoted in self.parts(node):
            piece = self.flat(kind, value)
            out.append(re.escape(piece) if quoted and MARK not in piece else piece)
        return "".join(out)

    def test_words(self, words: list[str], double: bool) -> bool | None:
        test = _Test(words, double, self.arith_value)
        try:
            value, rest = test.parse()
        except _Unknown:
            if any(w == "=~" for w in words):
                self.shell.arrays["BASH_REMATCH"] = [_unknown("BASH_REMATCH")]
            return None
        if test.rematch is not None:  # [[ $M =~ ^([0-9]+)B$ ]]: the groups are ${BASH_REMATCH[1]} …
            self.shell.arrays["BASH_REMATCH"] = test.rematch
            self.shell.scalars.pop("BASH_REMATCH", None)
        return value if not rest else None

    # -- assignments ------------------------------------------------------------------------------------------
    def assignment_name(self, node: Any) -> tuple[str, str | None]:
        name_node = node.child_by_field_name("name")
        if name_node is None:
            return "", None
        if name_node.type == "subscript":
            base = name_node.child_by_field_name("name")
            index = name_node.child_by_field_name("index")
            return (self.text(base) if base is not None else "", self.joined(index) if index is not None else "")
        return self.text(name_node), None

    def word_text(self, raw: bytes) -> str:
        """The value of one shell word given as text (`$A/$B"x"`), as an assignment reads it: not split."""
        return self.reparsed(raw, self.joined, functools.partial(_unknown, raw.decode("utf-8", "replace")))

    def reparsed(self, raw: bytes, read: Callable[[Any], Any], otherwise: Callable[[], Any]) -> Any:
        """`read` of one word given as text, parsed again with each unquoted `$NAME` written `${NAME}`: the
        grammar (tree-sitter-bash 0.25) cuts `$A/$B/x` into `$A/$` and `B/x`, and reads `${A}/${B}/x` whole."""
        saved = self.src
        self.src = b": " + BRACE_NAMES.sub(_braced, raw)
        try:
            command = _parser().parse(self.src).root_node.named_children[0]
            words = [c for c in command.named_children if c.type != "command_name"]
            if command.type == "command" and len(words) == 1 and words[0].end_byte == len(self.src):
                return read(words[0])
        finally:
            self.src = saved
        return otherwise()  # read in the script's own text again

    def word_fields(self, nodes: Sequence[Any]) -> list[str]:
        """The fields of a list of words; nodes with nothing between them are one shell word (the grammar may cut
        one in two, see reparsed), read again whole."""
        out: list[str] = []
        k = 0
        while k < len(nodes):
            m = k
            while m + 1 < len(nodes) and nodes[m + 1].start_byte == nodes[m].end_byte:
                m += 1
            written = self.src[nodes[k].start_byte:nodes[m].end_byte].decode("utf-8", "surrogateescape")
            if "{" in written and ("," in written or ".." in written):  # a{1..3}, {x,y}z: bash expands braces first
                variants = _brace_expand(written)
                if variants is None:
                    out.append(_unknown(written))
                    k = m + 1
                    continue
                if len(variants) > 1:
                    for variant in filter(None, variants):  # an empty one is no word: {,x} gives x
                        raw = variant.encode("utf-8", "surrogateescape")
                        out += self.reparsed(raw, self.fields, functools.partial(_unknown, variant))
                    k = m + 1
                    continue
            if m == k:
                out += self.fields(nodes[k])
            else:
                raw = self.src[nodes[k].start_byte:nodes[m].end_byte]
                pieces = nodes[k:m + 1]
                # where the word stays cut even so (`$A/` and `` `echo $B`/c ``), its pieces are glued: bash has no
                # blank between them
                out += self.reparsed(raw, self.fields, functools.partial(self.glued, pieces))
            k = m + 1
        return out

    def glued(self, pieces: Sequence[Any]) -> list[str]:
        """The fields of adjacent pieces of one word: the last field of each joined to the first of the next."""
        out: list[str] = []
        for piece in pieces:
            fields = self.fields(piece)
            if out and fields:
                out[-1] += fields[0]
                fields = fields[1:]
            out += fields
        return out

    def assign(self, node: Any, export: bool, tail: Any = None) -> None:
        """NAME=value (`tail`: the rest of the word, where the grammar cut it off as a command name)."""
        name, index = self.assignment_name(node)
        if not name:
            return
        if self.refs.get(name) == "":  # through a reference to a variable not known
            self.skip(node, f"assigned through a name reference to a variable not known: {self.first_line(node)}")
            return
        name = self.resolve(name)
        append = any(c.type == "+=" for c in node.children)
        value_node = node.child_by_field_name("value")
        kept = self.valid_taint(name)
        touched = self.begin_touch()
        read = self.names_read()
        try:
            if value_node is not None and value_node.type == "array":
                elements = self.word_fields([c for c in value_node.named_children if c.type != "comment"])
                self.shell.arrays[name] = (self.appended_to(name) if append else []) + elements
                self.shell.scalars.pop(name, None)
                _bound(self.shell.arrays[name], self.line(node))
                if export:
                    self.shell.exports[name] = elements[0] if elements else ""
                self.note_uncertain(name, touched, keep=append)
                self.note_taint(name, read, kept if append else [])
                return
            if tail is not None:  # the whole word, read where the grammar reads it whole: as an argument
                begin = value_node.start_byte if value_node is not None else tail.start_byte
                value = self.word_text(self.src[begin:tail.end_byte].replace(b"\\\r\n", b"").replace(b"\\\n", b""))
            else:
                value = self.joined(value_node) if value_node is not None else ""
        finally:
            self.end_touch()
        remember_secret(name, value)
        if index is not None and self.associative(name):  # P[key]=v: the key is a string, not arithmetic
            key = f"{name}[{index}]"
            if unresolved_names(index):  # which key is not known: nothing of the array is
                self.shell.scalars[name + "[]"] = _unknown(name)
            else:
                self.shell.scalars[key] = (self.shell.scalars.get(key, "") if append else "") + value
            self.note_uncertain(name, touched, keep=True)
            self.note_taint(name, read, kept)
            return
        if index is not None:  # A[3]=x, A[$i]=x (the subscript is arithmetic)
            array = list(self.shell.arrays.get(name, [] if name not in self.shell.scalars
                                                else [self.shell.scalars[name]]))
            try:
                k = self.arith_value(index)
            except _Unknown:
                k = -1
            if array == [_unknown(name)]:
                pass  # not known: an element set now does not make it known
            elif 0 <= k < len(array):
                array[k] = value
            elif k == len(array):
                array.append(value)
            else:  # a gap (bash's arrays are sparse: A[5]=z after two elements is the third), or not known
                array = [_unknown(name)]
            self.shell.arrays[name] = array
            self.shell.scalars.pop(name, None)
            self.note_uncertain(name, touched, keep=True)
            self.note_taint(name, read, kept)
            return
        copied = UNRESOLVED.fullmatch(value) if not append and index is None else None
        if UNRESOLVED.fullmatch(value) and (not value.startswith(MARK + "$(") or value.startswith(MARK + "$((")):
            if UNRESOLVED.fullmatch(value).group(1).isdigit():  # type: ignore[union-attr]
                self.from_arguments.add(name)  # MODEL_SIZE=$3: decided by the script's arguments
            value = _unknown(name)  # DATA_PATH=$5: name the variable the script's reader knows
        self.note_copy(name, copied.group(1) if copied else None)
        attributes = self.attributes.get(name, "")
        if "i" in attributes and name not in self.shell.arrays:  # N+=4 under declare -i adds
            try:
                number = self.arith_value(value or "0")
                if append:
                    number = arithmetic.wrap(self.arith_value(self.shell.scalars.get(name) or "0") + number)
                value = str(number)
            except _Unknown:
                value = _unknown(name)
            append = False
        if append:
            if name in self.shell.arrays:
                self.shell.arrays[name] = [*self.shell.arrays[name], value]
                self.note_taint(name, read, kept)
                return
            value = "".join(self.appended_to(name)[:1]) + value
        if "l" in attributes or "u" in attributes:
            parts = [part if k % 2 else _cased(part, upper="l" not in attributes)
                     for k, part in enumerate(re.split(f"({MARK}[^{MARK}]*{MARK})", value))]
            value = _unknown(name) if None in parts else "".join(p or "" for p in parts)
        _bound([value], self.line(node))
        self.shell.scalars[name] = value
        self.shell.arrays.pop(name, None)
        if export or name in self.shell.exports:
            self.shell.exports[name] = value
        self.note_uncertain(name, touched, keep=append)
        self.note_taint(name, read, kept if append else [])

    def note_copy(self, name: str, source: str | None) -> None:
        """`LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK` with the source not known: the unknown value is then named
        LOCAL_RANK, so remember whose value it holds (Reading.copies); "" once the name is also set otherwise."""
        if source is None or source == name:
            if name in self.copies:
                self.copies[name] = ""
            return
        root = self.copies.get(source, source) or ""
        self.copies[name] = root if self.copies.get(name, root) == root else ""

    def appended_to(self, name: str) -> list[str]:
        """What `NAME+=…` adds to: its value; where it is unset, nothing, or its unknown marker where the caller or a
        sourced file that was not read may have set it (`source params.sh; ARGS+=(--log-interval 1)` keeps the
        params' part as unknown, never drops it)."""
        if name in self.shell.arrays:
            return list(self.shell.arrays[name])
        if name in self.shell.scalars:
            return [self.shell.scalars[name]]
        value = self.unset(name)
        return [value] if value else []

    def note_uncertain(self, name: str, touched: set[Undecided], keep: bool) -> None:
        before = self.shell.uncertain.get(name, ()) if keep else ()
        combined = tuple(dict.fromkeys((*before, *sorted(touched, key=lambda u: u.line))))
        if combined:
            self.shell.uncertain[name] = combined
        else:
            self.shell.uncertain.pop(name, None)

    def touch(self, name: str) -> None:
        """Reading `name` while a word is expanded: the word depends on the undecided branches that set it. A value
        that is only the variable's unknown marker carries that itself, into the one word it lands in (so that
        `--node_rank $NODE_RANK` depends on the branch, the other words of the same string do not)."""
        if self.touched_names is not None:
            self.touched_names.add(name)
        if name in self.shell.uncertain and self.touched is not None \
                and self.shell.lookup(name) != _unknown(name):
            self.touched.update(self.shell.uncertain[name])

    def begin_touch(self) -> set[Undecided]:
        self._touch_stack = getattr(self, "_touch_stack", [])
        self._touch_stack.append((self.touched, self.touched_names))
        self.touched, self.touched_names = set(), set()
        return self.touched

    def names_read(self) -> set[str]:
        """The variables read since begin_touch (filled while the words are expanded)."""
        assert self.touched_names is not None
        return self.touched_names

    def begin_reading(self) -> set[str]:
        self.begin_touch()
        return self.names_read()

    def end_touch(self) -> None:
        inner, names = self.touched or set(), self.touched_names or set()
        self.touched, self.touched_names = self._touch_stack.pop()
        if self.touched is not None:
            self.touched |= inner
        if self.touched_names is not None:
            self.touched_names |= names

    # -- values a sourced file not read may have changed --------------------------------------------------------
    def value_state(self, name: str) -> tuple[Any, ...]:
        if self.associative(name):
            return (tuple(sorted(self.associative_entries(name).items())), self.shell.scalars[name + "[]"])
        return _state_of(self.shell, name)

    def value_words(self, name: str) -> list[str]:
        if self.associative(name):
            return [w for v in self.associative_entries(name).values() for w in v.split()]
        return [w for v in self.shell.arrays.get(name, [self.shell.scalars.get(name) or ""]) for w in v.split()]

    def tainted(self, names: set[str], words: Sequence[str]) -> dict[str, tuple[Undecided, ...]]:
        """Of `words`, made from the variables `names`, those that came from a value a sourced file not read may
        have changed (see source_not_read), with the sources: a word of that value found among them, else the words
        that hold one (`$DIR/bind.sh`), else (the value was computed on, `$((N*G))`, `${P%/*}`) every word."""
        found: dict[str, tuple[Undecided, ...]] = {}
        tokens = {t for w in words for t in w.split()}
        for name in names:
            for group, items in self.valid_taint(name):
                holding = {t for t in tokens if any(g in t for g in group)} if not group & tokens else set()
                for target in (group & tokens or holding or tokens):
                    found[target] = tuple(dict.fromkeys((*found.get(target, ()), *items)))
        return found

    def valid_taint(self, name: str) -> Taint:
        state, taint = self.taint.get(name, (None, []))
        return taint if taint and state == self.value_state(name) else []

    def note_taint(self, name: str, names: set[str], kept: Taint) -> None:
        """`name` was just set from the variables `names` (`kept`: what its value held before, when added to): it
        carries what of them a file not read may change."""
        if not kept and not any(self.taint.get(n) for n in names - {name}):
            self.taint.pop(name, None)
            return
        words = frozenset(self.value_words(name))
        taint = [(group & words, items) for group, items in kept if group & words]
        by_items: dict[tuple[Undecided, ...], set[str]] = {}
        for word, items in self.tainted(names - {name}, sorted(words)).items():
            by_items.setdefault(items, set()).add(word)
        taint += [(frozenset(group), items) for items, group in by_items.items()]
        if taint:
            self.taint[name] = (self.value_state(name), _merged(taint))
        else:
            self.taint.pop(name, None)

    # -- commands ---------------------------------------------------------------------------------------------
    def st_command(self, node: Any) -> None:
        trailing, self.redirect_words = self.redirect_words, []
        prefixes = [c for c in node.children if c.type == "variable_assignment"]
        name = node.child_by_field_name("name")
        redirects = [c for c in node.children if c.type == "file_redirect"]
        head = [c for c in node.children if c.type in ("variable_assignment", "file_redirect")
                and (name is None or c.end_byte <= name.start_byte)]
        joined = name is not None and bool(head) and head[-1].type == "file_redirect" and \
            self.newline_between(head[-1], name)

        def again() -> None:
            self.redirect_words = trailing
            self.st_command(node)

        if self.may_stop_at_input(node, [c for c in head if c.type == "file_redirect"] if joined else redirects,
                                  prefixes if joined or self.missing_name(node) else [], again):
            return
        if joined:
            # the grammar joins `X=1 > $LOG` and the next line's command; bash runs them apart
            if not self.refused_redirect(node, [c for c in head if c.type == "file_redirect"], prefixes):
                for prefix in prefixes:
                    self.assign(prefix, export=False)
            prefixes, redirects = [], [c for c in redirects if c.start_byte > name.start_byte]
        if self.refused_redirect(node, redirects, prefixes if self.missing_name(node) else []):
            return
        arguments = [c for c in node.children if c.is_named and c.start_byte > (name.end_byte if name else 0)
                     and c.type not in ("file_redirect", "herestring_redirect", "heredoc_redirect", "comment")]
        if prefixes and name is not None and not arguments and not trailing and (
                prefixes[-1].end_byte == name.start_byte
                or self.src[prefixes[-1].end_byte:name.start_byte] in (b"\\\n", b"\\\r\n")):
            # (a line continuation between the parts is removed by bash before it reads words: one word too)
            # the grammar splits `ROOT=$A/$B/x` at `/$` into an assignment and a command `$B/x`; bash reads one
            # assignment word (seen: a checkpoint path cut to its first part and a command that is none)
            for prefix in prefixes[:-1]:
                self.assign(prefix, export=False)
            self.assign(prefixes[-1], export=False, tail=name)
            return
        if prefixes and name is not None and self.newline_between(prefixes[-1], name):
            # the grammar joins `A=1 B=${X}` and the next line's command; bash runs them apart
            for prefix in prefixes:
                self.assign(prefix, export=False)
            prefixes = []
        argv: list[str] = []
        depends: dict[int, tuple[Undecided, ...]] = {}
        targets = [child.named_children[0] if child.type == "command_name" and child.named_children else child
                   for child in node.children
                   if child.is_named and child.type not in ("variable_assignment", "file_redirect",
                                                            "herestring_redirect", "heredoc_redirect", "comment")]
        targets += trailing
        groups: list[list[Any]] = []
        for target in targets:  # words with nothing between them are one word the grammar cut (see reparsed)
            if groups and groups[-1][-1].end_byte == target.start_byte:
                groups[-1].append(target)
            else:
                groups.append([target])
        absent: set[Undecided] = set()
        command_taint: dict[str, tuple[Undecided, ...]] = {}
        for group in groups:
            touched = self.begin_touch()
            read = self.names_read()
            try:
                words = self.word_fields(group)
            finally:
                self.end_touch()
            if not words:
                absent |= touched
            taint = self.tainted(read, words)
            for token, items in taint.items():
                command_taint[token] = tuple(dict.fromkeys((*command_taint.get(token, ()), *items)))
            globbed = self.pathname_expanded(group, words)
            for word in words:
                needs = set(touched) | {u for n in unresolved_names(word) for u in self.shell.uncertain.get(n, ())}
                needs |= {u for token in word.split() for u in taint.get(token, ())}
                if word in globbed:
                    needs.add(globbed[word])
                if needs:
                    depends[len(argv)] = tuple(sorted(needs, key=lambda u: u.line))
                argv.append(word)
        if not argv:
            for prefix in prefixes:
                self.assign(prefix, export=False)
            return
        env: dict[str, str] = {}
        for prefix in prefixes:
            pname, _ = self.assignment_name(prefix)
            value_node = prefix.child_by_field_name("value")
            env[pname] = self.joined(value_node) if value_node is not None and value_node.type != "array" else ""
        _bound(argv, self.line(node))
        self.absent = tuple(sorted(absent, key=lambda u: u.line))
        self.command_taint = command_taint
        herestring = next((c for c in node.children if c.type == "herestring_redirect"), None)
        if herestring is not None and herestring.named_children:  # `read -r TP PP <<< "4 2"`: its input is known
            with self.reading_input(self.joined(herestring.named_children[0]) + "\n"):
                self.run_argv(node, argv, env, depends)
            return
        self.run_argv(node, argv, env, depends)

    def pathname_expanded(self, group: Sequence[Any], words: list[str]) -> dict[str, Undecided]:
        """The words of a command that bash matches against file names (`--data-path /data/*_text_document`,
        `--load ckpt/iter_???`, `$PATTERN` unquoted): each becomes the names of the files it matches where the script
        runs (itself where none does), which is not known here."""
        if self.noglob:
            return {}
        written = self.src[group[0].start_byte:group[-1].end_byte].decode("utf-8", "surrogateescape")
        literal, expansion = _pathname_pattern(written)
        if not literal and not expansion:
            return {}
        return {word: Undecided(self.current_line, f"{show(word)}: bash replaces the word with the names of the "
                                                   "files it matches where the script runs (the word itself where "
                                                   "none does)",
                                 decide="quote the word in the script where it means itself")
                for word in words if GLOB_CHARACTER.search(word) and MARK not in word and FILE_LIKE.search(word)}

    def newline_between(self, before: Any, after: Any) -> bool:
        gap = self.src[before.end_byte:after.start_byte].replace(b"\\\n", b"")
        return b"\n" in gap

    def run_argv(self, node: Any, argv: list[str], env: dict[str, str],
                 depends: dict[int, tuple[Undecided, ...]]) -> None:
        program = base_name(argv[0])
        if program == "env":  # env [-i] [-u NAME] NAME=value … command …
            k, dropped, place = 1, self.env_dropped, (self.cwd, self.cwd_why, self.where)
            while k < len(argv):
                word = argv[k]
                if word in ("-C", "--chdir") or word.startswith("--chdir="):  # the command's place, not the script's
                    self.change_directory(["env -C", word.partition("=")[2] or " ".join(argv[k + 1:k + 2])])
                if word in ("-i", "--ignore-environment", "-"):  # the command gets only the NAME=value given here
                    self.env_dropped, env = "env -i", {}
                if word in ("-u", "--unset", "-C", "--chdir", "-S", "--split-string"):
                    k += 2
                elif word.startswith("-"):
                    k += 1
                elif re.match(r"[A-Za-z_][A-Za-z0-9_]*=", word):
                    key, _, value = word.partition("=")
                    env[key] = value
                    k += 1
                else:
                    break
            try:
                if k < len(argv):
                    self.run_argv(node, argv[k:], env, {i - k: d for i, d in depends.items() if i >= k})
            finally:
                self.env_dropped, (self.cwd, self.cwd_why, self.where) = dropped, place
            return
        if program in ("exec", "nohup", "command", "builtin", "time") and len(argv) > 1 \
                and not (program == "command" and argv[1] in ("-v", "-V")):  # command -v NAME prints, runs nothing
            k = 1  # these run the command that follows (exec -a NAME, time -p)
            while k < len(argv) - 1 and argv[k] in ("-a", "-c", "-l", "-p", "-v", "--"):
                k += 2 if argv[k] == "-a" else 1
            self.run_argv(node, argv[k:], env, {i - k: d for i, d in depends.items() if i >= k})
            return
        if program == "sudo" and len(argv) > 1 and self.capture is None:
            self.run_sudo(node, argv, env, depends)
            return
        if program in self.shell.functions and self.capture is None or argv[0] in self.shell.functions:
            self.call(argv)
            return
        if program in ("cd", "pushd", "popd") and self.capture is None:
            self.change_directory(argv)
        if argv[0] in self.unread_functions:  # defined in lines the grammar could not read: what it does is unknown
            why = f"{show(argv[0])}, a function defined in {self.unread_functions[argv[0]]}, which were not read"
            if self.capture is not None:
                self.capture.known = False
                self.capture.why = self.capture.why or why
            else:
                self.reading.skipped.append((self.line(node), f"not run: {why}"))
            return
        if program == "rm" and self.capture is None:  # a file the script wrote is gone: its text is not known
            for word in argv[1:]:
                self.forget_written(word)
        if program == "eval":
            with self.run_through(depends, argv):
                self.nested(node, " ".join(argv[1:]), f"eval {show(' '.join(argv[1:]))[:60]}")
            return
        if program == "exit":
            code = int(argv[1]) % 256 if len(argv) > 1 and re.fullmatch(r"[0-9]{1,9}", argv[1]) else None
            raise _Exit(self.line(node), "exit " + " ".join(show(a) for a in argv[1:2]), code)
        if program in ("break", "continue"):
            levels = (untrusted.count(argv[1]) if len(argv) > 1 else None) or 1  # '²', 0: bash's own error
            if not self.loops:  # bash: "only meaningful in a `for', `while', or `until' loop", and goes on
                self.skip(node, f"{program} outside a loop does nothing (bash says so and goes on)")
                return
            raise _Break(program == "continue", levels)
        if program == "return":
            if not self.functions and not self.sources:  # `return 0 2>/dev/null || exit 0` in a script run by bash
                self.status, self.failed = False, True
                self.skip(node, "return outside a function or a sourced file: bash refuses it (status 2) and goes "
                                "on" + (", and set -e ends the script there" if self.errexit else ""))
                if self.errexit and self.capture is None:
                    raise _Exit(self.line(node), "set -e, and return outside a function fails")
                return
            raise _Return()
        if program == "shift":
            given = untrusted.count(argv[1]) if len(argv) > 1 else None  # ASCII digits: '²' is no count
            count = 1 if given is None else given
            if self.positional is not None:
                self.positional = self.positional[count:]
                self.set_positional(self.positional)
            return
        if program in ("source", "."):
            self.source_file(node, argv)
            return
        if program == "let":  # let X=X+1 "Y = 2": arithmetic, as (( … ))
            for expression in argv[1:]:
                try:
                    self.arith_value(expression)
                except _Unknown:
                    for name in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:[-+*/%]?=(?!=)|\+\+|--)", expression):
                        self.shell.scalars[name] = _unknown(name)
            return
        if program in ("set", "true", ":", "false", "wait", "trap", "ulimit", "umask", "shopt", "hash"):
            if program == "set":
                self.set_errexit(argv[1:])
            if program == "set" and "--" in argv:
                self.positional = argv[argv.index("--") + 1:]
                self.set_positional(self.positional)
                first = _uncounted(self.positional, "@")
                if first is not None:  # `set -- $(scontrol show hostnames)`: how many words, which is $2: not known
                    self.shell.scalars.update({str(n): _unknown(str(n)) for n in range(first + 2, len(argv) + 1)})
                    self.shell.scalars["#"] = _unknown("#")
            return
        if program == "read":
            self.read(argv, env)
            return
        if program in ("mapfile", "readarray"):
            self.mapfile(argv)
            return
        if program == "printf" and argv[1:2] == ["-v"] and len(argv) > 3 and self.capture is None:
            if NAME.fullmatch(argv[2]):  # printf -v TP "%d" 4: the output goes into TP
                printed = _printf([program, *argv[3:]])
                self.shell.scalars[argv[2]] = printed if printed is not None and not unresolved_names(printed) \
                    else _unknown(argv[2])
                self.shell.arrays.pop(argv[2], None)
            return
        if self.capture is not None:
            if program in ("echo", "printf"):
                printed = _echo(argv) if program == "echo" else _printf(argv)
                if printed is None:
                    self.capture.known = False
                else:
                    self.capture.out.append(printed)
                return
            if program == "scontrol":  # `$(scontrol show hostnames $SLURM_JOB_NODELIST | wc -l)`: the job's nodes
                nodes = self.shell.scalars.get("SLURM_JOB_NUM_NODES", self.shell.scalars.get("SLURM_NNODES"))
                hosts = pbs.slurm_hostnames(argv[1:], nodes, [_unknown("SLURM_JOB_NODELIST"),
                                                              _unknown("SLURM_NODELIST")])
                if hosts is not None:
                    self.capture.out.append("".join(_unknown(host) + "\n" for host in hosts))
                    return
            if program == "cat" and argv[1:] and all(self.file_text(a) is not None for a in argv[1:]):
                self.capture.out.append("".join(self.file_text(a) or "" for a in argv[1:]))  # files it wrote
                return
            if program in pbs.FILTERS:  # `wc -l < $PBS_NODEFILE`, `sort -u $PBS_NODEFILE | wc -l`
                filtered = self.filter_lines(program, argv[1:])
                if filtered is not None:
                    self.capture.out.append(filtered)
                    return
            if program == "flux" and self.reading.flux_nodes and flux.asks_nodes(argv[1:]):
                self.capture.out.append(f"{self.reading.flux_nodes}\n")  # the batch instance's nodes
                return
            computed = coreutils.expr(argv[1:]) if program == "expr" else \
                coreutils.seq(argv[1:]) if program == "seq" else \
                coreutils.cut(argv[1:], self.stdin) if program == "cut" and self.stdin is not None \
                and not unresolved_names(self.stdin) else \
                coreutils.tr(argv[1:], self.stdin) if program == "tr" and self.stdin is not None \
                and not unresolved_names(self.stdin) else \
                bc.run(argv[1:], self.stdin) if program == "bc" and self.stdin is not None \
                and not unresolved_names(self.stdin) else \
                awk.run(argv[1:]) if program in ("awk", "gawk", "mawk", "nawk") else None
            if computed is not None and not any(unresolved_names(a) for a in argv):
                self.capture.out.append(computed)
                return
            path = _path_command(argv, self.capture_cwd)
            if path is not None:  # $(dirname "$0"), $(cd "$(dirname …)" && pwd), $(realpath …): known paths
                if program == "cd":
                    self.capture_cwd = path or None
                    self.status = path != ""
                else:
                    self.capture.out.append(path + "\n")
                return
            self.capture.known = False
            self.capture.why = self.capture.why or program
            return
        if self.written and self.run_written(node, argv):
            return
        if self.directory is not None and self.run_script_file(node, argv, env):
            return
        inner = _shell_c(argv)
        if inner is not None:  # srun … bash -c "python pretrain_gpt.py …"
            saved_outer = self.outer
            self.outer = [*saved_outer, *argv[:_shell_at(argv)]]
            try:  # its own bash: an exit there ends only that one
                with self.run_through(depends, start=_shell_at(argv), words=argv):
                    self.new_shell(node, inner, f"{show(' '.join(argv[:2]))} … -c")
            except _Exit:
                pass
            finally:
                self.outer = saved_outer
            return
        string = _command_string(argv)
        if string is not None:  # sbatch --wrap "srun python pretrain_gpt.py …", ssh host "torchrun …", bcprun -c '…'
            k, inner = string
            saved_outer = self.outer
            self.outer = [*saved_outer, *argv[:k]]
            try:  # run by a shell of its own (the remote one, the job's): an exit there ends only that one
                with self.run_through(depends, start=k, words=argv):
                    self.new_shell(node, inner, f"{show(argv[0])} … {show(inner)[:40]!r}")
            except _Exit:
                pass
            finally:
                self.outer = saved_outer
            return
        # `… | xargs torchrun pretrain_gpt.py`: xargs adds the words it reads from its input, not known here
        before = argv[:next((k for k, w in enumerate(argv) if show(w).endswith(".py")), len(argv))]
        if any(base_name(show(word)) == "xargs" for word in before):
            argv = [*argv, _unknown("words xargs reads from its input")]
        depends = dict(depends)
        for k, word in enumerate(argv):
            if word in self.through_sourced:
                depends[k] = tuple(dict.fromkeys((*depends.get(k, ()), *self.through_sourced[word])))
        self.reading.commands.append(ScriptCommand(argv, self.line(node), env, self.under, depends, list(self.outer),
                                                   tuple(dict.fromkeys((*self.absent, *self.through))),
                                                   self.through_flags, self.where))

    def read(self, argv: list[str], env: dict[str, str]) -> bool | None:
        """`read [-r] [-d DELIM] [-a ARRAY] NAME…`: from a here-string or here-document whose text is known, bash's
        reading (one record up to DELIM, split on IFS, the last name takes the rest; the record is consumed, so that
        `while read …; do …; done <<EOF` reads line after line); else each name is unknown. Its status: a record
        ended by DELIM was read (None: not known)."""
        options, names = _reader_options(argv[1:], "ad", "rsep")
        array = options.get("a")
        targets = [n for n in ([array] if array else names or ["REPLY"]) if NAME.fullmatch(n)]
        text = self.stdin
        ifs = env.get("IFS", self.shell.scalars.get("IFS", " \t\n"))  # `IFS=, read …`: for this command only
        if text is None or unresolved_names(text) or unresolved_names(ifs) or options.get("?") or not targets:
            for name in targets:
                self.shell.scalars[name] = _unknown(name)
                self.shell.arrays.pop(name, None)
            return None
        raw = "r" in options
        if not raw:  # a backslash before a newline joins the lines; `\\` is one escaped backslash (left to right)
            text = re.sub(r"\\(.)", lambda m: "" if m.group(1) == "\n" else m.group(0), text, flags=re.S)
        delim = options.get("d", "\n")[:1] or "\0"
        record, ended, rest = text.partition(delim)
        self.stdin = rest
        if array:
            self.shell.arrays[array] = _read_fields(record, ifs, 0, raw)
            self.shell.scalars.pop(array, None)
            return bool(ended)
        if not names:  # no name: REPLY, the whole record as it stands
            self.shell.scalars["REPLY"] = record if raw else re.sub(r"\\(.)", r"\1", record)
            self.shell.arrays.pop("REPLY", None)
            return bool(ended)
        fields = _read_fields(record, ifs, len(targets), raw)
        for k, name in enumerate(targets):
            self.shell.scalars[name] = fields[k] if k < len(fields) else ""
            self.shell.arrays.pop(name, None)
        return bool(ended)

    def mapfile(self, argv: list[str]) -> None:
        """`mapfile -t ARRAY <<< "…"` / readarray: one element per line of a known input; else unknown."""
        options, names = _reader_options(argv[1:], "dnOsuCc", "t")
        name = names[0] if names else "MAPFILE"
        if not NAME.fullmatch(name):
            return
        text = self.stdin
        if text is None or unresolved_names(text) or options.get("?") or set(options) & set("nOsuCc"):
            self.shell.arrays[name] = [_unknown(name)]
            self.shell.scalars.pop(name, None)
            return
        delim = options.get("d", "\n")[:1] or "\0"
        lines = text.split(delim)
        records = [line + ("" if "t" in options else delim) for line in lines[:-1]]
        if lines[-1]:
            records.append(lines[-1])
        self.shell.arrays[name] = records
        self.shell.scalars.pop(name, None)

    def source_file(self, node: Any, argv: list[str]) -> None:
        """`source FILE args…` / `. FILE`: FILE's text read here, with the same bounds (never run), when its path is
        known and it lies next to the script (relative to the script's directory, or absolute); else named, with
        its line, as not read: what it sets stays unknown."""
        if len(argv) < 2:
            return
        given = argv[1]
        what = f"{show(argv[0])} {show(given)}"
        if ENVIRONMENT_SETUP.search(show(given)) or ENVIRONMENT_SETUP.search(os.path.normpath(show(given))):
            self.skip(node, f"{what}: not read: it sets up the software environment (a virtualenv, conda, modules, a "
                            "toolkit's set_env.sh), not the run's settings")
            return
        line = self.line(node)
        key = self.written_file(given)
        written = self.file_text(given) if key is not None else None
        if written is not None and key is not None:  # `echo 'TP=4' > env.sh; source env.sh`: the text it wrote
            if key in self.sourcing:
                self.skip(node, f"{what}: the file sources itself; read once, not again")
            elif self.sourced_chars + len(written) > MAX_SCRIPT_CHARS:
                self.skip(node, f"{what}: not read (the files sourced pass {MAX_SCRIPT_CHARS:,} characters "
                                f"together); {MAY_SET}")
                self.source_not_read(self.line(node), what, "the files sourced are too large to read together")
            else:
                self.read_sourced(node, argv, written, key)
            return
        if given.startswith(MARK + "<(") and UNRESOLVED.fullmatch(given):
            self.skip(node, f"{what}: the script that a command prints (a process substitution) is not read: it is "
                            f"not known without running the script; {MAY_SET}")
            self.source_not_read(line, f"{what} (the script a command prints)", "what the command prints is not "
                                 "known without running the script")
            return
        if unresolved_names(given):
            needs = [n for n in unresolved_names(given) if NAME.fullmatch(n) and n not in self.script_names]
            self.skip(node, f"{what}: the file's path is not known without running the script; the file is not "
                            f"read and {MAY_SET}")
            self.source_not_read(line, what, "its path is not known without running the script"
                                 + (": give " + " ".join(f"--env {n}=VALUE" for n in needs) + " so that the file "
                                    "is found and read" if needs else ""))
            return
        if self.directory is None:
            self.skip(node, f"{what}: not read (the script was not given as a file, so the file's place is not "
                            f"known); {MAY_SET}")
            self.source_not_read(line, what, f"import the script from its file, with "
                                 f"{show(given)} where it sources it from")
            return
        if given.startswith("/"):
            path = Path(given)
        elif self.cwd is not None:
            path = self.cwd / given
        else:
            self.skip(node, f"{what}: not read (it is found from the directory that {self.cwd_why} moves to, "
                            f"which is not known here); {MAY_SET}")
            self.source_not_read(line, what, f"the directory that {self.cwd_why} moves to is not known here")
            return
        key = os.path.realpath(path)
        if key in self.sourcing:
            self.skip(node, f"{what}: the file sources itself (through {' → '.join(self.sourcing + [key])}); "
                            "read once, not again")
            return
        put = f"put the file at {show(str(path))} and import again"
        budget = MAX_SCRIPT_CHARS - self.sourced_chars
        if budget <= 0:
            self.skip(node, f"{what}: not read (the files sourced pass {MAX_SCRIPT_CHARS:,} characters together); "
                            f"{MAY_SET}")
            self.source_not_read(line, what, "the files sourced are too large to read together")
            return
        try:
            text = untrusted.read_utf8(path, "sourced file", max(budget, 0))
        except UserError as exc:
            shared = (f": the files a script sources hold at most {MAX_SCRIPT_CHARS:,} characters together"
                      if budget < MAX_SCRIPT_CHARS else "")
            self.skip(node, f"{what}: not read ({exc.problems[0].message}{shared}); {MAY_SET}")
            self.source_not_read(line, what, put)
            return
        if MARK in text:
            self.skip(node, f"{what}: not read (it holds a NUL byte: a binary file?); {MAY_SET}")
            self.source_not_read(line, what, put)
            return
        self.read_sourced(node, argv, text, os.path.abspath(path))

    def read_sourced(self, node: Any, argv: list[str], text: str, path: str) -> None:
        """Read a sourced file's text here (its arguments, if any, are $1 … while it is read)."""
        key = os.path.realpath(path) if os.path.isabs(path) else path
        self.sourced_chars += len(text)
        saved_positional = self.positional
        if len(argv) > 2:  # `source FILE a b`: $1 … are a b while it is read
            self.positional = argv[2:]
            self.set_positional(self.positional)
        self.sourcing.append(key)
        saved_sources = self.shell.arrays.get("BASH_SOURCE")
        self.shell.arrays["BASH_SOURCE"] = [path, *(saved_sources or [])]
        self.sources += 1
        try:  # its commands are said on the line that sources it
            self.run_source(text, line_offset=0, fixed_line=self.line(node))
        except _Return:
            pass  # `return` ends the sourced file only
        finally:
            self.sources -= 1
            self.sourcing.pop()
            if saved_sources is None:
                self.shell.arrays.pop("BASH_SOURCE", None)
            else:
                self.shell.arrays["BASH_SOURCE"] = saved_sources
            if len(argv) > 2:  # as a function call restores them
                self.positional = saved_positional
                self.set_positional(saved_positional or [])
                if saved_positional is None:
                    self.shell.scalars.pop("#", None)

    def source_not_read(self, line: int, what: str, decide: str) -> None:
        """A file sourced here and not read may set any variable. From here on an unset one is unknown (unset()),
        and one the script gave a value before it (`TP=1; source cluster.sh; … $TP`) keeps that value, which bash
        passes unless the file sets another: each word of a command made from it depends on this line (a model or
        layout flag is then lost, named with how to decide it), and a test that reads it is not decided. Word by
        word, not variable by variable: `ARGS=(--log-dir $LOGS --nproc_per_node 8)` after the file depends on it
        for $LOGS's word only. What the caller and the job's scheduler gave (--env, #SBATCH), still as given, is
        not the script's own: --env is how the user says what the script runs with."""
        self.unread_sources += 1
        item = Undecided(line, f"{what}, not read, may change what the script set before it", decide=decide,
                         sourced=True)
        names: dict[str, None] = {}
        for name in [*self.shell.scalars, *self.shell.arrays]:
            base = name.partition("[")[0]  # P[key]: a key of an associative array (see declare_associative)
            if base.isdigit() or base in NOT_SET_BY_SOURCE or base.startswith("__launch_unknown_") or \
                    name in self.given and _state_of(self.shell, name) == self.given[name]:
                continue
            names[base] = None
        self.step(len(names) // 20)  # as a copy of the shell costs (undecided_fork)
        for name in names:
            state = self.value_state(name)
            held = self.taint.get(name)
            if held is not None and held[0] == state and len(held[1]) == 1 and \
                    len(held[1][0][1]) >= MAX_TAINT_SOURCES:
                continue  # its whole value names as many files as are said already
            cached = self.value_word_sets.get(name)
            if cached is None or cached[0] != state:
                cached = (state, frozenset(self.value_words(name)))
                self.value_word_sets[name] = cached
                self.step(1 + len(cached[1]) // 1000)  # work that grows with the value: within the reading's steps
            taint = held[1] if held is not None and held[0] == state else []
            if len(taint) == 1 and (taint[0][0] is cached[1] or taint[0][0] == cached[1]):  # already (a loop)
                items = taint[0][1]
                if len(items) < MAX_TAINT_SOURCES and item not in items:
                    self.taint[name] = (state, [(cached[1], (*items, item))])
                continue
            self.taint[name] = (state, _merged([*taint, (cached[1], (item,))]))
        if names:
            self.reading.undecided.append(item)

    @contextlib.contextmanager
    def reading_input(self, text: str | None) -> Iterator[None]:
        """While a statement reads `text` as its standard input (a here-document, a here-string, a known file)."""
        saved, self.stdin = self.stdin, text
        try:
            yield
        finally:
            self.stdin = saved

    @contextlib.contextmanager
    def run_through(self, depends: dict[int, tuple[Undecided, ...]], argv: Sequence[str] = (),
                    start: int = 0, words: Sequence[str] | None = None) -> Iterator[None]:
        """While a command string is read (`eval $run_cmd`): the constructs its words depend on
        (`if …; then options="$options --fp16"; fi` before `run_cmd="torchrun … $options"`) stay named with each
        command read from it, whose words no longer say which variable they came from. `start`: where the string
        (with its shell) begins in argv; the words before it are a wrapper's (`deepspeed $HOSTFILE_OPTS bash -c
        "…"`), whose options are not training flags. `words`: the command's words, where not `argv` (a string run by
        another shell, whose entry lies inside it)."""
        saved = self.through, self.through_flags, self.through_sourced
        words = argv if words is None else words
        self.through = tuple(dict.fromkeys((*saved[0], *(u for needs in depends.values() for u in needs))))
        entry = next((k for k, word in enumerate(argv) if ENTRY_WORD.search(show(word))), len(argv))
        self.through_flags = tuple(dict.fromkeys((*saved[1], *(u for k, needs in depends.items()
                                                               if k > entry and k >= start for u in needs))))
        # a value a sourced file not read may have changed decides no branch's flags but the words it gave: each
        # such word of the string is one the commands read from it depend on
        self.through_sourced = dict(saved[2])
        for k, needs in depends.items():
            sourced = tuple(u for u in needs if u.sourced)
            if sourced and k >= start and k < len(words):
                # a string (eval "…", bash -c "…") is one word: only its own words that hold such a value
                held = self.command_taint
                for token in words[k].split():
                    if held and token not in held:
                        continue
                    self.through_sourced[token] = tuple(dict.fromkeys((*self.through_sourced.get(token, ()),
                                                                       *sourced)))
        try:
            yield
        finally:
            self.through, self.through_flags, self.through_sourced = saved

    def new_shell(self, node: Any, text: str, what: str, line_offset: int | None = None) -> None:
        """A script another bash runs (`bash -c`, a job file, a here-document given to sbatch): it starts without the
        outer script's `set -e`."""
        saved = self.errexit, self.nounset, self.loops, self.functions, self.sources
        # it starts where the outer one is; its `cd` is its own
        place = self.cwd, self.cwd_why, self.where, list(self.pushed)
        self.errexit, self.nounset, self.loops, self.functions, self.sources = False, False, 0, 0, 0
        try:
            self.nested(node, text, what, line_offset=line_offset)
        finally:
            self.errexit, self.nounset, self.loops, self.functions, self.sources = saved
            self.cwd, self.cwd_why, self.where, self.pushed = place

    def nested(self, node: Any, text: str, what: str, line_offset: int | None = None) -> None:
        """eval STRING, bash -c STRING, a here-document's script: read here (eval and -c on the outer line). An
        unknown part of it (a marker) is read as a variable that holds it, so that it stays one unknown word, with
        what it needs."""
        if not text.replace(MARK, "").strip():
            self.skip(node, f"{what}: the command string is not known")
            return
        holders: list[str] = []

        def hold(match: re.Match[str]) -> str:
            holder = f"__launch_unknown_{len(holders)}"
            holders.append(holder)
            self.shell.scalars[holder] = match.group(0)
            needs = self.shell.uncertain.get(match.group(1), ())
            if needs:
                self.shell.uncertain[holder] = needs
            return "${" + holder + "}"

        text = UNRESOLVED.sub(hold, text).replace(MARK, "")
        self.deeper()
        try:
            if line_offset is None:
                self.run_source(text, line_offset=0, fixed_line=self.line(node))
            else:
                self.run_source(text, line_offset=line_offset)
        finally:
            self.depth -= 1
            for holder in holders:
                self.shell.scalars.pop(holder, None)
                self.shell.uncertain.pop(holder, None)

    def call(self, argv: list[str]) -> None:
        body, src, offset = self.shell.functions[argv[0]]
        saved_positional = self.positional
        saved = (self.src, self.line_offset)
        self.positional = argv[1:]
        self.set_positional(self.positional)
        self.src, self.line_offset = src, offset
        self.locals.append({})
        self.deeper()
        self.functions += 1
        loops, self.loops = self.loops, 0  # bash: a loop of the caller is not the function's to break
        definition = body.parent
        try:
            # `f() { …; } > $LOG`: the definition's redirection is made at each call, and may be refused
            if definition is None or definition.type != "function_definition" or not self.refused_redirect(
                    definition, [c for c in definition.children if c.type == "file_redirect"], ()):
                self.statement(body)
        except _Return:
            pass
        finally:
            self.functions -= 1
            self.loops = loops
            self.depth -= 1
            self.src, self.line_offset = saved
            for name, (scalar, array) in self.locals.pop().items():
                self.refs.pop(name, None)  # a local name reference (and attribute) ends with its function
                self.attributes.pop(name, None)
                self.shell.scalars.pop(name, None)
                self.shell.arrays.pop(name, None)
                if scalar is not None:
                    self.shell.scalars[name] = scalar
                if array is not None:
                    self.shell.arrays[name] = array
            self.positional = saved_positional
            self.set_positional(saved_positional or [])
            if saved_positional is None:
                self.shell.scalars.pop("#", None)

    def set_positional(self, values: list[str]) -> None:
        for key in [k for k in self.shell.scalars if k.isdigit() and k != "0"]:
            del self.shell.scalars[key]
        self.shell.scalars.update({str(n): v for n, v in enumerate(values, start=1)})
        self.shell.scalars["#"] = str(len(values))

    # -- arithmetic -------------------------------------------------------------------------------------------
    def arith_statement(self, node: Any) -> None:
        self.status = None
        try:
            value = self.arith_node(node)
            self.status = value != 0  # `((i++))` with i=0 fails
        except _Unknown:
            for name in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:[-+*/%]?=(?!=)|\+\+|--)", self.text(node)):
                self.shell.scalars[name] = _unknown(name)

    def arith_text(self, text: str) -> int:
        """Arithmetic written in the script (`${A[$i+1]}`, `$[ … ]`): its expansions are made first, as bash does."""
        if not re.search(r"[$`\"'\\]", text):
            return self.arith_value(text)
        self.deeper()
        saved = self.src
        try:
            self.src = ("$((" + text + "))").encode("utf-8", "surrogateescape")
            tree = _parser().parse(self.src)
            node = tree.root_node
            while node.named_children and node.type != "arithmetic_expansion":
                node = node.named_children[0]
            if node.type != "arithmetic_expansion" or node.start_byte != 0 or node.end_byte != len(self.src):
                raise _Unknown(text)
            return self.arith_node(node)
        finally:
            self.src = saved
            self.depth -= 1

    def arith_value(self, text: str) -> int:
        """Arithmetic on text already expanded (a `let` word, a `declare -i` value, a variable's value)."""
        plain = text.strip(" \t\n")
        if re.fullmatch(r"[1-9][0-9]{0,17}|0", plain):
            return int(plain)
        self.deeper()
        try:
            return arithmetic.evaluate(text, _Numbers(self))
        except (arithmetic.Refused, arithmetic.TooDeep) as refused:  # bash's error: the value is none to carry
            raise _Unknown(str(refused)) from None
        except ShellSyntaxError:
            if self.steps > MAX_STEPS:
                raise
            raise _Unknown("too deep") from None
        finally:
            self.depth -= 1

    def arith_node(self, node: Any) -> int:
        """`$((…))`, `$[…]`, `((…))` or one expression of a C-style `for`: its text with each expansion replaced by
        its value (`$A*2` with A="2+3" is 2+3*2, as bash), then evaluated."""
        start, end = node.start_byte, node.end_byte
        if len(node.children) >= 2 and node.children[0].type in ("$((", "((", "$[") and \
                node.children[-1].type in ("))", "]"):
            start, end = node.children[0].end_byte, node.children[-1].start_byte
        out: list[str] = []
        at = start

        def literal(until: int) -> str:
            text = self.src[at:until].decode("utf-8", "surrogateescape").replace("\\\n", "")
            if re.search(r"['`\\]", text):  # bash refuses a quote or an escape left in arithmetic
                raise _Unknown(text)
            return text.replace('"', "")

        def walk(child: Any) -> None:
            nonlocal at
            if child.end_byte <= at or child.start_byte >= end:
                return
            if child.type in ("simple_expansion", "expansion", "command_substitution", "arithmetic_expansion") \
                    and child.start_byte >= start:
                out.append(literal(child.start_byte))
                value = self.joined(child)
                if unresolved_names(value):
                    raise _Unknown(value)
                out.append(value)
                at = child.end_byte
                return
            for grandchild in child.children:
                walk(grandchild)

        self.step()
        for child in node.children:
            walk(child)
        out.append(literal(end))
        return self.arith_value("".join(out))

    # -- words ------------------------------------------------------------------------------------------------
    def parts(self, node: Any, quoted: bool = False) -> list[tuple[str, str | list[str], bool]]:
        """A word as (kind, value, quoted) pieces: "lit" text, "val" a string, "list" one field per element."""
        self.step()
        kind = node.type
        if kind in ("word", "number", "extglob_pattern", "regex", "special_variable_name", "variable_name",
                    "test_operator", "brace_expression"):
            return [("lit", _unescape_unquoted(self.text(node)), quoted)]
        if kind == "raw_string":  # 'a b'; inside "${X:-'a b'}" the quotes are text, as bash keeps them
            return [("lit", self.text(node) if self.single_quotes_kept else self.text(node)[1:-1], True)]
        if kind == "ansi_c_string":
            decoded = _escaped(self.text(node)[2:-1], "dollar")
            if decoded is None:
                return [("val", _unknown(self.text(node)), True)]
            return [("lit", decoded[0], True)]
        if kind in ("string", "translated_string"):
            out: list[tuple[str, str | list[str], bool]] = []
            start = node.start_byte + (2 if kind == "translated_string" else 1)
            at = start
            for child in node.named_children:
                if child.type in EXPANSIONS:
                    out.append(("lit", _unescape_double(self.src[at:self.start(child)].decode("utf-8", "replace")),
                                True))
                    out += self.parts(child, quoted=True)
                    at = child.end_byte
            end = max(at, node.end_byte - 1)
            out.append(("lit", _unescape_double(self.src[at:end].decode("utf-8", "replace")), True))
            return out
        if kind == "concatenation":
            out = []
            at = node.start_byte
            for child in node.children:
                if self.start(child) > at:
                    out.append(("lit", _unescape_unquoted(self.src[at:self.start(child)].decode("utf-8", "replace")),
                                quoted))
                out += self.parts(child, quoted) if child.is_named else [("lit", self.text(child), quoted)]
                at = child.end_byte
            return out
        if kind == "simple_expansion":
            name_node = next((c for c in node.named_children), None)
            name = self.text(name_node) if name_node is not None else self.text(node).strip()[1:]
            return [self.variable(name, quoted)]
        if kind == "expansion":
            return [self.expansion(node, quoted)]
        if kind == "arithmetic_expansion":
            try:
                return [("val", str(self.arith_node(node)), quoted)]
            except _Unknown:
                return [("val", _unknown(self.text(node)), quoted)]
        if kind == "command_substitution":
            return [("val", self.substitute(node), quoted)]
        if kind == "process_substitution":
            return [("val", _unknown(self.text(node)), quoted)]
        return [("lit", self.text(node), quoted)]

    def starred(self, items: list[str], quoted: bool, positional: bool = False) -> tuple[str, str | list[str], bool]:
        """"$*", "${A[*]}": the words joined by IFS's first character (a here-document's $* by blanks); unquoted,
        the words (split as $@ is), joined alike where nothing splits (`X=$*`)."""
        if positional and self.in_heredoc:
            return ("val", " ".join(items), quoted)
        return ("val", self.star_join(items), quoted) if quoted else ("star", list(items), quoted)

    def star_join(self, items: list[str]) -> str:
        """The words of $* joined as bash joins them: by IFS's first character, none where IFS is empty, a blank
        where it is unset."""
        ifs = self.shell.scalars.get("IFS")
        if ifs is not None and unresolved_names(ifs) and len(items) > 1:
            return _unknown("IFS")  # the caller's IFS: what joins them is not known
        return (" " if ifs is None else ifs[:1]).join(items)

    def flat(self, kind: str, value: str | list[str]) -> str:
        """A piece of a word where nothing splits it (an assignment, a test's operand, a pattern)."""
        if isinstance(value, list):
            return self.star_join(value) if kind == "star" else " ".join(value)
        return value

    def variable(self, name: str, quoted: bool) -> tuple[str, str | list[str], bool]:
        self.touch(name)
        if name in ("@", "*", "#") and self.positional is None:
            self.without_arguments()
        if name in ("@", "*"):
            if self.positional is None:
                return ("list", [], quoted) if name == "@" else ("val", "", quoted)
            if name == "@":
                return ("list", list(self.positional), quoted)
            return self.starred(self.positional, quoted, positional=True)
        if name == "#" and self.positional is None:
            return ("val", "0", quoted)
        name = self.resolve(name)
        value = self.shell.lookup(name)
        if value is None:
            value = self.unset(name)
            if value == "":
                self.unbound(name)
        return ("val", value, quoted)

    def caller_variables(self, test: str) -> tuple[str, ...]:
        """The variables a test reads that the script never sets, where nothing else (a file, a command's output)
        decides it: the caller's environment."""
        if CALLER_ONLY_UNSURE.search(test):
            return ()
        names = dict.fromkeys(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", test))
        assigned = self.script_names
        return tuple(n for n in names if n not in assigned)[:8]

    @property
    def script_names(self) -> set[str]:
        """The names the script assigns anywhere; scanned once, when an unset variable is first read."""
        while self.pending_names:
            tree, src = self.pending_names.pop()
            names, fixed = _assigned_names(tree.root_node, src)
            self.names_seen |= names
            self.names_fixed |= fixed
        return self.names_seen

    def unset(self, name: str) -> str:
        """An unset variable: empty when the script itself sets it somewhere (it owns the name; a path not taken
        left it unset, as bash would), else unknown (the caller's environment may set it). A positional parameter
        past $# is empty once the arguments are known (`launch import train.sh /exp` has no $2). After a sourced file
        that was not read, unknown: that file may set it."""
        if name.isdigit() and name != "0" and self.positional is not None:
            return ""
        if name == "IFS":  # bash sets it at start (never from the environment); `unset IFS` leaves it empty
            return "" if self.ifs_unset else DEFAULT_IFS
        if self.unread_sources and not name.isdigit():
            return _unknown(name)  # a sourced file that was not read may set it
        return "" if name in self.script_names else _unknown(name)

    def without_arguments(self) -> None:
        """$#, $@ and $* of a script read without arguments are bash's: 0 and nothing (say so once)."""
        if not self.noted_arguments:
            self.noted_arguments = True
            self.reading.skipped.append((self.current_line, "read as `bash SCRIPT` without arguments ($# is 0); "
                                         "give the script's arguments after its name to read it with them"))

    def each_element(self, node: Any, quoted: bool, items: list[str], as_list: bool
                     ) -> tuple[str, str | list[str], bool]:
        """The expansion's operation (${A[@]/#/--}, ${@%.bin}) applied to each of `items`: a list for [@] and
        "$@", the results joined for [*] and "$*"."""
        results = []
        for item in items:
            self.element = item
            try:
                results.append(self.expansion(node, quoted)[1])
            finally:
                self.element = None
        flat = [r if isinstance(r, str) else " ".join(r) for r in results]
        return ("list", flat, quoted) if as_list else self.starred(flat, quoted)

    def expansion(self, node: Any, quoted: bool) -> tuple[str, str | list[str], bool]:
        """${…}: the name part is read from the text, operands (defaults, patterns) from the tree."""
        begin = self.start(node)
        inner = self.src[begin + 2:node.end_byte - 1].decode("utf-8", "replace")
        match = re.match(r"(#|!)?([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(\[([^\]]*)\])?", inner)
        if not match:
            return ("val", _unknown(inner), quoted)
        prefix, name, subscript, index = match.group(1), match.group(2), match.group(3), match.group(4)
        rest = inner[match.end():]
        if name in self.refs:
            if prefix == "!" and not subscript and not rest:  # ${!REF}: the name it refers to
                return ("val", self.refs[name] or _unknown("!" + name), quoted)
            name = self.resolve(name)
        if subscript and self.associative(name):
            return self.associative_expansion(prefix, name, index, rest, inner, quoted)
        if name in ("@", "*") and not subscript and self.element is None:
            positional = self.positional_expansion(node, prefix, name, rest, quoted)
            if positional is not None:
                return positional
        if prefix == "#" and not rest and name != "#" or (prefix == "#" and name == "#" and not rest and False):
            if subscript and index in ("@", "*"):
                if self.shell.lookup(name) is None and self.unset(name) or \
                        _uncounted(self.shell.arrays.get(name, []), name) is not None:
                    # how many: the caller, a file not read or a branch not decided says (the array's own unknown
                    # marker stands for words not known, however many)
                    return ("val", _unknown("#" + name), quoted)
                return ("val", str(len(self.shell.arrays.get(name, [])) if name in self.shell.arrays
                                   else int(name in self.shell.scalars)), quoted)
            value = self.lookup_value(name, index)
            if index is None and value == "" and self.shell.lookup(name) is None:
                self.unbound(name)
            return ("val", str(len(value)) if not unresolved_names(value) else _unknown("#" + name), quoted)
        if prefix == "!" and not subscript and rest in ("*", "@"):  # ${!NCCL_*}: names the environment may add to
            return ("val", _unknown(inner), quoted)
        if prefix == "!" and not subscript:  # ${!REF}, ${!REF+x}, ${!REF:-d}: the variable REF names
            target = self.lookup_value(name, None)
            if unresolved_names(target) or not NAME.fullmatch(target):
                return ("val", _unknown("!" + name), quoted)
            name = target
        if prefix == "!" and subscript:  # ${!A[@]}: indices
            if _uncounted(self.shell.arrays.get(name, []), name) is not None:
                return ("val", _unknown("!" + name), quoted)
            indices = [str(i) for i in range(len(self.shell.arrays.get(name, [])))]
            return ("list", indices, quoted) if index == "@" else self.starred(indices, quoted)
        if subscript and index in ("@", "*") and not rest:
            self.touch(name)
            if name in self.shell.arrays:
                elements = list(self.shell.arrays[name])
            elif name in self.shell.scalars:
                elements = [self.shell.scalars[name]]
            else:  # unset: empty, or unknown where the caller or a sourced file not read may set it
                value = self.unset(name)
                elements = [value] if value else []
            return ("list", elements, quoted) if index == "@" else self.starred(elements, quoted)
        if subscript and index in ("@", "*") and name in self.shell.arrays and re.match(r":(?![-=+?])", rest):
            # ${A[@]:1:2}: elements, not characters
            spec = self.operand(node, begin + 2 + len((inner[:match.end()] + ":").encode("utf-8", "surrogateescape")))
            numbers = spec.split(":")
            elements = self.shell.arrays[name]
            try:
                offset = self.arith_value(numbers[0])
                length = self.arith_value(numbers[1]) if len(numbers) > 1 else None
            except _Unknown:
                return ("val", _unknown(inner), quoted)
            if length is not None and length < 0:  # bash: "substring expression < 0", the command does not run
                return ("val", _unknown(inner), quoted)
            first = offset if offset >= 0 else max(0, len(elements) + offset)
            chosen = elements[first:] if length is None else elements[first:first + length]
            return ("list", list(chosen), quoted) if index == "@" else self.starred(list(chosen), quoted)
        if subscript and index in ("@", "*") and self.element is None and name in self.shell.arrays \
                and re.match(r"(##|#|%%|%|//|/#|/%|/|\^\^|\^|,,|,)", rest):
            # "${ARGS[@]/#/--}", ${FILES[@]%.bin}: the operation applies to each element
            return self.each_element(node, quoted, self.shell.arrays[name], index == "@")
        value = self.lookup_value(name, index)
        is_set = self.shell.lookup(name) is not None or (name in ("@", "*", "#") and self.positional is not None)
        if not is_set and index is None and value == "" and not re.match(r":?[-=+?]", rest):
            self.unbound(name)  # ${X}, ${X%a}, not ${X:-d}
        if not rest:
            return ("val", value, quoted)
        op_match = re.match(r":[-=+?]|[-=+?]|##|#|%%|%|//|/#|/%|/|\^\^|\^|,,|,|:|@", rest)
        if not op_match:
            return ("val", _unknown(inner), quoted)
        op = op_match.group(0)
        operand_start = begin + 2 + len((inner[:match.end()] + op).encode("utf-8", "surrogateescape"))
        known = not unresolved_names(value)
        if op in (":-", "-", ":=", "=", ":+", "+", ":?", "?"):
            empty = not is_set or (op.startswith(":") and known and value == "")
            if not is_set and self.unread_sources and not name.isdigit() and name not in ("@", "*", "#"):
                return ("val", _unknown(name), quoted)  # a sourced file not read may set it: not the default
            if op[-1] in "-=":
                if not empty:
                    return ("val", value, quoted)
                word = self.default_word(node, operand_start, quoted)
                if op[-1] == "=" and not name.isdigit():
                    self.shell.scalars[name] = word
                    return ("val", word, quoted)  # the variable's new value, split as any unquoted value is
                return ("val", word, quoted or self.quoted_operand(node, operand_start))
            if op[-1] == "+":
                if empty:  # the word is not used: nothing, not an empty word
                    return ("val", "", quoted)
                return ("val", self.default_word(node, operand_start, quoted),
                        quoted or self.quoted_operand(node, operand_start))
            return ("val", value if not empty else _unknown(name), quoted)
        if not known:
            return ("val", _unknown(name), quoted)
        if op in ("#", "##", "%", "%%"):
            pattern = self.operand(node, operand_start, pattern=True)
            if unresolved_names(pattern) or len(value) > 10_000:
                return ("val", _unknown(name), quoted)
            try:
                return ("val", _trim(value, pattern, op), quoted)
            except _Unknown:
                return ("val", _unknown(name), quoted)
        if op in ("/", "//", "/#", "/%"):
            # the separator is found in the text: the grammar cuts `${P//\//_}` at the escaped slash
            slash = _separator(self.src, operand_start, node.end_byte - 1)
            end = slash if slash is not None else node.end_byte - 1
            pattern = self.operand(node, operand_start, pattern=True, end=end)
            replacement = self.operand(node, slash + 1) if slash is not None else ""
            if unresolved_names(pattern) or unresolved_names(replacement) or len(value) > 10_000:
                return ("val", _unknown(name), quoted)
            if slash is not None and b"&" in self.src[slash + 1:node.end_byte]:
                return ("val", _unknown(name), quoted)  # bash 5.2 puts the match at `&`, bash 5.1 an `&`
            try:
                return ("val", _replace(value, pattern, replacement, op), quoted)
            except _Unknown:
                return ("val", _unknown(name), quoted)
        if op in ("^^", ",,", "^", ","):
            pattern = rest[len(op):]  # ${X^^[ab]}: only the characters the pattern matches
            if unresolved_names(pattern):
                return ("val", _unknown(name), quoted)
            try:
                changed = [_cased(c, upper=op[0] == "^") if (k == 0 or len(op) == 2) and (
                    not pattern or _glob_match(c, pattern)) else c for k, c in enumerate(value)]
            except _Unknown:
                return ("val", _unknown(name), quoted)
            return ("val", _unknown(name) if None in changed else "".join(c or "" for c in changed), quoted)
        if op == "@" and rest in ("@U", "@u", "@L", "@Q"):  # bash 5's transformations
            transformed = {"@U": _cased(value, upper=True), "@u": _cased(value[:1], upper=True),
                           "@L": _cased(value, upper=False),
                           "@Q": "'" + value.replace("'", "'\\''") + "'" if value.isascii() and value.isprintable()
                           else None}[rest]
            if transformed is not None and rest == "@u":
                transformed += value[1:]
            return ("val", _unknown(name) if transformed is None else transformed, quoted)
        if op == ":":
            spec = self.operand(node, operand_start)
            numbers = spec.split(":")
            try:
                offset = self.arith_value(numbers[0])
                length = self.arith_value(numbers[1]) if len(numbers) > 1 else None
            except _Unknown:
                return ("val", _unknown(name), quoted)
            start = offset if offset >= 0 else max(0, len(value) + offset)
            if length is None:
                return ("val", value[start:], quoted)
            stop = start + length if length >= 0 else len(value) + length
            return ("val", value[start:stop], quoted)
        return ("val", _unknown(inner), quoted)

    def positional_expansion(self, node: Any, prefix: str | None, name: str, rest: str,
                             quoted: bool) -> tuple[str, str | list[str], bool] | None:
        """"${@}", "${@:2}", "${@:1:2}", ${#@}, "${@/#/--}" of the script's arguments as bash expands them (None:
        a form read elsewhere)."""
        if prefix == "#" and not rest:
            return self.variable("#", quoted)
        if prefix:
            return None
        if not rest:
            return self.variable(name, quoted)
        if self.positional is None:
            self.without_arguments()
        words = list(self.positional or [])
        begin = self.start(node)
        if re.match(r":(?![-=+?])", rest):  # ${@:offset[:length]}: $0 is offset 0
            spec = self.operand(node, begin + 2 + len((name + ":").encode()))
            numbers = spec.split(":")
            try:
                offset = self.arith_value(numbers[0])
                length = self.arith_value(numbers[1]) if len(numbers) > 1 else None
            except _Unknown:
                return ("val", _unknown(name), quoted)
            if self.positional is None and offset >= 1:
                chosen: list[str] = []
            else:
                everything = [self.lookup_value("0", None), *words]  # $0, the script's name
                first = offset if offset >= 0 else max(0, len(everything) + offset)
                if length is not None and length < 0:
                    return ("val", _unknown(name), quoted)
                chosen = everything[first:] if length is None else everything[first:first + length]
            return ("list", chosen, quoted) if name == "@" else self.starred(chosen, quoted, positional=True)
        if re.match(r"(##|#|%%|%|//|/#|/%|/|\^\^|\^|,,|,)", rest):  # each argument, as each element of an array
            return self.each_element(node, quoted, words, name == "@")
        return None

    def associative_expansion(self, prefix: str | None, name: str, index: str, rest: str, inner: str,
                              quoted: bool) -> tuple[str, str | list[str], bool]:
        """${P[key]}, ${P[@]}, ${!P[@]}, ${#P[@]} of an associative array (its keys in the order they were set);
        anything else of it (an operator after the subscript) is unknown."""
        self.touch(name)
        entries = self.associative_entries(name)
        if unresolved_names(self.shell.scalars[name + "[]"]) or rest:
            return ("val", _unknown(inner), quoted)
        if index in ("@", "*"):
            if prefix == "#":
                return ("val", str(len(entries)), quoted)
            keys = _hash_order(list(entries))
            if keys is None:
                return ("val", _unknown(inner), quoted)
            items = keys if prefix == "!" else [entries[k] for k in keys]
            return ("list", items, quoted) if index == "@" else self.starred(items, quoted)
        key = self.word_text(index.encode("utf-8", "surrogateescape"))
        if prefix or unresolved_names(key):
            return ("val", _unknown(inner), quoted)
        value = entries.get(key, "")
        return ("val", str(len(value)) if prefix == "#" else value, quoted)

    def lookup_value(self, name: str, index: str | None) -> str:
        self.touch(name)
        if self.element is not None:  # one element of ${A[@]…} (see expansion)
            return self.element
        if name in ("#", "@", "*") and self.positional is None:
            self.without_arguments()
            return "0" if name == "#" else ""
        if index in ("@", "*"):
            if name not in self.shell.arrays and name not in self.shell.scalars:
                return self.unset(name)
            words = self.shell.arrays.get(name, [self.shell.scalars.get(name, "")])
            return self.star_join(words) if index == "*" else " ".join(words)
        if index is not None and name in self.shell.arrays:
            array = self.shell.arrays[name]
            if _unknown(name) in array:  # words not known stand at some places: which one is at k is not known
                return _unknown(name)
            try:
                k = self.arith_text(index)
            except _Unknown:
                return _unknown(name)
            first = _uncounted(array, name)
            if first is not None and (k < 0 or k >= first):  # after words not known, however many: not known
                return _unknown(name)
            if -len(array) <= k < len(array):
                return array[k]
            return ""
        value = self.shell.lookup(name)
        return value if value is not None else self.unset(name)

    def operand(self, node: Any, start: int, pattern: bool = False, end: int | None = None) -> str:
        """The word after an operator inside ${…} (up to `end`), expanded, not split."""
        stop = node.end_byte - 1 if end is None else end
        out, at = [], start

        def expanded(child: Any) -> str:
            pieces = []
            for kind, value, quoted_part in self.parts(child, quoted=not pattern):
                text = self.flat(kind, value)
                pieces.append(_glob_escape(text) if pattern and quoted_part and child.type in (
                    "string", "raw_string") else text)
            return "".join(pieces)

        def raw(begin: int, until: int) -> str:
            text = self.src[begin:until]
            # an expansion the grammar left in a pattern node (`${P/$R/y}`), or quotes (`${X/'b'/-}`: b, quoted)
            if b"$" in text or b"`" in text or b"'" in text or b'"' in text:
                return str(self.reparsed(text, expanded, functools.partial(_unknown, text.decode("utf-8", "replace"))))
            return text.decode("utf-8", "replace")

        # `$[ … ]` (what _arith_in_expansions writes for `$(( … ))`): the grammar cuts it where it holds `${A}`; each
        # is arithmetic, read whole
        spans = _arith_spans(self.src, start, stop) if b"$[" in self.src[start:stop] else []
        children = [(self.start(child), child.end_byte, child) for child in node.children
                    if child.start_byte >= start and child.end_byte <= stop and child.is_named
                    and child.type in EXPANSIONS]
        # of a span and a child, the outer one is read (`"$[ … ]"` is a string's; `${A}` in `$[ … ]` the span's)
        spans = [(a, b) for a, b in spans if not any(c <= a and b <= d and (c, d) != (a, b) for c, d, _ in children)]
        items = sorted([(a, b, None) for a, b in spans] + [
            item for item in children if not any(a <= item[0] and item[1] <= b for a, b in spans)],
            key=lambda item: item[0])
        for begin, until, child in items:
            out.append(raw(at, begin))
            if child is not None:
                out.append(expanded(child))
            else:
                inner = self.src[begin + 2:until - 1].decode("utf-8", "replace")
                try:
                    out.append(str(self.arith_text(inner)))
                except _Unknown:
                    out.append(_unknown("$[" + inner + "]"))
            at = until
        out.append(raw(at, stop) if stop > at else "")
        text = "".join(out)
        return _glob_unescape(text) if pattern else _unescape_unquoted(text)

    def default_word(self, node: Any, start: int, quoted: bool) -> str:
        """The word of ${X:-word}, ${X:+word}, ${X:=word}: inside double quotes its single quotes are text."""
        saved, self.single_quotes_kept = self.single_quotes_kept, quoted
        try:
            return self.operand(node, start)
        finally:
            self.single_quotes_kept = saved

    def quoted_operand(self, node: Any, start: int) -> bool:
        """${A:-"d e"}: an operand that is one quoted string is not split, even where the expansion is unquoted."""
        text = self.src[start:node.end_byte - 1]
        return len(text) >= 2 and text[:1] == text[-1:] and text[:1] in (b'"', b"'") \
            and text[1:-1].count(text[:1]) == 0

    def pattern(self, node: Any) -> str:
        """A glob pattern as written: quoted parts match literally."""
        out = []
        for kind, value, quoted in self.parts(node):
            text = self.flat(kind, value)
            out.append(_glob_escape(text) if quoted else text)
        return "".join(out)

    def substitute(self, node: Any) -> str:
        """$(…) and `…`: the output of functions and echo/printf the script defines, else unknown."""
        saved, self.single_quotes_kept = self.single_quotes_kept, False
        try:
            return self.substituted(node)
        finally:
            self.single_quotes_kept = saved

    def substituted(self, node: Any) -> str:
        body = [c for c in node.named_children]
        # the grammar may start the node at the `\` of a continued line before a backtick: not part of it
        text = re.sub(r"^(?:\s|\\\n)+", "", self.text(node)).strip()
        if text.startswith("$((") and text.endswith("))"):
            # `${TP:-$((N*2))}`: the grammar reads arithmetic inside ${…} as a subshell's command; bash, as arithmetic
            try:
                return str(self.arith_text(text[3:-2]))
            except _Unknown:
                return _unknown(text)
        label = text[2:-1] if text.startswith("$(") else text[1:-1]
        backtick = bool(node.children) and node.children[0].type == "`"
        # inside `…` bash first removes the backslash of \` \$ \\ (`echo "a \`echo b\`"` runs `echo b` inside),
        # which the grammar does not: the text so unescaped is read as the script it is
        escaped = backtick and re.search(r"\\[`$\\]", label) is not None
        if backtick and (not body or escaped) and label.strip():
            return self.substitute_text(node, re.sub(r"\\([`$\\])", r"\1", label) if escaped else label, label)
        # `$(< FILE)`: bash reads FILE in place of a command (as `$(cat FILE)`); read as no command it printed nothing
        if READS_A_FILE.match(label):
            return self.substitute_text(node, "cat " + label.strip()[1:], label)
        capture = _Capture()
        saved_capture, self.capture = self.capture, capture
        saved_cwd = self.capture_cwd  # a `cd` inside $(…) is that subshell's only
        saved_shell = self.shell.copy()
        saved_commands = len(self.reading.commands)
        try:
            self.block(body)
        except (_Exit, _Return, _Break):
            pass
        finally:
            self.capture, self.capture_cwd = saved_capture, saved_cwd
            self.restore(saved_shell)
            del self.reading.commands[saved_commands:]
        if capture.known:
            printed = "".join(capture.out).rstrip("\n")
            # `$(cat $PBS_NODEFILE)` of a large job: its lines are host names not known here, none is a value
            if len(printed) <= MAX_VALUE_CHARS or not pbs.line_structured(printed, unresolved_names):
                return printed
        return _unknown("$(" + label.strip() + ")")

    def substitute_text(self, node: Any, text: str, label: str) -> str:
        """What `text`, read as a script of its own, prints, as $(…) gives it; unknown where that is not known."""
        saved_capture, saved_cwd = self.capture, self.capture_cwd
        self.capture = _Capture()
        saved_shell = self.shell.copy()
        try:
            self.nested(node, text, "`…`")
        except _Exit:
            pass
        finally:
            captured, self.capture, self.capture_cwd = self.capture, saved_capture, saved_cwd
            self.restore(saved_shell)
        printed = "".join(captured.out).rstrip("\n")
        if captured.known and (len(printed) <= MAX_VALUE_CHARS or not pbs.line_structured(printed,
                                                                                          unresolved_names)):
            return printed
        return _unknown("$(" + label.strip() + ")")

    def fields(self, node: Any) -> list[str]:
        """Bash word expansion: quoted parts stay together; unquoted expansions split on whitespace."""
        out: list[str] = []
        current: str | None = None

        def add(text: str) -> None:
            nonlocal current
            current = (current or "") + text

        pieces = self.parts(node)
        for kind, value, quoted in pieces:
            if kind == "lit":
                assert isinstance(value, str)
                add(value)
                continue
            ifs = self.shell.scalars.get("IFS", DEFAULT_IFS)
            if isinstance(value, list) and not quoted and ifs and ifs != DEFAULT_IFS and MARK not in ifs:
                # unquoted $@, $*, ${A[@]} under the script's own IFS: bash joins the words by IFS's first character
                # and splits that (IFS=- and A=(x "" z) give x, an empty word, z)
                value = ifs[0].join(value)
            if isinstance(value, list):
                items = value if quoted else [w for v in value for w in _split(v, ifs)[0]]
                for k, item in enumerate(items):
                    if k:
                        out.append(current or "")
                        current = ""
                    add(item)
                continue
            if quoted:
                add(value)
                continue
            words, leading, trailing = _split(value, ifs)
            if not words:
                continue
            if leading and current is not None:
                out.append(current)
                current = None
            for k, word in enumerate(words):
                if k:
                    out.append(current or "")
                    current = ""
                add(word)
            if trailing:
                out.append(current or "")
                current = None
        if current is not None:
            out.append(current)
        if any(kind == "list" and quoted and not value for kind, value, quoted in pieces) and out == [""] and \
                all(kind == "list" or (kind == "lit" and not value) for kind, value, _ in pieces):
            out = []  # "${EMPTY[@]}" gives no field
        _bound(out, self.line(node))
        return out

    def joined(self, node: Any) -> str:
        """A word expanded without splitting (an assignment's value, a test's operand)."""
        text = ""
        for kind, value, _quoted in self.parts(node):
            text += self.flat(kind, value)
        if len(text) > MAX_VALUE_CHARS:
            raise ShellSyntaxError(f"line {self.line(node)}: a value grows beyond {MAX_VALUE_CHARS:,} characters")
        return text


# -- helpers --------------------------------------------------------------------------------------------------

def _hash_order(keys: list[str]) -> list[str] | None:
    """The order bash 5 lists an associative array's keys in (`${!P[@]}`): its hash table's, 1,024 buckets by the
    key's FNV-1 hash, each bucket newest first (`keys` in the order they were set); None past the size where bash
    grows the table."""
    if len(keys) >= 2 * ASSOC_BUCKETS:
        return None
    buckets: dict[int, list[str]] = {}
    for key in keys:
        hashed = 2166136261
        for byte in key.encode("utf-8", "surrogateescape"):
            hashed = (hashed * 16777619) & 0xFFFFFFFF ^ byte
        buckets.setdefault(hashed & (ASSOC_BUCKETS - 1), []).insert(0, key)
    return [key for bucket in sorted(buckets) for key in buckets[bucket]]


def _assigned_names(root: Any, src: bytes) -> tuple[set[str], set[str]]:
    """The names a script assigns anywhere (NAME=…, for NAME in, read NAME, declare NAME), walked without recursion;
    and of them those it sets to a value of its own somewhere, whatever the caller's environment holds (`X=4`, `for X
    in`, `read X`, `X="$X --flag"`; not `X=${X:-4}` or `X=${X=4}`, which the caller's X decides)."""
    names: set[str] = set()
    fixed: set[str] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type in ("variable_assignment", "for_statement"):
            target = node.child_by_field_name("name") or node.child_by_field_name("variable")
            if target is not None and target.type == "subscript":
                target = target.child_by_field_name("name")
            if target is not None:
                name = src[target.start_byte:target.end_byte].decode("utf-8", "replace")
                value = node.child_by_field_name("value")
                told = src[value.start_byte:value.end_byte].decode("utf-8", "replace") if value is not None else ""
                if node.type == "variable_assignment" and _copies_itself(name, told):
                    continue  # `X=$X`, `export X="${X}"`: the caller's value, nothing of the script's own
                names.add(name)
                if node.type == "for_statement" or not re.search(rf"\$\{{{re.escape(name)}:?[-=]", told):
                    fixed.add(name)
        elif node.type == "command":
            words = [src[c.start_byte:c.end_byte].decode("utf-8", "replace") for c in node.named_children]
            if words and words[0] in ("read", "mapfile", "readarray"):
                read = {w for w in words[1:] if NAME.fullmatch(w)}
                names.update(read)
                fixed.update(read)
        stack.extend(node.named_children)
    return names, fixed


def _copies_itself(name: str, value: str) -> bool:
    """Whether an assignment's value is only the variable itself (`$X`, `${X}`, quoted or not)."""
    return value.strip('"') in (f"${name}", f"${{{name}}}")


@lru_cache(maxsize=16)
def _first_error(node: Any) -> Any:
    """The innermost, first part of `node` the grammar could not read (where to look for the construct)."""
    for child in node.children:
        if child.type == "ERROR" or child.is_missing or child.has_error:
            return _first_error(child)
    return node


def _bash_accepts(source: bytes) -> bool:
    """Whether bash itself parses the text (`bash -n`: read, never run), where bash is installed; without it, the
    grammar's verdict stands."""
    import shutil
    import subprocess

    bash = shutil.which("bash")
    if bash is None:
        return False
    try:
        done = subprocess.run([bash, "--norc", "--noprofile", "-n"], input=source, capture_output=True, timeout=10,
                              check=False, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


class _Numbers:
    """The shell's variables as bash's arithmetic reads and sets them (arithmetic.Variables)."""

    def __init__(self, reader: _Reader):
        self.reader = reader

    def value(self, name: str, index: int | None) -> str:
        reader = self.reader
        reader.touch(name)
        name = reader.resolve(name)
        if index is not None and name in reader.shell.arrays:
            value = reader.lookup_value(name, str(index))
        elif index not in (None, 0) and name in reader.shell.scalars:
            value = ""  # X[1] of a scalar: unset
        else:
            found = reader.shell.lookup(name)
            value = found if found is not None else reader.unset(name)
            if found is None and value == "":
                reader.unbound(name)
        if unresolved_names(value):
            raise _Unknown(name)
        return value

    def assign(self, name: str, index: int | None, number: int) -> None:
        shell = self.reader.shell
        name = self.reader.resolve(name)
        if name in shell.arrays:
            array = list(shell.arrays[name])
            k = 0 if index is None else index + len(array) if index < 0 else index
            if _unknown(name) in array or not 0 <= k <= len(array):
                raise _Unknown(name)  # a hole in the array: not held here
            array[k:k + 1] = [str(number)]
            shell.arrays[name] = array
        elif index in (None, 0):
            shell.scalars[name] = str(number)
        else:
            raise _Unknown(name)

    def evaluate(self, text: str) -> int:
        return self.reader.arith_value(text)

    def step(self) -> None:
        self.reader.step()


def _runner(block: Callable[[list[Any]], None], body: list[Any]) -> Callable[[], None]:
    return lambda: block(body)


def _bound(values: list[str], line: int) -> None:
    if sum(map(len, values)) > MAX_VALUE_CHARS:
        raise ShellSyntaxError(f"line {line}: a value grows beyond {MAX_VALUE_CHARS:,} characters")


def _changed(base: Shell, outcomes: list[Shell]) -> set[str]:
    """The names some outcome holds differently from `base` (set operations on the tables, not a walk by name)."""
    out: set[str] = set()
    for shell in outcomes:
        out |= {name for name, _ in shell.scalars.items() ^ base.scalars.items()}
        out |= {name for name, _ in shell.exports.items() ^ base.exports.items()}
        out |= {name for name in shell.arrays.keys() ^ base.arrays.keys()}
        out |= {name for name in shell.arrays.keys() & base.arrays.keys()
                if shell.arrays[name] is not base.arrays[name]}
    return out


def _uncounted(array: Sequence[str], name: str) -> int | None:
    """Where the elements of an array stop being counted: at its own marker (words not known, however many) or at
    an element that is wholly a value not known, which bash may have split into any number of words
    (`GPUS=(${CUDA_VISIBLE_DEVICES//,/ })`), but a host of a node file or host list, one word (`nodes=( $(scontrol
    show hostnames) )` in a job whose #SBATCH lines give its nodes); None: every element is one."""
    return next((k for k, element in enumerate(array) if element == _unknown(name) or (
        UNRESOLVED.fullmatch(element) and not all(map(pbs.is_host, unresolved_names(element))))), None)


def _merged(taint: Taint) -> Taint:
    """The groups of a taint kept few: those of the same sources as one, then those of the same words as one, each
    naming at most MAX_TAINT_SOURCES sources (a loop that sources a file not read on every pass adds no group)."""
    by_items: dict[tuple[Undecided, ...], frozenset[str]] = {}
    for group, items in taint:
        by_items[items] = by_items[items] | group if items in by_items else group
    by_words: dict[frozenset[str], tuple[Undecided, ...]] = {}
    for items, group in by_items.items():
        by_words[group] = tuple(dict.fromkeys((*by_words.get(group, ()), *items)))[:MAX_TAINT_SOURCES]
    return [(group, items) for group, items in by_words.items()]


def _state_of(shell: Shell, name: str) -> tuple[Any, ...]:
    return (shell.scalars.get(name), tuple(shell.arrays[name]) if name in shell.arrays else None,
            shell.exports.get(name))


def _words_of(state: tuple[Any, ...]) -> tuple[str, ...]:
    """The words a variable gives a command: an array's elements, a string split on blanks (unset: none); past a
    few hundred words or 10,000 characters, one unknown word (kept only to decide that a branch holds no model)."""
    scalar, array, _ = state
    if array is not None:
        return tuple(array) if len(array) <= 300 and sum(map(len, array)) <= 10_000 else (MARK,)
    return tuple((scalar or "").split()) if len(scalar or "") <= 10_000 else (MARK,)


def _set_state(shell: Shell, name: str, state: tuple[Any, ...]) -> None:
    scalar, array, export = state
    for table in (shell.scalars, shell.arrays, shell.exports):
        table.pop(name, None)
    if scalar is not None:
        shell.scalars[name] = scalar
    if array is not None:
        shell.arrays[name] = list(array)
    if export is not None:
        shell.exports[name] = export


def _only_appended(before: tuple[Any, ...], states: list[tuple[Any, ...]]) -> bool:
    """Every possible value is the one before with something added at its end (or unchanged); a string may have it
    added before it instead (`CMD="nsys profile … $CMD"`: a wrapper around the command)."""
    scalar, array, _ = before
    if array is not None:
        return all(s[1] is not None and s[1][:len(array)] == array for s in states)
    if scalar is not None and scalar != _unknown_like(scalar):
        added = [a for s in states if (a := _added_to(scalar, s[0])) is not None]
        # what a branch adds to a string is words of a command (EXTRA="$EXTRA --wandb-project x"), not a value
        # set where it was empty (NODE_RANK="" … NODE_RANK=$i: a rank, decided at run time)
        return len(added) == len(states) and (scalar != "" or all(
            not a.strip() or a.split()[0].startswith("-") for a in added))
    return False


def _added_flags_named(before: tuple[Any, ...], states: list[tuple[Any, ...]], flags: set[str]) -> bool:
    """Each flag the branches add after what the variable held is written in the construct's text (so that the
    construct's flags say what it may add), and each word not known is the value of such a flag
    (`--wandb-exp-name $EXP-$SLURM_JOB_ID`), not words that may be flags themselves (`--$key`, `$EXTRA`)."""
    scalar, array, _ = before
    for state in states:
        added = list(state[1][len(array):]) if array is not None else (_added_to(scalar or "", state[0]) or "").split()
        after_flag = False
        for word in added:
            if word.startswith("--"):
                if MARK in word or word.partition("=")[0] not in flags:
                    return False
                after_flag = "=" not in word
                continue
            if MARK in word and not after_flag:
                return False
            after_flag = False
    return True


def _added_to(before: str, value: str | None) -> str | None:
    """What a branch put at the end of a string, or before it where a blank parts the two (a word of its own, such
    as a wrapper's); None when the string was changed otherwise."""
    if value is None:
        return None
    if value.startswith(before):
        return value[len(before):]
    if before and value.endswith(before) and value[:-len(before)][-1:].isspace():
        return value[:-len(before)]
    return None


def _cased(text: str, upper: bool) -> str | None:
    """bash's case change, where every locale agrees (ASCII letters); None where a letter outside ASCII would change,
    which bash does by the locale (`ß` stays `ß` in bash, `SS` in Python)."""
    if any(not c.isascii() and (c.upper() != c or c.lower() != c) for c in text):
        return None
    return text.upper() if upper else text.lower()


def _unknown_like(value: str) -> str:
    """The value itself when it is one unknown and nothing else (then nothing of it is known to keep)."""
    return value if UNRESOLVED.fullmatch(value) else MARK




class _TestError(Exception):
    """test(1) refuses an operand (`[ false -ne 1 ]`: integer expression expected): the test's status is 2, false."""


def _decimal(text: str) -> int:
    """An operand of test(1)'s -eq … -ge: a decimal integer, blanks around it and a sign allowed (leading zeros are
    decimal); anything else is the test's error."""
    found = re.fullmatch(r"[ \t\n]*([-+]?[0-9]+)[ \t\n]*", text)
    if found is None:
        raise _TestError(text)
    value = int(found.group(1))
    if not arithmetic.LOW <= value < -arithmetic.LOW:  # bash: "integer expression expected"
        raise _TestError(text)
    return value


def _pathname_pattern(written: str) -> tuple[bool, bool]:
    """How bash's pathname expansion meets a word as written: (a `*`, `?` or `[…]` outside quotes and expansions,
    an expansion outside quotes, whose value is matched against files too). A rough scan: quotes, backslashes and
    `$(…)`, `${…}`, `` `…` `` are skipped whole."""
    literal = expansion = False
    k, n = 0, len(written)
    while k < n:
        c = written[k]
        if c == "\\":
            k += 2
            continue
        if c == "'":
            k = written.find("'", k + 1) + 1 or n
            continue
        if c == '"':
            m = k + 1
            while m < n and written[m] != '"':
                m += 2 if written[m] == "\\" else 1
            k = m + 1
            continue
        if c == "$" and k + 1 < n and written[k + 1] in "({":
            expansion, depth, m = True, 0, k + 1
            while m < n:
                depth += written[m] in "({"
                depth -= written[m] in ")}"
                m += 1
                if depth == 0:
                    break
            k = m
            continue
        if c == "$" and k + 1 < n and (written[k + 1].isalnum() or written[k + 1] in "_@*#?"):
            expansion = True
            k += 2
            while k < n and (written[k].isalnum() or written[k] == "_"):
                k += 1
            continue
        if c == "`":
            expansion = True
            k = written.find("`", k + 1) + 1 or n
            continue
        if c in "*?" or c == "[" and "]" in written[k + 2:]:
            literal = True
        k += 1
    return literal, expansion


GLOB_CHARACTER = re.compile(r"[*?]|\[.+\]")
# A pattern meant for files names a directory or an extension (`data/*_doc`, `ckpt/iter_???`, `*.json`); one with
# neither, such as Megatron's `--moe-layer-freq [0]*3+[1]*58`, matches no file name a run directory holds, and bash
# then passes it as written: it is kept so
FILE_LIKE = re.compile(r"[/.~]")


def _unescape_unquoted(text: str) -> str:
    return re.sub(r"\\(\n|.)", lambda m: "" if m.group(1) == "\n" else m.group(1), text, flags=re.S)


def _unescape_double(text: str) -> str:
    return re.sub(r"\\([\"\\$`\n])", lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _unescape_heredoc(text: str) -> str:
    return re.sub(r"\\([\\$`\n])", lambda m: "" if m.group(1) == "\n" else m.group(1), text)


_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
                   "v": "\v", "\\": "\\"}
# what each reader of backslash escapes takes beyond the common ones: $'…' (bash's ansicstr), `echo -e`, printf's
# format; an octal escape is \nnn in $'…' and printf, \0nnn in echo
_ESCAPE_EXTRAS = {"dollar": {"'": "'", '"': '"', "?": "?"}, "echo": {}, "printf": {'"': '"', "?": "?", "'": "'"}}
_NUMERIC_ESCAPES = r"x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{1,4})|U([0-9A-Fa-f]{1,8})"
_ESCAPES = {"echo": re.compile(r"\\(?:0([0-7]{0,3})|" + _NUMERIC_ESCAPES + r"|(.))", re.S),
            "other": re.compile(r"\\(?:([0-7]{1,3})|" + _NUMERIC_ESCAPES + r"|(.))", re.S)}


def _escaped(text: str, mode: str) -> tuple[str, bool] | None:
    """`text` with bash's backslash escapes of `mode` ("dollar", "echo", "printf") replaced, and whether `echo -e`'s
    `\\c` ended the output there; None where a character that is not ASCII (\\xff, \\u00e9, which bash writes
    by the locale) or a NUL would be written: not known here."""
    out: list[str] = []
    at = 0
    pattern = _ESCAPES["echo" if mode == "echo" else "other"]
    while True:
        found = pattern.search(text, at)
        if found is None:
            break
        out.append(text[at:found.start()])
        at = found.end()
        octal, hexa, short, wide, other = found.groups()
        if octal is not None or hexa or short or wide:
            code = int(octal or "0", 8) if octal is not None else int(hexa or short or wide, 16)
            if not 0 < code < 0x80:
                return None
            out.append("%%" if mode == "printf" and code == 0x25 else chr(code))
        elif other == "c" and mode == "echo":  # echo writes nothing more
            return "".join(out), True
        elif other == "c" and mode == "dollar" and at < len(text):  # \cX: the control character
            control = text[at]
            at += 1
            out.append(chr(0x7F if control == "?" else ord(control.upper()) & 0x1F) if control.isascii() else "")
            if not control.isascii():
                return None
        else:
            known = _SIMPLE_ESCAPES.get(other, _ESCAPE_EXTRAS[mode].get(other))
            out.append(known if known is not None else found.group(0))
    out.append(text[at:])
    return "".join(out), False


MAX_BRACE_WORDS = 1000
SEQUENCE = re.compile(r"(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?|([A-Za-z])\.\.([A-Za-z])(?:\.\.(-?\d+))?")


def _brace_expand(word: str) -> list[str] | None:
    """Bash's brace expansion of one word as written (`a{1..3}`, `{x,y}z`, nested, `{0..7..2}`); quoted text and
    `${…}` are not brace expressions; None past MAX_BRACE_WORDS words or 100 braces (each is scanned for its end)."""
    if word.count("{") > 100:
        return None
    i = _brace_open(word, 0)
    while i is not None:
        j, commas = _brace_close(word, i)
        if j is not None:
            body = word[i + 1:j]
            items: list[str] | None = None
            sequence = SEQUENCE.fullmatch(body)
            if sequence:
                items = _sequence(sequence)
                if items is None:
                    return None  # a sequence bash expands that is not expanded here: not known
            elif commas:
                items = []
                for part in [word[a + 1:b] for a, b in zip([i, *commas], [*commas, j])]:
                    expanded = _brace_expand(part)
                    if expanded is None:
                        return None
                    items += expanded
            if items is not None:
                rest = _brace_expand(word[j + 1:])
                if rest is None or len(items) * len(rest) > MAX_BRACE_WORDS:
                    return None
                return [word[:i] + item + tail for item in items for tail in rest]
        i = _brace_open(word, i + 1)
    return [word]


def _unquoted(word: str, start: int, skip_parameters: bool) -> Iterator[int]:
    """The places from `start` of word's characters outside quotes and not escaped; with `skip_parameters`, each
    `${…}` is passed over whole."""
    quote, k = "", start
    while k < len(word):
        ch = word[k]
        if quote:
            quote = "" if ch == quote else quote
        elif ch == "\\":
            k += 1
        elif ch in "'\"":
            quote = ch
        elif skip_parameters and ch == "$" and word[k + 1:k + 2] == "{":
            depth, k = 1, k + 2
            while k < len(word) and depth:
                depth += {"{": 1, "}": -1}.get(word[k], 0)
                k += 1
            continue
        else:
            yield k
        k += 1


def _brace_open(word: str, start: int) -> int | None:
    return next((k for k in _unquoted(word, start, skip_parameters=True)
                 if word[k] == "{" and (k == 0 or word[k - 1] != "$")), None)


def _brace_close(word: str, start: int) -> tuple[int | None, list[int]]:
    """The `}` that closes the `{` at `start`, and the top-level commas between them."""
    depth = 0
    commas: list[int] = []
    for k in _unquoted(word, start + 1, skip_parameters=False):
        ch = word[k]
        if ch == "{":
            depth += 1
        elif ch == "}":
            if not depth:
                return k, commas
            depth -= 1
        elif ch == "," and not depth:
            commas.append(k)
    return None, []


def _sequence(match: re.Match[str]) -> list[str] | None:
    if match.group(1) is not None:
        first, last, step = int(match.group(1)), int(match.group(2)), abs(int(match.group(3) or 1)) or 1
        if abs(last - first) // step >= MAX_BRACE_WORDS:
            return None
        width = max(len(match.group(1)), len(match.group(2))) if match.group(1).lstrip("-").startswith("0") \
            or match.group(2).lstrip("-").startswith("0") else 0
        numbers = range(first, last + (1 if last >= first else -1), step if last >= first else -step)
        return [str(n).zfill(width) if width else str(n) for n in numbers]  # the width counts the sign: -01
    first, last, step = ord(match.group(4)), ord(match.group(5)), abs(int(match.group(6) or 1)) or 1
    letters = [chr(c) for c in range(first, last + (1 if last >= first else -1), step if last >= first else -step)]
    # `{Z..b}` passes [ \ ] ^ _ `, which bash then quotes and splits as text: not read here
    return letters if all(c.isalpha() for c in letters) else None


def _separator(src: bytes, start: int, stop: int) -> int | None:
    """Where the `/` between pattern and replacement of ${X/pattern/replacement} is: not escaped, quoted, inside a
    bracket expression or a nested expansion."""
    i, depth, quote, bracket = start, 0, 0, False
    while i < stop:
        ch = src[i]
        if quote:
            if ch == quote:
                quote = 0
            elif ch == 0x5C and quote == 0x22:  # \ inside "…"
                i += 1
        elif ch == 0x5C:  # \x
            i += 1
        elif ch in (0x22, 0x27):
            quote = ch
        elif ch == 0x24 and src[i + 1:i + 2] in (b"{", b"("):
            depth += 1
            i += 1
        elif ch in (0x7D, 0x29) and depth:
            depth -= 1
        elif ch == 0x5B and not depth:
            bracket = True
        elif ch == 0x5D and bracket:
            bracket = False
        elif ch == 0x2F and not depth and not bracket:
            return i
        i += 1
    return None


def _glob_unescape(pattern: str) -> str:
    r"""`\/`, `\*` … of an unquoted pattern match the character itself (bracket expressions are left as they are)."""
    return re.sub(r"\[[^\]]*\]|\\(.)", lambda m: m.group(0) if m.group(1) is None else _glob_escape(m.group(1)),
                  pattern)


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"[\1]", text) if MARK not in text else text


def _tame_regex(pattern: str) -> bool:
    """A short pattern with few repetitions and none applied to a group: matched in bounded time."""
    return len(pattern) <= 200 and len(re.findall(r"[*+?{]", pattern)) <= 4 and not re.search(r"\)[*+?{]", pattern)


EXTGLOB = re.compile(r"(?<!\\)[?*+@!]\(")


# POSIX character classes as bash matches them in the C locale (`[[:digit:]]`), as the body of a Python regex set
POSIX_CLASSES = {"alpha": "a-zA-Z", "digit": "0-9", "alnum": "a-zA-Z0-9", "upper": "A-Z", "lower": "a-z",
                 "space": r" \t\n\r\f\v", "blank": r" \t", "xdigit": "0-9A-Fa-f", "punct": r"!-/:-@\[-`{-~",
                 "cntrl": r"\x00-\x1f\x7f", "print": " -~", "graph": "!-~", "word": "a-zA-Z0-9_"}
POSIX_CLASS = re.compile(r"\[:([a-z]+):\]")
HELD_CLASS = 0xE000  # a private-use character that stands for a class while fnmatch translates the glob


def _caret_negates(pattern: str) -> str:
    """`[^a]` negates in bash's globs as `[!a]` does (fnmatch read the ^ as one of the set's characters)."""
    out, k = [], 0
    while k < len(pattern):
        if pattern[k] == "\\":
            out.append(pattern[k:k + 2])
            k += 2
            continue
        if pattern[k] != "[":
            out.append(pattern[k])
            k += 1
            continue
        end = k + 1 + (pattern[k + 1:k + 2] in ("!", "^"))
        end += pattern[end:end + 1] == "]"  # a `]` first in the set is one of its characters
        while end < len(pattern) and pattern[end] != "]":
            end = pattern.find(":]", end) + 2 if pattern.startswith("[:", end) and ":]" in pattern[end:] else end + 1
        if end >= len(pattern):  # no set: a `[` that stands for itself
            out.append(pattern[k])
            k += 1
            continue
        body = pattern[k + 1:end]
        out.append("[" + ("!" + body[1:] if body.startswith("^") else body) + "]")
        k = end + 1
    return "".join(out)


def _glob_translate(pattern: str) -> str:
    """fnmatch's regex of a glob, with the POSIX classes fnmatch does not know (`[[:digit:]]*`: it read
    `[[:digit:]` as a set and the rest as text, so `7x` did not match)."""
    names: list[str] = []

    def hold(match: re.Match[str]) -> str:
        if match.group(1) not in POSIX_CLASSES:
            raise _Unknown(pattern)
        names.append(match.group(1))
        return chr(HELD_CLASS + len(names) - 1)

    regex = fnmatch.translate(POSIX_CLASS.sub(hold, _caret_negates(pattern)))
    for k, name in enumerate(names):
        regex = regex.replace(chr(HELD_CLASS + k), POSIX_CLASSES[name])
    return regex


def _ere(pattern: str) -> str:
    """A POSIX extended regular expression (bash's `=~`) as Python's re reads it: its bracket expressions' classes
    (`[[:digit:]]`, which Python read as a set of `[:dgit` and a `]`), and a `[` or `\\` in one taken literally."""
    out, k = [], 0
    while k < len(pattern):
        if pattern[k] == "\\" and k + 1 < len(pattern):
            out.append(pattern[k:k + 2])
            k += 2
            continue
        if pattern[k] != "[":
            out.append(pattern[k])
            k += 1
            continue
        j, body = k + 1, []
        if pattern.startswith("^", j):
            body.append("^")
            j += 1
        if pattern.startswith("]", j):  # a `]` first in the set is one of its characters
            body.append(r"\]")
            j += 1
        while j < len(pattern) and pattern[j] != "]":
            if pattern.startswith("[:", j):
                end = pattern.find(":]", j + 2)
                if end < 0 or pattern[j + 2:end] not in POSIX_CLASSES:
                    raise _Unknown(pattern)
                body.append(POSIX_CLASSES[pattern[j + 2:end]])
                j = end + 2
                continue
            if pattern.startswith(("[.", "[="), j):  # collating elements and equivalence classes: not read here
                raise _Unknown(pattern)
            body.append("\\" + pattern[j] if pattern[j] in "[\\&~|" else pattern[j])
            j += 1
        if j >= len(pattern):
            raise _Unknown(pattern)  # no `]` ends the set
        out.append("[" + "".join(body) + "]")
        k = j + 1
    return "".join(out)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    if EXTGLOB.search(pattern):
        raise _Unknown(pattern)  # +([0-9])b, @(a|b): extglob, not matched here (fnmatch read it as text: no match)
    if pattern.count("*") > 8:
        raise _Unknown(pattern)  # each star is a .* the matcher may try at every position
    return re.compile(_glob_translate(pattern), re.S)


def _classes_known(value: str, pattern: str) -> None:
    """`[[:alpha:]]` of a letter outside ASCII is the locale's (bash's UTF-8 `Ä` is alpha; the C locale's not)."""
    if not value.isascii() and POSIX_CLASS.search(pattern):
        raise _Unknown(pattern)


def _glob_match(value: str, pattern: str) -> bool:
    if pattern.startswith("\x01"):
        pattern = pattern[1:]
    _classes_known(value, pattern)
    return bool(_glob_regex(pattern).match(value))


def _trim(value: str, pattern: str, op: str) -> str:
    _classes_known(value, pattern)
    regex = _glob_regex(pattern)
    lengths = range(len(value) + 1)
    if op in ("#", "##"):
        for k in (lengths if op == "#" else reversed(lengths)):
            if regex.match(value[:k]):
                return value[k:]
        return value
    for k in (reversed(lengths) if op == "%" else lengths):
        if regex.match(value[k:]):
            return value[:k]
    return value


def _replace(value: str, pattern: str, replacement: str, op: str) -> str:
    _classes_known(value, pattern)
    if not pattern:  # ${X/#/--}: an empty pattern anchored at the start (or the end) matches there
        return replacement + value if op == "/#" else value + replacement if op == "/%" else value
    _glob_regex(pattern)  # refuses a pattern too costly to match
    body = _glob_translate(pattern)[4:-3]  # (?s:…)\Z → …
    try:
        regex = re.compile(("^" if op == "/#" else "") + "(?:" + body + ")" + ("$" if op == "/%" else ""), re.S)
    except re.error:
        return value
    if regex.fullmatch(""):  # `*`: the whole value, once (Python's sub also took the empty end: `ZZ`)
        return replacement
    return regex.sub(lambda _: replacement, value, count=0 if op == "//" else 1)


def _echo(argv: list[str]) -> str | None:
    words = argv[1:]
    newline, escapes = True, False
    while words and re.fullmatch(r"-[neE]+", words[0]):
        newline = newline and "n" not in words[0]
        escapes = "e" in words[0]
        words = words[1:]
    text = " ".join(words)
    if escapes:
        decoded = _escaped(text, "echo")
        if decoded is None:
            return None
        text, stopped = decoded
        newline = newline and not stopped
    return text + ("\n" if newline else "")


def _path_command(argv: list[str], cwd: str | None) -> str | None:
    """What dirname, basename, realpath / readlink -f of an absolute path, `cd DIR` and `pwd` give inside $(…), from
    the words alone (no file is looked at: a symbolic link is not followed); None when it is not known."""
    program, args = base_name(argv[0]), [a for a in argv[1:] if a != "--"]
    if any(unresolved_names(a) for a in args):
        return None
    if program == "dirname" and len(args) == 1:
        stripped = args[0].rstrip("/") or "/"
        head = stripped.rpartition("/")[0] if "/" in stripped else "."
        return (head.rstrip("/") or "/") if stripped != "/" else "/"
    if program == "basename" and len(args) in (1, 2) and not args[0].startswith("-"):
        base = (args[0].rstrip("/") or "/").rpartition("/")[2] or "/"
        return base[:-len(args[1])] if len(args) == 2 and args[1] and base.endswith(args[1]) and base != args[1] \
            else base
    options = [a for a in args if a.startswith("-")]
    operands = [a for a in args if not a.startswith("-")]
    if (program == "realpath" or program == "readlink" and set("".join(options)) & set("fem")) \
            and len(operands) == 1:
        target = operands[0] if operands[0].startswith("/") else (cwd + "/" + operands[0] if cwd else None)
        return os.path.normpath(target) if target else None
    if program == "cd" and len(operands) == 1 and not options:
        target = operands[0] if operands[0].startswith("/") else (cwd + "/" + operands[0] if cwd else None)
        return os.path.normpath(target) if target else ""
    if program == "pwd" and not operands and cwd:
        return cwd
    if (program == "which" and not options or program == "command" and options == ["-v"]) and len(operands) == 1 \
            and re.fullmatch(r"[\w.+-]+", operands[0]):
        # $(which mpiexec): a directory found where it runs, then the program's own name (what names the launcher)
        return _unknown(f"$(which {operands[0]})") + "/" + operands[0]
    return None


# one conversion of printf's format: %[flags][width][.precision]letter (a `*` width is not read)
PRINTF_SPEC = re.compile(r"%([-+ 0#]*)([0-9]*)((?:\.[0-9]*)?)([a-zA-Z%])")
PRINTF_FLOAT = re.compile(r"[ \t]*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
PRINTF_INT = re.compile(r"[ \t]*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


def _printf(argv: list[str]) -> str | None:
    """What printf(1) prints for known words, or None where it is not known (a conversion it does not read, a
    number that is not one)."""
    if argv[1:2] == ["--"]:
        argv = argv[:1] + argv[2:]
    if len(argv) < 2 or argv[1] == "-v":
        return None
    decoded = _escaped(argv[1], "printf")
    if decoded is None:
        return None
    form, args = decoded[0], argv[2:]
    specs = [m for m in PRINTF_SPEC.finditer(form) if m.group(4) != "%"]
    if "%" in PRINTF_SPEC.sub("", form) or any(m.group(4) not in "sdiuxXofFeEgGc" for m in specs) or \
            any(len(m.group(2)) > 4 or len(m.group(3)) > 5 for m in specs):  # a width of 10^9: not printed here
        return None
    slots = len(specs)
    out = []
    while True:  # the format is reused until the arguments are consumed, as printf(1)
        chunk, args = args[:slots], args[slots:]
        filled = _fill(form, iter(chunk))
        if filled is None:
            return None
        out.append(filled)
        if not args or not slots:
            break
    return "".join(out)


def _float_printed(spec: str, value: str) -> str | None:
    """printf's %f %e %g of a decimal number, where it does not depend on the machine: bash converts the number to a
    long double (80 bits on x86, 128 on ARM), so where the decimal is not exactly a double, a result that a double one
    unit either side would print otherwise (`%.2f` of 1.115, `%.20f` of 0.1) is not known."""
    x = float(value)
    printed = spec % x
    if decimal.Decimal(value.strip()) == decimal.Decimal(x):
        return printed
    if math.isinf(x) or spec % math.nextafter(x, -math.inf) != printed or spec % math.nextafter(x, math.inf) != printed:
        return None
    return printed


def _fill(form: str, values: Any) -> str | None:
    failed = False

    def one(match: re.Match[str]) -> str:
        nonlocal failed
        flags, width, precision, letter = match.groups()
        if letter == "%":
            return "%"
        value = next(values, None)
        spec = "%" + flags + width + precision
        if letter in "sc":
            text = value or ""
            if not text.isascii() and (width or precision or letter == "c"):
                failed = True  # printf counts bytes, Python characters
                return ""
            return (spec + "s") % (text[:1] if letter == "c" else text)
        if letter in "dixXou":
            number = PRINTF_INT.fullmatch(value) if value else PRINTF_INT.fullmatch("0")
            if number is None:
                failed = True  # bash prints an error and 0: not a value a script means
                return ""
            sign, digits = number.groups()
            n = int(digits, 16 if digits[:2].lower() == "0x" else 8 if digits.startswith("0") else 10)
            if n >= 2 ** 63 or sign == "-" and letter in "xXou" or letter == "o" and "#" in flags:
                failed = True  # bash's 64-bit wrap: not read; C's %#o is 010, Python's 0o10
                return ""
            return (spec + ("d" if letter in "iu" else letter)) % (-n if sign == "-" else n)
        if value and not PRINTF_FLOAT.fullmatch(value):
            failed = True
            return ""
        printed = _float_printed(spec + letter, value or "0")
        failed = failed or printed is None
        return printed or ""

    text = PRINTF_SPEC.sub(one, form)
    return None if failed else text


# an unquoted `$NAME` (single-quoted text and escapes are passed over): written `${NAME}` before a word is parsed again
# a regex as the grammar keeps it whole that holds an expansion or a quote: bash expands and unquotes it first
EXPANDS_OR_QUOTES = re.compile(r"\$[{(A-Za-z0-9_@*#?!]|[\"']")
BRACE_NAMES = re.compile(rb"'[^']*'|\\.|\$([A-Za-z_][A-Za-z0-9_]*)")


def _braced(match: re.Match[bytes]) -> bytes:
    return b"${" + match.group(1) + b"}" if match.group(1) else match.group(0)


# `$NAME` right after other text of the same word (`$A/$B/x`, `x$A.$B`), where the grammar cuts the word
INNER_NAME = re.compile(rb"'[^'\n]*'|\\.|(?<=[^\s'\"=(\[{$\\|&;<>`])\$([A-Za-z_][A-Za-z0-9_]*)")


# `# a note` inside backticks, the idiom for a comment on a continued command line (`--lr 3e-4 \` then
# `` `# peak LR` \ ``): a command substitution of nothing, which expands to nothing; the grammar cannot read it
BACKTICK_NOTE = re.compile(rb"'[^'\n]*'|\\.|(`[ \t]*#[^`\n]*`)")


def _backtick_note(match: re.Match[bytes]) -> bytes:
    return b"" if match.group(1) else match.group(0)


# A word that is only escaped blanks (`--foo \  # note`, `--lr 1e-4 \ ` then a newline): bash passes " " as a word,
# the grammar drops it; written `' '` it keeps it
LONE_BLANK = re.compile(rb"'[^'\n]*'|\"(?:[^\"\\]|\\.)*\"|(?<![^\s(])(?<!\\[ \t])((?:\\[ \t])+)(?=[\s);&|]|$)|\\.")


def _heredoc_bodies(src: bytes) -> list[tuple[int, int]]:
    """(start, end) of each here-document's body: text there is the document's, not words."""
    return [(start, end) for _, start, end, _ in heredocs.scan(src)]


def _lone_blanks(src: bytes) -> bytes:
    bodies = _heredoc_bodies(src) if b"<<" in src else []
    starts = [a for a, _ in bodies]

    def one(match: re.Match[bytes]) -> bytes:
        k = bisect.bisect_right(starts, match.start()) - 1  # the body that starts last before it (sorted, apart)
        if not match.group(1) or k >= 0 and match.start() < bodies[k][1]:
            return match.group(0)
        return b"'" + match.group(1).replace(b"\\", b"") + b"'"
    return LONE_BLANK.sub(one, src)


# a subscript holding a blank (`P[a b]=1`, `${M[$k b]}`): bash reads it whole, the grammar cannot; quoted it can (the
# same key: quotes are removed, and an arithmetic subscript evaluates the same text)
BLANK_SUBSCRIPT = re.compile(rb"(?<=[A-Za-z0-9_])\[([^\]\[\n\"'` \t]{0,200}[ \t][^\]\[\n\"'`]{0,200})\](?=\+?=|\})")


def _quoted_subscript(match: re.Match[bytes]) -> bytes:
    return b'["' + match.group(1) + b'"]'


# `=` comparing with a pattern inside [[ ]] (`[[ $X = a?c && … ]]`): the grammar reads the pattern as a regex that
# ends the test; `==` is the same operator to bash, and the grammar reads it on
# (the scan from one `[[` stops at the next: a hostile line of them stays linear)
TEST_BRACKETS = re.compile(rb"\[\[[ \t](?:[^\n\[]|\[(?!\[)){0,2000}?[ \t]\]\]")
SINGLE_EQUALS = re.compile(rb"'[^'\n]*'|\"(?:[^\"\\]|\\.)*\"|\\.|(?<=[ \t])(=)(?=[ \t])")


def _double_equals(match: re.Match[bytes]) -> bytes:
    if re.search(rb"[?*+@!]\(", match.group(0)):
        return match.group(0)  # an extglob pattern (`*.@(a|b)`): the grammar reads it after `=` and not after `==`
    return SINGLE_EQUALS.sub(lambda m: b"==" if m.group(1) else m.group(0), match.group(0))


# `[ "$A" \> "$B" ]` (string order), `[ -n "$A" -a \( … \) ]`, `[ $A \!= 1 ]`: the grammar cannot read an escaped
# operator inside [ ] and loses the whole script around it; the same test written `test "$A" \> "$B"` it reads
# (no `[` inside: the scan from one `[` stops at the next, so a hostile line of them stays linear)
_TEST_WORDS = rb"(?:[^\n\[\]'\"]|'[^'\n\[]{0,200}'|\"[^\"\n\[]{0,200}\"){0,400}?"  # quoted parts bounded
ORDER_TEST = re.compile(rb"(?<![\[\w$\\])\[([ \t]" + _TEST_WORDS + rb"(?<=[ \t])\\[<>()!]=?[ \t]" + _TEST_WORDS
                        + rb"[ \t])\](?![\]\w])")


def _order_test(match: re.Match[bytes]) -> bytes:
    return b"test" + match.group(1)


# `time { …; }`, `time ( … )`, `time if …`: bash's reserved word `time` times the pipeline after it, a compound
# command included; the grammar takes it for a command named time and loses the group's end. Written as blanks (the
# same columns), the group is read as bash runs it.
TIME_BEFORE_COMPOUND = re.compile(rb"(?m)((?:^|[;&|({!])[ \t]*)(time(?:[ \t]+-p)?)"
                                  rb"(?=[ \t]+(?:[{(]|(?:if|for|while|until|case|select)\b))")


def _time_blank(match: re.Match[bytes]) -> bytes:
    return match.group(1) + b" " * len(match.group(2))


# `<<!` … `!` on lines of their own, a here-document given to no command (scripts use it to comment a block out):
# bash runs a command of only redirections, which runs nothing, and the document's text is never read as commands.
# The grammar cannot read a here-document without a command and its recovery took `!` for no end: the lines of the
# document ran as the script's (a launcher commented out in one was carried). Written `: <<!`, the same null command.
HEREDOC_ALONE = re.compile(rb"(?m)^([ \t]*)(?=<<-?[ \t]*(?:'[^'\n]+'|\"[^\"\n]+\"|[^\s;&|<>()'\"]+)"
                           rb"[ \t]*(?:#[^\n]*)?$)")


def _heredoc_alone(src: bytes) -> bytes:
    """The text with each here-document that opens a line without a command given the null command `:` (the same
    columns after it move by two; the lines stay), unless the `<<` lies in another here-document's text."""
    bodies = [(start, end) for _, start, end, _ in heredocs.scan(src)]
    out, at = [], 0
    for match in HEREDOC_ALONE.finditer(src):
        if any(start <= match.start() < end for start, end in bodies):
            continue
        out += [src[at:match.end()], b": "]
        at = match.end()
    return b"".join(out) + src[at:] if out else src


# `${N:-$(( (A + 15) / 16 ))}`: inside ${…} the grammar reads `$((` as `$(` and a subshell, and a parenthesised
# group of the arithmetic then is an error that costs the lines around it; bash reads arithmetic. Written `$[ … ]`
# (bash's older spelling of the same arithmetic) the grammar reads it as one word.
def _inside_expansion(src: bytes, at: int) -> bool:
    """Whether `at` is in the operand of a `${…` opened earlier on its line (looking back at most 2,000 bytes)."""
    opened = src.rfind(b"${", max(0, at - 2000), at)
    return opened >= 0 and not any(c in src[opened + 2:at] for c in (b"\n", b"{", b"}"))


def _arith_in_expansions(src: bytes) -> bytes:
    out, start = [], 0
    for match in re.finditer(rb"\$\(\(", src):
        at = match.start()
        if at < start or not _inside_expansion(src, at):
            continue
        depth, k, end = 0, at + 3, None
        while k < len(src) and k < at + 2000 and src[k:k + 1] not in (b"\n", b"[", b"]", b"'", b'"', b"`"):
            ch = src[k:k + 1]
            if ch == b"(":
                depth += 1
            elif ch == b")":
                if depth == 0:
                    end = k if src[k + 1:k + 2] == b")" else None
                    break
                depth -= 1
            k += 1
        if end is not None:
            out += [src[start:at], b"$[", src[at + 3:end], b"]"]
            start = end + 2
    return b"".join(out) + src[start:] if out else src


def _arith_spans(src: bytes, start: int, stop: int) -> list[tuple[int, int]]:
    """(start, end) of each `$[ … ]` between start and stop, its brackets matched."""
    spans, k = [], src.find(b"$[", start, stop)
    while k >= 0:
        depth, j = 0, k + 2
        while j < stop and not (src[j:j + 1] == b"]" and depth == 0):
            depth += {b"[": 1, b"]": -1}.get(src[j:j + 1], 0)
            j += 1
        if j >= stop:
            break
        spans.append((k, j + 1))
        k = src.find(b"$[", j + 1, stop)
    return spans


def _brace_inner_names(src: bytes) -> bytes:
    """The script's text with each `$NAME` that follows other text of its word written `${NAME}` (the same
    expansion): tree-sitter-bash 0.25 cuts `$A/$B/x` in two words, and a `case $A/$B/x in` is a syntax error to it;
    `${A}/${B}/x` it reads whole; and without the backtick notes (`` `# note` ``) it cannot read; with the other
    shapes above written as the grammar reads them. Line numbers are unchanged."""
    if b"`" in src and b"#" in src:
        src = BACKTICK_NOTE.sub(_backtick_note, src)
    if b"time" in src:
        src = TIME_BEFORE_COMPOUND.sub(_time_blank, src)
    if b"<<" in src:
        src = _heredoc_alone(src)
    if b"${" in src and b"$((" in src:
        src = _arith_in_expansions(src)
    if b"\\ " in src or b"\\\t" in src:
        src = _lone_blanks(src)
    if b"[" in src:
        src = BLANK_SUBSCRIPT.sub(_quoted_subscript, src)
        if re.search(rb"\\[<>()!]", src):
            src = ORDER_TEST.sub(_order_test, src)
        if b"[[" in src:
            src = TEST_BRACKETS.sub(_double_equals, src)
    return INNER_NAME.sub(_braced, src) if b"$" in src else src


# `$(< FILE)` / `$(<FILE)`: a command substitution of only an input redirection, which bash reads as FILE's text
READS_A_FILE = re.compile(r"\s*<(?![<(&])\s*\S")

# Programs that run the command given after their own options (job launchers, containers, process wrappers)
RUNS_A_COMMAND = {"srun", "mpirun", "mpiexec", "orterun", "jsrun", "flux", "aprun", "ibrun", "horovodrun",
                  "singularity", "apptainer", "enroot", "podman", "docker", "env", "numactl", "taskset", "time",
                  "nohup", "stdbuf", "nice", "timeout"}
_MPI_PACKAGED = re.compile(r"(mpirun|mpiexec)[._][\w.]+")  # mpirun.openmpi, mpiexec.hydra, mpiexec_mpt
# the files a script runs as scripts (`bash inner.sh`, `./train.sh`, `sbatch job.slurm`)
SCRIPT_SUFFIX = re.compile(r"\.(sh|bash|sbatch|slurm|job)$")


def written_place(word: str, where: str | None) -> str | None:
    """The key a file the script writes is kept by: its path from the script's own directory (`tp.txt` named where
    the script moved to `sub` is `sub/tp.txt`), or absolute; None where the directory is not known (`where`). A path
    that begins with an unknown part (`$SCRATCH/job.sh`) is kept by its words."""
    if word.startswith(MARK):
        return word
    if word.startswith("/"):
        return os.path.normpath(word)
    return None if where is None else _below(where, word)


def _below(where: str, path: str) -> str | None:
    """`path` from `where`, normalized; None where it climbs out of a directory not known (`cd $REPO; cd ..`)."""
    joined = os.path.normpath(os.path.join(where, path))
    root = where.split("/")[0]
    if where.startswith(MARK) and joined != root and not joined.startswith(root + "/"):
        return None
    return joined


def file_written_as(word: str, written: Mapping[str, object]) -> str | None:
    """The file the script wrote that `word` names from the script's own directory (`./runner.sh` is the `runner.sh`
    it wrote, `a//b.json` is `a/b.json`)."""
    key = written_place(word, ".")
    return key if key is not None and key in written else None


def _script_at(argv: list[str], is_script: Callable[[str], bool]) -> int | None:
    """Where the script file a command runs is in its words (`./job.sh`, `bash -x job.sh`, `sbatch -p gpu job.sbatch`,
    `srun … singularity exec IMG bash runner.sh`, `mpirun -n 4 bash inner.sh`), by `is_script`; None where it runs
    none."""
    program = base_name(argv[0])
    if is_script(argv[0]):
        return 0
    if program in (*SHELLS, "sbatch"):
        i = 1
        while i < len(argv) and argv[i].startswith("-"):  # sbatch -p gpu --time 1:00:00 job.sbatch
            i += 2 if program == "sbatch" and argv[i] in SBATCH_VALUE_OPTIONS else 1
        return i if i < len(argv) and is_script(argv[i]) else None
    if program in RUNS_A_COMMAND or _MPI_PACKAGED.fullmatch(program):  # each task runs it
        return _under_wrappers(argv, is_script)
    return None


def _under_wrappers(argv: list[str], is_script: Callable[[str], bool]) -> int | None:
    """Where a script file is run behind wrappers: `srun … singularity exec IMG bash runner.sh` (after a
    shell and its options) or `srun … ./runner.sh` (the first word that is no option of theirs); None when a word
    before it is a program that only reads it (cat, chmod)."""
    for k, word in enumerate(argv[1:], 1):
        name = base_name(word)
        if name in SHELLS:
            i = k + 1
            while i < len(argv) and argv[i].startswith("-"):
                i += 1
            return i if i < len(argv) and is_script(argv[i]) else None
        if is_script(word):
            return k
        if name in _NOT_RUNNING or re.fullmatch(r"python[0-9.]*|torchrun|deepspeed|accelerate|.*\.py", name):
            return None  # srun cat runner.sh: read, not run; srun python3 … --config written.json: an argument
    return None


def _shell_at(argv: list[str]) -> int:
    """Where the shell word of `… bash -c STRING` is (what comes before it launches it)."""
    return next(k for k, word in enumerate(argv) if base_name(word) in SHELLS)


def _shell_c(argv: list[str]) -> str | None:
    """The command string of `… sh -c STRING` (a launcher such as srun may come first)."""
    for k, word in enumerate(argv[:-1]):
        if base_name(word) in SHELLS:
            rest = argv[k + 1:]
            for m, option in enumerate(rest[:-1]):
                if option == "-c" or (option.startswith("-") and not option.startswith("--") and
                                      option.endswith("c")):
                    return rest[m + 1]
                if not option.startswith("-"):
                    break
    return None


# A word that is itself a command line running a Python entry with flags: `… main.py --num-layers 80`
_PYTHON_COMMAND = re.compile(r"(?:^|\s)\S*\.py(?:\s+\S+)*?\s+--?[A-Za-z]")
# a command line that runs a script file: `sbatch --wrap "bash train.sh 8"`, `ssh node "cd /w && ./run.sh"`
_SCRIPT_COMMAND = re.compile(r"(?:^|[\s;&|])(?:(?:ba|z|da)?sh\s+(?:-\S+\s+)*)?\S*\.(?:sh|bash|sbatch|slurm|job)"
                             r"(?:\s|$)")
# programs that print or store a command line rather than run it
_NOT_RUNNING = ("echo", "printf", "logger", "tee", "cat", "grep", "sed", "awk", "wandb", "git")


def _command_string(argv: list[str]) -> tuple[int, str] | None:
    """(index, text) of the argument that a launcher runs as a command line of its own: `sbatch --wrap "srun python
    pretrain_gpt.py …"`, `ssh node "torchrun … pretrain_gpt.py …"`, `bcprun -p 8 -c 'python main.py …'`, `pdsh -w
    hosts '…'`: a word with blanks that runs a .py file with flags or a script file (`sbatch --wrap "bash train.sh"`),
    given before any word that is itself the entry (then the command runs it directly, and its words are values)."""
    if base_name(argv[0]) in _NOT_RUNNING:
        return None
    for k, word in enumerate(argv[1:], 1):
        if not any(c.isspace() for c in word):
            if word.endswith(".py"):
                return None
            continue
        text = re.sub(r"^--?[A-Za-z][A-Za-z0-9-]*=", "", word)  # --wrap="…"
        if _PYTHON_COMMAND.search(text) or _SCRIPT_COMMAND.search(text):  # a part not known (`ssh node "cd $DIR
            return k, text  # && torchrun …"`) stays one word
    return None


def _terminator(item: Any) -> str:
    """What ends a case item: `;;`, `;&` (fall through to the next body) or `;;&` (test the next patterns)."""
    ends = [c.type for c in item.children if c.type in (";;", ";&", ";;&")]
    return ends[-1] if ends else ";;"


READERS = ("read", "mapfile", "readarray")
# commands whose status is success whatever the machine holds (in `a && b || c`, the branch they choose is known)
SUCCEEDS = {"echo", "printf", "export", "declare", "typeset", "local", "readonly", "set", "shift", "unset", "true",
            ":", "sleep", "wait", "ulimit", "umask", "shopt", "trap", "hash"}


def _read_fields(record: str, ifs: str, names: int, raw: bool) -> list[str]:
    """The fields `read` makes of one record: split on IFS (blanks of IFS run together, and are trimmed at both ends;
    each other IFS character ends one field), a backslash escaping the next character unless -r; with `names`
    names, the last takes the rest of the record as it stands (0: as many as there are, for -a)."""
    chars: list[tuple[str, bool]] = []  # (character, escaped)
    k = 0
    while k < len(record):
        if not raw and record[k] == "\\":
            if k + 1 < len(record):
                chars.append((record[k + 1], True))
            k += 2
            continue
        chars.append((record[k], False))
        k += 1
    blanks = {c for c in ifs if c in " \t\n"}
    others = set(ifs) - blanks

    def blank(at: int) -> bool:
        return at < len(chars) and not chars[at][1] and chars[at][0] in blanks

    while chars and not chars[0][1] and chars[0][0] in blanks:
        chars.pop(0)
    while chars and not chars[-1][1] and chars[-1][0] in blanks:
        chars.pop()
    if not chars:
        return [] if names == 0 else [""]
    fields: list[str] = []
    at = 0
    while at < len(chars):
        if names and len(fields) == names - 1:
            rest = chars[at:]
            if rest and not rest[-1][1] and rest[-1][0] in others and \
                    not any(not e and c in ifs for c, e in rest[:-1]):
                rest = rest[:-1]  # one field and its delimiter: bash drops the delimiter ("1,2," → B=2)
            fields.append("".join(c for c, _ in rest))
            break
        start = at
        while at < len(chars) and (chars[at][1] or chars[at][0] not in ifs):
            at += 1
        fields.append("".join(c for c, _ in chars[start:at]))
        while blank(at):
            at += 1
        if at < len(chars) and not chars[at][1] and chars[at][0] in others:
            at += 1
            while blank(at):
                at += 1
    return fields


def _reader_options(words: list[str], with_value: str, switches: str) -> tuple[dict[str, str], list[str]]:
    """(options, operands) of read/mapfile: `-r -d '' -a ARGS`, grouped `-ra ARGS`; "?" when one is not known."""
    options: dict[str, str] = {}
    k = 0
    while k < len(words) and words[k].startswith("-") and words[k] != "-":
        word = words[k]
        k += 1
        if word == "--":
            break
        for m, letter in enumerate(word[1:], 1):
            if letter in with_value:
                value = word[m + 1:] if m + 1 < len(word) else (words[k] if k < len(words) else "")
                if m + 1 >= len(word):
                    k += 1
                options[letter] = value
                break
            if letter in switches:
                options[letter] = ""
            else:
                options["?"] = letter  # -t TIMEOUT, -n COUNT, -u FD …: not read here
    return options, words[k:]


class _Test:
    """test(1) / [[ ]] over words already expanded; unknown operands make the verdict unknown (_Unknown)."""

    UNARY_FILE = {"-e", "-f", "-d", "-r", "-w", "-x", "-s", "-L", "-h", "-p", "-S", "-b", "-c", "-g", "-u", "-k",
                  "-O", "-G", "-N", "-t", "-a"}
    INT_OPS = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-le": int.__le__, "-gt": int.__gt__,
               "-ge": int.__ge__}

    def __init__(self, words: list[str], double: bool, number: Callable[[str], int]):
        self.words, self.double, self.at = words, double, 0
        self.number = number  # [[ ]]'s operand of -eq …: an arithmetic expression
        self.rematch: list[str] | None = None  # BASH_REMATCH of the last `=~` that matched ([] when one failed)
        self.skipping = False  # reading past an operand whose value the other side of -a/-o, &&/|| makes moot

    def parse(self) -> tuple[bool, bool]:
        if not self.words:
            return False, False
        known = not any(unresolved_names(w) or w.startswith("\x01") for w in self.words)
        try:
            if not self.double and known and len(self.words) <= 4:
                return self.by_count(self.words), False
            value = self.or_()
        except _TestError:  # `[ false -ne 1 ]`: test(1) says "integer expression expected", status 2
            return False, False
        rest = self.at < len(self.words)
        if rest and not self.double and known:  # `[ a b c d e ]`: test(1)'s error (too many arguments), status 2
            return False, False
        return value, rest

    def by_count(self, words: list[str]) -> bool:
        """test(1) of at most four words, as POSIX (and bash) decide it by their number: `[ != x ]` (an empty operand
        split away) is an error, status 2, not a comparison; `[ a b ]` too."""
        n = len(words)
        if n == 1:
            return words[0] != ""
        if n == 2:
            if words[0] == "!":
                return words[1] == ""
            if words[0] in ("-n", "-z"):
                return (words[1] != "") == (words[0] == "-n")
            if words[0] in self.UNARY_FILE or words[0] == "-v":
                raise _Unknown(words[0])  # the file system / environment is not read
            raise _TestError(words[0])  # unary operator expected
        if n == 3:
            if self._binary_op(words[1]):
                return self.binary(*words)
            if words[1] in ("-a", "-o"):  # binary with three arguments: each side's one-argument test
                left, right = words[0] != "", words[2] != ""
                return (left and right) if words[1] == "-a" else (left or right)
            if words[0] == "!":
                return not self.by_count(words[1:])
            if words[0] == "(" and words[2] == ")":
                return words[1] != ""
            raise _TestError(words[1])  # binary operator expected
        if words[0] == "!":
            return not self.by_count(words[1:])
        if words[0] == "(" and words[3] == ")":
            return self.by_count(words[1:3])
        value = self.or_()
        if self.at < n:
            raise _TestError(words[self.at])
        return value

    def moot(self) -> None:
        """Read past the next operand without evaluating it (bash does not need its value)."""
        saved, self.skipping = self.skipping, True
        try:
            self.not_()
        finally:
            self.skipping = saved

    def decided(self, left: Callable[[], bool], settles: bool) -> tuple[bool | None, bool]:
        """The left operand of -a/-o, &&/||: its value, or None where it is not known; and whether it settles the
        whole (false for `and`, true for `or`)."""
        try:
            value = left()
        except _Unknown:
            return None, False
        return value, value == settles

    def peek(self) -> str | None:
        return self.words[self.at] if self.at < len(self.words) else None

    def take(self) -> str:
        word = self.words[self.at]
        self.at += 1
        return word

    def or_(self) -> bool:
        return self.chain(self.and_, ("||", "-o"), settles=True)

    def and_(self) -> bool:
        return self.chain(self.not_, ("&&", "-a"), settles=False)

    def chain(self, operand: Callable[[], bool], ops: tuple[str, ...], settles: bool) -> bool:
        """`A -o B -o …` (settles=True) or `A -a B …` (settles=False): one operand that settles it decides it, whatever
        the others are, known or not (`[ "$N" -ne 1 -a -f "$HOSTS" ]` with N=1 is false without the file)."""
        value, done = self.decided(operand, settles)
        while self.peek() in ops and (ops[0] == "||" or self.at + 1 < len(self.words)):
            self.take()
            if done:
                self.moot()
                continue
            right, done = self.decided(operand, settles)
            if done:
                value = settles
            elif value is not None and right is not None:
                value = right
            else:
                value = None
        if value is None:
            raise _Unknown("an operand not known")
        return value

    def not_(self) -> bool:
        if self.peek() == "!" and self.at + 1 < len(self.words):
            self.take()
            return not self.not_()
        return self.primary()

    def primary(self) -> bool:
        word = self.peek()
        if word is None:
            raise _Unknown("empty")
        if word == "(":
            self.take()
            try:
                value = self.or_()
            except _Unknown:
                self.past_group()
                raise
            if self.peek() == ")":
                self.take()
            return value
        following = self.words[self.at + 1] if self.at + 1 < len(self.words) else None
        if following is not None and self.at + 2 < len(self.words) and self._binary_op(following):
            left, op, right = self.take(), self.take(), self.take()
            return False if self.skipping else self.binary(left, op, right)
        if word in ("-n", "-z") and following is not None:
            self.take()
            operand = self.take()
            return False if self.skipping else self.nonempty(operand) == (word == "-n")
        if word in self.UNARY_FILE or word == "-v":
            self.take()
            if following is not None:
                self.take()
            if self.skipping:
                return False
            raise _Unknown(word)  # the file system / environment is not read
        self.take()
        return False if self.skipping else self.nonempty(word)

    def nonempty(self, word: str) -> bool:
        """Whether an operand is not empty: known where its known text is not empty, whatever an unknown part of it
        holds (`"$(pwd)/save"`), when it is one operand for sure (quoted, or in `[[ ]]`)."""
        try:
            return bool(self.operand(word))
        except _Unknown:
            if (self.double or word.startswith(WHOLE)) and UNRESOLVED.sub("", word.lstrip(WHOLE + "\x01")).strip(MARK):
                return True
            raise

    def past_group(self) -> None:
        """Past the `)` that closes the group being read (an operand in it was not known)."""
        depth = 1
        while self.peek() is not None and depth:
            word = self.take()
            depth += {"(": 1, ")": -1}.get(word, 0)

    def _binary_op(self, word: str) -> bool:
        return word in ("=", "==", "!=", "=~", "<", ">") or word in self.INT_OPS or word in (
            "-nt", "-ot", "-ef")

    def operand(self, word: str) -> str:
        word = word[1:] if word.startswith(("\x01", WHOLE)) else word
        if unresolved_names(word):
            raise _Unknown(word)
        return word

    def binary(self, left: str, op: str, right: str) -> bool:
        if op in ("=", "==", "!=") and ("" in (left, right.removeprefix("\x01")) and unresolved_names(left + right)):
            # `[ "$DIR/save" != "" ]`: an operand known not to be empty against the empty string
            other = right if left == "" else left
            if other.startswith("\x01"):  # `[[ "" == *"$X"/save ]]`: a pattern with a character besides `*`
                if UNRESOLVED.sub("", other[1:]).replace("*", "").replace("\\", "").strip(MARK):
                    return op == "!="
            elif self.nonempty(other):
                return op == "!="
        left = self.operand(left)
        if op in ("=", "==", "!="):
            if right.startswith("\x01") and self.double:
                if unresolved_names(right):
                    raise _Unknown(right)
                same = _glob_match(left, right[1:])
            else:
                same = left == self.operand(right)
            return same != (op == "!=")
        right = self.operand(right)
        if op == "=~":
            if not _tame_regex(right) or len(left) > 1_000:
                raise _Unknown(right)  # Python's matcher can backtrack without end on such a pattern
            try:
                found = re.search(_ere(right), left)
            except re.error:
                raise _Unknown(right) from None
            self.rematch = [found.group(0), *(g or "" for g in found.groups())] if found else []
            return found is not None
        if op in ("<", ">"):
            return (left < right) if op == "<" else (left > right)
        if op in self.INT_OPS:
            if self.double:  # [[ ]] reads each side as arithmetic (010 is octal, 0x10 hex)
                a, b = self.number(left), self.number(right)
            else:  # test(1) takes decimal integers only: `[ 010 -eq 8 ]` is false, `[ false -ne 1 ]` an error
                a, b = _decimal(left), _decimal(right)
            return bool(self.INT_OPS[op](a, b))
        raise _Unknown(op)
