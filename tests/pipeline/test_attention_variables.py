"""Transformer Engine's attention variables against --attention-backend: older Megatron chose TE's kernel by
NVTE_FLASH_ATTN / NVTE_FUSED_ATTN / NVTE_UNFUSED_ATTN, the pin by the flag, and it asserts they agree when it builds
the model (seen on an H200: two imported scripts with `export NVTE_FUSED_ATTN=0` accepted, then stopped there)."""

from __future__ import annotations

import itertools
import re
from types import SimpleNamespace

import pytest

from launcher.errors import UserError
from launcher.megatron.pin import Kernels
from launcher.pipeline import attention_env
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve

SET = re.compile(r"(?:--)?set ([a-z_][a-z0-9_.]*|env\.[A-Za-z_][A-Za-z0-9_]*)=([^\s,;)]+)")
VALUES = (None, "0", "1", "true")
COMBINATIONS = list(itertools.product(VALUES, repeat=3))


def first_way_out(hint: str) -> list[tuple[str, str]]:
    head = re.split(r",? or |\s\(", hint, maxsplit=1)[0]
    return [(m[1], m[2]) for m in SET.finditer(head)]


def problems(overrides: list[str], inherited: dict[str, str] | None = None, te: bool = False) -> list:
    try:
        resolve(load_preset("345m", overrides), kernels=Kernels(te, te, "preset"), inherited_env=inherited or {})
    except UserError as err:
        return [p for p in err.problems if "NVTE_" in p.message]
    return []


def env_sets(values: tuple[str | None, ...]) -> list[str]:
    return [f"env.{name}={v}" for name, v in zip(attention_env.VARIABLES, values, strict=True) if v is not None]


@pytest.mark.megatron
def test_the_rule_refuses_exactly_what_megatron_asserts_and_its_hint_satisfies_megatron(monkeypatch):
    from megatron.core.models.common.language_module.language_module import LanguageModule
    from megatron.core.transformer.enums import AttnBackend

    for name in attention_env.VARIABLES:  # Megatron writes them: recorded here, so each is restored afterwards
        monkeypatch.setenv(name, "")

    def megatron_accepts(backend: str, env: dict[str, str | None]) -> bool:
        for name in attention_env.VARIABLES:
            if env.get(name) is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, str(env[name]))
        try:
            LanguageModule._set_attention_backend(SimpleNamespace(config=SimpleNamespace(
                attention_backend=AttnBackend[backend])))
        except AssertionError:
            return False
        return True

    for backend, values in itertools.product(attention_env.EXPECTED, COMBINATIONS):
        env = dict(zip(attention_env.VARIABLES, values, strict=True))
        spec = ["local"] if backend == "local" else None
        found = attention_env.refusal(backend, env.get, spec, lambda _: "launcher.env")
        assert (found is None) == megatron_accepts(backend, env), (backend, values, found)
        if found is None:
            continue
        followed, now = backend, dict(env)
        for name, value in first_way_out(found[1]):
            if name == "attention_backend":
                followed = value
            else:  # null unsets it
                now[name.removeprefix("env.")] = None if value == "null" else value
        assert (followed, now) != (backend, env), found[1]
        assert megatron_accepts(followed, now), (backend, values, found[1])


@pytest.mark.parametrize("values", [v for v in COMBINATIONS if attention_env.mismatches("auto", dict(
    zip(attention_env.VARIABLES, v, strict=True)).get)])
def test_every_refusal_names_the_variable_its_value_and_the_backend_and_its_hint_is_accepted(values):
    before = problems(env_sets(values))
    assert len(before) == 1
    message, hint = before[0].message, before[0].hint
    for name, value, _ in attention_env.mismatches("auto", dict(zip(attention_env.VARIABLES, values,
                                                                    strict=True)).get):
        assert f"{name}={value} (launcher.env)" in message
    assert "attention_backend auto" in message and before[0].stage == "runtime"
    fixes = [f"{name}={value}" for name, value in first_way_out(hint)]
    assert fixes and problems([*env_sets(values), *fixes]) == []


def test_one_backend_named_by_the_variables_is_the_hint():
    # TE with fused and unfused attention off ran flash attention: the pin says so with --attention-backend
    hint = problems(["env.NVTE_FUSED_ATTN=0", "env.NVTE_UNFUSED_ATTN=0"])[0].hint
    assert hint.startswith("set attention_backend=flash ")
    hint = problems(["env.NVTE_FLASH_ATTN=0", "env.NVTE_FUSED_ATTN=0"], te=True)[0].hint
    assert hint.startswith("set attention_backend=unfused ")


def test_several_backends_named_by_the_variables_unset_them_first():
    hint = problems(["env.NVTE_FUSED_ATTN=0"])[0].hint
    assert hint.startswith("unset it: --set env.NVTE_FUSED_ATTN=null ") and "set attention_backend=flash or set " \
        "attention_backend=unfused" in hint
    assert "attention_backend=local" not in hint  # only with --spec local (arguments.py:430)
    assert problems(["env.NVTE_FUSED_ATTN=0", "env.NVTE_FUSED_ATTN=null"]) == []


@pytest.mark.parametrize("values", [v for v in COMBINATIONS if attention_env.mismatches("auto", dict(
    zip(attention_env.VARIABLES, v, strict=True)).get)])
def test_every_refusal_offers_unsetting_the_variables_and_that_arrives(values):
    """`--set env.NAME=null` (no rank sees the variable, the preset's or an inherited one) is always offered, for
    every variable the backend disagrees with, and followed it gives an accepted job."""
    for given, inherited in ((env_sets(values), {}), ([], {n: v for n, v in zip(attention_env.VARIABLES, values,
                                                                             strict=True) if v is not None})):
        (problem,) = problems(given, inherited)
        unset = [f"env.{name}=null" for name, _, _ in attention_env.mismatches("auto", dict(zip(
            attention_env.VARIABLES, values, strict=True)).get)]
        assert all(f"--set {u}" in problem.hint for u in unset), problem.hint
        assert problems([*given, *unset], inherited) == []


def test_an_explicit_backend_keeps_its_own_values():
    assert problems(["attention_backend=flash", "env.NVTE_FUSED_ATTN=0"]) == []
    assert problems(["attention_backend=flash", "env.NVTE_FUSED_ATTN=0", "env.NVTE_UNFUSED_ATTN=0"]) == []
    wrong = problems(["attention_backend=fused", "env.NVTE_FUSED_ATTN=0"], te=True)
    assert wrong and "attention_backend fused expects 1" in wrong[0].message


def test_a_variable_the_launch_inherits_is_judged_and_the_hint_overrides_it():
    inherited = {"NVTE_FUSED_ATTN": "0"}
    found = problems([], inherited)
    assert found and "NVTE_FUSED_ATTN=0 (inherited from the environment the launch starts in)" in found[0].message
    assert problems([f"{n}={v}" for n, v in first_way_out(found[0].hint)], inherited) == []
    assert problems(["attention_backend=unfused"], inherited) == []


def test_the_dry_run_refuses_an_inherited_variable_as_a_user_sees_it(launch):
    code, out, err = launch("345m", "--dry-run", env={"NVTE_FUSED_ATTN": "0"})
    assert code == 2 and "Traceback" not in err
    assert "error: NVTE_FUSED_ATTN=0 (inherited from the environment the launch starts in)" in err
    assert "hint: unset it: --set env.NVTE_FUSED_ATTN=null " in err
    code, _, err = launch("345m", "--dry-run", "--set", "env.NVTE_FUSED_ATTN=null", env={"NVTE_FUSED_ATTN": "0"})
    assert code == 0, err
