"""Megatron's process-wide state put back between jobs of one rehearsal worker (launcher/inside/megatron_state.py),
on stand-in modules: what a job leaves in module globals, class attributes and torch's switches is gone after
restore(), whatever its name."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")

from launcher.inside.megatron_state import Snapshot  # noqa: E402

PREFIX = "fake_megatron_state_"


def _module(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102 - the test's own source
    sys.modules[name] = module
    return module


@pytest.fixture
def modules() -> Iterator[None]:
    yield
    for name in [m for m in sys.modules if m.startswith(PREFIX)]:
        del sys.modules[name]


TRACKER_MODULE = """
import torch
_TRACKER = {}
_RANKS = None
_SEEN = []
class LossScaler:
    scale = None
    counts = {"calls": 0}
    ones = torch.ones(2)
    def method(self):
        return 1
"""


def test_what_a_job_leaves_in_globals_and_class_attributes_is_put_back(modules):
    state = _module(PREFIX + "moe_utils", TRACKER_MODULE)
    tracker, scaler_counts = state._TRACKER, state.LossScaler.counts
    snapshot = Snapshot((PREFIX,))

    # a job: a tracker sized by its layers, rank lists, a class-level scale, a tensor changed in place
    state._TRACKER["load_balancing_loss"] = torch.zeros(2)
    state._RANKS = [0, 1]
    state._SEEN.append("job 1")
    state.LossScaler.scale = torch.tensor(4096.0)
    state.LossScaler.counts["calls"] += 1
    state.LossScaler.ones.mul_(3)
    snapshot.restore()

    assert state._TRACKER == {} and state._TRACKER is tracker  # the same object: others hold it by reference
    assert state._RANKS is None and state._SEEN == []
    assert state.LossScaler.scale is None and state.LossScaler.counts is scaler_counts
    assert state.LossScaler.counts == {"calls": 0}
    assert torch.equal(state.LossScaler.ones, torch.ones(2))
    assert state.LossScaler().method() == 1  # code is left alone


def test_torch_switches_a_job_flips_are_put_back(modules):
    snapshot = Snapshot((PREFIX,))
    torch.set_default_dtype(torch.float64)
    torch.use_deterministic_algorithms(True)  # Megatron's validate_args does this for --deterministic-mode
    try:
        snapshot.restore()
        assert torch.get_default_dtype() == torch.float32
        assert not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.set_default_dtype(torch.float32)
        torch.use_deterministic_algorithms(False)


def test_a_module_first_imported_during_a_job_is_recorded_at_the_next_restore(modules):
    snapshot = Snapshot((PREFIX,))
    late = _module(PREFIX + "tokenizers", "_CACHE = {}\n")  # imported by the first job
    snapshot.restore()
    late._CACHE["vocab"] = 128  # the second job
    snapshot.restore()
    assert late._CACHE == {}
