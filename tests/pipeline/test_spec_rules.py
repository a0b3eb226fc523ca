"""--spec: refused before launch where Megatron's gpt_builder cannot build a model from it at the target (a fork's
package the target does not declare, a builder function, not two words), with a hint that leads to an accepted
job; accepted for the launcher's own specs, Megatron's layer specs and a declared package's."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from launcher.errors import UserError
from launcher.megatron.pin import Kernels
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve
from launcher.pipeline.spec_rules import MEGATRON_LAYER_SPECS

BARE = Kernels(False, False, "preset")
FORK_SPEC = "spec=[mindspeed_llm.tasks.models.spec.qwen3_next_spec,layer_spec]"


def job(overrides):
    return resolve(load_preset("345m", list(overrides)), 1, 1, kernels=BARE)


def refusal(overrides) -> str:
    with pytest.raises(UserError) as err:
        job(overrides)
    return err.value.render()


def spec_problems(overrides) -> list[str]:
    try:
        job(overrides)
    except UserError as exc:
        return [p.render() for p in exc.problems if "spec " in p.message]
    return []


def test_a_forks_spec_the_target_does_not_declare_is_refused_with_both_ways_out():
    text = refusal([FORK_SPEC])
    assert "error: spec mindspeed_llm.tasks.models.spec.qwen3_next_spec layer_spec: the module is mindspeed-llm's" \
        in text
    assert "specialize for NoneType" in text
    assert "hint: set spec=null" in text and "--set packages=mindspeed-llm" in text


@pytest.mark.parametrize("way_out", [["spec=null"], ["packages=mindspeed-llm"], ["packages=mindspeed_llm"]])
def test_each_way_out_of_the_hint_is_accepted(way_out):
    assert not spec_problems([FORK_SPEC, *way_out])


@pytest.mark.parametrize("spec", ["spec=local", "spec=[a.b,c,d]"])
def test_a_spec_of_other_than_two_words_is_refused(spec):
    text = refusal([spec])
    assert "two words" in text and "ValueError" in text and "hint: set spec=null" in text


def test_a_megatron_builder_function_is_refused_and_its_layer_spec_accepted():
    text = refusal(["spec=[megatron.core.models.gpt.gpt_layer_specs,get_gpt_layer_local_spec]"])
    assert "not calling it" in text and "hint: set spec=null" in text
    assert not spec_problems(["spec=[megatron.core.models.bert.bert_layer_specs,bert_layer_local_spec]"])


def test_the_launchers_own_specs_are_accepted_and_a_misspelt_one_refused():
    assert not spec_problems(["spec=[launcher.inside.megatron_ext.sdpa_spec_fast,layer_spec]"])
    text = refusal(["spec=[launcher.inside.megatron_ext.sdpa_spec_fastest,layer_spec]"])
    assert "no such module among the launcher's layer specs" in text


def test_megatrons_import_module_returns_none_for_a_module_it_cannot_import_and_does_not_call_what_it_finds():
    """What the rule stands on, at the installed megatron-core."""
    from megatron.core.transformer.spec_utils import import_module

    assert import_module(("mindspeed_llm.tasks.models.spec.qwen3_next_spec", "layer_spec")) is None
    builder = import_module(("megatron.core.models.gpt.gpt_layer_specs", "get_gpt_layer_local_spec"))
    assert callable(builder) and not hasattr(builder, "submodules")
    with pytest.raises(ValueError):
        import_module(("local",))


def test_the_table_of_megatrons_layer_specs_is_the_installed_megatron_cores():
    """Every module-level object of megatron.core.models' spec modules that gpt_builder builds a GPT model from."""
    import megatron.core.models as models
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_block import TransformerBlock, TransformerBlockSubmodules
    from megatron.core.transformer.transformer_layer import BaseTransformerLayer

    found = set()
    for info in pkgutil.walk_packages(models.__path__, "megatron.core.models."):
        if "spec" not in info.name.rsplit(".", 1)[-1]:
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # a spec module of a package not installed here (Transformer Engine's)
            continue
        for name, value in vars(module).items():
            block = isinstance(value, TransformerBlockSubmodules)
            layer = isinstance(value, ModuleSpec) and isinstance(value.module, type) and \
                issubclass(value.module, (TransformerBlock, BaseTransformerLayer))
            if block or layer:
                found.add((info.name, name))
    assert found == set(MEGATRON_LAYER_SPECS)
