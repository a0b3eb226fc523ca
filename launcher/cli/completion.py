"""`launch completion bash|zsh|fish`: a shell completion script for commands, presets, each command's options,
their values (choices, GPU names) and setting names.

The script asks the launcher itself when a user presses Tab (`launch completion --complete -- WORDS…`), so one
function here decides for every shell, and presets added to configs/ and the pinned Megatron's argument names are
always current.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from launcher.errors import UserError

NAME_KINDS = ("commands", "presets", "settings", "options", "gpus")
SHELLS = ("bash", "zsh", "fish")

BASH = r"""# megatron-launch completion for bash; load it with:  source <(LAUNCH completion bash)
_megatron_launch() {
    local IFS=$'\n'
    COMPREPLY=($(LAUNCH completion --complete -- "${COMP_WORDS[@]:0:COMP_CWORD+1}" 2>/dev/null))
    if [[ ${COMPREPLY[0]} == *= ]]; then
        compopt -o nospace 2>/dev/null
    fi
}
complete -o default -F _megatron_launch launch
"""

ZSH = "# megatron-launch completion for zsh; load it with:  source <(LAUNCH completion zsh)\n" \
      "autoload -U +X bashcompinit && bashcompinit\n" + BASH.split("\n", 1)[1]

FISH = r"""# megatron-launch completion for fish; load it with:  LAUNCH completion fish | source
function __megatron_launch_complete
    LAUNCH completion --complete -- (commandline -opc) (commandline -ct) 2>/dev/null
end
complete -c launch -a '(__megatron_launch_complete)'
"""

# Commands whose positional arguments are presets; the others take files (the shell's own completion).
PRESET_COMMANDS = ("plan", "show", "diff")


def _launch_command() -> str:
    """How the script calls the launcher back: the very program that printed it, so an unactivated
    .venv/bin/launch works too."""
    program = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if os.path.basename(program) == "launch" and os.access(program, os.X_OK):
        return shlex.quote(program)
    return f"{shlex.quote(sys.executable)} -m launcher"


class _Built(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser


def parser_of(command: str | None) -> argparse.ArgumentParser:
    """The parser `launch COMMAND` uses (the run parser for a preset): each command builds its own when it runs,
    so it is run up to its parse_args, which hands the parser over instead of parsing."""
    from launcher.cli import SUBCOMMANDS, run_parser
    from launcher.cli.parsing import Parser

    if command not in SUBCOMMANDS:
        return run_parser()
    original = Parser.parse_args

    def hand_over(self, *_args, **_kwargs):
        raise _Built(self)

    Parser.parse_args = hand_over  # type: ignore[method-assign]
    try:
        SUBCOMMANDS[command]([])
    except _Built as built:
        return built.parser
    finally:
        Parser.parse_args = original  # type: ignore[method-assign]
    return run_parser()


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {o: action for action in parser._actions for o in action.option_strings if o.startswith("--")}


def names(kind: str, command: str | None = None) -> list[str]:
    if kind == "commands":
        from launcher.cli import SUBCOMMANDS

        return sorted(SUBCOMMANDS)
    if kind == "presets":
        from launcher.pipeline.preset import available_presets

        return available_presets()
    if kind == "settings":
        from launcher.megatron import args as megatron_args
        from launcher.pipeline.preset import LAUNCHER_FIELDS, _slurm_fields

        launcher = [name for name in LAUNCHER_FIELDS if name not in ("env", "slurm", "k8s")]
        return sorted({*megatron_args.catalog(), *launcher, *(f"slurm.{key}" for key in _slurm_fields()[0]),
                       *(f"k8s.{key}" for key in _slurm_fields("k8s")[0])})
    if kind == "options":
        return sorted(_options(parser_of(command)))
    if kind == "gpus":
        from launcher.estimate.formulas import GPUS

        return sorted(GPUS)
    raise UserError(f"no names of kind {kind!r}", f"choose from {', '.join(NAME_KINDS)}")


def complete(words: list[str]) -> list[str]:
    """What Tab offers for the command line `words` (the program first, the word being typed last)."""
    from launcher.cli import SUBCOMMANDS

    words = words or ["launch"]
    current, before = (words[-1], words[:-1]) if len(words) > 1 else ("", words)
    command = before[1] if len(before) > 1 and before[1] in SUBCOMMANDS else None
    previous = before[-1] if len(before) > 1 else ""
    candidates: list[str]
    if previous == "--set":
        candidates = [f"{name}=" for name in names("settings")]
    elif previous.startswith("--"):
        action = _options(parser_of(command)).get(previous)
        if action is not None and action.nargs != 0:  # the option takes a value: offer what it accepts
            if action.choices:
                candidates = [str(choice) for choice in action.choices]
            elif previous == "--gpu":
                candidates = names("gpus")
            elif previous == "--build-index":
                candidates = names("presets")
            else:
                candidates = []  # a number, a path: the shell's own completion
            return [c for c in candidates if c.startswith(current)]
        candidates = _positional(command, before, current)
    else:
        candidates = _positional(command, before, current)
    return [c for c in candidates if c.startswith(current)]


def _positional(command: str | None, before: list[str], current: str) -> list[str]:
    if current.startswith("-"):
        return names("options", command)
    if len(before) == 1:
        return names("commands") + names("presets")
    if command in PRESET_COMMANDS:
        return names("presets")
    if command == "completion":
        return list(SHELLS)
    return []


def script(shell: str) -> str:
    text = {"bash": BASH, "zsh": ZSH, "fish": FISH}[shell]
    return text.replace("LAUNCH", _launch_command())
