"""Where Megatron-LM lives and what the environment offers (Transformer Engine, NVIDIA apex), without torch."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[2]
SUBMODULE = REPO_ROOT / "third_party" / "megatron-lm"
ENV_VAR = "MEGATRON_LM_PATH"
ENTRY_SCRIPTS = {
    "pretrain_gpt": "pretrain_gpt.py",
    "simple_loop": "examples/run_simple_mcore_train_loop.py",
}


def megatron_path(cli_value: str | None, preset_value: str | None) -> Path:
    """--megatron-path, then the preset's launcher.megatron_path, then $MEGATRON_LM_PATH, then the submodule."""
    for value in (cli_value, preset_value, os.environ.get(ENV_VAR)):
        if value:
            return Path(value).expanduser().absolute()
    return SUBMODULE


def require_checkout(path: Path, entry: str) -> Path:
    script = path / ENTRY_SCRIPTS[entry]
    if not script.is_file():
        raise UserError(
            f"no Megatron-LM checkout at {path} ({ENTRY_SCRIPTS[entry]} is missing)",
            "run scripts/fetch-megatron.sh, or point the launcher at a checkout of 432d76b2b8bf with "
            f"--megatron-path DIR or {ENV_VAR}=DIR",
        )
    return script


@dataclass(frozen=True)
class Kernels:
    """Which optional fused-kernel packages the training processes will find."""

    transformer_engine: bool
    apex: bool
    how: str  # "preset" (declared), "detected" (here), "login node" (bare-metal Slurm), "NGC image"
    # None: not known. A declared TE (and an NGC image's) is the NGC container's, launcher.megatron.target.
    te_version: str | None = None


def has_module(name: str) -> bool:
    """Importable, judged without importing it (find_spec)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def detect_kernels() -> tuple[bool, bool]:
    """TE and a *full* NVIDIA apex (its CUDA extensions), found without importing them or torch.

    The unrelated PyPI package also named `apex` has no fused_weight_gradient_mlp_cuda, so it counts as absent.
    """
    te = has_module("transformer_engine")
    apex = has_module("apex") and has_module("fused_weight_gradient_mlp_cuda") and has_module(
        "scaled_masked_softmax_cuda")
    return te, apex

