"""A configuration file that the script writes itself and gives to the training command.

`cat > ds_config.json <<EOF … EOF` or `echo '{…}' > ds_config.json`, then `--deepspeed_config ds_config.json`: the
file's text is known from the script, so the import reads it rather than calling it unreadable. A DeepSpeed JSON is
compared with the Megatron flags beside it (its batch sizes, precision, gradient clipping, ZeRO stage); what the pin has
no place for (DeepSpeed's own optimizer, scheduler, ZeRO sharding, offload …) is named key by key. Any other flag whose
value is such a file is said with what the file held.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from launcher import untrusted
from launcher.errors import UserError
from launcher.importer.bash_subset import MARK, show, unresolved_names, written_place
from launcher.megatron import args as megatron_args

DEEPSPEED_FLAGS = ("--deepspeed_config", "--deepspeed-config")
# DeepSpeed keys that change nothing of what trains: what it prints, and a check of its own
DEEPSPEED_LOGGING = {"steps_per_print", "wall_clock_breakdown", "dump_state", "flops_profiler", "tensorboard",
                     "wandb", "csv_monitor", "comms_logger", "memory_breakdown"}
DEEPSPEED_CHECKS = {"zero_allow_untested_optimizer"}
# fp16's loss scaler in DeepSpeed's JSON → Megatron's setting (DeepSpeed's initial_scale_power p is 2**p)
LOSS_SCALER = {"initial_scale_power": "initial_loss_scale", "loss_scale_window": "loss_scale_window",
               "hysteresis": "hysteresis", "min_loss_scale": "min_loss_scale", "loss_scale": "loss_scale"}
SHOWN_CHARS = 300


def written_key(value: str, written: Mapping[str, object], where: str | None = ".") -> str | None:
    """The file the script wrote that `value` names in the directory `where` (_Reader.where) of the command that
    names it (`./ds.json` and `$(pwd)/ds.json` are the `ds.json` it wrote there)."""
    for here in (f"{MARK}$(pwd){MARK}/", f"{MARK}PWD{MARK}/", "${PWD}/"):
        value = value.removeprefix(here)
    key = written_place(value, where)
    return key if key is not None and key in written else None


def describe(flag: str, value: str, text: str, line: int, settings: Mapping[str, Any]) -> tuple[str, bool]:
    """(what the import says of `flag value`, whether nothing of the file is lost) for a file the script wrote."""
    where = f"the script writes {show(value)} itself (line {line})"
    if flag not in DEEPSPEED_FLAGS:
        return f"{where}; the file is not read as this flag's: it holds {_shown(text)}", False
    if unresolved_names(text):
        names = ", ".join(f"${n}" for n in dict.fromkeys(unresolved_names(text)))
        return (f"{where}, with {names} not known without running the script, so what DeepSpeed reads is not known: "
                f"{_shown(text)}"), False
    try:  # strict, as every JSON from elsewhere: no NaN, no number past a float, nesting of at most 64 levels
        config = untrusted.loads_json(text, "it")
    except UserError as exc:
        why = str(exc).removeprefix("it is not valid JSON: ")
        return f"{where}, and it is not JSON that can be read here ({why}): {_shown(text)}", False
    if not isinstance(config, dict):
        return f"{where}, and it holds no JSON object: {_shown(text)}", False
    agree, differ, lost = _deepspeed(config, settings)
    parts = [where]
    if agree:
        parts.append("as the Megatron flags: " + _listed(agree))
    if differ:
        parts.append("against the Megatron flags (DeepSpeed's engine trains with the JSON's): " + _listed(differ))
    if lost:
        parts.append("not carried (the pin trains without DeepSpeed): " + _listed(lost))
    clean = not differ and not lost
    if clean:
        parts.append("nothing else: the preset trains what it describes")
    return "; ".join(parts), clean


def _deepspeed(config: Mapping[str, Any], settings: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(agreeing, differing, not carried) descriptions of a DeepSpeed JSON's keys."""
    agree: list[str] = []
    differ: list[str] = []
    lost: list[str] = []

    def given(dest: str) -> Any:  # the script's value, else the pin's default (what Megatron trains with)
        return settings[dest] if dest in settings else megatron_args.catalog()[dest].default

    def compare(key: str, value: Any, flag: str, given: Any) -> None:
        if given == value:
            agree.append(f"{key} {_json(value)} = {flag} {_json(given)}")
        else:
            differ.append(f"{key} {_json(value)}, {flag} {_json(given) if given is not None else '(not given)'}")

    for key, value in config.items():
        if key == "train_batch_size":
            compare(key, value, "--global-batch-size", settings.get("global_batch_size"))
        elif key == "train_micro_batch_size_per_gpu":
            compare(key, value, "--micro-batch-size", settings.get("micro_batch_size"))
        elif key == "gradient_accumulation_steps":
            gbs, mbs = settings.get("global_batch_size"), settings.get("micro_batch_size")
            # counts from the script's flags and the JSON are anything written there (0, -2, true): only positive
            # ones divide
            if all(_positive(n) for n in (value, gbs, mbs)) and gbs % (mbs * value) == 0:
                agree.append(f"{key} {value} (Megatron's: --global-batch-size / --micro-batch-size / data-parallel "
                             f"size, so a data-parallel size of {gbs // (mbs * value)})")
            else:
                differ.append(f"{key} {_json(value)} (Megatron computes it from the batch sizes and the "
                              "data-parallel size)")
        elif key in ("bf16", "fp16") and isinstance(value, dict):
            on = value.get("enabled", False) is True  # DeepSpeed's default: off unless "enabled": true
            compare(f"{key}.enabled", on, f"--{key}", bool(settings.get(key)))
            rest = sorted(k for k in value if k != "enabled" and not (on and key == "fp16" and k in LOSS_SCALER))
            for name in sorted(k for k in value if on and key == "fp16" and k in LOSS_SCALER):
                dest, scale = LOSS_SCALER[name], value[name]
                if name == "initial_scale_power" and isinstance(scale, int) and 0 <= scale < 64:
                    scale = 2 ** scale
                elif name == "loss_scale" and scale == 0:
                    scale = None  # dynamic, as Megatron's default
                label = f"fp16.{name} {_json(value[name])}, a scale of" if scale != value[name] else f"fp16.{name}"
                compare(label, scale, "--" + dest.replace("_", "-"), given(dest))
            if on and rest:
                lost.append(f"{key}'s {', '.join(rest)}")
        elif key == "gradient_clipping":
            compare(key, value, "--clip-grad", given("clip_grad"))
        elif key == "zero_optimization" and isinstance(value, dict):
            stage = value.get("stage", 0)
            rest = sorted(k for k in value if k != "stage")
            if stage != 0:
                hint = "--set use_distributed_optimizer=true" if stage == 1 else \
                    "--set use_distributed_optimizer=true (stage 1's sharding) or use_megatron_fsdp=true (stage 3's)"
                lost.append(f"zero_optimization.stage {_json(stage)} (ZeRO's sharding; instead: {hint})")
            else:
                agree.append("zero_optimization.stage 0 (shards nothing)")
            if rest:
                lost.append(f"zero_optimization's {', '.join(rest)}")
        elif key in DEEPSPEED_LOGGING:
            agree.append(f"{key} (what DeepSpeed prints)")
        elif key in DEEPSPEED_CHECKS:
            agree.append(f"{key} (a check of DeepSpeed's own)")
        else:
            lost.append(f"{key} {_shown(_json(value), 80)}")
    return agree, differ, lost


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _listed(items: list[str], limit: int = 20) -> str:
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":")) if not isinstance(value, str) else value


def _shown(text: str, limit: int = SHOWN_CHARS) -> str:
    flat = " ".join(show(text).split())
    return flat if len(flat) <= limit else flat[:limit] + " …"
