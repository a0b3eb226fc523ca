"""Transformer Engine's attention variables (NVTE_FLASH_ATTN, NVTE_FUSED_ATTN, NVTE_UNFUSED_ATTN) against
Megatron's --attention-backend.

Older Megatron let these variables choose TE's attention kernel; the pin chooses it by --attention-backend and, when
it builds the model (LanguageModule.__init__ → _set_attention_backend, language_module.py:107, on every layer spec,
the launcher's SDPA one included), asserts each variable is unset or exactly the value that backend sets it to.
One table, read by the dry-run's rule (target_rules) and by `launch import` (which translates a script's exports).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

VARIABLES = ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN")
# backend → the values _set_attention_backend expects (and writes) for VARIABLES, in that order
EXPECTED: dict[str, tuple[str, str, str]] = {
    "auto": ("1", "1", "1"),
    "flash": ("1", "0", "0"),
    "fused": ("0", "1", "0"),
    "unfused": ("0", "0", "1"),
    "local": ("0", "0", "0"),
}
CITE = "language_module.py:107"


def spec_is_local(spec: Any) -> bool:
    """--attention-backend local is only taken with --spec local (validate_args, arguments.py:430)."""
    words = spec.split() if isinstance(spec, str) else list(spec or [])
    return bool(words) and words[0] == "local"


def mismatches(backend: str, get: Callable[[str], str | None]) -> list[tuple[str, str, str]]:
    """(variable, its value, the value `backend` expects) for each variable set to another value than `backend`'s
    (`get(name)`: the value a rank sees, None when unset)."""
    expected = EXPECTED.get(backend)
    if expected is None:
        return []
    out = []
    for name, want in zip(VARIABLES, expected, strict=True):
        value = get(name)
        if value is not None and value != want:
            out.append((name, value, want))
    return out


def allowed(get: Callable[[str], str | None], spec: Any = None) -> list[str]:
    """The backends the variables as set agree with (local only on --spec local, where the pin takes it)."""
    return [b for b in EXPECTED if (b != "local" or spec_is_local(spec)) and not mismatches(b, get)]


def shown(value: str) -> str:
    """A value as written: quoted where it is empty or holds spaces or unprintable characters."""
    return value if value and value.isprintable() and " " not in value else repr(value)


def refusal(backend: str, get: Callable[[str], str | None], spec: Any,
            where: Callable[[str], str]) -> tuple[str, str] | None:
    """(message, hint) when the variables disagree with `backend`, else None. `where(name)`: where a variable
    comes from (the preset's launcher.env, or the environment the launch inherits), for the message."""
    wrong = mismatches(backend, get)
    if not wrong:
        return None
    said = "; ".join(f"{name}={shown(value)} ({where(name)}) where attention_backend {backend} expects {want} or unset"
                     for name, value, want in wrong)
    message = (f"{said}: the pinned Megatron asserts \"{wrong[0][0]} set to {shown(wrong[0][1])}, but expected "
               f"{wrong[0][2]} for attention backend type {backend}\" when it builds the model ({CITE}); it chooses "
               "the attention kernel by attention_backend, not by these variables (older Megatron's way)")
    unset = " ".join(f"--set env.{name}=null" for name, _, _ in wrong)  # null: no rank sees it, inherited or not
    them = "them" if len(wrong) > 1 else "it"
    way = f"unset {them}: {unset} (attention_backend {backend} sets {them} itself when it builds the model)"
    fits = allowed(get, spec)
    if len(fits) == 1:
        return message, f"set attention_backend={fits[0]} (the one backend the variables as set choose), or {way}"
    if fits:
        way += (", or keep the variables and choose a backend they allow: "
                + " or ".join(f"set attention_backend={b}" for b in fits))
    return message, way
