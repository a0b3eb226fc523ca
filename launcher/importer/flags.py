"""A training command's words → the launcher's settings: torchrun's options, and Megatron's flags read by the
argument catalog as Megatron's own parser would read them (no torch)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from launcher import redaction
from launcher.errors import UserError, did_you_mean
from launcher.importer import computed, legacy
from launcher.importer.words import MARK, MAX_COUNT, base_name, count, is_count
from launcher.megatron import args as megatron_args
from launcher.pipeline.preset import type_megatron_value

ENTRY_SCRIPTS = ("pretrain_gpt.py",)
# torchrun / torch.distributed.run options → launcher settings (both spellings, --opt=value too)
TORCHRUN_SETTINGS = {"nproc_per_node": "gpus_per_node", "nnodes": "nodes", "master_addr": "master_addr",
                     "master_port": "master_port",
                     "num_gpus": "gpus_per_node", "num_nodes": "nodes"}  # the last two: the deepspeed launcher's
TORCHRUN_DROPPED = {"node_rank": "the launcher gives each node its rank (torchrun rendezvous)",
                    "rdzv_endpoint": "the launcher sets the rendezvous endpoint",
                    "rdzv_backend": "the launcher sets the rendezvous backend",
                    "rdzv_id": "the launcher names the rendezvous", "standalone": "the launcher picks it for one node",
                    # torch.distributed.launch's: each rank's LOCAL_RANK in its environment instead of a --local_rank
                    # argument, which torchrun (the launcher's) always does and Megatron reads
                    "use_env": "each rank's local rank in its environment (LOCAL_RANK), as torchrun, which the "
                               "launcher runs, always gives it"}
TORCHRUN_SWITCHES = {"standalone", "no_python", "module", "run_path", "use_env"}


# Unknown flags whose names say they only log, name a path, an experiment or where the processes meet (a fork's
# --master-addr: the launcher gives its own rendezvous), profile, or count data-loading workers (Megatron-DeepSpeed's
# and bigcode's --valid-num-workers: the sampler, not the workers, orders the samples): dropped with a note. Any
# other unknown flag may change the model, its numerics or its layout, and is reported as lost.
LOGGING_NAME = re.compile(r"(^|-)(log|logs|logging|tensorboard|wandb|comet|mlflow|profile|profiler|profiling|"
                          r"timing|timers|tracking|print|report|monitor|verbose|debug)(-|$)")
PLACE_NAME = re.compile(r"-(dir|path|file|name|project|entity|interval|tag|tags|url|addr|address|host|port|"
                        r"workers)$")
# ...unless the rest of the name is a part of the model: a place or an interval of a layer kind is the model's
# (Megatron-DeepSpeed's --expert-interval 2: every second layer an expert layer; MindSpeed-LLM's
# --full-attention-interval 4; AIAK's --model-name deepseek-v3; FlagScale's --tokenizer-path; a --config-file)
MODEL_WORDS = frozenset({
    "model", "arch", "architecture", "config", "cfg", "yaml", "spec", "layer", "layers", "expert", "experts", "moe",
    "attention", "attn", "head", "heads", "hidden", "ffn", "mlp", "embedding", "embeddings", "rope", "rotary", "norm",
    "tokenizer", "vocab", "merge", "merges", "token", "tokens", "pipeline", "stage", "stages", "tensor", "parallel",
    "dtype", "precision", "fp8", "fp16", "bf16", "quant", "quantization", "init", "weights"})


def harmless_by_name(flag: str) -> bool:
    """Whether an unknown flag's name says it only logs, names a place or an address, or counts loader workers."""
    name = flag.removeprefix("--").replace("_", "-").lower()
    if LOGGING_NAME.search(name):
        return True
    return bool(PLACE_NAME.search(name)) and not MODEL_WORDS & set(name.split("-"))


@dataclass
class Word:
    """One flag of a training command with its value words (or words without a flag), and what it becomes at the
    pin: `settings` (the pin's dest → typed value), applied in order as argparse would; `defaults` apply only where
    nothing else set that dest. kind: carried (a flag of the pin, typed as given), converted (the same value in the
    pin's type: 500000.0 → 500000), translated (another release's or a fork's flag of the same meaning), harmless
    (dropped: logging, paths), lost (its meaning is not carried)."""

    words: list[str]
    kind: str
    settings: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    why: str = ""
    # a fork's flag whose meaning depends on the rest of the job (only_with a choice, a size the job decides):
    # `settings` are what it becomes when that holds (read_flags, build.import_source decide)
    translation: legacy.Translation | None = None

    @property
    def text(self) -> str:
        return " ".join(self.words)


@dataclass
class Flags:
    """Megatron settings in the order given, and what could not become a setting."""

    settings: dict[str, Any] = field(default_factory=dict)
    flag_of: dict[str, str] = field(default_factory=dict)  # dest → the flag the script spelled
    unknown: list[str] = field(default_factory=list)  # "--flag value…: why", for lost and harmless words alike
    repeated: list[str] = field(default_factory=list)
    # a repeated flag → (the other flag that set the same setting before it, the setting), where they differ
    repeated_with: dict[str, tuple[str, str]] = field(default_factory=dict)
    words: list[Word] = field(default_factory=list)

    def of_kind(self, *kinds: str) -> list[Word]:
        return [w for w in self.words if w.kind in kinds]


def flag_table() -> dict[str, megatron_args.MegatronArg]:
    return {flag: arg for arg in megatron_args.catalog().values() for flag in arg.flags}


def _is_flag(word: str) -> bool:
    return word.startswith("--") and len(word) > 2


def _values_after(words: list[str], i: int) -> int:
    j = i + 1
    while j < len(words) and not _is_flag(words[j]):
        j += 1
    return j


def _typed(arg: megatron_args.MegatronArg, value: Any, flag: str) -> tuple[Any, str]:
    """(value in the pin's type, how it was converted or ""); UserError when no exact conversion exists."""
    choice = legacy.choices().get((arg.dest, value)) if isinstance(value, str) else None
    if choice is not None:  # a fork's name for one of the pin's choices (launcher/data/flag_translations.json)
        return (type_megatron_value(arg.dest, choice.pin, f"flag {flag}")[1],
                f"{flag} {value} → {choice.pin}: {choice.why} ({choice.origin})")
    try:
        return type_megatron_value(arg.dest, value, f"flag {flag}")[1], ""
    except UserError:
        exact = _exact(arg, value)
        if exact is None:
            raise
        given = value if isinstance(value, str) else " ".join(value)
        now = exact if isinstance(exact, str) else " ".join(map(str, exact))
        return type_megatron_value(arg.dest, exact, f"flag {flag}")[1], (
            f"{flag} {given} → {now}: the same value in the pin's type")


def _exact(arg: megatron_args.MegatronArg, value: Any) -> Any:
    """The same value written as the pin's type wants it, or None: 500000.0 or 5e5 for an integer, a choice in
    another case (rmsnorm → RMSNorm)."""
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if arg.type == "int":
            try:
                number = float(item)
            except ValueError:
                return None
            if not number.is_integer() or abs(number) > 2**53:
                return None
            out.append(str(int(number)))
        elif arg.choices is not None:
            fold = {str(c).lower().replace("-", "_"): c for c in arg.choices}
            match = fold.get(str(item).lower().replace("-", "_"))
            if match is None:
                return None
            out.append(str(match))
        else:
            return None
    return out if isinstance(value, list) else out[0]


# "did you mean" compares a flag with every name of the catalog: given for this many unknown flags of a command,
# so that a command of thousands of unknown flags is still read in bounded time
SUGGESTED_FLAGS = 200


# Flags that make Megatron take its settings from a file instead of the command line: the model is in that file,
# which the import does not read (megatron/training/arguments.py:147 → yaml_arguments.load_yaml: "argparse
# arguments will be ignored")
FROM_A_FILE = {"yaml_cfg": "at the pin Megatron builds every setting from this YAML file and ignores the command "
                           "line's flags (yaml_arguments.load_yaml), so the model, its numerics and its layout are "
                           "in the file, which the import does not read; write its settings as flags (or a preset) "
                           "and import those"}


def read_word(words: list[str], i: int, table: dict[str, megatron_args.MegatronArg],
              suggest: bool = True) -> tuple[Word, int, str | None]:
    """The flag at words[i] with its values → (Word, next index, the dest it sets directly or None)."""
    word = words[i]
    if not _is_flag(word):
        j = _values_after(words, i)
        after = " before any flag"
        if i > 0:
            k = i - 1
            while k > 0 and not _is_flag(words[k]):
                k -= 1
            after = f" after {words[k]}'s value" if _is_flag(words[k]) else ""
        blank = ""
        if any(not w.strip() for w in words[i:j]):  # shown as nothing: say what it is and where it comes from
            blank = (" (a word of blanks only, " + ", ".join(repr(w) for w in words[i:j] if not w.strip()) +
                     ": `\\ ` in the script, often a blank after a `\\` meant to continue the line)")
        return Word(words[i:j], "lost", why=f"word(s) without a flag{after}{blank}; Megatron's parser refuses them "
                                             "(unrecognized arguments)"), j, None
    flag, eq, inline = word.partition("=")
    translation = legacy.translation(flag)
    if translation is not None:
        return _translated(words, i, flag, eq, inline, translation)
    arg = table.get(flag)
    dashed = "--" + flag[2:].replace("_", "-")
    if arg is None and dashed != flag and (dashed in table or legacy.translation(dashed) is not None):
        return _respelled(words, i, dashed + eq + inline, table, suggest)
    if arg is None:
        j = _values_after(words, i)
        if not suggest:
            near = ""
        elif flag.startswith("--no-"):  # a switch-off: only the pin's switch-offs, never the setting it turns off
            near = did_you_mean(flag, [f for f in table if f.startswith(("--no-", "--disable-"))], n=3, cutoff=0.75)
        else:
            near = did_you_mean(flag.removeprefix("--").replace("-", "_"), megatron_args.catalog(), n=3,
                                cutoff=0.75)
        why = "not an argument of pretrain_gpt.py at the pin" + (f" ({near})" if near else "")
        harmless = harmless_by_name(flag)
        said = "; by its name it logs, profiles or names a path or an address" if harmless else ""
        return Word(words[i:j], "harmless" if harmless else "lost", why=why + said), j, None
    if arg.dest in FROM_A_FILE:
        j = i + 1 if eq else min(i + 2, _values_after(words, i))
        return Word(words[i:j], "lost", why=FROM_A_FILE[arg.dest]), j, None
    if arg.kind in ("true", "false", "bool"):
        on = arg.kind == "true" or (arg.kind == "bool" and not flag.startswith("--no-"))
        return Word([word], "carried", {arg.dest: on}), i + 1, arg.dest
    if eq:
        value: Any = inline
        j = i + 1
    elif arg.nargs is None:
        if i + 1 >= len(words):
            return Word([word], "lost", why="no value follows"), i + 1, None
        value, j = words[i + 1], i + 2
    else:
        j = i + 1
        count = arg.nargs if isinstance(arg.nargs, int) else None
        while j < len(words) and (count is None or j - i - 1 < count) and not _is_flag(words[j]):
            j += 1
        value = words[i + 1:j]
    try:
        typed, converted = _typed(arg, value, flag)
    except UserError as exc:
        return Word(words[i:j], "lost", why=exc.problems[0].message), j, None
    return Word(words[i:j], "converted" if converted else "carried", {arg.dest: typed}, why=converted), j, arg.dest


def _respelled(words: list[str], i: int, word: str, table: dict[str, megatron_args.MegatronArg],
               suggest: bool) -> tuple[Word, int, str | None]:
    """`--num_layers 24`: argparse reads only the pin's spelling, `--num-layers`; a fork that spells every flag with
    underscores (epfLLM/Megatron-LLM) means the same setting, so it is read as the pin's flag and said."""
    item, j, dest = read_word([*words[:i], word, *words[i + 1:]], i, table, suggest)
    item.words = words[i:j]
    spelled = f"{words[i].partition('=')[0]} is {word.partition('=')[0]} spelled with underscores"
    if item.kind in ("carried", "converted"):
        item.kind = "translated"
        item.why = f"→ {word.partition('=')[0]}: {spelled}" + (f"; {item.why}" if item.why else "")
    elif item.kind == "translated":
        item.why = f"{item.why}; {spelled}"
    else:
        item.why = f"{spelled}; {item.why}" if item.why else spelled
    return item, j, dest


def _translated(words: list[str], i: int, flag: str, eq: str, inline: str,
                translation: legacy.Translation) -> tuple[Word, int, str | None]:
    j = i + 1
    value: Any = None
    if translation.value == "list":
        j = _values_after(words, i)
        value = [inline] if eq else words[i + 1:j]
    elif translation.value:
        if eq:
            value = inline
        elif i + 1 < len(words) and not _is_flag(words[i + 1]):
            value, j = words[i + 1], i + 2
        else:
            return Word(words[i:j], "lost", why=f"no value follows ({translation.origin})"), j, None
    elif translation.valued_in and (eq or i + 1 < len(words) and _fork_switch_value(words[i + 1])):
        # the other fork's `--flag 1` / `--flag=false`: the value is the flag's, not a word without a flag
        value, j = (inline, j) if eq else (words[i + 1], i + 2)
        translation = replace(translation, origin=f"{translation.origin}; {translation.valued_in} gives it a "
                                                  f"true/false value, here {value}")
    given = words[i:j]
    if translation.by_value:
        row = _value_row(translation, value)
        if row is None and not (translation.to or translation.refuse or translation.harmless):
            known = ", ".join(translation.by_value)
            return Word(given, "lost", why=f"a value the table does not know (it knows {known}) "
                                          f"({translation.origin})"), j, None
        translation = row or translation  # another value: the flag's own row
    if translation.only_with:  # harmless unless the script gave the fork's choice that reads it (read_flags)
        try:
            pending = {dest: _typed_to(dest, value if v == "$value" else v, flag) for dest, v in translation.to.items()}
        except UserError:
            pending = {}
        return Word(given, "harmless", pending, why=f"{translation.harmless} ({translation.origin})",
                    translation=translation if pending else None), j, None
    if DATA_PARALLEL in translation.to.values():  # sized by the job's GPUs: build.import_source decides
        return Word(given, "lost", why=f"{translation.unknown} ({translation.origin}); instead: {translation.instead}",
                    translation=translation), j, None
    if translation.harmless:
        return Word(given, "harmless", why=f"{translation.harmless} ({translation.origin})"), j, None
    if translation.computed:  # a formula of other settings: computed once every flag is read (read_flags)
        return Word(given, "lost", why=_refused(translation), translation=translation), j, None
    if translation.refuse:
        return Word(given, "lost", why=f"{translation.refuse} ({translation.origin}); instead: {translation.instead}"
                    if translation.instead else f"{translation.refuse} ({translation.origin})"), j, None
    try:
        settings = {dest: _typed_to(dest, value if v == "$value" else v, flag) for dest, v in translation.to.items()}
        defaults = {dest: _typed_to(dest, v, flag) for dest, v in translation.unless_given.items()}
    except UserError as exc:
        return Word(given, "lost", why=f"{exc.problems[0].message} ({translation.origin})"), j, None
    shown = ", ".join(f"{d} {v}" for d, v in {**settings, **defaults}.items())
    return Word(given, "translated", settings, defaults,
                why=f"→ {shown}: {translation.why} ({translation.origin})"), j, None


def _value_row(translation: legacy.Translation, value: object) -> legacy.Translation | None:
    """The row for this value; a number matches by what the fork's argparse type reads (`01` is 1, `1.00` is 1.0)."""
    if not isinstance(value, str):
        return None
    if value in translation.by_value:
        return translation.by_value[value]
    kind = {"int": int, "float": float}.get(translation.value)
    if kind is None:
        return None
    try:
        number = kind(value)
    except ValueError:
        return None
    for known, row in translation.by_value.items():
        try:
            if kind(known) == number:
                return row
        except ValueError:
            continue
    return None


# what a fork's true/false flag reads as its value (HabanaAI's `type=lambda x: x.lower() in ['true', '1']`): a word
# of these, or one not known here (`--use-fused-rmsnorm $USE_FUSED_RMSNORM`); any other word stays a stray one
_SWITCH_VALUE = re.compile(r"(?i)true|false|1|0|yes|no|on|off")


def _fork_switch_value(word: str) -> bool:
    return bool(_SWITCH_VALUE.fullmatch(word)) or (MARK in word and not _is_flag(word) and " " not in word)


# a `to` value of the table: the job's data-parallel size, GPUs ÷ (TP · PP) (MegaBlocks' expert-parallel group)
DATA_PARALLEL = "$data_parallel_size"


def _typed_to(dest: str, value: Any, flag: str) -> Any:
    arg = megatron_args.catalog()[dest]
    return _typed(arg, value, flag)[0]


def read_flags(words: list[str]) -> Flags:
    """Megatron flags → dest → typed value, as argparse would (last one wins; --x=value accepted); flags of other
    Megatron releases and of forks translated where their meaning is certain (launcher/data/flag_translations.json)."""
    table = flag_table()
    out = Flags()
    defaults: dict[str, Any] = {}
    given: dict[str, list[tuple[Word, Any]]] = {}  # dest → each word that set it, with its value
    i = 0
    while i < len(words):
        item, i, _ = read_word(words, i, table, suggest=len(out.unknown) < SUGGESTED_FLAGS)
        out.words.append(item)
        if item.kind in ("lost", "harmless"):
            out.unknown.append(f"{item.text}: {item.why}")
            continue
        for key, value in item.settings.items():
            given.setdefault(key, []).append((item, value))
            if key in out.settings:
                out.repeated.append(item.words[0])
                spelled = item.words[0].partition("=")[0]
                if out.flag_of.get(key, spelled) not in (spelled, "(translated)"):
                    out.repeated_with[item.words[0]] = (out.flag_of[key], key)
                del out.settings[key]  # argparse keeps the last; so does the preset, in the last place
            out.settings[key] = value
            out.flag_of[key] = item.words[0].partition("=")[0]
        defaults.update(item.defaults)
    for key, value in defaults.items():
        if key not in out.settings:
            out.settings[key] = value
            out.flag_of[key] = "(translated)"
    _asserted_by_the_fork(out, given)
    _read_with_fork_choice(out)
    _computed_translations(out)
    _dense_in_megatron_deepspeed(out)
    _recompute_chunk_in_megatron_deepspeed(out)
    _sequence_length_from_the_encoders(out)
    return out


def _asserted_by_the_fork(out: Flags, given: dict[str, list[tuple[Word, Any]]]) -> None:
    """A fork's flag that asserts a setting rather than setting it (Megatron-DeepSpeed's --no-pipeline-parallel
    asserts PP 1): where the script gives that setting another value too, the fork stops at start-up, so neither
    value is the script's run; the flag is lost (the script's own value of the setting stays, said beside it), not
    "given more than once"."""
    for item in out.of_kind("translated"):
        row = legacy.translation(item.words[0].partition("=")[0])
        if row is None or not row.asserts:
            continue
        for dest, value in item.settings.items():
            other = [(word, v) for word, v in given.get(dest, []) if word is not item and v != value]
            if not other:  # it asserts the value the script gives: nothing is given twice
                asserting = item.words[0].partition("=")[0]
                out.repeated = [w for w in out.repeated if w != item.words[0]
                                and out.repeated_with.get(w, ("", ""))[0] != asserting]
                continue
            word, v = other[-1]
            item.kind = "lost"
            item.why = (f"{row.asserts}, and the script gives {word.text} too: the fork stops at start-up "
                        f"({row.origin}); instead: drop one of them (--set {dest}={v} is the other's)")
            out.unknown.append(f"{item.text}: {item.why}")
            out.settings[dest], out.flag_of[dest] = v, word.words[0].partition("=")[0]
            out.repeated = [w for w in out.repeated if w not in (item.words[0], word.words[0])]


def _sequence_length_from_the_encoders(out: Flags) -> None:
    """`--encoder-seq-length N` without `--seq-length` (older GPT scripts): the pin's validate_args sets seq_length
    from it (megatron/training/arguments.py:1295); carried as seq_length, the same run, which the launcher's checks
    read (they refuse encoder_seq_length, an encoder-decoder model's, next to seq_length)."""
    if "seq_length" in out.settings or "encoder_seq_length" not in out.settings:
        return
    value = out.settings.pop("encoder_seq_length")
    out.flag_of.pop("encoder_seq_length", None)
    word = next(w for w in reversed(out.words) if "encoder_seq_length" in w.settings)
    word.settings = {"seq_length": value}
    word.kind = "translated"
    word.why = (f"→ seq_length {value}: without --seq-length, Megatron's validate_args takes the sequence length "
                "from --encoder-seq-length (megatron/training/arguments.py:1295)")
    out.settings["seq_length"] = value
    out.flag_of["seq_length"] = "(translated)"


def _refused(row: legacy.Translation, problem: str = "") -> str:
    said = f"{row.refuse}: {problem}" if problem else row.refuse
    return f"{said} ({row.origin}); instead: {row.instead}" if row.instead else f"{said} ({row.origin})"


# a setting whose flag the script gives with a value not known here (`--num-layers $L`), read by a formula
NOT_KNOWN = "$?"


def _dests_not_known(out: Flags) -> set[str]:
    """The settings whose flags were given but lost (a value not known, not of the setting's type)."""
    table = flag_table()
    dests: set[str] = set()
    for word in out.of_kind("lost"):
        flag = word.words[0].partition("=")[0] if word.words else ""
        row = legacy.translation(flag)
        dests |= set(row.to) if row is not None else {table[flag].dest} if flag in table else set()
    return dests


def _computed_translations(out: Flags) -> None:
    """Fork flags whose pin settings are a formula of their value and other settings as imported (ModelLink's
    --n-shared-experts N: N × moe_ffn_hidden_size): carried when every input is known, over the script's own value
    of the same setting (the fork reads the formula's); else lost with what is missing and the row's hint."""
    for word in out.words:
        row = word.translation
        if word.kind != "lost" or row is None or not row.computed:
            continue
        unknown = _dests_not_known(out)
        # a read whose flag is also given with a value not known (`--num-layers $L`, wherever it stands) is not known
        reads = {name: NOT_KNOWN if name in unknown else out.settings.get(name)
                 for name in row.computed.get("reads", [])}
        also = [name for name in row.computed.get("not_with", []) if name in out.settings]
        if also:  # the fork keeps the script's own value or refuses both: not a formula then
            word.why = _refused(row, f"the script gives {' and '.join(also)} too")
            continue
        try:
            raw = computed.compute(row.computed["formula"], _given_value(word) if row.value else None, reads)
            settings = {dest: _typed_to(dest, v, word.words[0]) for dest, v in raw.items()}
        except (computed.NotComputable, UserError) as exc:
            problem = exc.problems[0].message if isinstance(exc, UserError) else str(exc)
            word.why = _refused(row, problem)
            continue
        for key, value in settings.items():
            out.settings.pop(key, None)
            out.settings[key] = value
            out.flag_of[key] = word.words[0].partition("=")[0]
        inputs = ", ".join(f"{name} {value}" for name, value in reads.items() if value is not None)
        inputs = f"{word.text} and {inputs}" if inputs else word.text
        shown = ", ".join(f"{d} {v}" for d, v in settings.items()) or "nothing (a count of 0)"
        word.settings = settings
        word.kind = "translated"
        word.why = f"→ {shown}, computed from {inputs}: {row.why} ({row.origin})"


def _given_value(word: Word) -> str:
    flag, eq, inline = word.words[0].partition("=")
    return inline if eq else (word.words[1] if len(word.words) > 1 else "")


def _read_with_fork_choice(out: Flags) -> None:
    """A fork's flag that its code reads only for one of its choices (ModelLink's --tokenizer-name-or-path, read for
    --tokenizer-type PretrainedFromHF): carried when the script's last word for that setting gave the choice, over
    any other value of the same setting (the fork reads only this one then)."""
    for word in out.words:
        row = word.translation
        if word.kind != "harmless" or row is None or not row.only_with:
            continue
        chosen = True
        for setting, fork_value in row.only_with.items():
            last = next((w for w in reversed(out.words) if setting in w.settings and w.kind != "harmless"), None)
            chosen = chosen and last is not None and _given_value(last) == fork_value
        if not chosen:
            continue
        for key, value in word.settings.items():
            out.settings.pop(key, None)
            out.settings[key] = value
            out.flag_of[key] = word.words[0].partition("=")[0]
        shown = ", ".join(f"{d} {v}" for d, v in word.settings.items())
        word.kind, word.why = "translated", f"→ {shown}: {row.why} ({row.origin})"


def data_parallel_translations(out: Flags, gpus: int | None) -> None:
    """Fork flags sized by the job's data-parallel size (MegaBlocks' --moe-expert-model-parallelism: its experts are
    sharded over the data-parallel group), given `gpus` (nodes × GPUs per node, None when the script does not say):
    carried when the size is certain and the pin can hold it (it divides the experts), else they stay lost."""
    for word in out.words:
        row = word.translation
        if word.kind != "lost" or row is None or DATA_PARALLEL not in row.to.values():
            continue
        layout = [out.settings.get(k, 1) for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                                    "context_parallel_size")]
        if gpus is None or not all(isinstance(n, int) and n > 0 for n in layout):
            continue
        tp, pp, cp = layout
        experts = out.settings.get("num_experts")
        size = gpus // (tp * pp) if gpus % (tp * pp) == 0 else 0
        problem = ("the fork has no context parallelism" if cp != 1
                   else f"{gpus} GPUs do not divide into TP {tp} · PP {pp}" if not size
                   else "no --num-experts is given" if not isinstance(experts, int)
                   else f"its data-parallel size {size} does not divide the {experts} experts (MegaBlocks then "
                        "splits each expert's hidden units, which the pin does not)" if experts % size else "")
        if problem:
            word.why = f"{row.unknown}: {problem} ({row.origin}); instead: {row.instead}"
            continue
        settings = {dest: _typed_to(dest, size if v == DATA_PARALLEL else v, word.words[0])
                    for dest, v in row.to.items()}
        for key, value in settings.items():
            if key in out.settings:
                continue  # the script's own --expert-model-parallel-size stands
            out.settings[key] = value
            out.flag_of[key] = word.words[0]
        word.settings = settings
        shown = ", ".join(f"{d} {v}" for d, v in settings.items())
        word.kind, word.why = "translated", f"→ {shown} ({gpus} GPUs ÷ (TP {tp} · PP {pp})): {row.why} ({row.origin})"


# Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed megatron/arguments.py: --num-experts, default [1]; its MoE
# examples: "EP_SIZE 1 means dense model without MoE") builds no MoE layer for one expert; the pin's --num-experts 1
# builds a one-expert MoE (a router, an expert MLP): another model.
DEEPSPEED_ORIGIN = "(Megatron-DeepSpeed"


def _dense_in_megatron_deepspeed(out: Flags) -> None:
    """A Megatron-DeepSpeed script's `--num-experts 1` is its dense default: carried as no MoE, and said."""
    if out.settings.get("num_experts") != 1 or out.flag_of.get("num_experts") != "--num-experts":
        return
    if not any(DEEPSPEED_ORIGIN in word.why for word in out.words):
        return
    del out.settings["num_experts"], out.flag_of["num_experts"]
    for word in out.words:
        if "num_experts" in word.settings:
            word.settings = {k: v for k, v in word.settings.items() if k != "num_experts"}
            word.kind = "translated"
            word.why = ("→ no MoE: Megatron-DeepSpeed's --num-experts 1 is its default, a dense model (the pin's "
                        "--num-experts 1 would build a one-expert MoE)")


def _recompute_chunk_in_megatron_deepspeed(out: Flags) -> None:
    """Megatron-DeepSpeed's --recompute-num-layers defaults to 1 (megatron/arguments.py); the pin's to None, and its
    full recompute then fails an assert: a fork's script that gives no chunk meant 1 layer."""
    if out.settings.get("recompute_granularity") != "full" or "recompute_num_layers" in out.settings:
        return
    if not any(DEEPSPEED_ORIGIN in word.why for word in out.words):
        return
    word = next((w for w in reversed(out.words) if "recompute_granularity" in w.settings), None)
    if word is None:
        return
    out.settings["recompute_num_layers"] = 1
    out.flag_of["recompute_num_layers"] = "(translated)"
    word.settings = {**word.settings, "recompute_num_layers": 1}
    said = ("recompute_num_layers 1: Megatron-DeepSpeed's default chunk of full recompute (the pin has no default "
            "and asserts one is given)")
    word.why = f"{word.why}; and {said}" if word.kind == "translated" else f"→ recompute_granularity full, {said}"
    word.kind = "translated"


@dataclass
class Launch:
    """A training command split into its wrappers (numactl …, srun …), runner (torchrun …), entry script and the
    script's words."""

    runner: list[str]
    script: str
    script_args: list[str]
    launcher: dict[str, Any] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    wrapper: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # what the wrapper exports to every rank (mpirun -x A=1)
    # the entry goes to a program of the script's own (`srun … apptainer exec IMG launch.sh pretrain_gpt.py …`)
    via_program: bool = False
    # the job launcher's count of processes on each node, given without a count of nodes or of all processes
    # (`mpirun --npernode 8`, `jsrun -r 6`): it runs on every node of the job, as many as the job has
    per_node_only: str = ""
    # the job launcher's count of all its processes, given without a count of nodes or per node (`mpirun -np 16`)
    total_only: str = ""
    # what is said of the runner's own options (torchrun's, deepspeed's), said after the runner's name, not the
    # wrapper's (`srun … torchrun --master-port=$P`)
    runner_notes: list[str] = field(default_factory=list)
    # torchrun given no --nproc_per_node: its processes a node are $PET_NPROC_PER_NODE, else 1
    nproc_unsaid: bool = False
    # the runner note of a count that is the node's visible GPUs (`torchrun --nproc_per_node gpu`, deepspeed with no
    # count or hostfile): CUDA_VISIBLE_DEVICES, where the script sets it, gives it (build.import_source)
    visible_gpus: str = ""

    @property
    def runner_name(self) -> str:
        """Whose options the runner's words are: the module of `python -m torch.distributed.launch`, else the
        program."""
        if not self.runner:
            return ""
        program = base_name(self.runner[0])
        if program.startswith("python") and "-m" in self.runner[:-1]:
            return self.runner[self.runner.index("-m") + 1]
        return program

    @property
    def per_task(self) -> bool:
        """pretrain_gpt.py starts once per process of the job launcher (srun, mpirun): by python directly, or by a
        launch script that runs python with the arguments it is given."""
        program = base_name(self.runner[0]) if self.runner else ""
        return program.startswith("python") and "-m" not in self.runner and not self.python_launcher() \
            or self.via_program

    def python_launcher(self) -> str:
        """The launcher of the script's own that python runs before the entry (`python3 run.py --include
        localhost:0,1 pretrain_gpt.py …`, Ascend's DeepSpeed-style run.py): it starts the processes, as many as it
        decides; "" where python runs the entry itself."""
        if not self.runner or not base_name(self.runner[0]).startswith("python"):
            return ""
        for word in self.runner[1:]:
            if word == "-m":
                return ""  # python -m torch.distributed.run: read as the runner it is
            if not word.startswith("-"):
                return word if word.endswith(".py") else ""
        return ""


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# Options that set a variable for every rank or container, as NAME=VALUE in the next word (or after `=`): Open MPI's
# -x, jsrun's -E/--env, Cray PALS mpiexec's --env, docker/podman/enroot -e and apptainer --env; MPICH/Intel MPI's
# -genv/-env take NAME VALUE as two words; srun's --export a comma-separated list (ALL,NAME=VALUE,…)
ENV_PAIR_OPTIONS = {"-x", "--x", "-E", "--env", "-e", "-genv", "-env", "--genv"}
EXPORT_LIST_OPTIONS = {"--export"}


def wrapper_env(wrapper: list[str]) -> dict[str, str]:
    """Variables a job launcher or container runtime sets for every rank (mpirun -x A=1, mpiexec -genv A 1, srun
    --export=ALL,A=1, jsrun -E A=1, docker -e A=1, env A=1): what the ranks see, and where a secret is passed on
    the command line, the value the report and every written file must not show (a bare `-x NAME` passes the
    caller's value on: nothing to carry)."""
    out: dict[str, str] = {}
    k = 0
    after_env = False  # `env A=1 B=2 prog`: the assignments right after env
    while k < len(wrapper):
        word = wrapper[k]
        option, eq, inline = word.partition("=")
        if after_env and eq and ENV_NAME.fullmatch(option):
            out[option] = inline
            k += 1
            continue
        after_env = base_name(word) == "env"
        given = inline if eq else wrapper[k + 1] if k + 1 < len(wrapper) else ""
        if option in EXPORT_LIST_OPTIONS:
            for item in given.split(","):
                name, pair, value = item.partition("=")
                if pair and ENV_NAME.fullmatch(name):
                    out[name] = value
            k += 1 if eq else 2
        elif option in ENV_PAIR_OPTIONS:
            name, pair, value = given.partition("=")
            if pair and ENV_NAME.fullmatch(name):
                out[name] = value
                k += 1 if eq else 2
            elif not eq and option in ("-genv", "-env", "--genv", "--env") and ENV_NAME.fullmatch(given) \
                    and k + 2 < len(wrapper):
                out[given] = wrapper[k + 2]
                k += 3
            else:
                k += 1
        else:
            k += 1
    return out


# A flag no Megatron takes whose name says it holds a credential (a fork's or a logger's --wandb-api-key, --hf-token):
# its value is shown in no note. Narrower than redaction's rule for variables: the pin's own --fim-pad-token or
# --apply-query-key-layer-scaling hold no secret.
CREDENTIAL_FLAG = re.compile(r"(?:API|ACCESS|SECRET|PRIVATE)_?KEY|PASSWORD|PASSWD|PASSPHRASE|SECRET|CREDENTIAL"
                             r"|(?:^|_)(?:HF|HUB|AUTH|ACCESS|API|BEARER|WANDB)_?TOKEN$|^TOKEN$")
# a tool's `login` subcommand takes the credential as its argument (`wandb login KEY`, `hf auth login TOKEN`)
LOGIN = "login"

_ASSIGNMENT = re.compile(r"(?<![\w-])([A-Za-z_][A-Za-z0-9_]*)=([^,\s]*)")


def _credential_option(word: str) -> bool:
    name = word.lstrip("-").partition("=")[0]
    return word.startswith("-") and bool(name) and CREDENTIAL_FLAG.search(name.replace("-", "_").upper()) is not None


def shown_words(words: Sequence[str]) -> str:
    """The words as a note shows them, with a secret's value as <redacted>: passed as an environment option this
    reader does not know (`--foo-env DB_PASSWORD pw`, `--vars=A=1,DB_PASSWORD=pw`), as a credential option's value
    (`--token X`, `--api-key=X`), or as the argument of a tool's `login` (`wandb login KEY`)."""
    out = []
    logging_in = False
    for k, word in enumerate(words):
        before = words[k - 1] if k else ""
        logging_in = logging_in or before == LOGIN
        if (ENV_NAME.fullmatch(before) and redaction.is_secret(before)) or _credential_option(before) \
                or (logging_in and not word.startswith("-")):
            out.append(redaction.REDACTED)
            continue
        if _credential_option(word) and "=" in word:
            out.append(word.partition("=")[0] + "=" + redaction.REDACTED)
            continue
        out.append(_ASSIGNMENT.sub(lambda m: f"{m[1]}={redaction.REDACTED}" if redaction.is_secret(m[1], m[2])
                                   else m[0], word))
    return " ".join(out)


# the program that starts the entry script, whose process counts the import reads (a job launcher's are read apart);
# anything before it wraps it (numactl, nsys profile, taskset, srun, …)
RUNNER = re.compile(r"(torchrun|python[0-9.]*|deepspeed|accelerate|msrun)")
# MindSpore's msrun (MindSpeed-LLM's `--ai-framework mindspore` jobs): --worker_num processes in all, --local_worker_num
# on this node, each 8 unless given (msrun --help); the nodes are worker_num / local_worker_num
MSRUN_COUNTS = {"worker_num": "processes in all", "local_worker_num": "processes on each node"}
MSRUN_DEFAULT = 8
# Process counts of the job launchers that start one process per GPU with `python pretrain_gpt.py` (srun, mpirun)
PER_NODE_OPTIONS = {"--ntasks-per-node", "-npernode", "--npernode", "-ppn", "--ppn", "--tasks-per-node",
                    "--num_gpus", "--num-gpus"}  # the last two: `deepspeed --no_python … bash -c "python …"`
NODE_OPTIONS = {"-N", "--nodes", "--num_nodes", "--num-nodes"}
TOTAL_OPTIONS = {"-np", "-n", "--np", "--ntasks"}
HOST_OPTIONS = {"-H", "--host", "-host", "--hosts", "-hosts"}  # Open MPI's and MPICH's lists of hosts (`h1:8,h2:8`)
HOST_LIST = re.compile(r"[\w.-]+(?::[0-9]+)?(?:,[\w.-]+(?::[0-9]+)?)*")


def find_entry(argv: list[str]) -> int | None:
    for k, word in enumerate(argv):
        if any(word == s or word.endswith("/" + s) for s in ENTRY_SCRIPTS):
            return k
    return None


def split_launch(argv: list[str]) -> Launch:
    at = find_entry(argv)
    assert at is not None
    starts = [k for k, word in enumerate(argv[:at]) if RUNNER.fullmatch(base_name(word))]
    own = not starts and at > 0 and _own_program(argv[at - 1], argv[at - 2] if at > 1 else "")
    start = starts[-1] if starts else (at - 1 if own else 0)
    launch = Launch(argv[start:at], argv[at], argv[at + 1:], wrapper=argv[:start], via_program=own)
    if own:
        launch.dropped.append(f"{argv[at - 1]} is given {argv[at]}: a program the import does not read, taken as a "
                              "launch script that runs `python " + argv[at] + " ARGS` once per task")
    launch.env = wrapper_env(launch.wrapper)
    if launch.python_launcher():
        launch.dropped.append(f"runs {launch.python_launcher()}, a launcher program the import does not read, which "
                              "starts pretrain_gpt.py itself: how many processes it starts is not known here; give "
                              "the preset's gpus_per_node and nodes (its options are not carried)")
        return launch
    if launch.wrapper:
        launch.dropped.append(f"runs under `{shown_words(launch.wrapper)}`: a wrapper the launcher does not carry "
                              "(the launcher starts torchrun itself)")
    runner = launch.runner
    say = launch.runner_notes.append
    # `python -m torch.distributed.launch --use_env`: the words after the module are the module's options, not python's
    python = bool(runner) and base_name(runner[0]).startswith("python")
    module_at = runner.index("-m") + 1 if python and "-m" in runner[:-1] else 0
    counts: dict[str, int] = {}  # accelerate's --num_processes (all machines) and --num_machines
    msrun: dict[str, int] = {}  # msrun's --worker_num and --local_worker_num
    msrun_unknown = False
    k = 0
    while k < len(runner):
        word = runner[k]
        if not word.startswith("-"):
            k += 1
            continue
        if python and (k < module_at or not module_at and not word.startswith("--")):
            k += 2 if word == "-m" else 1  # python's own options: -u, -O, -m torch.distributed.run
            continue
        name, eq, inline = word.lstrip("-").partition("=")
        name = name.replace("-", "_")
        if name in TORCHRUN_SWITCHES:
            if name in TORCHRUN_DROPPED and _torch_launcher(runner):
                say(f"{word}: {TORCHRUN_DROPPED[name]}")
            k += 1
            continue
        # an option followed by another is a switch (accelerate's --multi_gpu): it takes no value
        takes = not eq and k + 1 < len(runner) and not runner[k + 1].startswith("-")
        value = inline if eq else (runner[k + 1] if takes else "")
        k += 2 if takes else 1
        program = base_name(runner[0])
        if program == "accelerate" and name in ("num_processes", "num_machines") and is_count(value):
            counts[name] = int(value)  # every process of every machine; per node once both are read
            continue
        if program == "deepspeed" and name in ("include", "i") and _hosts_gpus(value) is not None:
            hosts, per_host = _hosts_gpus(value)  # type: ignore[misc]
            launch.launcher.update({"gpus_per_node": per_host, **({"nodes": hosts} if hosts > 1 else {})})
            continue
        given = word if eq else f"{word} {value}".strip()  # `--opt=value` is said once, as written
        if program == "msrun" and name in MSRUN_COUNTS:
            if is_count(value):
                msrun[name] = int(value)
            else:
                msrun_unknown = True
                say(f"{given}: {'not known without running the script' if MARK in value else 'not a count'} "
                    f"({MSRUN_COUNTS[name]}); the preset's nodes and gpus_per_node are not set from it (give "
                    "--nodes and --gpus-per-node)")
            continue
        if name in ("nproc_per_node",) and value in ("gpu", "auto"):
            say(f"{given}: one process per GPU of the node, a count known only where it runs; "
                "give it as the preset's gpus_per_node (8 unless set)")
            launch.visible_gpus = launch.runner_notes[-1]
            continue
        elastic = re.fullmatch(r"([0-9]+):([0-9]+)", value) if name == "nnodes" else None
        if elastic and elastic.group(1) == elastic.group(2):
            value = elastic.group(1)  # --nnodes=2:2: a fixed size written as a range
        elif elastic:
            say(f"{given}: an elastic job of {elastic.group(1)} to {elastic.group(2)} nodes, as "
                "many as join; the launcher starts a fixed number (give it with --nodes)")
            continue
        if name in TORCHRUN_SETTINGS:
            setting = TORCHRUN_SETTINGS[name]
            if setting in ("nodes", "gpus_per_node") and is_count(value):
                launch.launcher[setting] = int(value)
            elif setting in ("nodes", "gpus_per_node") and re.fullmatch(r"[0-9]+", value):
                say(f"{given}: not a count of {'nodes' if setting == 'nodes' else 'processes'} "
                    f"(1 to {MAX_COUNT:,})")
            elif setting == "master_port" and re.fullmatch(r"[0-9]{1,9}", value):
                launch.launcher[setting] = int(value)
            elif setting == "master_addr" and value:
                launch.launcher[setting] = value
            elif MARK in value and setting in ("nodes", "gpus_per_node"):  # --nnodes $NNODES, --nproc_per_node $G
                say(f"{given}: not known without running the script; the preset's {setting} is not "
                    f"set from it (give --{setting.replace('_', '-')})")
            elif MARK in value:
                say(f"{given}: not known without running the script")
            else:
                say(f"{given}: not a number")
        elif name in TORCHRUN_DROPPED:
            say(f"{given}: {TORCHRUN_DROPPED[name]}".strip())
        else:
            say(f"{given}: a {launch.runner_name} option the launcher does not carry".strip())
    options = {w.lstrip("-").partition("=")[0].replace("-", "_") for w in runner if w.startswith("-")}
    # torchrun (and torch.distributed.run/launch) without --nproc_per_node start $PET_NPROC_PER_NODE processes a
    # node, else 1: decided where the command's environment is known (build.import_source)
    launch.nproc_unsaid = _torch_launcher(runner) and not options & {"nproc_per_node", "nproc"} and \
        not any(MARK in w for w in runner)
    if runner and base_name(runner[0]) == "accelerate" and not options & {"num_processes"} and \
            "gpus_per_node" not in launch.launcher:
        say("(no --num_processes): as many processes as accelerate's configuration file says, a count known only "
            "where it runs; the preset's nodes and gpus_per_node are not set from it (give --nodes and "
            "--gpus-per-node)")
    if runner and base_name(runner[0]) == "deepspeed" and not options & {"num_gpus", "include", "i"}:
        say("(no --num_gpus or --include): one process per GPU of each host, or per slot of its "
            "--hostfile, a count known only where it runs; give it as the preset's gpus_per_node "
            "(8 unless set)")
        if not options & {"hostfile", "H", "exclude", "e", "num_nodes"}:
            launch.visible_gpus = launch.runner_notes[-1]  # deepspeed's runner then runs on localhost:$CVD
    if runner and base_name(runner[0]) == "deepspeed" and "hostfile" in options \
            and not options & {"num_nodes", "include", "i"}:
        say("(--hostfile without --num_nodes): every host the file lists, a count known only where "
            "it runs; give it as the preset's nodes (1 unless set)")
    if runner and base_name(runner[0]) == "msrun" and not msrun_unknown:
        _msrun_layout(launch, msrun)
    elif runner and not RUNNER.fullmatch(base_name(runner[0])) and not launch.via_program \
            and not launch.wrapper and not {"nodes", "gpus_per_node"} & set(launch.launcher) \
            and not job_launcher(runner[0]) and MARK not in runner[0]:
        # `mylauncher --procs 16 pretrain_gpt.py`: its options were read as no count, so the preset would run the
        # launcher's default world without a word
        launch.dropped.append("starts pretrain_gpt.py: a program whose process counts the import does not read, "
                              "so how many processes run it, on how many nodes, is not known here; the preset's "
                              "nodes and gpus_per_node are not set from it (give --nodes and --gpus-per-node)")
    machines = counts.get("num_machines", 1)
    if "num_processes" in counts and machines > 0 and counts["num_processes"] % machines == 0:
        launch.launcher.update({"gpus_per_node": counts["num_processes"] // machines, "nodes": machines})
    elif counts:
        launch.dropped.append(f"accelerate --num_processes {counts.get('num_processes', '?')} --num_machines "
                              f"{machines}: not a whole number of processes per machine")
    if launch.per_task:
        counts_found, disagreement = _process_counts(launch.wrapper)
        launch.launcher.update(counts_found)
        if disagreement:
            launch.dropped.append(disagreement)
        if "gpus_per_node" in counts_found and "nodes" not in counts_found:
            launch.per_node_only = _per_node_option(launch.wrapper)
        if not counts_found:  # `mpirun -np 16`: over as many nodes as the hosts the job gives it
            launch.total_only = total_only(launch.wrapper)
        starter = _unknown_starter(launch.wrapper)
        once = not any(job_launcher(w) or MARK in w for w in launch.wrapper)  # bare, or numactl/nsys … around it
        if once and not starter and not launch.via_program:
            launch.dropped.append("runs pretrain_gpt.py under no job launcher: bash starts one process (a world of 1), "
                                  "unless the script is itself started once per GPU (srun or mpirun around it); the "
                                  "preset's nodes and gpus_per_node are not set from it (give --nodes and "
                                  "--gpus-per-node)")
        if starter and not counts_found:
            launch.dropped.append("(which starts python with pretrain_gpt.py) is a program whose process counts the "
                                  "import does not read: how many processes run pretrain_gpt.py, on how many nodes, "
                                  "is not known here; the preset's nodes and gpus_per_node are not set from it (give "
                                  "--nodes and --gpus-per-node)")
        # mpirun -np $NUM_GPUS, --ppn $(nvidia-smi -L | wc -l): a count the script computes from what it cannot know
        for option, value, why in unknown_counts(launch.wrapper):
            per_node = option in PER_NODE_OPTIONS or JSRUN_OPTIONS.get(option) in ("per_host", "per_set")
            if ("gpus_per_node" if per_node else "nodes") not in counts_found:
                launch.dropped.append(f"{option} {value}: {why}; the "
                                      + ("preset's gpus_per_node is not set from it (8 unless set)" if per_node
                                         else "preset's nodes is not set from it (give --nodes)"))
    return launch


def _torch_launcher(runner: list[str]) -> bool:
    """torchrun, `python -m torch.distributed.run` or `python -m torch.distributed.launch`."""
    if runner and base_name(runner[0]) == "torchrun":
        return True
    module = runner.index("-m") + 1 if "-m" in runner else 0
    return bool(module) and module < len(runner) and runner[module] in ("torch.distributed.run",
                                                                          "torch.distributed.launch")


def _msrun_layout(launch: Launch, given: dict[str, int]) -> None:
    """msrun's nodes and processes per node from --worker_num and --local_worker_num (each 8 unless given)."""
    total, local = given.get("worker_num", MSRUN_DEFAULT), given.get("local_worker_num", MSRUN_DEFAULT)
    defaults = [f"--{name} {MSRUN_DEFAULT}" for name in MSRUN_COUNTS if name not in given]
    if total % local or total < local:
        launch.dropped.append(f"--worker_num {total} --local_worker_num {local}: not a whole number of nodes of "
                              f"{local} processes; the preset's nodes and gpus_per_node are not set from it (give "
                              "--nodes and --gpus-per-node)")
        return
    launch.launcher.update({"gpus_per_node": local, "nodes": total // local})
    if defaults:
        launch.runner_notes.append(f"{' '.join(defaults)}: msrun's default, carried as the preset's layout")


# Programs that run the command they are given once, in this process's place (not one process per GPU)
RUNS_ONCE = {"sbatch", "salloc", "conda", "mamba", "micromamba", "uv", "pixi", "poetry", "pipenv", "nohup", "timeout",
             "exec", "sudo", "ionice", "unbuffer", "nvprof", "rocprof", "rocprofv2", "rocprofv3", "py-spy", "perf",
             "valgrind", "hpcrun", "gdb", "cuda-gdb", "strace", "ltrace", "xvfb-run", "dlprof"}


def _unknown_starter(wrapper: list[str]) -> str:
    """The program that starts `python pretrain_gpt.py` where it is neither a job launcher the import reads nor one
    that runs its command once (`pbsdsh`, `charmrun`, `poe`): it may start one process per GPU, as srun does."""
    if any(job_launcher(word) for word in wrapper):
        return ""
    program = wrapper[0] if wrapper else ""
    name = base_name(program)
    if not name or MARK in program or name in NOT_A_LAUNCHER or name in RUNS_ONCE:
        return ""
    return name


def total_only(wrapper: list[str]) -> str:
    """`-np 16` where the job launcher is given only a count of all its processes (`-np N`, `-n N`, `--ntasks N`;
    jsrun's resource sets without a count on each host, `jsrun -n 12 -a 1`)."""
    options = _launcher_options(wrapper)
    if any(base_name(w) == "jsrun" for w in wrapper):
        found, _ = _jsrun_options(options)
        if "per_host" in found or not jsrun_total(options):
            return ""
        written = []
        for k, word in enumerate(options):
            name = word.partition("=")[0]
            if name in JSRUN_OPTIONS and "=" not in word:
                written.append(f"{word} {options[k + 1] if k + 1 < len(options) else ''}".strip())
            elif name in JSRUN_OPTIONS or (not word.startswith("--") and word[:2] in JSRUN_OPTIONS):
                written.append(word)  # --nrs=12, -n12
        return "jsrun " + " ".join(written)
    given = ""
    for k, word in enumerate(options):
        name, eq, inline = word.partition("=")
        value = inline if eq else (options[k + 1] if k + 1 < len(options) else "")
        if name in TOTAL_OPTIONS and is_count(value):
            launcher = next((job_launcher(w) for w in wrapper if job_launcher(w)), "")
            given = f"{launcher} " + (word if eq else f"{word} {value}")
        elif name in (*NODE_OPTIONS, *HOST_OPTIONS, *_per_node_options(wrapper)) \
                or name == "--map-by" and value.endswith(":node"):
            return ""
    return given


def total_processes(wrapper: list[str]) -> int:
    """The count of all processes a job launcher is given (`srun -n 8`, `mpirun -np 16`, `--ntasks=4`; jsrun's
    resource sets × tasks in each), whatever else it is given; 0 where none is a count."""
    if any(base_name(w) == "jsrun" for w in wrapper):
        return jsrun_total(_launcher_options(wrapper))
    options = _launcher_options(wrapper)
    total = 0
    for k, word in enumerate(options):
        name, eq, inline = word.partition("=")
        value = inline if eq else (options[k + 1] if k + 1 < len(options) else "")
        if name in TOTAL_OPTIONS:
            total = count(value) or 0
    return total


def _per_node_option(wrapper: list[str]) -> str:
    """`--npernode 8` where the job launcher is given a count per node and none of nodes or of all processes (it
    then starts that many on each node of the job); "" otherwise."""
    options = _launcher_options(wrapper)
    jsrun = any(base_name(word) == "jsrun" for word in wrapper)
    per_node = {k for k, v in JSRUN_OPTIONS.items() if v == "per_host"} if jsrun else PER_NODE_OPTIONS
    others = {k for k, v in JSRUN_OPTIONS.items() if v in ("sets", "total")} if jsrun else {*TOTAL_OPTIONS,
                                                                                            *NODE_OPTIONS}
    given = ""
    for k, word in enumerate(options):
        name, eq, _ = word.partition("=")
        if jsrun and not eq and not name.startswith("--") and len(name) > 2 and name[:2] in JSRUN_OPTIONS:
            name, eq = name[:2], "="  # -r6
        if name in others:
            return ""
        if name in per_node:
            given = word if eq else f"{word} {options[k + 1] if k + 1 < len(options) else ''}".strip()
    return given


def unknown_counts(wrapper: list[str]) -> list[tuple[str, str, str]]:
    """The job launcher's process-count options whose value is no count: (option, value, why), `-np ${NUM_GPUS}`
    not known without running the script, `-np 0` / `-np 1e9` / `-np ٨` none a job launcher takes."""
    options = _launcher_options(wrapper)
    counting = {*JSRUN_OPTIONS} if any(base_name(w) == "jsrun" for w in wrapper) else \
        {*TOTAL_OPTIONS, *NODE_OPTIONS, *PER_NODE_OPTIONS}
    out = []
    for k, word in enumerate(options):
        name, eq, inline = word.partition("=")
        value = inline if eq else (options[k + 1] if k + 1 < len(options) else "")
        unknown = "not known without running the script"
        if name in counting and value and not is_count(value):
            out.append((name, value, f"a process count {unknown}" if MARK in value else
                        f"no process count a job launcher takes (1 to {MAX_COUNT:,})"))
        elif name in HOST_OPTIONS and value and not HOST_LIST.fullmatch(value):  # -H $HOSTS: not named here
            out.append((name, value, f"a list of hosts {unknown}" if MARK in value else "no list of host names"))
    return out


# A container image, or a program of the job launchers and container runtimes (not a script of the user's)
_NOT_OWN_PROGRAM = re.compile(r".*\.(sif|sqsh|simg|img|squashfs)|srun|mpirun.*|mpiexec.*|orterun|jsrun|flux|aprun|"
                              r"ibrun|horovodrun|numactl|taskset|"
                              r"nsys|env|apptainer|singularity|enroot|podman|docker|exec|run|start|bash|sh")


def _own_program(word: str, before: str) -> bool:
    """`launch.sh`, `$DIR/run_rank.sh`, `/images/launch_wrapper`: a program of the user's given the entry as its first
    argument (a path without a script's suffix only where the word before is no option it could be the value of:
    `srun -o /dev/null pretrain_gpt.py`)."""
    name = base_name(word)
    if word.startswith("-") or _NOT_OWN_PROGRAM.fullmatch(name):
        return False
    return name.endswith((".sh", ".bash")) or ("/" in word and "." not in name and not before.startswith("-"))


def _hosts_gpus(include: str) -> tuple[int, int] | None:
    """(hosts, GPUs per host) of deepspeed's `--include localhost:0,1,2,3` / `h1:0,1@h2:0,1`, when every host lists
    the same number of GPUs."""
    counts = []
    for host in include.split("@"):
        name, colon, slots = host.partition(":")
        if not name or not colon or not re.fullmatch(r"\d+(,\d+)*", slots):
            return None
        counts.append(len(set(slots.split(","))))
    return (len(counts), counts[0]) if counts and len(set(counts)) == 1 else None


# The job launchers whose options count processes; a wrapper after them (numactl -N 0: a NUMA node, not a count)
# ends their options.
JOB_LAUNCHERS = {"srun", "mpirun", "mpiexec", "orterun", "deepspeed", "jsrun", "flux", "aprun", "ibrun", "horovodrun"}
# Open MPI's and MPICH's programs under their packaged names: mpirun.openmpi, mpiexec.hydra, mpiexec_mpt (HPE MPT)
_MPI_PROGRAM = re.compile(r"(mpirun|mpiexec)[._][\w.]+")


def job_launcher(word: str) -> str:
    """The job launcher `word` runs, by the name its options are read under ("mpirun" for mpirun.openmpi, "mpiexec"
    for mpiexec.hydra): srun, Open MPI's and MPICH's mpirun/mpiexec, LSF's jsrun, Flux's `flux run`/`flux submit`,
    Cray ALPS's aprun, TACC's ibrun, horovodrun, deepspeed; "" for any other word."""
    name = base_name(word)
    if name in JOB_LAUNCHERS:
        return name
    mpi = _MPI_PROGRAM.fullmatch(name)
    return mpi.group(1) if mpi else ""


NOT_A_LAUNCHER = {"numactl", "taskset", "nsys", "ncu", "env", "stdbuf", "nice", "chrt", "time", "apptainer",
                  "singularity", "enroot", "podman", "docker", "shifter", "ch-run", "bash", "sh", "zsh", "dash", "ksh"}


# IBM LSF's jsrun (Summit, Lassen, Sierra) counts resource sets: -n/--nrs of them in all, -r/--rs_per_host on each
# host, -a/--tasks_per_rs processes in each (jsrun(1)); -p/--np is the number of processes in all
JSRUN_OPTIONS = {"-n": "sets", "--nrs": "sets", "-r": "per_host", "--rs_per_host": "per_host", "-a": "per_set",
                 "--tasks_per_rs": "per_set", "-p": "total", "--np": "total"}


def jsrun_total(words: list[str]) -> int:
    """The processes `jsrun -n 12 -a 2` starts in all (resource sets × tasks in each, or `-p N`); 0 where not known."""
    found, unknown = _jsrun_options(words)
    if "per_set" in unknown or "total" in unknown or "sets" in unknown and "total" not in found:
        return 0
    return found.get("total", found["sets"] * found.get("per_set", 1) if "sets" in found else 0)


def _jsrun_options(words: list[str]) -> tuple[dict[str, int], set[str]]:
    """jsrun's counts by kind (sets, per_host, per_set, total), and the kinds given a value that is no count."""
    found: dict[str, int] = {}
    unknown: set[str] = set()
    for k, word in enumerate(words):
        name, eq, value = word.partition("=")
        if not eq and not word.startswith("--") and len(word) > 2 and word[:2] in JSRUN_OPTIONS:
            name, value = word[:2], word[2:]  # -n8
        elif not eq:
            value = words[k + 1] if k + 1 < len(words) else ""
        if name in JSRUN_OPTIONS and is_count(value):
            found[JSRUN_OPTIONS[name]] = int(value)
            unknown.discard(JSRUN_OPTIONS[name])
        elif name in JSRUN_OPTIONS:  # -r 0, -a $N: no count, and none guessed around it
            found.pop(JSRUN_OPTIONS[name], None)
            unknown.add(JSRUN_OPTIONS[name])
    return found, unknown


def _jsrun_counts(words: list[str]) -> dict[str, int]:
    """nodes and processes per node of `jsrun -n 8 -r 4 -a 1 -g 1 python …` (also -n8, --nrs=8)."""
    found, unknown = _jsrun_options(words)
    if "per_set" in unknown or "per_host" in unknown:
        return {}
    per_set = found.get("per_set", 1)
    total = found.get("total", found["sets"] * per_set if "sets" in found else 0)
    out: dict[str, int] = {}
    per_node = count(found["per_host"] * per_set) if "per_host" in found else None
    if per_node:
        out["gpus_per_node"] = per_node
        if total and total % per_node == 0:
            out["nodes"] = total // per_node
    elif "per_host" not in found and 0 < total <= 8:  # as srun -n: one node's worth
        out["gpus_per_node"] = total
    return out


# Slurm's programs that make an allocation for the job launcher they run (`sbatch --wrap "srun …"`, `salloc … srun`):
# their counts are the job's, as #SBATCH lines would give them; alone they run the command once
ALLOCATORS = {"salloc", "sbatch"}
_ALLOCATION_OPTIONS = {"-N": "nodes", "--nodes": "nodes", "--ntasks-per-node": "ntasks-per-node", "-n": "ntasks",
                       "--ntasks": "ntasks"}


def allocation(wrapper: list[str]) -> dict[str, int]:
    """The counts `salloc`/`sbatch` give the job launcher they run (`salloc -N 2 --ntasks-per-node=8 srun …`), keyed as
    the #SBATCH lines' (nodes, ntasks-per-node, ntasks); {} without one."""
    found: dict[str, int] = {}
    at = next((k for k, w in enumerate(wrapper) if base_name(w) in ALLOCATORS), None)
    end = next((k for k, w in enumerate(wrapper) if job_launcher(w)), len(wrapper))
    if at is None or at > end:
        return found
    words = wrapper[at + 1:end]
    for k, word in enumerate(words):
        attached = _ATTACHED_COUNT.fullmatch(word)
        name, eq, value = word.partition("=")
        if attached:
            name, value = attached.groups()
        elif not eq:
            value = words[k + 1] if k + 1 < len(words) else ""
        if name in _ALLOCATION_OPTIONS and is_count(value):
            found[_ALLOCATION_OPTIONS[name]] = int(value)
    return found

# A one-letter count option with its value attached, as getopt reads it: `srun -N2 -n16`, `flux run -N2`, `aprun -n64`
# (a digit or a value not known after it: `-np` and `-nolocal` are options of their own)
_ATTACHED_COUNT = re.compile(rf"(-[nN])([0-9].*|{re.escape(MARK)}.*)")


def _launcher_options(wrapper: list[str]) -> list[str]:
    """The options of the job launchers in `wrapper`, a one-letter count with its value attached split in two
    (`-N2` is `-N 2`; jsrun's own reader takes `-n8` itself)."""
    out: list[str] = []
    inside = jsrun = False
    for word in wrapper:
        program = job_launcher(word)
        if program:
            inside, jsrun = True, program == "jsrun"
        elif base_name(word) in NOT_A_LAUNCHER:
            inside = False
        elif inside:
            attached = None if jsrun else _ATTACHED_COUNT.fullmatch(word)
            out.extend(attached.groups() if attached else [word])
    return out


def _process_counts(wrapper: list[str]) -> tuple[dict[str, int], str]:
    """nodes and processes per node of `srun -N 2 --ntasks-per-node 8 python …` / `mpirun -np 16 -npernode 8 …`,
    where each process is one GPU's rank (the options of srun, mpirun … only); and, where the counts given do not
    make whole nodes of one size (`mpirun -np 7 --npernode 2`), what says so. A count that is given but is no count
    (`--ppn $GPUS`, `-N 0`) is not guessed around: `-n 8 --ppn $GPUS` is not one node of 8."""
    if any(base_name(word) == "jsrun" for word in wrapper):
        return _jsrun_counts(_launcher_options(wrapper)), ""
    per_node_options = _per_node_options(wrapper)
    wrapper = _launcher_options(wrapper)
    found: dict[str, int | None] = {}  # per_node, nodes, total: as given, the last of each; None: no count
    written: dict[str, str] = {}
    for k, word in enumerate(wrapper):
        name, eq, inline = word.partition("=")
        value = inline if eq else (wrapper[k + 1] if k + 1 < len(wrapper) else "")
        kind = "per_node" if name in per_node_options else "nodes" if name in NODE_OPTIONS else \
            "total" if name in TOTAL_OPTIONS else ""
        ppr = re.fullmatch(r"ppr:([0-9]+):node", value) if name == "--map-by" else None
        if ppr:
            kind, value = "per_node", ppr.group(1)
        if name in HOST_OPTIONS:  # mpirun -H node1:8,node2:8: the nodes it runs on, named
            hosts = HOST_LIST.fullmatch(value)
            found["nodes"] = count(len({host.partition(":")[0] for host in value.split(",")})) if hosts else None
        elif kind:
            found[kind] = count(value)
        if kind or name in HOST_OPTIONS:
            written[kind or "nodes"] = word if eq else f"{word} {value}"
    per_node, nodes, total = found.get("per_node"), found.get("nodes"), found.get("total")
    out: dict[str, int] = {}
    if per_node:
        out["gpus_per_node"] = per_node
    if nodes:
        out["nodes"] = nodes
    uneven = ""
    if total and nodes and per_node and total != nodes * per_node:
        uneven = f"{total} processes in all are not {nodes} node(s) of {per_node}"
    elif total and nodes and "per_node" not in found:
        if total % nodes == 0:
            out["gpus_per_node"] = total // nodes  # srun -N 2 -n 16: 8 on each node
        else:
            uneven = f"{total} processes over {nodes} node(s) are not a whole number on each"
    elif total and per_node and "nodes" not in found:
        if total % per_node == 0:
            out["nodes"] = total // per_node
        else:
            uneven = f"{total} processes at {per_node} a node leave the last node fewer"
    elif total and "per_node" not in found and "nodes" not in found and total <= 8:
        out["gpus_per_node"] = total
    if not uneven:
        return out, ""
    said = " ".join(written[k] for k in ("total", "nodes", "per_node") if k in written)
    return out, (f"{said}: {uneven}; a preset runs the same number of processes on every node, and only the counts "
                 "written are carried (give --nodes and --gpus-per-node, and check the world size)")


def _per_node_options(wrapper: list[str]) -> set[str]:
    """The options that count processes on each node: Open MPI's mpirun and Cray's aprun also take `-N n` (n per
    node, as `--map-by ppr:n:node`), where srun's and Flux's `-N` count nodes."""
    launcher = next((job_launcher(w) for w in wrapper if job_launcher(w)), "")
    return PER_NODE_OPTIONS | {"-N"} if launcher in ("mpirun", "orterun", "aprun") else PER_NODE_OPTIONS
