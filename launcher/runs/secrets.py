"""Secrets (API keys, tokens, passwords in environment variables) never reach a file in clear.

One rule (launcher.redaction, which also scrubs every output), used by every writer: an environment variable
whose name contains KEY, TOKEN, SECRET, PASSWORD, … or whose value has a credential's form is a secret. Files
record `<redacted>` in its place (manifest, preset.yaml, the --set list and the launch's argv); scripts
(command.sh, the sbatch script) take it from the environment they run in, and `launch --resume` takes it from
the environment it is started in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from launcher.errors import UserError
from launcher.pipeline.environment import is_env_name
from launcher.redaction import REDACTED, is_secret, remember, scrub_assignment, scrub_values


def redact_env(env: Mapping[str, Any]) -> dict[str, str | None]:
    """The environment with every secret's value replaced by <redacted>; a null (unset for the ranks) stays null:
    it hides nothing, and --resume must unset it again rather than look for a secret."""
    return {str(k): None if v is None else REDACTED if is_secret(str(k), v) else str(v) for k, v in env.items()}


def redact_assignment(word: str) -> str:
    """`env.HF_TOKEN=abc` (a --set, or an argv word holding one) → `env.HF_TOKEN=<redacted>`."""
    return scrub_assignment(word)


def redact_argv(argv: Sequence[str]) -> list[str]:
    return [redact_assignment(str(word)) for word in argv]


def redact_preset(preset: Mapping[str, Any]) -> dict[str, Any]:
    """A preset mapping (as written to preset.yaml) with launcher.env secrets redacted (by name or value, whole:
    --resume takes them from its environment), and every other value scrubbed by the same rule (an image
    `user:token@registry/…`, a URL's password, a token in a Megatron flag's value)."""
    out = dict(preset)
    launcher = out.get("launcher")
    if isinstance(launcher, Mapping) and isinstance(launcher.get("env"), Mapping):
        out["launcher"] = {**launcher, "env": redact_env(launcher["env"])}
    return scrub_values(out)


def shell_export(name: str, value: str, quote) -> str:
    """An `export` line for a script file: a secret is read from the environment the script runs in."""
    if not is_env_name(name):
        raise UserError(f"{name!r} is not a valid environment variable name")
    if is_secret(name, value):
        return f'export {name}="${{{name}:?{name} is a secret and is not stored in this file: export it first}}"'
    return f"export {name}={quote(value)}"


def restore_from(env: Mapping[str, str | None], environ: Mapping[str, str]) -> dict[str, str | None]:
    """The environment of a resumed run: each <redacted> secret taken from `environ` (the launcher's own); a null
    (unset for the ranks) stays null."""
    missing = [name for name, value in env.items() if value == REDACTED and not environ.get(name)]
    if missing:
        names = ", ".join(missing)
        raise UserError(f"the run directory does not store the secret(s) {names}",
                        f"export {missing[0]}=… before launch --resume, or give --set env.{missing[0]}=…")
    for name, value in env.items():
        if value == REDACTED:
            remember(name, environ[name])
    return {name: (environ[name] if value == REDACTED else value) for name, value in env.items()}
