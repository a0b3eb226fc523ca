"""The machine a job targets, as far as Megatron's argument checks ask about it: GPU compute capability and the
Transformer Engine / apex a preset declares. No torch: these are facts the preset states, not this machine's.

The pin was tested in NGC's nvcr.io/nvidia/pytorch:26.04-py3 (docker/.ngc_version.dev at 432d76b) with Transformer
Engine built from a git revision (pyproject.toml); the newest TE version the pin's checks ask for is 2.14.0, so a
declared TE answers every `is_te_min_version` question of the pin as that container would.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.gpus import GPUS

NGC_IMAGE = "nvcr.io/nvidia/pytorch:26.04-py3"
DECLARED_TE_VERSION = "2.14.0"

def capability(gpu: str) -> tuple[int, int]:
    """Compute capability of a catalogue GPU (h200-141gb → (9, 0)); Hopper when the name is unknown."""
    known = GPUS.get(gpu.strip().lower())
    return known.capability if known is not None else (9, 0)


@dataclass(frozen=True)
class AssumedMachine:
    """What the GPU machine has: the facts --check assumes instead of asking this machine."""

    gpu: str
    transformer_engine: bool
    apex: bool

    @property
    def capability(self) -> tuple[int, int]:
        return capability(self.gpu)

    def as_request(self) -> dict:
        return {"te": self.transformer_engine, "apex": self.apex, "capability": list(self.capability),
                "te_version": DECLARED_TE_VERSION if self.transformer_engine else None}

    def describe(self) -> str:
        major, minor = self.capability
        te = f"Transformer Engine {DECLARED_TE_VERSION} ({NGC_IMAGE})" if self.transformer_engine else \
            "no Transformer Engine"
        return f"GPU {self.gpu} (compute capability {major}.{minor}), {te}, {'with' if self.apex else 'no'} apex"
