"""Which interpreter runs Megatron for the launcher's checks (--check's verdict, the CPU rehearsal), and which
variables of the launcher's environment describe the job's target rather than this machine."""

from __future__ import annotations

import os
import sys

from launcher.megatron.pin import has_module

# Variables whose value in the launcher's own environment describes this machine, never the job's target: the
# checks take them from the job's environment instead.
TARGET_ENV_PREFIXES = ("CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_", "NVTE_", "TORCH_NCCL_")


def find_megatron_python() -> str | None:
    """The interpreter to run Megatron in: $MEGATRON_PYTHON, else this one if it has megatron-core and torch."""
    explicit = os.environ.get("MEGATRON_PYTHON")
    if explicit:
        return explicit
    return sys.executable if has_module("megatron.training") and has_module("torch") else None
