"""An existing training script or flag list → a preset in this launcher's format, with a comment for every
line it could not carry.

Sources: a bash script (upstream's examples/*/train_*.sh shape: variables, flag arrays, $((…)), exports,
torchrun … pretrain_gpt.py …), a single command line or bare flag list, or a YAML mapping in the shape of
Megatron's functional-test configs (MODEL_ARGS: {--num-layers: 24, …}, ENV_VARS: {…}). Nothing is executed.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from launcher import redaction, untrusted
from launcher.errors import UserError
from launcher.importer import attention_vars, per_process, script_env, training_command
from launcher.importer import flags as flag_reader
from launcher.importer.bash_subset import (
    MARK,
    ScriptCommand,
    ShellSyntaxError,
    Undecided,
    read_script,
    remember_secret,
    show,
    unresolved_names,
)
from launcher.importer.flags import CREDENTIAL_FLAG, shown_words
from launcher.importer.kubernetes_layout import ManifestLayout, manifest_layout
from launcher.importer.makefile import makefile_script
from launcher.importer.program_kind import refuse_other_programs
from launcher.importer.task_yaml import TaskFile, task_file
from launcher.importer.words import MAX_COUNT, base_name, count, is_count
from launcher.importer.written_config import describe, written_key
from launcher.pipeline.shell import shell_comment

# Paths that name the user's data or tokenizer: unresolved, they become settings to fill in, over mock data.
DATA_PATHS = ("data_path", "train_data_path", "valid_data_path", "test_data_path", "data_args_path",
              "per_split_data_args_path", "vocab_file", "merge_file", "tokenizer_model")
SHELL_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)[^}]*\}|\$([A-Za-z_][A-Za-z0-9_]*)")
# Upstream's scripts are written for NGC's PyTorch container, which has Transformer Engine and apex.
KERNELS_NOTE = ("upstream's scripts run in NGC's PyTorch container (Transformer Engine + apex); set auto to "
                "use what the machine has (the launcher then adds the flags that work without them)")
SECTIONS = [
    ("parallel", re.compile(r"parallel|fsdp|^expert_|distributed_optimizer|^overlap_|^use_tp_pp|sharding|"
                            r"^cp_comm|^num_virtual|^num_layers_per_virtual|^decoder_(first|last)_pipeline|"
                            r"pipeline|^microbatch_group|^nccl|^tp_comm|^use_distributed")),
    ("data", re.compile(r"^data_|^mock_data|tokenizer|^vocab_|^merge_file|^split$|^num_workers|^tiktoken|"
                        r"mmap|dataloader|^(train|valid|test)_data|^eod|^reset_")),
    ("checkpoint", re.compile(r"^save|^load$|ckpt|^no_load|^no_save|^finetune|checkpoint|^async_save|"
                              r"^use_persistent|^dist_ckpt|^auto_detect")),
    ("logging", re.compile(r"^log|tensorboard|wandb|^eval_|^profile|^timing|^exit_|^one_logger")),
    ("training", re.compile(r"^lr|_lr$|batch_size|^train_|^adam|^sgd|weight_decay|clip_grad|^bf16$|^fp16|^fp8|"
                            r"^fp4|^loss_scale|^optimizer|^seed|^min_lr|^decoupled|^manual_gc|^empty_unused|"
                            r"^grad_|^calculate_per_token|^cross_entropy|^recompute|^accumulate|^step_batch|"
                            r"^rampup|^init_method|^use_flash|^deterministic|^check_for|^skip_train|"
                            r"^distributed_timeout|^attention_backend|^transformer_impl|^spec$")),
]


def section_of(dest: str) -> str:
    for name, pattern in SECTIONS:
        if pattern.search(dest):
            return name
    return "model"


@dataclass
class Imported:
    """The preset text and what the import learnt on the way."""

    text: str
    script_args: list[str]  # the Megatron words of the source, as the script would pass them
    settings: dict[str, Any]  # carried Megatron settings (dest → typed value)
    launcher: dict[str, Any]
    env: dict[str, str]
    replaced: dict[str, str] = field(default_factory=dict)  # dest → why its value is not the script's
    not_carried: list[str] = field(default_factory=list)  # one line per thing the preset does not hold
    warnings: list[str] = field(default_factory=list)  # where the preset's model is not the script's
    # what changes the model, its numerics or its layout and was not carried: the import refuses to write the
    # preset unless the user accepts the loss (the header then lists it)
    lost: list[str] = field(default_factory=list)
    translated: list[str] = field(default_factory=list)  # flags of other releases or forks, values retyped
    # the constructs (if/case/loop lines) the training command depends on that cannot be decided without running
    # the script, each with the command's flags it decides (Undecided.flags)
    undecided: list[Undecided] = field(default_factory=list)
    # words of the training command left out on purpose: an unknown `$LOAD` whose every possible value is only data,
    # checkpoint or logging flags (the round trip names them apart, not as lost)
    set_aside: list[str] = field(default_factory=list)


GPT2_VOCAB = 50257
TOKENIZER_SETTINGS = ("tokenizer_type", "tokenizer_model", "vocab_file", "merge_file", "vocab_size")
# len(tokenizer), which Megatron's HuggingFaceTokenizer reports, of hub tokenizers whose size is fixed by their
# release: every Llama 3.x model shares one tokenizer (128,000 + 256 special tokens), Llama 2 has 32,000.
HUB_VOCAB_SIZES = (
    (re.compile(r"meta-llama/(meta-)?llama-3(\.\d)?-\d+b(-instruct)?", re.I), 128256),
    (re.compile(r"meta-llama/llama-2-\d+b(-chat)?(-hf)?", re.I), 32000),
    (re.compile(r"(openai-community/)?gpt2(-medium|-large|-xl)?", re.I), GPT2_VOCAB),
)


# Reads a local tokenizer's vocabulary size from its files (launcher.checks.data.tokenizer_vocab_size, given by the
# command line: the importer comes before the checks).
VocabReader = Callable[[Mapping[str, Any]], int | None]


def tokenizer_vocab(settings: dict[str, Any], read_local: VocabReader | None = None) -> tuple[int | None, str]:
    """(vocabulary size, which tokenizer) where the script's tokenizer settings say it reliably: vocab_size,
    a readable local tokenizer (`read_local`), or a hub name of a fixed release."""
    kind = str(settings.get("tokenizer_type") or "GPT2BPETokenizer")
    model = settings.get("tokenizer_model")
    whose = f"{kind} {model}" if model else kind
    if isinstance(settings.get("vocab_size"), int):
        return settings["vocab_size"], whose
    # Megatron's default GPT-2 BPE, unless the tokenizer named a model file: then its type was lost (a fork's
    # Llama3Tokenizer with a tokenizer.json), and GPT-2's vocabulary is not the script's
    lost_type = model and "tokenizer_type" not in settings
    if kind == "GPT2BPETokenizer" and not settings.get("vocab_file") and not lost_type:
        return GPT2_VOCAB, whose
    if isinstance(model, str) and kind == "HuggingFaceTokenizer":
        for pattern, size in HUB_VOCAB_SIZES:
            if pattern.fullmatch(model.strip("/")):
                return size, whose
    return (read_local(settings) if read_local is not None else None), whose


def yaml_value(value: Any) -> str:
    if isinstance(value, str) and unresolved_names(value):
        return json.dumps(show(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    text = str(value)
    plain = yaml.safe_dump(text, default_style=None).strip().removesuffix("...").strip()
    try:
        same = yaml.safe_load(plain) == text
    except yaml.YAMLError:
        same = False
    return plain if same and "\n" not in plain else json.dumps(text)


def _missing(value: Any) -> list[str]:
    """The unresolved shell names inside a value (a string or a list of them)."""
    items = value if isinstance(value, list) else [value]
    return [n for item in items if isinstance(item, str) for n in unresolved_names(item)]


def _only_harmless_flags(names: list[str], alternatives: Mapping[str, list[tuple[str, ...]]]) -> bool:
    """Every name is decided by a branch the reader could not choose, and every value any branch gives it is known and
    reads as flags of the data, checkpoint or logging sections alone (`if [ -f latest ]; then LOAD="--load ckpt";
    else LOAD="--load init --no-load-optim"; fi`): nothing of the model hides in it, and Megatron would take it."""
    for name in names:
        if name not in alternatives:
            return False
        for words in set(alternatives[name]):
            if any(unresolved_names(w) for w in words) or (words and not words[0].startswith("--")):
                return False
            read = flag_reader.read_flags(list(words))
            if read.of_kind("lost") or any(section_of(dest) not in training_command.HARMLESS_SECTIONS
                                           for dest in read.settings):
                return False
    return True


def _comment(text: str) -> str:
    """One line for a `#` comment: unresolved parts as ${NAME}, no newline or control character."""
    return shell_comment(show(text))


comment_text = _comment


# -- sources ----------------------------------------------------------------------------------------------------

def _from_yaml_mapping(data: dict) -> tuple[list[str], list[str], dict[str, str], list[str]]:
    """MODEL_ARGS: {--flag: value|true|false|[values]} (+ ENV_VARS) → (runner, script words, env, notes)."""
    words: list[str] = []
    notes: list[str] = []
    model_args = data.get("MODEL_ARGS", data)
    if not isinstance(model_args, dict):
        raise UserError("MODEL_ARGS must be a mapping of flags to values")
    for key, value in model_args.items():
        flag = str(key) if str(key).startswith("--") else "--" + str(key).replace("_", "-")
        if isinstance(value, str):  # ${DATA_PATH} in a test config is filled in by its runner: unknown here
            value = SHELL_REFERENCE.sub(lambda m: MARK + (m.group(1) or m.group(2)) + MARK, value)
        if value is True or value is None:
            words.append(flag)
        elif value is False:
            notes.append(f"{flag}: false in the mapping, so the flag is not given")
        elif isinstance(value, list):
            words += [flag, *map(str, value)]
        elif isinstance(value, str) and re.fullmatch(r"\s*\[[^]]+\]\s*", value):
            # "[layernorm moe_act]": NVIDIA's test runner strips the brackets and passes the words
            # (tests/functional_tests/shell_test_utils/_run_training.sh)
            words += [flag, *value.strip()[1:-1].split()]
        else:
            words += [flag, *(str(value).split() if isinstance(value, str) else [str(value)])]
    env = {str(k): ("1" if v is True else "0" if v is False else str(v))
           for k, v in (data.get("ENV_VARS") or {}).items()}
    for key in data:
        if key not in ("MODEL_ARGS", "ENV_VARS") and "MODEL_ARGS" in data:
            notes.append(f"{key}: not a Megatron or launcher setting")
    return [], words, env, notes


@dataclass
class Source:
    """What a source gives: the runner (torchrun …), the Megatron words, the environment, what was not carried."""

    runner: list[str]
    words: list[str]
    env: dict[str, str]
    notes: list[str]
    undecided: list[Undecided] = field(default_factory=list)
    slurm: dict[str, int] = field(default_factory=dict)  # the #SBATCH counts (Reading.slurm)
    # variable → the words each undecided branch (every time one was met) leaves in it (Undecided.values)
    alternatives: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)
    manifest: dict[str, int] = field(default_factory=dict)  # a Kubernetes job's nodes and GPUs per node
    lsf_nodes: int | None = None  # `#BSUB -nnodes N` (Reading.lsf_nodes)
    job_slots: tuple[int, int] | None = None  # a PBS or PJM job's nodes and MPI slots on each (Reading.job_slots)
    rank_dependent: tuple[str, ...] = ()  # launcher counts that differ from node to node (not carried)
    set_by_script: frozenset[str] = frozenset()  # names the script sets whatever --env gives (Reading.set_by_script)
    copies: dict[str, str] = field(default_factory=dict)  # NAME → the variable whose value it holds (Reading.copies)
    written: dict[str, tuple[str, int]] = field(default_factory=dict)  # files the script writes (Reading.written)
    written_unsure: dict[str, tuple[int, ...]] = field(default_factory=dict)  # (Reading.written_unsure)
    where: str | None = "."  # the directory the training command runs in (ScriptCommand.where)


SHELL_C = re.compile(r"-[a-z]*c[a-z]*")  # bash -c, -lc, -ec, -xec …
ASSIGNMENT_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)


def _manifest_documents(text: str) -> tuple[str, ManifestLayout] | None:
    """The first document of a multi-document manifest (`---` between them) whose container runs a training script."""
    if "\n---" not in text:
        return None
    for document in re.split(r"(?m)^---[ \t]*$", text)[:50]:
        try:
            data = untrusted.load_yaml(document, "the source")
        except untrusted.TooLarge:
            raise
        except UserError:
            return None  # not YAML: a bash script with a `---` line
        found = _manifest_script(data)
        if found is not None:
            return found
    return None


def _container_env(container: dict[Any, Any]) -> dict[str, str]:
    """The container's `env:` entries with a value written in the manifest (`valueFrom` is the cluster's: unknown)."""
    env: dict[str, str] = {}
    entries = container.get("env")
    for item in entries[:500] if isinstance(entries, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("value"), (str, int, float)):
            continue
        if isinstance(item.get("name"), str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", item["name"]):
            env[item["name"]] = _kubernetes_expand(str(item["value"]), env)
    return env


def _kubernetes_expand(word: str, env: dict[str, str]) -> str:
    """Kubernetes' own expansion of `command:`/`args:` words, before any shell: `$(NAME)` of a variable the container
    defines becomes its value, `$$(` is a literal `$(`, and any other `$(…)` is left as it is."""
    if "$(" not in word:
        return word
    return re.sub(r"\$\$\(|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$(" if m.group(1) is None else env.get(m.group(1), m.group(0)), word)


def _manifest_script(data: Any) -> tuple[str, ManifestLayout] | None:
    """The bash text of the first container (`command:` and `args:`, a Kubernetes pod, a Kubeflow PyTorchJob, a Helm
    values file) whose words name a pretrain_*.py: `bash -c SCRIPT` gives SCRIPT, a list of words gives one line;
    with the nodes and GPUs per node the job runs it on (kubernetes_layout)."""
    stack: deque[tuple[Any, int]] = deque([(data, 0)])
    while stack:
        node, depth = stack.popleft()
        if isinstance(node, dict):
            if "command" in node or "args" in node:
                env = _container_env(node)
                words = [_kubernetes_expand(str(w), env) for part in (node.get("command"), node.get("args"))
                         if part is not None for w in (part if isinstance(part, list) else [part])]
                at = next((k for k, w in enumerate(words[:-2]) if base_name(w) in ("bash", "sh")
                           and SHELL_C.fullmatch(words[k + 1])), None)
                script = words[at + 2] if at is not None else shlex.join(words)
                if "pretrain_" in script:  # the container's environment first: the script reads it
                    exports = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())
                    return exports + script, manifest_layout(data)
            stack += [(v, depth + 1) for v in node.values() if depth < 40]
        elif isinstance(node, list):
            stack += [(v, depth + 1) for v in node if depth < 40]
    return None


def read_source(text: str, positional: Sequence[str] = (), path: Path | None = None,
                environment: Mapping[str, str] | None = None) -> Source:
    """The training command's runner and Megatron words, the exported environment and what was not carried, from
    any accepted source; `positional`: the arguments a bash script is run with ($1 …); `path`: the script's file,
    next to which the files it sources are read; `environment`: the variables it is run with (--env)."""
    refuse_other_programs(text)
    made = makefile_script(text, positional, environment)
    if made is not None:  # `make train TP=4`: the recipe as make hands it to the shell, its arguments make's
        text, positional = made, ()
    stripped = text.lstrip()
    layout = ManifestLayout()
    task: TaskFile | None = None
    if not stripped.startswith(("#!", "--", "torchrun", "python")):
        repeated: list[tuple[str, int, int]] = []
        try:  # bounded: a few hundred bytes of nested aliases must not expand into gigabytes
            data = untrusted.load_yaml(text, "the source", repeated)
        except untrusted.TooLarge:
            raise
        except UserError:
            data = None
        if isinstance(data, dict) and ("MODEL_ARGS" in data or all(str(k).startswith("--") for k in data)):
            if positional or environment:
                raise UserError("arguments and --env after the source apply to a bash script, not a YAML mapping "
                                "of flags", "give only the YAML file")
            mapping = Source(*_from_yaml_mapping(data))
            # Megatron's functional-test runner reads these files with yaml.safe_load: the later value is the one
            # it passes (several upstream configs repeat --ffn-hidden-size)
            mapping.notes += [f"{key} appears twice (lines {first} and {later}): the later value is carried, as a "
                              "YAML reader such as Megatron's test runner takes it" for key, first, later in repeated]
            return mapping
        if repeated:  # any other YAML document keeps the strict reading: a repeated key is refused
            data = untrusted.load_yaml(text, "the source")
        manifest = _manifest_script(data) if data is not None else _manifest_documents(text)
        task = task_file(data) if manifest is None and data is not None else None
        if manifest is not None:  # a Kubernetes / Kubeflow manifest: the container's command is the script
            text, path = manifest[0], None  # its files are the container's, not the ones next to the manifest
            layout = manifest[1]
        elif task is not None:  # a SkyPilot or dstack task: its shell block, with what the platform gives it
            text, layout = task.script, ManifestLayout(dict(task.counts), list(task.notes))
            environment = {**task.environment, **(environment or {})}  # --env over the file's
    try:
        reading = read_script(text, positional, path, environment)
    except ShellSyntaxError as exc:
        raise UserError(f"cannot read the script: {exc}", "import reads bash scripts, one command line, or a "
                        "YAML mapping of flags (MODEL_ARGS)") from None
    notes = [f"line {line}: {_comment(why)}" for line, why in reading.skipped]
    training = training_command.training_commands(reading)
    undecided: list[Undecided] = []
    env = dict(reading.shell.exports)
    platform = {name: task.environment.get(name) for name in task.platform} if task is not None else {}
    for name, value in platform.items():  # SKYPILOT_NUM_NODES: the platform's, not the preset's
        if env.get(name) == value:
            del env[name]
    if not training:
        bare = [c for c in reading.commands if c.argv and c.argv[0].startswith("--")]
        if not bare:
            training_command.refuse_other_entry(reading)
            stop = (f"; bash stops at line {reading.stopped[0]} ({_comment(reading.stopped[1])}) before reaching one"
                    if reading.stopped else "")
            if reading.unended_heredocs:  # `cat <<EOF` with no EOF line: the rest of the script is its text
                stop += (f"; the here-document of line {reading.unended_heredocs[-1]} is never ended, so bash reads "
                         "every line after it as that document's text, not as commands")
            other = training_command.other_script(reading)
            if other is not None:  # `bash submissions/submit.sh 110 $*`: the training command is in that file
                line, script, args = other
                given = " ".join(_comment(a) for a in args)
                unplaced = next((why.partition("(")[2].rpartition(")")[0] for at, why in reading.skipped
                                 if at == line and "run by the script: not read (it runs in the directory" in why), "")
                raise UserError(
                    f"no training command found: no line runs pretrain_gpt.py; line {line} runs another script, "
                    f"{_comment(script)}, which the import does not open" + (f" ({unplaced})" if unplaced else "")
                    + stop,
                    "import that script with the arguments this one gives it: launch import "
                    + ("-- " if any(a.startswith("-") for a in args) else "")  # `--opt x` is the script's, not ours
                    + _comment(script) + (f" {given}" if given else "")
                    + " (a path relative to where this script runs)")
            if reading.unread_entry:  # the grammar lost the part of the script that holds it
                first, last, near = reading.unread_entry[0]
                lines = f"line {first} names" if last <= first else f"lines {first}-{last} name"
                raise UserError(
                    f"no training command read: {lines} a pretrain_*.py, and bash reads them, but the grammar this "
                    f"import reads bash with cannot (a construct it lacks, on or near line {near}); nothing in them "
                    "was carried; the rest of the script was read" + stop,
                    f"write the construct near line {near} another way (e.g. `for …; do …; done` for `for …; {{ …; }}`)"
                    ", or import the training command alone: put that line, with the values it needs, in a file of "
                    "its own and import that")
            unread = sorted({line for line, why in reading.skipped if "source" in why and (
                "is not read" in why or "not read (" in why)})
            where = (f"; the files sourced on line(s) {', '.join(map(str, unread))} were not read, and the training "
                     "command (a function they define) may be there" if unread else "")
            raise UserError("no training command found: no line runs pretrain_gpt.py and none is a list of flags"
                            + stop + where, "import reads scripts that run `torchrun … pretrain_gpt.py …` (or python "
                            "pretrain_gpt.py); give the script's arguments after its name if it needs them "
                            "(`launch import -- train.sh --tp 4` when they start with -)"
                            + ("; import the script from its own directory, next to the files it sources, or import "
                               "the file that runs pretrain_gpt.py" if unread else ""))
        words = [w for c in bare for w in c.argv]
        runner: list[str] = []
        bare_ids = {id(c) for c in bare}  # by identity: comparing the commands field by field was quadratic
        others = [c for c in reading.commands if id(c) not in bare_ids]
    else:
        command = training[-1]
        at = flag_reader.find_entry(command.argv)
        assert at is not None
        runner, words = [*command.outer, *_unsure_counts(command, at)], command.argv[at + 1:]
        others = [c for c in reading.commands if c is not command]
        env.update(command.env)  # OMP_NUM_THREADS=4 torchrun …, env A=1 torchrun …
        undecided = training_command.undecided_for(command)
        # lines the grammar could not read that name an entry: bash may run a training command there too (or instead)
        undecided += [Undecided(first, (f"line {first}" if last <= first else f"lines {first}-{last}")
                                + f", which the grammar cannot read (near line {near}), name(s) a pretrain_*.py: a "
                                "training command there may run instead of, or besides, this one",
                                flags=("the training command",)) for first, last, near in reading.unread_entry]
        for item in undecided:
            notes.append(_comment(f"line {item.line}: {item.what}: cannot be decided without running the script, "
                                  + (f"and the training command's {', '.join(item.flags)} depend(s) on it" if item.flags
                                   else "and the training command's words depend on it")))
        if len(training) > 1:
            notes.append(f"the script runs pretrain_gpt.py {len(training)} times; the last (line {command.line}) "
                         "is imported")
    for c in others:
        if training_command.program(c.argv) in ("echo", "printf", ":", "true"):
            continue  # prints only: nothing of the run depends on it
        notes.append(f"line {c.line}: not carried (not the training command): {_comment(shown_words(c.argv))}")
    alternatives: dict[str, list[tuple[str, ...]]] = {}
    for item in reading.undecided:
        for name, values in item.values:
            alternatives.setdefault(name, []).extend(values)
    notes += [_comment(n) for n in layout.notes]  # a task name may hold a newline
    differing = _counts_by_node_rank(text, positional, path, runner, environment) if training and positional else {}
    for setting, (here, there) in differing.items():
        notes.append(_comment(f"{setting}: this node's {here}, another node's {there}: the script gives each node its "
                              "own count by the node rank it is given (an argument); a preset gives every node the "
                              f"same, so {setting} is not set from it (give it, and check the world size)"))
    # a loop runs its commands once per pass (`while true; do nvidia-smi …; sleep 1; done &`, up to the reader's
    # bound): each is said once
    notes = list(dict.fromkeys(notes))
    return Source(runner, words, env, notes, undecided, reading.slurm, alternatives, layout.counts, reading.lsf_nodes,
                  reading.job_slots, tuple(differing), reading.set_by_script, reading.copies, reading.written,
                  reading.written_unsure, command.where if training else ".")


def _read_written_files(flags: flag_reader.Flags, written: Mapping[str, tuple[str, int]],
                        unsure: Mapping[str, tuple[int, ...]], where: str | None) -> tuple[list[str], set[int]]:
    """A lost flag whose value is a file the script writes itself (its DeepSpeed JSON): said with what the file holds
    (written_config), never as a file not read; where nothing of it is lost, harmless. (The words left out on purpose,
    Imported.set_aside; the ids of the words described.)"""
    aside, described = [], set()
    for w in flags.of_kind("lost"):
        flag, eq, inline = w.words[0].partition("=")
        value = inline if eq else w.words[1] if len(w.words) == 2 else None
        key = written_key(value, written, where) if value is not None else None
        if key is None:
            continue
        why, clean = describe(flag, value or "", *written[key], flags.settings)
        lines = unsure.get(key, ())
        if lines:  # written from values a sourced file not read may change: not certain
            why += (f"; it was written from values that the file sourced on line(s) {', '.join(map(str, lines))}, "
                    "not read, may change")
            clean = False
        w.kind, w.why = ("harmless" if clean else "lost"), why
        described.add(id(w))
        if clean:
            aside.append(w.text)
    return aside, described


def _unsure_counts(command: ScriptCommand, at: int) -> list[str]:
    """The runner's words (up to the entry script), where one that a sourced file not read may have changed
    (`GPUS=8; source cluster.sh; torchrun --nproc_per_node $GPUS`) is not known: no process count is read from it."""
    return [f"{MARK}{show(word)}, unless the file sourced on line {needs[0].line} changes it{MARK}"
            if k < at and not unresolved_names(word)
            and (needs := [u for u in command.depends.get(k, ()) if u.sourced]) else word
            for k, word in enumerate(command.argv[:at + 1])]


def _remember_credential_flags(words: Sequence[str]) -> None:
    known = flag_reader.flag_table()
    for k, word in enumerate(words):
        name, eq, value = word.partition("=")
        if not name.startswith("--") or name in known:
            continue
        if CREDENTIAL_FLAG.search(name[2:].replace("-", "_").upper()):
            remember_secret(name[2:].replace("-", "_").upper(), value if eq else
                            words[k + 1] if k + 1 < len(words) else "")


_RUNNER_COUNTS = {"nproc_per_node": "gpus_per_node", "nnodes": "nodes"}


def _runner_values(runner: Sequence[str]) -> dict[str, str]:
    """torchrun's (python -m torch.distributed.run's) --node_rank, --nproc_per_node, --nnodes as written."""
    found: dict[str, str] = {}
    for k, word in enumerate(runner):
        name, eq, value = word.lstrip("-").partition("=")
        name = name.replace("-", "_")
        if word.startswith("--") and name in ("node_rank", *_RUNNER_COUNTS):
            found[name] = value if eq else (runner[k + 1] if k + 1 < len(runner) else "")
    return found


def _counts_by_node_rank(text: str, positional: Sequence[str], path: Path | None,
                         runner: Sequence[str], environment: Mapping[str, str] | None = None
                         ) -> dict[str, tuple[str, str]]:
    """The launcher's counts that another node of the same job gets otherwise: where the script is read with the node
    rank as an argument (`launch import train.sh 0`) and decides its process count on it (`if [ $NODE_RANK -eq 0
    ]; then ((GPUS_PER_NODE++))`), the script is read again as the next node would run it."""
    given = _runner_values(runner)
    rank = given.get("node_rank", "")
    if count(rank, least=0) is None or rank not in positional or len(positional) > 64:
        return {}
    nodes = count(given.get("nnodes", "")) or 0
    other = str((int(rank) + 1) % nodes if nodes > 1 else int(rank) + 1)
    at = list(positional).index(rank)
    try:
        again = read_script(text, [*positional[:at], other, *positional[at + 1:]], path, environment)
    except (ShellSyntaxError, UserError):
        return {}
    commands = training_command.training_commands(again)
    if not commands:
        return {}
    command = commands[-1]
    entry = flag_reader.find_entry(command.argv)
    there = _runner_values([*command.outer, *command.argv[:entry]] if entry is not None else [])
    return {setting: (given[name], there[name]) for name, setting in _RUNNER_COUNTS.items()
            if name in given and name in there and given[name] != there[name]}


# -- the preset -------------------------------------------------------------------------------------------------

# What a run writes: the launcher puts each into the run directory unless the preset gives a path of its own.
RUN_OUTPUTS = ("save", "load", "tensorboard_dir")


# Exported variables that name a part of the machine the script was written on: carried, they break the run elsewhere
# (seen: NCCL/GLOO_SOCKET_IFNAME=tailscale0 from a 2026 two-node launch, "Unable to find address for: tailscale0" at
# init on one H200; PATH and LD_LIBRARY_PATH of /home/sd/.local replace the target's). CC and CXX name the compilers
# of the script's machine (LUMI's `export CC=gcc-10 CXX=g++-10`): Triton builds its kernel launchers with $CC whenever
# it is set, and Megatron's dataset helpers and torch.compile's CPU code build with $CXX; where the target lacks that
# compiler the first build fails (a rehearsal here: "No working C++ compiler found … g++-10" at the first step).
_INTERFACE = "a network interface"
MACHINE_ENV = {"NCCL_SOCKET_IFNAME": _INTERFACE, "GLOO_SOCKET_IFNAME": _INTERFACE, "TP_SOCKET_IFNAME": _INTERFACE,
               "NCCL_IB_HCA": "the InfiniBand adapters", "UCX_NET_DEVICES": "the network devices",
               "PATH": "the program search path", "LD_LIBRARY_PATH": "the library search path",
               "PYTHONPATH": "the Python search path (the launcher gives Megatron's own)",
               "CUDA_VISIBLE_DEVICES": "the GPUs", "HIP_VISIBLE_DEVICES": "the GPUs",
               "ROCR_VISIBLE_DEVICES": "the GPUs",
               "CC": "the C compiler (Triton builds its kernel launchers with it)",
               "CXX": "the C++ compiler (Megatron's dataset helpers and torch.compile's CPU code build with it)"}


def import_source(text: str, source_name: str, positional: Sequence[str] = (),
                  read_local: VocabReader | None = None, path: Path | None = None,
                  environment: Mapping[str, str] | None = None) -> Imported:
    """`path`: the script's file when it was given as one (the files it sources are read next to it);
    `environment`: the variables the user runs it with (`launch import --env TP=8 train.sh`)."""
    source = read_source(text, positional, path, environment)
    runner, words, env, notes = source.runner, source.words, source.env, source.notes
    launcher: dict[str, Any] = {}
    nproc_unsaid = False
    lost_first: list[str] = []  # what makes the training command not run as written
    if runner:
        launch = flag_reader.split_launch([*runner[:-1], runner[-1]])
        nproc_unsaid = launch.nproc_unsaid
        if launch.wrapper and ASSIGNMENT_WORD.fullmatch(launch.wrapper[0]):
            # `$ENV_ARGS deepspeed …` with ENV_ARGS="A=1 B=2": bash takes only written words for assignments
            words_before = next((k for k, w in enumerate(launch.wrapper) if not ASSIGNMENT_WORD.fullmatch(w)),
                                len(launch.wrapper))
            lost_first.append(_comment(
                f"{flag_reader.shown_words(launch.wrapper[:words_before])}: bash runs the first of these words as the "
                "command (words an expansion gives are never assignments), which is not found (status 127): the "
                "training command of this line does not run; write the assignments before the command, or export "
                "them"))
        launcher.update({k: v for k, v in launch.launcher.items() if k not in source.rank_dependent})
        notes += [_comment(f"{base_name(runner[0])} {d}") for d in launch.dropped]
        notes += [_comment(f"{launch.runner_name or base_name(runner[0])} {d}") for d in launch.runner_notes]
        # what the wrapper exports reaches every rank, over the script's own exports (mpirun -x A=1 …)
        env = {**env, **launch.env}
        visible = env.get("CUDA_VISIBLE_DEVICES", "")
        if launch.visible_gpus and re.fullmatch(r"[0-9]+(,[0-9]+)*", visible) and "gpus_per_node" not in launcher:
            # `CUDA_VISIBLE_DEVICES=0 deepspeed …` (its runner, given no count or hostfile, runs on localhost's
            # visible GPUs), `torchrun --nproc_per_node gpu`: as many processes as the script lets the node see
            launcher["gpus_per_node"] = len(set(visible.split(",")))
            runner_name = base_name((launch.runner or runner)[0])
            if runner_name == "deepspeed":
                launcher.setdefault("nodes", 1)  # localhost alone
            notes.remove(_comment(f"{runner_name} {launch.visible_gpus}"))
            notes.append(f"gpus_per_node {launcher['gpus_per_node']}: {runner_name} starts one process per GPU that "
                         f"CUDA_VISIBLE_DEVICES={visible} (the script's) lets it see"
                         + (" on this node (deepspeed's runner ignores it where a hostfile is found, /job/hostfile "
                            "by default)" if runner_name == "deepspeed" else ""))
        if launch.per_task and not launch.via_program:
            notes.append("the script starts pretrain_gpt.py with python directly (one process per GPU, e.g. srun); "
                         "the launcher uses torchrun (one process here: python3 directly, launcher.runner)")
        if launch.per_task:
            mpi = next((flag_reader.job_launcher(w) for w in launch.wrapper
                        if flag_reader.job_launcher(w) in ("mpirun", "mpiexec", "orterun")), "")
            if mpi and not {"nodes", "gpus_per_node"} & set(launcher) and not launch.total_only \
                    and not launch.per_node_only and not flag_reader.unknown_counts(launch.wrapper):
                # `mpirun python …` with no count of its own starts one process per slot of the job's allocation
                nodes, per_node = source.slurm.get("nodes"), source.slurm.get("ntasks-per-node")
                if nodes and per_node:  # under Slurm: its #SBATCH tasks (Open MPI and MPICH read the allocation)
                    launcher.update({"nodes": nodes, "gpus_per_node": per_node})
                else:
                    notes.append(f"{mpi} with no process count starts one process per slot of the job's allocation "
                                 "(the scheduler's, not known here); the preset's nodes and gpus_per_node are not "
                                 "set from it (give --nodes and --gpus-per-node)")
            if any(base_name(w) == "srun" for w in launch.wrapper):
                # srun without its own counts starts the job's tasks: the #SBATCH lines give them, or the salloc or
                # sbatch that runs it (`salloc -N 2 --ntasks-per-node=8 srun …`), whose options win over the lines
                slurm = {**source.slurm, **flag_reader.allocation(launch.wrapper)}
                for setting, option in (("nodes", "nodes"), ("gpus_per_node", "ntasks-per-node")):
                    if setting not in launcher and option in slurm:
                        launcher[setting] = slurm[option]
                nodes, tasks = slurm.get("nodes"), slurm.get("ntasks")
                if "gpus_per_node" not in launcher and launcher.get("nodes") == nodes and nodes and tasks \
                        and tasks % nodes == 0:  # `#SBATCH -N 2 -n 16`: srun spreads the 16 tasks over the 2 nodes
                    launcher["gpus_per_node"] = tasks // nodes
                total = flag_reader.total_processes(launch.wrapper) if launch.total_only else 0
                if total and "nodes" in launcher and total % launcher["nodes"] == 0 \
                        and "gpus_per_node" not in launcher:  # `srun -n 32` in a job of `#SBATCH --nodes=4`
                    launcher["gpus_per_node"] = total // launcher["nodes"]
                if "gpus_per_node" not in launcher and "nodes" in launcher and not launch.total_only:
                    notes.append("srun without a count of tasks on each node: the job's --ntasks-per-node, else one "
                                 "task a node (not known here); the preset's gpus_per_node is not set from it (8 "
                                 "unless set)")
                if not {"nodes", "gpus_per_node"} & set(launcher) and not launch.total_only \
                        and not flag_reader.unknown_counts(launch.wrapper):
                    said = f" (SLURM_NTASKS={slurm['ntasks']}, over nodes Slurm chooses)" if "ntasks" in slurm else ""
                    notes.append(f"srun with no count of its own starts the job's tasks{said}, which neither the "
                                 "command nor the #SBATCH lines give per node; the preset's nodes and gpus_per_node "
                                 "are not set from it (give --nodes and --gpus-per-node)")
            job_nodes, slots = source.job_slots or (source.slurm.get("nodes"), source.slurm.get("ntasks-per-node"))
            given_total = flag_reader.total_processes(launch.wrapper)
            if mpi and job_nodes and slots and given_total and given_total % slots == 0 \
                    and given_total // slots <= job_nodes and flag_reader.total_only(launch.wrapper) \
                    and not any(re.fullmatch(r"--?map-by|-?-rankfile|-?-hostfile|-machinefile", w)
                                for w in launch.wrapper) and "nodes" not in launcher:
                # `mpirun -np 16` in a job of 2 nodes of 8 slots (#SBATCH -N/--ntasks-per-node, #PBS select=N:
                # mpiprocs=M, #PJM node= and --mpi proc=): it fills each node's slots in turn, 8 on each of 2 nodes
                launcher.update({"nodes": given_total // slots, "gpus_per_node": slots})
                notes.append(f"gpus_per_node {slots}: {mpi}'s {given_total} processes in all fill the job's nodes of "
                             f"{slots} slots each, in turn")
            lsf_nodes = source.lsf_nodes if any(base_name(w) == "jsrun" for w in launch.wrapper) else None
            jsrun_total = flag_reader.total_processes(launch.wrapper) if lsf_nodes else 0
            if lsf_nodes and jsrun_total and not {"nodes", "gpus_per_node"} & set(launcher) \
                    and jsrun_total % lsf_nodes == 0:
                # `jsrun -n 12 -a 1` in a job of `#BSUB -nnodes 2`: its processes over the job's nodes
                launcher.update({"nodes": lsf_nodes, "gpus_per_node": jsrun_total // lsf_nodes})
                notes.append(f"gpus_per_node {jsrun_total // lsf_nodes}: jsrun's {jsrun_total} processes in all over "
                             f"the job's {lsf_nodes} nodes (#BSUB -nnodes), the same number on each (jsrun fills a "
                             "node's GPUs first: give --nodes where fewer nodes hold them)")
            elif launch.total_only and "gpus_per_node" not in launcher:
                over = (f"over the job's {launcher['nodes']} nodes, not a whole number on each" if "nodes" in launcher
                        else "over nodes the command does not count (the job's hosts, not known here)")
                notes.append(_comment(f"{launch.total_only}: processes in all, {over}; the preset's nodes and "
                                      "gpus_per_node are not set from it (give --nodes and --gpus-per-node)"))
            if launch.per_node_only and "nodes" not in launcher:
                if any(base_name(w) == "jsrun" for w in launch.wrapper) and source.lsf_nodes:
                    launcher["nodes"] = source.lsf_nodes  # jsrun's resource sets on every node of the LSF job
                else:  # `mpirun --npernode 8`: that many on each node of the job, as many nodes as it has
                    notes.append(_comment(f"{launch.per_node_only}: processes on each node of the job, whose "
                                          "number of nodes the command does not give (the job's own, not known "
                                          "here); the preset's nodes is not set from it (give --nodes)"))
    pods, per_pod = source.manifest.get("nodes"), source.manifest.get("gpus_per_node")
    if pods and per_pod and pods > 1 and "nodes" not in launcher and launcher.get("gpus_per_node") == pods * per_pod:
        # `mpirun -np 8` read as one node of 8 where the job's pods are 2 of 4: the count is the job's total
        launcher["gpus_per_node"] = per_pod
    for setting, pods_count in source.manifest.items():  # what the command does not give, the job's pods do
        if setting not in launcher:
            launcher[setting] = pods_count
        elif launcher[setting] != pods_count:
            notes.append(f"the Kubernetes job gives {setting.replace('_', ' ')} {pods_count}, the training command "
                         f"{launcher[setting]}: the command's own count is carried (its option overrides what the "
                         "job sets)")
    if nproc_unsaid and "gpus_per_node" not in launcher:
        # torchrun reads each option's default from PET_<OPTION> (torch.distributed.run's env defaults), else 1
        nproc = {**(environment or {}), **env}.get("PET_NPROC_PER_NODE", "")
        if is_count(nproc):
            launcher["gpus_per_node"] = int(nproc)
        else:
            notes.append("torchrun without --nproc_per_node starts as many processes on each node as the caller's "
                         "PET_NPROC_PER_NODE says, else one (torchrun's default); the preset's gpus_per_node is not "
                         "set from it (give --gpus-per-node; 8 unless set)")
    whole = flag_reader.split_launch([*runner[:-1], runner[-1]]) if runner else None
    nodes_unknown = whole is not None and "nodes" not in launcher and _nodes_decided_where_it_runs(whole)
    # the job launcher's count of all its processes, where each is one rank (python started once per task)
    total = flag_reader.total_processes(whole.wrapper) if whole is not None and whole.per_task else 0
    nodes, per_node = launcher.get("nodes"), launcher.get("gpus_per_node")
    if total and isinstance(nodes, int) and isinstance(per_node, int) and nodes * per_node != total:
        # `srun -n 8` in a job of `#SBATCH --nodes 2`: 8 processes in all (4 on each node), not 2 nodes of 8
        if total % nodes == 0:
            launcher["gpus_per_node"] = total // nodes
            notes.append(f"gpus_per_node {total // nodes}: the command's {total} processes in all over the job's "
                         f"{nodes} nodes")
        else:
            del launcher["gpus_per_node"]
            notes.append(f"the command's {total} processes in all make no whole number on each of the job's {nodes} "
                         "nodes; the preset's gpus_per_node is not set from it (give --gpus-per-node)")
    _remember_credential_flags(words)
    flags = flag_reader.read_flags(words)
    nodes, per_node = launcher.get("nodes"), launcher.get("gpus_per_node")
    flag_reader.data_parallel_translations(
        flags, nodes * per_node if isinstance(nodes, int) and isinstance(per_node, int) else None)
    lost: list[str] = list(lost_first)
    set_aside: list[str] = []
    aside, described = _read_written_files(flags, source.written, source.written_unsure, source.where)
    set_aside += aside
    for w in flags.of_kind("lost"):
        missing = _missing(w.text) if id(w) not in described else []  # a path not known, a text that is
        if not missing:
            lost.append(_comment(f"{w.text}: {w.why}"))
            continue
        arg = flag_reader.flag_table().get(w.words[0].partition("=")[0])
        _, eq, inline = w.words[0].partition("=")
        given = inline if eq and len(w.words) == 1 else w.words[1] if not eq and len(w.words) == 2 else ""
        if arg is not None and given and (variable := per_process.given_by_launcher(
                arg.dest, given, source.copies, source.set_by_script, source.alternatives)):
            set_aside.append(w.text)
            notes.append(_comment(f"{w.text}: given by the launcher per process (${variable}, this process's "
                                  f"{arg.dest.replace('_', ' ')}, is what Megatron reads from the environment the "
                                  "launcher gives each process)"))
            continue
        named = ", ".join(n if n.startswith("$") else "$" + n for n in missing)  # $((…)) is said as written
        unknown = f"{w.text}: {named} is not known without running the script"
        if arg is not None and section_of(arg.dest) in ("data", "checkpoint", "logging"):
            if not arg.takes_list and len(w.words) == 2:
                # `--save-interval $SI`: the unknown word is the flag's one value, so the round trip, which reads
                # the word again, leaves it out too; after a list's values (`--profile-ranks 0 1 $EXTRA`) an unknown
                # word may be flags of its own, which the round trip still names
                set_aside.append(w.text)
            notes.append(_comment(unknown))
        elif arg is None and _only_harmless_flags(missing, source.alternatives):
            set_aside.append(w.text)
            notes.append(_comment(unknown + ": each branch that sets it gives only data, checkpoint or logging "
                                  "flags (not carried)"))
        else:
            # the caller's variables only: one the script sets itself (`G=$((B * N))`, `read -a A < file`) is not
            # decided by --env
            variables = [n for n in missing if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)
                         and n not in source.set_by_script]
            ways = ([f"--set {arg.dest}=VALUE"] if arg is not None else []) + (
                [f"import with {' '.join(f'--env {n}=VALUE' for n in variables)}"] if variables else [])
            lost.append(_comment(unknown + (f" (set it: {', or '.join(ways)})" if ways else "")))
    # a branch the reader cannot decide that sets the model, numerics or layout (the flags it feeds are unknown)
    lost += [_comment(u) for u in training_command.losses(source.undecided, section_of)]
    notes += [_comment(f"{w.text}: {w.why}") for w in flags.of_kind("harmless")]
    translated = [_comment(f"{w.text} {w.why}" if w.kind == "translated" else w.why)
                  for w in flags.of_kind("translated", "converted")]
    notes += [f"{flags.repeated_with[flag][0]} and {flag.partition('=')[0]} both set {flags.repeated_with[flag][1]}; "
              "the last value is carried (as argparse does)" if flag in flags.repeated_with else
              f"{flag} is given more than once; the last value is carried (as argparse does)"
              for flag in flags.repeated]
    settings = dict(flags.settings)
    replaced: dict[str, str] = {}
    commented: dict[str, list[str]] = {}  # section → commented-out lines
    warnings: list[str] = []  # what changes the model the preset describes
    if settings.get("num_experts") and "moe_router_topk" not in settings:
        # the experts a token goes to is the default of the release the script was written for
        warnings.append("--num-experts without a top-k: the pin routes each token to 2 experts (moe_router_topk 2, "
                        "auxiliary-loss balancing); Megatron-LM before core 0.5 routed it to 1 (a Switch MLP balanced "
                        "by Sinkhorn) and Megatron-DeepSpeed's --topk defaults to 1: where the script meant one, "
                        "--set moe_router_topk=1 --set moe_router_pre_softmax=true")

    def comment_out(dest: str, value: Any, why: str) -> None:
        commented.setdefault(section_of(dest), []).append(f"# {dest}: {_comment(yaml_value(value))}   # {why}")

    unresolved = {d: v for d, v in settings.items() if _missing(v)}
    data_missing = [d for d in unresolved if d in DATA_PATHS]
    for dest, value in unresolved.items():
        names = ", ".join("$" + n for n in _missing(value))
        del settings[dest]
        replaced[dest] = f"{names} is not known without running the script"
        if dest in DATA_PATHS:
            comment_out(dest, value, f"fill in ({names} is unknown here)")
        elif dest in ("save", "load"):
            comment_out(dest, value, f"{names} unknown; a launch saves into its run directory")
        else:
            comment_out(dest, value, f"{names} unknown; set it if the script relies on it")
            if section_of(dest) not in ("data", "checkpoint", "logging"):
                lost.append(_comment(f"{flags.flag_of.get(dest, dest)} {show(str(value))}: {names} is not known "
                                     "without running the script (set it: --set "
                                     f"{dest}=VALUE)"))
    for dest in RUN_OUTPUTS:  # relative to where the script ran, e.g. ${1:-"checkpoints/llama3_8b_fp8"}
        value = settings.get(dest)
        if isinstance(value, str) and not value.startswith("/"):
            del settings[dest]
            replaced[dest] = "a path relative to where the script ran"
            comment_out(dest, value, "relative to where the script ran; a launch writes into its run directory")
    tokenizer_settings = {d: v for d, v in settings.items() if d in TOKENIZER_SETTINGS}
    if data_missing:
        for dest in ("data_path", "train_data_path", "valid_data_path", "test_data_path", "data_args_path",
                     "per_split_data_args_path", "vocab_file", "merge_file", "tokenizer_model", "tokenizer_type",
                     "split"):
            if dest in settings and dest not in unresolved:
                comment_out(dest, settings.pop(dest), "belongs to the data to fill in")
                replaced[dest] = "belongs to the script's data, replaced by mock data"
        vocab, whose = tokenizer_vocab(tokenizer_settings, read_local)
        if "tokenizer_type" not in tokenizer_settings and any(
                "--tokenizer-type" in line or line.startswith("${") for line in lost):
            # the script's tokenizer is in what was lost (`--tokenizer-type X` Megatron refuses, or `$TOKENIZER_ARGS`
            # from a file not read): GPT-2's is Megatron's default, not the script's
            vocab, whose = None, "its --tokenizer-type is among what was lost"
        stand_ins = {"mock_data": True, "tokenizer_type": "NullTokenizer", "vocab_size": vocab or GPT2_VOCAB}
        for dest, value in stand_ins.items():
            if dest not in settings:
                settings[dest] = value
                replaced[dest] = "stands in for the data to fill in"
        if "vocab_size" in replaced and vocab:
            notes.append(f"vocab_size {vocab}: the vocabulary of the script's tokenizer ({whose}), so the model "
                         "keeps its shape on mock data")
        elif "vocab_size" in replaced:
            warnings.append(f"vocab_size {GPT2_VOCAB} (GPT-2's) stands in for the vocabulary of the script's "
                            f"tokenizer ({whose}), which is unknown here: parameters, memory and plans describe "
                            "that vocabulary, not the script's model; set vocab_size to the tokenizer's")
        notes.append(f"data: {', '.join(data_missing)} could not be resolved; the preset trains on mock data with "
                     "a NullTokenizer until you fill them in (see the commented lines under data:)")
    for dest, value in settings.items():
        if isinstance(value, str) and ("'" in value or '"' in value):
            notes.append(f"{flags.flag_of.get(dest, dest)} {value}: the value holds quote characters; bash passes "
                         "them on like this (quotes inside an array element are not removed)")
    own = {k: why for k, v in env.items() if not redaction.is_secret(k, v)
           and (why := script_env.plumbing(k, v, words)) is not None}
    env_ok = {k: v for k, v in env.items() if not unresolved_names(v) and not redaction.is_secret(k, v)
              and k not in MACHINE_ENV and k not in own}
    for k in env:
        if k in own:
            notes.append(f"export {k}={_comment(env[k])}: {own[k]}; not carried")
        elif redaction.is_secret(k, env[k]):
            redaction.remember(k, env[k])  # nor in the report or any other output
            notes.append(f"export {k}: a secret, not copied into the preset (export it before launch)")
        elif k in MACHINE_ENV and not unresolved_names(env[k]):
            notes.append(f"export {k}={_comment(env[k])}: {MACHINE_ENV[k]} of the machine the script ran on, not "
                         "carried (elsewhere the ranks fail with it); add it under env: where it holds")
        elif k not in env_ok:
            notes.append(f"export {k}={_comment(env[k])}: not known without running the script")
    attention = attention_vars.translate(settings, env_ok)  # TE's attention variables, in the pin's words
    if attention.backend is not None:
        settings["attention_backend"] = attention.backend
        replaced["attention_backend"] = "the script's NVTE_*_ATTN exports, in the pin's words"
        translated.append(_comment(attention.translated))
    for name in attention.dropped:
        del env_ok[name]
    if attention.warning:
        warnings.append(_comment(attention.warning))
    for dest, value in list(settings.items()):  # a secret expanded into a flag ($HF_TOKEN) is not written either
        clean = redaction.scrub_values(value)
        if repr(clean) != repr(value):  # repr: a NaN is not equal to itself
            settings[dest] = clean
            replaced[dest] = "holds a secret, written as " + redaction.REDACTED
            notes.append(f"{flags.flag_of.get(dest, dest)}: holds a secret, written as {redaction.REDACTED} (give the "
                         "value with --set when you launch)")
    for key in [k for k, v in launcher.items() if _missing(v)]:
        notes.append(f"{key} {_comment(str(launcher.pop(key)))}: not known without running the script")
    per_node = launcher.get("gpus_per_node", 8)
    if nodes_unknown and (fewest := _fewest_nodes(settings, per_node)):
        nodes, needed = fewest
        if total:  # `mpirun -np 16`: the command's world is its count, whatever the layout needs
            if total % per_node == 0:
                divides = (total // per_node) % nodes == 0
                nodes = total // per_node
                why = (f", which one node's GPUs would not hold ({needed})" if divides else
                       f"; its layout ({needed}) does not divide {total} processes: Megatron stops there, and the "
                       "dry-run says so")
                notes.append(f"nodes {nodes}: the command's {total} processes in all, {per_node} on each node (the "
                             f"preset's gpus_per_node){why}")
                launcher["nodes"] = nodes
            else:
                notes.append(f"nodes: the command's {total} processes in all make no whole number of nodes of "
                             f"{per_node} GPUs (the preset's gpus_per_node), and its layout needs more than one "
                             f"node ({needed}); give --nodes and --gpus-per-node")
        else:
            notes.append(f"nodes {nodes}: the script's node count is decided where it runs (not known here); "
                         f"{nodes} nodes of {per_node} GPUs are the fewest whose GPUs its layout divides ({needed}), "
                         "where one node's do not; give --nodes where it runs on more")
            launcher["nodes"] = nodes
    read_as = source_name
    if environment:  # the header says what the script was read with, a secret's value redacted
        given = " ".join(f"{name}={redaction.REDACTED if redaction.is_secret(name, value) else shlex.quote(value)}"
                         for name, value in environment.items())
        read_as = f"{source_name} run with --env {given}"
    text = render_preset(read_as, settings, launcher, env_ok, commented, notes + warnings, lost, translated,
                         script=source_name)
    return Imported(text, words, settings, launcher, env_ok, replaced, notes, warnings, lost, translated,
                    undecided=source.undecided, set_aside=set_aside)


def _nodes_decided_where_it_runs(launch: flag_reader.Launch) -> bool:
    """Whether the command leaves its node count to where it runs: DeepSpeed's runner (its --hostfile, by default
    /job/hostfile), a job launcher around the command (srun, mpirun), or torchrun's --nnodes given a value not
    known here. torchrun and torch.distributed.launch without --nnodes run one node; python alone, one process."""
    runner, wrapped = launch.runner, any(flag_reader.job_launcher(w) for w in launch.wrapper)
    if not runner:
        return wrapped
    program = base_name(runner[0])
    torch_runner = program == "torchrun" or "-m" in runner and any(
        w.startswith("torch.distributed.") for w in runner)
    if torch_runner:
        return wrapped or any(w.startswith("--nnodes") for w in runner)
    if program == "deepspeed":  # --include names its hosts (`localhost:0,1` is this one): their count is known
        return wrapped or not any(w == "--include" or w.startswith("--include=") for w in runner)
    return wrapped


def _fewest_nodes(settings: Mapping[str, Any], per_node: Any) -> tuple[int, str] | None:
    """The fewest nodes of `per_node` GPUs whose world the layout divides (TP·PP·CP, and ETP·EP·PP for experts,
    as Megatron's parallel state asserts), with the product said; None where one node's GPUs do, or where a size is
    not a known count."""
    sizes = {name: settings.get(name, 1) for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                                      "context_parallel_size", "expert_model_parallel_size")}
    etp = settings.get("expert_tensor_parallel_size", sizes["tensor_model_parallel_size"])
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in [*sizes.values(), etp, per_node]):
        return None
    tp, pp, cp, ep = sizes.values()
    needed = math.lcm(tp * pp * cp, etp * ep * pp)
    if per_node % needed == 0 or needed // math.gcd(needed, per_node) > MAX_COUNT:  # more nodes than a cluster has
        return None
    said = f"TP·PP·CP = {tp * pp * cp}" + (f", ETP·EP·PP = {etp * ep * pp}" if ep > 1 else "")
    return needed // math.gcd(needed, per_node), said


def render_preset(source: str, settings: dict[str, Any], launcher: dict[str, Any], env: dict[str, str],
                  commented: dict[str, list[str]], notes: list[str], lost: Sequence[str] = (),
                  translated: Sequence[str] = (), script: str | None = None) -> str:
    """The preset's text. Every key and value is written by the YAML serializer (never pasted into the text), the
    comments are single flattened lines, and the text is read back and compared with what was meant: a value of the
    script (an ENV_VARS key with a newline and a colon, a list item with quotes) can only be that value."""
    lines = [f"# Imported by `launch import` from {_comment(source)}. Nothing of it was run."]
    if lost:
        lines.append(f"# LOST ({len(lost)}; written because --accept-loss was given): the script's model, numerics "
                     "or layout differ here:")
        lines += [f"#   {_comment(n)}" for n in lost]
    if translated:
        lines.append("# Carried in the pin's words (another release's or a fork's flag, a value in the pin's type):")
        lines += [f"#   {_comment(n)}" for n in translated]
    lines.append("# Not carried (each thing of the source that this preset does not hold, and why):")
    lines += [f"#   {_comment(n)}" for n in notes] or ["#   nothing"]
    description = "imported from " + base_name(show(script if script is not None else source))
    lines += _dump({"description": description}, 0)
    carried = [key for key in ("nodes", "gpus_per_node", "master_addr", "master_port") if key in launcher]
    meant_launcher: dict[str, Any] = {key: launcher[key] for key in carried
                                      if not (key == "master_addr" and launcher[key] == "localhost")}
    meant_launcher.update(transformer_engine=True, apex=True)
    if env:
        meant_launcher["env"] = dict(env)
    lines += ["launcher:", f"  # transformer_engine, apex: {_comment(KERNELS_NOTE)}", *_dump(meant_launcher, 2)]
    sections: dict[str, dict[str, Any]] = {}
    for dest, value in settings.items():
        sections.setdefault(section_of(dest), {})[dest] = value
    lines.append("megatron:")
    meant_megatron: dict[str, Any] = {}
    for name in ("model", "parallel", "training", "data", "checkpoint", "logging"):
        notes_here = [f"    # {_comment(c.removeprefix('# '))}" for c in commented.get(name, [])]
        if sections.get(name):
            lines += [f"  {name}:", *notes_here, *_dump(sections[name], 4)]
            meant_megatron[name] = sections[name]
        elif notes_here:  # a section of comments only must still be a mapping
            lines += [f"  {name}: {{}}", *notes_here]
            meant_megatron[name] = {}
    if not meant_megatron:
        lines[-1] = "megatron: {}"
    text = "\n".join(lines) + "\n"
    meant = {"description": description, "launcher": meant_launcher, "megatron": meant_megatron}
    if _canonical(untrusted.load_yaml(text, "the imported preset")) != _canonical(meant):
        raise RuntimeError("launch import wrote a preset that does not read back as the settings it meant")
    return text


def _canonical(value: Any) -> Any:
    """`value` with NaN made comparable (NaN != NaN): `--lr nan` reads back as the NaN it wrote, which the dry-run
    then refuses with its own reason."""
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def _dump(mapping: dict[str, Any], indent: int) -> list[str]:
    """`mapping` as YAML lines by the serializer, indented; lists of scalars in flow style ([a, b])."""
    text = yaml.dump(mapping, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False,
                     width=1 << 30)
    return [" " * indent + line for line in text.splitlines()]


class _Dumper(yaml.SafeDumper):
    """Block mappings, and lists in one line ([a, b]) as a reader of a preset expects them."""


_Dumper.add_representer(list, lambda dumper, value: dumper.represent_sequence(
    "tag:yaml.org,2002:seq", value, flow_style=True))
