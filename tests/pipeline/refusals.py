"""The one helper the rule tests share: the 345m preset with overrides, resolved, must be refused; its rendered
problems (`error:` and `hint:` lines)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from launcher.errors import UserError
from launcher.megatron.pin import Kernels
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve


def refused(overrides: Sequence[str], nodes: int | None = None, gpus: int | None = None, te: bool = False,
            apex: bool = False, te_version: str | None = None) -> str:
    with pytest.raises(UserError) as err:
        resolve(load_preset("345m", list(overrides)), nodes, gpus, kernels=Kernels(te, apex, "preset", te_version))
    return err.value.render()
