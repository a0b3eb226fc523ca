"""A script's `export NVTE_FLASH_ATTN / NVTE_FUSED_ATTN / NVTE_UNFUSED_ATTN`, in the pin's words.

Older Megatron let these Transformer Engine variables choose the attention kernel; the pin chooses it by
--attention-backend and stops at model build when they disagree with it (launcher.pipeline.attention_env). Where the
variables name exactly one backend the pin takes, the preset gets that attention_backend and keeps them (they then
agree); otherwise they are not carried, and a warning says what the script chose and how to keep it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from launcher.pipeline import attention_env


@dataclass
class Translation:
    backend: str | None = None  # the attention_backend the preset gets, where the variables name one
    dropped: list[str] = field(default_factory=list)  # variables not carried
    translated: str = ""  # a line for the preset's "carried in the pin's words"
    warning: str = ""  # said loudly where the variables are not carried


def translate(settings: dict[str, Any], env: dict[str, str]) -> Translation:
    """What the preset holds for the script's attention variables (`env`: the exports the import carries)."""
    present = [name for name in attention_env.VARIABLES if name in env]
    if not present:
        return Translation()
    given = settings.get("attention_backend")
    backend = str(given or "auto")
    exports = " ".join(f"{name}={attention_env.shown(env[name])}" for name in present)
    if not attention_env.mismatches(backend, env.get):
        return Translation()  # they agree with the backend the preset runs: carried as they are
    fits = attention_env.allowed(env.get, settings.get("spec"))
    why = ("older Megatron let Transformer Engine choose the attention kernel by these variables; the pin chooses "
           "it by --attention-backend and stops at model build when they disagree with it "
           f"({attention_env.CITE})")
    if given is None and len(fits) == 1:
        return Translation(backend=fits[0], translated=f"export {exports}: {why}; they name one backend: "
                           f"attention_backend {fits[0]}, and are kept (they agree with it)")
    if given is not None:
        what = (f"the script also gives --attention-backend {given}, which they contradict (on the pin the script "
                "itself would stop at model build)")
    elif fits:
        what = (f"they leave several backends on ({', '.join(fits)}), so which one the script ran is not known "
                "here")
    else:
        what = "they name no backend the pin takes with this layer spec"
    keep = ""
    if fits and given is None:
        sets = " ".join(f"--set env.{name}={shlex.quote(env[name])}" for name in present)
        keep = f"; to keep the variables, choose a backend they allow: --set attention_backend={'|'.join(fits)} {sets}"
    warning = (f"export {exports}: not carried: {why}; {what}. The preset runs attention_backend {backend}"
               f"{keep}")
    return Translation(dropped=present, warning=warning)
