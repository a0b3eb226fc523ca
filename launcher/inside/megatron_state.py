"""Megatron's process-wide state, captured once and put back between jobs that share one process.

Megatron keeps much of a run's state in module globals and class attributes, and its own `destroy_*` functions
forget only some of it: the MoE layer-wise aux-loss tracker (`moe_utils._MOE_LAYER_WISE_LOGGING_TRACKER`, whose
tensors are sized by the first job's layer count: a later job with more layers fails in its router), the MTP loss
tracker (`MTPLossLoggingHelper.tracker`), the aux-loss scales (`*LossAutoScaler.main_loss_backward_scale`), the
parallel-state rank lists, the RNG tracker. Naming each would miss the next one, so a `Snapshot` records *every*
plain value of those modules and their classes as it is after import, and `restore()` puts each back: the same
object bound again, a container's contents refilled, a tensor's values copied back. Torch's own switches that
Megatron flips for a job (deterministic algorithms in `validate_args`, the default dtype, grad mode) go back too.

A module first imported during a job is recorded at the next restore, as that job left it: the worker imports
Megatron's training path before its first job, so these are few (the tokenizer libraries).
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

# Values that are code or structure, not state: never rebound.
_CODE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, staticmethod,
         classmethod, property, types.MemberDescriptorType, types.GetSetDescriptorType, types.WrapperDescriptorType,
         types.MethodDescriptorType, types.ClassMethodDescriptorType)


def _state_items(namespace: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for name, value in list(namespace.items()):
        if name.startswith("__") or isinstance(value, _CODE) or isinstance(value, type):
            continue
        yield name, value


class Snapshot:
    """Every module-level and class-level value of the modules whose names start with `prefixes`."""

    def __init__(self, prefixes: tuple[str, ...]):
        import torch

        self.prefixes = prefixes
        self.torch = torch
        self.seen: set[str] = set()
        # (owner, attribute) -> (the value, a copy of its contents where it is a container or a tensor)
        self.values: dict[tuple[Any, str], tuple[Any, Any]] = {}
        self.switches = (torch.get_default_dtype(), torch.is_grad_enabled(),
                         torch.are_deterministic_algorithms_enabled(),
                         torch.is_deterministic_algorithms_warn_only_enabled())
        self._record_new_modules()

    def _modules(self) -> Iterator[tuple[str, types.ModuleType]]:
        import sys

        for name, module in list(sys.modules.items()):
            if module is not None and name.startswith(self.prefixes):
                yield name, module

    def _record(self, owner: Any, name: str, value: Any) -> None:
        if isinstance(value, (dict, list, set)):
            contents: Any = value.copy()
        elif isinstance(value, self.torch.Tensor):
            contents = value.detach().clone()
        else:
            contents = None
        self.values[(owner, name)] = (value, contents)

    def _record_new_modules(self) -> None:
        for module_name, module in self._modules():
            if module_name in self.seen:
                continue
            self.seen.add(module_name)
            for name, value in _state_items(vars(module)):
                self._record(module, name, value)
            for cls in vars(module).values():
                if isinstance(cls, type) and cls.__module__ == module_name:
                    for name, value in _state_items(dict(vars(cls))):
                        self._record(cls, name, value)

    def restore(self) -> None:
        """Each recorded value back as it was; then the modules imported since are recorded."""
        torch = self.torch
        for (owner, name), (value, contents) in self.values.items():
            try:
                setattr(owner, name, value)
                if isinstance(value, dict):
                    value.clear()
                    value.update(contents)
                elif isinstance(value, list):
                    value[:] = contents
                elif isinstance(value, set):
                    value.clear()
                    value.update(contents)
                elif isinstance(value, torch.Tensor) and value.shape == contents.shape:
                    with torch.no_grad():
                        value.copy_(contents)
            except (AttributeError, TypeError, RuntimeError):
                pass  # read-only (a C type's attribute, an inference tensor): nothing a job could have changed
        dtype, grad, deterministic, warn_only = self.switches
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        self._record_new_modules()
