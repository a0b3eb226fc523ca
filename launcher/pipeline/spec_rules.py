"""--spec: the layer spec Megatron's gpt_builder imports at model build, judged before launch.

At the pin, gpt_builder (gpt_builders.py:31) hands `args.spec` to `import_module` (megatron/core/transformer/
spec_utils.py:44), which unpacks exactly two words (module, attribute) and, where the module cannot be imported,
logs the ImportError and returns None; the object it returns is taken as the spec itself (not called), and
`_get_block_submodules` (transformer_block.py:257) raises "specialize for NoneType" (or "for function") for
anything but a transformer block or layer spec. So a spec of a fork's package the target lacks, a builder function
or a one-word spec (`--spec local`) passes every argument check and stops every rank at model build.
"""

from __future__ import annotations

from typing import Any

from launcher.megatron.pin import has_module

# The launcher's own layer specs (launcher/inside/megatron_ext), on the ranks' PYTHONPATH when a job names them.
LAUNCHER_SPECS = "launcher.inside.megatron_ext."
# Megatron's own module-level objects at the pin that gpt_builder can build a GPT model from (a ModuleSpec of a
# TransformerBlock or transformer layer, or TransformerBlockSubmodules): tests/pipeline/test_spec_rules.py derives
# this from the installed megatron-core. Its builders (get_gpt_layer_local_spec …) are functions, which
# import_module does not call.
MEGATRON_LAYER_SPECS = frozenset({("megatron.core.models.bert.bert_layer_specs", "bert_layer_local_spec")})
# Modules of the Megatron-LM checkout itself (besides the megatron package): the entry scripts and their builders.
MEGATRON_ROOTS = ("megatron", "pretrain_gpt", "gpt_builders", "model_provider")
DEFAULT_SPEC = "set spec=null (Megatron's own layer spec for the job's settings)"
STOPS = "every rank stops at model build"


def spec_words(value: Any) -> list[str]:
    if value is None:
        return []
    return value.split() if isinstance(value, str) else [str(word) for word in value]


def distribution_name(module: str) -> str:
    """The name launcher.packages holds for a module's top-level package (lower case, '-' for '_')."""
    return module.split(".", 1)[0].lower().replace("_", "-")


def check(c: Any) -> None:
    """`c` is layout's _Checker: c.arg reads a setting, c.fail reports, c.preset.launcher.packages is what the target
    declares besides TE and apex."""
    words = spec_words(c.arg("spec"))
    if not words:
        return
    shown = " ".join(words)
    if len(words) != 2:
        c.fail(f"spec {shown}: Megatron imports the layer spec as a module and an attribute of it (two words; "
               f"spec_utils.py:50 unpacks them), so with {len(words)} word(s) {STOPS} with a ValueError "
               "(gpt_builders.py:32)", DEFAULT_SPEC, "runtime")
        return
    module, name = words
    if module.startswith(LAUNCHER_SPECS):
        if has_module(module):
            return
        c.fail(f"spec {shown}: no such module among the launcher's layer specs ({LAUNCHER_SPECS}…): Megatron's "
               f"import_module returns None and {STOPS} (transformer_block.py:257)",
               f"{DEFAULT_SPEC}, or spec={' '.join(_launcher_spec_example())}", "runtime")
        return
    if module.split(".", 1)[0] in MEGATRON_ROOTS:
        if (module, name) in MEGATRON_LAYER_SPECS:
            return
        c.fail(f"spec {shown}: Megatron takes the object the spec names as the layer spec itself, not calling it, "
               "and the pinned Megatron has no transformer layer or block spec by that name (a builder function "
               f"such as get_gpt_layer_local_spec is not one): {STOPS} with \"specialize for …\" "
               "(transformer_block.py:257)", DEFAULT_SPEC, "runtime")
        return
    package = distribution_name(module)
    if package in c.preset.launcher.packages:
        return
    declared = ", ".join(c.preset.launcher.packages) or "none"
    c.fail(f"spec {shown}: the module is {package}'s, which the target does not declare (launcher.packages: "
           f"{declared}); where it cannot be imported Megatron's import_module logs the error and returns None, and "
           f"{STOPS} with \"specialize for NoneType\" (spec_utils.py:53, transformer_block.py:257)",
           f"{DEFAULT_SPEC}; or, if the target has that package, declare it: --set packages={package}", "runtime")


def _launcher_spec_example() -> tuple[str, str]:
    from launcher.inside.megatron_ext import SDPA_SPEC_FAST

    return SDPA_SPEC_FAST
