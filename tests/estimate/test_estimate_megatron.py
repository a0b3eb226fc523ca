"""Our FLOPs and theoretical memory against Megatron's own code, on CPU, with args built by Megatron's parser.

megatron.training.theoretical_memory_usage and training.num_floating_point_operations are called on a
namespace from parse_args + validate_args (the same path pretrain_gpt.py takes), for every preset shape and a
grid of layouts; our figures must agree within 1% (they are the same formulas, so far closer).
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from plan_shapes import EXTRA, PRESETS

from launcher.estimate import formulas as est
from launcher.estimate import search as ps

pytestmark = pytest.mark.megatron

arguments = pytest.importorskip("megatron.training.arguments")
tmu = pytest.importorskip("megatron.training.theoretical_memory_usage")
training_mod = pytest.importorskip("megatron.training.training")

# The pinned Megatron-LM tree: the submodule, or MEGATRON_PATH where the submodule is not checked out.
_TREE = Path(os.environ.get("MEGATRON_PATH") or Path(__file__).resolve().parents[2] / "third_party" / "megatron-lm")
PINNED = _TREE / "megatron" / "training"

# validate_args asks cuda:0 for its architecture when TP > 1; answer "Hopper" and satisfy its env check.
arguments.get_device_arch_version = lambda: 9
os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"

STORE_FALSE = {"add_bias_linear": "--disable-bias-linear"}


def megatron_argv(args: dict[str, Any]) -> list[str]:
    argv = ["pretrain_gpt.py", "--lr", "1e-4", "--train-iters", "10", "--eval-interval", "10",
            "--mock-data", "--tokenizer-type", "NullTokenizer"]
    for name, value in args.items():
        if value is None:
            continue
        if name in STORE_FALSE:
            if not value:
                argv.append(STORE_FALSE[name])
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            if value:
                argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


def megatron_args(args: dict[str, Any], world_size: int):
    """Megatron's own args namespace after validate_args, with the padded vocab build_tokenizer would set."""
    from megatron.core.tokenizers.utils.build_tokenizer import vocab_size_with_padding

    old_argv, old_env = sys.argv, dict(os.environ)
    sys.argv = megatron_argv(args)
    os.environ.update(WORLD_SIZE=str(world_size), RANK="0")
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            namespace = arguments.parse_args()
            arguments.validate_args(namespace)
    finally:
        sys.argv = old_argv
        os.environ.clear()
        os.environ.update(old_env)
    namespace.padded_vocab_size = vocab_size_with_padding(namespace.vocab_size, namespace, logging_enabled=False)
    return namespace


def layout_args(base: dict[str, Any], t: est.Training) -> dict[str, Any]:
    args = dict(base)
    args.update(
        tensor_model_parallel_size=t.tp,
        pipeline_model_parallel_size=t.pp,
        num_virtual_stages_per_pipeline_rank=t.vpp if t.vpp > 1 else None,
        micro_batch_size=t.micro_batch_size,
        sequence_parallel=t.sequence_parallel,
        use_distributed_optimizer=t.distributed_optimizer,
        recompute_granularity=None if t.recompute == "none" else t.recompute,
        account_for_embedding_in_pipeline_split=t.embedding_in_split,
        account_for_loss_in_pipeline_split=t.loss_in_split,
    )
    if t.recompute == "full":
        args.update(recompute_method="uniform", recompute_num_layers=1)
    return args


def layout_grid(args: dict[str, Any], world: int, gpus_per_node: int, every: int) -> list[est.Training]:
    """Valid layouts from the search space (every n-th, to bound the run time), the preset's own first."""
    m = est.model_shape(args)
    base = est.training_of(args, world)
    grid = [] if ps.layout_problems(m, base) else [base]
    n = 0
    for layout in ps.structural_layouts(m, base, gpus_per_node):
        for t in ps.knob_variants(layout, allow_sp=True):
            if ps.layout_problems(est.model_shape(args, t.tp), t):
                continue
            n += 1
            if n % every == 0:
                grid.append(t)
    return grid


CASES = []
_BUDGETS = {"toy": [(2, 3), (8, 5)], "345m": [(1, 2), (8, 37), (32, 53)], "175b": [(1536, 233)],
            "llama-like": [(64, 97)], "gpt3-xl": [(16, 61)]}  # (world size, take every n-th layout)
for _name, (_args, _) in {**PRESETS, **EXTRA}.items():
    for _world, _every in _BUDGETS[_name]:
        for _t in layout_grid(_args, _world, min(8, _world), _every):
            CASES.append(pytest.param(_args, _t, id=f"{_name}-w{_world}-{ps.describe(_t).replace(' ', '-')}"))
# A few extra budgets for the 175b shape, where DP and the microbatch factor change.
for _world in (128, 1024):
    _t = est.training_of(PRESETS["175b"][0], _world)
    for _t2 in (_t, replace(_t, vpp=2), replace(_t, recompute="selective"), replace(_t, micro_batch_size=2)):
        if not ps.layout_problems(est.model_shape(PRESETS["175b"][0], _t2.tp), _t2):
            CASES.append(pytest.param(PRESETS["175b"][0], _t2, id=f"175b-w{_world}-{ps.describe(_t2)}"))


@pytest.mark.parametrize(("base", "t"), CASES)
def test_memory_and_flops_equal_megatron(base: dict[str, Any], t: est.Training) -> None:
    args = layout_args(base, t)
    ns = megatron_args(args, t.world_size)
    assert ns.data_parallel_size == t.dp
    ours = est.model_shape(args)
    assert ours.padded_vocab_size == ns.padded_vocab_size

    expected_weights = tmu.compute_weight_and_optimizer_memory(ns)
    if ns.sequence_parallel and ns.recompute_granularity == "selective":
        expected_act = tmu.compute_activation_memory(ns, num_microbatches=t.num_microbatches)
    else:
        expected_act = tmu.compute_activation_memory_without_sp(ns, num_microbatches=t.num_microbatches)
    mem = est.megatron_memory(ours, est.training_of(args, t.world_size))
    assert mem.weights_and_optimizer == pytest.approx(expected_weights, rel=0.01, abs=1e-6)
    assert mem.activations == pytest.approx(expected_act, rel=0.01, abs=1e-6)
    # Stricter than asked: same formula, so equal up to float rounding.
    assert mem.weights_and_optimizer == pytest.approx(expected_weights, rel=1e-9)
    assert mem.activations == pytest.approx(expected_act, rel=1e-9)

    expected_flops = training_mod.num_floating_point_operations(ns, t.global_batch_size)
    assert est.flops_per_iteration(ours, t.global_batch_size) == pytest.approx(expected_flops, rel=1e-12)


def test_grid_is_large_and_covers_every_knob() -> None:
    ts = [p.values[1] for p in CASES]
    assert len(ts) >= 60
    assert {t.recompute for t in ts} == {"none", "selective", "full"}
    assert {t.sequence_parallel for t in ts} == {True, False}
    assert {t.distributed_optimizer for t in ts} == {True, False}
    assert any(t.vpp > 1 for t in ts) and any(t.tp > 1 for t in ts) and any(t.pp > 1 for t in ts)


@pytest.mark.parametrize("world", [1, 8, 1536])
def test_megatron_accepts_every_layout_we_call_valid(world: int) -> None:
    """Our validity predicate never lets through a layout Megatron's validate_args rejects."""
    for args, _ in PRESETS.values():
        if world < args.get("tensor_model_parallel_size", 1):
            continue
        for t in layout_grid(args, world, min(8, world), every=53)[:12]:
            megatron_args(layout_args(args, t), world)  # raises on a rejected layout


def _function_source(path: Path, name: str) -> str:
    tree = ast.parse(path.read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.unparse(node)


@pytest.mark.skipif(not (PINNED / "training.py").exists(), reason="third_party/megatron-lm not checked out")
@pytest.mark.parametrize(("module", "names"), [
    (training_mod, ["num_floating_point_operations"]),
    (tmu, ["compute_weight_and_optimizer_memory", "compute_activation_memory",
           "compute_activation_memory_without_sp", "report_theoretical_memory"]),
])
def test_installed_formulas_are_the_pinned_commits(module: Any, names: list[str]) -> None:
    """The tests above call the installed megatron-core; its formulas must be those at 432d76b2b8bf."""
    pinned = PINNED / Path(module.__file__).name
    for name in names:
        assert _function_source(Path(module.__file__), name) == _function_source(pinned, name), name


# DeepSeek-V2-Lite-like multi-latent attention (with and without the low-rank query), MoE below dense layers.
MLA_SHAPES = {
    "mla-q-lora": dict(num_layers=4, hidden_size=512, num_attention_heads=8, multi_latent_attention=True,
                       q_lora_rank=192, kv_lora_rank=128, qk_head_dim=64, qk_pos_emb_head_dim=32, v_head_dim=64,
                       normalization="RMSNorm", swiglu=True, add_bias_linear=False, position_embedding_type="rope",
                       untie_embeddings_and_output_weights=True, seq_length=256, max_position_embeddings=256,
                       vocab_size=1000, micro_batch_size=2, global_batch_size=16),
    "mla-full-q": dict(num_layers=2, hidden_size=256, num_attention_heads=4, multi_latent_attention=True,
                       kv_lora_rank=64, qk_head_dim=48, qk_pos_emb_head_dim=16, v_head_dim=32,
                       position_embedding_type="rope", seq_length=128, max_position_embeddings=128, vocab_size=500,
                       micro_batch_size=1, global_batch_size=8),
}


@pytest.mark.parametrize("name", sorted(MLA_SHAPES))
def test_mla_memory_and_flops_equal_megatron(name: str) -> None:
    args = MLA_SHAPES[name]
    ns = megatron_args(args, 1)
    ours = est.model_shape(args)
    mem = est.megatron_memory(ours, est.training_of(args, 1))
    assert mem.weights_and_optimizer == pytest.approx(tmu.compute_weight_and_optimizer_memory(ns), rel=1e-9)
    expected_flops = training_mod.num_floating_point_operations(ns, 16)
    assert est.flops_per_iteration(ours, 16) == pytest.approx(expected_flops, rel=1e-12)
