"""An existing training script or flag list → a preset in this launcher's format, with a comment for every
line it could not carry.

Sources: a bash script (upstream's examples/*/train_*.sh shape: variables, flag arrays, $((…)), exports,
torchrun … pretrain_gpt.py …), a single command line or bare flag list, or a YAML mapping in the shape of
Megatron's functional-test configs (MODEL_ARGS: {--num-layers: 24, …}, ENV_VARS: {…}). Nothing is executed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from launcher.errors import UserError
from launcher.importer import flags as flag_reader
from launcher.importer.bash_subset import MARK, ShellSyntaxError, read_script, show, unresolved_names

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


def _comment(text: str) -> str:
    return " ".join(show(text).split())


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
        else:
            words += [flag, *(str(value).split() if isinstance(value, str) else [str(value)])]
    env = {str(k): ("1" if v is True else "0" if v is False else str(v))
           for k, v in (data.get("ENV_VARS") or {}).items()}
    for key in data:
        if key not in ("MODEL_ARGS", "ENV_VARS") and "MODEL_ARGS" in data:
            notes.append(f"{key}: not a Megatron or launcher setting")
    return [], words, env, notes


def read_source(text: str) -> tuple[list[str], list[str], dict[str, str], list[str]]:
    """(runner words, Megatron words, exported environment, lines not carried) from any accepted source."""
    stripped = text.lstrip()
    if not stripped.startswith(("#!", "--", "torchrun", "python")):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            data = None
        if isinstance(data, dict) and ("MODEL_ARGS" in data or all(str(k).startswith("--") for k in data)):
            return _from_yaml_mapping(data)
    try:
        reading = read_script(text)
    except ShellSyntaxError as exc:
        raise UserError(f"cannot read the script: {exc}", "import reads bash scripts, one command line, or a "
                        "YAML mapping of flags (MODEL_ARGS)") from None
    notes = [f"line {line}: {_comment(why)}" for line, why in reading.skipped]
    training = [c for c in reading.commands if flag_reader.find_entry(c.argv) is not None]
    if not training:
        bare = [c for c in reading.commands if c.argv and c.argv[0].startswith("--")]
        if not bare:
            raise UserError("no training command found: no line runs pretrain_gpt.py and none is a list of flags",
                            "import reads scripts that run `torchrun … pretrain_gpt.py …` (or python pretrain_gpt.py)")
        words = [w for c in bare for w in c.argv]
        runner: list[str] = []
        others = [c for c in reading.commands if c not in bare]
    else:
        command = training[-1]
        launch = flag_reader.split_launch(command.argv)
        runner, words = launch.runner + [launch.script], launch.script_args
        others = [c for c in reading.commands if c is not command]
        if len(training) > 1:
            notes.append(f"the script runs pretrain_gpt.py {len(training)} times; the last (line {command.line}) "
                         "is imported")
    for c in others:
        notes.append(f"line {c.line}: not carried (not the training command): {_comment(' '.join(c.argv))}")
    return runner, words, dict(reading.shell.exports), notes


# -- the preset -------------------------------------------------------------------------------------------------

def import_source(text: str, source_name: str) -> Imported:
    runner, words, env, notes = read_source(text)
    launcher: dict[str, Any] = {}
    if runner:
        launch = flag_reader.split_launch([*runner[:-1], runner[-1]])
        launcher.update(launch.launcher)
        notes += [f"{runner[0]} {_comment(d)}" for d in launch.dropped]
        if flag_reader.find_entry(runner) is not None and runner[0] in ("python", "python3") and "-m" not in runner:
            notes.append("the script starts pretrain_gpt.py with python directly (one process per GPU, e.g. srun); "
                         "the launcher uses torchrun")
    flags = flag_reader.read_flags(words)
    notes += [f"{_comment(u)}" for u in flags.unknown]
    notes += [f"{flag} is given more than once; the last value is carried (as argparse does)"
              for flag in flags.repeated]
    settings = dict(flags.settings)
    replaced: dict[str, str] = {}
    commented: dict[str, list[str]] = {}  # section → commented-out lines

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
    if data_missing:
        for dest in ("data_path", "train_data_path", "valid_data_path", "test_data_path", "data_args_path",
                     "per_split_data_args_path", "vocab_file", "merge_file", "tokenizer_model", "tokenizer_type",
                     "split"):
            if dest in settings and dest not in unresolved:
                comment_out(dest, settings.pop(dest), "belongs to the data to fill in")
                replaced[dest] = "belongs to the script's data, replaced by mock data"
        stand_ins = {"mock_data": True, "tokenizer_type": "NullTokenizer", "vocab_size": 50257}
        for dest, value in stand_ins.items():
            if dest not in settings:
                settings[dest] = value
                replaced[dest] = "stands in for the data to fill in"
        notes.append(f"data: {', '.join(data_missing)} could not be resolved; the preset trains on mock data with "
                     "a NullTokenizer until you fill them in (see the commented lines under data:)")
    for dest, value in settings.items():
        if isinstance(value, str) and ("'" in value or '"' in value):
            notes.append(f"{flags.flag_of.get(dest, dest)} {value}: the value holds quote characters; bash passes "
                         "them on like this (quotes inside an array element are not removed)")
    env_ok = {k: v for k, v in env.items() if not unresolved_names(v)}
    for k in set(env) - set(env_ok):
        notes.append(f"export {k}={_comment(env[k])}: not known without running the script")
    text = render_preset(source_name, settings, launcher, env_ok, commented, notes)
    return Imported(text, words, settings, launcher, env_ok, replaced, notes)


def render_preset(source: str, settings: dict[str, Any], launcher: dict[str, Any], env: dict[str, str],
                  commented: dict[str, list[str]], notes: list[str]) -> str:
    lines = [f"# Imported by `launch import` from {_comment(source)}. Nothing of it was run.",
             "# Not carried (each thing of the source that this preset does not hold, and why):"]
    lines += [f"#   {_comment(n)}" for n in notes] or ["#   nothing"]
    lines.append(f"description: {yaml_value('imported from ' + source.rsplit('/', 1)[-1])}")
    lines.append("launcher:")
    for key in ("nodes", "gpus_per_node", "master_addr", "master_port"):
        if key in launcher and not (key == "master_addr" and launcher[key] == "localhost"):
            lines.append(f"  {key}: {yaml_value(launcher[key])}")
    lines.append(f"  transformer_engine: true   # {KERNELS_NOTE}")
    lines.append("  apex: true")
    if env:
        lines.append("  env:")
        lines += [f"    {k}: {json.dumps(v)}" for k, v in env.items()]
    lines.append("megatron:")
    sections: dict[str, list[str]] = {}
    for dest, value in settings.items():
        sections.setdefault(section_of(dest), []).append(f"    {dest}: {yaml_value(value)}")
    for name in ("model", "parallel", "training", "data", "checkpoint", "logging"):
        notes_here = [f"    {c}" for c in commented.get(name, [])]
        if sections.get(name):
            lines += [f"  {name}:", *notes_here, *sections[name]]
        elif notes_here:  # a section of comments only must still be a mapping
            lines += [f"  {name}: {{}}", *notes_here]
    return "\n".join(lines) + "\n"
