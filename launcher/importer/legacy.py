"""Flags of other Megatron-LM releases and of common forks (launcher/data/flag_translations.json): what the import
makes of each, and the history of Megatron's own flags (launcher/data/megatron_legacy_flags.json, derived from its
git history by scripts/derive_legacy_flags.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class Translation:
    flag: str
    origin: str  # "megatron" (an older release) or the fork, with where its flags are defined
    value: str = ""  # "" (a switch), "int" | "float" | "str" | "list": the flag takes value words
    to: dict[str, Any] = field(default_factory=dict)
    unless_given: dict[str, Any] = field(default_factory=dict)
    why: str = ""
    refuse: str = ""
    instead: str = ""
    harmless: str = ""
    # `to` applies only when the script gave this fork's choice (setting → the fork's value); else `harmless`
    only_with: dict[str, str] = field(default_factory=dict)
    unknown: str = ""  # what is lost when a `to` value the job decides ($data_parallel_size) cannot be computed
    # a flag whose meaning depends on its value (bigcode's --attention-head-type multiquery|multihead): value → the
    # row for it (`to` with `why`, or `harmless`, or `refuse`); a value not listed is lost
    by_value: dict[str, Translation] = field(default_factory=dict)
    # the pin's settings as a formula of the flag's value and other settings (importer/computed.py): {"formula":
    # name, "reads": [settings]}; where an input is not known the row refuses (`refuse`, `instead`)
    computed: dict[str, Any] = field(default_factory=dict)
    # a switch here that another fork gives a true/false value (HabanaAI's `--use-fused-rmsnorm 1`): that fork and
    # where; its value word is read as the flag's, never as a stray word. Only for a row whose meaning holds for
    # either value (a kernel choice)
    valued_in: str = ""
    # the fork asserts the `to` settings with this flag rather than setting them (Megatron-DeepSpeed's
    # --no-pipeline-parallel asserts PP 1): its words for it; another value of them stops the fork at start-up
    asserts: str = ""


@dataclass(frozen=True)
class Choice:
    """A fork's name for a value of a pin flag, with the same meaning (ModelLink's PretrainedFromHF)."""

    setting: str
    given: str
    pin: str
    origin: str
    why: str


def _read(name: str) -> dict[str, Any]:
    return json.loads(resources.files("launcher").joinpath(f"data/{name}").read_text(encoding="utf-8"))


@cache
def translations() -> dict[str, Translation]:
    out = {}
    for flag, row in _read("flag_translations.json")["flags"].items():
        origin = row.get("origin", "")
        if origin == "megatron":
            origin = "an older Megatron-LM" + _releases(flag)
        out[flag] = _row(flag, origin, row)
    return out


def _row(flag: str, origin: str, row: dict[str, Any]) -> Translation:
    by_value = {value: _row(flag, origin, {"value": row.get("value", ""), **sub})
                for value, sub in row.get("by_value", {}).items()}
    return Translation(flag, origin, row.get("value", ""), row.get("to", {}), row.get("unless_given", {}),
                       row.get("why", ""), row.get("refuse", ""), row.get("instead", ""), row.get("harmless", ""),
                       row.get("only_with", {}), row.get("unknown", ""), by_value,
                       row.get("computed", {}), row.get("valued_in", ""), row.get("asserts", ""))


@cache
def choices() -> dict[tuple[str, str], Choice]:
    """(setting, the fork's value) → the pin's value of the same meaning."""
    return {(setting, given): Choice(setting, given, row["to"], row["origin"], row["why"])
            for setting, rows in _read("flag_translations.json").get("choices", {}).items()
            for given, row in rows.items()}


@cache
def history() -> dict[str, dict[str, Any]]:
    """flag → {dest, kind, type, help, first, last, message?} for each flag a release had and the pin has not."""
    flags: dict[str, dict[str, Any]] = _read("megatron_legacy_flags.json")["flags"]
    return flags


def _releases(flag: str) -> str:
    row = history().get(flag)
    if row is None:
        return ""
    span = row["first"] if row["first"] == row["last"] else f"{row['first']}–{row['last']}"
    return f" ({span})"


def translation(flag: str) -> Translation | None:
    """What the import does with `flag` when it is not the pin's, or is the pin's only to refuse it."""
    found = translations().get(flag)
    if found is not None:
        return found
    row = history().get(flag)
    if row is None:
        return None
    # a flag of an older release with no curated meaning: lost, with what the release's help said it did
    what = f": \"{row['help']}\"" if row.get("help") else ""
    said = f"; Megatron said: \"{row['message']}\"" if row.get("message") else ""
    renamed = (f"; the pin sets the same setting ({row['dest']}) with {' or '.join(row['pin_flags'])}, whose meaning "
               "may differ: set it if it is the same") if row.get("pin_flags") else ""
    return Translation(flag, "an older Megatron-LM" + _releases(flag), "" if row["kind"] != "value" else "str",
                       refuse=f"removed before the pin{what}{said}{renamed}")

