"""Settings Megatron reads only under another setting (or never, for a GPT model): set while that one is off, they
change nothing.

Megatron accepts them without a word (`--num-query-groups 8` without `--group-query-attention` trains plain
multi-head attention), so the job that runs is not the one the user wrote. Each rule names where Megatron at the
pin decides it; only what the user set away from Megatron's default is judged, never what the launcher added.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from launcher.megatron import args as megatron_args
from launcher.pipeline.inert_rules import Arg, Dependence, dependences

__all__ = ["Dependence", "dependences", "inert_settings"]


def inert_settings(user: Mapping[str, Any], arg: Arg) -> list[str]:
    """A warning for each group of settings the user set that Megatron will not read for this job."""
    catalog = megatron_args.catalog()
    warnings = []
    for rule in dependences():
        if rule.takes_effect(arg):
            continue
        inert = [f"{name}={user[name]}" for name in rule.names
                 if name in catalog and user.get(name) is not None
                 and (rule.any_value or user[name] != catalog[name].default)]
        if inert:
            them = "it" if len(inert) == 1 else "them"
            if rule.condition is None:
                warnings.append(f"{', '.join(inert)}: {rule.effect}, Megatron never uses {them} for a GPT "
                                f"model ({rule.where}); drop {them}")
            else:
                warnings.append(f"{', '.join(inert)}: {rule.effect} without {rule.condition} ({rule.where}); "
                                f"set {rule.condition} or drop {them}")
    return warnings
