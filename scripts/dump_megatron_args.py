"""Write launcher/data/megatron_args.json: every argument of Megatron's own parser at the pinned commit.

The launcher uses this list to know Megatron's argument names and types without importing torch.
The parser is the pinned checkout's ($MEGATRON_LM_PATH or third_party/megatron-lm), imported from there: the
launcher runs that checkout's pretrain_gpt.py, and the megatron-core wheel's megatron/training can differ from it
(the 0.18.0 wheel has --fp8-output-proj, the pin's parser does not; a flag only the wheel has would pass the
dry-run and then stop the run at argument parsing). Without a checkout the script refuses.
Besides Megatron's own parser, pretrain_gpt.py passes extra argument providers: ModelOpt's arguments
(megatron/post_training/arguments.py, added whenever that module imports, i.e. always from a checkout). Those
come from the checkout too and are marked "provider": "modelopt".
Needs torch and the checkout's dependencies (those of megatron-core 0.18.0):

    python scripts/dump_megatron_args.py            # rewrite the file
    python scripts/dump_megatron_args.py --check    # exit 1 if the file is out of date
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "launcher" / "data" / "megatron_args.json"
# pretrain_gpt.py:396 passes add_modelopt_args as extra_args_provider when megatron.post_training imports.
PROVIDERS = {"modelopt": "megatron/post_training/arguments.py"}

# How a preset value turns into flags: "value" takes an argument, "true"/"false" are store_true/store_false
# switches, "bool" is an --x/--no-x pair (BooleanOptionalAction).
KINDS = {
    argparse._StoreAction: "value",
    argparse._StoreTrueAction: "true",
    argparse._StoreFalseAction: "false",
    argparse.BooleanOptionalAction: "bool",
}


# Megatron's per-layer pattern parsers (arguments.py: an int, or a list expression it evals); the launcher reads
# those values with launcher/megatron/layer_pattern.py.
PATTERN_TYPES = ("moe_freq_type", "no_rope_freq_type", "la_freq_type")


def type_name(action: argparse.Action) -> str:
    """int, float, layer_pattern or str; Megatron's other parsing callables (enums) take their text as is."""
    if action.type in (int, float):
        return action.type.__name__
    return "layer_pattern" if getattr(action.type, "__name__", "") in PATTERN_TYPES else "str"


def jsonable(value):
    """Enum members (attention backend, signals) are written by name, as users type them."""
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if hasattr(value, "name") and hasattr(value, "value"):
        return value.name
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def checkout() -> Path | None:
    for candidate in (os.environ.get("MEGATRON_LM_PATH"), ROOT / "third_party" / "megatron-lm"):
        if candidate and (Path(candidate) / "pretrain_gpt.py").is_file():
            return Path(candidate)
    return None


def provider_parsers(root: Path) -> dict[str, argparse.ArgumentParser]:
    """Each extra provider's arguments on a parser of their own."""
    parsers = {}
    for name, relative in PROVIDERS.items():
        spec = importlib.util.spec_from_file_location(f"_provider_{name}", root / relative)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # plain argparse code: it imports nothing
        parsers[name] = module.add_modelopt_args(argparse.ArgumentParser(allow_abbrev=False))
    return parsers


def collect(root: Path) -> dict:
    # pretrain_gpt.py imports `megatron` from its own directory: so does this script, ahead of any installed copy.
    os.environ.setdefault("NO_VCS_VERSION", "1")  # skip the `git rev-parse` megatron.core runs at import
    sys.path.insert(0, str(root))
    from megatron.core import package_info
    from megatron.training import arguments

    if not Path(arguments.__file__).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"megatron.training was imported from {arguments.__file__}, not from the checkout {root}")
    parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    args = entries(parser, "megatron")
    extra = {}
    for name, provider_parser in provider_parsers(root).items():
        extra.update(entries(provider_parser, name))
    for dest, entry in extra.items():
        if dest in args:
            raise SystemExit(f"provider argument {dest!r} shadows one of Megatron's own")
        args[dest] = entry
    # The checkout's own version (package_info), without the git hash megatron.core.__version__ may append.
    return {"megatron_core": package_info.__version__, "arguments": dict(sorted(args.items()))}


def entries(parser: argparse.ArgumentParser, provider: str) -> dict:
    args = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        kind = KINDS[type(action)]  # a KeyError here means Megatron grew a new kind of action
        entry = {
            "flags": [s for s in action.option_strings if s.startswith("--")],
            "kind": kind,
            "default": jsonable(action.default),
        }
        if kind == "value":
            entry["type"] = type_name(action)
            if action.nargs is not None:
                entry["nargs"] = action.nargs
            if action.choices is not None:
                entry["choices"] = [jsonable(c) for c in action.choices]
        if provider != "megatron":
            entry["provider"] = provider
        if action.dest in args:
            raise SystemExit(f"two flags share the dest {action.dest!r}: the launcher assumes one per dest")
        args[action.dest] = entry
    return args


def main() -> int:
    check = "--check" in sys.argv[1:]
    root = checkout()
    if root is None:
        print("error: no Megatron-LM checkout at the pin\n"
              "hint: scripts/fetch-megatron.sh, or set MEGATRON_LM_PATH to the checkout", file=sys.stderr)
        return 2
    text = json.dumps(collect(root), indent=1, sort_keys=True) + "\n"
    if check:
        if OUT.read_text() != text:
            print(f"{OUT} differs from the parser of the checkout at {root}: run python scripts/dump_megatron_args.py",
                  file=sys.stderr)
            return 1
        print(f"{OUT} matches the parser of the checkout at {root}")
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
