"""Every check of Megatron's argument validation at the pin is either mirrored by the launcher's dry-run or listed
with why not (tests/megatron_pin/validation_checks.yaml): what the launcher accepts, Megatron's start-up accepts.

The walk (validation_walk.py) reads the pinned source; a new pin that adds a check fails here until the check is
mirrored or listed, and a listed check that the source no longer has fails too. Each mirrored check has a trigger,
which the launcher must refuse and Megatron's own validation must refuse at exactly that check.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from upstream_support import megatron_request, shared_checker, target_env_only  # noqa: F401 (autouse)

from launcher.errors import UserError
from launcher.megatron.pin import Kernels, megatron_path
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve
from tests.megatron_pin.validation_walk import Check, walk

TABLE = Path(__file__).with_name("validation_checks.yaml")


@dataclass(frozen=True)
class Trigger:
    """The 345m preset with these overrides, on `gpus` GPUs of one node, with or without TE on the target."""

    sets: tuple[str, ...]
    gpus: int = 1
    te: bool = False

    @classmethod
    def read(cls, entry: Any) -> Trigger:
        if isinstance(entry, list):
            return cls(tuple(entry))
        return cls(tuple(entry["sets"]), entry.get("gpus", 1), entry.get("te", False))


@cache
def table() -> dict[str, Any]:
    return yaml.safe_load(TABLE.read_text())


def mirrored() -> dict[str, Trigger]:
    return {key: Trigger.read(entry) for key, entry in table()["mirrored"].items()}


def gates() -> dict[str, Trigger]:
    return {condition: Trigger.read(entry) for condition, entry in table()["gated"].items()}


def launcher_problems(trigger: Trigger) -> list[Any]:
    try:
        resolve(load_preset("345m", list(trigger.sets)), 1, trigger.gpus,
                kernels=Kernels(trigger.te, trigger.te, "preset"))
    except UserError as err:
        return err.problems
    return []


@cache
def checkout() -> Path:
    path = megatron_path(None, None)
    if not (path / "megatron" / "training" / "arguments.py").is_file():
        pytest.skip("no Megatron-LM checkout at the pin (set MEGATRON_LM_PATH)")
    return path


def test_the_table_is_well_formed():
    reasons = table()["reasons"]
    assert not set(mirrored()) & set(table()["not_mirrored"]), "a check is both mirrored and listed"
    unknown = {key: reason for key, reason in table()["not_mirrored"].items() if reason not in reasons}
    assert unknown == {}, f"not_mirrored names a reason that `reasons` lacks: {unknown}"


def test_every_check_of_the_pin_is_mirrored_or_listed():
    checks = walk(checkout())
    keys = {check.key for check in checks}
    gated = {check.key for check in checks if set(check.conditions) & set(gates())}
    listed = set(mirrored()) | set(table()["not_mirrored"])
    neither = sorted(keys - listed - gated)
    gone = sorted(listed - keys)
    assert neither == [], ("checks of the pin that the launcher neither mirrors nor lists: mirror each (a rule with "
                           "a trigger under `mirrored:`) or list it with its reason in validation_checks.yaml\n"
                           + "\n".join(neither))
    assert gone == [], "listed checks the pin no longer has (remove them):\n" + "\n".join(gone)
    assert not gated & listed, "a gated check is listed too: " + ", ".join(sorted(gated & listed))


@pytest.mark.parametrize("condition", list(gates()))
def test_each_gate_is_refused_by_the_launcher(condition):
    assert launcher_problems(gates()[condition]), f"the launcher accepts {gates()[condition].sets}"


def test_the_launcher_refuses_every_mirrored_trigger():
    accepted = [f"{key}: {trigger.sets}" for key, trigger in mirrored().items() if not launcher_problems(trigger)]
    assert accepted == [], "the launcher accepts these triggers of checks it claims to mirror:\n" + "\n".join(accepted)


@cache
def _walked(root: str) -> tuple[Check, ...]:
    return tuple(walk(Path(root)))


def refused_at(verdict: Any) -> str | None:
    """The key of the check where Megatron refused, from the walk of the copy of Megatron that answered."""
    where = verdict.where
    if verdict.ok or not where:
        return None
    root = where["path"][: -len(where["file"])]
    found = [check.key for check in _walked(root) if check.covers(where["file"], where["line"])]
    return found[0] if found else f"{where['file']}:{where['line']} (not a walked check)"


@pytest.mark.megatron
def test_megatron_refuses_every_mirrored_trigger_at_that_check():
    checker = shared_checker()
    triggers = mirrored()
    requests = [megatron_request(load_preset("345m", list(t.sets)), t.gpus, t.te, t.te) for t in triggers.values()]
    wrong = []
    for (key, trigger), verdict in zip(triggers.items(), checker.check_many(requests), strict=True):
        at = refused_at(verdict)
        if at != key:
            wrong.append(f"{key}\n  trigger {list(trigger.sets)}: megatron {verdict.render()[:200]} at {at}")
    assert wrong == [], f"{len(wrong)} trigger(s) do not reach their check in Megatron:\n" + "\n".join(wrong)
