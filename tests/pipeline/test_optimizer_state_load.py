"""The distributed optimizer over torch's Adam (no TE, no apex) loading its state from a checkpoint: refused
before launch where the checkpoint is there to load (ckpt_format torch: KeyError: 'step' at distrib_optimizer.py:1167;
torch_dist: the assertion at distrib_optimizer.py:793; both rehearsed on CPU), with a way out that is accepted; a new
run, TE or apex, another optimizer, and a load without the optimizer state are not refused."""

from __future__ import annotations

import pytest

from launcher.errors import UserError
from launcher.megatron.pin import Kernels
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve

DIST_OPT_TORCH = ["use_distributed_optimizer=true", "ckpt_format=torch"]


def problems(overrides, te=False):
    try:
        resolve(load_preset("345m", overrides), 1, 1, kernels=Kernels(te, te, "preset"))
    except UserError as err:
        return [p.render() for p in err.problems if "distrib_optimizer.py:" in p.message]
    return []


@pytest.fixture
def checkpoint(tmp_path):
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    return tmp_path


@pytest.mark.parametrize(("fmt", "raised"), [("torch", "KeyError: 'step' (distrib_optimizer.py:1167)"),
                                             ("torch_dist", "distrib_optimizer.py:793, assert len(steps) == 1")])
def test_loading_the_state_is_refused_and_the_hint_is_accepted(checkpoint, fmt, raised):
    found = problems(["use_distributed_optimizer=true", f"ckpt_format={fmt}", f"load={checkpoint}"])
    assert len(found) == 1 and raised in found[0] and f"ckpt_format {fmt}" in found[0]
    assert "hint: set no_load_optim=true" in found[0]
    assert problems(["use_distributed_optimizer=true", f"ckpt_format={fmt}", f"load={checkpoint}",
                     "no_load_optim=true"]) == []


@pytest.mark.parametrize("other", [["optimizer=sgd"], ["finetune=true"],
                                   ["use_distributed_optimizer=false"]])
def test_what_loads_otherwise_is_not_refused(checkpoint, other):
    assert problems([*DIST_OPT_TORCH, f"load={checkpoint}", *other]) == []


def test_with_transformer_engine_and_apex_it_loads(checkpoint):
    assert problems([*DIST_OPT_TORCH, f"load={checkpoint}"], te=True) == []


def test_a_load_directory_without_a_checkpoint_is_not_refused(tmp_path):
    assert problems([*DIST_OPT_TORCH, f"load={tmp_path}"]) == []
    assert problems(DIST_OPT_TORCH) == []  # a new run loads from its own empty run directory
