"""Which command of a read script is the training run, and what of it the reading could not decide.

A script runs many commands (mkdir, echo, tee, …); the training command is the one whose program starts
pretrain_gpt.py (`torchrun … pretrain_gpt.py`, `numactl … python pretrain_gpt.py`, `srun … python …`). A command
that only prints or copies the words (`echo torchrun pretrain_gpt.py …`) does not run it. A script whose command
runs another entry (a fork's `pretrain_llm360.py`, upstream's `pretrain_bert.py`) is named with what to do.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from launcher.errors import UserError
from launcher.importer import flags as flag_reader
from launcher.importer.bash_subset import RUNS_A_COMMAND, UNRESOLVED, Reading, ScriptCommand, Undecided, show
from launcher.importer.words import base_name

# Programs that print, filter or copy their words: `echo torchrun pretrain_gpt.py …` shows the command, it does not
# run it.
NOT_RUNNERS = {"echo", "printf", "cat", "tee", "grep", "egrep", "sed", "awk", "ls", "cp", "mv", "rm", "ln", "wget",
               "curl", "git", "mkdir", "chmod", "touch", "test", "[", "head", "tail", "sort", "basename", "dirname",
               "realpath", "readlink", "find", "scp", "rsync", "logger", "wc", "stat", "du", "vim", "nano", "less"}
ENTRY_LIKE = re.compile(r"(?:^|/)((?:pretrain|train|finetune)_?[A-Za-z0-9_.-]*\.py)$")
ANY_PY = re.compile(r"(?:^|/)([A-Za-z0-9_.-]+\.py)$")  # a fork's entry of any name (LLM360's main.py)
# upstream's entry scripts for other model families (the launcher trains GPT models through pretrain_gpt.py)
OTHER_FAMILIES = {"pretrain_bert.py": "BERT", "pretrain_t5.py": "T5", "pretrain_mamba.py": "Mamba",
                  "pretrain_hybrid.py": "hybrid Mamba", "pretrain_vlm.py": "vision-language",
                  "pretrain_retro.py": "RETRO", "pretrain_ict.py": "ICT", "pretrain_vision_classify.py": "vision",
                  "pretrain_vision_dino.py": "vision", "pretrain_vision_inpaint.py": "vision"}
MEGATRON_LOOKING = ("--num-layers", "--hidden-size", "--tensor-model-parallel-size", "--micro-batch-size",
                    "--num-attention-heads", "--global-batch-size", "--seq-length")


def program(argv: list[str]) -> str:
    return base_name(argv[0]) if argv else ""


def training_commands(reading: Reading) -> list[ScriptCommand]:
    out = []
    for command in reading.commands:
        at = flag_reader.find_entry(command.argv)
        if at is not None and program(command.argv) not in NOT_RUNNERS and not names_the_file(command.argv, at):
            out.append(command)
    return out


def names_the_file(argv: list[str], at: int) -> bool:
    """`llio_transfer $DIR/pretrain_gpt.py` (Fugaku's cache staging), `training_script: pretrain_gpt.py` (a YAML
    line read as bash): a program given the entry's path as its last word, with nothing after it and no program
    before it that starts python (a runner, a job launcher, a wrapper, a launch script of the user's), copies or
    names the file; it does not run it. A word not known (`$LAUNCHER pretrain_gpt.py`) may be such a program."""
    if at != len(argv) - 1 or at == 0:
        return False  # flags follow it, or the file is run as a program itself
    before = argv[:at]
    if any(UNRESOLVED.search(word) for word in before):
        return False
    return not any(_starts_programs(word) for word in before if not word.startswith("-"))


def _starts_programs(word: str) -> bool:
    name = base_name(word)
    return bool(flag_reader.RUNNER.fullmatch(name) or flag_reader.job_launcher(word)
                or name in flag_reader.NOT_A_LAUNCHER or name in RUNS_A_COMMAND
                or name.endswith((".sh", ".bash")) or name in ("exec", "command", "builtin", "sudo"))


SCRIPT_FILE = re.compile(r"\.(sh|bash|sbatch|slurm|job)$")


def other_script(reading: Reading) -> tuple[int, str, list[str]] | None:
    """(line, script, its arguments) of the last command that runs another script file (`bash submit.sh 110`,
    `sbatch job.sbatch`, `./train.sh`, behind a job launcher or a wrapper: `mpirun -n 4 bash inner.sh`), which
    reading this script does not open."""
    for command in reversed(reading.commands):
        argv = command.argv
        if argv and SCRIPT_FILE.search(argv[0]):
            return command.line, argv[0], argv[1:]
        if argv and (base_name(argv[0]) in ("bash", "sh", "zsh", "dash", "sbatch") or flag_reader.job_launcher(argv[0])
                     or base_name(argv[0]) in RUNS_A_COMMAND):  # mpirun -n 13824 … bash inner.sh "$LP"
            files = [k for k, word in enumerate(argv[1:], 1) if SCRIPT_FILE.search(word)]
            if files:
                return command.line, argv[files[0]], argv[files[0] + 1:]
    return None


def refuse_other_entry(reading: Reading) -> None:
    """No command runs pretrain_gpt.py: if one runs another Megatron entry, say which and what to do."""
    for command in reversed(reading.commands):
        if program(command.argv) in NOT_RUNNERS:
            continue
        _refuse_unknown_entry(command)
        for k, word in enumerate(command.argv):
            match = ENTRY_LIKE.search(word) or ANY_PY.search(word)
            if not match:
                continue
            if names_the_file(command.argv, k):
                continue  # llio_transfer $DIR/pretrain_llama.py: the file is copied, not run
            script = match.group(1)
            looks = any(w.partition("=")[0] in MEGATRON_LOOKING for w in command.argv[k + 1:])
            if not ENTRY_LIKE.search(word) and not looks:
                continue  # main.py, run.py: another program unless Megatron's flags follow it
            if script in OTHER_FAMILIES:
                raise UserError(f"line {command.line} runs {show(script)} (Megatron's {OTHER_FAMILIES[script]} "
                                "training), not pretrain_gpt.py",
                                "the launcher trains GPT models with pretrain_gpt.py; import a GPT training script")
            if script.startswith("pretrain_") or looks:
                raise UserError(
                    f"line {command.line} runs {show(script)}, not pretrain_gpt.py: a renamed or forked entry "
                    "script (Megatron-DeepSpeed, Pai-Megatron-Patch and others keep their own copy)",
                    f"if {show(script)} is pretrain_gpt.py with other defaults (its model provider, dataset), import "
                    f"the command with pretrain_gpt.py in its place (edit line {command.line}, or "
                    "`launch import -- torchrun pretrain_gpt.py FLAGS…`); its fork-only flags are then listed")


def _refuse_unknown_entry(command: ScriptCommand) -> None:
    """`torchrun $CALLING_SCRIPT --num-layers …`: the entry is a value the reading could not know (a branch on the
    script's arguments chose it); say so with the construct that decides it, not "no line runs pretrain_gpt.py"."""
    for k, word in enumerate(command.argv):
        if not UNRESOLVED.search(word) or (k and command.argv[k - 1].startswith("-")) or ANY_PY.search(show(word)):
            continue  # known, a flag's value, or a script whose directory only is unknown (${TOOLS}/convert.py)
        if not any(w.partition("=")[0] in MEGATRON_LOOKING for w in command.argv[k + 1:]):
            return
        if any(ENTRY_LIKE.search(show(w)) for w in command.argv[k + 1:]):
            return  # `${CMD_PREFIX} python3 pretrain_gpt_native.py …`: a known entry follows; it is named instead
        needs = command.depends.get(k, ())
        where = "; ".join(f"line {u.line}: {u.what}" + (" (it depends on the script's arguments)" if u.arguments
                                                         else "") for u in needs)
        choices = sorted({w for u in needs for _, values in u.values for words in values for w in words[:1]
                          if w.endswith(".py")})
        raise UserError(
            f"line {command.line} runs {show(word)} with Megatron's flags, and which script that is is not known "
            "without running the script" + (f" ({where})" if where else "")
            + (f"; its branches give {', '.join(choices)}" if choices else ""),
            "give the script's arguments after its name (launch import SCRIPT ARGS…) so that the branch is decided, "
            "or import the command with pretrain_gpt.py in its place (`launch import -- torchrun pretrain_gpt.py "
            "FLAGS…`)")


def flag_at(argv: list[str], index: int) -> str:
    """The flag a word of the command belongs to: itself, or the nearest flag before it; an unknown word that does
    not follow a flag directly may be flags itself (`$EXTRA`), and is named as it is."""
    if UNRESOLVED.fullmatch(argv[index]) and index > 0 and (not argv[index - 1].startswith("-") or _switch(
            argv[index - 1])):
        return show(argv[index])  # after a value, or after a switch that takes none (`--bf16 $EXTRA`)
    for k in range(index, -1, -1):
        if argv[k].startswith("-") and not re.fullmatch(r"-?\d[\d.eE+-]*", argv[k]):
            return argv[k].partition("=")[0]
        if k < index and flag_reader.find_entry([argv[k]]) is not None:
            break
    return show(argv[index])


def _switch(word: str) -> bool:
    """A flag of the pin that takes no value (store_true/store_false): the word after it is not its value."""
    arg = flag_reader.flag_table().get(word)
    return arg is not None and arg.kind in ("true", "false", "bool") and "=" not in word


# wrappers in RUNS_A_COMMAND whose options of the same names as a launcher's count no processes
NOT_COUNTING = {"numactl", "taskset", "nice", "timeout", "stdbuf", "env", "time", "nohup"}


def undecided_for(command: ScriptCommand) -> list[Undecided]:
    """The undecided constructs the training command depends on, each with the command's flags it decides."""
    affected: dict[Undecided, set[str]] = {}
    entry = next((k for k, word in enumerate(command.argv) if flag_reader.find_entry([word]) is not None),
                 len(command.argv))
    among_flags: set[Undecided] = set()  # what decides a word after the entry script: the training flags
    for index, needs in command.depends.items():
        for item in needs:
            if index > entry:
                among_flags.add(item)
            flag = flag_at(command.argv, index)
            if index < entry and flag in LAYOUT_RUNNER_OPTIONS:
                owner = next((base_name(w) for w in reversed(command.argv[:index]) if base_name(w) in RUNS_A_COMMAND),
                             "")
                if owner in NOT_COUNTING:  # `numactl -N $NUMA`: a NUMA node, no count of processes
                    flag = f"{owner} {flag}"
            if item.appends and flag not in item.flags:
                affected.setdefault(item, set())  # held before the branch added its own flags: not decided by it
                continue
            affected.setdefault(item, set()).add(flag)
    for item in command.absent:  # `$EXTRA` expanded to nothing here; a branch may have given it flags
        affected.setdefault(item, set())
    among_flags.update(command.among_flags)  # read from `eval $CMD`, whose training flags depended on these
    for item in command.under:  # the training command itself sits in a branch that was not chosen
        affected.setdefault(item, set()).update(item.flags or ("the training command",))
    for item in list(affected):
        affected[item].update(f for f in item.flags if f in flag_reader.flag_table())
    foreign = {item: tuple(f for f in item.flags if item in among_flags and _foreign(f) and f not in item.wraps)
               for item in affected}
    return [dataclasses.replace(item, flags=tuple(sorted(affected[item] | set(foreign[item]))),
                                unknown_flags=foreign[item])
            for item in sorted(affected, key=lambda u: (u.line, u.what))]  # one order on every run


def _foreign(flag: str) -> bool:
    """A flag of no Megatron release the pin knows and no harmless one by its name (a fork's `--enable-zero-bubble`):
    read as one word of the training command, it is lost."""
    name = flag.removeprefix("--").replace("-", "_")
    if flag in flag_reader.flag_table() or not flag.startswith("--") or name in flag_reader.TORCHRUN_SETTINGS or \
            name in flag_reader.TORCHRUN_DROPPED or name in flag_reader.TORCHRUN_SWITCHES:
        return False  # the runner's own options, which the same branch may set (DIST="--node_rank $R")
    return all(word.kind == "lost" for word in flag_reader.read_flags([flag]).words)


# torchrun's options that set the world the layout is checked against
# a runner's or job launcher's options that give its process counts, its nodes or its hosts: a branch not decided that
# gives one decides the layout (`mpirun -np $N` as much as `torchrun --nproc_per_node $N`)
LAYOUT_RUNNER_OPTIONS = {"--nproc_per_node", "--nproc-per-node", "--nnodes", "--num_gpus", "--num_nodes",
                         *flag_reader.PER_NODE_OPTIONS, *flag_reader.NODE_OPTIONS, *flag_reader.TOTAL_OPTIONS,
                         *flag_reader.HOST_OPTIONS, "--hostfile", "-hostfile", "--machinefile", "-machinefile",
                         "--nrs", "--rs_per_host", "--tasks_per_rs", "--worker_num", "--local_worker_num",
                         "--gpus-per-node", "--gpus-per-task", "--ntasks-per-gpu"}
HARMLESS_SECTIONS = ("data", "checkpoint", "logging")


def losses(undecided: list[Undecided], section_of: Callable[[str], str]) -> list[str]:
    """One line per undecided construct that decides the model, its numerics or its parallel layout (by the
    sections `section_of` gives Megatron settings; data, checkpoint and logging paths are not such): what an import
    must not carry silently."""
    table = flag_reader.flag_table()
    out = []
    for item in undecided:
        deciding = [flag for flag in item.flags if flag in LAYOUT_RUNNER_OPTIONS or flag == "the training command" or
                    (flag in table and section_of(table[flag].dest) not in HARMLESS_SECTIONS)]
        deciding += [flag for flag in item.unknown_flags if flag not in deciding]
        if deciding:
            out.append(f"line {item.line}: {item.what}: cannot be decided without running the script, and it decides "
                       f"{', '.join(deciding)}" + item.how_to_decide())
    return out
