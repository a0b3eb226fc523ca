"""What a new user trips over, seen on a fresh clone: each small friction, as the user meets it."""

from __future__ import annotations

import pytest

from launcher.errors import UserError
from launcher.gpus import gpu_by_name


@pytest.mark.parametrize(("typed", "meant"), [("h100", "h100-80gb"), ("H200", "h200-141gb"),
                                               ("a100", "a100-40gb or a100-80gb"), ("h200-14gb", "h200-141gb")])
def test_a_gpu_named_without_its_memory_gets_did_you_mean(typed, meant):
    with pytest.raises(UserError) as info:
        gpu_by_name(typed)
    assert info.value.problems[0].hint.startswith(f"did you mean {meant}? known GPUs: ")


def test_a_gpu_name_without_its_memory_on_the_command_line(launch):
    code, _, err = launch("plan", "345m", "--gpu", "h100")
    assert code == 2 and "hint: did you mean h100-80gb?" in err
