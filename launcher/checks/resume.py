"""Will this job resume the checkpoint under --load as the user expects? Judged before any GPU is asked for, from
what the checkpoint says about itself (checks/checkpoint.py), item by item:

    found      a checkpoint where --load expects one (the user's load, or --resume): none → refused, since
               Megatron would start from iteration 0 without a word; with non_persistent_ckpt_type=global, a
               non-persistent checkpoint at least as new is the one Megatron loads, and the one judged
    shape      the model's parameter tensors (checks/model_tensors.py) as the pin loads them: another shape, or one
               the checkpoint lacks → refused, the load fails; one the job's model lacks → a warning (left unread,
               another model trains); with use_checkpoint_args, the model settings Megatron takes from the checkpoint
    layout     TP/PP/EP/CP: torch_dist reshards on load (a note); the torch format cannot → refused, with the
               conversion Megatron offers; a distributed optimizer saved as dp_reshardable cannot follow a TP/PP
               change, nor an MoE optimizer state EP 1 ↔ EP > 1 → refused
    format     the format on disk against the job's ckpt_format
    precision  the optimizer state against the job's optimizer, as measured at the pin (checks/optimizer_state.py):
               what raises at load (fp32 ↔ fp16/bf16, the distributed optimizer turned on or off, a dp_reshardable
               state at other buffer dtypes or another vocabulary) → refused with what lifts it; what loads but
               changes the weights (fp16 ↔ bf16, a fully reshardable state's precision) → a warning; weights only,
               FP8 → a note
    vocabulary another vocab_size or padding: torch_dist loads it, rows zero-filled or dropped → a warning
    data       global batch, sequence length, data blend, split, seed: changed → a warning with the numbers,
               since the data order and the samples per iteration change from the resumed iteration on
    version    the checkpoint's format version and stored settings against the pinned Megatron

Levels: "refuse" (the job would fail at load, or silently not resume), "warn", "note", "ok".
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from launcher.checks import checkpoint_args_taken, model_tensors, optimizer_state
from launcher.checks.checkpoint import TRACKER as TRACKER_NAME
from launcher.checks.checkpoint import StoredCheckpoint
from launcher.errors import shown
from launcher.megatron import layer_pattern
from launcher.pipeline.load_rules import training_iterations

# megatron/core/optimizer/distrib_optimizer.py DistributedOptimizer.checkpoint_fully_reshardable_formats
RESHARDABLE_OPTIMIZER = ("fully_reshardable", "fully_sharded_model_space", "fsdp_dtensor")
# Settings Megatron's validate_args adds to args (so they are stored) that are no flags at the pinned commit.
DERIVED = frozenset({
    "_is_global_batch_size_explicitly_specified", "consumed_train_samples", "consumed_valid_samples",
    "data_parallel_size", "params_dtype", "rank", "skipped_train_samples", "transformer_pipeline_model_parallel_size",
    "use_dist_ckpt", "use_layer_wise_distributed_optimizer", "variable_seq_lengths",
    "virtual_pipeline_model_parallel_size", "world_size", "iteration", "num_floating_point_operations_so_far",
    "model_type"})  # model_type: training.get_model sets it
# Flags of the pinned parser that validate_args deletes from args: a checkpoint written by the pin lacks them (as it
# lacks the flags of extra argument providers, such as ModelOpt's, where the run had none).
NOT_STORED = frozenset({"batch_size", "checkpoint_activations", "cuda_graph_scope_deprecated", "model_parallel_size",
                        "recompute_activations", "warmup"})
NON_PERSISTENT_SUBDIR = "non_persistent"  # checkpointing.py _NON_PERSISTENT_CKPT_SUBDIR: LOAD/non_persistent
CHECKPOINT_VERSION = 3.0  # what megatron/training/checkpointing.py generate_state_dict writes at the pin
SHAPE_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "kv_channels", "num_query_groups",
                "ffn_hidden_size", "swiglu", "norm_size", "position_embeddings", "untied", "linear_bias", "qkv_bias",
                "attention_output_gate", "qk_layernorm", "num_experts", "moe_ffn_hidden_size", "shared_expert_size",
                "moe_layers", "mla", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim",
                "moe_pattern", "per_layer_keys", "mtp_layers", "softmax_offset", "expert_bias", "shared_expert_gate",
                "te_names", "grouped_experts", "moe_latent_size")
SHAPE_NAMES = {"norm_size": "normalization (weights per norm)", "position_embeddings": "learned position embeddings",
               "untied": "untie_embeddings_and_output_weights", "linear_bias": "add_bias_linear",
               "qkv_bias": "add_qkv_bias", "moe_layers": "MoE layers", "moe_pattern": "moe_layer_freq",
               "per_layer_keys": "layers saved one by one (moe_layer_freq or linear_attention_freq a list or above 1)",
               "mtp_layers": "multi-token prediction layers", "softmax_offset": "softmax_type learnable",
               "expert_bias": "moe_router_enable_expert_bias", "shared_expert_gate": "moe_shared_expert_gate",
               "te_names": "Transformer Engine's module names (transformer_impl)",
               "grouped_experts": "TE's grouped experts (moe_grouped_gemm)"}
# settings that build layers checks/model_tensors.py does not model (gated delta net and DSA attention, layers
# described one by one in a config file)
UNMODELLED = ("experimental_attention_variant", "linear_attention_freq", "heterogeneous_layers_config_path",
              "heterogeneous_layers_config_encoded_json")
DATA_SETTINGS = ("data_path", "train_data_path", "split", "mock_data", "data_args_path", "per_split_data_args_path",
                 "seed")
LAYOUT = (("TP", "tensor_model_parallel_size"), ("PP", "pipeline_model_parallel_size"),
          ("EP", "expert_model_parallel_size"), ("CP", "context_parallel_size"))


@dataclass(frozen=True)
class Item:
    level: str  # refuse | warn | note | ok
    topic: str  # found | shape | layout | format | optimizer | state | precision | batch | data | version | read
    message: str
    hint: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"level": self.level, "topic": self.topic, "message": self.message, "hint": self.hint}


@dataclass(frozen=True)
class ResumeCheck:
    """The verdict on resuming `stored` with the job; `items` in the order they are said."""

    stored: StoredCheckpoint
    expected: bool  # --load expects a checkpoint (the user's load, or --resume)
    items: tuple[Item, ...] = field(default_factory=tuple)

    @property
    def refused(self) -> list[Item]:
        return [i for i in self.items if i.level == "refuse"]

    @property
    def ok(self) -> bool:
        return not self.refused

    def summary(self) -> str:
        s = self.stored
        if not s.found:
            return f"{'a damaged checkpoint' if s.damaged else 'no checkpoint'} in {s.load}"
        consumed = (s.args or {}).get("consumed_train_samples")
        at = "release" if s.release else f"iteration {s.iteration}"
        samples = f", {consumed:,} samples consumed" if isinstance(consumed, int) else ""
        return f"{s.format} checkpoint at {at}{samples} in {s.load}"

    def render(self) -> list[str]:
        verdict = "refused" if self.refused else ("ok with warnings" if any(i.level == "warn" for i in self.items)
                                                  else "ok")
        lines = [f"resume: {verdict} ({self.summary()})"]
        for item in self.items:
            word = {"refuse": "refused", "warn": "warning", "note": "note", "ok": "ok"}[item.level]
            lines.append(f"  {word}: {item.message}")
            if item.hint and item.level in ("refuse", "warn"):
                lines.append(f"    hint: {item.hint}")
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "expected": self.expected, "summary": self.summary(),
                "checkpoint": self.stored.as_dict(), "items": [i.as_dict() for i in self.items],
                "consumed_train_samples": (self.stored.args or {}).get("consumed_train_samples")}


def expects_checkpoint(job: Any) -> bool:
    """The user's own --load (preset or --set), or --resume: a checkpoint must be there. A load the launcher set
    (a new run's own directory) may be empty: that run starts fresh, as does one where the user unset load
    (--set load=null: start from scratch on purpose)."""
    from launcher.pipeline.preset import parse_override

    given = dict(parse_override(text) for text in job.preset.overrides)
    if any(given.get(name, "").strip().lower() in ("null", "none", "~") for name in ("load", "megatron.load")):
        return False
    return job.existing is not None or bool(job.preset.megatron.get("load"))


def judge(job: Any, stored: StoredCheckpoint, pretrained: StoredCheckpoint | None = None) -> ResumeCheck:
    """Every item for resuming `stored` with `job` (a ResolvedJob). `pretrained`: what the job's
    pretrained_checkpoint holds, which Megatron fine-tunes from when `load` holds no checkpoint."""
    expected = expects_checkpoint(job)
    if stored.damaged:  # a tracker file that leads nowhere stops Megatron at load, before any fallback
        return ResumeCheck(stored, expected, (Item(
            "refuse", "found", f"the checkpoint in {stored.load} is damaged: {stored.why_not}",
            f"repair it ({TRACKER_NAME} names the iteration Megatron loads: point it at one that is complete), "
            "or load another directory (--set load=DIR), or start from scratch elsewhere (--set load=null with "
            "another save)"),))
    if not stored.found and pretrained is not None:
        return _pretrained(job, stored, pretrained)
    if not stored.found:
        said = _not_found(job, stored) if expected else Item(
            "ok", "found", f"no checkpoint in {stored.load} yet ({stored.why_not}): training starts at iteration 0")
        return ResumeCheck(stored, expected, (said,))
    items: list[Item] = []
    if not expected:
        items.append(Item("note", "found", f"{stored.load} already holds a checkpoint (the launcher pointed load at "
                          "save): Megatron resumes it rather than starting fresh"))
    items += _format(job, stored)
    if stored.args is None:
        items.append(Item("warn", "read", "the settings stored with the checkpoint could not be read: "
                          f"{stored.unread}; its model shape, layout and batch are not compared",
                          "launch doctor shows whether this Python has torch; Megatron itself reads them at load"))
        return ResumeCheck(stored, expected, tuple(items))
    saved = stored.args
    job_args = checkpoint_args_taken.taken(job.effective(), saved)
    items += _taken(job.effective(), job_args)
    # the vocabulary is padded to a multiple of TP: compared at the checkpoint's TP, a TP change is the layout's
    items += _shape(job_args, saved, stored, _int(saved.get("tensor_model_parallel_size"), job.layout.tp))
    items += _layout(job, saved, stored)
    items += _expert_optimizer(job, job_args, saved, stored)
    items += _state(job_args, saved, stored)
    vocabulary, padded = _vocabulary(job, job_args, saved, stored)
    items += vocabulary
    items += _precision(job_args, saved, stored, padded)
    items += _schedule(job_args, saved, stored)
    if not job_args.get("finetune"):
        items += _megatron_asserts(job_args, saved, any(i.level == "refuse" and i.topic == "shape" for i in items))
    if not job_args.get("finetune"):  # fine-tuning starts at iteration 0 with its own data and batch
        items += _batch(job_args, saved, stored)
        items += _data(job_args, saved)
    items += _version(stored)
    return ResumeCheck(stored, expected, tuple(items))


def _taken(written: Mapping[str, Any], taken: Mapping[str, Any]) -> list[Item]:
    """use_checkpoint_args: what Megatron takes from the checkpoint in place of the job's settings."""
    if not written.get("use_checkpoint_args"):
        return []
    changed = [(name, written.get(name), taken[name]) for name in taken
               if _normal(written.get(name)) != _normal(taken[name])]
    said = "; ".join(f"{name} {shown(a, 40)} → {shown(b, 40)}" for name, a, b in changed[:12]) or \
        "none differs from the job's"
    return [Item("note", "shape", "use_checkpoint_args: Megatron takes the model settings stored with the checkpoint "
                 f"in place of the job's (checkpointing.py load_args_from_checkpoint), judged so here: {said}")]


def _pretrained(job: Any, stored: StoredCheckpoint, pretrained: StoredCheckpoint) -> ResumeCheck:
    """checkpointing.py load_checkpoint: no checkpoint in load, a pretrained_checkpoint given → Megatron loads that
    with finetune=True (iteration 0, no optimizer state), or raises FileNotFoundError when it holds none either."""
    if not pretrained.found:
        return ResumeCheck(stored, True, (Item(
            "refuse", "found", f"no checkpoint in load={stored.load} ({stored.why_not}) nor in pretrained_checkpoint="
            f"{pretrained.load} ({pretrained.why_not}): Megatron stops with FileNotFoundError at load",
            "give a pretrained_checkpoint that holds one, or drop it (--set pretrained_checkpoint=null)"),))
    from dataclasses import replace as changed

    job = changed(job, megatron={**job.megatron, "finetune": True})
    check = judge(job, pretrained)
    note = Item("note", "found", f"no checkpoint in load={stored.load} yet: Megatron fine-tunes from "
                f"pretrained_checkpoint={pretrained.load} (iteration 0, optimizer state not loaded)")
    return ResumeCheck(pretrained, True, (note, *[i for i in check.items if i.topic != "found"]))


def _not_found(job: Any, stored: StoredCheckpoint) -> Item:
    if job.existing is not None:
        return Item("refuse", "found", f"nothing to resume in {job.existing.path}: {stored.why_not}; Megatron would "
                    "start from iteration 0", "the run saved no checkpoint: to start it over in its directory on "
                    "purpose, --set load=null; or give the checkpoint: --set load=DIR")
    return Item("refuse", "found", f"load={stored.load} expects a checkpoint, but {stored.why_not}: Megatron would "
                "start from iteration 0 without a word", "check the path; to start from scratch on purpose, drop it: "
                "--set load=null (the run saves to and resumes from its own directory)")


def _format(job: Any, stored: StoredCheckpoint) -> list[Item]:
    wanted = str(job.arg("ckpt_format"))
    auto = bool(job.arg("auto_detect_ckpt_format"))
    if stored.format == wanted:
        return [Item("ok", "format", f"format {stored.format}, as the job's ckpt_format")]
    if stored.format == "torch_dist" and wanted != "torch_dist":
        # auto_detect_ckpt_format finds the format on disk, but generate_state_dict builds the sharded state dict
        # that torch_dist loads into only for ckpt_format torch_dist (measured with torch: KeyError: 'model')
        said = ("auto_detect_ckpt_format detects torch_dist, but Megatron builds the state dict to load into from "
                f"ckpt_format {wanted} and stops at load (KeyError: 'model', checkpointing.py load_checkpoint)"
                if auto else f"Megatron loads {wanted} only (RuntimeError: Detected load from a distributed "
                "checkpoint, but neither --use-dist-ckpt nor --auto-detect-ckpt-format is set)")
        return [Item("refuse", "format", f"the checkpoint is torch_dist, the job's ckpt_format is {wanted}: {said}",
                     "set ckpt_format=torch_dist (the next save is torch_dist too)")]
    if stored.format == "torch":
        return [Item("note", "format", f"the checkpoint is in the torch format, the job saves {wanted}: Megatron "
                     f"detects the format on load; the next save is {wanted}")]
    return [Item("warn", "format", f"the checkpoint is {stored.format}, the job's ckpt_format is {wanted}",
                 f"set ckpt_format={stored.format} to resume it as saved")]


def _shape(job_args: Mapping[str, Any], saved: Mapping[str, Any], stored: StoredCheckpoint, tp: int) -> list[Item]:
    """The model's parameter tensors against the checkpoint's (checks/model_tensors.py), judged as the pin loads
    them (measured: scripts/ckpt_load_matrix.py). The padded vocabulary is _vocabulary's, but for the torch format,
    which stores the padded table as one tensor loaded strictly."""
    from launcher.estimate.formulas import model_shape

    unknown = [name for name in UNMODELLED if job_args.get(name) not in (None, "", False)
               or saved.get(name) not in (None, "", False)]
    if unknown:
        return [Item("warn", "shape", f"{', '.join(unknown)} builds layers whose tensors are not modelled here: the "
                     "model's tensors are not compared with the checkpoint's (Megatron stops at load on a tensor of "
                     "another shape or one the checkpoint lacks, and leaves unread one the job lacks)",
                     "resume with the checkpoint's model settings")]
    try:
        ours = model_shape(job_args, tp)
    except (KeyError, ValueError, TypeError):
        return [Item("warn", "shape", "the job's model shape is not fully known here: not compared")]
    try:
        theirs = model_shape(_typed(saved))
    except (KeyError, ValueError, TypeError) as error:
        return [Item("warn", "shape", f"the checkpoint's stored args do not give its model shape ({shown(error)}): "
                     "not compared")]
    diffs = [(SHAPE_NAMES.get(name, name), getattr(theirs, name), getattr(ours, name)) for name in SHAPE_FIELDS
             if getattr(theirs, name) != getattr(ours, name)]
    fmt = stored.format
    padded = fmt == "torch" and ours.padded_vocab_size and theirs.padded_vocab_size and \
        ours.padded_vocab_size != theirs.padded_vocab_size
    if padded:
        diffs.append(("padded vocabulary", theirs.padded_vocab_size, ours.padded_vocab_size))
    differ = model_tensors.compare(theirs, ours, fmt)
    if not differ and not padded:  # settings that name or add no tensor here (TE's names in a dense torch_dist)
        return [Item("ok", "shape", f"model shape as saved ({ours.num_layers} layers, hidden {ours.hidden_size}, "
                     f"{ours.num_attention_heads} heads)")]
    said = "; ".join(f"{name} {shown(a, 40)} (checkpoint) ≠ {shown(b, 40)} (job)" for name, a, b in diffs) or \
        "the same settings"
    why = _tensors_refused(job_args, saved, stored, differ)
    if padded and not why:
        why = "the torch format loads the padded embedding as one tensor: 'size mismatch' at load"
    take = "" if job_args.get("use_checkpoint_args") else \
        " (--set use_checkpoint_args=true takes most from it: not qk_layernorm, nor sizes the job sets)"
    if why:
        return [Item("refuse", "shape", f"the model differs from the checkpoint's: {said}; {why}",
                     f"resume with the checkpoint's model settings{take}, or start a new run without load "
                     "(--set load=null), or load only weights of the same shape")]
    effects = []
    if differ.added:
        effects.append(f"the job's {_names(differ.added)} are not in the checkpoint and keep their initial values")
    if differ.dropped:
        effects.append(f"the checkpoint's {_names(differ.dropped)} are left unread")
    return [Item("warn", "shape", f"the model differs from the checkpoint's: {said}: Megatron loads it without a "
                 f"word ({fmt} loads the tensors both have), and trains another model than the one saved: "
                 f"{'; '.join(effects) or 'its tensors have the same shapes'}",
                 f"resume with the checkpoint's model settings{take} to train the model saved")]


# dist_ckpt_strictness (dist_checkpointing/validation.py StrictHandling) values that stop the load on a tensor the
# model asks for and the checkpoint lacks, and on one the checkpoint has and the model does not ask for
STOPS_ON_ADDED = ("assume_ok_unexpected", "raise_unexpected", "raise_all")
STOPS_ON_DROPPED = ("raise_all",)


def _tensors_refused(job_args: Mapping[str, Any], saved: Mapping[str, Any], stored: StoredCheckpoint,
                     differ: model_tensors.Difference) -> str:
    """Why Megatron stops at load on these tensor differences ("" where it loads), as measured at the pin."""
    if differ.reshaped:
        name, a, b = differ.reshaped[0]
        error = "'Global shape mismatch'" if stored.format == "torch_dist" else "'size mismatch'"
        return f"{name} is {_dims(a)} in the checkpoint and {_dims(b)} in the job: Megatron stops at load ({error})"
    if not (differ.added or differ.dropped):
        return ""
    optimizer_read = _optimizer_read(job_args, saved, stored)
    if stored.format == "torch":
        asserted = [name for name, when in ASSERTED if when is None and name in saved
                    and _normal(saved[name]) != _normal(job_args.get(name))]
        if asserted and not job_args.get("finetune"):
            said = ", ".join(f"{name} {saved[name]} (checkpoint) ≠ {job_args.get(name)} (job)" for name in asserted)
            return (f"Megatron asserts {said} equal at load (check_checkpoint_args: AssertionError); with "
                    "finetune=true it loads the tensors both have instead")
        if not optimizer_read or not differ.params_changed:
            return ""  # the strict load fails, and checkpointing.py's fallback loads non-strictly without a word
        if differ.groups_changed:
            return (f"the optimizer's parameter groups change ({_counted(differ)}): Megatron stops at load "
                    "(ValueError: loaded state dict contains a parameter group that doesn't match the size of "
                    "optimizer's group)")
        return (f"the parameters are named otherwise (the job's {_names(differ.added)}; the checkpoint's "
                f"{_names(differ.dropped)}: {_counted(differ)}) while the optimizer's groups keep their sizes: the "
                "torch format's optimizer state (Adam's moments, the fp32 main weights) is matched by position, so "
                "it loads onto other tensors (a size mismatch stops the load or the first step), while the renamed "
                "weights keep their initial values (the non-strict fallback); no_load_optim=true loads the weights "
                "alone")
    strictness = str(job_args.get("dist_ckpt_strictness") or "assume_ok_unexpected")
    if differ.added and strictness in STOPS_ON_ADDED:
        return (f"the job's {_names(differ.added)} are not in the checkpoint: Megatron stops at load (KeyError: '… "
                f"from model not in state dict', dist_ckpt_strictness {strictness})")
    if differ.dropped and strictness in STOPS_ON_DROPPED:
        return (f"the checkpoint's {_names(differ.dropped)} are not in the job's model: Megatron stops at load "
                "('Some keys found in the checkpoint are missing in the provided sharded state dict', "
                f"dist_ckpt_strictness {strictness})")
    if optimizer_read and differ.params_changed and job_args.get("use_distributed_optimizer") and \
            optimizer_state.saved_kind(saved, stored.content_metadata) == "dp_reshardable":
        return (f"the distributed optimizer's state saved dp_reshardable is one flat buffer of every parameter "
                f"({_counted(differ)} changes its size): Megatron stops at load ('Global shape mismatch' for "
                "optimizer.distributed.….param); no_load_optim=true lifts it")
    return ""


def _names(names: Sequence[str]) -> str:
    """The tensors, the torch format's per-layer and per-expert ones said once (decoder.layers.*.…)."""
    said = list(dict.fromkeys(re.sub(r"\.\d+\.", ".*.", name) for name in names))
    return ", ".join(said[:4]) + (f" and {len(said) - 4} more" if len(said) > 4 else "")


def _counted(differ: model_tensors.Difference) -> str:
    parts = [f"{differ.added_count} tensor(s) added"] if differ.added else []
    return ", ".join(parts + ([f"{differ.dropped_count} dropped"] if differ.dropped else []))


def _dims(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join("vocabulary" if d == model_tensors.VOCAB else str(d) for d in shape) + ")"


def _vocabulary(job: Any, job_args: Mapping[str, Any], saved: Mapping[str, Any],
                stored: StoredCheckpoint) -> tuple[list[Item], tuple[int, int] | None]:
    """Another vocabulary (vocab_size, the tokenizer, make_vocab_size_divisible_by, or TP, which the padding is a
    multiple of) loads, and changes the model: torch_dist saves the embedding and output layer with
    allow_shape_mismatch, so the job's rows past the checkpoint's start at zero and the checkpoint's past the job's
    are dropped (dist_checkpointing/strategies/torch.py; measured: scripts/ckpt_load_matrix.py); the torch format
    loads one padded tensor strictly (a padded change is _shape's refusal), so only an unpadded change with the same
    padding loads there. Also (checkpoint, job) padded rows where TP and PP are unchanged, for the optimizer's
    state (a dp_reshardable state refuses another size)."""
    from launcher.estimate.formulas import model_shape

    try:
        ours, theirs = model_shape(job_args, job.layout.tp), model_shape(_typed(saved))
    except (KeyError, ValueError, TypeError):
        return [], None
    rows, vocab = (theirs.padded_vocab_size, ours.padded_vocab_size), (theirs.vocab_size, ours.vocab_size)
    same_layout = (job.layout.tp, job.layout.pp) == (_int(saved.get("tensor_model_parallel_size"), 1),
                                                     _int(saved.get("pipeline_model_parallel_size"), 1))
    pair = rows if all(rows) and same_layout else None
    vocab_changed = all(vocab) and vocab[0] != vocab[1]
    rows_changed = all(rows) and rows[0] != rows[1]
    if stored.format not in ("torch_dist", "torch") or not (vocab_changed or rows_changed) or \
            (stored.format == "torch" and rows_changed):
        return [], pair
    if stored.format == "torch_dist" and pair is not None and rows_changed and \
            _optimizer_read(job_args, saved, stored) and job_args.get("use_distributed_optimizer") and \
            optimizer_state.saved_kind(saved, stored.content_metadata) == "dp_reshardable":
        return [], pair  # the optimizer's state refuses it (_precision)
    said = f"vocab_size {vocab[0]} (checkpoint) → {vocab[1]} (job)" if vocab_changed else ""
    if rows_changed:
        why = "" if vocab_changed else (f" at TP {job.layout.tp}" if not same_layout else
                                        " (make_vocab_size_divisible_by)")
        said = (said + ", " if said else "") + f"padded {rows[0]} → {rows[1]} rows{why}"
    effect = []
    if rows[1] > rows[0]:
        effect.append(f"the job's rows {rows[0]}-{rows[1] - 1} start at zero")
    elif rows[1] < rows[0]:
        effect.append(f"the checkpoint's rows {rows[1]}-{rows[0] - 1} are dropped")
    if vocab_changed:
        effect.append("token ids of the job's tokenizer index the checkpoint's rows: unless it extends the "
                      "checkpoint's tokenizer id for id, they mean other tokens")
    else:
        effect.append("only padding rows differ, but their logits take part in the softmax: the loss changes")
    # padding rows that follow a TP change are the resharding Megatron offers: said, not warned
    level = "note" if not vocab_changed and not same_layout else "warn"
    return [Item(level, "shape", f"{said}: Megatron loads it without a word ({stored.format} loads the embedding "
                 f"and output layer at another size); {'; '.join(effect)}",
                 "resume with the checkpoint's vocabulary (vocab_size / tokenizer, make_vocab_size_divisible_by) "
                 "to resume exactly")], pair


def _layout(job: Any, saved: Mapping[str, Any], stored: StoredCheckpoint) -> list[Item]:
    lay = job.layout
    now = {"TP": lay.tp, "PP": lay.pp, "EP": lay.ep, "CP": lay.cp}
    before = {short: _int(saved.get(dest), 1) for short, dest in LAYOUT}
    changed = [short for short in now if now[short] != before[short]]
    if not changed:
        return [Item("ok", "layout", f"layout as saved (TP {lay.tp} · PP {lay.pp} · EP {lay.ep} · CP {lay.cp})")]
    said = ", ".join(f"{short} {before[short]} → {now[short]}" for short in changed)
    if stored.format == "torch":
        sharded = [s for s in changed if s in ("TP", "PP", "EP")]
        if sharded:
            tp, pp = before["TP"], before["PP"]
            return [Item("refuse", "layout", f"{said}: the torch format keeps one file per TP/PP/EP rank and cannot "
                         "be resharded; Megatron asserts the sizes match at load",
                         f"convert it first: resume once at the saved layout (--set tensor_model_parallel_size={tp} "
                         f"--set pipeline_model_parallel_size={pp}) with --set ckpt_convert_format=torch_dist --set "
                         "ckpt_convert_save=DIR (Megatron saves DIR/torch_dist and exits), then --set "
                         "load=DIR/torch_dist at the new layout")]
        return [Item("note", "layout", f"{said}: the weights do not depend on it")]
    items = [Item("note", "layout", f"{said}: torch_dist reshards on load; the saved RNG state is not used when "
                  "TP or PP changed" if {"TP", "PP"} & set(changed) else f"{said}: torch_dist reshards on load")]
    # EP across 1 is _expert_optimizer's; between sizes above 1 the experts' own optimizer state follows the
    # number of local experts (num_experts / EP)
    experts = _int(saved.get("num_experts"), 0) and _int(job.arg("num_experts"), 0)
    ep = "EP" in changed and experts and before["EP"] > 1 and now["EP"] > 1
    if "TP" in changed or "PP" in changed or ep:
        items += _optimizer_reshard(job, saved, stored, [s for s in changed if s in ("TP", "PP") or (s == "EP" and ep)])
    return items


def _expert_optimizer(job: Any, job_args: Mapping[str, Any], saved: Mapping[str, Any],
                      stored: StoredCheckpoint) -> list[Item]:
    """Expert parameters get an optimizer of their own only at EP > 1 (tensor_parallel/layers.py and TE's: param
    .allreduce = not expert_parallel; optimizer/__init__.py chains the two), so an MoE checkpoint saved at EP 1 holds
    one optimizer's state and one saved at EP > 1 two: across that line the optimizer state does not load
    (measured, EP 1 → 2: plain 'RuntimeError: Expected 2 entries in state dict, but got 3', ChainedOptimizer;
    dp_reshardable 'KeyError: chained_0.optimizer.… not in state dict'; EP 2 → 1: plain KeyError: 'pre_wd_mult')."""
    before, now = _int(saved.get("expert_model_parallel_size"), 1), job.layout.ep
    experts = _int(job_args.get("num_experts"), 0) and _int(saved.get("num_experts"), 0)
    if stored.format != "torch_dist" or not experts or (before > 1) == (now > 1) or \
            not _optimizer_read(job_args, saved, stored):
        return []
    return [Item("refuse", "optimizer", f"EP {before} → {now} with {experts} experts: expert parameters have an "
                 "optimizer of their own only at EP > 1, so the checkpoint's optimizer state is "
                 f"{'one optimizer' if before == 1 else 'two chained optimizers'} and the job's "
                 f"{'one' if now == 1 else 'two'}: Megatron stops at load ("
                 + ("plain optimizer: 'RuntimeError: Expected 2 entries in state dict, but got 3'; distributed: "
                    "KeyError 'chained_0.optimizer.… not in state dict')" if now > 1 else
                    "plain optimizer: KeyError: 'pre_wd_mult')"),
                 f"resume at EP {before}" + (" (or another EP above 1)" if before > 1 else "") +
                 ", or --set no_load_optim=true (the weights load at the new EP; Adam's moments start again)")]


def _optimizer_reshard(job: Any, saved: Mapping[str, Any], stored: StoredCheckpoint, axes: Sequence[str]) -> list[Item]:
    """Megatron raises at load when a distributed optimizer saved dp_reshardable meets a TP/PP change
    (checkpointing.py load_checkpoint: 'not supported for DistributedOptimizer with sharding type'), or an MoE
    model's EP change between sizes above 1 (measured, EP 2 → 4: 'Global shape mismatch' for the experts' flat
    buffer, chained_1.optimizer.distributed.….param: each rank's buffer holds its local experts)."""
    if not job.arg("use_distributed_optimizer") or job.arg("no_load_optim") or job.arg("finetune") \
            or saved.get("no_save_optim"):
        return []
    meta = stored.content_metadata
    if meta is None:  # saved before megatron-core 0.13: Megatron assumes this from the stored args
        kind = "fully_sharded_model_space" if saved.get("ckpt_fully_parallel_save") else "dp_zero_gather_scatter"
    else:
        kind = str(meta.get("distrib_optim_sharding_type") or "")
    if kind in RESHARDABLE_OPTIMIZER:
        return [Item("note", "optimizer", f"the distributed optimizer's state ({kind}) reshards with the model")]
    what = f"saved as {kind}" if kind else "saved without the distributed optimizer"
    said = "/".join(axes)
    how = ("'Global shape mismatch' for the experts' flat buffer, chained_1.optimizer.distributed.….param: each rank's "
           "holds num_experts / EP experts") if axes == ["EP"] else "'(TP, PP) mismatch after resume'"
    return [Item("refuse", "optimizer", f"the optimizer state was {what}, which cannot follow a {said} change: "
                 f"Megatron stops at load ({how})", f"resume at the saved {said}, or drop the optimizer state "
                 "(--set no_load_optim=true: Adam's moments start again), or save with "
                 "dist_ckpt_optim_fully_reshardable=true next time")]


def _state(job_args: Mapping[str, Any], saved: Mapping[str, Any], stored: StoredCheckpoint) -> list[Item]:
    """What load_checkpoint reads besides the weights unless the job says not to (release checkpoints and
    finetune read neither): the iteration, the optimizer state, and (torch format) the RNG state."""
    if stored.release or job_args.get("finetune"):
        return []
    items = []
    keys = set(stored.keys) if stored.keys is not None else None
    if keys is not None and not keys & {"iteration", "total_iters"}:
        items.append(Item("refuse", "state", f"{stored.file} holds no iteration: Megatron prints 'unable to load "
                          "iteration from checkpoint' at load and exits with status 0, having trained nothing",
                          "load it as weights only (--set finetune=true: iteration 0, no optimizer state)"))
    # generate_state_dict: 'optimizer' (torch_dist keeps its sharded part out of common.pt) and the scheduler's
    # 'opt_param_scheduler' are saved together, unless no_save_optim or no optimizer was given
    saved_state = {"optimizer"} if stored.format == "torch" else {"optimizer", "opt_param_scheduler"}
    no_optimizer = saved.get("no_save_optim") is True or (keys is not None and not keys & saved_state)
    if no_optimizer and not job_args.get("no_load_optim"):
        items.append(Item("refuse", "state", "the checkpoint holds no optimizer state (saved with no_save_optim or "
                          "without an optimizer), and the job loads it: Megatron stops at load ('Unable to load "
                          "optimizer from checkpoint', KeyError)",
                          "--set no_load_optim=true (Adam's moments start again; the learning-rate schedule too), or "
                          "--set finetune=true (weights only, iteration 0)"))
    no_rng = saved.get("no_save_rng") is True or (keys is not None and not keys & {"rng_state", "random_rng_state"})
    if stored.format == "torch" and no_rng and not job_args.get("no_load_rng"):
        # torch_dist skips a missing RNG state (ignore_rng_state); the torch format's load does not
        items.append(Item("refuse", "state", "the torch-format checkpoint holds no RNG state (saved with "
                          "no_save_rng), and the job loads it: Megatron prints 'Unable to load rng state from "
                          "checkpoint' at load and exits with status 0, having trained nothing",
                          "--set no_load_rng=true"))
    return items


def _params_dtype(settings: Mapping[str, Any]) -> str:
    return "fp16" if settings.get("fp16") is True else "bf16" if settings.get("bf16") is True else "fp32"


FP8_SETTINGS = ("fp8", "fp8_recipe", "fp8_param_gather")


def _optimizer_read(job_args: Mapping[str, Any], saved: Mapping[str, Any], stored: StoredCheckpoint) -> bool:
    """Whether load_checkpoint reads the checkpoint's optimizer state into the job's optimizer."""
    keys = set(stored.keys) if stored.keys is not None else None
    saved_state = {"optimizer"} if stored.format == "torch" else {"optimizer", "opt_param_scheduler"}
    has_optimizer = saved.get("no_save_optim") is not True and (keys is None or bool(keys & saved_state))
    return has_optimizer and not (stored.release or job_args.get("finetune") or job_args.get("no_load_optim"))


def _precision(job_args: Mapping[str, Any], saved: Mapping[str, Any], stored: StoredCheckpoint,
               padded_vocab: tuple[int, int] | None = None) -> list[Item]:
    """Params precision, the optimizer that reads the state, and FP8 between the checkpoint and the job.
    check_checkpoint_args compares none of them; the optimizer's load does. torch_dist: as measured at the pin
    (checks/optimizer_state.py). The torch format without the distributed optimizer: fp16/bf16 build
    Float16OptimizerWithFloat16Params (state: optimizer, grad_scaler, fp32_from_fp16_params) and fp32 an
    FP32Optimizer (state: the torch optimizer's own), and each reads keys only its own kind saved (KeyError:
    'Unable to load optimizer from checkpoint')."""
    old, new = _params_dtype(saved), _params_dtype(job_args)
    items = []
    optimizer_read = _optimizer_read(job_args, saved, stored)
    plain_optimizer = not saved.get("use_distributed_optimizer") and not job_args.get("use_distributed_optimizer")
    change = f"params {old} (checkpoint) → {new} (job)"
    if optimizer_read and stored.format == "torch_dist":
        items += [Item(v.level, v.topic, v.message, v.hint)
                  for v in optimizer_state.judge(job_args, saved, stored.content_metadata, padded_vocab)]
    elif old != new and optimizer_read and stored.format == "torch" and plain_optimizer and "fp32" in (old, new):
        kinds = {"fp32": "FP32Optimizer", "fp16": "Float16OptimizerWithFloat16Params",
                 "bf16": "Float16OptimizerWithFloat16Params"}
        items.append(Item("refuse", "precision", f"{change}: the checkpoint's optimizer state is a {kinds[old]}'s, "
                          f"the job's optimizer a {kinds[new]}, which reads keys the other never saved: Megatron "
                          "stops at load ('Unable to load optimizer from checkpoint', KeyError)",
                          f"keep {old} to resume ({optimizer_state.keep(old)}), or {optimizer_state.NO_LOAD_OPTIM}"))
    elif old != new and optimizer_read and stored.format == "torch" and plain_optimizer:
        v = optimizer_state.judge(job_args, saved, {})[0]  # the same optimizer classes as torch_dist's
        items.append(Item(v.level, v.topic, v.message, v.hint))
    elif old != new and optimizer_read:
        items.append(Item("warn", "precision", f"{change} with the optimizer state loaded ({stored.format or 'its'} "
                          "format" + ("" if plain_optimizer else ", distributed optimizer") + "): whether Megatron "
                          "loads that state into the job's optimizer was not measured at the pin",
                          f"keep {old} to resume exactly ({optimizer_state.keep(old)}), or "
                          f"{optimizer_state.NO_LOAD_OPTIM}"))
    elif old != new:
        items.append(Item("note", "precision", f"{change}: the weights are cast to {new} at load (the optimizer "
                          "state is not loaded)"))
    fp8 = [(name, saved.get(name), job_args.get(name)) for name in FP8_SETTINGS
           if name in saved and _normal(saved.get(name) or None) != _normal(job_args.get(name) or None)]
    if fp8:
        said = "; ".join(f"{name} {shown(a, 40)} (checkpoint) → {shown(b, 40)} (job)" for name, a, b in fp8)
        items.append(Item("note", "precision", f"{said}: Megatron does not compare FP8 settings at load "
                          "(check_checkpoint_args); the training numerics change from the resumed iteration"))
    return items


# What OptimizerParamScheduler.load_state_dict compares with the checkpoint's (optimizer_param_scheduler.py
# _check_and_set), in the words of its log.
SCHEDULE_NAMES = {"max_lr": "learning rate", "min_lr": "minimum learning rate", "warmup_steps": "warmup iterations",
                  "decay_steps": "total number of iterations", "decay_style": "learning rate decay style",
                  "start_wd": "start weight decay", "end_wd": "end weight decay",
                  "wd_incr_steps": "total number of weight decay iterations",
                  "wd_incr_style": "weight decay incr style"}


def _schedule_of(settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """The scheduler's values as training.py get_optimizer_param_scheduler makes them from the settings (in samples;
    a stored train_samples job's train_iters is the one update_train_iters computed), None where they do not say."""
    try:
        batch = settings["global_batch_size"]
        samples = settings.get("train_samples")
        if samples is not None:
            decay = settings.get("lr_decay_samples") or samples
            incr, warmup_unit = samples, settings.get("lr_warmup_samples") or 0
        else:
            iters = settings["train_iters"]
            decay = (settings.get("lr_decay_iters") or iters) * batch
            incr, warmup_unit = iters * batch, (settings.get("lr_warmup_iters") or 0) * batch
        fraction = settings.get("lr_warmup_fraction")
        constant = settings.get("weight_decay_incr_style", "constant") == "constant"
        start = settings.get("weight_decay") if constant else settings.get("start_weight_decay")
        end = settings.get("weight_decay") if constant else settings.get("end_weight_decay")
        return {"max_lr": float(settings["lr"]), "min_lr": float(settings.get("min_lr") or 0.0),
                "warmup_steps": float(fraction * decay if fraction is not None else warmup_unit),
                "decay_steps": float(decay), "decay_style": settings.get("lr_decay_style", "linear"),
                "start_wd": start, "end_wd": end, "wd_incr_steps": float(incr),
                "wd_incr_style": settings.get("weight_decay_incr_style", "constant")}
    except (KeyError, TypeError, ValueError):
        return None


def _schedule(job_args: Mapping[str, Any], saved: Mapping[str, Any], stored: StoredCheckpoint) -> list[Item]:
    """The learning-rate schedule loads with the optimizer state. Megatron compares the job's with the
    checkpoint's: without a flag it asserts them equal, use_checkpoint_opt_param_scheduler takes the checkpoint's
    (the job's are ignored without a word), override_opt_param_scheduler the job's."""
    if not _optimizer_read(job_args, saved, stored) or job_args.get("override_opt_param_scheduler"):
        return []
    ours, theirs = _schedule_of(job_args), _schedule_of(_typed(saved))
    if ours is None or theirs is None:
        return []

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, float) and isinstance(b, float):
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        return bool(a == b)

    differ = [(name, theirs[key], ours[key]) for key, name in SCHEDULE_NAMES.items()
              if not same(theirs[key], ours[key])]
    if not differ:
        return []
    said = "; ".join(f"{name} {shown(a, 40)} (checkpoint) → {shown(b, 40)} (job)" for name, a, b in differ)
    said += " (the scheduler's values as the checkpoint's stored settings give them, in samples)"
    if job_args.get("use_checkpoint_opt_param_scheduler"):
        return [Item("warn", "schedule", f"{said}: use_checkpoint_opt_param_scheduler takes the checkpoint's values "
                     "at load, so the job's are ignored (optimizer_param_scheduler.py _check_and_set)",
                     "--set use_checkpoint_opt_param_scheduler=false --set override_opt_param_scheduler=true to "
                     "train with the job's schedule, or resume with the checkpoint's settings")]
    return [Item("refuse", "schedule", f"{said}: Megatron asserts at load that the job's learning-rate schedule "
                 "equals the checkpoint's (optimizer_param_scheduler.py _check_and_set: 'class input value … and "
                 "checkpoint value … do not match')",
                 "--set override_opt_param_scheduler=true (the job's schedule, from the step the checkpoint reached), "
                 "or --set use_checkpoint_opt_param_scheduler=true (the checkpoint's), or resume with the "
                 "checkpoint's settings")]


# check_checkpoint_args (megatron/training/checkpointing.py): what Megatron asserts equal at load unless finetune,
# beyond the torch format's TP/PP compared above; (setting, when the job sets it is compared: None, always). The
# model's three are said where _shape has not refused already (torch_dist's load stops before, on the tensors; the
# torch format's layers are separate tensors, so this is its stop for another number of layers)
ASSERTED = (("num_layers", None), ("hidden_size", None), ("num_attention_heads", None),
            ("max_position_embeddings", "vocab_file"), ("make_vocab_size_divisible_by", "vocab_file"),
            ("tokenizer_type", "vocab_file"), ("data_parallel_random_init", "data_parallel_random_init"),
            ("global_batch_size", "phase_transition_iterations"))


def _megatron_asserts(job_args: Mapping[str, Any], saved: Mapping[str, Any], shape_refused: bool) -> list[Item]:
    differ = [(name, saved[name], job_args.get(name)) for name, when in ASSERTED
              if (when is not None and job_args.get(when) or when is None and not shape_refused) and name in saved
              and _normal(saved[name]) != _normal(job_args.get(name))]
    if not differ:
        return []
    said = "; ".join(f"{name} {shown(a, 80)} (checkpoint) ≠ {shown(b, 80)} (job)" for name, a, b in differ)
    return [Item("refuse", "shape", f"{said}: Megatron asserts these equal at load (check_checkpoint_args)",
                 "resume with the checkpoint's values, or --set finetune=true (weights only, iteration 0)")]


def _batch(job_args: Mapping[str, Any], saved: Mapping[str, Any], stored: StoredCheckpoint) -> list[Item]:
    items = []
    iteration = stored.iteration or 0
    consumed = _int(saved.get("consumed_train_samples"), 0)
    old, new = _int(saved.get("global_batch_size"), 0), _int(job_args.get("global_batch_size"), 0)
    if old and new and old != new:
        text = (f"global batch {old:,} (checkpoint) → {new:,} (job): iteration {iteration:,} resumes after "
                f"{consumed:,} samples; from there each iteration takes {new:,} samples instead of {old:,}")
        train_iters, train_samples = job_args.get("train_iters"), job_args.get("train_samples")
        if isinstance(train_iters, int) and train_iters > iteration:
            left = train_iters - iteration
            text += (f", so the {left:,} iterations left read {left * new:,} samples instead of {left * old:,}"
                     " (the learning-rate schedule counts iterations)")
        elif isinstance(train_samples, int) and train_samples // new > iteration:
            # update_train_iters: the loop runs to train_samples // the job's batch, whatever was consumed before
            end, left = train_samples // new, train_samples // new - iteration
            text += (f", and Megatron trains to iteration {end:,} (train_samples // {new:,}): the {left:,} "
                     f"iterations left read {left * new:,} samples, ending at {consumed + left * new:,} of "
                     f"train_samples {train_samples:,}")
        items.append(Item("warn", "batch", text + "; the samples seen after the resume differ from an unchanged run",
                          f"keep global_batch_size={old} to resume exactly"))
    old_seq, new_seq = _int(saved.get("seq_length"), 0), _int(job_args.get("seq_length"), 0)
    if old_seq and new_seq and old_seq != new_seq:
        items.append(Item("warn", "batch", f"seq_length {old_seq:,} (checkpoint) → {new_seq:,} (job): the "
                          f"{consumed:,} samples consumed were {consumed * old_seq:,} tokens, and the same sample "
                          f"count is {consumed * new_seq:,} tokens now: the data order from here changes",
                          f"keep seq_length={old_seq} to resume exactly"))
    total = training_iterations(job_args, new, bool(job_args.get("step_batch_size_schedule")))
    if total is not None and 0 < total <= iteration and not job_args.get("finetune") and not stored.release \
            and not job_args.get("skip_train") and job_args.get("ckpt_convert_format") is None:
        based = "train_iters" if job_args.get("train_iters") is not None else f"train_samples // global batch {new}"
        items.append(Item("refuse", "batch", f"the checkpoint is at iteration {iteration:,} and the job trains to "
                          f"iteration {total:,} ({based}): Megatron would load it, train 0 iterations and exit 0",
                          "raise the training length past the checkpoint's iteration, or --set finetune=true (its "
                          "weights, from iteration 0)"))
    return items


def _data(job_args: Mapping[str, Any], saved: Mapping[str, Any]) -> list[Item]:
    changed = [(name, saved.get(name), job_args.get(name)) for name in DATA_SETTINGS
               if name in saved and _normal(saved.get(name)) != _normal(job_args.get(name))]
    if not changed:
        return []
    said = "; ".join(f"{name} {shown(a, 120)} (checkpoint) → {shown(b, 120)} (job)" for name, a, b in changed)
    return [Item("warn", "data", f"{said}: the blend and the order of the samples after the resume differ from "
                 "an unchanged run (Megatron skips the consumed sample count of the new blend)",
                 "give the checkpoint's data settings to resume exactly")]


def _version(stored: StoredCheckpoint) -> list[Item]:
    from launcher import MEGATRON_COMMIT
    from launcher.megatron import args as megatron_args

    pin = f"the pinned Megatron ({MEGATRON_COMMIT[:12]})"
    items = []
    if stored.checkpoint_version is not None and stored.checkpoint_version != CHECKPOINT_VERSION:
        items.append(Item("warn", "version", f"checkpoint version {stored.checkpoint_version}, {pin} writes "
                          f"{CHECKPOINT_VERSION}: written by another Megatron"))
    if stored.format == "torch_dist":
        versions = {k: v for k, v in stored.backend.items() if k.endswith("_version") and v != 1}
        if versions:
            items.append(Item("warn", "version", f"distributed checkpoint backend versions {versions}: {pin} writes 1"))
        if stored.content_metadata is None:
            items.append(Item("note", "version", "no content metadata: written by megatron-core older than 0.13"))
    catalog = megatron_args.catalog()
    saved = set(stored.args or {})
    unknown = sorted(saved - set(catalog) - DERIVED)
    missing = sorted(name for name, arg in catalog.items()
                     if name not in saved and name not in NOT_STORED and arg.provider == "megatron")
    if unknown:
        items.append(Item("warn", "version", f"the checkpoint stores {len(unknown)} setting(s) {pin} does not have "
                          f"({', '.join(unknown[:5])}): written by a newer or other Megatron; check that the "
                          "settings it relies on exist here"))
    if missing:
        items.append(Item("warn", "version", f"the checkpoint lacks {len(missing)} setting(s) of {pin} "
                          f"({', '.join(missing[:5])}): written by an older Megatron; their defaults apply"))
    if not items:
        items.append(Item("ok", "version", f"written by a Megatron with the same settings as {pin}"))
    return items


def _typed(saved: Mapping[str, Any]) -> dict[str, Any]:
    """The stored args with only values model_shape can use (numbers, flags, names, and flat lists of them no longer
    than a layer pattern: moe_layer_freq as Megatron stores it, a spec); the rest unset."""
    plain = (int, float, str, bool)
    return {k: v for k, v in saved.items() if isinstance(v, plain) or (
        isinstance(v, list | tuple) and len(v) <= layer_pattern.MAX_LAYERS and all(isinstance(x, plain) for x in v))}


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _normal(value: Any) -> Any:
    """Equal settings compare equal whichever way they were written (a tuple or a list, [] or None)."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [str(v) for v in value] or None
    return value if value != "" else None


def check_job(job: Any, python: str | None) -> ResumeCheck | None:
    """The resume check of a job that loads (`python`: the Megatron interpreter that reads the stored settings);
    None where there is nothing to say: no load, or a new run whose own directory holds no checkpoint yet."""
    from launcher.checks import checkpoint

    load = job.megatron.get("load")
    if not load or job.entry != "pretrain_gpt":
        return None
    expected = expects_checkpoint(job)
    if job.target.remote and not Path(str(load)).exists():
        # a cluster's file system this machine does not mount: Megatron finds out on the node
        if not expected:
            return None
        stored = StoredCheckpoint(str(load), why_not="not visible from this machine")
        return ResumeCheck(stored, expected, (Item("note", "found", f"{load} is not visible from this machine: "
                                                    "the checkpoint is not checked before the job starts"),))
    step = job.megatron.get("ckpt_step")
    step = step if isinstance(step, int) and not isinstance(step, bool) and step > 0 else None
    found = checkpoint.find(str(load), step)
    newer = _non_persistent(job, str(load), found, step, python)
    if newer is not None:
        return newer
    if found.damaged:
        return judge(job, found)
    pretrained = job.megatron.get("pretrained_checkpoint")
    if not found.found and pretrained:
        return judge(job, found, checkpoint.read(str(pretrained), python))
    if not found.found and not expected:
        return None
    return judge(job, checkpoint.read(str(load), python, step) if found.found else found)


def _non_persistent(job: Any, load: str, found: StoredCheckpoint, step: int | None,
                    python: str | None) -> ResumeCheck | None:
    """The check where Megatron loads a non-persistent checkpoint instead of `found` (_load_base_checkpoint at the
    pin: with non_persistent_ckpt_type set, the non-persistent iteration is read first, and loaded where it is at
    least the persistent one: the tracker's, or ckpt_step; -1 without a tracker), else None. A "global" one is in
    non_persistent_global_ckpt_dir, or LOAD/non_persistent, and is judged here; a "local" one is on each node and
    cannot be: the verdict on `found` then says so."""
    from launcher.checks import checkpoint

    kind = job.megatron.get("non_persistent_ckpt_type")
    if kind not in ("global", "local"):
        return None
    if found.damaged and found.iteration is None and not step:
        return None  # Megatron stops reading the persistent tracker whatever the non-persistent one holds
    persistent = step if step else (found.iteration if found.iteration is not None else -1)
    said = f"the persistent checkpoint's iteration {persistent}" if persistent >= 0 else \
        "no persistent checkpoint"
    if kind == "local":
        where = job.megatron.get("non_persistent_local_ckpt_dir") or "non_persistent_local_ckpt_dir"
        note = Item("note", "found", f"non_persistent_ckpt_type=local: Megatron loads the newest local checkpoint "
                    f"in {shown(str(where), 200)} on each node instead of {said} where it is at least as new; "
                    "those are not visible here: only the persistent one is judged")
        check = judge(job, found)
        return replace(check, items=(note, *check.items))
    directory = str(job.megatron.get("non_persistent_global_ckpt_dir") or Path(load) / NON_PERSISTENT_SUBDIR)
    newer = checkpoint.find(directory)
    if not newer.found and not newer.damaged:
        return None  # no tracker there: Megatron warns and loads the persistent one
    if newer.release:
        return ResumeCheck(newer, expects_checkpoint(job), (Item(
            "refuse", "found", f"the non-persistent checkpoint in {directory} is a release checkpoint: Megatron "
            "stops at load (RuntimeError: Non-persistent checkpoint can't be a release checkpoint)",
            f"remove {Path(directory) / TRACKER_NAME}, or unset non_persistent_ckpt_type"),))
    if newer.iteration is not None and newer.iteration < persistent:
        check = judge(job, found)
        note = Item("note", "found", f"the non-persistent checkpoint in {directory} (iteration {newer.iteration}) "
                    f"is older than {said}: Megatron loads the persistent one, judged here")
        return replace(check, items=(note, *check.items))
    check = judge(job, checkpoint.read(directory, python) if newer.found else newer)
    at = f"iteration {newer.iteration}" if newer.iteration is not None else "its tracker"
    note = Item("note", "found", f"Megatron loads the non-persistent checkpoint in {directory} ({at}), not "
                f"{said} in {load}: non_persistent_ckpt_type=global loads it where it is at least as new; it is "
                "the one judged here")
    return replace(check, items=(note, *check.items))
