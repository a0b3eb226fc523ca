"""The resume check against Megatron itself: real checkpoints saved by the pin's save_checkpoint after two training
steps on CPU ranks (scripts/ckpt_load_matrix.py), loaded by Megatron with changed settings and judged by the check
with the same settings. What raises at load is refused; what loads is not; what loads another model than the one
saved is a warning."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.checks.model_tensors import VOCAB, tensors
from launcher.checks.resume import check_job
from launcher.cli.job import JobRequest, job_for
from launcher.estimate.formulas import model_shape
from launcher.pipeline.preset import load_preset
from tests.checks.test_rehearsal import needs_checkout

REPO = Path(__file__).resolve().parents[2]
MATRIX = REPO / "scripts" / "ckpt_load_matrix.py"
# two saves (bf16: plain and distributed optimizer), each loaded with settings that raise and that load
CELLS = {"plain-bf16-to-fp16": "loads", "plain-bf16-to-fp32": "raises", "bf16-plain-to-distopt": "raises",
         "vocab-128-to-256": "loads", "distopt-bf16-same": "loads", "distopt-bf16-to-fp16": "raises",
         "schedule-iters-10-to-20": "raises", "schedule-iters-10-to-20-override": "loads",
         "schedule-lr-use-checkpoint": "loads",
         # the model's tensors: one the job lacks is left unread, one the checkpoint lacks stops the load
         "learned-to-rope": "loads", "layernorm-to-rmsnorm": "loads", "bias-linear-off": "loads",
         "untie-on": "raises", "qk-layernorm-on": "raises", "gqa-4-to-2": "raises",
         "learned-to-rope-raise-all": "raises", "untie-on-log-unexpected": "loads",
         "distopt-bias-linear-off": "raises", "auto-detect-dist-to-torch": "raises", "ckpt-step-missing": "raises",
         # one MoE save: a buffer a setting adds (the router's expert bias), the same layers saved one by one
         # (moe_layer_freq a list), grouped GEMM (the local spec's experts stay sequential)
         "moe-expert-bias-on": "raises", "moe-layer-freq-1-to-11": "raises", "moe-grouped-gemm-on": "loads"}
# cells of eight more saves (SwiGLU, qk_layernorm, MoE with the expert bias and a gated shared expert, MTP, a
# learnable softmax, MLA with qk_layernorm): run with MEGATRON_LAUNCH_FULL_LOAD_MATRIX=1
if os.environ.get("MEGATRON_LAUNCH_FULL_LOAD_MATRIX") == "1":
    CELLS |= {"qk-layernorm-off": "loads", "use-checkpoint-args-qk-layernorm": "loads",
              "use-checkpoint-args-swiglu": "loads", "moe-expert-bias-off": "loads", "moe-shared-gate-off": "loads",
              "mtp-off": "loads", "mtp-1-to-2": "raises", "softmax-learnable-off": "loads",
              "mla-qk-layernorm-off": "loads"}
# the script's BASE flags as the toy preset's settings (the target declared with Transformer Engine and apex,
# whose fused Adam loads the distributed optimizer's state)
BASE = ["entry=pretrain_gpt", "gpus_per_node=1", "tensor_model_parallel_size=1", "hidden_size=64",
        "vocab_size=128", "micro_batch_size=1", "global_batch_size=2", "train_iters=10", "ckpt_format=torch_dist",
        "transformer_impl=local", "launcher.transformer_engine=true", "launcher.apex=true"]


def overrides(flags: list[str]) -> list[str]:
    """Megatron flags (`--bf16`, `--vocab-size 256`, `--disable-bias-linear`) as the launcher's settings, through
    the pinned parser's own table of flags."""
    from launcher.megatron.args import catalog

    by_flag = {flag: arg for arg in catalog().values() for flag in arg.flags}
    out: list[str] = []
    spec = False  # the cells' --spec (the launcher's own SDPA spec, which the job chooses itself) is left out
    for flag in flags:
        arg = by_flag.get(flag)
        if arg is None and spec:
            continue
        spec = flag == "--spec"
        if spec:
            continue
        if arg is None:  # the value of the flag before it
            out[-1] += flag
        elif arg.kind == "value":
            out.append(f"{arg.dest}=")
        else:
            on = arg.kind == "true" or (arg.kind == "bool" and not flag.startswith("--no-"))
            out.append(f"{arg.dest}={'true' if on else 'false'}")
    return out


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> list[dict]:
    from tests.checks.test_rehearsal import megatron_checkout

    out = tmp_path_factory.mktemp("matrix")
    done = subprocess.run([sys.executable, str(MATRIX), *CELLS, "--keep", str(out / "saves"), "--json",
                           str(out / "matrix.json")], capture_output=True, text=True, timeout=2400,
                          env={**os.environ, "MEGATRON_LM_PATH": str(megatron_checkout())})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "matrix.json").read_text())


@needs_checkout
def test_megatron_raises_or_loads_as_measured(matrix):
    seen = {row["cell"]: "loads" if row["loaded"]["ok"] else "raises" for row in matrix}
    assert seen == CELLS, [row["line"] for row in matrix]


@needs_checkout
def test_the_check_refuses_exactly_what_megatron_raises_at_load(matrix):
    for row in matrix:
        check = check_job(_job(row), sys.executable)
        assert check is not None and check.ok == row["loaded"]["ok"], (row["line"], check and check.render())


@needs_checkout
def test_the_check_warns_where_megatron_loads_another_model_than_the_one_saved(matrix):
    """Another number of parameters than the save's (a tensor left unread or kept at its initial value, another
    vocabulary): Megatron loaded it without a word, and the check says so."""
    changed = [row for row in matrix if row["loaded"]["ok"] and row["load_world"] == row["save_world"] == 1
               and row["loaded"]["facts"]["parameters"] != row["saved"]["facts"]["parameters"]]
    assert len(changed) >= 5, [row["line"] for row in matrix]
    for row in changed:
        check = check_job(_job(row), sys.executable)
        assert check is not None and any(i.level == "warn" and i.topic == "shape" for i in check.items), \
            (row["line"], check and check.render())


@needs_checkout
def test_the_tensors_modelled_are_those_megatron_saved(matrix):
    """Every save's tensors (names and global shapes in the torch_dist metadata) are those model_tensors gives for
    the settings stored with it: the per-layer names, the norms' fused names, what each setting adds."""
    import torch
    from torch.distributed.checkpoint import FileSystemReader

    for ckpt in sorted({row["saves_at"] for row in matrix if row["saved"]["ok"]}):
        step = sorted(Path(ckpt).glob("iter_*"))[-1]
        stored = FileSystemReader(str(step)).read_metadata().state_dict_metadata
        args = vars(torch.load(step / "common.pt", weights_only=False)["args"])
        found: dict[str, tuple[int, ...]] = {}
        for name, meta in stored.items():
            if name.startswith(("optimizer.", "chained_", "rng_state")) or "_extra_state" in name or \
                    not hasattr(meta, "size"):  # the optimizer's (chained: MoE at EP > 1), the RNG's
                continue
            shape = tuple(meta.size)
            if name.startswith(("embedding.word_embeddings", "output_layer")):
                shape = (VOCAB, *shape[1:])
            family = re.sub(r"^(decoder|mtp)\.layers\.\d+\.", r"\1.layers.*.", name)
            if family == name:
                found[name] = shape
            else:  # one per layer: counted as model_tensors counts them
                found[family] = (found.get(family, (0,))[0] + 1, *shape)
        assert found == tensors(model_shape(args)), ckpt


def _job(row: dict):
    job, problems = job_for(load_preset("toy", [*BASE, *overrides(row["load"]), f"load={row['saves_at']}"]),
                            JobRequest(nodes=1, gpus_per_node=row["load_world"], run_dir=False, local=False))
    assert not problems, problems
    return job
