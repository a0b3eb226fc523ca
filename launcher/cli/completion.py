"""`launch completion bash|zsh`: a shell completion script for commands, presets, options and setting names.

The script asks the launcher itself for the names when a user presses Tab (`launch completion --names KIND`),
so presets added to configs/ and the pinned Megatron's argument names are always current.
"""

from __future__ import annotations

import os
import shlex
import sys

from launcher.errors import UserError

NAME_KINDS = ("commands", "presets", "settings", "options")

BASH = r"""# megatron-launch completion for bash; load it with:  source <(LAUNCH completion bash)
_megatron_launch_names() {
    LAUNCH completion --names "$1" 2>/dev/null
}
_megatron_launch() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local command=${COMP_WORDS[1]}
    COMPREPLY=()
    if [[ $prev == --set ]]; then
        COMPREPLY=($(compgen -W "$(_megatron_launch_names settings)" -S = -- "$cur"))
        compopt -o nospace 2>/dev/null
        return
    fi
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$(_megatron_launch_names options)" -- "$cur"))
        return
    fi
    if ((COMP_CWORD == 1)); then
        COMPREPLY=($(compgen -W "$(_megatron_launch_names commands) $(_megatron_launch_names presets)" -- "$cur"))
        return
    fi
    case $command in
        plan|show|diff) COMPREPLY=($(compgen -W "$(_megatron_launch_names presets)" -- "$cur")) ;;
        completion) COMPREPLY=($(compgen -W "bash zsh" -- "$cur")) ;;
    esac
}
complete -o default -F _megatron_launch launch
"""

ZSH = "# megatron-launch completion for zsh; load it with:  source <(LAUNCH completion zsh)\n" \
      "autoload -U +X bashcompinit && bashcompinit\n" + BASH.split("\n", 1)[1]


def _launch_command() -> str:
    """How the script calls the launcher back: the very program that printed it, so an unactivated
    .venv/bin/launch works too."""
    program = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if os.path.basename(program) == "launch" and os.access(program, os.X_OK):
        return shlex.quote(program)
    return f"{shlex.quote(sys.executable)} -m launcher"


def names(kind: str) -> list[str]:
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
        from launcher.cli import run_parser

        return sorted(o for action in run_parser()._actions for o in action.option_strings if o.startswith("--"))
    raise UserError(f"no names of kind {kind!r}", f"choose from {', '.join(NAME_KINDS)}")


def script(shell: str) -> str:
    text = {"bash": BASH, "zsh": ZSH}[shell]
    return text.replace("LAUNCH", _launch_command())
